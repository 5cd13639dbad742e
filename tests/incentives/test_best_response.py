"""Client best response (spec §3.6): acceptance checks 2-4, against finite-difference
L-BFGS-B from many starts, the A5 regression instance and the sweep's cycling."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.fedpcs import (
    best_response,
    client_utility,
    client_utility_gradient,
    kkt_residual,
    stationary_alpha,
)
from tests.incentives._helpers import fd_lbfgsb, random_instance

A5_PHI = np.full(21, 5.0)
A5_ALPHA = [0.2363, 0.2464, 0.0699, 0.0048]


@pytest.mark.parametrize(("seed", "N", "K"), [(0, 10, 3), (1, 10, 3), (2, 50, 20)])
def test_best_response_beats_finite_difference_lbfgsb_from_20_starts(seed: int, N: int, K: int) -> None:
    """Acceptance 2: U ≥ best FD-L-BFGS-B (20 random starts) − 1e-6 relative; α agree to
    1e-4 where the optimum is unique; KKT residual ≤ 1e-7."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n=1, N=N, K=K, T=6)
    br = best_response(inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    assert br.converged and np.all(br.kkt_residual <= 1e-7)
    starts = rng.uniform(size=(20, inst.T))
    for i in range(1):
        runs = [fd_lbfgsb(inst, i, s) for s in starts]
        U_fd = np.array([u for _, u in runs])
        best = float(U_fd.max())
        assert br.utility[i] >= best - 1e-6 * abs(best)
        winners = np.array([x for x, u in runs if u >= best - 1e-8 * (1 + abs(best))])
        if np.ptp(winners, axis=0).max() < 1e-4:  # the optimum is unique
            np.testing.assert_allclose(br.alpha[i, :-1], winners[0], atol=1e-4)


def test_a5_regression_instance() -> None:
    """Acceptance 3: ρ^0 = 2, φ ≡ 5, R ≡ 2, ϕ = 0.3, N = 10, K = 3, T = 20."""
    br = best_response(2.0, 0.3, A5_PHI, 2.0, 10, 3)
    assert br.utility == pytest.approx(13.925483, abs=1e-6)
    np.testing.assert_allclose(br.alpha[:4], A5_ALPHA, atol=5e-5)
    np.testing.assert_allclose(br.alpha[4:], 0.0, atol=1e-4)  # "0, …" to 4 decimals
    assert br.kkt_residual <= 1e-7 and br.converged
    assert br.alpha.shape == (21,) and br.rho.shape == (21,)


@pytest.mark.parametrize(("N", "K", "U_star", "U_sweep"), [(1, 1, 13.771443, 12.920000), (10, 10, 9.327730, 8.624063)])
def test_a5_companion_instances(N: int, K: int, U_star: float, U_sweep: float) -> None:
    """Spec A5: same client, T = 5: direct optimum vs last iterate of the undamped sweep —
    N = K = 1: 13.771443 vs 12.920000; N = K = 10: 9.327730 vs 8.624063."""
    args = (2.0, 0.3, np.full(6, 5.0), 2.0, N, K)
    br = best_response(*args)
    assert br.utility == pytest.approx(U_star, abs=1e-6)
    a = np.zeros(5)
    for _ in range(5000):
        a = stationary_alpha(a, *args)
    assert client_utility(a, *args) == pytest.approx(U_sweep, abs=1e-6)


def test_a5_undamped_sweep_cycles_and_damped_sweep_converges() -> None:
    """Spec A5: iterating Eq. (21) from α ≡ 0 cycles (last-iterate U = 13.683039 after 5000
    sweeps); with damping 0.05 it converges to the optimum in 668 sweeps."""
    args = (2.0, 0.3, A5_PHI, 2.0, 10, 3)
    a = np.zeros(20)
    steps = []
    for _ in range(5000):
        new = stationary_alpha(a, *args)
        steps.append(np.abs(new - a).max())
        a = new
    assert max(steps[-100:]) == pytest.approx(1.0)
    assert client_utility(a, *args) == pytest.approx(13.683039, abs=1e-6)
    a = np.zeros(20)
    for n in range(5000):  # sweeps before the fixed-point gap max|Eq.21(α) − α| ≤ 1e-12
        target = stationary_alpha(a, *args)
        if np.abs(target - a).max() <= 1e-12:
            break
        a = 0.95 * a + 0.05 * target
    assert n in (668, 669)
    assert client_utility(a, *args) == pytest.approx(13.925483, abs=1e-6)


def test_alpha_terminal_zero_and_rho_stays_between_start_and_mean_field() -> None:
    """Acceptance 4: α^T = 0; ρ_i^t ∈ [min(ρ_i^0, min φ), max(ρ_i^0, max φ)]."""
    rng = np.random.default_rng(7)
    inst = random_instance(rng, n=6, N=20, K=5, T=8)
    br = best_response(inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    assert np.all(br.alpha[:, -1] == 0.0)
    assert np.all((br.alpha >= 0) & (br.alpha <= 1))
    lo = np.minimum(inst.rho0, inst.phi.min())[:, None]
    hi = np.maximum(inst.rho0, inst.phi.max())[:, None]
    assert np.all(br.rho >= lo - 1e-12) and np.all(br.rho <= hi + 1e-12)
    # the reported quantities are those of the returned α
    np.testing.assert_allclose(br.utility, client_utility(br.alpha, inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K), rtol=1e-13)
    grad = client_utility_gradient(br.alpha[:, :-1], inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    np.testing.assert_allclose(br.kkt_residual, kkt_residual(br.alpha[:, :-1], grad), atol=1e-15)


@pytest.mark.filterwarnings("ignore:best_response. KKT residual")
def test_joint_lbfgsb_per_client_lbfgsb_and_newton_agree() -> None:
    """One L-BFGS-B over the summed block-separable objective = per-client solves (= the
    Newton engine). L-BFGS-B itself may stop a little above KKT 1e-7 (it warns)."""
    rng = np.random.default_rng(12)
    inst = random_instance(rng, n=3, N=10, K=3, T=4)
    args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    kw: dict = {}
    joint = best_response(*args, solver="lbfgsb", chunk_size=5, **kw)
    single = best_response(*args, solver="lbfgsb", chunk_size=1, **kw)
    newton = best_response(*args, **kw)
    for other in (single, newton):
        np.testing.assert_allclose(joint.utility, other.utility, rtol=1e-9)
        np.testing.assert_allclose(joint.alpha, other.alpha, atol=1e-4)
    assert newton.converged and np.all(newton.kkt_residual <= 1e-9)


def test_vectorised_equals_one_client_at_a_time_and_duplicates_solved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedgame.incentives.fedpcs._best_response as brm

    seen: list[int] = []
    real = brm.solve_types

    def spy(rho0: np.ndarray, *args: object, **kwargs: object) -> object:
        seen.append(rho0.size)
        return real(rho0, *args, **kwargs)

    monkeypatch.setattr(brm, "solve_types", spy)
    rng = np.random.default_rng(13)
    inst = random_instance(rng, n=4, N=12, K=4, T=7)
    rho0 = np.r_[inst.rho0, inst.rho0[1], inst.rho0[1]]
    varphi = np.r_[inst.varphi, inst.varphi[1], inst.varphi[1]]
    together = best_response(rho0, varphi, inst.phi, inst.R, inst.N, inst.K)
    assert seen == [4]  # 6 clients, 4 distinct (ρ^0, ϕ) types
    for i in range(rho0.size):
        alone = best_response(rho0[i], varphi[i], inst.phi, inst.R, inst.N, inst.K)
        assert alone.utility == pytest.approx(together.utility[i], rel=1e-12)
        np.testing.assert_allclose(alone.alpha, together.alpha[i], atol=1e-9)
    np.testing.assert_array_equal(together.alpha[4], together.alpha[1])
    np.testing.assert_array_equal(together.alpha[5], together.alpha[1])


def test_warm_start_and_seeded_starts_are_reproducible() -> None:
    inst = random_instance(np.random.default_rng(14), n=3, N=10, K=3, T=6)
    args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    a = best_response(*args, rng=np.random.default_rng(5))
    b = best_response(*args, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a.alpha, b.alpha)
    warm = best_response(*args, alpha_init=a.alpha, n_starts=0, sweep_restarts=0)
    np.testing.assert_allclose(warm.utility, a.utility, rtol=1e-12)
    with pytest.raises(ValueError, match="read-only"):
        a.alpha[0, 0] = 1.0


def test_newton_step_equals_the_dense_hessian_solve() -> None:
    """The O(T) Riccati step of the Newton engine is the exact Newton step: where −H is
    positive definite on the free set it equals −H_FF⁻¹ g_F (dense Hessian, Eq.-level)."""
    from fedgame.incentives.fedpcs._dynamics import Workspace, client_utility_hessian, evaluate
    from fedgame.incentives.fedpcs._solvers import _newton_direction

    rng = np.random.default_rng(2)
    checked = 0
    while checked < 30:
        inst = random_instance(rng, n=1, N=10, K=3, T=5)
        a = rng.uniform(size=(1, 5))
        args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
        H = client_utility_hessian(a, *args)[0]
        free = rng.uniform(size=5) < 0.7
        if not free.any() or np.linalg.eigvalsh(-H[np.ix_(free, free)]).min() <= 1e-6:
            continue
        checked += 1
        ev = evaluate(np.ascontiguousarray(a.T), inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K, second=True)
        d = _newton_direction(np.ascontiguousarray(a.T), ev, inst.phi, inst.varphi, -ev.grad, free[:, None], Workspace())
        g = client_utility_gradient(a, *args)[0]
        want = np.linalg.solve(-H[np.ix_(free, free)], g[free])
        np.testing.assert_allclose(d[free, 0], want, rtol=1e-8, atol=1e-12)


def test_batched_best_response_matches_scipy_for_several_clients() -> None:
    """Several heterogeneous clients solved in one batch: each client's U is at least the best
    of SciPy L-BFGS-B on its own objective (finite differences, 10 random starts) − 1e-6
    relative, and α agrees to 1e-4 where SciPy's optimum is unique."""
    rng = np.random.default_rng(21)
    inst = random_instance(rng, n=5, N=20, K=5, T=6)
    br = best_response(inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    assert br.converged
    starts = rng.uniform(size=(10, inst.T))
    for i in range(inst.rho0.size):
        runs = [fd_lbfgsb(inst, i, s) for s in starts]
        best = max(u for _, u in runs)
        assert br.utility[i] >= best - 1e-6 * abs(best)
        winners = np.array([x for x, u in runs if u >= best - 1e-8 * (1 + abs(best))])
        if np.ptp(winners, axis=0).max() < 1e-4:
            np.testing.assert_allclose(br.alpha[i, :-1], winners[0], atol=1e-4)


@pytest.mark.parametrize("engine", ["reference", "streamed"])
def test_both_newton_steps_equal_the_dense_hessian_solve(engine: str) -> None:
    """``_solvers._newton_direction`` and the streamed ``_riccati_step`` give the exact Newton
    step −H_FF⁻¹ g_F wherever −H is positive definite on the free set."""
    from fedgame.incentives.fedpcs._best_response import _riccati_step
    from fedgame.incentives.fedpcs._dynamics import Workspace, client_utility_hessian, evaluate
    from fedgame.incentives.fedpcs._solvers import _newton_direction

    rng = np.random.default_rng(4)
    checked = 0
    while checked < 20:
        inst = random_instance(rng, n=1, N=10, K=3, T=5)
        a = rng.uniform(size=(1, 5))
        args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
        H = client_utility_hessian(a, *args)[0]
        free = rng.uniform(size=5) < 0.7
        if not free.any() or np.linalg.eigvalsh(-H[np.ix_(free, free)]).min() <= 1e-6:
            continue
        checked += 1
        at = np.ascontiguousarray(a.T)
        ev = evaluate(at, inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K, second=True)
        if engine == "streamed":
            d = _riccati_step(at, ev, inst.phi, inst.varphi, -ev.grad, ~free[:, None], Workspace())
        else:
            d = _newton_direction(at, ev, inst.phi, inst.varphi, -ev.grad, free[:, None], Workspace())
        g = client_utility_gradient(a, *args)[0]
        want = np.linalg.solve(-H[np.ix_(free, free)], g[free])
        np.testing.assert_allclose(d[free, 0], want, rtol=1e-8, atol=1e-12)
