"""FedPCS client formulas: exact values, the adjoint gradient (acceptance 1) and the Hessian."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.fedpcs import (
    client_utility,
    client_utility_gradient,
    client_utility_hessian,
    costate,
    inclusion_probability,
    inclusion_probability_derivative,
    inclusion_probability_second_derivative,
    kkt_residual,
    rho_next,
    stage_payoff,
    stationary_alpha,
    trajectory,
)
from tests.incentives._helpers import random_instance


def test_inclusion_probability_exact_values() -> None:
    # N = 10, φ = 5, K = 3, ρ = 2: x = 2/50 = 0.04, P = 1 − 0.96³
    assert inclusion_probability(2.0, 5.0, 10, 3) == pytest.approx(1 - 0.96**3, rel=1e-15)
    assert inclusion_probability_derivative(2.0, 5.0, 10, 3) == pytest.approx(3 / 50 * 0.96**2, rel=1e-14)
    assert inclusion_probability_second_derivative(2.0, 5.0, 10, 3) == pytest.approx(-3 * 2 / 50**2 * 0.96, rel=1e-14)
    # tiny x keeps full relative precision: P ≈ K x
    assert inclusion_probability(1e-12, 1.0, 1, 5) == pytest.approx(5e-12, rel=1e-9)
    # the cap x ≤ 1 (spec §3.3): ρ ≥ Nφ is always drawn, and P no longer moves
    assert inclusion_probability(30.0, 2.0, 10, 4) == 1.0
    assert inclusion_probability_derivative(30.0, 2.0, 10, 4) == 0.0
    # K = 1: P = x exactly
    assert inclusion_probability(3.0, 2.0, 10, 1) == pytest.approx(0.15, rel=1e-15)


def test_inclusion_probability_derivatives_match_finite_differences() -> None:
    rho = np.linspace(0.1, 9.0, 17)
    for N, K in [(10, 1), (10, 3), (100, 40), (3, 3)]:
        h = 1e-6
        fd = (inclusion_probability(rho + h, 4.0, N, K) - inclusion_probability(rho - h, 4.0, N, K)) / (2 * h)
        np.testing.assert_allclose(inclusion_probability_derivative(rho, 4.0, N, K), fd, rtol=1e-7, atol=1e-10)
        fd2 = (inclusion_probability_derivative(rho + h, 4.0, N, K) - inclusion_probability_derivative(rho - h, 4.0, N, K)) / (2 * h)
        np.testing.assert_allclose(inclusion_probability_second_derivative(rho, 4.0, N, K), fd2, rtol=1e-6, atol=1e-9)


def test_dynamics_and_payoff_exact_values() -> None:
    # Eq. 20: ρ' = (1 − α)φ + αρ
    assert rho_next(0.25, 2.0, 6.0) == pytest.approx(0.75 * 6 + 0.25 * 2)
    phi = np.array([5.0, 4.0, 3.0])
    rho = trajectory([0.5, 0.2], 2.0, phi)
    np.testing.assert_allclose(rho, [2.0, 3.5, 0.8 * 4 + 0.2 * 3.5])
    # α^T column is ignored by the dynamics
    np.testing.assert_allclose(trajectory([0.5, 0.2, 0.9], 2.0, phi), rho)
    g = stage_payoff(rho, [0.5, 0.2, 0.0], [2.0, 2.0, 2.0], 0.3)
    np.testing.assert_allclose(g, rho * 2 - 0.3 * rho**2 - 0.7 * np.array([0.25, 0.04, 0.0]))
    P = inclusion_probability(rho, phi, 10, 3)
    assert client_utility([0.5, 0.2], 2.0, 0.3, phi, 2.0, 10, 3) == pytest.approx(float(np.sum(P * g)), rel=1e-14)


def test_vectorised_formulas_equal_one_client_at_a_time() -> None:
    inst = random_instance(np.random.default_rng(3), n=5, N=10, K=3, T=6)
    a = np.random.default_rng(4).uniform(size=(5, 6))
    U = client_utility(a, inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    G = client_utility_gradient(a, inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    for i in range(5):
        args = (inst.rho0[i], inst.varphi[i], inst.phi, inst.R, inst.N, inst.K)
        assert client_utility(a[i], *args) == pytest.approx(U[i], rel=1e-14)
        np.testing.assert_allclose(client_utility_gradient(a[i], *args), G[i], rtol=1e-13, atol=1e-15)


def _fd_gradient(a: np.ndarray, args: tuple, h: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(a)
    for t in range(a.shape[1]):
        e = np.zeros_like(a)
        e[:, t] = h
        out[:, t] = (client_utility(a + e, *args) - client_utility(a - e, *args)) / (2 * h)
    return out


@pytest.mark.parametrize("T", [1, 5, 20])
@pytest.mark.parametrize("N", [2, 10, 100])
def test_adjoint_gradient_matches_central_differences(N: int, T: int) -> None:
    """Acceptance 1: adjoint gradient (Eqs. 49, 53-54, corrected M) = central FD, h = 1e-6,
    to 1e-6 absolute, for K ∈ {1, random, N}."""
    rng = np.random.default_rng(1000 * N + T)
    for K in sorted({1, int(rng.integers(1, N + 1)), N}):
        inst = random_instance(rng, n=3, N=N, K=K, T=T)
        a = rng.uniform(0.0, 1.0, (3, T))
        args = (inst.rho0, inst.varphi, inst.phi, inst.R, N, K)
        err = np.abs(client_utility_gradient(a, *args) - _fd_gradient(a, args)).max()
        assert err <= 1e-6, (K, err)


def test_gradient_with_explicit_terminal_alpha() -> None:
    inst = random_instance(np.random.default_rng(5), n=2, N=10, K=3, T=4)
    a = np.random.default_rng(6).uniform(size=(2, 5))  # includes α^T
    args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
    g = client_utility_gradient(a, *args)
    assert g.shape == (2, 5)
    np.testing.assert_allclose(g, _fd_gradient(a, args), atol=1e-6)


def _paper_gradient(a: np.ndarray, rho0: float, varphi: float, phi: np.ndarray, R: np.ndarray, N: int, K: int) -> np.ndarray:
    """Eq. (21)/(53) with the paper's M (missing the factor K/(Nφ)), spec A2."""
    T = a.size
    rho = trajectory(a, rho0, phi)
    af = np.r_[a, 0.0]
    x = rho / (N * phi)
    P = 1 - (1 - x) ** K
    dP = K / (N * phi) * (1 - x) ** (K - 1)
    Q = P + rho * dP
    M_paper = -2 * varphi * rho * P - (1 - x) ** (K - 1) * (varphi * rho**2 + (1 - varphi) * af**2)
    S = Q * R + M_paper
    lam = np.zeros(T + 1)
    lam[T] = S[T]
    for t in range(T - 1, -1, -1):
        lam[t] = af[t] * lam[t + 1] + S[t]
    return -2 * (1 - varphi) * P[:T] * a + lam[1:] * (rho[:T] - phi[:T])


