"""Mean-field fixed point (spec §3.7, A6): acceptance check 5."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.fedpcs import PAPER_MF_TOL, best_response, mean_field


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
    for m, quoted in [(0, 0.29), (1, 0.18), (2, 0.063), (3, 0.014), (4, 2.2e-3), (5, 3.6e-4), (11, 3.4e-7)]:
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
    br = best_response(rho0, varphi, mf.phi, 2.0, 8, 2, n_starts=12, rng=np.random.default_rng(99))
    np.testing.assert_allclose(br.utility, mf.utility, rtol=1e-9)
    assert np.max(np.abs(br.rho.mean(axis=0) - mf.phi)) <= 1e-7


def test_independent_of_initial_guess_and_of_vectorisation() -> None:
    """Acceptance 5: same fixed point (1e-6) from another φ_0 and when solving client by
    client; and with the complete multi-start at every iteration."""
    rho0, varphi = _population(3, 10)
    R = np.linspace(1.0, 3.0, 6)
    base = mean_field(rho0, varphi, R, 3, 5)
    other = mean_field(rho0, varphi, R, 3, 5, phi_init=np.linspace(rho0.mean(), 2 * rho0.mean(), 6))
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


def _heterogeneous(seed: int, n: int, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ρ^0 ~ U[0.01, 12], ϕ ~ U(0, 1) (unclipped) and a reward that varies over the rounds."""
    rng = np.random.default_rng(seed)
    rho0, varphi = rng.uniform(0.01, 12.0, n), rng.uniform(0.0, 1.0, n)
    t = np.arange(T + 1)
    return rho0, varphi, 1.5 + np.sin(t) + t / T  # R_t in [0.5, 3.5], R > 0


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_streamed_solver_returns_the_reference_equilibrium(n: int) -> None:
    """The streamed, batched best responses (``mean_field``) and the pre-streaming path kept
    as ``_mean_field_reference`` (chunked ``_solvers`` engines) are two implementations of
    one iteration: same equilibrium (φ, ρ, α, U) to 1e-6 on heterogeneous populations, after
    the same number of iterations."""
    from fedgame.incentives.fedpcs._mean_field import _mean_field_reference

    T = 30
    rho0, varphi, R = _heterogeneous(n, n, T)
    K = max(1, n // 5)
    new = mean_field(rho0, varphi, R, K, T, rng=0)
    ref = _mean_field_reference(rho0, varphi, R, K, T, rng=0)
    assert new.converged and ref.converged
    assert new.iterations == ref.iterations and new.full_solves == ref.full_solves
    for name in ("phi", "rho", "alpha", "utility"):
        np.testing.assert_allclose(getattr(new, name), getattr(ref, name), rtol=0, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(new.pinned, ref.pinned)


def test_streamed_solver_equals_the_client_by_client_reference() -> None:
    """… and the reference solved client by client (``vectorize=False``), as before."""
    from fedgame.incentives.fedpcs._mean_field import _mean_field_reference

    rho0, varphi, R = _heterogeneous(7, 10, 8)
    new = mean_field(rho0, varphi, R, 3, 8, rng=0)
    ref = _mean_field_reference(rho0, varphi, R, 3, 8, rng=0, vectorize=False)
    assert new.converged and ref.converged
    for name in ("phi", "rho", "alpha", "utility"):
        np.testing.assert_allclose(getattr(new, name), getattr(ref, name), rtol=0, atol=1e-6, err_msg=name)


def test_streamed_engines_repeat_the_reference_iterations() -> None:
    """Problem by problem, the streamed Newton repeats ``_solvers.newton`` to the last bit
    whatever the window (refills included); the streamed sweep repeats
    ``_solvers.damped_sweep`` except that a converged problem stops at once (≲ tol/ω)."""
    from fedgame.incentives.fedpcs import _solvers
    from fedgame.incentives.fedpcs._best_response import _newton_stream, _sweep_stream

    rng = np.random.default_rng(3)
    T, m = 12, 300
    rho0, varphi = rng.uniform(0.01, 12.0, m), rng.uniform(0.0, 1.0, m)
    phi, R = rng.uniform(2.0, 8.0, T + 1), rng.uniform(0.5, 3.0, T + 1)
    a0 = rng.uniform(size=(T, m))
    a0[:, :50] = 0.0
    a0[:, 50:100] = 1.0
    want = _solvers.newton(a0, rho0, varphi, phi, R, 50, 10)
    for window in (37, 8192):
        got = _newton_stream(a0, rho0, varphi, phi, R, 50, 10, window=window)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)
    swept = _solvers.damped_sweep(a0, rho0, varphi, phi, R, 50, 10, damping=0.05, iters=500)
    streamed = _sweep_stream(a0, rho0, varphi, phi, R, 50, 10, damping=0.05, iters=500, window=64)
    np.testing.assert_allclose(streamed, swept, rtol=0, atol=1e-8)


def test_first_distinct_matches_numpy_unique() -> None:
    """The archive's de-duplication equals ``np.unique(axis=0)``'s first occurrences (keys
    compared in blocks of 7 pairs here, so that several blocks run)."""
    from fedgame.incentives.fedpcs import _kernels
    from fedgame.incentives.fedpcs._kernels import _first_distinct, _key_hash

    rng = np.random.default_rng(1)
    for P, T in [(0, 4), (1, 4), (50, 3), (5000, 30)]:
        owner = np.sort(rng.integers(0, max(1, P // 10), P))
        key = rng.integers(0, 3, (T, P)).astype(float)
        key[:, ::7] *= -0.0  # −0 and 0 are the same key
        want = np.empty(0, dtype=np.intp)
        if P:
            _, want = np.unique(np.column_stack([owner, key.T]), axis=0, return_index=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_kernels, "_PAIR_BLOCK", 7)
            got = _first_distinct(owner, _key_hash(key, 1.0), lambda q: key[:, q])
        np.testing.assert_array_equal(got, np.sort(want))
