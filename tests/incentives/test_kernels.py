"""The compiled recursions of the client problem (``_kernels``) against their NumPy form, and
the threaded best responses against the single-threaded ones: both to the last bit. The
compiled per-problem solves (the default engine) against the streamed engine: to rounding."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedgame.incentives.fedpcs import _best_response as br
from fedgame.incentives.fedpcs import Inclusion, _kernels, mean_field
from fedgame.incentives.fedpcs._mean_field import MeanFieldSolverOptions

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="numba is not installed")
if _kernels.COMPILED:
    _kernels.newton  # noqa: B018 - binds the compiled helpers (_log1p, _evaluate_col, ...) called below


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


@compiled
def test_branch_free_log1p_and_expm1_are_the_c_librarys_to_two_ulp() -> None:
    """``_kernels._log1p`` and ``_neg_expm1`` (branch-free, so that the loop over rounds that
    computes P vectorises) against the C library's log1p and expm1: within two ulp over
    log-uniform and uniform arguments, exact at 0, −∞ → 1, NaN stays NaN."""
    import math

    rng = np.random.default_rng(11)
    xs = np.concatenate(
        [
            -rng.uniform(0.0, 1.0, 4000),
            -(10.0 ** rng.uniform(-300, 0, 4000)),
            rng.uniform(0.0, 50.0, 1000),
            [0.0, -1e-300, -0.5, -(1 - 2**-52)],
        ]
    )
    got = np.array([_kernels._log1p(x) for x in xs])
    want = np.array([math.log1p(x) for x in xs])
    np.testing.assert_allclose(got, want, rtol=4.5e-16, atol=0)
    assert _kernels._log1p(0.0) == 0.0
    zs = np.concatenate([-rng.uniform(0.0, 50.0, 4000), -(10.0 ** rng.uniform(-300, 1, 4000)), [0.0, -40.0, -45.0, -800.0]])
    got = np.array([_kernels._neg_expm1(z) for z in zs])
    want = np.array([-math.expm1(z) for z in zs])
    np.testing.assert_allclose(got, want, rtol=4.5e-16, atol=0)
    assert _kernels._neg_expm1(-math.inf) == 1.0
    assert math.isnan(_kernels._neg_expm1(math.nan))


@compiled
@pytest.mark.parametrize("K", [1, 2, 20, 20_000])
def test_compiled_evaluation_gives_the_inclusion_probability(K: int) -> None:
    """The P row that ``_evaluate_col`` computes in vectors over the padded rounds is Eq.
    (14) (``_dynamics.inclusion_probability``, NumPy) to 4 ulp, the cap x = 1 included
    (P = 1, P' = 0), and the row is padded past T+1 so that no scalar remainder is left."""
    from fedgame.incentives.fedpcs._dynamics import inclusion_probability

    rng = np.random.default_rng(12)
    T, N = 30, 40
    phi = rng.uniform(0.05, 3.0, T + 1)
    rc = _kernels._round_constants(phi, N, K)
    assert rc.shape[1] % 8 == 0 and rc.shape[1] >= T + 1
    capped = 0
    for _ in range(50):
        w = np.zeros((9, _kernels._padded(T)))
        _kernels._evaluate_col(rng.uniform(size=T), rng.uniform(0.01, 40.0), 0.3, phi, np.ones(T + 1), N, K, -1.0, 0, w, rc)
        rho = w[0, : T + 1]
        np.testing.assert_allclose(w[1, : T + 1], inclusion_probability(rho, phi, N, K), rtol=9e-16, atol=0)
        cap = rho >= N * phi
        assert np.all(w[1, : T + 1][cap] == 1.0) and np.all(w[2, : T + 1][cap] == 0.0)
        capped += int(cap.sum())
    assert capped > 0


def _lane_problems(seed: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """T, m and m client problems of 12 rounds (types, φ, R, starts) for the lane kernels:
    50 from α ≡ 0, 50 from α ≡ 1, the rest random, a count that leaves lanes empty."""
    rng = np.random.default_rng(seed)
    T, m = 12, 16 * 20 + 7
    rho0, varphi = rng.uniform(0.01, 12.0, m), rng.uniform(0.0, 1.0, m)
    phi, R = rng.uniform(2.0, 8.0, T + 1), rng.uniform(0.5, 3.0, T + 1)
    a0 = rng.uniform(size=(T, m))
    a0[:, :50], a0[:, 50:100] = 0.0, 1.0
    return T, m, rho0, varphi, phi, R, a0


@compiled
@pytest.mark.parametrize(("N", "K", "rule"), [(50, 10, "privacy"), (3, 2, "privacy"), (50, 1, "privacy"), (50, 10, "uniform")])
def test_lane_kernels_give_the_one_problem_kernels_bits(N: int, K: int, rule: Inclusion) -> None:
    """The Newton and sweep kernels that solve _WIDTH problems side by side (the engine's)
    give the one-problem kernels' α, U and KKT residuals to the last bit: corner, random and
    cycling starts, a count of problems that leaves lanes empty, the cap x = 1 binding
    (N = 3), K = 1 and the uniform rule; stopping at max_iter and at the sweep cap too."""
    from fedgame.incentives.fedpcs._dynamics import _uniform_p

    T, m, rho0, varphi, phi, R, a0 = _lane_problems(13)
    pu = _uniform_p(N, K, rule)
    pu = -1.0 if pu is None else pu
    for max_iter in (200, 2):
        one = [np.empty((T, m)), np.empty(m), np.empty(m)]
        lanes = [np.empty((T, m)), np.empty(m), np.empty(m)]
        _kernels._newton_nb(a0, rho0, varphi, phi, R, N, K, pu, 1e-11, max_iter, *one)
        _kernels.newton(a0, rho0, varphi, phi, R, N, K, pu, 1e-11, max_iter, *lanes, np.zeros(1, dtype=np.int64))
        for got, want in zip(lanes, one, strict=True):
            np.testing.assert_array_equal(got, want)
    for iters, window in ((500, 250), (37, 10), (0, 250)):
        one_s, lanes_s = np.empty((T, m)), np.empty((T, m))
        _kernels._sweep_nb(a0, rho0, varphi, phi, R, N, K, pu, 0.05, iters, 1e-10, window, one_s)
        _kernels.sweep(a0, rho0, varphi, phi, R, N, K, pu, 0.05, iters, 1e-10, window, lanes_s, np.zeros(1, dtype=np.int64))
        np.testing.assert_array_equal(lanes_s, one_s)


@compiled
def test_threads_sharing_one_counter_give_one_threads_bits() -> None:
    """A compiled solve split over threads that take the next problem from one shared
    counter (``_on_threads``: this thread and two helpers, problems of very different
    lengths so that the threads finish at different times and narrow their lanes) gives the
    one-thread α, U and KKT residuals of every problem to the last bit, Newton and sweeps."""
    T, m, rho0, varphi, phi, R, a0 = _lane_problems(21)
    one = br._on_threads(br._newton_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=1)
    three = br._on_threads(br._newton_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=3)
    for got, want in zip(three, one, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        br._on_threads(br._sweep_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=3, damping=0.05, iters=500),
        br._on_threads(br._sweep_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=1, damping=0.05, iters=500),
    )


@compiled
def test_a_solve_in_a_core_share_borrows_the_free_cores_and_gives_them_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``CoreShare.held`` a call that asks for every core runs on this thread's core
    and the ones free at its start: alone in a share of two, on two threads; beside another
    thread that holds the second core, on one; every core given back after each call, and the
    answer the one-thread answer to the last bit either way."""
    import threading

    T, m, rho0, varphi, phi, R, a0 = _lane_problems(22)
    one = br._on_threads(br._newton_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=1)
    on_threads, threads_of_calls = br._on_threads, []

    def recorded(*args: object, threads: int | None, **kwargs: object) -> object:
        if threads is not None:  # the threads the share gave the call (it asks with None)
            threads_of_calls.append(threads)
        return on_threads(*args, threads=threads, **kwargs)

    monkeypatch.setattr(br, "_on_threads", recorded)
    monkeypatch.setattr(br, "cores", lambda: 2)
    share = br.CoreShare(2)

    def call() -> tuple[np.ndarray, ...]:
        return br._on_threads(br._newton_compiled, a0, rho0, varphi, phi, R, 50, 10, threads=None)  # type: ignore[no-any-return]

    with share.held():
        alone = call()
        assert share.borrow(2) == 1  # the borrowed core came back
        with_other = call()  # the second core is borrowed here: none free
        share.give(1)
    holding, release = threading.Event(), threading.Event()

    def other() -> None:
        with share.held():
            holding.set()
            release.wait(60)

    thread = threading.Thread(target=other)
    thread.start()
    assert holding.wait(60)
    with share.held():
        beside = call()
    release.set()
    thread.join()
    assert threads_of_calls == [2, 1, 1]
    assert share.borrow(3) == 2  # all back
    for got in (alone, with_other, beside):
        for g, want in zip(got, one, strict=True):
            np.testing.assert_array_equal(g, want)


def test_a_core_share_makes_a_thread_wait_for_a_core() -> None:
    """``held`` waits while every core is taken (by other threads or borrowed) and goes on
    as soon as one is given back."""
    import threading

    share = br.CoreShare(1)
    entered = threading.Event()

    def worker() -> None:
        with share.held():
            entered.set()

    with share.held():
        thread = threading.Thread(target=worker)
        thread.start()
        assert not entered.wait(0.2)  # the only core is this thread's
    assert entered.wait(60)
    thread.join()
    assert share.borrow(1) == 1 and share.borrow(1) == 0


_FORKED_HELPERS = """
import multiprocessing, os, sys
from fedgame.incentives.fedpcs import _best_response as br

assert br._lane_helpers().submit(os.getpid).result(timeout=60) == os.getpid()  # the parent's threads started


def child(queue):
    queue.put(br._lane_helpers().submit(os.getpid).result(timeout=30) == os.getpid())


if not hasattr(os, "fork"):
    print("no fork")
    sys.exit(0)
ctx = multiprocessing.get_context("fork")
queue = ctx.Queue()
proc = ctx.Process(target=child, args=(queue,))
proc.start()
print(queue.get(timeout=60))
proc.join(60)
"""


def test_a_child_forked_after_the_lane_helpers_started_has_helpers_of_its_own() -> None:
    """The lane helpers are kept for a process's life; a child forked after they started has
    none of their threads, so it starts its own (else a helper's task would never run there
    and every call would run on one thread). In a fresh interpreter: forking is safe there
    whatever this test session has imported before."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FORKED_HELPERS], capture_output=True, text=True, check=True, timeout=300)
    last = done.stdout.strip().splitlines()[-1]
    if last == "no fork":
        pytest.skip("this platform has no fork")
    assert last == "True"


def test_threaded_mean_field_is_bit_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """The best responses split over 3 threads (the split lowered so that even the warm
    iterations are split) give the single-threaded equilibrium to the last bit."""
    monkeypatch.setattr(br, "_PER_THREAD", 16)
    monkeypatch.setattr(br, "_PER_THREAD_COMPILED", 16)
    rng = np.random.default_rng(5)
    n, T = 120, 10
    rho0, varphi = rng.uniform(0.01, 12.0, n), rng.uniform(0.01, 0.99, n)
    one = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=1)
    three = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=3)
    assert one.converged
    for name in ("phi", "alpha", "rho", "utility", "kkt_residual"):
        np.testing.assert_array_equal(getattr(three, name), getattr(one, name), err_msg=name)
    uni = mean_field(
        rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=3, inclusion="uniform"
    )  # the sampling rule reaches the threads
    ref = mean_field(rho0, varphi, np.full(T + 1, 1.0), 24, T, rng=0, threads=1, inclusion="uniform")
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


