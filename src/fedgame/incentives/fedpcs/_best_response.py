"""Stage II: each client's best response to a broadcast mean field φ(·) and rewards R
(FedPCS Sec. IV-A, Theorem 1). Theorem 1's stationarity condition (Eq. 21) is implicit, and
iterated as a forward-backward sweep it need not converge (it can cycle), so the client problem
is solved by direct optimisation from several starts, with a KKT check."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.core.validate import (
    as_clients,
    as_rounds,
    check_horizon,
    check_population,
)
from fedgame.incentives.fedpcs import _kernels, _solvers
from fedgame.incentives.fedpcs._dynamics import (
    Evaluation,
    Inclusion,
    Workspace,
    _check_inclusion,
    _uniform_p,
    evaluate,
)

__all__ = ["BestResponse", "Engine", "Solver", "best_response"]

FloatArray = NDArray[np.float64]
Solver = Literal["newton", "lbfgsb"]
#: ``"compiled"``: each problem solved to the end by the compiled kernels of :mod:`._kernels`
#: (default where Numba is installed); ``"streamed"``: the same iterations as NumPy row
#: operations over a window of problems (:func:`_newton_stream`, :func:`_sweep_stream`; the
#: default without Numba); ``"reference"``: the pre-streaming path through :mod:`._solvers`
#: (kept for the equality tests)
Engine = Literal["compiled", "streamed", "reference"]

#: problems (client type × start) per batch of (T+1)-long rows: bounds the working memory
#: of the Newton engine to ~250 MB (reference engine)
_BATCH_CELLS = 1_000_000

#: problems in flight in the streamed engines: (T+1, 8192) rows of 2 MB stay in the cache
_STREAM = 8192

_ARMIJO = 1e-4
_MAX_HALVINGS = 50

#: problems per thread below which a solve stays on fewer threads (a thread's share of a
#: smaller batch costs more in start-up and shorter windows than it saves)
_PER_THREAD = 2048
#: the same for the compiled engine, which has no window to fill: a problem's solve is tens
#: to hundreds of microseconds, so even the few hundred problems of a best response at N = 100
#: are worth two threads (the main job's FedPCS game: 4.1 s against 4.9-5.8 s on 2 cores)
_PER_THREAD_COMPILED = 64

_Out = TypeVar("_Out", FloatArray, tuple[FloatArray, FloatArray, FloatArray])


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class CoreShare:
    """The cores of one process, shared by threads that each run a solve of their own (the
    server's search prices several schedules side by side, :class:`._server._TrueCost`).

    A thread works inside :meth:`held`, which gives it one core for itself (waiting for one)
    and lends the share to the solves it runs: where those ask for every core (``threads``
    None), :func:`_on_threads` widens each call by the cores free at that moment and gives
    them back when the call ends. So two solves run on one core each, and one left alone —
    the last of a batch, or a single J — takes the other cores at its next call, instead of
    leaving them idle until it ends. How many threads a call ran on changes no bit of its
    answer (:func:`_on_threads`)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._changed = threading.Condition()

    @contextmanager
    def held(self) -> Iterator[None]:
        """One core for the calling thread while inside; its solves may borrow more."""
        with self._changed:
            self._changed.wait_for(lambda: self._free > 0)
            self._free -= 1
        token = _SHARE.set(self)
        try:
            yield
        finally:
            _SHARE.reset(token)
            self.give(1)

    def borrow(self, most: int) -> int:
        """Up to ``most`` free cores, at once (none if none is free); :meth:`give` them back."""
        with self._changed:
            k = max(0, min(most, self._free))
            self._free -= k
        return k

    def give(self, k: int) -> None:
        with self._changed:
            self._free += k
            self._changed.notify_all()


#: the share of the thread's :meth:`CoreShare.held` block, if it is in one
_SHARE: ContextVar[CoreShare | None] = ContextVar("fedgame_fedpcs_core_share", default=None)


def default_engine() -> Engine:
    """The engine the solvers use unless told otherwise: ``"compiled"`` where Numba is
    installed, else ``"streamed"``."""
    return "compiled" if _kernels.COMPILED else "streamed"


_HELPERS: tuple[int, ThreadPoolExecutor] | None = None
_HELPERS_LOCK = threading.Lock()


def _lane_helpers() -> ThreadPoolExecutor:
    """The threads that help :func:`_on_threads` run a compiled call, kept for the process's
    life (a fresh executor per call cost 240 µs against 80 µs on the 2-core virtual machines,
    and a J from scratch makes about 47 calls of 0.5-1.5 ms each); a thread is started only
    when every one started is busy, so there are as many as calls have needed at once (at
    most 255: ``threads`` ≤ 256). Again in a child forked after they started (threads do not
    survive a fork)."""
    global _HELPERS
    with _HELPERS_LOCK:
        if _HELPERS is None or _HELPERS[0] != os.getpid():
            _HELPERS = (os.getpid(), ThreadPoolExecutor(max_workers=255, thread_name_prefix="fedpcs-lanes"))
        return _HELPERS[1]


def _on_threads(
    solve: Callable[..., _Out], a0: FloatArray, rho0: FloatArray, varphi: FloatArray, *args: object, threads: int | None, **kwargs: object
) -> _Out:
    """``solve(a0, rho0, varphi, *args, **kwargs)`` for m independent problems (the columns
    of ``a0``), split over ``threads`` threads (None: every core; at most one per
    :data:`_PER_THREAD` problems, :data:`_PER_THREAD_COMPILED` for the compiled engine). The
    compiled kernels' threads — this one and n − 1 helpers (:func:`_lane_helpers`; one not
    started by the time this one has finished its part is cancelled) — share the problems, their
    outputs and one counter: each thread takes the next problem as soon as a lane of its own
    frees, so they finish together, and a helper that starts late only takes fewer problems.
    Fixed halves, each on a thread started for the call while this one waited, made Newton
    calls no faster on two threads than on one on the 2-core virtual machines: the second
    thread began up to 3.4 ms after the first, as long as a call of a few hundred problems.
    The streamed engines' threads take every n-th problem (a strided split, so cold and warm
    starts are shared evenly), and their pieces are gathered in column order.

    The streamed engines solve each problem by itself — its iterates do not depend on which
    problems share its window — so the answer is the same to the last bit whatever the
    split; NumPy releases the GIL in the row operations on the (T+1, window) arrays, which is
    where the time goes. Everything a solve depends on — the sampling rule ``inclusion``
    included — reaches it through ``args`` and ``kwargs``.

    Inside a :meth:`CoreShare.held` block, ``threads`` None means this thread's core and the
    cores the share has free when the call starts (given back when it ends)."""
    T, m = a0.shape
    compiled = solve in (_newton_compiled, _sweep_compiled)
    per = _PER_THREAD_COMPILED if compiled else _PER_THREAD
    n = min(cores() if threads is None else threads, m // per)
    share = _SHARE.get() if threads is None else None
    if share is not None and n > 1:  # one core of its own, and what the share has free now
        lent = share.borrow(n - 1)
        try:
            return _on_threads(solve, a0, rho0, varphi, *args, threads=1 + lent, **kwargs)
        finally:
            share.give(lent)
    if n <= 1:
        return solve(a0, rho0, varphi, *args, **kwargs)
    if compiled:
        out = _compiled_outputs(solve, a0.shape)
        counter = np.zeros(1, dtype=np.int64)
        pool = _lane_helpers()
        helpers = [pool.submit(solve, a0, rho0, varphi, *args, out=out, counter=counter, **kwargs) for _ in range(n - 1)]
        solve(a0, rho0, varphi, *args, out=out, counter=counter, **kwargs)
        for helper in helpers:
            if not helper.cancel():  # a helper that has not started by now would find nothing left
                helper.result()
        return out if solve is _newton_compiled else out[0]  # type: ignore[return-value]  # Newton fills (a, U, kkt), the rest a alone
    parts = [np.arange(j, m, n) for j in range(n)]

    def part(j: int) -> _Out:
        p = parts[j]
        return solve(a0[:, p], rho0[p], varphi[p], *args, **kwargs)

    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(part, range(n)))

    def gather(pieces: list[FloatArray]) -> FloatArray:
        out = np.empty(pieces[0].shape[:-1] + (m,))
        for p, piece in zip(parts, pieces, strict=True):
            out[..., p] = piece
        return out

    if isinstance(results[0], tuple):
        return tuple(gather([r[i] for r in results]) for i in range(3))  # type: ignore[return-value]  # 3 arrays; mypy sees tuple[X, ...]
    return gather(results)


# --------------------------------------------------------------------------------------------
# Streamed engines: the same iterations as ``_solvers.newton`` and
# ``_solvers.damped_sweep``, problem by problem, run over a window of ``_STREAM`` problems at
# a time that is refilled as problems finish
# --------------------------------------------------------------------------------------------


class _Workspace(Workspace):
    """:class:`Workspace` whose buffers are never 8 columns wide.

    NumPy 2.4.6 (AVX-512 build) writes wrong values when ``np.negative`` stores through a
    stride of exactly 64 bytes, which is the row stride of a (rows, 1) view of an 8-column
    float64 buffer: :func:`evaluate` negates such views in place when a batch of 8 shrinks
    to 1 (U, P' and the gradient come out wrong)."""

    def get(self, name: str, rows: int, m: int) -> FloatArray:
        b = self._buf.get(name)
        if b is None or b.shape[0] != rows or b.shape[1] < m:
            b = np.empty((rows, 9 if m == 8 else m))
            self._buf[name] = b
        return b[:, :m]


def _kkt(a: FloatArray, grad: FloatArray) -> FloatArray:
    """r_KKT = max_t |clip(α^t + ∂U/∂α^t, 0, 1) − α^t| per column (projected gradient)."""
    r = np.add(a, grad)
    np.clip(r, 0.0, 1.0, out=r)
    r -= a
    np.abs(r, out=r)
    kkt: FloatArray = r.max(axis=0)
    return kkt


def _riccati_step(
    a: FloatArray, ev: Evaluation, phi: FloatArray, varphi: FloatArray, gJ: FloatArray, bound: NDArray[np.bool_], ws: Workspace
) -> FloatArray:
    """Projected-Newton step for J = −U (T, m): the exact Newton step on the free variables
    and a curvature-scaled projected-gradient step on the ε-active ones (``bound``).

    Stagewise Newton (Pantoja 1988) on the reduced objective: with x = ρ, u = α and
    x' = φ + u (x − φ) (Eq. 20), A = α^t, B = ρ^t − φ(t), stage loss ℓ = −P g and
    p = −λ the costate of J (Eqs. 53-54), the backward pass is
    Q_u = 2(1−ϕ)P α + B v', Q_uu = 2(1−ϕ)P + B² V',
    Q_ux = 2(1−ϕ)P' α − λ(t+1) + A B V', k = −Q_u/Q_uu, K = −Q_ux/Q_uu,
    v = A v' − S + K Q_u, V = A² V' − f'' + K Q_ux (S = ∂(Pg)/∂ρ, f'' = ∂²(Pg)/∂ρ²);
    the forward pass δα = k + K δρ, δρ' = A δρ + B δα. A pivot Q_uu below
    10⁻¹⁰ (2(1−ϕ)P + B²|V'|) in magnitude is replaced by that floor and a negative one by
    its magnitude (a modified factorisation: the step stays an ascent direction for U).
    Row operations over all m problems at once; the same arithmetic, in the same order, as
    ``_solvers._newton_direction`` (so both give the same step to the last bit)."""
    rho, P, dP, S, lam, f2 = ev.rho, ev.P, ev.dP, ev.S, ev.lam, ev.f2
    assert f2 is not None
    T, m = a.shape
    c2 = 2.0 * (1.0 - varphi)
    B_all = np.subtract(rho[:T], phi[:T, None], out=ws.get("B", T, m))
    cP_all = np.multiply(c2, P[:T], out=ws.get("cP", T, m))
    W_all = np.multiply(c2, dP[:T], out=ws.get("W", T, m))
    W_all *= a
    W_all -= lam[1:]  # 2(1−ϕ)P'α − λ(t+1): Q_ux before its A B V' term
    k = ws.get("k", T, m)
    Kg = ws.get("Kg", T, m)
    curv = ws.get("curv", T, m)
    _kernels.riccati(a, B_all, cP_all, W_all, S, f2, bound, k, Kg, curv)
    d = Kg  # the forward pass wrote the step over K row by row once it was used
    if bound.any():
        scale = np.maximum(curv, cP_all, out=curv)
        np.maximum(scale, 1e-12, out=scale)
        np.divide(gJ, scale, out=scale)
        np.negative(scale, out=scale)
        np.copyto(d, scale, where=bound)
    return d


def _newton_stream(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    tol: float = 1e-11,
    max_iter: int = 200,
    window: int = _STREAM,
    inclusion: Inclusion = "privacy",
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Projected Newton from ``a0`` (T, m) for m independent problems; (α, U, KKT residual).

    Each problem maximises a client's utility U (Eq. 19) under the dynamics of Eq. 20 over
    α ∈ [0, 1]^T: Theorem 1's best response, found numerically. The iteration of each problem
    is that of ``_solvers.newton`` (Bertsekas' ε-active set with ε = min(10⁻³, r, 10³ r²),
    the step of :func:`_riccati_step` capped at a unit move, Armijo backtracking (10⁻⁴, ≤ 50
    halvings) along the projection arc, a full step accepted at the rounding floor of U if it
    lowers the KKT residual; a problem stops once r_KKT ≤ ``tol``, when no step is accepted,
    or after ``max_iter`` + 1 steps). Only the schedule differs: at most ``window`` problems
    are in flight, and a problem that stops is replaced at once by the next one, so that
    every row operation runs on a full window and the few slow problems of a large batch
    share one tail instead of one per chunk.

    Each step, one helper per phase: :meth:`_NewtonWindow.advance` (drop finished problems,
    admit waiting ones), the evaluation and KKT residual at the current α and
    :meth:`_NewtonWindow.retire_converged`, :func:`_search_direction` (the projected-Newton
    direction), :func:`_line_search` (the projected Armijo search, moving α in place) and
    :meth:`_NewtonWindow.retire_stalled` (problems with no acceptable step). ``inclusion``: the
    sampling rule of P (:data:`~._dynamics.Inclusion`)."""
    a0 = np.asarray(a0, dtype=float)
    win = _NewtonWindow(a0, window)
    game = _Game(phi, R, N, K, inclusion)
    ws = _NewtonWorkspaces()
    while win.advance():
        r0, vp = rho0[win.idx], varphi[win.idx]
        ev = game.evaluate(win.A, r0, vp, ws.ev, second=True)
        r = _kkt(win.A, ev.grad)
        fin = win.retire_converged(ev.U, r, tol, max_iter)
        if fin.all():
            continue
        it = _Iterate(win.A, r0, vp, ev, r, fin)
        accepted = _line_search(it, _search_direction(it, phi, ws), game, ws)
        win.retire_stalled(accepted, ev.U, r)
        win.steps += 1
    return win.out_a, win.out_U, win.out_k


@dataclass(frozen=True)
class _Game:
    """What every problem of one streamed solve shares: the broadcast mean field φ and the
    rewards R ((T+1,) each), the population N, the draws per round K and the sampling rule
    ``inclusion`` (Eqs. 14, 19-20)."""

    phi: FloatArray
    R: FloatArray
    N: int
    K: int
    inclusion: Inclusion

    def evaluate(
        self, a: FloatArray, rho0: FloatArray, varphi: FloatArray, ws: Workspace, *, second: bool = False, need_grad: bool = True
    ) -> Evaluation:
        """:func:`evaluate` (utility of Eq. 19, its adjoint gradient, optionally the second-order
        terms) of the problems with decisions ``a`` (T, n) and types ``rho0``, ``varphi``."""
        return evaluate(
            a, rho0, varphi, self.phi, self.R, self.N, self.K, second=second, need_grad=need_grad, ws=ws, inclusion=self.inclusion
        )


@dataclass
class _NewtonWorkspaces:
    """The buffers of :func:`_newton_stream`, one workspace per use so that no result is
    overwritten while it is still needed: the evaluation at the iterate (``ev``), at the
    line-search trials (``ls``) and at the trials on the rounding floor (``fl``), the
    Newton direction (``direction``) and the step's own arrays (``misc``)."""

    ev: _Workspace = field(default_factory=_Workspace)
    ls: _Workspace = field(default_factory=_Workspace)
    fl: _Workspace = field(default_factory=_Workspace)
    direction: _Workspace = field(default_factory=_Workspace)
    misc: _Workspace = field(default_factory=_Workspace)


class _NewtonWindow:
    """The problems in flight in :func:`_newton_stream` and the results of those that have
    stopped. ``idx``: which of the m problems are in the window (at most ``size``), with
    their iterates ``A`` (T, n), step counts ``steps`` and ``done`` flags (a problem that has
    stopped stays in the window, frozen, until enough have stopped to drop them together);
    ``nxt``: the first problem not yet admitted; ``out_a``, ``out_U``, ``out_k``: α, U and the
    KKT residual of each problem (α = ``a0``, U = −∞, r = ∞ until it stops)."""

    def __init__(self, a0: FloatArray, size: int) -> None:
        """An empty window of ``size`` problems over the starts ``a0`` (T, m)."""
        T, m = a0.shape
        self.a0, self.m, self.size = a0, m, size
        self.out_a = np.array(a0, copy=True)
        self.out_U = np.full(m, -np.inf)
        self.out_k = np.full(m, np.inf)
        self.nxt = 0
        self.idx = np.empty(0, dtype=np.intp)
        self.A = np.empty((T, 0))
        self.steps = np.empty(0, dtype=np.int64)
        self.done = np.empty(0, dtype=bool)  # stopped, still in the window (they no longer move)

    def advance(self) -> bool:
        """Make the window ready for the next step: drop the stopped problems once they are a
        tenth of the window (or, while problems wait, of its capacity), admit waiting
        problems while it is at most 90 % full. False once every problem has stopped."""
        while True:
            n_done = int(self.done.sum())
            if n_done and (n_done >= 0.1 * self.idx.size or (self.nxt < self.m and n_done >= 0.1 * self.size)):
                self._keep(~self.done)
            if self.idx.size <= 0.9 * self.size and self.nxt < self.m:
                self._admit()
            if self.idx.size and not self.done.all():
                return True
            if self.nxt >= self.m:
                return False
            self._keep(slice(0, 0))

    def _keep(self, keep: NDArray[np.bool_] | slice) -> None:
        """Keep only the problems ``keep`` selects in the window."""
        self.idx, self.A = self.idx[keep], self.A[:, keep]
        self.steps, self.done = self.steps[keep], self.done[keep]

    def _admit(self) -> None:
        """Fill the window up to ``size`` with the next waiting problems, from their starts."""
        new = np.arange(self.nxt, min(self.m, self.nxt + self.size - self.idx.size))
        self.nxt = int(new[-1]) + 1
        self.idx = np.concatenate([self.idx, new])
        self.A = np.concatenate([self.A, self.a0[:, new]], axis=1)
        self.steps = np.concatenate([self.steps, np.zeros(new.size, dtype=np.int64)])
        self.done = np.concatenate([self.done, np.zeros(new.size, dtype=bool)])

    def _record(self, stop: NDArray[np.bool_], U: FloatArray, r: FloatArray) -> None:
        """Store the current α, utility ``U`` and KKT residual ``r`` of the problems ``stop``."""
        self.out_a[:, self.idx[stop]] = self.A[:, stop]
        self.out_U[self.idx[stop]] = U[stop]
        self.out_k[self.idx[stop]] = r[stop]

    def retire_converged(self, U: FloatArray, r: FloatArray, tol: float, max_iter: int) -> NDArray[np.bool_]:
        """Stop the problems whose KKT residual ``r`` is at most ``tol`` or that have taken
        more than ``max_iter`` steps, storing their results (``U`` at the current α); returns
        which problems have stopped, these and the earlier ones."""
        fin = ~self.done & ((r <= tol) | (self.steps > max_iter))
        if fin.any():
            self._record(fin, U, r)
        fin |= self.done
        self.done = fin.copy()
        return fin

    def retire_stalled(self, accepted: NDArray[np.bool_], U: FloatArray, r: FloatArray) -> None:
        """Stop the problems whose line search accepted no step: no ascent beyond rounding,
        so their α is final (``U``, ``r``: at the α before the search, which it did not move)."""
        if not accepted.all():
            failed = ~accepted
            self._record(failed, U, r)
            self.done |= failed


@dataclass(frozen=True)
class _Iterate:
    """The problems in the window at the start of a Newton step: their α (``A``, (T, n); the
    window's array, moved in place by :func:`_line_search`), types (ρ^0, ϕ), evaluation at α
    with the second-order terms (``ev``), KKT residuals ``r`` and which have stopped
    (``fin``; they do not move)."""

    A: FloatArray
    rho0: FloatArray
    varphi: FloatArray
    ev: Evaluation
    r: FloatArray
    fin: NDArray[np.bool_]


@dataclass(frozen=True)
class _Direction:
    """A projected-Newton direction for J = −U: ``gJ`` = ∇J (T, n), ``bound`` the ε-active
    set (T, n; variables at a bound that the gradient pushes outwards), ``d`` the direction
    (0 for stopped problems) and ``pred`` (n,) the decrease of J it predicts on the free
    variables, −∇J·d."""

    gJ: FloatArray
    bound: NDArray[np.bool_]
    d: FloatArray
    pred: FloatArray


def _search_direction(it: _Iterate, phi: FloatArray, ws: _NewtonWorkspaces) -> _Direction:
    """The direction of one projected-Newton step (Bertsekas 1982): the ε-active set with
    ε = min(10⁻³, r, 10³ r²) — a variable within ε of a bound whose gradient pushes it out —
    then the exact Newton step of :func:`_riccati_step` on the free variables and a scaled
    gradient step on the active ones, and the decrease of J it predicts."""
    A, ev, r = it.A, it.ev, it.r
    T, n = A.shape
    gJ = np.negative(ev.grad, out=ws.misc.get("gJ", T, n))
    eps = np.minimum(np.minimum(1e-3, r), 1e3 * r * r)
    bound = ((A <= eps) & (gJ > 0)) | ((A >= 1.0 - eps) & (gJ < 0))
    d = _riccati_step(A, ev, phi, it.varphi, gJ, bound, ws.direction)
    d[:, it.fin] = 0.0
    tmp = np.multiply(gJ, d, out=ws.misc.get("tmp", T, n))
    np.negative(tmp, out=tmp)
    np.copyto(tmp, 0.0, where=bound)
    pred = tmp.sum(axis=0)  # predicted decrease of J on the free variables
    return _Direction(gJ, bound, d, pred)


def _line_search(it: _Iterate, direction: _Direction, game: _Game, ws: _NewtonWorkspaces) -> NDArray[np.bool_]:
    """Armijo backtracking along the projection arc α(s) = clip(α + s d, 0, 1): the step
    length starts at the largest s ≤ 1 that moves no free variable by more than 1, and is
    halved (at most 50 times) for each problem until :func:`_try_step` accepts it. Moves
    ``it.A`` in place; returns which problems accepted a step (the stopped ones count)."""
    A, d, bound = it.A, direction.d, direction.bound
    T, n = A.shape
    J0 = -it.ev.U
    noise = 1e-13 * (1.0 + np.abs(J0))
    tmp = np.abs(d, out=ws.misc.get("tmp", T, n))
    np.copyto(tmp, 0.0, where=bound)
    s = np.minimum(1.0, 1.0 / np.maximum(tmp.max(axis=0), 1e-300))
    searching = np.arange(n)
    accepted = it.fin.copy()
    for h in range(_MAX_HALVINGS):
        if searching.size == 0:
            break
        trial, ok = _try_step(it, direction, s, searching, J0, noise, h == 0, game, ws)
        if searching.size == n and ok.all():
            A[...] = trial
        else:
            A[:, searching[ok]] = trial[:, ok]
        accepted[searching[ok]] = True
        searching = searching[~ok]
        s[searching] *= 0.5
    return accepted


def _try_step(
    it: _Iterate,
    direction: _Direction,
    s: FloatArray,
    searching: NDArray[np.intp],
    J0: FloatArray,
    noise: FloatArray,
    first: bool,
    game: _Game,
    ws: _NewtonWorkspaces,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """The trial points α(s) of the problems still ``searching`` and which of them pass the
    Armijo test for projected steps, J(α) − J(α(s)) ≥ 10⁻⁴ (s·pred + ∇J·(α − α(s)) on the
    active set). At the ``first`` trial, a problem whose U is at its rounding floor (the
    required decrease and any increase of J within ``noise``) cannot be ranked by J: its
    trial passes if it lowers the KKT residual instead."""
    A = it.A
    T, n = A.shape
    ns = searching.size
    whole = ns == n
    As = A if whole else A[:, searching]
    ds = direction.d if whole else direction.d[:, searching]
    trial = np.multiply(ds, s[searching], out=ws.misc.get("trial", T, ns))
    trial += As
    np.clip(trial, 0.0, 1.0, out=trial)
    Jt = -game.evaluate(trial, it.rho0[searching], it.varphi[searching], ws.ls, need_grad=False).U
    dec = J0[searching] - Jt
    moved = np.subtract(As, trial, out=ws.misc.get("moved", T, ns))
    moved *= direction.gJ if whole else direction.gJ[:, searching]
    np.copyto(moved, 0.0, where=~(direction.bound if whole else direction.bound[:, searching]))
    req = _ARMIJO * (s[searching] * direction.pred[searching] + moved.sum(axis=0))
    ok = dec >= req
    if first:
        floor = ~ok & (req <= 1e3 * noise[searching]) & (dec >= -noise[searching])
        if floor.any():
            fl = searching[floor]
            evt = game.evaluate(trial[:, floor], it.rho0[fl], it.varphi[fl], ws.fl)
            ok[floor] = _kkt(trial[:, floor], evt.grad) < it.r[fl]
    return trial, ok


def _sweep_stream(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    damping: float,
    iters: int,
    tol: float = 1e-10,
    stall_window: int = 250,
    window: int = _STREAM,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """Damped sweeps of Theorem 1, α ← (1−ω)α + ω clip(λ(t+1)(ρ^t − φ(t)) / (2(1−ϕ)P^t), 0, 1)
    (Eqs. 21, 51; undamped it can cycle), at most ``iters`` per problem: the iteration of
    ``_solvers.damped_sweep``, problem by problem, streamed like :func:`_newton_stream`.

    A problem stops once max_t |Δα| ≤ ``tol`` or, from 2w sweeps on (w = ``stall_window``),
    when its step has not halved over the last w sweeps (a cycle). Unlike the batched
    sweep, which keeps sweeping a converged problem until a tenth of its batch has stopped,
    a problem stops at its own test, so its result does not depend on its neighbours in the
    batch (the two differ by less than tol/ω; the sweep only seeds a Newton solve).
    ``inclusion``: the sampling rule of P."""
    a0 = np.asarray(a0, dtype=float)
    T, m = a0.shape
    out = np.array(a0, copy=True)
    ws_ev, ws = _Workspace(), _Workspace()
    w = stall_window
    nxt = 0
    idx = np.empty(0, dtype=np.intp)
    A = np.empty((T, 0))
    its = np.empty(0, dtype=np.int64)
    ref = np.empty(0)
    done = np.empty(0, dtype=bool)  # stopped, still in the window (frozen)
    while iters > 0:
        n_done = int(done.sum())
        if n_done and (n_done >= 0.1 * idx.size or (nxt < m and n_done >= 0.1 * window)):
            keep = ~done
            idx, A, its, ref, done = idx[keep], A[:, keep], its[keep], ref[keep], done[keep]
        if idx.size <= 0.9 * window and nxt < m:
            new = np.arange(nxt, min(m, nxt + window - idx.size))
            nxt = int(new[-1]) + 1
            idx = np.concatenate([idx, new])
            A = np.concatenate([A, a0[:, new]], axis=1)
            its = np.concatenate([its, np.zeros(new.size, dtype=np.int64)])
            ref = np.concatenate([ref, np.full(new.size, np.inf)])
            done = np.concatenate([done, np.zeros(new.size, dtype=bool)])
        n = idx.size
        if n == 0 or done.all():
            if nxt >= m:
                break
            idx, A, its, ref, done = idx[:0], A[:, :0], its[:0], ref[:0], done[:0]
            continue
        vp = varphi[idx]
        ev = evaluate(A, rho0[idx], vp, phi, R, N, K, costate_only=True, ws=ws_ev, inclusion=inclusion)
        step = ws.get("step", T, n)
        den = ws.get("den", T, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.subtract(ev.rho[:T], phi[:T, None], out=step)
            step *= ev.lam[1:]
            np.multiply(ev.P[:T], 2.0 * (1.0 - vp), out=den)
            step /= den
        np.fmax(step, 0.0, out=step)  # = clip(nan_to_num(·, nan=0), 0, 1)
        np.fmin(step, 1.0, out=step)
        step -= A
        step *= damping
        if done.any():
            step[:, done] = 0.0
        A += step
        np.abs(step, out=step)
        size = step.max(axis=0)
        moving = size > tol
        its += 1
        if w:
            check = its % w == 0
            late = check & (its >= 2 * w)
            moving[late] &= size[late] < 0.5 * ref[late]
            ref[check] = size[check]
        stop = ~done & (~moving | (its >= iters))
        if stop.any():
            out[:, idx[stop]] = A[:, stop]
        done |= stop
    return out


def _compiled_outputs(solve: Callable[..., object], shape: tuple[int, int]) -> tuple[FloatArray, ...]:
    """Empty outputs of a compiled solve for problems ``shape`` = (T, m): α, U, r_KKT of
    :func:`_newton_compiled`, α of :func:`_sweep_compiled`."""
    if solve is _newton_compiled:
        return np.empty(shape), np.empty(shape[1]), np.empty(shape[1])
    return (np.empty(shape),)


def _newton_compiled(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    tol: float = 1e-11,
    max_iter: int = 200,
    out: tuple[FloatArray, ...] | None = None,
    inclusion: Inclusion = "privacy",
    counter: NDArray[np.int64] | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`_newton_stream`'s iteration by the compiled kernel ``_kernels.newton`` (each
    problem solved to the end in a lane of its own, up to 32 side by side, instead of a window
    of row operations); the same α, U and KKT residual to rounding (log1p and expm1 are
    ``_kernels``' own, not NumPy's). With ``inclusion="uniform"`` P is the constant of
    :func:`_uniform_p`, handed to the kernel (−1: the privacy rule). ``out``: arrays to write
    α, U and r_KKT into; ``counter``: the next problem to take (int64 (1,), from zero),
    shared by the threads of :func:`_on_threads` that solve the same problems into the same
    ``out``."""
    a0 = np.asarray(a0, dtype=float)
    out_a, out_U, out_k = _compiled_outputs(_newton_compiled, a0.shape) if out is None else out
    pu = _uniform_p(N, K, inclusion)
    newton = _kernels.newton
    assert newton is not None, "the compiled engine needs Numba"
    newton(
        a0,
        np.ascontiguousarray(rho0, dtype=float),
        np.ascontiguousarray(varphi, dtype=float),
        phi,
        R,
        N,
        K,
        -1.0 if pu is None else pu,
        tol,
        max_iter,
        out_a,
        out_U,
        out_k,
        np.zeros(1, dtype=np.int64) if counter is None else counter,
    )
    return out_a, out_U, out_k


def _sweep_compiled(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    damping: float,
    iters: int,
    tol: float = 1e-10,
    stall_window: int = 250,
    out: tuple[FloatArray, ...] | None = None,
    inclusion: Inclusion = "privacy",
    counter: NDArray[np.int64] | None = None,
) -> FloatArray:
    """:func:`_sweep_stream`'s damped sweeps by the compiled kernel ``_kernels.sweep`` (lanes,
    as :func:`_newton_compiled`; ``out``: a 1-tuple of the array to write α into; ``counter``
    as for :func:`_newton_compiled`).
    Equal to rounding while a sweep converges; a sweep that cycles is chaotic, so its iterate
    after the cap can differ (it only seeds a Newton solve). ``inclusion``: the sampling rule,
    as for :func:`_newton_compiled`."""
    a0 = np.asarray(a0, dtype=float)
    (alpha,) = _compiled_outputs(_sweep_compiled, a0.shape) if out is None else out
    pu = _uniform_p(N, K, inclusion)
    sweep = _kernels.sweep
    assert sweep is not None, "the compiled engine needs Numba"
    sweep(
        a0,
        np.ascontiguousarray(rho0, dtype=float),
        np.ascontiguousarray(varphi, dtype=float),
        phi,
        R,
        N,
        K,
        -1.0 if pu is None else pu,
        damping,
        iters,
        tol,
        stall_window,
        alpha,
        np.zeros(1, dtype=np.int64) if counter is None else counter,
    )
    return alpha


def _frozen(x: NDArray[np.float64]) -> NDArray[np.float64]:
    x = np.array(x, dtype=float, copy=True)
    x.setflags(write=False)
    return x


@dataclass(frozen=True)
class BestResponse:
    """Best responses of a set of clients (arrays read-only).

    ``alpha`` and ``rho`` have shape (n_clients, T+1) (α^T = 0), ``utility`` and
    ``kkt_residual`` shape (n_clients,); for a single client given as scalars they are 1-D and
    float. ``converged``: every client's projected-gradient (KKT) residual ≤ ``kkt_tol``."""

    alpha: FloatArray
    rho: FloatArray
    utility: FloatArray
    kkt_residual: FloatArray
    converged: bool
    n_starts_tried: int


@dataclass(frozen=True)
class _Raw:
    """Solutions for unique client types (time-major α of shape (T, m))."""

    a: FloatArray
    U: FloatArray
    kkt: FloatArray
    n_starts: int


def _random_starts(rng: np.random.Generator | int | None, n_starts: int, T: int) -> FloatArray:
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(0 if rng is None else rng)
    return gen.uniform(0.0, 1.0, size=(n_starts, T))


def _run(
    engine: Solver,
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    chunk: int,
    kind: Engine = "reference",
    threads: int | None = 1,
    *,
    inclusion: Inclusion = "privacy",
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Local solves of the m problems (the columns of ``a0``) by ``engine`` (``kind``: which
    implementation of Newton), under the sampling rule ``inclusion``."""
    T, m = a0.shape
    if engine == "lbfgsb":
        return _solvers.lbfgsb(a0, rho0, varphi, phi, R, N, K, chunk=chunk, inclusion=inclusion)
    if kind != "reference":
        newton = _newton_compiled if kind == "compiled" else _newton_stream
        return _on_threads(newton, a0, rho0, varphi, phi, R, N, K, threads=threads, inclusion=inclusion)
    step = max(1, _BATCH_CELLS // (T + 1))
    if m <= step:
        return _solvers.newton(a0, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    parts = [
        _solvers.newton(a0[:, i : i + step], rho0[i : i + step], varphi[i : i + step], phi, R, N, K, inclusion=inclusion)
        for i in range(0, m, step)
    ]
    return (np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))


@dataclass(frozen=True)
class Candidates:
    """Every solved (type, start) problem: α (T, P), U (P,), kkt (P,) and the owning type;
    ``corners``: the Newton solutions of the corner starts before any polish (for
    ``solve_types(corners_solved=...)``), when they were among the starts."""

    a: FloatArray
    U: FloatArray
    kkt: FloatArray
    owner: NDArray[np.intp]
    corners: tuple[FloatArray, FloatArray, FloatArray] | None = None


def best_per_owner(U: FloatArray, owner: NDArray[np.intp], m: int) -> NDArray[np.intp]:
    """Index of the highest-U problem of each of the m owners (first one on ties; U that is
    not finite counts as −∞): one pass (``_kernels.best_per_owner``), not a sort."""
    out = np.empty(m, dtype=np.intp)
    _kernels.best_per_owner(U, np.asarray(owner, dtype=np.intp), out)
    assert np.all(out >= 0)
    return out


def solve_types(
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    starts: FloatArray | None,
    warm: FloatArray | None,
    sweep_restarts: int,
    sweep_iters: int,
    sweep_damping: float,
    solver: Solver,
    chunk: int,
    include_corners: bool = True,
    polish_above: float = 1e-8,
    extra: tuple[FloatArray, NDArray[np.intp]] | None = None,
    keep_all: bool = False,
    engine: Engine | None = None,
    corners_solved: tuple[FloatArray, FloatArray, FloatArray] | None = None,
    threads: int | None = None,
    inclusion: Inclusion = "privacy",
) -> tuple[_Raw, Candidates | None]:
    """Multi-start solve for m client types (no validation, no de-duplication).

    Starts: α ≡ 0, α ≡ 1, α ≡ 0.5 (``include_corners``), the damped sweeps of Eq. (21) started
    from α ≡ 0, 0.5, 1 (then from the random starts), the common random ``starts``
    (n, T), the per-type ``warm`` start (T, m) and ``extra`` = (α (T, P), owner (P,))
    starts for individual types. Keeps the highest U per type; ``keep_all`` also returns
    every solved problem.

    All (type, start) problems are solved at once, batched over every client: each problem
    to the end by the compiled kernels (``engine="compiled"``, :func:`_newton_compiled`,
    :func:`_sweep_compiled`), by :func:`_newton_stream` and :func:`_sweep_stream`
    (``"streamed"``) or by the chunked ``_solvers.newton`` and ``_solvers.damped_sweep``
    (``"reference"``, the path before streaming); None: :func:`default_engine`.
    ``corners_solved`` = (α (T, 3m), U, kkt): the unpolished Newton
    solutions of the three corner starts at this very φ, R (from an earlier call with
    ``keep_all``): they are used as they are instead of being solved again. ``threads``: the
    streamed engines' problems are split over this many threads (None: every core;
    :func:`_on_threads`; the answer does not depend on it). ``inclusion``: the sampling rule
    of P (:data:`~._dynamics.Inclusion`), handed to every solve; not checked here."""
    engine = default_engine() if engine is None else engine
    T = phi.size - 1
    m = rho0.size
    inits: list[FloatArray] = []
    if include_corners:
        inits += [np.zeros((T, m)), np.ones((T, m)), np.full((T, m), 0.5)]
    if warm is not None:
        inits.append(np.asarray(warm, float))
    rand = [] if starts is None else [np.repeat(s[:, None], m, axis=1) for s in starts]
    if sweep_restarts > 0 and sweep_iters > 0:
        sweep_from = [np.zeros((T, m)), np.full((T, m), 0.5), np.ones((T, m))] + rand
        s0 = np.concatenate(sweep_from[:sweep_restarts], axis=1)
        k = s0.shape[1] // m
        if engine != "reference":
            sweep = _sweep_compiled if engine == "compiled" else _sweep_stream
            swept = _on_threads(
                sweep,
                s0,
                np.tile(rho0, k),
                np.tile(varphi, k),
                phi,
                R,
                N,
                K,
                damping=sweep_damping,
                iters=sweep_iters,
                threads=threads,
                inclusion=inclusion,
            )
        else:
            swept = _solvers.damped_sweep(
                s0, np.tile(rho0, k), np.tile(varphi, k), phi, R, N, K, damping=sweep_damping, iters=sweep_iters, inclusion=inclusion
            )
        inits += [swept[:, j * m : (j + 1) * m] for j in range(k)]
    inits += rand
    n_inits = len(inits)
    owner = np.tile(np.arange(m), n_inits)
    parts = inits
    if extra is not None:
        parts = inits + [np.asarray(extra[0], float)]
        owner = np.concatenate([owner, np.asarray(extra[1], dtype=np.intp)])
    a0 = np.concatenate(parts, axis=1)
    skip = 3 * m if include_corners and corners_solved is not None else 0
    a, U, kkt = _run(
        solver, a0[:, skip:], rho0[owner[skip:]], varphi[owner[skip:]], phi, R, N, K, chunk, engine, threads, inclusion=inclusion
    )
    if skip:
        assert corners_solved is not None  # skip > 0 only when corners_solved is given
        a = np.concatenate([corners_solved[0], a], axis=1)
        U = np.concatenate([corners_solved[1], U])
        kkt = np.concatenate([corners_solved[2], kkt])
    unpolished = (a[:, : 3 * m].copy(), U[: 3 * m].copy(), kkt[: 3 * m].copy()) if include_corners and keep_all else None
    best = best_per_owner(U, owner, m)
    a_best, U_best, kkt_best = a[:, best], U[best], kkt[best]
    # safety net: a winner whose solve stalled above the tolerance is polished by per-client
    # L-BFGS-B and Newton again (rare; keeps the better point)
    bad = np.flatnonzero(kkt_best > polish_above)
    if bad.size:
        a2, U2, k2 = _solvers.lbfgsb(a_best[:, bad], rho0[bad], varphi[bad], phi, R, N, K, inclusion=inclusion)
        if solver == "newton":
            newton: Callable[..., tuple[FloatArray, FloatArray, FloatArray]] = {
                "compiled": _newton_compiled,
                "streamed": _newton_stream,
                "reference": _solvers.newton,
            }[engine]  # type: ignore[assignment]  # the engines' signatures differ; mypy joins them to 'function'
            a2, U2, k2 = newton(a2, rho0[bad], varphi[bad], phi, R, N, K, inclusion=inclusion)
        better = (U2 >= U_best[bad] - 1e-12 * (1.0 + np.abs(U_best[bad]))) & (k2 < kkt_best[bad])
        idx = bad[better]
        a_best[:, idx], U_best[idx], kkt_best[idx] = a2[:, better], U2[better], k2[better]
        if keep_all:
            a[:, best[idx]], U[best[idx]], kkt[best[idx]] = a2[:, better], U2[better], k2[better]
    raw = _Raw(a_best, U_best, kkt_best, n_inits + (0 if extra is None else 1))
    return raw, (Candidates(a, U, kkt, owner, unpolished) if keep_all else None)


def unique_types(rho0: FloatArray, varphi: FloatArray) -> tuple[FloatArray, FloatArray, NDArray[np.intp], NDArray[np.intp]]:
    """Distinct (ρ^0, ϕ) rows: (ρ^0_u, ϕ_u, index of first occurrence, inverse map)."""
    rows = np.column_stack([rho0, varphi])
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    return rho0[first], varphi[first], first, inverse


def best_response(
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    alpha_init: ArrayLike | None = None,
    n_starts: int = 8,
    rng: np.random.Generator | int | None = None,
    solver: Solver = "newton",
    kkt_tol: float = 1e-7,
    sweep_restarts: int = 3,
    sweep_iters: int = 2000,
    sweep_damping: float = 0.05,
    chunk_size: int = 1,
    inclusion: Inclusion = "privacy",
) -> BestResponse:
    """Each client's optimal correction factors given φ(0..T) and R_0..R_T (Theorem 1).

    Maximises U_i(α_i) = Σ_t P_i^t g_i^t (Eqs. 14-15, 19-20) over α_i ∈ [0, 1]^T, α_i^T = 0,
    from several starts — α ≡ 0, α ≡ 1, α ≡ 0.5, ``sweep_restarts`` damped sweeps of Eq. (21)
    (ω = ``sweep_damping``, ``sweep_iters`` sweeps, from α ≡ 0, 0.5, 1), ``n_starts`` seeded
    U[0, 1]^T draws shared by all clients, and ``alpha_init`` (warm start) — keeping the
    highest U_i. Clients with identical (ρ^0, ϕ) are solved once. A sweep stops early once it
    has converged (max|Δα| ≤ 1e-10) or, after 500 sweeps, when its step has not halved over
    250 sweeps (it cycles; its iterate is only a starting point).

    ``solver="newton"`` (default): exact-Hessian projected Newton, batched over all clients
    and starts and streamed through a cache-sized window (:func:`_newton_stream`; the
    iteration of ``_solvers.newton``). ``solver="lbfgsb"``: ``scipy.optimize.minimize`` —
    L-BFGS-B with the adjoint gradient on the summed objective of ``chunk_size`` clients per
    call (1: per-client solves). Newton is the default because L-BFGS-B on a sum over many
    clients stops on its relative-reduction test long before every client is stationary
    (KKT residuals ~1e-5 with 100-1000 clients, after thousands of iterations), and per-client
    L-BFGS-B costs a Python-level solve per client and start; both engines are checked
    against each other. A winner whose KKT residual is above 1e-8 is polished by per-client
    L-BFGS-B (and Newton). Accepts if every KKT residual
    max_t |clip(α^t + ∂U/∂α^t, 0, 1) − α^t| ≤ ``kkt_tol``, else warns.

    ``inclusion``: the sampling rule the clients face (:data:`~._dynamics.Inclusion`):
    ``"privacy"`` (Eq. 14, default) or ``"uniform"`` (P = 1 − (1 − 1/N)^K whatever ρ is)."""
    inclusion = _check_inclusion(inclusion)
    r0, vp = as_clients(rho0, varphi)
    phi_arr = np.asarray(phi, dtype=float)
    if phi_arr.ndim != 1:
        raise ValueError(f"phi: expected a list of T+1 values, got shape {phi_arr.shape}")
    T = check_horizon(phi_arr.size - 1) if phi_arr.size >= 2 else check_horizon(0)
    phi_arr = as_rounds("phi", phi_arr, T, lower=0.0, strict=True)
    R_arr = as_rounds("R", R, T, lower=0.0)
    N, K = check_population(N, K)
    if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts < 0:
        raise ValueError(f"n_starts: must be an integer >= 0, got {n_starts!r}")
    if solver not in ("newton", "lbfgsb"):
        raise ValueError(f"solver: must be 'newton' or 'lbfgsb', got {solver!r}")
    if not 0.0 < sweep_damping <= 1.0:
        raise ValueError(f"sweep_damping: must be in (0, 1], got {sweep_damping!r}")
    n = r0.size
    warm_full: FloatArray | None = None
    if alpha_init is not None:
        w = np.asarray(alpha_init, dtype=float)
        w = np.broadcast_to(w, (n, w.shape[-1])) if w.ndim == 1 else w
        if w.ndim != 2 or w.shape[0] != n or w.shape[1] not in (T, T + 1):
            raise ValueError(f"alpha_init: expected shape ({n}, {T}) or ({n}, {T + 1}), got {np.shape(alpha_init)}")
        if not np.all((w >= 0) & (w <= 1)):
            raise ValueError("alpha_init: values must be in [0, 1]")
        warm_full = w[:, :T]
    u_r0, u_vp, first, inverse = unique_types(r0, vp)
    warm = None if warm_full is None else np.ascontiguousarray(warm_full[first].T)
    raw, _ = solve_types(
        u_r0,
        u_vp,
        phi_arr,
        R_arr,
        N,
        K,
        starts=_random_starts(rng, n_starts, T) if n_starts else None,
        warm=warm,
        sweep_restarts=sweep_restarts,
        sweep_iters=sweep_iters,
        sweep_damping=sweep_damping,
        solver=solver,
        chunk=chunk_size,
        inclusion=inclusion,
    )
    return assemble(
        raw,
        u_r0,
        u_vp,
        inverse,
        phi_arr,
        R_arr,
        N,
        K,
        kkt_tol=kkt_tol,
        squeeze=np.ndim(rho0) == 0 and np.ndim(varphi) == 0,
        inclusion=inclusion,
    )


def assemble(
    raw: _Raw,
    u_r0: FloatArray,
    u_vp: FloatArray,
    inverse: NDArray[np.intp],
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    kkt_tol: float,
    squeeze: bool = False,
    warn: bool = True,
    inclusion: Inclusion = "privacy",
) -> BestResponse:
    """Map unique-type solutions back to clients and evaluate them once more (under the
    sampling rule ``inclusion``)."""
    ev = evaluate(raw.a, u_r0, u_vp, phi, R, N, K, inclusion=inclusion)
    kkt = np.abs(np.clip(raw.a + ev.grad, 0.0, 1.0) - raw.a).max(axis=0)
    T = phi.size - 1
    alpha_u = np.zeros((u_r0.size, T + 1))
    alpha_u[:, :T] = raw.a.T
    alpha, rho = alpha_u[inverse], ev.rho.T[inverse]
    U, k = ev.U[inverse], kkt[inverse]
    converged = bool(np.all(k <= kkt_tol))
    if warn and not converged:
        bad = int(np.argmax(k))
        warnings.warn(
            f"best_response: KKT residual {k[bad]:.3g} > kkt_tol = {kkt_tol:g} (client {bad}); the returned α may not be optimal",
            RuntimeWarning,
            stacklevel=3,
        )
    if squeeze:
        return BestResponse(  # one client: U and the KKT residual as plain floats, not (N,) arrays
            _frozen(alpha[0]),
            _frozen(rho[0]),
            float(U[0]),  # type: ignore[arg-type]  # one client: plain floats, the fields are typed for (N,) arrays
            float(k[0]),  # type: ignore[arg-type]  # one client: plain floats, the fields are typed for (N,) arrays
            converged,
            raw.n_starts,
        )
    return BestResponse(_frozen(alpha), _frozen(rho), _frozen(U), _frozen(k), converged, raw.n_starts)
