"""FedPCS's game-level figures (Figs. 4-8) on a tiny solved game: the files, and numbers that
must equal what the plans' own arrays give."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedgame.experiments.fedpcs_figures import client_costs, figure_numbers, rho_correlation, write_fedpcs_figures
from fedgame.incentives.fedpcs import FedPCSGame, FedPCSPlan, baseline_plan, solve_plan


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> tuple[FedPCSPlan, FedPCSPlan]:
    game = FedPCSGame(n_clients=4, clients_per_round=2, rounds=3, acc_scale=1e4, n_starts=2, seed=0)
    plan = solve_plan(game, cache=tmp_path_factory.mktemp("cache"))
    return plan, baseline_plan(replace(game, inclusion="uniform"), "initial")


def test_files_and_numbers_follow_the_plans(plans: tuple[FedPCSPlan, FedPCSPlan], tmp_path: Path) -> None:
    fed, rnd = plans
    budget = (40.0, 20.0)
    out = write_fedpcs_figures({0: (fed, rnd)}, tmp_path, budget=budget, instance="tiny", commit="abc1234")
    for name in (
        "figures.md",
        "figures.json",
        "fig4_rho_correlation.png",
        "fig5_welfare.png",
        "fig6_server_cost.png",
        "fig78_budget_tau.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    on_disk = json.loads((tmp_path / "figures.json").read_text())
    assert on_disk == json.loads(json.dumps(out))
    n = on_disk["seeds"]["0"]

    f5 = n["fig5"]
    assert f5["total_fedpcs"] == pytest.approx(fed.welfare.sum())
    assert f5["total_optimum"] == pytest.approx(fed.welfare_optimum.sum())
    assert f5["total_random"] == pytest.approx(rnd.welfare.sum())
    assert f5["fedpcs_minus_random"] == pytest.approx(fed.welfare.sum() - rnd.welfare.sum())
    f6 = n["fig6"]
    assert f6["total_fedpcs"] == pytest.approx(fed.cost[1:].sum())
    assert f6["total_random"] == pytest.approx(rnd.cost[1:].sum())
    assert f6["cheaper"] == ("FedPCS" if fed.cost[1:].sum() < rnd.cost[1:].sum() else "Random")
    assert f6["clients_fedpcs"]["per_client_sums_to_total"] and f6["clients_random"]["per_client_sums_to_total"]
    parts = f5["parts_fedpcs"]
    assert parts["payments"] - parts["privacy_cost"] == pytest.approx(f5["total_fedpcs"])
    assert f5["parts_random"]["payments"] == 0.0

    f78 = n["fig78"]
    N = fed.rho.shape[0]
    K = np.asarray(f78["K"])
    assert f78["budget"] == pytest.approx(np.linspace(*budget, fed.rho.shape[1]).tolist())
    assert f78["tau"] == pytest.approx((K / N).tolist()) and f78["tau_schedule_matches"]
    expected = K * (fed.rho**2).sum(axis=0) / fed.rho.sum(axis=0)
    assert f78["expected_usage"] == pytest.approx(expected.tolist())
    assert f78["rounds_over_budget"] == [t for t in range(K.size) if expected[t] > f78["budget"][t]]
    assert all(k * r <= b * (1 + 1e-12) for k, r, b in zip(f78["K"], f78["rho_star"], f78["budget"], strict=True))
    rises = [t for t in range(1, K.size) if f78["tau"][t] > f78["tau"][t - 1]]
    assert f78["tau_rises"] == rises and f78["tau_nonincreasing"] == (not rises)

    assert n["fig4"]["random"]["mean_offdiag"] is None
    assert n["fig4"]["random"]["constant_clients"] == list(range(N))
    md = (tmp_path / "figures.md").read_text()
    assert "tiny" in md and "abc1234" in md and "undefined" in md
    assert f"{f5['total_fedpcs']:.6g}" in md and f"{f6['total_random']:.6g}" in md


def test_correlation_leaves_constant_trajectories_out() -> None:
    rho = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.1], [3.0, 2.0, 1.0], [5.0, 5.0, 5.0]])
    corr, s = rho_correlation(rho)
    assert s["constant_clients"] == [3] and s["pairs"] == 3
    assert np.isnan(corr[3]).all() and np.isnan(corr[:, 3]).all()
    c = np.corrcoef(rho[:3])
    assert s["mean_offdiag"] == pytest.approx(c[~np.eye(3, dtype=bool)].mean())
    assert corr[0, 2] == pytest.approx(-1.0)
    _, none = rho_correlation(np.ones((3, 4)))
    assert none["mean_offdiag"] is None and none["pairs"] == 0


def test_client_costs_split_eq13(plans: tuple[FedPCSPlan, FedPCSPlan]) -> None:
    for plan in plans:
        per = client_costs(plan)
        assert per.shape == (plan.rho.shape[0],) and np.all(per > 0)
        assert per.sum() == pytest.approx(plan.cost[1:].sum(), rel=1e-9)


def test_refuses_a_baseline_of_other_clients(plans: tuple[FedPCSPlan, FedPCSPlan]) -> None:
    fed, _ = plans
    other = baseline_plan(FedPCSGame(n_clients=4, clients_per_round=2, rounds=3, acc_scale=1e4, seed=1, inclusion="uniform"), "initial")
    with pytest.raises(ValueError, match="same clients"):
        figure_numbers(fed, other, budget=(40.0, 20.0))