@compiled
@pytest.mark.parametrize(("N", "K", "rule"), [(50, 10, "privacy"), (3, 2, "privacy"), (50, 1, "privacy"), (50, 10, "uniform")])
def test_compiled_newton_repeats_the_streamed_newton(N: int, K: int, rule: Inclusion) -> None:
    """Problem by problem, the compiled Newton (each problem to the end in its own arrays)
    repeats the streamed Newton to rounding — its log1p and expm1 are the C library's, not
    NumPy's — from corner and random starts, under both sampling rules, with K = 1 and with
    the cap x = ρ/(Nφ) ≤ 1 binding (N = 3): α to 1e-8, U to 1e-12 relative, and each problem
    stops on the same side of the KKT tolerance."""
    rng = np.random.default_rng(3)
    T, m = 12, 300
    rho0, varphi = rng.uniform(0.01, 12.0, m), rng.uniform(0.0, 1.0, m)
    phi, R = rng.uniform(2.0, 8.0, T + 1), rng.uniform(0.5, 3.0, T + 1)
    a0 = rng.uniform(size=(T, m))
    a0[:, :50], a0[:, 50:100] = 0.0, 1.0
    want = br._newton_stream(a0, rho0, varphi, phi, R, N, K, inclusion=rule)
    got = br._newton_compiled(a0, rho0, varphi, phi, R, N, K, inclusion=rule)
    if N == 3:
        assert (rho0[None, :] > N * phi[:, None]).any()  # the cap binds somewhere
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got[2] <= 1e-11, want[2] <= 1e-11)
    assert (want[2] <= 1e-11).mean() > 0.9


