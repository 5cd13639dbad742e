"""The compiled recursions of the client problem (``_kernels``) against their NumPy form, and
the threaded best responses against the single-threaded ones: both to the last bit."""

from __future__ import annotations

import numpy as np
import pytest

from fedgame.incentives.games import _best_response as br
from fedgame.incentives.games import _kernels, mean_field
from fedgame.incentives.games._mean_field import MeanFieldSolverOptions

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="numba is not installed")


def _strided(rng: np.random.Generator, rows: int, m: int) -> np.ndarray:
    """A (rows, m) view of a wider buffer, as the solvers' workspaces hand out."""
    return rng.uniform(-2.0, 2.0, (rows, m + 5))[:, :m]


@compiled
def test_trajectory_and_costate_equal_their_numpy_form() -> None:
    rng = np.random.default_rng(0)
    T, m = 17, 301
    a, S = rng.uniform(size=(T, m)), _strided(rng, T + 1, m)
    rho0, phi = rng.uniform(0.01, 12.0, m), rng.uniform(1.0, 8.0, T + 1)
    got, want = np.empty((T + 1, m)), np.empty((T + 1, m))
    _kernels.trajectory(a, rho0, phi, got)
    _kernels._trajectory_py(a, rho0, phi, want)
    np.testing.assert_array_equal(got, want)
    _kernels.costate(a, S, got)
    _kernels._costate_py(a, S, want)
    np.testing.assert_array_equal(got, want)


@compiled
def test_riccati_pass_equals_its_numpy_form() -> None:
    """Bound variables, negative and tiny pivots included (the floor and |Q_uu| branches)."""
    rng = np.random.default_rng(1)
    T, m = 23, 513
    a = rng.uniform(size=(T, m))
    B, cP, W = _strided(rng, T, m), rng.uniform(0.0, 2.0, (T, m)), _strided(rng, T, m)
    S, f2 = _strided(rng, T + 1, m), _strided(rng, T + 1, m) * 50.0
    cP[:, :40] = 0.0
    B[:, 40:80] = 0.0
    bound = rng.uniform(size=(T, m)) < 0.2
    out = [np.empty((T, m)) for _ in range(6)]
    _kernels.riccati(a, B, cP, W, S, f2, bound, *out[:3])
    _kernels._riccati_py(a, B, cP, W, S, f2, bound, *out[3:])
    for got, want in zip(out[:3], out[3:], strict=True):
        np.testing.assert_array_equal(got, want)


def test_threaded_mean_field_is_bit_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """The best responses split over 3 threads (the split lowered so that even the warm
    iterations are split) give the single-threaded equilibrium to the last bit."""
    monkeypatch.setattr(br, "_PER_THREAD", 16)
    rng = np.random.default_rng(5)
    n, T = 120, 10
    rho0, varphi = rng.uniform(0.01, 12.0, n), rng.uniform(0.01, 0.99, n)
    one = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=1)
    three = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=3)
    assert one.converged
    for name in ("phi", "alpha", "rho", "utility", "kkt_residual"):
        np.testing.assert_array_equal(getattr(three, name), getattr(one, name), err_msg=name)
    uni = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=3,
                     inclusion="uniform")  # the sampling rule reaches the threads
    ref = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=1,
                     inclusion="uniform")
    np.testing.assert_array_equal(uni.phi, ref.phi)
    assert not np.array_equal(uni.phi, one.phi)


@pytest.mark.parametrize("bad", [0, 257, 1.5, True])
def test_threads_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"threads: must be None or an integer in \[1, 256\]"):
        MeanFieldSolverOptions(threads=bad)  # type: ignore[arg-type]


def test_the_equilibria_of_the_solver_before_the_speed_work() -> None:
    """N ≤ 10³, T = 20-30, random rewards, both sampling rules: φ and every client's utility
    as the solver gave them before it was compiled and threaded (written by that solver, at
    commit 7069ab5, into tests/incentives/data/mean_field_before.json; today's solver gives
    the same bits), to 1e-6. These instances have ties (up to
    85 of 1000 clients pinned, an ε-Nash equilibrium), so the answer depends on the path of
    the iteration: a change of path, not only of arithmetic, fails this test."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "mean_field_before.json").read_text())
    for case in data["cases"]:
        n, T = case["n"], case["T"]
        rng = np.random.default_rng(case["seed"])
        rho0, varphi = rng.uniform(0.01, 12.0, n), np.clip(rng.uniform(0, 1, n), 1e-3, 1 - 1e-3)
        R = rng.uniform(0.2, 2.0, T + 1)
        mf = mean_field(rho0, varphi, R, max(1, n // 5), T, rng=0, inclusion=case["inclusion"])
        assert mf.converged
        np.testing.assert_allclose(mf.phi, case["phi"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(mf.utility, case["utility"], rtol=0, atol=1e-6)
