"""A privacy setting that cannot be honoured is refused, never silently dropped: a privacy kind
without a builder must not train noise-free (the fail-open case of a config with no branch)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import yaml
from pydantic import BaseModel

from fedgame.pipeline.build import build_privacy
from fedgame.pipeline.config import apply_overrides, parse_recipe
from fedgame.privacy.plans import NoPrivacy

ROOT = Path(__file__).resolve().parents[2]


class LaplaceUploadCfg(BaseModel):
    """A privacy plug-in's config that no builder knows."""

    kind: Literal["laplace_upload"] = "laplace_upload"
    scale: float = 1.0


def _cfg(privacy: object | None = None) -> object:
    raw = yaml.safe_load((ROOT / "recipes" / "main" / "fedavg.yaml").read_text())
    cfg = parse_recipe(apply_overrides(raw, []))
    return cfg if privacy is None else cfg.model_copy(update={"privacy": privacy})


class _Data:
    sizes = np.array([10, 20, 30])


def test_an_unknown_privacy_kind_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match=r"privacy.kind: 'laplace_upload' has no builder .* refusing to train"):
        build_privacy(_cfg(LaplaceUploadCfg()), _Data())  # type: ignore[arg-type]


def test_no_privacy_is_still_no_privacy() -> None:
    assert isinstance(build_privacy(_cfg(), _Data()), NoPrivacy)  # type: ignore[arg-type]
