"""Convergence-bound reference formulas (spec §3.11)."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.fedpcs import (
    bound_prop3,
    bound_thm4_convex,
    bound_thm4_nonconvex,
    bound_thm5_error,
    bound_thm5_rate,
    noisy_update_bound,
    participation_factor,
)

COMMON = dict(beta=1.0, D=1.0, d=100, W=1.0, N=100, K=20, rho_max=12.0, total_size=60000.0)


def test_participation_factor_bounds_every_importance_weight() -> None:
    """Γ = ((N−1)ρ_H + ρ_L)/(K ρ_L) ≥ 1/(K x_i) for every ρ ∈ [ρ_L, ρ_H]^N (Eq. 71)."""
    rng = np.random.default_rng(0)
    N, K, rl, rh = 50, 10, 0.01, 12.0
    gamma = participation_factor(N, K, rl, rh)
    assert gamma == pytest.approx(((N - 1) * rh + rl) / (K * rl))
    for _ in range(200):
        rho = rng.uniform(rl, rh, N)
        x = rho / rho.sum()
        assert np.all(1 / (K * x) <= gamma * (1 + 1e-12))
    rho = np.r_[rl, np.full(N - 1, rh)]  # the extreme case attains it
    assert 1 / (K * rho[0] / rho.sum()) == pytest.approx(gamma)


def test_theorem4_exact_values() -> None:
    G = participation_factor(100, 20, 0.5, 12.0)
    E0 = noisy_update_bound(1.0, 100, 20, 1.0, 0.5, 60000.0)
    assert E0 == pytest.approx(1.0 + 2 * 100 * 20 / (0.5 * 60000.0**2))
    eta, psi, T = 1e-4, 0.1, 3
    q = 1 - psi * eta * G
    want = q**T * 2.0 + (1 + q + q**2) * (eta**3 * G + eta**2 * G**2 * E0 + eta**3 * G**3 * E0)
    got = bound_thm4_convex(T=T, eta=eta, psi=psi, rho_min=0.5, init_gap=2.0, **COMMON)
    assert got == pytest.approx(want, rel=1e-12)
    want_nc = (1 + 2 * T * eta * 0.3 * G) * 2.0 + T * eta**3 * G**3 * E0 + T * eta**2 * G**2 * ((T - 1) * 0.3 + E0) + T * eta**3 * G
    got_nc = bound_thm4_nonconvex(T=T, eta=eta, g_norm=0.3, rho_min=0.5, init_gap=2.0, **COMMON)
    assert got_nc == pytest.approx(want_nc, rel=1e-12)


def test_bounds_decrease_when_rho_min_increases() -> None:
    """§3.11 monotonicity: the non-convex bound of Theorem 4 and the noise terms of
    Proposition 3 / Theorem 5 (σ² = 2W²/(ρ_L |D|²), x ≥ ρ_L/((N−1)ρ_H + ρ_L)) shrink as
    ρ_L grows. (The convex bound need not: (1 − ψηΓ)^T grows as Γ shrinks.)"""
    rls = np.linspace(0.01, 12.0, 30)
    nc = [bound_thm4_nonconvex(T=30, eta=1e-3, g_norm=0.5, rho_min=r, init_gap=1.0, **COMMON) for r in rls]
    assert np.all(np.diff(nc) < 0)
    n, K, size = 100, 20, 600.0
    theta = np.full(n, 1 / n)

    def worst(r: float) -> tuple[np.ndarray, np.ndarray]:
        sigma2 = np.full(n, 2.0 / (r * size**2))
        x = np.full(n, r / ((n - 1) * 12.0 + r))
        return sigma2, x

    p3 = [
        bound_prop3(
            eta=0.1, kappa=1.0, grad_norm_sq=1.0, beta=1.0, d=100, D=1.0, M=0.0, K=K, theta=theta, sigma2=worst(r)[0], x=worst(r)[1]
        )
        for r in rls
    ]
    assert np.all(np.diff(p3) < 0)
    rate = [
        bound_thm5_rate(
            T=10,
            eta=0.01,
            mu=1.0,
            kappa=1.0,
            beta=1.0,
            M=0.0,
            K=K,
            D=1.0,
            d=100,
            theta=theta,
            x=worst(r)[1],
            sigma2=worst(r)[0],
            init_gap=1.0,
        )
        for r in rls
    ]
    err = [
        bound_thm5_error(
            T=10, eta=0.01, kappa=1.0, beta=1.0, M=0.0, K=K, D=1.0, d=100, theta=theta, x=worst(r)[1], sigma2=worst(r)[0], init_gap=1.0
        )
        for r in rls
    ]
    assert np.all(np.diff(rate) < 0) and np.all(np.diff(err) < 0)


def test_theorem5_exact_value_for_uniform_sampling() -> None:
    n, K, T = 4, 2, 2
    theta = np.full(n, 0.25)
    x = np.full((T, n), 0.25)
    s2 = np.full((T, n), 0.5)
    eta, mu, kappa, beta, M, D, d = 0.1, 0.5, 1.0, 2.0, 0.3, 1.5, 3
    q = 1 - mu * eta * kappa
    inner = M * n * eta + n * (0.0625 * D**2 / (K * 0.25) + (1 / (K * 0.25) + eta) * d * 0.0625 * 0.5)
    want = q**T * 1.0 + beta * eta / 2 * (1 + q) * inner
    got = bound_thm5_rate(T=T, eta=eta, mu=mu, kappa=kappa, beta=beta, M=M, K=K, D=D, d=d, theta=theta, x=x, sigma2=s2, init_gap=1.0)
    assert got == pytest.approx(want, rel=1e-12)
