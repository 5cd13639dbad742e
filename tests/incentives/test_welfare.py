"""Welfare and price of anarchy (spec §3.9, A11): acceptance check 8."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedgame.incentives.fedpcs import (
    mean_field,
    paper_poa_privacy_aware,
    paper_theorem6_bound,
    paper_theorem6_limit,
    poa_random_lower_bounds,
    price_of_anarchy,
    social_optimum,
    social_welfare,
    social_welfare_per_round,
    welfare_privacy_worst,
    welfare_random_worst,
)


def test_social_welfare_exact_values() -> None:
    rho = np.array([[1.0, 2.0], [3.0, 4.0]])
    R = np.array([2.0, 1.0])
    varphi = np.array([0.5, 0.25])
    per_round = social_welfare_per_round(rho, R, varphi)
    np.testing.assert_allclose(per_round, [(2 - 0.5) + (6 - 0.25 * 9), (2 - 0.5 * 4) + (4 - 0.25 * 16)])
    assert social_welfare(rho, R, varphi) == pytest.approx(per_round.sum())


def test_social_optimum_dominates_random_budgets_and_matches_scipy() -> None:
    """SW^opt ≥ SW(ρ) for any ρ; Eq. (32) = SW at ρ = R/(2ϕ); bounded optimum = numerical."""
    rng = np.random.default_rng(0)
    for _ in range(10):
        n, T = 5, 4
        R = rng.uniform(0.0, 4.0, T + 1)
        varphi = rng.uniform(0.05, 0.95, n)
        opt = social_optimum(R, varphi)
        np.testing.assert_allclose(opt.rho, R / (2 * varphi[:, None]))
        assert opt.welfare == pytest.approx(social_welfare(opt.rho, R, varphi), rel=1e-12)
        assert opt.welfare == pytest.approx(0.25 * np.sum(R**2) * np.sum(1 / varphi))
        bopt = social_optimum(R, varphi, bounded=True)
        for _ in range(50):
            rho = rng.uniform(0.01, 12.0, (n, T + 1))
            sw = social_welfare(rho, R, varphi)
            assert opt.welfare >= sw and bopt.welfare >= sw
        ref = minimize(
            lambda z: -social_welfare(z.reshape(n, T + 1), R, varphi),
            np.full(n * (T + 1), 1.0),
            method="L-BFGS-B",
            bounds=[(0.01, 12.0)] * (n * (T + 1)),
            options={"ftol": 1e-15, "gtol": 1e-12},
        )
        assert bopt.welfare == pytest.approx(-ref.fun, rel=1e-8)
        assert bopt.welfare >= -ref.fun - 1e-12


def test_poa_at_least_one_at_an_equilibrium_and_infinite_without_welfare() -> None:
    rng = np.random.default_rng(1)
    rho0 = rng.uniform(0.01, 12.0, 8)
    varphi = rng.uniform(0.1, 0.9, 8)
    R = np.full(5, 2.0)
    mf = mean_field(rho0, varphi, R, 3, 4)
    sw = social_welfare(mf.rho, R, varphi)
    poa = price_of_anarchy(mf.rho, R, varphi)
    if sw > 0:
        assert poa >= 1.0
        assert poa == pytest.approx(social_optimum(R, varphi).welfare / sw)
    for _ in range(200):
        rho = rng.uniform(0.01, 12.0, (8, 5))
        p = price_of_anarchy(rho, R, varphi)
        if social_welfare(rho, R, varphi) > 0:
            assert p >= 1.0
        else:
            assert p == np.inf
    # spec A16: ρ^0 = 9, ϕ = 0.7 keeps a negative utility; SW ≤ 0 ⇒ PoA = +inf
    assert price_of_anarchy(np.full((2, 3), 12.0), [1.0, 1.0, 1.0], [0.9, 0.9]) == np.inf


def test_proposition4_bound_holds_when_random_welfare_is_positive() -> None:
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(300):
        n, T = int(rng.integers(1, 20)), int(rng.integers(0, 10))
        R = rng.uniform(0.0, 5.0, T + 1)
        varphi = rng.uniform(0.01, 0.99, n)
        rho_min = rng.uniform(0.001, 1.0)
        sw_rand = welfare_random_worst(R, varphi, rho_min)
        assert sw_rand == pytest.approx(social_welfare(np.full((n, T + 1), rho_min), R, varphi))
        if sw_rand <= 0:
            continue
        hits += 1
        b1, b2 = poa_random_lower_bounds(R, varphi, rho_min)
        poa = social_optimum(R, varphi).welfare / sw_rand
        assert poa >= b1 * (1 - 1e-12) and b1 >= b2 * (1 - 1e-12)
    assert hits > 100


def test_a11_counterexample() -> None:
    """N = 10, T = 0, R_0 = 1, ϕ = 0.5, ρ_H = 12: SW^opt = 5, SW^pri = −600, the paper's
    PoA^pri = −0.0083 < 0 while the claimed limit bound is 1.0; Prop. 4 with ρ_L = 0.01:
    SW^rand = 0.0995, PoA^rand = 50.25 ≥ 50.0."""
    R, varphi = [1.0], np.full(10, 0.5)
    assert social_optimum(R, varphi).welfare == pytest.approx(5.0)
    assert welfare_privacy_worst(R, varphi, 12.0) == pytest.approx(-600.0)
    assert paper_poa_privacy_aware(R, varphi, 12.0) == pytest.approx(-5 / 600)
    assert paper_poa_privacy_aware(R, varphi, 12.0) < 0
    assert paper_theorem6_limit(R, varphi) == pytest.approx(1.0)
    assert paper_theorem6_bound(R, varphi, 12.0) == pytest.approx(20 / (2 * (10 - 5 / 12)))
    assert price_of_anarchy(np.full((10, 1), 12.0), R, varphi) == np.inf
    assert welfare_random_worst(R, varphi, 0.01) == pytest.approx(0.0995)
    b1, _ = poa_random_lower_bounds(R, varphi, 0.01)
    assert b1 == pytest.approx(50.0)
    assert 5.0 / 0.0995 == pytest.approx(50.25, abs=5e-3) and 5.0 / 0.0995 >= b1
