"""The game under the uniform sampling rule (spec A15: the clients of the Random baseline),
checked against its closed-form P and against optimisers that do not use the library's solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime, minimize

from fedgame.incentives.fedpcs import (
    best_response,
    client_utility,
    client_utility_gradient,
    inclusion_probability,
    inclusion_probability_derivative,
    mean_field,
    server_cost,
    stackelberg,
)

from ._helpers import random_instance


def test_uniform_rule_gives_constant_inclusion_and_zero_derivative() -> None:
    rho = np.array([[0.5, 3.0], [9.0, 11.0]])
    phi = np.array([4.0, 5.0])
    P = inclusion_probability(rho, phi, 10, 3, inclusion="uniform")
    dP = inclusion_probability_derivative(rho, phi, 10, 3, inclusion="uniform")
    np.testing.assert_allclose(P, 1 - 0.9**3, rtol=1e-14)
    assert np.all(dP == 0.0)
    # the default is the privacy-aware rule
    assert not np.allclose(inclusion_probability(rho, phi, 10, 3), 1 - 0.9**3)


def test_uniform_adjoint_gradient_matches_finite_differences() -> None:
    inst = random_instance(np.random.default_rng(3), n=1, N=10, K=3, T=6)
    a = np.random.default_rng(4).uniform(0.1, 0.9, inst.T)
    args = (inst.rho0[0], inst.varphi[0], inst.phi, inst.R, inst.N, inst.K)
    g = client_utility_gradient(a, *args, inclusion="uniform")
    fd = approx_fprime(a, lambda z: float(client_utility(z, *args, inclusion="uniform")), 1e-7)
    np.testing.assert_allclose(g, fd, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_uniform_best_response_beats_direct_optimisation(seed: int) -> None:
    inst = random_instance(np.random.default_rng(seed), n=3, N=10, K=3, T=5)
    br = best_response(inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K, inclusion="uniform")
    rng = np.random.default_rng(seed + 10)
    for i in range(3):
        args = (inst.rho0[i], inst.varphi[i], inst.phi, inst.R, inst.N, inst.K)
        best = -np.inf
        for _ in range(10):
            res = minimize(
                lambda z: -float(client_utility(z, *args, inclusion="uniform")),
                rng.uniform(0, 1, inst.T),
                method="L-BFGS-B",
                bounds=[(0, 1)] * inst.T,
            )
            best = max(best, -res.fun)
        assert br.utility[i] >= best - 1e-6 * max(1.0, abs(best))
        assert br.kkt_residual[i] <= 1e-7


def test_uniform_and_privacy_games_differ_and_uniform_cost_uses_constant_p() -> None:
    rng = np.random.default_rng(0)
    rho0, vp = rng.uniform(0.01, 12, 12), rng.uniform(0.05, 0.95, 12)
    R = np.full(5, 2.0)
    a = mean_field(rho0, vp, R, 3, 4, rng=0)
    b = mean_field(rho0, vp, R, 3, 4, rng=0, inclusion="uniform")
    assert a.converged and b.converged
    assert np.max(np.abs(a.rho - b.rho)) > 1e-3
    v = np.full(5, 0.3)
    P = 1 - (1 - 1 / 12) ** 3
    expected = (P * (v / b.rho + 0.5 * R * b.rho)).sum(axis=0)
    np.testing.assert_allclose(server_cost(b.rho, R, 12, 3, v, inclusion="uniform"), expected, rtol=1e-12)


def test_stackelberg_accepts_the_uniform_rule_and_rejects_unknown_rules() -> None:
    rng = np.random.default_rng(1)
    rho0, vp = rng.uniform(0.01, 12, 8), rng.uniform(0.05, 0.95, 8)
    res = stackelberg(rho0, vp, 2, 3, v=np.full(4, 50.0), inclusion="uniform", rng=0)
    assert res.converged
    with pytest.raises(ValueError, match="inclusion"):
        stackelberg(rho0, vp, 2, 3, v=np.full(4, 50.0), inclusion="poisson")
