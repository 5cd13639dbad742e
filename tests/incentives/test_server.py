"""Server side (spec §3.5, §3.8): cost, Lemma-2 affine response and the reward
(acceptance check 6), and the outer Stackelberg loop."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fedgame.incentives.fedpcs import (
    accuracy_weights,
    affine_response,
    inclusion_probability,
    mean_field,
    optimal_reward,
    reward_fixed_point,
    reward_interval,
    server_cost,
    stackelberg,
    surrogate_cost,
    surrogate_cost_derivative,
    surrogate_cost_second_derivative,
)

GAMMA = 0.5


def test_accuracy_weights_and_server_cost_exact_values() -> None:
    v = accuracy_weights(3, gamma=0.4, sizes=[100, 300], acc_scale=2.0)
    np.testing.assert_allclose(v, 0.4 * 2.0 / 400**2 / np.arange(1, 5))
    np.testing.assert_allclose(accuracy_weights(2, gamma=0.5), [0.5, 0.25, 0.5 / 3])
    rho = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    R = np.array([1.0, 2.0, 0.5])
    v = np.array([0.3, 0.2, 0.1])
    cost = server_cost(rho, R, 2, 1, v, gamma=0.25)
    phi = rho.mean(axis=0)
    P = inclusion_probability(rho, phi, 2, 1)  # = ρ / Σρ for K = 1
    np.testing.assert_allclose(P, rho / rho.sum(axis=0))
    np.testing.assert_allclose(cost, (P * (v / rho + 0.75 * R * rho)).sum(axis=0))


def _random_round(rng: np.random.Generator, n: int = 7) -> tuple[np.ndarray, ...]:
    G = rng.uniform(0.0, 2.0, n) * (rng.uniform(size=n) < 0.8)
    H = rng.uniform(1.0, 6.0, n)
    P = rng.uniform(0.05, 0.9, n)
    v = np.full(n, rng.uniform(1.0, 400.0))
    return G, H, P, v


def test_surrogate_derivatives_match_finite_differences_and_convexity() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        G, H, P, v = _random_round(rng)
        R = rng.uniform(0.0, 3.0)
        h = 1e-6
        d1 = surrogate_cost_derivative(R, G, H, P, v, GAMMA)
        fd1 = (surrogate_cost(R + h, G, H, P, v, GAMMA) - surrogate_cost(R - h, G, H, P, v, GAMMA)) / (2 * h)
        assert d1 == pytest.approx(fd1, rel=1e-6, abs=1e-6)
        d2 = surrogate_cost_second_derivative(R, G, H, P, v, GAMMA)
        fd2 = (surrogate_cost_derivative(R + h, G, H, P, v, GAMMA) - surrogate_cost_derivative(R - h, G, H, P, v, GAMMA)) / (2 * h)
        assert d2 >= 0 and d2 == pytest.approx(fd2, rel=1e-5, abs=1e-6)


def _check_reward(G: np.ndarray, H: np.ndarray, P: np.ndarray, v: np.ndarray, R_max: float = 100.0) -> str:
    """Acceptance 6 for one round; returns where the minimiser sits."""
    sol = optimal_reward(G, H, P, v, GAMMA, R_max=R_max)
    lo, hi = reward_interval(G, H, R_max=R_max)
    assert (sol.lower, sol.upper) == (lo, hi)
    if sol.degenerate:
        assert sol.reward == 0.0
        return "degenerate"
    R = sol.reward
    d = surrogate_cost_derivative(R, G, H, P, v, GAMMA)
    rho = G * R + H
    scale = float(np.sum(P * ((1 - GAMMA) * (2 * G * R + H) + v * G / rho**2)))
    if sol.at_bound == "":
        assert abs(d) <= 1e-8 * scale
        # the fixed-point form (22)
        assert reward_fixed_point(R, G, H, P, v, GAMMA) == pytest.approx(R, rel=1e-6, abs=1e-9)
    elif sol.at_bound == "lower":
        assert R == lo and d >= -1e-8 * scale
    else:
        assert R == hi and d <= 1e-8 * scale
    # a grid search over the feasible interval finds nothing better
    grid = np.linspace(lo, hi, 20001)
    rho_g = G[None, :] * grid[:, None] + H[None, :]
    vals = (P * (v / rho_g + (1 - GAMMA) * grid[:, None] * rho_g)).sum(axis=1)
    best = surrogate_cost(R, G, H, P, v, GAMMA)
    assert best <= vals.min() + 1e-12 * abs(vals.min())
    assert abs(grid[np.argmin(vals)] - R) <= 2 * (hi - lo) / 20000 + 1e-9
    # and SciPy's bounded minimiser agrees
    ref = minimize_scalar(lambda x: surrogate_cost(x, G, H, P, v, GAMMA), bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    assert best <= ref.fun + 1e-12 * abs(ref.fun)
    return sol.at_bound or "interior"


def test_optimal_reward_on_random_rounds() -> None:
    rng = np.random.default_rng(1)
    where = {_check_reward(*_random_round(rng), R_max=rng.choice([5.0, 100.0])) for _ in range(30)}
    assert {"interior", "lower"} <= where


def test_optimal_reward_degenerate_cases() -> None:
    H = np.array([2.0, 3.0])
    sol = optimal_reward(np.zeros(2), H, np.ones(2), np.ones(2), GAMMA)
    assert sol.degenerate and sol.reward == 0.0
    # G R + H must stay ≤ ρ_H: the upper end is (ρ_H − H)/G
    lo, hi = reward_interval(np.array([0.5, 0.0]), H, rho_max=12.0)
    assert (lo, hi) == (0.0, 20.0)


@pytest.fixture(scope="module")
def equilibrium() -> tuple:
    rng = np.random.default_rng(5)
    rho0 = rng.uniform(0.5, 10.0, 10)
    varphi = rng.uniform(0.1, 0.9, 10)
    R = np.full(6, 1.5)
    mf = mean_field(rho0, varphi, R, 3, 5)
    return rho0, varphi, R, mf


def test_lemma2_coefficients_at_equilibrium(equilibrium: tuple) -> None:
    """Acceptance 6: G ≥ 0; G R + H reproduces ρ at the iterate; bound α ⇒ G = 0."""
    rho0, varphi, R, mf = equilibrium
    aff = affine_response(mf.alpha, mf.rho, mf.phi, R, varphi, 10, 3)
    assert np.all(aff.G >= 0)
    np.testing.assert_allclose(aff.G * R + aff.H, mf.rho, atol=1e-9)
    on_bound = (mf.alpha[:, :-1] <= 1e-9) | (mf.alpha[:, :-1] >= 1 - 1e-9)
    assert np.all(aff.G[:, 1:][on_bound] == 0.0)
    assert np.any(aff.G > 0)
    np.testing.assert_allclose(aff.P, inclusion_probability(mf.rho, mf.phi, 10, 3))


@pytest.mark.parametrize("acc_scale", [1.0, 1e3, 1e5])
def test_reward_per_round_at_equilibrium(equilibrium: tuple, acc_scale: float) -> None:
    rho0, varphi, R, mf = equilibrium
    aff = affine_response(mf.alpha, mf.rho, mf.phi, R, varphi, 10, 3)
    v = accuracy_weights(5, gamma=GAMMA, acc_scale=acc_scale)
    for t in range(1, 6):
        _check_reward(aff.G[:, t], aff.H[:, t], aff.P[:, t], np.full(10, v[t]))


def test_stackelberg_outer_loop_is_self_consistent() -> None:
    rng = np.random.default_rng(8)
    rho0 = rng.uniform(0.5, 10.0, 6)
    varphi = rng.uniform(0.2, 0.8, 6)
    v = accuracy_weights(3, gamma=GAMMA, acc_scale=200.0)
    res = stackelberg(rho0, varphi, 2, 3, v=v, gamma=GAMMA, R_init=1.0, server_solver="lemma2")
    assert res.solver == "lemma2" and res.converged and res.reward_residual <= 1e-6
    assert res.mean_field.residual <= 1e-7
    assert res.reward[0] == res.reward[1]  # R_0 := R_1 (A7)
    # each R_t is the surrogate minimiser at the returned equilibrium
    for t in range(1, 4):
        sol = optimal_reward(
            res.G[:, t], res.H[:, t], inclusion_probability(res.mean_field.rho[:, t], res.mean_field.phi[t], 6, 2), np.full(6, v[t]), GAMMA
        )
        assert sol.reward == pytest.approx(res.reward[t], rel=2e-6, abs=2e-6)
    np.testing.assert_allclose(res.cost, server_cost(res.mean_field.rho, res.reward, 6, 2, v, gamma=GAMMA, phi=res.mean_field.phi))