@compiled
def test_compiled_sweep_repeats_the_streamed_sweep_where_it_converges() -> None:
    """The compiled damped sweep equals the streamed one to 1e-8 on every problem whose
    streamed sweep ended at a fixed point of the sweep (one more sweep moves it < 1e-9); a
    cycling sweep is chaotic, and its last iterate only seeds a Newton solve."""
    rng = np.random.default_rng(4)
    T, m = 12, 400
    rho0, varphi = rng.uniform(0.01, 12.0, m), rng.uniform(0.0, 1.0, m)
    phi, R = rng.uniform(2.0, 8.0, T + 1), rng.uniform(0.5, 3.0, T + 1)
    a0 = rng.uniform(size=(T, m))
    kw = {"damping": 0.05, "iters": 500}
    want = br._sweep_stream(a0, rho0, varphi, phi, R, 50, 10, **kw)
    got = br._sweep_compiled(a0, rho0, varphi, phi, R, 50, 10, **kw)
    again = br._sweep_stream(want, rho0, varphi, phi, R, 50, 10, damping=0.05, iters=1)
    fixed = np.abs(again - want).max(axis=0) < 1e-9
    assert fixed.mean() > 0.5
    np.testing.assert_allclose(got[:, fixed], want[:, fixed], rtol=0, atol=1e-8)


