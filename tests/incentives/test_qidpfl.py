"""QI-DPFL game maths (spec ``qidpfl.md`` §3.1, §3.5-3.9): acceptance checks 1-16 of §6.

Check 10 compares with a reference solver written here (damped iterated best response, log
grid + bounded search, bisection), which uses none of Theorem 1, Theorem 2 or Eq. 33.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog, minimize_scalar
from scipy.stats import wasserstein_distance

from fedgame.incentives.qidpfl.game import (
    AccuracyCurve,
    ServerParams,
    best_response,
    calibrate_acc_scale,
    client_equilibrium,
    client_utility,
    deviation_gains,
    equilibrium_slopes,
    fit_accuracy_curve,
    label_emd,
    max_reward,
    optimal_reward,
    participants,
    participation_loop,
    qidpfl_reward,
    random_reward,
    reference_distribution,
    reward_cost,
    reward_range,
    reward_schedule,
    screen,
    server_round_cost,
    solve_qidpfl_game,
    stackelberg_check,
    theorem2_constant,
)

# Golden instance V6 (§4.1)
NU = np.array([1.0, 1.2, 0.9, 1.5, 2.5])
SIZES = np.array([600.0, 800.0, 1000.0, 500.0, 700.0])
GOLD_SERVER = ServerParams(dim=7850, rounds=30, discount=0.9429)
GOLD_CURVE = AccuracyCurve(I1=0.92, B=0.6, I3=50.0)
EPS, EPS_MAX = 0.86, 0.914


def _golden_schedule(**kw: object) -> object:
    return reward_schedule(NU, SIZES, GOLD_SERVER, curve=GOLD_CURVE, eps=EPS, eps_max=EPS_MAX, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Screening (checks 1-3)
# --------------------------------------------------------------------------------------------


def _ot_01(p: np.ndarray, q: np.ndarray) -> float:
    """Optimal transport cost between p and q with ground distance 1[j != k] (HiGHS LP)."""
    P = p.size
    cost = 1.0 - np.eye(P)
    A_rows = np.kron(np.eye(P), np.ones(P))  # Σ_k x_jk = p_j
    A_cols = np.kron(np.ones(P), np.eye(P))  # Σ_j x_jk = q_k
    res = linprog(cost.ravel(), A_eq=np.vstack([A_rows, A_cols]), b_eq=np.concatenate([p, q]), bounds=(0, None), method="highs")
    assert res.status == 0
    return float(res.fun)


def test_check1_emd_is_l1_and_twice_the_01_transport_cost() -> None:
    rng = np.random.default_rng(1)
    for P in [2, 3, 5, 10, 17, 30, 45, 62, *rng.integers(2, 63, 8).tolist()]:
        m = rng.integers(0, 50, P) * (rng.uniform(size=P) < 0.7)
        m[rng.integers(P)] += 1
        q = rng.dirichlet(np.full(P, 0.7))
        theta = float(label_emd(m[None, :], reference=q)[0])
        p = m / m.sum()
        assert 0.0 <= theta <= 2.0
        assert theta == pytest.approx(np.abs(p - q).sum(), abs=1e-15)
        assert abs(theta - 2.0 * _ot_01(p, q)) <= 1e-9
        if P == 2:
            w1 = wasserstein_distance([0, 1], [0, 1], u_weights=p, v_weights=q)
            assert abs(theta - 2.0 * w1) <= 1e-12
    m = np.array([[3, 1, 4, 1, 5], [3, 1, 4, 1, 5]])
    np.testing.assert_array_equal(label_emd(m), [0.0, 0.0])  # identical histograms
    assert label_emd([[1, 0, 0]], reference=[0, 0, 1])[0] == 2.0
    # not the ordinal 1-D W_1 over class indices (A2): that would give 2·2 = 4 here
    assert 2 * wasserstein_distance([0, 1, 2], [0, 1, 2], [1, 0, 0], [0, 0, 1]) == 4.0


def test_check2_pooled_reference_is_the_size_weighted_mean() -> None:
    rng = np.random.default_rng(2)
    m = rng.integers(0, 300, (40, 62))
    sizes = m.sum(axis=1)
    pooled = reference_distribution(m, "pooled")
    weighted = (sizes[:, None] * (m / sizes[:, None])).sum(axis=0) / sizes.sum()
    np.testing.assert_allclose(pooled, weighted, rtol=0, atol=1e-12)
    np.testing.assert_allclose(reference_distribution(m, "uniform"), np.full(62, 1 / 62))
    np.testing.assert_allclose(reference_distribution(m, 2 * pooled), pooled, atol=1e-15)
    with pytest.raises(ValueError, match=r"reference: must have P = 62"):
        label_emd(m, reference=np.ones(61))
    with pytest.raises(ValueError, match=r"label_counts\[3\]\[5\]: must be a count >= 0"):
        m2 = m.copy()
        m2[3, 5] = -1
        label_emd(m2)
    with pytest.raises(ValueError, match=r"label_counts\[1\]: must have a positive total"):
        label_emd([[1, 2], [0, 0]])


def test_check3_threshold_ties_keep_fraction_and_too_few() -> None:
    rng = np.random.default_rng(3)
    m = rng.integers(0, 40, (20, 10))
    emd = label_emd(m)
    for h in range(20):
        if (emd <= emd[h]).sum() < 2:
            with pytest.raises(ValueError, match="screening kept N = 1"):
                screen(m, theta_th=float(emd[h]))
            continue
        res = screen(m, theta_th=float(emd[h]))
        np.testing.assert_array_equal(res.kept, np.flatnonzero(emd <= emd[h]))
        assert h in res.kept  # θ_h = θ_th is kept
        if (emd <= emd[h] - 1e-12).sum() >= 2:
            assert h not in screen(m, theta_th=float(emd[h]) - 1e-12).kept  # θ_th + 1e-12 excluded
    assert screen(m, theta_th=math.inf).kept.size == 20  # FedAvg-DP: no screening (A16)
    for q in (0.05 * k for k in range(2, 21)):
        res = screen(m, keep_fraction=q)
        k = math.ceil(round(q * 20, 9))
        assert res.kept.size == k
        np.testing.assert_array_equal(res.kept, np.sort(np.argsort(emd, kind="stable")[:k]))
        assert res.theta_th == emd[res.kept].max()
    assert screen(m[:10], keep_fraction=0.3).kept.size == 3  # ⌈0.3·10⌉ = 3, not ⌈3.0000000000000004⌉
    # ties: lower index first; a client with θ = θ_th is left out in this mode only
    ties = np.array([[1, 1], [3, 1], [1, 1], [3, 1]])  # θ (uniform ref): 0, 0.5, 0, 0.5
    res = screen(ties, reference="uniform", keep_fraction=0.75)
    np.testing.assert_array_equal(res.kept, [0, 1, 2])
    assert res.theta_th == 0.5 and label_emd(ties, "uniform")[3] == res.theta_th
    with pytest.raises(ValueError, match=r"^screening kept N = 1 client\(s\); the game needs at least 2$"):
        screen(m, theta_th=float(np.sort(emd)[0]))
    with pytest.raises(ValueError, match=r"screening kept N = 1 client\(s\)"):
        screen(m, keep_fraction=0.05)
    with pytest.raises(ValueError, match="theta_th, keep_fraction"):
        screen(m)


# --------------------------------------------------------------------------------------------
# Stage II (checks 4-9)
# --------------------------------------------------------------------------------------------


def _random_nu(rng: np.random.Generator, kind: int, N: int) -> np.ndarray:
    spread = rng.uniform(1.05, 10.0)
    base = 10 ** rng.uniform(-1, 1)
    if kind == 0:  # continuous
        return base * rng.uniform(1.0, spread, N)
    if kind == 1:  # ties among a few values
        return base * rng.choice(rng.uniform(1.0, spread, 3), N)
    if kind == 2:  # integer-valued, exact ties (margin cases (n-1)κ = K possible)
        return rng.integers(1, max(2, int(spread)) + 1, N).astype(float)
    return base * (1.0 + rng.exponential(spread / 3, N))  # exponential costs


def test_check4_no_profitable_unilateral_deviation() -> None:
    rng = np.random.default_rng(4)
    worst, worst_rel = 0.0, 0.0
    for inst in range(200):
        N = int(rng.integers(2, 51))
        R = float(10 ** rng.uniform(-1, 2))
        nu = _random_nu(rng, inst % 3, N)
        eq = client_equilibrium(nu, R)
        rho = np.asarray(eq.rho)
        X = rho.sum() - rho
        U_star = client_utility(rho, X, R, nu)
        hi = R / nu
        x = np.linspace(0.0, 1.0, 2001)[None, :] * hi[:, None]  # 2,001-point grid per client
        Ug = client_utility(x, X[:, None], R, nu[:, None])
        j = Ug.argmax(axis=1)
        best = np.maximum(Ug.max(axis=1), client_utility(0.0, X, R, nu))  # also x = 0
        for i in range(N):
            lo, up = x[i, max(j[i] - 1, 0)], x[i, min(j[i] + 1, 2000)]
            res = minimize_scalar(
                lambda z, i=i: -float(client_utility(z, X[i], R, nu[i])),
                bounds=(lo, up),
                method="bounded",
                options={"xatol": 1e-14 * hi[i]},
            )
            best[i] = max(best[i], -res.fun)
        gain = float((best - U_star).max())
        worst, worst_rel = max(worst, gain), max(worst_rel, gain / R)
        # the library's vectorised check agrees
        assert float(deviation_gains(rho, R, nu).max()) <= 1e-6
    assert worst <= 1e-6
    assert worst_rel <= 1e-14  # spec observed ≤ 2e-16·R


def test_margin_client_is_dropped_and_deviation_check_can_fail() -> None:
    # κ = (1, 1, 2): (n−1)κ_3 = 2·2 = K = 4, client 2 sits exactly on the margin (G = 0, A4)
    eq = client_equilibrium([1.0, 1.0, 2.0], 8.0)
    np.testing.assert_array_equal(eq.participants, [0, 1])
    np.testing.assert_allclose(eq.rho, [2.0, 2.0, 0.0], rtol=1e-15)  # G = 1/4 as with n = 3
    assert float(deviation_gains(eq.rho, 8.0, np.array([1.0, 1.0, 2.0])).max()) <= 1e-15
    # away from the equilibrium the same search finds the (Eq. 23) best-response gain
    rho = np.array([1.0, 3.0, 0.5])
    X = rho.sum() - rho
    br = best_response(X, 8.0, np.array([1.0, 1.0, 2.0]))
    want = client_utility(br, X, 8.0, np.array([1.0, 1.0, 2.0])) - client_utility(rho, X, 8.0, np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(deviation_gains(rho, 8.0, np.array([1.0, 1.0, 2.0])), want, rtol=1e-9)
    assert want.max() > 0.1


def test_best_response_eq23_matches_direct_maximisation() -> None:
    rng = np.random.default_rng(41)
    for _ in range(30):
        X, R, k = 10 ** rng.uniform(-2, 1), 10 ** rng.uniform(-1, 2), 10 ** rng.uniform(-1, 1)
        res = minimize_scalar(
            lambda z: -float(client_utility(z, X, R, k)), bounds=(0, R / k), method="bounded", options={"xatol": 1e-13 * R / k}
        )
        assert float(best_response(X, R, k)) == pytest.approx(res.x, abs=1e-6 * R / k)


def test_check5_dropping_loops_equal_the_sorted_prefix() -> None:
    rng = np.random.default_rng(5)
    for inst in range(1500):
        N = int(rng.integers(2, 41))
        nu = _random_nu(rng, inst % 4, N)
        R = float(10 ** rng.uniform(-1, 2))
        S_all, passes = participation_loop(nu)
        S_one, passes_one = participation_loop(nu, one_at_a_time=True)
        mask = participants(nu)
        np.testing.assert_array_equal(np.flatnonzero(mask), S_all)
        np.testing.assert_array_equal(S_one, S_all)
        assert passes <= N - 1 and passes_one <= N - 1 and S_all.size >= 2
        G, m2 = equilibrium_slopes(nu)
        np.testing.assert_array_equal(m2, mask)
        assert np.all(G[mask] > 0) and np.all(G[~mask] == 0)
        eq = client_equilibrium(nu, R)
        out = ~mask
        assert np.all(R / eq.rho.sum() - nu[out] <= 1e-12 * nu[out])
        # the prefix condition never holds again once it fails (V2)
        ks = np.sort(nu)
        ok = ks * np.arange(N) < np.cumsum(ks)
        n = mask.sum()
        assert ok[:n].all() and not ok[n:].any()
    # column-wise over rounds equals round by round
    nus = rng.uniform(1, 3, (30, 7))
    np.testing.assert_array_equal(participants(nus), np.stack([participants(nus[:, t]) for t in range(7)], axis=1))


def test_check6_participants_do_not_depend_on_R_and_rho_is_linear() -> None:
    rng = np.random.default_rng(6)
    for inst in range(100):
        nu = _random_nu(rng, inst % 4, int(rng.integers(2, 40)))
        eqs = {R: client_equilibrium(nu, R) for R in (1e-3, 1.0, 1e3)}
        for R, e in eqs.items():
            np.testing.assert_array_equal(e.participants, eqs[1.0].participants)
            np.testing.assert_allclose(e.rho, R * eqs[1.0].rho, rtol=1e-12, atol=0)


def test_check7_shares_payments_and_utilities() -> None:
    rng = np.random.default_rng(7)
    for inst in range(100):
        N = int(rng.integers(2, 40))
        nu = _random_nu(rng, inst % 4, N)
        R = float(10 ** rng.uniform(-1, 2))
        K = rng.uniform(0, 0.1, N) * R
        eq = client_equilibrium(nu, R, phi1=1.3, fixed_cost=K)
        S = eq.participants
        assert eq.share[S].sum() == pytest.approx(1.0, rel=1e-12)
        assert eq.payment.sum() == pytest.approx(R, rel=1e-12)
        rho = np.asarray(eq.rho)
        np.testing.assert_allclose(eq.share[S], rho[S] / rho.sum(), rtol=1e-12)
        direct = client_utility(rho, rho.sum() - rho, R, 1.3 * nu, K)  # Eq. 16 at ρ*
        np.testing.assert_allclose(direct[S], R * eq.share[S] ** 2 - K[S], rtol=1e-12, atol=1e-12 * R)
        np.testing.assert_allclose(eq.utility[S], R * eq.share[S] ** 2 - K[S], rtol=1e-12)
        assert np.all(eq.utility[np.setdiff1d(np.arange(N), S)] == 0)  # non-participants: 0 (A5)


def test_check8_golden_instance() -> None:
    eq = client_equilibrium(NU, 10.0)
    np.testing.assert_array_equal(eq.participants, [0, 1, 2, 3])
    F = Fraction
    rho = [F(4800, 2116), F(3000, 2116), F(5700, 2116), F(300, 2116), F(0)]
    shares = [F(8, 23), F(5, 23), F(19, 46), F(1, 46), F(0)]
    utils = [F(2560, 2116), F(1000, 2116), F(3610, 2116), F(10, 2116), F(0)]
    np.testing.assert_allclose(eq.rho, [float(x) for x in rho], rtol=0, atol=1e-10)
    np.testing.assert_allclose(eq.share, [float(x) for x in shares], rtol=0, atol=1e-10)
    np.testing.assert_allclose(eq.utility, [float(x) for x in utils], rtol=0, atol=1e-10)
    assert eq.slope.sum() == pytest.approx(3 / 4.6, rel=1e-12)
    s = _golden_schedule()
    rel = 1e-8
    assert s.A[0] == pytest.approx(3.370177457e-4, rel=rel)
    assert s.R_star[0] == pytest.approx(0.0259621935, rel=rel)
    assert s.R_star[9] == pytest.approx(0.03382563994, rel=rel)
    assert s.R_star[29] == pytest.approx(0.06089612587, rel=rel)
    assert float(reward_cost(s.R_star[0], s.A[0], 1, GOLD_SERVER)) == pytest.approx(0.02707330461, rel=rel)
    assert s.R_min[0] == pytest.approx(0.07061260952, rel=rel)
    assert s.R_max[0] == pytest.approx(0.1412252190, rel=rel)
    np.testing.assert_array_equal(s.R_applied[[0, 9, 29]], s.R_min[[0, 9, 29]])  # pays R_min
    # the library's two ways of computing u_t agree (closed form vs Eq. 15 from the budgets)
    for j in (0, 9, 29):
        u15 = server_round_cost(eq.slope * s.R_applied[j], float(s.R_applied[j]), j + 1, SIZES, GOLD_SERVER)
        assert s.cost[j] == pytest.approx(u15, rel=1e-12)


def test_check9_paper_mode() -> None:
    nu4 = NU[:4]
    a, b = client_equilibrium(nu4, 3.0, mode="paper"), client_equilibrium(nu4, 3.0)
    np.testing.assert_array_equal(a.participants, b.participants)
    np.testing.assert_allclose(a.rho, b.rho, rtol=1e-15)
    with pytest.raises(ValueError, match=r"client\(s\) \[4\] \(0-based; \[5\] 1-based\)"):
        client_equilibrium(NU, 10.0, mode="paper")
    G, _ = equilibrium_slopes(NU, mode="participation")
    assert G[4] == 0


# --------------------------------------------------------------------------------------------
# Check 10: an independent reference solver
# --------------------------------------------------------------------------------------------


def _ref_equilibrium(kappa: list[float], R: float) -> list[float]:
    """Damped (0.5) Gauss–Seidel iterated best response; the best response is the maximiser of
    Eq. 16 in ρ_i (Eq. 23, checked against direct maximisation above)."""
    kmin = min(kappa)
    rho = [R / (len(kappa) * k) for k in kappa]
    for _ in range(200_000):
        total, change = math.fsum(rho), 0.0
        for i, k in enumerate(kappa):
            X = total - rho[i]
            br = max(0.0, math.sqrt(R * X / k) - X)
            new = 0.5 * rho[i] + 0.5 * br
            change = max(change, abs(new - rho[i]))
            total += new - rho[i]
            rho[i] = new
        if change <= 1e-15 * R / kmin:
            # damping only halves a dropped client's budget each sweep: set exactly to 0 those
            # whose best response to the others is 0
            total = math.fsum(rho)
            return [0.0 if math.sqrt(R * (total - r) / k) <= total - r else r for r, k in zip(rho, kappa)]
    raise AssertionError("iterated best response did not converge")


def _ref_cost(rho: np.ndarray, R: float, t: int, sizes: np.ndarray, p: dict[str, float]) -> float:
    """Eq. 15's round-t summand, written from the paper (κ_acc, n_t, A10/A4)."""
    on = rho > 0
    n = on.sum()
    noise = sum(2 * p["d"] * p["C"] ** 2 / (sizes[i] ** 2 * rho[i] * n**2) for i in np.flatnonzero(on))
    return (
        p["acc"] * 2 * p["beta"] * p["gamma"] / (p["lam"] ** 2 * p["T"] ** 2) * (p["V"] ** 2 + noise)
        + (1 - p["gamma"]) * p["pi"] ** (t - 1) * R
    )


