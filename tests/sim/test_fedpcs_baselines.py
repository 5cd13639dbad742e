"""FedPCS baselines outside the game and the R4 ablations (spec fedpcs.md §7 R3-R4), through
the library's build path on real Fashion-MNIST in smoke settings (10 clients, 3 rounds,
logistic regression): where the baselines' ρ_i^t come from, what they are paid, the
aggregation weights of the ablations and the ``max_agg_weight`` column of the round log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedgame.experiments.build import build_engine, fedpcs_game
from fedgame.experiments.config import RecipeError, load_recipe, parse_recipe
from fedgame.incentives import solve_plan

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "fedpcs"


@pytest.fixture(autouse=True)
def _game_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))


def baseline(selection: dict[str, object] | None = None, **incentive: object) -> dict[str, object]:
    """A smoke-sized FedPCS-family recipe with a baseline selection (default: Random)."""
    return {
        "name": "baseline-smoke",
        "seed": 0,
        "data": {"dataset": "fashion_mnist", "max_train": 1500, "max_test": 300, "partition": {"kind": "iid", "n_clients": 10}},
        "model": {"name": "logreg"},
        "train": {"rounds": 3, "clients_per_round": 4, "local": {"epochs": None, "steps": 2, "batch_size": 32, "lr": 0.1}},
        "selection": selection or {"kind": "uniform", "replace": True},
        "aggregation": {"kind": "importance"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "fedpcs", "n_starts": 2, "inclusion": "uniform", **incentive},
    }


def _spent(records: list[dict[str, object]], rho: np.ndarray) -> np.ndarray:
    """Σ over rounds of ρ_i^t for every client that uploaded in round t (once per round)."""
    total = np.zeros(rho.shape[0])
    for t, rec in enumerate(records):
        up = np.unique(json.loads(str(rec["selected"])))
        total[up] += rho[up, t]
    return total


@needs_fmnist
@pytest.mark.parametrize("selection", [{"kind": "uniform", "replace": True}, {"kind": "delta"}, {"kind": "aocs"}])
def test_initial_keeps_every_client_at_rho0_and_pays_nothing(selection: dict[str, object]) -> None:
    cfg = parse_recipe(baseline(selection))
    assert cfg.incentive.baseline_rho == "initial"  # type: ignore[union-attr]  # the R3 default
    built = build_engine(cfg)
    plan, eng = built.plan, built.engine
    assert plan is not None and plan.extras["baseline_rho"] == "initial"
    res = eng.run(3)
    for t in range(3):
        np.testing.assert_array_equal([eng.privacy.rho_of(i, t) for i in range(10)], plan.rho0)  # type: ignore[attr-defined]
    assert all(r["payments"] == 0.0 and r["reward"] == 0.0 for r in res.records)
    np.testing.assert_allclose(eng.accountant.rhos(), _spent(res.records, plan.rho), rtol=1e-12)  # type: ignore[attr-defined]
    # ρ⁰ is the game's own seeded draw: the baseline's clients are FedPCS's clients before any incentive
    np.testing.assert_array_equal(plan.rho0, solve_plan(fedpcs_game(cfg)).rho0)  # type: ignore[arg-type]


@needs_fmnist
def test_low_puts_every_client_at_rho_min_unpaid() -> None:
    built = build_engine(parse_recipe(baseline(baseline_rho="low", rho_min=0.05)))
    eng = built.engine
    res = eng.run(2)
    for t in range(2):
        assert {eng.privacy.rho_of(i, t) for i in range(10)} == {0.05}  # type: ignore[attr-defined]
    assert all(r["payments"] == 0.0 for r in res.records)


@needs_fmnist
def test_game_is_a15_the_solved_game_with_payments() -> None:
    cfg = parse_recipe(baseline(baseline_rho="game"))
    built = build_engine(cfg)
    solved = solve_plan(fedpcs_game(cfg))  # type: ignore[arg-type]
    plan = built.plan
    assert plan is not None and plan.inclusion == "uniform"
    np.testing.assert_array_equal(plan.rho, solved.rho)
    np.testing.assert_array_equal(plan.reward, solved.reward)
    res = built.engine.run(3)
    for t, rec in enumerate(res.records):
        up = np.unique(json.loads(rec["selected"]))
        assert built.engine.privacy.rho_of(int(up[0]), t) == solved.rho[up[0], t]  # type: ignore[attr-defined]
        assert rec["payments"] == pytest.approx(solved.reward[t] * solved.rho[up, t].sum(), rel=1e-12)


@needs_fmnist
def test_fedpcs_itself_always_plays_the_game() -> None:
    """``baseline_rho`` is a baseline's setting: privacy-aware selection uses the game's ρ_i^t."""
    cfg = parse_recipe(baseline({"kind": "privacy_aware"}, inclusion="privacy", baseline_rho="initial"))
    built = build_engine(cfg)
    np.testing.assert_array_equal(built.plan.rho, solve_plan(fedpcs_game(cfg)).rho)  # type: ignore[union-attr, arg-type]


@pytest.mark.parametrize("value", ["inital", "none", 1])
def test_bad_baseline_rho_is_one_line_naming_the_field_and_values(value: object) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(baseline(baseline_rho=value))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("incentive.baseline_rho:")
    assert all(v in msg for v in ("'initial'", "'low'", "'game'"))


def test_a_budget_needs_the_game() -> None:
    with pytest.raises(RecipeError, match=r"^incentive\.baseline_rho: .*'initial', 'low', 'game'.*got 'initial'$"):
        parse_recipe(baseline(budget={"start": 60, "end": 20}))
    parse_recipe(baseline(budget={"start": 60, "end": 20}, baseline_rho="game"))


@pytest.mark.parametrize("name", ["random", "aocs", "fedcbs", "delta"])
def test_table2_baseline_recipes_default_to_initial(name: str) -> None:
    assert load_recipe(RECIPES / f"{name}.yaml").incentive.baseline_rho == "initial"  # type: ignore[union-attr]
