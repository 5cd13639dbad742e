"""Mean-field fixed point (spec §3.7, A6): acceptance check 5."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.games import PAPER_MF_TOL, best_response, mean_field


def _population(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rho0 = rng.uniform(0.01, 12.0, n)
    varphi = np.clip(rng.uniform(0.0, 1.0, n), 1e-3, 1 - 1e-3)  # spec A14
    return rho0, varphi


@pytest.fixture(scope="module")
def a6() -> tuple[np.ndarray, np.ndarray, object]:
    rho0, varphi = _population(0, 8)
    return rho0, varphi, mean_field(rho0, varphi, 2.0, 2, 6, update="picard")


def test_a6_instance_residual_history(a6: tuple) -> None:
    """Spec A6 (N = 8, K = 2, T = 6, seed 0, R ≡ 2), undamped Picard: residuals 0.29, 0.18,
    0.063, 0.014, 2.2e-3, 3.6e-4, …, 3.4e-7 at iteration 11, 5e-8 at 12."""
    _, _, mf = a6
    h = mf.history
    for m, quoted in [(0, 0.29), (1, 0.18), (2, 0.063), (3, 0.014), (4, 2.2e-3), (5, 3.6e-4),
                      (11, 3.4e-7)]:
        assert h[m] == pytest.approx(quoted, rel=0.05), (m, h[m])
    assert mf.iterations == 13 and h[12] <= 1e-7
    assert mf.converged and mf.beta == 1.0


def test_fixed_point_residual_and_pinned_initial_mean(a6: tuple) -> None:
    """Acceptance 5: max_t |φ(t) − mean_i ρ_i^t| ≤ 1e-7 at return, φ(0) = mean ρ^0."""
    rho0, varphi, mf = a6
    assert mf.residual <= 1e-7
    assert np.max(np.abs(mf.phi - mf.rho.mean(axis=0))) <= 1e-7
    assert mf.phi[0] == pytest.approx(rho0.mean(), rel=1e-15)
    assert np.all(mf.alpha[:, -1] == 0.0) and np.all(mf.kkt_residual <= 1e-7)
    assert mf.phi_history.shape == (mf.iterations, 7)
    assert mf.full_solves >= 1
    assert mf.pinned.size == 0 and np.all(mf.regret == 0.0)  # an exact Nash profile


def test_fixed_point_is_a_best_response_profile(a6: tuple) -> None:
    """Independent check: the public best_response to the returned φ reproduces φ."""
    rho0, varphi, mf = a6
    br = best_response(rho0, varphi, mf.phi, 2.0, 8, 2, n_starts=12,
                       rng=np.random.default_rng(99))
    np.testing.assert_allclose(br.utility, mf.utility, rtol=1e-9)
    assert np.max(np.abs(br.rho.mean(axis=0) - mf.phi)) <= 1e-7


def test_independent_of_initial_guess_and_of_vectorisation() -> None:
    """Acceptance 5: same fixed point (1e-6) from another φ_0 and when solving client by
    client; and with the complete multi-start at every iteration."""
    rho0, varphi = _population(3, 10)
    R = np.linspace(1.0, 3.0, 6)
    base = mean_field(rho0, varphi, R, 3, 5)
    other = mean_field(rho0, varphi, R, 3, 5,
                       phi_init=np.linspace(rho0.mean(), 2 * rho0.mean(), 6))
    percl = mean_field(rho0, varphi, R, 3, 5, vectorize=False)
    every = mean_field(rho0, varphi, R, 3, 5, restarts="every")
    picard = mean_field(rho0, varphi, R, 3, 5, update="picard")
    for res in (base, other, percl, every, picard):
        assert res.converged and res.residual <= 1e-7
        np.testing.assert_allclose(res.phi, base.phi, atol=1e-6)
        np.testing.assert_allclose(res.alpha, base.alpha, atol=1e-5)
    assert every.full_solves == every.iterations


def test_picard_consistent_and_anderson_reach_the_same_fixed_point() -> None:
    """update="picard" (spec §3.7), "consistent" (default, Eq. 15 mean trajectory) and
    Anderson mixing change the path, not the fixed point; "consistent" needs far fewer
    iterations."""
    rho0, varphi = _population(4, 12)
    picard = mean_field(rho0, varphi, 1.5, 4, 8, update="picard")
    consistent = mean_field(rho0, varphi, 1.5, 4, 8)
    anderson = mean_field(rho0, varphi, 1.5, 4, 8, update="picard", acceleration="anderson")
    for res in (picard, consistent, anderson):
        assert res.converged and res.residual <= 1e-7
        np.testing.assert_allclose(res.phi, picard.phi, atol=1e-6)
        np.testing.assert_allclose(res.alpha, picard.alpha, atol=1e-5)
    assert consistent.iterations < picard.iterations


def test_paper_tolerance_and_identical_clients() -> None:
    """ε_0 = 1e-3 (paper) stops earlier; identical clients give ρ ≡ φ ≡ ρ^0."""
    rho0, varphi = _population(5, 8)
    loose = mean_field(rho0, varphi, 2.0, 2, 6, tol=PAPER_MF_TOL, update="picard")
    tight = mean_field(rho0, varphi, 2.0, 2, 6, update="picard")
    assert loose.residual <= 1e-3 and loose.iterations <= tight.iterations
    same = mean_field(np.full(5, 3.0), np.full(5, 0.4), 2.0, 2, 4)
    np.testing.assert_allclose(same.phi, 3.0, atol=1e-12)
    np.testing.assert_allclose(same.rho, 3.0, atol=1e-12)
