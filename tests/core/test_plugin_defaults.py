"""Every built-in plug-in's recipe defaults (its ``Config``) agree with its constructor's: the same
strategy, built from Python or from a recipe that leaves a field out, behaves the same (the
uniform strategy's ``replace`` used to be False in a recipe and True from Python)."""

from __future__ import annotations

import inspect

import pytest
from pydantic_core import PydanticUndefined

from fedgame.incentives import INCENTIVES
from fedgame.privacy.plans import PRIVACY_PLANS
from fedgame.selection import SELECTIONS

PLUGINS = [(reg, name) for reg in (SELECTIONS, PRIVACY_PLANS, INCENTIVES) for name in reg.names()]


@pytest.mark.parametrize(("registry", "name"), PLUGINS, ids=[f"{r.kind}:{n}" for r, n in PLUGINS])
def test_config_defaults_agree_with_the_constructor(registry: object, name: str) -> None:
    cls = registry.get(name)  # type: ignore[attr-defined]
    cfg = getattr(cls, "Config", None)
    if cfg is None or not inspect.isclass(cls):
        pytest.skip("no recipe model")
    params = inspect.signature(cls.__init__).parameters
    for field, info in cfg.model_fields.items():
        if field == "kind" or field not in params:
            continue
        default = params[field].default
        if default is inspect.Parameter.empty or info.default is PydanticUndefined:
            continue
        assert default == info.default, f"{name}.{field}: Config default {info.default!r}, __init__ default {default!r}"
