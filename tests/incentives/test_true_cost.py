"""The server's problem on the true cost (spec §7 R2): the rewards :func:`stackelberg` returns
are checked by brute force through the library's own cost function (:func:`equilibrium_cost`:
the clients' mean field under the whole schedule, priced by Eq. 13) — no constant reward on a
fine grid and no one-round perturbation is cheaper — and compared with the paper's Lemma-2
outer loop, which stays available."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fedgame.incentives.fedpcs import FedPCSGame, solve_plan
from fedgame.incentives.fedpcs import (
    EquilibriumCost,
    StackelbergResult,
    accuracy_weights,
    equilibrium_cost,
    server_cost,
    stackelberg,
    stackelberg_true_cost,
)

# A small instance whose clients have a pure-strategy equilibrium at every reward the checks
# visit (with N = 4 one client switching basin moves φ by a quarter of its jump, so many small
# instances lack one somewhere) and whose optimum pays in every round.
N, K, T = 4, 2, 3
GAMMA = 0.5
KAPPA = 1000.0
REL = 1e-6  # the brute-force tolerance of spec §7 R2


@pytest.fixture(scope="module")
def instance() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    rho0 = rng.uniform(0.5, 10.0, N)
    varphi = rng.uniform(0.2, 0.8, N)
    return rho0, varphi, accuracy_weights(T, gamma=GAMMA, acc_scale=KAPPA)


@pytest.fixture(scope="module")
def solved(instance: tuple[np.ndarray, ...]) -> StackelbergResult:
    rho0, varphi, v = instance
    return stackelberg(rho0, varphi, K, T, v=v, gamma=GAMMA, rng=0)


def _cost(instance: tuple[np.ndarray, ...], R: np.ndarray) -> EquilibriumCost:
    rho0, varphi, v = instance
    return equilibrium_cost(R, rho0, varphi, K, T, v=v, gamma=GAMMA, rng=0)


def test_default_is_the_true_cost_solve_and_reports_its_equilibrium(instance: tuple[np.ndarray, ...], solved: StackelbergResult) -> None:
    rho0, varphi, v = instance
    res = solved
    assert res.solver == "true_cost" and res.converged
    R, mf = np.asarray(res.reward), res.mean_field
    assert R.shape == (T + 1,) and R[0] == R[1]  # R_0 := R_1 (A7)
    assert np.all(R[1:] > 0) and np.all(R <= 100.0)  # this instance pays in every round
    np.testing.assert_allclose(res.cost, server_cost(mf.rho, R, N, K, v, gamma=GAMMA, phi=mf.phi), rtol=1e-12)
    assert res.objective == pytest.approx(float(np.sum(res.cost[1:])), rel=1e-12)
    # the library's cost function gives the same value, at a genuine equilibrium
    again = _cost(instance, R)
    assert again.equilibrium and again.objective == pytest.approx(res.objective, rel=1e-12)
    # ρ* within [ρ_L, ρ_H] = [0.01, 12], and between ρ^0 and φ (Eq. 20 is a convex combination)
    assert np.all(mf.rho >= 0.01) and np.all(mf.rho <= 12.0)
    lo = np.minimum(rho0[:, None], mf.phi.min()) - 1e-9
    hi = np.maximum(rho0[:, None], mf.phi.max()) + 1e-9
    assert np.all((mf.rho >= lo) & (mf.rho <= hi))
    assert res.reward_residual <= 1e-7  # the last one-round pass found nothing cheaper


def test_no_constant_reward_on_a_fine_grid_is_cheaper(instance: tuple[np.ndarray, ...], solved: StackelbergResult) -> None:
    best = solved.objective
    for c in np.linspace(0.0, 2.0 * float(np.max(solved.reward)) + 1.0, 61):
        e = _cost(instance, np.full(T + 1, c))
        assert e.equilibrium, c
        assert e.objective >= best - REL * abs(best), (c, e.objective, best)


def test_no_one_round_perturbation_is_cheaper(instance: tuple[np.ndarray, ...], solved: StackelbergResult) -> None:
    best = solved.objective
    for t in range(1, T + 1):
        for h in (0.05, 0.005, 0.0005):
            for sign in (1.0, -1.0):
                R = np.array(solved.reward)
                R[t] = max(0.0, R[t] + sign * h * max(R[t], 0.1))
                R[0] = R[1]
                e = _cost(instance, R)
                assert e.equilibrium
                assert e.objective >= best - REL * abs(best), (t, h, sign, e.objective, best)


def test_true_cost_is_never_above_the_paper_lemma2_loop(instance: tuple[np.ndarray, ...], solved: StackelbergResult) -> None:
    """The paper's outer loop (Lemma 2, Eq. 22) stays available as ``server_solver="lemma2"``;
    priced by the same true cost, its rewards cost at least as much."""
    rho0, varphi, v = instance
    paper = stackelberg(rho0, varphi, K, T, v=v, gamma=GAMMA, rng=0, server_solver="lemma2")
    assert paper.solver == "lemma2"
    theirs = _cost(instance, np.asarray(paper.reward))
    assert theirs.objective >= solved.objective - REL * abs(solved.objective)
    # its reported cost is that of the equilibrium under the rewards it returns
    assert paper.objective == pytest.approx(theirs.objective, rel=1e-9)


def test_a_game_where_paying_does_not_pay_returns_zero_rewards() -> None:
    """κ small: v^t/ρ is tiny next to the payment, every R > 0 costs more (spec §7 R1)."""
    rng = np.random.default_rng(0)
    rho0, varphi = rng.uniform(0.5, 10.0, N), rng.uniform(0.2, 0.8, N)
    v = accuracy_weights(2, gamma=GAMMA, acc_scale=1.0)
    res = stackelberg_true_cost(rho0, varphi, K, 2, v=v, gamma=GAMMA, rng=0, lemma2_start=False)
    assert res.converged and np.all(res.reward == 0.0)
    for c in (1e-3, 1e-2, 0.1):
        assert equilibrium_cost(np.full(3, c), rho0, varphi, K, 2, v=v).objective > res.objective


def test_algorithm3_starts_from_the_true_cost_equilibrium_and_keeps_rho_star_in_range() -> None:
    game = FedPCSGame(n_clients=5, clients_per_round=2, rounds=3, acc_scale=1000.0, budget=(40.0, 20.0), n_starts=2)
    plan = solve_plan(game, cache=False)
    assert plan.extras["server_solver"] == "true_cost"
    rho_star = np.asarray(plan.extras["rho_star"])
    assert np.all(rho_star <= game.rho_max + 1e-12) and np.all(rho_star > 0)
    assert np.all(plan.K * rho_star <= plan.budget + 1e-9)
    assert np.all((plan.rho >= game.rho_min) & (plan.rho <= game.rho_max))


def test_a_cached_plan_is_the_same_plan_and_says_it_came_from_the_cache(tmp_path: Path) -> None:
    """The run summary's ``game_plan_from_cache`` reads this: a plan read back keeps the solve's
    own ``solve_seconds``, which the reading run did not spend."""
    game = FedPCSGame(n_clients=5, clients_per_round=2, rounds=3, acc_scale=1000.0, n_starts=2)
    solved = solve_plan(game, cache=tmp_path)
    again = solve_plan(game, cache=tmp_path)
    assert "from_cache" not in solved.extras and again.extras["from_cache"] is True
    np.testing.assert_array_equal(again.rho, solved.rho)
    np.testing.assert_array_equal(again.reward, solved.reward)
    assert again.solve_seconds == solved.solve_seconds


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"server_solver": "newton"}, "server_solver: must be 'true_cost' or 'lemma2', got 'newton'"),
        ({"R_max": 0.0}, "R_max: must be > 0, got 0"),
        ({"v": np.ones(7)}, "v: expected a number, T+1 = 3 values or an (N, T+1) = (2, 3) array, got shape (7,)"),
        ({"v": -1.0}, "v: every accuracy weight must be finite and > 0, got min -1"),
        ({"rng": -3}, "rng: must be None, an integer >= 0 or a numpy Generator, got -3"),
    ],
)
def test_bad_input_is_refused_naming_the_field(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"v": 1.0, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        stackelberg([1.0, 2.0], [0.5, 0.5], 1, 2, **args)  # type: ignore[arg-type]


def test_equilibrium_cost_refuses_negative_rewards() -> None:
    with pytest.raises(ValueError, match=re.escape("R[2]: must be >= 0, got -1")):
        equilibrium_cost([1.0, 1.0, -1.0], [1.0, 2.0], [0.5, 0.5], 1, 2, v=1.0)
    with pytest.raises(ValueError, match=re.escape("polish_steps: must be a non-empty list of steps > 0")):
        stackelberg_true_cost([1.0, 2.0], [0.5, 0.5], 1, 2, v=1.0, polish_steps=())


@pytest.mark.parametrize("inclusion", ["privacy", "uniform"])
def test_workers_do_not_change_the_answer(inclusion: str) -> None:
    """The search's independent solves priced side by side on 2 threads give the one-at-a-
    time solve's schedule, equilibrium and evaluation count to the last bit, under either
    sampling rule (the rule reaches every solve)."""
    from fedgame.incentives.fedpcs import stackelberg_true_cost

    rng = np.random.default_rng(4)
    N, K, T = 12, 3, 4
    rho0, varphi = rng.uniform(0.5, 12.0, N), rng.uniform(0.05, 0.95, N)
    v = accuracy_weights(T, gamma=GAMMA, acc_scale=KAPPA)
    one = stackelberg_true_cost(rho0, varphi, K, T, v=v, gamma=GAMMA, rng=0, workers=1, inclusion=inclusion)  # type: ignore[arg-type]
    two = stackelberg_true_cost(rho0, varphi, K, T, v=v, gamma=GAMMA, rng=0, workers=2, inclusion=inclusion)  # type: ignore[arg-type]
    np.testing.assert_array_equal(two.reward, one.reward)
    np.testing.assert_array_equal(two.mean_field.rho, one.mean_field.rho)
    assert two.evaluations == one.evaluations and two.converged == one.converged


def test_a_batch_priced_side_by_side_equals_each_priced_alone() -> None:
    """Three schedules priced side by side on two threads that share the cores (the third
    starts when a thread frees, and the last one left widens to the freed core) give each
    value and equilibrium of the schedule priced alone on one thread, bit for bit, from
    scratch and warm-started; the evaluations count each."""
    from fedgame.incentives.fedpcs import _server

    rng = np.random.default_rng(6)
    N, K, T = 12, 3, 4
    r0, vp = rng.uniform(0.5, 12.0, N), rng.uniform(0.05, 0.95, N)
    v = accuracy_weights(T, gamma=GAMMA, acc_scale=KAPPA)

    def pricer(workers: int) -> _server._TrueCost:
        return _server._TrueCost(
            r0=r0, vp=vp, K=K, T=T, vv=v, gamma=GAMMA, mf_tol=1e-7, n_starts=8, seed=0, R_max=100.0, fd_step=1e-4, workers=workers
        )

    xs = [np.full(T, c) for c in (0.5, 2.0, 8.0)]
    alone = pricer(1)
    J = pricer(2)
    try:
        for start in (None, alone._solve(np.full(T, 1.0), None)[1]):
            want = [alone.pricing.price(x, None if start is None else (start.phi, start.alpha), threads=1) for x in xs]
            got = J._solve_many(xs, start)
            for (f, mf), (f0, mf0) in zip(got, want, strict=True):
                assert f == f0 or (np.isinf(f) and np.isinf(f0))
                np.testing.assert_array_equal(mf.phi, mf0.phi)
                np.testing.assert_array_equal(mf.alpha, mf0.alpha)
        assert J.evaluations == 6
    finally:
        J.close()
        alone.close()


def test_workers_out_of_range_is_refused() -> None:
    from fedgame.incentives.fedpcs import stackelberg_true_cost

    with pytest.raises(ValueError, match=r"workers: must be None or an integer in \[1, 256\]"):
        stackelberg_true_cost([1.0, 2.0], [0.5, 0.5], 1, 2, v=1.0, workers=0)
