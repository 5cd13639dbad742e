"""Recipe side of the PHS data (A12, A13): the similarity partition's ``size_spread`` and the
budget distributions validate naming the field, and reach the library unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from fedgame.core.seeding import Streams
from fedgame.data import clear_cache, similarity
from fedgame.pipeline.config import PrivacyBudgetCfg, RecipeError, apply_overrides, format_errors, parse_recipe
from fedgame.privacy.budgets import draw_budgets
from tests.data._formats import mnist_arrays, write_mnist_dir


def test_similarity_defaults_to_the_phs_size_spread() -> None:
    cfg = parse_recipe(apply_overrides({}, ["data.partition={kind: similarity, s: 70}"]))
    assert cfg.data.partition.size_spread == (0.5, 1.5)  # type: ignore[union-attr]
    cfg = parse_recipe(apply_overrides({}, ["data.partition={kind: similarity, size_spread: null}"]))
    assert cfg.data.partition.size_spread is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1.5, 0.5]", "data.partition.size_spread: must be [a, b] with 0 < a < b (both finite), got [1.5, 0.5]"),
        ("[1, 1]", "data.partition.size_spread: must be [a, b] with 0 < a < b (both finite), got [1, 1]"),
        ("[0, 1]", "data.partition.size_spread: must be [a, b] with 0 < a < b (both finite), got [0, 1]"),
        ("[-1, 1]", "data.partition.size_spread: must be [a, b] with 0 < a < b (both finite), got [-1, 1]"),
        ("[0.5, .inf]", "data.partition.size_spread: must be [a, b] with 0 < a < b (both finite), got [0.5, inf]"),
        ("[0.5]", "data.partition.size_spread.1: Field required"),
    ],
)
def test_bad_size_spread_is_named(value: str, message: str) -> None:
    with pytest.raises(RecipeError) as e:
        parse_recipe(apply_overrides({}, ["data.partition.kind=similarity", f"data.partition.size_spread={value}"]))
    assert message in str(e.value)


def test_build_data_passes_size_spread_through(tmp_path: Path) -> None:
    """build_data partitions with the run's partition stream and the recipe's size_spread."""
    from fedgame.pipeline.build import build_data  # heavy (torch, every plug-in): import here

    root = write_mnist_dir(tmp_path / "mnist", mnist_arrays(np.random.default_rng(0), n_train=400, n_test=10))
    clear_cache()
    try:
        for spread, expect in (("[0.5, 1.5]", (0.5, 1.5)), ("[0.9, 1.1]", (0.9, 1.1)), ("null", None)):
            cfg = parse_recipe(
                apply_overrides(
                    {"seed": 3, "data": {"dataset": "mnist", "root": str(root)}},
                    [
                        "data.partition={kind: similarity, n_clients: 8, s: 30}",
                        f"data.partition.size_spread={spread}",
                        "train.clients_per_round=4",
                    ],
                )
            )
            data = build_data(cfg, Streams(seed=3))
            ref = similarity(data.train.y, 8, 30, Streams(seed=3).numpy("partition"), size_spread=expect)
            assert all(np.array_equal(a, b) for a, b in zip(data.parts, ref, strict=True))
            sizes = [p.size for p in data.parts]
            assert sum(sizes) == 400 and (max(sizes) - min(sizes) <= 1) == (expect is None)
    finally:
        clear_cache()


class _Holder(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    budgets: PrivacyBudgetCfg


CASE1 = {"kind": "mixture", "components": [{"weight": 0.3, "mean": 0.5, "var": 0.04}, {"weight": 0.7, "mean": 10, "var": 1}]}


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "uniform", "low": 0, "high": 1},
        CASE1,
        {"kind": "constant", "value": "inf"},
        {"kind": "list", "values": [0.5, "inf", 3]},
    ],
    ids=["uniform", "mixture", "constant", "list"],
)
def test_budget_cfg_reaches_draw_budgets_unchanged(spec: dict[str, Any]) -> None:
    cfg = _Holder.model_validate({"budgets": spec}).budgets
    for dumped in (cfg.model_dump(), cfg.model_dump(mode="json")):
        a = draw_budgets(dumped, 3, np.random.default_rng(1))
        np.testing.assert_array_equal(a, draw_budgets(spec, 3, np.random.default_rng(1)))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "uniform", "low": -1, "high": 1}, "budgets.low: Input should be greater than or equal to 0, got -1"),
        ({"kind": "uniform", "low": 1, "high": 0.5}, "budgets: high: must be > low (1), got 0.5"),
        ({"kind": "uniform", "low": 0, "high": float("inf")}, "budgets.high: Input should be a finite number, got inf"),
        (
            {"kind": "mixture", "components": [{"weight": 0.3, "mean": 0.5, "var": -0.04}, {"weight": 0.7, "mean": 10, "var": 1}]},
            "budgets.components.0.var: Input should be greater than or equal to 0, got -0.04",
        ),
        (
            {"kind": "mixture", "components": [{"weight": 0.3, "mean": 0.5, "var": 0.04}, {"weight": 0.6, "mean": 10, "var": 1}]},
            "budgets.components: weights must sum to 1 (to 1e-9); they sum to 0.9",
        ),
        (
            {"kind": "mixture", "components": [{"weight": 1, "mean": 0, "var": 1}]},
            "budgets.components.0.mean: Input should be greater than 0, got 0",
        ),
        (
            {"kind": "mixture", "components": [{"weight": 1, "mean": 1, "std": 1}]},
            "budgets.components.0.std: Extra inputs are not permitted",
        ),
        ({"kind": "mixture", "components": []}, "budgets.components: Tuple should have at least 1 item"),
        ({"kind": "constant", "value": 0}, "budgets.value: Input should be greater than 0, got 0"),
        ({"kind": "list", "values": [1, 0]}, "budgets.values.1: Input should be greater than 0, got 0"),
        ({"kind": "gamma"}, "budgets.kind: unknown kind 'gamma'; choose from 'uniform', 'mixture', 'constant', 'list'"),
    ],
)
def test_bad_budget_cfg_is_named(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as e:
        _Holder.model_validate({"budgets": spec})
    assert message in format_errors(e.value)
