"""FedPCS baselines outside the game and the R4 ablations (spec fedpcs.md §7 R3-R4), through
the library's build path on real Fashion-MNIST in smoke settings (10 clients, 3 rounds,
logistic regression): where the baselines' ρ_i^t come from, what they are paid, the
aggregation weights of the ablations and the ``max_agg_weight`` column of the round log."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from fedgame.pipeline.build import build_engine, fedpcs_game
from fedgame.pipeline.config import RecipeError, load_recipe, parse_recipe
from fedgame.incentives import solve_plan

if TYPE_CHECKING:
    from fedgame.core.types import Selection

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


# -- R4 ablations: the aggregation weights and the max_agg_weight column ------------------------
def _aggregate(kind: str, sel: "Selection", g: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """The library's aggregator ``kind`` on the slots of ``sel`` (client i uploads g[i])."""
    from fedgame.core.server_update import RoundContext
    from fedgame.sim import AGGREGATORS

    ctx = RoundContext(t=0, selection=sel, theta=theta, params=torch.zeros(g.shape[1], dtype=torch.float64), rng=np.random.default_rng(0))
    out, _ = AGGREGATORS.get(kind)().update([torch.as_tensor(g[i]) for i in sel.indices], (), ctx)
    return out[0].numpy(), ctx.metrics


def _all_draws(x: np.ndarray, k: int) -> list[tuple["Selection", float]]:
    """Every ordered multiset of ``k`` draws with replacement from ``x``, with its probability."""
    from fedgame.core.types import Selection

    out = []
    for idx in itertools.product(range(x.size), repeat=k):
        i = np.array(idx)
        out.append((Selection(indices=i, probs=x[i], k=k, scheme="draws"), float(np.prod(x[i]))))
    return out


TINY_RHO = np.array([0.05, 1.0, 3.0, 9.0])  # N = 4 clients, one rarely drawn under x ∝ ρ
TINY_THETA = np.array([0.1, 0.2, 0.3, 0.4])
TINY_G = np.random.default_rng(3).normal(size=(4, 3))


@pytest.mark.parametrize("x", [TINY_RHO / TINY_RHO.sum(), np.full(4, 0.25)], ids=["x_prop_rho", "uniform"])
def test_eq4_weights_are_unbiased_by_exact_enumeration(x: np.ndarray) -> None:
    """E[Σ_j w_j g_{i_j}] = Σ_i θ_i g_i over all K = 3 draws (FedPCS Eq. 4, spec §3.4)."""
    mean = sum(p * _aggregate("importance", sel, TINY_G, TINY_THETA)[0] for sel, p in _all_draws(x, 3))
    np.testing.assert_allclose(mean, TINY_THETA @ TINY_G, rtol=1e-12, atol=1e-14)


def test_uniform_draws_reduce_eq4_to_n_over_k_theta() -> None:
    """R4 (i): with x = 1/N the weight of a client drawn m times is m (N/K) θ_i (spec §3.4)."""
    from fedgame.core.types import Selection

    sel = Selection(indices=np.array([2, 0, 2]), probs=np.full(3, 0.25), k=3, scheme="draws")
    out, metrics = _aggregate("importance", sel, np.eye(4), TINY_THETA)
    np.testing.assert_allclose(out, [4 / 3 * 0.1, 0, 2 * 4 / 3 * 0.3, 0], rtol=1e-12)
    assert metrics["max_agg_weight"] == pytest.approx(2 * 4 / 3 * 0.3, rel=1e-12)