def test_paper_m_without_k_over_n_phi_fails_the_gradient_check() -> None:
    """Spec A2: with the paper's M the 'gradient' misses FD by O(10); ours by < 1e-6."""
    rng = np.random.default_rng(0)
    worst_paper = 0.0
    for _ in range(3):
        inst = random_instance(rng, n=1, N=10, K=3, T=6)
        a = rng.uniform(size=(1, 6))
        args = (inst.rho0, inst.varphi, inst.phi, inst.R, inst.N, inst.K)
        fd = _fd_gradient(a, args)
        assert np.abs(client_utility_gradient(a, *args) - fd).max() < 1e-6
        paper = _paper_gradient(a[0], inst.rho0[0], inst.varphi[0], inst.phi, inst.R, 10, 3)
        worst_paper = max(worst_paper, float(np.abs(paper - fd[0]).max()))
    assert worst_paper > 1.0


def test_costate_is_the_derivative_of_the_tail_utility() -> None:
    """λ(t) = dU/dρ^t: perturb ρ^t (by shifting the dynamics) and difference the tail."""
    inst = random_instance(np.random.default_rng(8), n=1, N=10, K=4, T=5)
    a = np.random.default_rng(9).uniform(size=5)
    lam = costate(a, inst.rho0[0], inst.varphi[0], inst.phi, inst.R, inst.N, inst.K)
    # λ(0) = dU/dρ^0
    h = 1e-6
    up = client_utility(a, inst.rho0[0] + h, inst.varphi[0], inst.phi, inst.R, 10, 4)
    dn = client_utility(a, inst.rho0[0] - h, inst.varphi[0], inst.phi, inst.R, 10, 4)
    assert lam[0] == pytest.approx((up - dn) / (2 * h), abs=1e-6)


def test_hessian_matches_finite_differences_of_the_gradient() -> None:
    rng = np.random.default_rng(11)
    for N, K, T in [(10, 3, 6), (2, 1, 4), (50, 20, 8)]:
        inst = random_instance(rng, n=2, N=N, K=K, T=T)
        a = rng.uniform(size=(2, T))
        args = (inst.rho0, inst.varphi, inst.phi, inst.R, N, K)
        H = client_utility_hessian(a, *args)
        fd = np.zeros_like(H)
        h = 1e-6
        for t in range(T):
            e = np.zeros_like(a)
            e[:, t] = h
            fd[:, :, t] = (client_utility_gradient(a + e, *args) - client_utility_gradient(a - e, *args)) / (2 * h)
        np.testing.assert_allclose(H, fd, atol=1e-6 * max(1.0, np.abs(H).max()))
        np.testing.assert_allclose(H, H.transpose(0, 2, 1), atol=1e-12)


def test_kkt_residual_and_stationary_map() -> None:
    assert kkt_residual([0.0, 0.5, 1.0], [-3.0, 0.0, 2.0]) == 0.0
    assert kkt_residual([0.0, 0.5, 1.0], [0.2, 0.0, 0.0]) == pytest.approx(0.2)
    assert kkt_residual([0.2], [-5.0]) == pytest.approx(0.2)  # clipped at 0
    phi = np.full(4, 5.0)
    out = stationary_alpha([0.3, 0.3, 0.3], 2.0, 0.3, phi, 2.0, 10, 3)
    assert out.shape == (3,) and np.all((out >= 0) & (out <= 1))
