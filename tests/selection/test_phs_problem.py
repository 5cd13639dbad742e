"""PHS Problem 1 (spec ``phs.md`` §3.5; acceptance checks 7-11 of §6)."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.privacy.analysis.phs import phs_V
from fedgame.selection.phs_problem import (
    P1Solution,
    eta_star,
    kkt_residual,
    p1_cvxpy_problem,
    p1_objective,
    p1_objectives,
    p1_slsqp,
    solve_p1,
)

D = 26010
DELTA = 1e-5


def weights(sizes: object, eps: object, batch: float = 64.0) -> tuple[np.ndarray, np.ndarray]:
    """p^u and w = D V (Eq. 7) with r = min(1, B/|M|) (A9)."""
    m = np.asarray(sizes, dtype=np.float64)
    r = np.minimum(1.0, batch / m)
    return m / m.sum(), D * np.asarray(phs_V(np.asarray(eps, dtype=np.float64), DELTA, r, m))


def instance(seed: int, n_max: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Random instances of four kinds: paper-like (sizes, ε, B), arbitrary (p^u, w), and two
    with many ties (few sizes/budgets; w p^u taking three values)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, n_max))
    kind = seed % 4
    if kind == 0:
        return weights(rng.integers(50, 2000, n), rng.lognormal(0, 1.2, n), float(rng.choice([16, 64, 128, 256])))
    if kind == 1:
        pu = np.maximum(rng.dirichlet(np.full(n, rng.uniform(0.2, 5))), 1e-6)
        return pu / pu.sum(), rng.lognormal(0, 2, n)
    if kind == 2:
        return weights(rng.choice([400, 600], n), rng.choice([0.3, 1.0, 3.0], n))
    pu = np.maximum(rng.dirichlet(np.ones(n)), 1e-4)
    pu /= pu.sum()
    return pu, rng.choice([1.0, 2.0, 5.0], n) / pu


def assert_distribution(sol: P1Solution) -> None:
    assert sol.p.ndim == 1 and abs(sol.p.sum() - 1.0) <= 1e-9
    assert np.all(sol.p > 0)  # Prop. 2


# -- check 9: the golden example of §3.5 ---------------------------------------------------
GOLDEN_SIZES = [500, 600, 700, 550, 650]
GOLDEN_EPS = [0.2, 0.5, 1, 5, 10]


@pytest.mark.parametrize("method", ["structured", "cvxpy", "auto"])
def test_golden_example(method: str) -> None:
    pu, w = weights(GOLDEN_SIZES, GOLDEN_EPS)
    np.testing.assert_allclose(w / D, [1.83256e-2, 5.06985e-3, 2.23849e-3, 4.33395e-4, 1.50679e-4], rtol=5e-6)
    np.testing.assert_allclose(pu, [0.166667, 0.2, 0.233333, 0.183333, 0.216667], atol=5e-7)
    sol = solve_p1(pu, w, 1.0, method=method)  # type: ignore[arg-type]
    assert sol.method == ("cvxpy" if method == "cvxpy" else "structured")
    assert_distribution(sol)
    np.testing.assert_allclose(sol.p, [0.0165421, 0.0597935, 0.135424, 0.203349, 0.584891], atol=1e-5)
    assert sol.objective == pytest.approx(2.796250275, abs=1e-7)
    assert sol.objective == pytest.approx(p1_objective(sol.p, pu, w, 1.0), rel=1e-15)
    assert sol.objective_at_pu == pytest.approx(4.716747992, abs=1e-8)
    assert p1_objective(np.full(5, 0.2), pu, w, 1.0) == pytest.approx(5.323717642, abs=1e-8)
    assert sol.eta_star == pytest.approx(0.0144074, abs=5e-8)
    assert eta_star(pu, w) == sol.eta_star
    # w p* takes two values: τ_hi for clients 1-3 (below p^u), τ_lo for clients 4-5 (above)
    assert np.all(sol.p[:3] < pu[:3]) and np.all(sol.p[3:] > pu[3:])
    assert sol.tau_hi == pytest.approx(7.885, abs=5e-4) and sol.tau_lo == pytest.approx(2.292, abs=5e-4)
    np.testing.assert_allclose(w * sol.p, [sol.tau_hi] * 3 + [sol.tau_lo] * 2, rtol=1e-6)
    assert sol.kkt_residual <= 1e-6 and sol.converged


# -- check 8: a distribution, DCP, three solvers agree, KKT, better than reference points ------
@pytest.mark.parametrize("seed", range(8))
def test_structured_cvxpy_and_slsqp_agree(seed: int) -> None:
    pu, w = instance(seed, n_max=16)  # SLSQP is slow beyond a few dozen variables
    es = eta_star(pu, w)
    for eta in (1.5 * es, 30 * es, 44.72):
        prob, _ = p1_cvxpy_problem(pu, w, eta)
        assert prob.is_dcp()
        a = solve_p1(pu, w, eta)
        b = solve_p1(pu, w, eta, method="cvxpy")
        c = p1_slsqp(pu, w, eta)
        for sol in (a, b):
            assert_distribution(sol)
        assert a.kkt_residual <= 1e-6 and a.converged
        assert b.kkt_residual <= 1e-4  # an interior point: p accurate to about 1e-6
        f_c = p1_objective(c, pu, w, eta)
        assert b.objective == pytest.approx(a.objective, rel=1e-6)
        assert f_c == pytest.approx(a.objective, rel=1e-6)
        np.testing.assert_allclose(b.p, a.p, atol=1e-4)
        np.testing.assert_allclose(c, a.p, atol=1e-4)
        assert a.objective <= min(b.objective, f_c) * (1 + 1e-12)  # the structured one is exact


@pytest.mark.parametrize("n", [300, 2000])
def test_structured_and_cvxpy_agree_on_larger_problems(n: int) -> None:
    rng = np.random.default_rng(n)
    pu, w = weights(rng.integers(300, 901, n), rng.uniform(1e-3, 1, n), batch=128)
    for eta in (1.0, 44.72):
        a, b = solve_p1(pu, w, eta), solve_p1(pu, w, eta, method="cvxpy")
        assert b.objective == pytest.approx(a.objective, rel=1e-6)
        np.testing.assert_allclose(b.p, a.p, atol=1e-4)
        assert a.kkt_residual <= 1e-9 and a.objective <= b.objective * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_optimum_not_above_pu_uniform_and_random_points(seed: int) -> None:
    pu, w = instance(seed) if seed else weights(GOLDEN_SIZES, GOLDEN_EPS)
    n = pu.size
    rng = np.random.default_rng(1000 + seed)
    for eta in (0.5 * eta_star(pu, w), 2 * eta_star(pu, w), 1.0, 1e3):
        sol = solve_p1(pu, w, eta)
        f = sol.objective
        assert f <= sol.objective_at_pu * (1 + 1e-12)
        assert f <= p1_objective(np.full(n, 1.0 / n), pu, w, eta) * (1 + 1e-12)
        points = rng.dirichlet(np.full(n, rng.uniform(0.3, 3)), size=1000)
        assert np.all(p1_objectives(points, pu, w, eta) >= f * (1 - 1e-12))


def test_kkt_residual_is_zero_only_at_the_optimum() -> None:
    pu, w = weights(GOLDEN_SIZES, GOLDEN_EPS)
    sol = solve_p1(pu, w, 1.0)
    assert kkt_residual(sol.p, pu, w, 1.0) <= 1e-15
    q = sol.p.copy()
    q[0] += 1e-5
    q[4] -= 1e-5
    assert 1e-6 <= kkt_residual(q, pu, w, 1.0) <= 1e-4
    assert kkt_residual(pu, pu, w, 1.0) > 1e-3  # η = 1 > η*: p^u is not optimal
    assert kkt_residual(pu, pu, w, 0.9 * eta_star(pu, w)) == 0.0
    assert kkt_residual(sol.p * 1.001, pu, w, 1.0) >= 0.99e-3  # Σ p ≠ 1


# -- check 10: special cases ------------------------------------------------------------------
@pytest.mark.parametrize("eta", [1e-3, 1.0, 1e3])
def test_equal_budgets_and_sizes_give_uniform(eta: float) -> None:
    pu, w = weights([600] * 7, [0.5] * 7)
    assert eta_star(pu, w) == np.inf
    np.testing.assert_allclose(solve_p1(pu, w, eta).p, 1 / 7, rtol=0, atol=1e-8)
    np.testing.assert_allclose(solve_p1(pu, w, eta, method="cvxpy").p, 1 / 7, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_eta_star_threshold_and_the_large_eta_limit(seed: int) -> None:
    pu, w = instance(seed) if seed else weights(GOLDEN_SIZES, GOLDEN_EPS)
    es = eta_star(pu, w)
    for eta in (0.98 * es, 0.5 * es, 1e-3 * es):
        sol = solve_p1(pu, w, eta)
        np.testing.assert_allclose(sol.p, pu, rtol=0, atol=1e-8)
        assert sol.kkt_residual <= 1e-12
    assert np.abs(solve_p1(pu, w, 1.5 * es).p - pu).sum() > 1e-6
    limit = (1 / w) / (1 / w).sum()
    np.testing.assert_allclose(solve_p1(pu, w, 1e12).p, limit, rtol=0, atol=1e-4)


def test_equal_budgets_unequal_sizes_move_once_eta_exceeds_eta_star() -> None:
    """Spec §3.5: with equal budgets, unequal sizes and a fixed B, p* ≠ p^u once η > η*.
    Larger clients get more in absolute terms, but *less relative to p^u*: with r|M| = B fixed,
    w_k p^u_k ∝ |M_k| V_k grows with |M_k| (V_k falls only like 1/log²|M_k|), so the largest
    clients are the capped ones (w p* = τ_hi) and the smallest the raised ones."""
    sizes = np.array([300, 450, 600, 750, 900])
    pu, w = weights(sizes, [1.0] * 5, batch=128)
    es = eta_star(pu, w)
    assert np.isfinite(es) and np.all(np.diff(w * pu) > 0)
    np.testing.assert_allclose(solve_p1(pu, w, 0.9 * es).p, pu, rtol=0, atol=1e-12)
    for eta in (1.5 * es, 3 * es, 100 * es, 1e6 * es):
        p = solve_p1(pu, w, eta).p
        assert np.abs(p - pu).sum() > 1e-6
        assert np.all(np.diff(p) > 0)  # larger clients: larger p*
        assert np.all(np.diff(p / pu) <= 1e-12) and p[0] > pu[0] and p[-1] < pu[-1]


# -- check 11: structure -------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_probability_non_decreasing_in_epsilon_among_equal_sizes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    sizes = rng.choice([400, 700], n)  # two size groups, one batch size
    eps = rng.lognormal(0, 1, n)
    pu, w = weights(sizes, eps)
    for eta in (0.1, 1.0, 44.72, 1e4):
        p = solve_p1(pu, w, eta).p
        for m in (400, 700):
            g = np.flatnonzero(sizes == m)
            order = g[np.argsort(eps[g])]
            assert np.all(np.diff(p[order]) >= -1e-15), (seed, eta, m)


def test_l1_distance_non_decreasing_in_eta_and_kkt_on_200_instances() -> None:
    """Not proved in the paper (spec §6 check 11): a counter-example is a finding, not a test bug."""
    for seed in range(200):
        pu, w = instance(seed)
        es = eta_star(pu, w)
        etas = es * np.logspace(-0.5, 7, 14)
        l1 = []
        for eta in etas:
            sol = solve_p1(pu, w, eta)
            assert sol.kkt_residual <= 1e-9, (seed, eta)
            assert_distribution(sol)
            moved = np.abs(sol.p - pu) > 1e-12 * pu
            wp = w[moved] * sol.p[moved]
            near = np.minimum(np.abs(wp - sol.tau_lo) / sol.tau_lo, np.abs(wp - sol.tau_hi) / sol.tau_hi)
            assert np.all(near <= 1e-6), (seed, eta)  # w_k p*_k ∈ {τ_lo, τ_hi}
            l1.append(np.abs(sol.p - pu).sum())
        steps = np.diff(l1)
        assert np.all(steps >= -1e-12), f"counter-example: seed {seed}, eta {etas[1:][steps < -1e-12]}, l1 {l1}"


# -- public data (A20) ----------------------------------------------------------------------
def test_public_data_client_is_solved_by_cvxpy() -> None:
    pu, w = weights(GOLDEN_SIZES, [0.2, 0.5, 1, 5, np.inf])
    assert w[-1] == 0.0
    with pytest.raises(ValueError, match=r"^w: .*w = 0.*method='cvxpy'"):
        solve_p1(pu, w, 1.0, method="structured")
    for eta in (1e-3, 1.0, 44.72):
        sol = solve_p1(pu, w, eta, method="auto")
        assert sol.method == "cvxpy" and sol.converged
        assert_distribution(sol)
        c = p1_slsqp(pu, w, eta)
        assert sol.objective == pytest.approx(p1_objective(c, pu, w, eta), rel=1e-6)
        np.testing.assert_allclose(sol.p, c, atol=1e-4)  # unique with a single public client
        assert sol.kkt_residual <= 1e-4
        assert sol.objective <= sol.objective_at_pu * (1 + 1e-8)  # an interior point
    sol = solve_p1(pu, w, 44.72, method="auto")
    assert sol.p[-1] > 0.9  # the free client takes most of the mass
    # only public data: f(p) = 2‖p − p^u‖_1, minimised by p^u
    np.testing.assert_allclose(solve_p1(pu, np.zeros(5), 1.0, method="auto").p, pu, atol=1e-8)


def test_ten_thousand_clients_in_well_under_a_second() -> None:
    rng = np.random.default_rng(0)
    n = 10_000
    pu, w = weights(rng.integers(300, 901, n), rng.uniform(1e-3, 1, n), batch=128)
    sol = solve_p1(pu, w, 44.72)
    assert sol.seconds < 0.5, sol.seconds
    assert sol.kkt_residual <= 1e-9
    assert_distribution(sol)


# -- check 7: input validation ----------------------------------------------------------------
PU = np.array([0.2, 0.3, 0.5])
W = np.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("pu", "w", "eta", "message"),
    [
        (PU, W, -1.0, r"^eta: must be > 0 and finite, got -1$"),
        (PU, W, 0.0, r"^eta: must be > 0 and finite, got 0$"),
        (PU, W, float("nan"), r"^eta: must be > 0 and finite, got nan$"),
        (PU, W, float("inf"), r"^eta: must be > 0 and finite, got inf$"),
        (np.array([0.2, 0.3, 0.6]), W, 1.0, r"^pu: must sum to 1 \(within 1e-9\), got sum 1\.1"),
        (np.array([0.0, 0.5, 0.5]), W, 1.0, r"^pu: must be > 0 .*, got 0 at index 0$"),
        (np.array([-0.1, 0.6, 0.5]), W, 1.0, r"^pu: must be > 0 .*, got -0\.1 at index 0$"),
        (PU, np.array([1.0, -2.0, 3.0]), 1.0, r"^w: must be >= 0 .*, got -2 at index 1$"),
        (PU, np.array([1.0, 2.0]), 1.0, r"^w: must have the shape of pu \(3,\), got \(2,\)$"),
        (PU.reshape(1, 3), W, 1.0, r"^pu: must be a non-empty 1-D array, got shape \(1, 3\)$"),
        (np.array([]), np.array([]), 1.0, r"^pu: must be a non-empty 1-D array"),
    ],
)
def test_bad_inputs_are_refused_naming_the_field(pu: np.ndarray, w: np.ndarray, eta: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        solve_p1(pu, w, eta)
    with pytest.raises(ValueError, match=message):
        solve_p1(pu, w, eta, method="cvxpy")
    with pytest.raises(ValueError, match=message):
        kkt_residual(PU, pu, w, eta)


def test_bad_method_and_bad_p() -> None:
    with pytest.raises(ValueError, match=r"^method: must be 'structured', 'cvxpy' or 'auto', got 'newton'$"):
        solve_p1(PU, W, 1.0, method="newton")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^p: must have shape \(3,\) or \(M, 3\), got \(4,\)$"):
        p1_objective(np.ones(4) / 4, PU, W, 1.0)