def test_fedavg_weights_sum_to_one_on_every_draw_and_are_biased_under_x_prop_rho() -> None:
    """R4 (ii): θ_i/Σ_S θ sums to 1 over the selected slots, whatever was drawn; under x ∝ ρ
    its mean leans to the high-ρ clients, unlike Eq. 4 (previous test)."""
    x = TINY_RHO / TINY_RHO.sum()
    draws = _all_draws(x, 3)
    for sel, _ in draws:
        total, metrics = _aggregate("fedavg", sel, np.ones((4, 1)), TINY_THETA)
        assert total[0] == pytest.approx(1.0, rel=1e-12)
        assert 0 < metrics["max_agg_weight"] <= 1.0
    mean = sum(p * _aggregate("fedavg", sel, TINY_G, TINY_THETA)[0] for sel, p in draws)
    assert not np.allclose(mean, TINY_THETA @ TINY_G, rtol=1e-3)


def test_max_agg_weight_is_the_largest_upload_weight_eq4_blows_up_for_rare_clients() -> None:
    """The largest weight any upload got: a client drawn twice counts its two slots; the rarely
    drawn low-ρ client gets θ_0/(K x_0) = 0.1 Σρ/(3·0.05) under Eq. 4, ≤ 1 under FedAvg."""
    from fedgame.core.types import Selection

    x = TINY_RHO / TINY_RHO.sum()
    sel = Selection(indices=np.array([3, 0, 3]), probs=x[[3, 0, 3]], k=3, scheme="draws")
    _, eq4 = _aggregate("importance", sel, TINY_G, TINY_THETA)
    w0, w3 = 0.1 / (3 * x[0]), 2 * 0.4 / (3 * x[3])
    assert eq4["max_agg_weight"] == pytest.approx(max(w0, w3), rel=1e-12) and w0 == pytest.approx(8.7)
    _, avg = _aggregate("fedavg", sel, TINY_G, TINY_THETA)
    assert avg["max_agg_weight"] == pytest.approx(0.8 / 0.9, rel=1e-12)


def _smoke() -> list[str]:
    """Overrides that shrink a FedPCS recipe to a smoke run (10 clients, 3 rounds, logreg)."""
    return [
        "data.max_train=1500",
        "data.max_test=300",
        "data.partition.n_clients=10",
        "model.name=logreg",
        "train.rounds=3",
        "train.clients_per_round=4",
        "train.eval_every=3",
        "train.local.epochs=null",
        "train.local.steps=2",
        "incentive.n_starts=2",
    ]


@needs_fmnist
@pytest.mark.parametrize("recipe", ["ablation_uniform", "ablation_fedavg_weights", "fmnist"])
def test_ablation_recipes_log_max_agg_weight_in_metrics_csv(recipe: str, tmp_path: Path) -> None:
    """Each round's ``max_agg_weight`` in metrics.csv is the largest weight of an upload: Eq. 4
    m_i θ_i/(K x_i^t) (x = 1/N for the uniform ablation, ρ^t/Σρ^t for FedPCS), or FedAvg's
    m_i θ_i / Σ_slots θ."""
    from fedgame.data import load_partition
    from fedgame.pipeline.runner import run_one
    from fedgame.pipeline.store import read_metrics
    from fedgame.incentives import FedPCSPlan

    cfg = load_recipe(RECIPES / f"{recipe}.yaml", _smoke())
    run_one(cfg, tmp_path / "run", resume=True)
    rows = read_metrics(tmp_path / "run" / "metrics.csv")
    plan = FedPCSPlan.load(tmp_path / "run" / "game.npz")
    assert plan.reward.max() >= 0 and "baseline_rho" not in plan.extras  # the game itself, paid
    sizes = np.array([part.size for part in load_partition(tmp_path / "run" / "partition.npz")], dtype=np.float64)
    theta = sizes / sizes.sum()
    for t, r in enumerate(rows):
        idx = np.array(json.loads(r["selected"]))
        clients, m = np.unique(idx, return_counts=True)
        if recipe == "ablation_fedavg_weights":
            w = m * theta[clients] / theta[idx].sum()
        else:
            x = np.full(10, 0.1) if recipe == "ablation_uniform" else plan.rho[:, t] / plan.rho[:, t].sum()
            w = m * theta[clients] / (4 * x[clients])
        assert r["max_agg_weight"] == pytest.approx(w.max(), rel=1e-9)