@compiled
def test_mean_field_engines_give_one_equilibrium() -> None:
    """``mean_field`` on the compiled engine (its default with Numba) and on the streamed
    one: the same equilibrium to 1e-9 after the same iterations."""
    from fedgame.incentives.fedpcs._mean_field import _resolve_options, _solve

    rng = np.random.default_rng(8)
    n, T = 200, 20
    rho0, varphi = rng.uniform(0.01, 12.0, n), rng.uniform(0.01, 0.99, n)
    R = rng.uniform(0.2, 2.0, T + 1)
    got = mean_field(rho0, varphi, R, 40, T, rng=0)
    want = _solve(rho0, varphi, R, 40, T, options=_resolve_options(None, {}), phi_init=None, alpha_init=None, rng=0, engine="streamed")
    assert got.converged and want.converged
    assert got.iterations == want.iterations and got.full_solves == want.full_solves
    for name in ("phi", "rho", "alpha", "utility"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=0, atol=1e-9, err_msg=name)


class _Features(dict[str, bool]):
    """llvmlite's FeatureMap as far as :func:`_kernels._full_vector_width` reads it."""

    def flatten(self) -> str:
        return ",".join(("+" if on else "-") + name for name, on in self.items())


@pytest.mark.parametrize(
    ("user_name", "user_features", "host", "expected"),
    [
        (None, None, {"avx2": True, "avx512f": True}, "+avx2,+avx512f,-prefer-256-bit"),  # full width on AVX-512
        (None, None, {"avx2": True, "avx512f": False}, None),  # AVX2 only: nothing to widen
        (None, "+avx2", {"avx512f": True}, "+avx2"),  # the user's NUMBA_CPU_FEATURES is kept
        ("skylake-avx512", None, {"avx512f": True}, None),  # as is the user's NUMBA_CPU_NAME
    ],
)
def test_lanes_may_use_the_full_avx512_width(
    monkeypatch: pytest.MonkeyPatch, user_name: str | None, user_features: str | None, host: dict[str, bool], expected: str | None
) -> None:
    import llvmlite.binding as ll
    from numba.core import config

    monkeypatch.setattr(config, "CPU_NAME", user_name)
    monkeypatch.setattr(config, "CPU_FEATURES", user_features)
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: _Features(host))
    _kernels._full_vector_width()
    assert config.CPU_FEATURES == expected


