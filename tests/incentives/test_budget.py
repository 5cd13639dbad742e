"""Theorem 7 and the adaptive sampling ratio (spec §3.10, A12): acceptance check 7."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fedgame.incentives.fedpcs import (
    adaptive_k,
    adaptive_schedule,
    budget_binding_cost,
    linear_budget,
    theorem7,
)


def _random_case(rng: np.random.Generator) -> tuple[float, float, float, float, float]:
    # the ranges of spec A12
    return (rng.uniform(0.1, 3.0), rng.uniform(0.0, 2.0) + 1e-3, rng.uniform(0.5, 50.0), rng.uniform(0.1, 0.9), rng.uniform(100.0, 700.0))


def test_closed_form_equals_numerical_minimiser_of_the_binding_cost() -> None:
    """Acceptance 7: (40)-(41) = minimize_scalar on C(R) = B[v/(GR+H)² + (1−γ)R] to 1e-7."""
    rng = np.random.default_rng(0)
    checked = 0
    while checked < 25:
        G, H, v, gamma, B = _random_case(rng)
        res = theorem7(G, H, v, gamma, B, N=1000)
        if res.corner:
            continue
        checked += 1
        assert res.rho_star > H and not res.slack
        ref = minimize_scalar(
            lambda R: budget_binding_cost(R, G, H, v, gamma, B),
            bounds=(0.0, 10 * res.R_star + 10),
            method="bounded",
            options={"xatol": 1e-14},
        )
        assert res.R_star == pytest.approx(ref.x, rel=1e-7)
        assert res.rho_star == pytest.approx(G * ref.x + H, rel=1e-7)
        assert res.K_continuous == pytest.approx(B / res.rho_star, rel=1e-12)


def test_corner_case_gives_zero_reward() -> None:
    """ρ* < H ⇒ R* = 0 (the numerical minimiser sits at R = 0) and ρ* := H."""
    rng = np.random.default_rng(1)
    corners = 0
    for _ in range(200):
        G, H, v, gamma, B = _random_case(rng)
        H += 3.0  # make corners common
        res = theorem7(G, H, v, gamma, B, N=1000)
        if not res.corner:
            continue
        corners += 1
        assert res.R_star == 0.0 and res.rho_star == H
        ref = minimize_scalar(
            lambda R: budget_binding_cost(R, G, H, v, gamma, B), bounds=(0.0, 50.0), method="bounded", options={"xatol": 1e-12}
        )
        assert ref.x == pytest.approx(0.0, abs=1e-6)
    assert corners > 10
    # no reaction at all (G = 0) is a corner too
    assert theorem7(0.0, 2.0, 5.0, 0.5, 100.0, 10).corner


def test_adaptive_k_respects_the_budget() -> None:
    """K_t = clip(floor(B_t/ρ*), 1, N) and K_t ρ* ≤ B_t whenever B_t ≥ ρ*."""
    rng = np.random.default_rng(2)
    for _ in range(2000):
        rho = rng.uniform(0.01, 12.0)
        B = rho * rng.uniform(1.0, 300.0)
        N = int(rng.integers(1, 200))
        K = adaptive_k(B, rho, N)
        assert K == min(max(int(np.floor(B / rho)), 1), N) or K * rho <= B
        assert 1 <= K <= N and K * rho <= B * (1 + 1e-15)
    # exact multiples do not round up
    assert adaptive_k(0.3, 0.1, 100) * 0.1 <= 0.3
    assert adaptive_k(700.0, 7.0, 100) == 100 and adaptive_k(700.0, 7.0, 50) == 50
    with pytest.raises(ValueError, match="budget: must be >= rho\\*"):
        adaptive_k(0.5, 1.0, 10)
    assert adaptive_k(0.5, 1.0, 10, strict=False) == 1


def test_theorem7_integer_k_and_slack_budget() -> None:
    res = theorem7(1.0, 0.5, 20.0, 0.5, 300.0, N=100)
    assert res.K == int(np.floor(300.0 / res.rho_star)) and res.K * res.rho_star <= 300.0
    assert res.tau == pytest.approx(res.K / 100)
    slack = theorem7(1.0, 0.5, 20.0, 0.5, 1e5, N=10, rho_max=12.0)
    assert slack.slack and slack.K == 10 and slack.tau == 1.0
    # fixed-K problem: N (G R + H) ≤ B and its own minimiser
    ref = minimize_scalar(lambda R: 20.0 / (R + 0.5) + 0.5 * R * (R + 0.5), bounds=(0.0, 11.5), method="bounded", options={"xatol": 1e-12})
    assert slack.R_star == pytest.approx(ref.x, rel=1e-6)


def test_schedule_follows_a_decreasing_budget() -> None:
    """Algorithm 3 with homogeneous averages: τ(t) non-increasing as B_t decreases
    (constant G, H, v), and every round within budget."""
    T = 29
    B = linear_budget(T, 700.0, 300.0)
    assert B[0] == 700.0 and B[-1] == 300.0 and np.all(np.diff(B) < 0)
    n = 100
    G = np.full((n, T + 1), 0.8)
    H = np.full((n, T + 1), 2.0)
    P = np.full((n, T + 1), 0.2)
    sched = adaptive_schedule(G, H, P, 30.0, 0.5, B)
    assert np.all(np.diff(sched.tau) <= 0)
    assert np.all(sched.K * sched.rho_star <= B + 1e-9)
    assert sched.reward[0] == sched.reward[1]


def test_rho_star_is_held_within_rho_max() -> None:
    """Spec §7 R2: no round asks more than ρ_H of a client. The binding cost is convex in R,
    so the capped answer ρ* = ρ_H, R* = (ρ_H − H)/G is the constrained minimiser."""
    G, H, v, gamma, B = 0.4, 1.0, 5000.0, 0.5, 700.0
    free = theorem7(G, H, v, gamma, B, N=100)
    assert free.rho_star > 12.0 and not free.capped  # the paper's closed form: 21.5
    res = theorem7(G, H, v, gamma, B, N=100, rho_max=12.0, rho_min=0.01)
    assert res.capped and res.rho_star == 12.0
    assert res.R_star == pytest.approx((12.0 - H) / G, rel=1e-12)
    assert res.K == int(np.floor(B / 12.0)) and res.K * res.rho_star <= B
    hi = (12.0 - H) / G
    grid = np.linspace(0.0, hi, 2001)
    best = budget_binding_cost(res.R_star, G, H, v, gamma, B)
    assert best <= min(budget_binding_cost(float(R), G, H, v, gamma, B) for R in grid) + 1e-9
    sched = adaptive_schedule(np.full((3, 4), G), np.full((3, 4), H), np.full((3, 4), 0.5), v, gamma, B, rho_max=12.0)
    assert np.all(sched.rho_star <= 12.0)