def _ref_argmin(f: object) -> float:
    """481-point log grid over [1e-8, 1e4], then bounded Brent on ln R around the best point."""
    grid = np.logspace(-8, 4, 481)
    vals = [f(float(r)) for r in grid]  # type: ignore[operator]
    j = int(np.argmin(vals))
    assert 0 < j < 480
    res = minimize_scalar(
        lambda z: f(math.exp(z)),
        bounds=(math.log(grid[j - 1]), math.log(grid[j + 1])),  # type: ignore[operator]
        method="bounded",
        options={"xatol": 1e-12},
    )
    return math.exp(res.x)


def _ref_bisect(g: object) -> float:
    """Smallest R >= 0 with g(R) >= 0 for increasing g, by bisection."""
    if g(0.0) >= 0:  # type: ignore[operator]
        return 0.0
    lo, hi = 0.0, 1.0
    while g(hi) < 0:  # type: ignore[operator]
        lo, hi = hi, 2 * hi
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return hi
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)  # type: ignore[operator]


def test_check10_agreement_with_an_independent_reference_solver() -> None:
    rng = np.random.default_rng(10)
    for inst in range(24):
        H, P = int(rng.integers(3, 25)), int(rng.integers(2, 12))
        counts = np.stack([rng.multinomial(int(rng.integers(100, 1500)), rng.dirichlet(np.full(P, 0.8))) for _ in range(H)])
        counts[counts.sum(axis=1) == 0, 0] = 1
        sizes = counts.sum(axis=1).astype(float)
        nu = rng.uniform(0.5, 0.5 * rng.uniform(1.05, 6.0), H) + 0.5
        # screening: reference by definition, threshold or ⌈qH⌉ with N <= 20
        pooled = counts.sum(axis=0) / counts.sum()
        theta_ref = np.array([sum(abs(counts[h, j] / counts[h].sum() - pooled[j]) for j in range(P)) for h in range(H)])
        if inst % 2:
            q = float(rng.uniform(0.5, min(1.0, 20 / H)))
            k = max(2, math.ceil(round(q * H, 9)))
            kept_ref = sorted(sorted(range(H), key=lambda h: (theta_ref[h], h))[:k])
            scr = dict(keep_fraction=k / H)
        else:
            st, k = np.sort(theta_ref), int(rng.integers(2, min(H, 20) + 1))
            th = float(st[k - 1] + 0.1 if k == H else 0.5 * (st[k - 1] + st[k]))  # away from ties
            kept_ref = [h for h in range(H) if theta_ref[h] <= th]
            scr = dict(theta_th=th)
        p = dict(
            d=float(rng.integers(1000, 100_000)),
            T=float(rng.integers(5, 51)),
            pi=rng.uniform(0.85, 0.99),
            gamma=rng.uniform(0.2, 0.8),
            beta=rng.uniform(0.5, 2),
            lam=rng.uniform(0.5, 2),
            V=rng.uniform(0.5, 2),
            C=rng.uniform(0.5, 2),
            acc=10 ** rng.uniform(-1, 1),
        )
        I1 = rng.uniform(0.8, 0.99)
        B, I3, I4 = rng.uniform(0.3, 0.7) * I1, 10 ** rng.uniform(0, 2.5), rng.uniform(-0.5, 0.5)
        a = rng.uniform(0.05, 0.5)
        eps, eps_max = I1 - a * B, I1 - rng.uniform(0.005, a) * B
        server = ServerParams(
            dim=int(p["d"]),
            rounds=int(p["T"]),
            discount=p["pi"],
            gamma=p["gamma"],
            beta=p["beta"],
            lam=p["lam"],
            grad_bound=p["V"],
            clip=p["C"],
            acc_scale=p["acc"],
        )
        out = solve_qidpfl_game(
            nu,
            sizes,
            label_counts=counts,
            **scr,
            rewards=[1.0],
            server=server,  # type: ignore[arg-type]
            curve=AccuracyCurve.from_paper(I1, B * math.exp(I4), I3, I4),
            eps=eps,
            eps_max=eps_max,
        )
        assert out.screening is not None
        np.testing.assert_allclose(out.screening.emd, theta_ref, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(out.kept, kept_ref)
        kk = list(nu[kept_ref])
        kmin = min(kk)
        rho1 = np.array(_ref_equilibrium(kk, 1.0))
        S_ref = np.flatnonzero(rho1 > 1e-9 / kmin)
        eq = out.equilibria[0]
        np.testing.assert_array_equal(eq.participants, S_ref)
        assert np.abs(np.asarray(eq.rho) - rho1).max() <= 1e-8 * 1.0 / kmin
        # Stage I: u_t(R) with the followers' reference equilibrium at R (Eq. 16 is homogeneous
        # of degree 1 in (ρ, R) with linear costs, so ρ_ref(R) = R ρ_ref(1)), log grid + Brent
        D = sizes[kept_ref]
        sched = out.schedule
        assert sched is not None
        for t in sorted({1, int(p["T"]) // 2, int(p["T"])}):
            R_ref = _ref_argmin(lambda R, t=t: _ref_cost(R * rho1, R, t, D, p))
            assert sched.R_star[t - 1] == pytest.approx(R_ref, rel=1e-6)
        # range: bisection on the paper's curve I1 − I2 exp(−I3 ρ − I4) at ρ = Σ ρ_ref(R)
        tot1 = rho1.sum()

        def acc_at(R: float) -> float:
            return I1 - B * math.exp(I4) * math.exp(-I3 * R * tot1 - I4)

        R_min = _ref_bisect(lambda R: acc_at(R) - eps)
        R_max = _ref_bisect(lambda R: acc_at(R) - eps_max)
        assert sched.R_min[0] == pytest.approx(R_min, rel=1e-9)
        assert sched.R_max[0] == pytest.approx(R_max, rel=1e-9)


# --------------------------------------------------------------------------------------------
# Stage I (checks 11-16)
# --------------------------------------------------------------------------------------------


def _u_resolved(nu: np.ndarray, sizes: np.ndarray, params: ServerParams, t: int, R: float) -> float:
    """u_t(R) with the client equilibrium re-solved at R (§3.5) and Eq. 15 from the budgets."""
    return server_round_cost(client_equilibrium(nu, R).rho, R, t, sizes, params)


def _random_stage1(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, ServerParams]:
    N = int(rng.integers(2, 25))
    nu = rng.uniform(1.0, rng.uniform(1.05, 5.0), N)
    sizes = rng.integers(100, 2000, N).astype(float)
    params = ServerParams(
        dim=int(rng.integers(1000, 50_000)),
        rounds=int(rng.integers(5, 60)),
        discount=rng.uniform(0.85, 0.99),
        gamma=rng.uniform(0.2, 0.8),
        beta=rng.uniform(0.5, 2),
        lam=rng.uniform(0.5, 2),
        grad_bound=rng.uniform(0.5, 2),
        clip=rng.uniform(0.5, 2),
        acc_scale=10 ** rng.uniform(-1, 1),
    )
    return nu, sizes, params


def test_check11_closed_form_reward_against_resolved_grid_search() -> None:
    rng = np.random.default_rng(11)
    cases = [(NU, SIZES, GOLD_SERVER)] + [_random_stage1(rng) for _ in range(5)]
    for nu, sizes, params in cases:
        s = reward_schedule(nu, sizes, params)
        T = params.rounds
        for t in sorted({1, T // 3, T}):
            R_star = float(s.R_star[t - 1])

            def u(R: float, t: int = t) -> float:
                return _u_resolved(nu, sizes, params, t, R)

            grid = np.logspace(-7, 3, 481)
            vals = np.array([u(float(r)) for r in grid])
            j = int(vals.argmin())
            assert 0 < j < 480
            res = minimize_scalar(
                lambda z: u(math.exp(z)), bounds=(math.log(grid[j - 1]), math.log(grid[j + 1])), method="bounded", options={"xatol": 1e-12}
            )
            assert R_star == pytest.approx(math.exp(res.x), rel=1e-6)
            h = 1e-4 * R_star
            assert abs((u(R_star + h) - u(R_star - h)) / (2 * h)) <= 1e-5 * (1 - params.gamma)
            assert u(R_star) <= vals.min() * (1 + 1e-14)
        np.testing.assert_allclose(s.R_star / s.R_star[0], params.discount ** (-(s.t - 1) / 2), rtol=1e-9)
        assert s.cost[0] == pytest.approx(_u_resolved(nu, sizes, params, 1, float(s.R_applied[0])), rel=1e-12)


def test_check12_reward_range_hits_the_targets_and_errors_name_the_field() -> None:
    s = _golden_schedule()
    for j in (0, 9, 29):
        assert float(GOLD_CURVE(client_equilibrium(NU, float(s.R_min[j])).rho_total)) == pytest.approx(EPS, abs=1e-9)
        assert float(GOLD_CURVE(client_equilibrium(NU, float(s.R_max[j])).rho_total)) == pytest.approx(EPS_MAX, abs=1e-9)
    # I(0) = I1 − B >= ε ⇒ R_min = 0
    low = AccuracyCurve(I1=0.92, B=0.05, I3=50.0)
    lo, hi = reward_range(3 / 4.6, low, 0.87, 0.914)
    assert lo == 0.0 and hi > 0
    lo, _ = reward_range(3 / 4.6, low, 0.92 - 0.05, 0.914)  # I(0) = ε exactly
    assert lo == 0.0
    with pytest.raises(ValueError, match=r"^eps: must be < I1 = 0.92"):
        reward_range(1.0, GOLD_CURVE, 0.92, 0.91)
    with pytest.raises(ValueError, match=r"^eps_max: must be < I1 = 0.92"):
        reward_range(1.0, GOLD_CURVE, 0.9, 0.93)
    with pytest.raises(ValueError, match=r"^eps: must be <= eps_max = 0.9, got 0.91"):
        reward_range(1.0, GOLD_CURVE, 0.91, 0.9)
    with pytest.raises(ValueError, match=r"^eps_max"):
        reward_schedule(NU, SIZES, GOLD_SERVER, curve=GOLD_CURVE, eps=0.86, eps_max=0.92)


def _u_closed(s: object, j: int, R: float, params: ServerParams) -> float:
    return float(reward_cost(R, s.A[j], j + 1, params))  # type: ignore[attr-defined]


def test_check13_qidpfl_reward_minimises_cost_on_the_range() -> None:
    rng = np.random.default_rng(13)
    cases: list[tuple[np.ndarray, np.ndarray, ServerParams, bool]] = [(NU, SIZES, GOLD_SERVER, False), (NU, SIZES, GOLD_SERVER, True)]
    cases += [(*_random_stage1(rng), bool(k % 2)) for k in range(3)]
    interior = clipped = 0
    for nu, sizes, params, cal in cases:
        kw = dict(curve=GOLD_CURVE, eps=EPS, eps_max=EPS_MAX, calibrate=cal)
        q = reward_schedule(nu, sizes, params, **kw)  # type: ignore[arg-type]
        mx = reward_schedule(nu, sizes, params, policy=max_reward, **kw)  # type: ignore[arg-type]
        rd = reward_schedule(nu, sizes, params, policy=random_reward, rng=np.random.default_rng(0), **kw)  # type: ignore[arg-type]
        used = ServerParams(**{**params.__dict__, "acc_scale": q.acc_scale})
        np.testing.assert_array_equal(mx.R_applied, q.R_max)
        assert np.all((rd.R_applied >= q.R_min) & (rd.R_applied <= q.R_max))
        assert np.all(q.cost <= mx.cost) and np.all(q.cost <= rd.cost)
        for j in sorted(set(np.linspace(0, params.rounds - 1, 12).astype(int).tolist())):
            lo, hi = float(q.R_min[j]), float(q.R_max[j])

            def u(R: float, j: int = j) -> float:
                return _u_resolved(nu, sizes, used, j + 1, R)

            grid = np.linspace(lo, hi, 101)
            vals = np.array([u(float(r)) for r in grid])
            k = int(vals.argmin())
            a, b = grid[max(k - 1, 0)], grid[min(k + 1, 100)]
            res = minimize_scalar(u, bounds=(a, b), method="bounded", options={"xatol": 1e-12 * hi})
            best = min((vals.min(), grid[k]), (res.fun, res.x))[1]
            assert q.R_applied[j] == pytest.approx(best, rel=1e-6)
            assert u(float(q.R_applied[j])) <= vals.min() * (1 + 1e-14)
            interior += int(lo < q.R_applied[j] < hi)
            clipped += int(q.R_applied[j] in (lo, hi))
    assert interior > 0 and clipped > 0  # both cases exercised


def test_check14_calibration_puts_the_first_reward_at_the_bottom_of_the_range() -> None:
    s = _golden_schedule(calibrate=True)
    assert s.R_star[0] == pytest.approx(s.R_min[0], rel=1e-9)
    unit = _golden_schedule()
    assert s.acc_scale == pytest.approx(unit.R_min[0] ** 2 * 0.5 / unit.A[0], rel=1e-12)
    # constant ν: R_t = min(R_max, R_min,1 π^{−(t−1)/2})
    np.testing.assert_allclose(s.R_applied, np.minimum(s.R_max, s.R_min[0] * 0.9429 ** (-(s.t - 1) / 2)), rtol=1e-12)
    assert calibrate_acc_scale(0.0, 1.0, 0.5) == 1.0  # R_min,1 = 0: skipped
    with pytest.raises(ValueError, match="calibrate: needs an accuracy curve"):
        reward_schedule(NU, SIZES, GOLD_SERVER, calibrate=True)


def test_check15_curve_fit_recovers_parameters_and_honest_standard_errors() -> None:
    truth = np.array([0.92, 0.6, 50.0])
    rho = 4 * np.logspace(-6, -1, 11)
    clean = truth[0] - truth[1] * np.exp(-truth[2] * rho)
    fit = fit_accuracy_curve(rho, clean)
    np.testing.assert_allclose([fit.curve.I1, fit.curve.B, fit.curve.I3], truth, rtol=1e-6)
    assert fit.rmse < 1e-8
    rng = np.random.default_rng(15)
    noise = rng.normal(0.0, 0.003, (200, rho.size))
    inside = np.zeros(3)
    for k in range(200):
        f = fit_accuracy_curve(rho, clean + noise[k])
        est = np.array([f.curve.I1, f.curve.B, f.curve.I3])
        inside += np.abs(est - truth) <= 4 * f.stderr
    assert np.all(inside >= 0.95 * 200), inside


def test_check16_stackelberg_equilibrium() -> None:
    for cal in (False, True):
        out = solve_qidpfl_game(NU, SIZES, server=GOLD_SERVER, curve=GOLD_CURVE, eps=EPS, eps_max=EPS_MAX, calibrate=cal)
        chk = stackelberg_check(out)
        assert chk.holds(tol=1e-15 * 0.03)  # Eq. 30 on a 401-point grid over the range; Eq. 31
        sched, params = out.schedule, out.params
        assert sched is not None and params is not None
        for j in range(params.rounds):  # Eq. 30 again, independently of stackelberg_check
            Rt = float(sched.R_applied[j])
            grid = np.linspace(sched.R_min[j], sched.R_max[j], 41)
            u_t = _u_resolved(NU, SIZES, params, j + 1, Rt)
            assert all(u_t <= _u_resolved(NU, SIZES, params, j + 1, float(R)) * (1 + 1e-14) for R in grid)
        # Eq. 31 at the applied rewards (the deviation search of check 4, via the library)
        assert float(np.abs(out.rho[:, 0] - client_equilibrium(NU, float(sched.R_applied[0])).rho).max()) <= 1e-15
        assert chk.follower_gain.max() <= 1e-15


# --------------------------------------------------------------------------------------------
# Pieces beyond the checks
# --------------------------------------------------------------------------------------------


def test_time_varying_nu_and_theorem2_pieces() -> None:
    rng = np.random.default_rng(17)
    params = ServerParams(dim=5000, rounds=12, discount=0.95)
    nu = rng.uniform(1.0, 3.0, (8, 12))
    sizes = rng.integers(200, 900, 8).astype(float)
    s = reward_schedule(nu, sizes, params, curve=GOLD_CURVE, eps=EPS, eps_max=EPS_MAX)
    for t in range(12):
        eq = client_equilibrium(nu[:, t], 1.0)
        A = theorem2_constant(eq.slope, sizes, params)
        assert s.A[t] == pytest.approx(A, rel=1e-12)
        assert s.R_star[t] == pytest.approx(float(optimal_reward(A, t + 1, params)), rel=1e-12)
        assert s.n_part[t] == eq.participants.size
        lo, hi = reward_range(eq.slope.sum(), GOLD_CURVE, EPS, EPS_MAX)
        assert (s.R_min[t], s.R_max[t]) == pytest.approx((float(lo), float(hi)), rel=1e-12)
    np.testing.assert_array_equal(s.R_applied, qidpfl_reward(s.R_star, s.R_min, s.R_max))
    with pytest.raises(ValueError, match="T = 12 columns"):
        reward_schedule(nu[:, :5], sizes, params)


def test_solve_entry_point_and_input_errors() -> None:
    out = solve_qidpfl_game(NU, SIZES, rewards=[10.0], server=GOLD_SERVER, fixed_cost=0.001)
    assert out.schedule is not None and out.screening is None
    np.testing.assert_allclose(out.equilibria[0].rho * 2116, [4800, 3000, 5700, 300, 0], rtol=1e-12)
    np.testing.assert_allclose(out.payment.sum(axis=0), out.schedule.R_applied, rtol=1e-12)
    np.testing.assert_allclose(
        out.utility[:4], out.schedule.R_applied * (out.payment[:4] / out.schedule.R_applied) ** 2 - 0.001, rtol=1e-12
    )
    assert out.schedule.total_cost == pytest.approx(out.schedule.cost.sum())
    with pytest.raises(ValueError, match=r"nu\[1\]: must be > 0"):
        client_equilibrium([1.0, -1.0], 1.0)
    with pytest.raises(ValueError, match="R: must be >= 0"):
        client_equilibrium([1.0, 2.0], -1.0)
    with pytest.raises(ValueError, match="at least 2 clients"):
        client_equilibrium([1.0], 1.0)
    with pytest.raises(ValueError, match=r"fixed_cost\[0\]: must be >= 0"):
        client_equilibrium([1.0, 2.0], 1.0, fixed_cost=[-1, 0])
    with pytest.raises(ValueError, match="discount: must be in"):
        ServerParams(dim=10, rounds=3, discount=1.0)
    with pytest.raises(ValueError, match="policy random: needs rng"):
        reward_schedule(NU, SIZES, GOLD_SERVER, curve=GOLD_CURVE, eps=EPS, eps_max=EPS_MAX, policy=random_reward)
    with pytest.raises(ValueError, match="policy max: needs a reward range"):
        reward_schedule(NU, SIZES, GOLD_SERVER, policy=max_reward)
    assert AccuracyCurve.from_paper(0.9, 0.5, 2.0, 0.3).B == pytest.approx(0.5 * math.exp(-0.3))
    # screening feeds the game: only the kept candidates play
    counts = np.array([[50, 50], [50, 50], [90, 10], [55, 45], [10, 90]])
    out = solve_qidpfl_game(
        [1, 1.1, 1.2, 1.3, 1.4], counts.sum(axis=1), label_counts=counts, keep_fraction=0.6, reference="uniform", rewards=[1.0]
    )
    np.testing.assert_array_equal(out.kept, [0, 1, 3])
    np.testing.assert_allclose(out.kappa, [1, 1.1, 1.3])