def test_the_kernels_compiled_here_use_the_full_width_where_the_host_has_avx512() -> None:
    """The compiled engine in this process was built with the setting above (on AVX-512 hosts)."""
    import llvmlite.binding as ll
    from numba.core import config

    assert _kernels.COMPILED
    user = any(n in os.environ for n in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"))
    if ll.get_host_cpu_features().get("avx512f") and not user:
        assert config.CPU_FEATURES is not None and config.CPU_FEATURES.endswith(",-prefer-256-bit")
    else:
        assert config.CPU_FEATURES is None or not config.CPU_FEATURES.endswith(",-prefer-256-bit")


def _archive_case(rng: np.random.Generator, m: int, per: int, T: int) -> tuple[np.ndarray, ...]:
    """Candidates as a mean-field iteration makes them: ``per`` per type, many of them the
    same optimum (equal after rounding to 1e-6, −0 among them), tied utilities, some not
    finite or not stationary; and the types' current choices, some equal to a candidate."""
    P = m * per
    owner = np.tile(np.arange(m), per)
    basins = rng.uniform(0.0, 1.0, (T, m, 3))
    pick = rng.integers(0, 3, P)
    a = basins[:, owner, pick] + rng.choice([0.0, 1e-9, 3e-6], P)  # 1e-9: the same key; 3e-6: not
    a[:, rng.random(P) < 0.05] = -0.0
    U = np.round(rng.normal(size=P), 1)  # ties
    U[rng.random(P) < 0.05] = rng.choice([np.inf, -np.inf, np.nan])
    kkt = rng.choice([0.0, 1e-7, 1e-5], P, p=[0.6, 0.3, 0.1])
    keep = basins[:, :, 0].copy()
    return keep, a, U, kkt, owner


@compiled
@pytest.mark.parametrize(("m", "per", "T", "cap"), [(1, 1, 3, 4), (7, 12, 5, 4), (300, 16, 30, 4), (50, 9, 4, 2)])
def test_compiled_archive_selection_keeps_the_numpy_forms_entries(m: int, per: int, T: int, cap: int) -> None:
    """``_kernels.archive_pick`` (one pass per type) keeps the entries, in the order and
    with the bits, that its NumPy form (hash, sort, first distinct) keeps — with the
    current choices and without, and with a type that has no finite candidate."""
    rng = np.random.default_rng(m)
    keep, a, U, kkt, owner = _archive_case(rng, m, per, T)
    U[owner == m - 1] = np.nan
    for first in (keep, np.empty((T, 0))):
        got = _kernels.archive_pick(first, a, U, kkt, owner, m, cap, 1e-6)
        want = _kernels._archive_pick_py(first, a, U, kkt, owner, m, cap, 1e-6)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        assert np.bincount(got[1], minlength=m).max() <= cap
        if first.size:  # every type keeps its current choice
            np.testing.assert_array_equal(np.unique(got[1]), np.arange(m))


@compiled
def test_compiled_closest_candidate_is_the_numpy_forms() -> None:
    """``_kernels.closest_per_owner`` picks, for every type, the candidate its NumPy form
    (distances, then a sort) picks: ties to the first, NaN distances last."""
    rng = np.random.default_rng(3)
    T, m, per = 6, 200, 7
    owner = rng.permutation(np.tile(np.arange(m), per))
    prev = rng.uniform(size=(T, m))
    a = np.round(prev[:, owner] + rng.normal(scale=0.1, size=(T, owner.size)), 1)  # ties
    a[2, rng.random(owner.size) < 0.1] = np.nan
    a[:, owner == 0] = np.nan  # a type whose candidates are all NaN
    got, want = np.empty(m, dtype=np.intp), np.empty(m, dtype=np.intp)
    _kernels.closest_per_owner(a, prev, owner, got)
    _kernels._closest_per_owner_py(a, prev, owner, want)
    np.testing.assert_array_equal(got, want)
    assert np.all(owner[got] == np.arange(m))


@compiled
def test_compiled_pairwise_sum_is_numpys_to_the_bit() -> None:
    """``_kernels._pairwise_sum`` adds in NumPy's order (``np.sum`` = 0.0 + it): every length
    across its three branches (< 8, ≤ 128, halves), terms of mixed magnitude and sign, −0."""
    rng = np.random.default_rng(5)
    for n in [*range(0, 300), 1000, 4099, 65537]:
        x = rng.normal(size=n) * rng.choice([1.0, 1e-9, 1e9], n)
        x[rng.random(n) < 0.05] = -0.0
        got = 0.0 + _kernels._pairwise_sum(x, n)
        assert np.float64(got).tobytes() == x.sum().tobytes(), n


@compiled
@pytest.mark.parametrize("m", [1, 7, 8, 100, 129, 1000, 5000])
def test_compiled_consistent_mean_is_the_numpy_forms(m: int) -> None:
    """The mean trajectory of Eq. (15), compiled, gives its NumPy form's bits."""
    rng = np.random.default_rng(m)
    T = 29
    a, rho0 = rng.uniform(size=(T, m)), rng.uniform(0.01, 12.0, m)
    w = rng.integers(1, 4, m) / m
    got, want = np.empty(T + 1), np.empty(T + 1)
    _kernels.consistent_mean(a, rho0, w, 3.7, got)
    _kernels._consistent_mean_py(a, rho0, w, 3.7, want)
    assert got.tobytes() == want.tobytes()
