"""Compiled kernels of the client problem: the three scalar recursions — the trajectory of
Eq. (20), the costate of Eqs. (53-54) and the Riccati pass of the Newton step (Pantoja 1988) —
and two whole per-problem solves built on them, the projected Newton iteration and the damped
sweep of Eq. (21) (the ``"compiled"`` engine of ``_best_response``).

Each recursion is a loop over the T rounds whose body is a handful of operations on one row of
m problems. Written as NumPy row operations (the fallback below, and the form the rest of
``_dynamics`` and ``_best_response`` use), the Riccati pass alone is ~25 calls per round, each
a few microseconds of arithmetic behind a microsecond of interpreter that holds the GIL — so
it costs more than its arithmetic and the threads of ``_best_response._on_threads`` wait on
each other. Compiled with Numba (``nogil``), each recursion is one call that releases the
GIL. The recursions do the same IEEE operations in the same order as their NumPy form (no
fused multiply-add, no reassociation: Numba's default, not ``fastmath``), so they agree to
the last bit — the tests compare them.

The whole solves go one step further: a problem is solved to the end in arrays of T+1
values, so the ~60 NumPy calls per Newton step of a window of problems (and the window's
book-keeping) disappear, which is most of the time when a best response has a few hundred
problems (the FedPCS game at N = 100). They repeat the streamed engine's arithmetic except
log1p and expm1: here :func:`_log1p` and :func:`_neg_expm1`, branch-free (fdlibm's log1p
reduction and polynomial, as in FreeBSD and musl; a Taylor expm1 after the usual k·ln2
reduction) so that the loop that computes P over the rounds vectorises, within two ulp of the
C library's (tested); the streamed engine calls them elementwise (``log1m``, ``neg_expm1``),
not NumPy's SIMD versions, whose last bits differ between CPU kinds. The two engines agree to
rounding, not to the bit (tested), and without Numba the streamed engine is used (with
NumPy's log1p and expm1).

The engine's kernels solve :data:`_WIDTH` problems side by side in lanes (``_newton_lanes``,
``_sweep_lanes``; the one-problem ``_newton_nb`` and ``_sweep_nb`` stay as their reference,
and give the same bits, tested): one problem's evaluation is three recursions whose steps
wait on each other, and side by side each step is one vector operation for every lane.

Hand-written, not a library call: no solver library exposes these recursions or this
per-problem iteration."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedgame.incentives.fedpcs import _linalg

__all__ = ["COMPILED", "costate", "riccati", "trajectory"]

FloatArray = NDArray[np.float64]


def _trajectory_py(a: FloatArray, rho0: FloatArray, phi: FloatArray, rho: FloatArray) -> None:
    """ρ^{t+1} = (ρ^t − φ(t)) α^t + φ(t) (Eq. 20) into ``rho`` (T+1, m), ρ^0 = ``rho0``."""
    T = a.shape[0]
    rho[0] = rho0
    for t in range(T):
        np.subtract(rho[t], phi[t], out=rho[t + 1])
        rho[t + 1] *= a[t]
        rho[t + 1] += phi[t]


def _costate_py(a: FloatArray, S: FloatArray, lam: FloatArray) -> None:
    """λ(T) = S(T), λ(t) = α^t λ(t+1) + S(t) (Eqs. 53-54) into ``lam`` (T+1, m)."""
    T = a.shape[0]
    lam[T] = S[T]
    for t in range(T - 1, -1, -1):
        np.multiply(a[t], lam[t + 1], out=lam[t])
        lam[t] += S[t]


def _riccati_py(
    a: FloatArray,
    B: FloatArray,
    cP: FloatArray,
    W: FloatArray,
    S: FloatArray,
    f2: FloatArray,
    bound: NDArray[np.bool_],
    k: FloatArray,
    Kg: FloatArray,
    curv: FloatArray,
) -> None:
    """The backward and forward passes of ``_best_response._riccati_step`` (its docstring has
    the recursion): gains ``k``, the pivots ``curv`` (T, m) and the step, written over ``Kg``
    row by row once each gain is used. ``B`` = ρ − φ, ``cP`` = 2(1−ϕ)P, ``W`` = 2(1−ϕ)P'α −
    λ(t+1) (T, m); ``S``, ``f2`` (T+1, m); ``bound``: the ε-active variables (gains 0)."""
    T, m = a.shape
    V = -f2[T]
    v = -S[T]
    BV, Quu, fl, Qu, Qux, w1 = (np.empty(m) for _ in range(6))
    for t in range(T - 1, -1, -1):
        A, Bt, cPt, bt = a[t], B[t], cP[t], bound[t]
        np.multiply(Bt, V, out=BV)
        np.multiply(Bt, BV, out=Quu)
        Quu += cPt
        np.abs(BV, out=fl)
        fl *= Bt
        fl += cPt
        fl *= 1e-10
        fl += 1e-300
        np.abs(Quu, out=Quu)
        Qm = np.maximum(Quu, fl, out=curv[t])
        np.multiply(cPt, A, out=Qu)
        np.multiply(Bt, v, out=w1)
        Qu += w1
        np.multiply(A, BV, out=Qux)
        Qux += W[t]
        kt = np.divide(Qu, Qm, out=k[t])
        np.negative(kt, out=kt)
        np.copyto(kt, 0.0, where=bt)
        Kt = np.divide(Qux, Qm, out=Kg[t])
        np.negative(Kt, out=Kt)
        np.copyto(Kt, 0.0, where=bt)
        v = A * v
        v -= S[t]
        np.multiply(Kt, Qu, out=w1)
        v += w1
        V = A * A * V
        V -= f2[t]
        np.multiply(Kt, Qux, out=w1)
        V += w1
    dx = np.zeros(m)
    for t in range(T):
        du = np.multiply(Kg[t], dx, out=Kg[t])
        du += k[t]
        dx *= a[t]
        np.multiply(B[t], du, out=w1)
        dx += w1


def _trajectory_nb(a: Any, rho0: Any, phi: Any, rho: Any) -> None:  # pragma: no cover - compiled
    T, m = a.shape
    for j in range(m):
        rho[0, j] = rho0[j]
    for t in range(T):
        p = phi[t]
        for j in range(m):
            rho[t + 1, j] = (rho[t, j] - p) * a[t, j] + p


def _costate_nb(a: Any, S: Any, lam: Any) -> None:  # pragma: no cover - compiled
    T, m = a.shape
    for j in range(m):
        lam[T, j] = S[T, j]
    for t in range(T - 1, -1, -1):
        for j in range(m):
            lam[t, j] = a[t, j] * lam[t + 1, j] + S[t, j]


def _riccati_col(
    a: Any, B: Any, cP: Any, W: Any, S: Any, f2: Any, bound: Any, k: Any, Kg: Any, curv: Any
) -> None:  # pragma: no cover - compiled
    """:func:`_riccati_py` for one problem (1-D columns): the pass of ``_riccati_step``."""
    T = a.shape[0]
    V = -f2[T]
    v = -S[T]
    for t in range(T - 1, -1, -1):
        A = a[t]
        Bt = B[t]
        cPt = cP[t]
        BV = Bt * V
        Quu = abs(Bt * BV + cPt)
        fl = (abs(BV) * Bt + cPt) * 1e-10 + 1e-300
        Qm = Quu if (Quu != Quu or Quu >= fl) else fl  # np.maximum, NaN included
        curv[t] = Qm
        Qu = cPt * A + Bt * v
        Qux = A * BV + W[t]
        if bound[t]:
            kt = 0.0
            Kt = 0.0
        else:
            kt = -(Qu / Qm)
            Kt = -(Qux / Qm)
        k[t] = kt
        Kg[t] = Kt
        v = (A * v - S[t]) + Kt * Qu
        V = (A * A * V - f2[t]) + Kt * Qux
    dx = 0.0
    for t in range(T):
        du = Kg[t] * dx + k[t]
        Kg[t] = du
        dx = dx * a[t] + B[t] * du


def _riccati_nb(
    a: Any, B: Any, cP: Any, W: Any, S: Any, f2: Any, bound: Any, k: Any, Kg: Any, curv: Any
) -> None:  # pragma: no cover - compiled
    for j in range(a.shape[1]):
        _riccati_col(a[:, j], B[:, j], cP[:, j], W[:, j], S[:, j], f2[:, j], bound[:, j], k[:, j], Kg[:, j], curv[:, j])


# --------------------------------------------------------------------------------------------
# Whole solves, one problem at a time (the reference of the lane kernels below)
# --------------------------------------------------------------------------------------------
#
# The streamed engines run each step of the iteration as row operations over a window of
# problems; here one problem is solved to the end in arrays of T+1 values that stay in L1, so
# none of the ~60 passes per Newton step over (T+1, window) arrays and none of the window's
# book-keeping remain. The iteration is that of ``_best_response._newton_stream`` and
# ``_sweep_stream``, operation for operation, except the transcendentals: log1p and expm1 are
# :func:`_log1p` and :func:`_neg_expm1` below here, NumPy's SIMD versions there; the two agree
# to rounding.

#: how much :func:`_evaluate_col` computes: the utility (and ρ, P, P', g), + the costate,
#: + the gradient, + the second-order term f''
_U, _COSTATE, _GRAD, _SECOND = 0, 1, 2, 3

#: the work arrays' rows are padded to a multiple of this (AVX-512's eight doubles), so that the
#: loop over the rounds that computes P runs in whole vectors (no scalar remainder)
_LANES = 8
#: problems solved side by side by the lane kernels (at most; fewer when there are fewer). The
#: kernels loop over a run-time count of lanes: a constant count is unrolled by LLVM and then
#: left scalar, as it cannot prove the work arrays apart; 32 measured faster than 16 and as
#: fast as 64
_WIDTH = 32

# log1p: fdlibm's s_log1p.c (as in FreeBSD and musl) reduction and polynomial, without its
# branches for small or special arguments: the general path covers every x > −1 within an ulp
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LG1, _LG2, _LG3, _LG4 = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01)
_LG5, _LG6, _LG7 = 1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01
_INV_LN2 = 1.44269504088896338700e00
# 1/n!, n = 2..14: Taylor's expm1 on |r| ≤ ln2/2, truncation below 1e-19 relative
_E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10, _E11, _E12, _E13, _E14 = (1.0 / math.factorial(n) for n in range(2, 15))


#: float64 bits as int64 and back: Numba intrinsics bound by :func:`_compile`
_f2i: Callable[[float], int]
_i2f: Callable[[int], float]
#: the next problem of a call, shared by its threads: :func:`_counter_take`, bound by :func:`_compile`
_take: Callable[[Any], int]


def _log1p(x: float) -> float:  # pragma: no cover - compiled
    """log(1 + x) for x > −1, branch-free so that a loop of it vectorises (the C library's
    log1p is a call per value): 1 + x = 2^k (1 + f) with 1 + f in [√2/2, √2), the rounding
    of 1 + x corrected by c, log(1 + f) from FreeBSD's polynomial in s = f/(2 + f)."""
    u = 1.0 + x
    iu = _f2i(u)
    hu = (iu >> 32) + (0x3FF00000 - 0x3FE6A09E)
    k = (hu >> 20) - 0x3FF
    c = (1.0 - (u - x)) if k >= 1 else (x - (u - 1.0))
    c = c / u if k < 54 else 0.0
    hu = (hu & 0x000FFFFF) + 0x3FE6A09E
    f = _i2f((hu << 32) | (iu & 0xFFFFFFFF)) - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7))) + w * (_LG2 + w * (_LG4 + w * _LG6))
    dk = float(k)
    return s * (hfsq + r) + (dk * _LN2_LO + c) - hfsq + f + dk * _LN2_HI


def _neg_expm1(z: float) -> float:  # pragma: no cover - compiled
    """−expm1(z) = 1 − e^z for z ≤ 0, branch-free: z = k ln2 + r, |r| ≤ ln2/2, and
    1 − 2^k e^r = (1 − 2^k) − 2^k expm1(r) (both terms exact or small for k ≤ 0). Below
    z = −40, 1 − e^z rounds to 1, so z is clamped there (−∞ included); NaN stays NaN."""
    z = -40.0 if z < -40.0 else z
    kf = math.floor(z * _INV_LN2 + 0.5)
    r = (z - kf * _LN2_HI) - kf * _LN2_LO
    p = r + r * r * (
        _E2
        + r
        * (
            _E3
            + r
            * (
                _E4
                + r * (_E5 + r * (_E6 + r * (_E7 + r * (_E8 + r * (_E9 + r * (_E10 + r * (_E11 + r * (_E12 + r * (_E13 + r * _E14)))))))))
            )
        )
    )
    tk = _i2f((int(kf) + 1023) << 52)
    return (1.0 - tk) - tk * p


def _padded(T: int) -> int:
    """T+1 rounded up to a multiple of :data:`_LANES`: the length of a work row."""
    return (T + _LANES) // _LANES * _LANES


def _round_constants(phi: Any, N: int, K: int) -> Any:  # pragma: no cover - compiled
    """What :func:`_evaluate_col` needs of φ, computed once per solve instead of once per
    evaluation: rows N φ(t), K/(N φ(t)) and −(K−1)/(N φ(t)) (the same operations, so the same
    bits), padded with φ = 1 to a work row's length (:func:`_padded`)."""
    c = np.empty((3, _padded(phi.shape[0] - 1)))
    for t in range(c.shape[1]):
        nphi = N * (phi[t] if t < phi.shape[0] else 1.0)
        c[0, t] = nphi
        c[1, t] = K / nphi
        c[2, t] = -(K - 1) / nphi
    return c


def _evaluate_col(
    a: Any, r0: float, vp: float, phi: Any, R: Any, N: int, K: int, pu: float, level: int, w: Any, rc: Any
) -> float:  # pragma: no cover - compiled
    """``_dynamics.evaluate`` for one problem: decisions ``a`` (T,), type (``r0``, ``vp``);
    ``pu`` ≥ 0 the uniform rule's constant P (else the privacy rule). Writes the rows of
    ``w`` (9, :func:`_padded` (T)) as far as ``level`` asks: ρ, P, P', g, 1 − x (−1 where
    the cap x = 1 binds), R − 2ϕρ (``_U``); S, λ (``_COSTATE``); ∂U/∂α in w[8, :T]
    (``_GRAD``); f'' over 1 − x in w[4] (``_SECOND``; 1 − x is not needed after it).
    Returns U = Σ_t P^t g^t. ``rc``: :func:`_round_constants` of φ, N, K. ``w[0]`` is
    zero past T: P, P' and 1 − x are computed over whole padded rows, in vectors."""
    T = a.shape[0]
    rho, P, dP, g, u, mr, S, lam, grad = w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]
    c = 1.0 - vp
    rho[0] = r0
    for t in range(T):
        rho[t + 1] = (rho[t] - phi[t]) * a[t] + phi[t]
    for t in range(rho.shape[0]):  # vectorised: no reduction, branches become selects
        x = rho[t] / rc[0, t]
        inside = x < 1.0
        x = 1.0 if x > 1.0 else x
        ut = 1.0 - x
        Pt = 1.0 if x == 1.0 else _neg_expm1(_log1p(-x) * K)  # log1p(−1) = −∞: P = 1
        d = (1.0 - Pt) / ut * rc[1, t] if inside else 0.0
        if pu >= 0.0:
            Pt = pu
            d = 0.0
        P[t] = Pt
        dP[t] = d
        u[t] = ut if inside else -1.0  # the P'' term vanishes outside (marked by u < 0)
    U = 0.0
    for t in range(T + 1):
        m1 = R[t] - rho[t] * vp
        gt = rho[t] * m1
        if t < T:
            gt -= a[t] * a[t] * c
        g[t] = gt
        mr[t] = m1 - rho[t] * vp
        U += P[t] * gt
    if level == _U:
        return U
    for t in range(T + 1):
        S[t] = dP[t] * g[t] + P[t] * mr[t]
    lam[T] = S[T]
    for t in range(T - 1, -1, -1):
        lam[t] = a[t] * lam[t + 1] + S[t]
    if level == _COSTATE:
        return U
    for t in range(T):
        grad[t] = (rho[t] - phi[t]) * lam[t + 1] - P[t] * a[t] * (2.0 * c)
    if level == _SECOND:
        for t in range(T + 1):
            f = dP[t] * mr[t] * 2.0 - P[t] * (2.0 * vp)
            if K > 1 and u[t] >= 0.0:
                f += dP[t] / u[t] * rc[2, t] * g[t]
            u[t] = f
    return U


def _kkt_col(a: Any, grad: Any) -> float:  # pragma: no cover - compiled
    """max_t |clip(α^t + ∂U/∂α^t, 0, 1) − α^t| (NaN if any term is NaN)."""
    r = 0.0
    for t in range(a.shape[0]):
        y = a[t] + grad[t]
        y = 0.0 if y < 0.0 else (1.0 if y > 1.0 else y)
        e = abs(y - a[t])
        if e > r or e != e:
            r = e
    return r


def _newton_nb(
    a0: Any,
    rho0: Any,
    varphi: Any,
    phi: Any,
    R: Any,
    N: int,
    K: int,
    pu: float,
    tol: float,
    max_iter: int,
    out_a: Any,
    out_U: Any,
    out_k: Any,
) -> None:  # pragma: no cover - compiled
    """``_best_response._newton_stream`` problem by problem: projected Newton with the
    ε-active set, the Riccati step, Armijo backtracking on the projection arc (10⁻⁴, ≤ 50
    halvings, the rounding-floor rule at the first trial); stops at r_KKT ≤ ``tol``, after
    ``max_iter`` + 1 steps or when no step is accepted. Writes α (T, m), U and r_KKT."""
    T, m = a0.shape
    w = np.zeros((9, _padded(T)))
    wt = np.zeros((9, _padded(T)))
    rc = _round_constants(phi, N, K)
    A = np.empty(T)
    trial = np.empty(T)
    gJ = np.empty(T)
    B = np.empty(T)
    cP = np.empty(T)
    W = np.empty(T)
    k = np.empty(T)
    d = np.empty(T)
    curv = np.empty(T)
    bound = np.empty(T, dtype=np.bool_)
    for j in range(m):
        for t in range(T):
            A[t] = a0[t, j]
        r0, vp = rho0[j], varphi[j]
        c2 = 2.0 * (1.0 - vp)
        steps = 0
        while True:
            U = _evaluate_col(A, r0, vp, phi, R, N, K, pu, _SECOND, w, rc)
            r = _kkt_col(A, w[8])
            if r <= tol or steps > max_iter:
                break
            # the direction: ε-active set, Riccati step, scaled gradient on the active set
            eps = min(min(1e-3, r), 1e3 * r * r)
            any_bound = False
            for t in range(T):
                gJ[t] = -w[8, t]
                bound[t] = (A[t] <= eps and gJ[t] > 0.0) or (A[t] >= 1.0 - eps and gJ[t] < 0.0)
                any_bound = any_bound or bound[t]
                B[t] = w[0, t] - phi[t]
                cP[t] = c2 * w[1, t]
                W[t] = c2 * w[2, t] * A[t] - w[7, t + 1]
            _riccati_col(A, B, cP, W, w[6], w[4], bound, k, d, curv)
            pred = 0.0
            big = 0.0
            for t in range(T):
                if bound[t]:
                    scale = curv[t] if curv[t] >= cP[t] else cP[t]
                    scale = scale if scale >= 1e-12 else 1e-12
                    d[t] = -(gJ[t] / scale)
                else:
                    pred += -(gJ[t] * d[t])
                    ad = abs(d[t])
                    if ad > big:
                        big = ad
            # Armijo backtracking along the projection arc
            J0 = -U
            noise = 1e-13 * (1.0 + abs(J0))
            s = min(1.0, 1.0 / max(big, 1e-300))
            accepted = False
            for h in range(50):
                for t in range(T):
                    y = d[t] * s + A[t]
                    trial[t] = 0.0 if y < 0.0 else (1.0 if y > 1.0 else y)
                Jt = -_evaluate_col(trial, r0, vp, phi, R, N, K, pu, _U, wt, rc)
                dec = J0 - Jt
                moved = 0.0
                for t in range(T):
                    moved += (A[t] - trial[t]) * gJ[t] if bound[t] else 0.0
                req = 1e-4 * (s * pred + moved)
                ok = dec >= req
                if h == 0 and not ok and req <= 1e3 * noise and dec >= -noise:
                    _evaluate_col(trial, r0, vp, phi, R, N, K, pu, _GRAD, wt, rc)
                    ok = _kkt_col(trial, wt[8]) < r
                if ok:
                    for t in range(T):
                        A[t] = trial[t]
                    accepted = True
                    break
                s *= 0.5
            if not accepted:
                break
            steps += 1
        for t in range(T):
            out_a[t, j] = A[t]
        out_U[j] = U
        out_k[j] = r


def _sweep_nb(
    a0: Any,
    rho0: Any,
    varphi: Any,
    phi: Any,
    R: Any,
    N: int,
    K: int,
    pu: float,
    damping: float,
    iters: int,
    tol: float,
    window: int,
    out: Any,
) -> None:  # pragma: no cover - compiled
    """``_best_response._sweep_stream`` problem by problem: damped sweeps of Theorem 1's
    stationarity map (Eq. 21), at most ``iters``; a problem stops once max_t |Δα| ≤ ``tol``
    or, from 2·``window`` sweeps on, when its step has not halved over ``window`` sweeps."""
    T, m = a0.shape
    w = np.zeros((9, _padded(T)))
    rc = _round_constants(phi, N, K)
    A = np.empty(T)
    for j in range(m):
        for t in range(T):
            A[t] = a0[t, j]
        vp = varphi[j]
        its = 0
        ref = np.inf
        while iters > 0:
            _evaluate_col(A, rho0[j], vp, phi, R, N, K, pu, _COSTATE, w, rc)
            size = 0.0
            for t in range(T):
                st = (w[0, t] - phi[t]) * w[7, t + 1] / (w[1, t] * (2.0 * (1.0 - vp)))
                st = st if st >= 0.0 else 0.0  # fmax(·, 0): NaN → 0
                st = st if st <= 1.0 else 1.0
                st = (st - A[t]) * damping
                A[t] += st
                if abs(st) > size:
                    size = abs(st)
            its += 1
            moving = size > tol
            if window and its % window == 0:
                if its >= 2 * window:
                    moving = moving and size < 0.5 * ref
                ref = size
            if not moving or its >= iters:
                break
        for t in range(T):
            out[t, j] = A[t]


# --------------------------------------------------------------------------------------------
# The same solves in lanes: _LANES problems side by side
# --------------------------------------------------------------------------------------------
#
# One problem's evaluation is three recursions over the rounds (ρ forward, U summed, λ
# backward) whose every step waits for the one before: a few operations behind a chain of
# latencies. Side by side in _LANES lanes (work arrays (rows, rounds, lanes), the lane index
# innermost), each step is one vector operation for all the lanes, and a lane whose problem
# has stopped takes the next problem at once (the streamed engine's window, _LANES wide).
# Once no problem is left to load, the busy lanes move together and the loops narrow to them
# (:func:`_narrow`): the last problems of a call no longer pay for the full width.
# Every lane does its problem's operations in its problem's order, so the answers are those
# of the one-problem kernels above to the last bit (tested).


def _evaluate_lanes(
    A: Any, r0: Any, vp: Any, phi: Any, R: Any, K: int, pu: float, level: int, w: Any, rc: Any, U: Any, L: int
) -> None:  # pragma: no cover - compiled
    """:func:`_evaluate_col` for the problems in the first ``L`` lanes of ``A`` (T, lanes),
    types ``r0``, ``vp`` (lanes,): the rows of ``w`` (9, T+1, lanes) as far as ``level`` asks,
    U into ``U`` (lanes,). ``L``, the lanes in use (:func:`_narrow`), is a run-time count, so
    that LLVM vectorises the loops, not unrolls them."""
    T = A.shape[0]
    rho, P, dP, g, u, mr, S, lam, grad = w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]
    for j in range(L):
        rho[0, j] = r0[j]
        U[j] = 0.0
    for t in range(T):
        p = phi[t]
        for j in range(L):
            rho[t + 1, j] = (rho[t, j] - p) * A[t, j] + p
    for t in range(T + 1):  # three loops: few arrays each, so that LLVM vectorises them
        nphi, kn = rc[0, t], rc[1, t]
        for j in range(L):
            x = rho[t, j] / nphi
            inside = x < 1.0
            x = 1.0 if x > 1.0 else x
            ut = 1.0 - x
            Pt = 1.0 if x == 1.0 else _neg_expm1(_log1p(-x) * K)
            d = (1.0 - Pt) / ut * kn if inside else 0.0
            if pu >= 0.0:
                Pt = pu
                d = 0.0
            P[t, j] = Pt
            dP[t, j] = d
            u[t, j] = ut if inside else -1.0
        Rt = R[t]
        for j in range(L):
            m1 = Rt - rho[t, j] * vp[j]
            gt = rho[t, j] * m1
            if t < T:
                gt -= A[t, j] * A[t, j] * (1.0 - vp[j])
            g[t, j] = gt
            mr[t, j] = m1 - rho[t, j] * vp[j]
        for j in range(L):
            U[j] += P[t, j] * g[t, j]
    if level == _U:
        return
    for t in range(T + 1):
        for j in range(L):
            S[t, j] = dP[t, j] * g[t, j] + P[t, j] * mr[t, j]
    for j in range(L):
        lam[T, j] = S[T, j]
    for t in range(T - 1, -1, -1):
        for j in range(L):
            lam[t, j] = A[t, j] * lam[t + 1, j] + S[t, j]
    if level == _COSTATE:
        return
    for t in range(T):
        p = phi[t]
        for j in range(L):
            grad[t, j] = (rho[t, j] - p) * lam[t + 1, j] - P[t, j] * A[t, j] * (2.0 * (1.0 - vp[j]))
    if level == _SECOND:
        for t in range(T + 1):
            k2 = rc[2, t]
            for j in range(L):
                f = dP[t, j] * mr[t, j] * 2.0 - P[t, j] * (2.0 * vp[j])
                if K > 1 and u[t, j] >= 0.0:
                    f += dP[t, j] / u[t, j] * k2 * g[t, j]
                u[t, j] = f


def _refill(
    a0: Any, rho0: Any, varphi: Any, A: Any, r0: Any, vp: Any, job: Any, loaded: Any, counter: Any, left: bool, L: int
) -> tuple[bool, int]:  # pragma: no cover - compiled
    """Give each free lane (``job`` < 0) of the first ``L`` the next problem not yet taken
    (column ``counter[0]`` of ``a0``, its type; the counter is shared by the threads that
    solve one call, :func:`_take`) while ``left``: its start into ``A``, marked in
    ``loaded``. Returns ``left`` (False once a take found none left) and the busy lanes."""
    busy = 0
    for j in range(L):
        loaded[j] = False
        if job[j] < 0 and left:
            i = _take(counter)
            if i < a0.shape[1]:
                job[j] = i
                for t in range(A.shape[0]):
                    A[t, j] = a0[t, i]
                r0[j], vp[j] = rho0[i], varphi[i]
                loaded[j] = True
            else:
                left = False
        if job[j] >= 0:
            busy += 1
    return left, busy


def _narrow(L: int, busy: int, job: Any, f3: Any, f2: Any, i2: Any, b3: Any, b2: Any) -> int:  # pragma: no cover - compiled
    """The lanes in use once no problem is left to load: the ``busy`` lanes (``job`` ≥ 0)
    moved into the lowest ones, with every row of their state (the blocks ``f3``, ``b3``
    (rows, T, lanes) and ``f2``, ``i2``, ``b2`` (rows, lanes); ``job`` too), and their count
    cut to whole vectors of :data:`_LANES` (one lane alone: 1, which runs scalar). Returns the
    new count, ``L`` where that is no narrower. A call's last problems then stop paying for the
    full width (a tick of 8 lanes costs a third of a tick of 32); a lane's problem does the
    same operations in any lane, so every answer keeps its bits (tested)."""
    n = 1 if busy == 1 else (busy + _LANES - 1) // _LANES * _LANES
    if n >= L:
        return L
    i = 0
    for j in range(n, L):
        if job[j] < 0:
            continue
        while job[i] >= 0:
            i += 1
        f3[:, :, i] = f3[:, :, j]
        b3[:, :, i] = b3[:, :, j]
        f2[:, i] = f2[:, j]
        i2[:, i] = i2[:, j]
        b2[:, i] = b2[:, j]
        job[i], job[j] = job[j], -1
    return n


def _sweep_lanes(
    a0: Any,
    rho0: Any,
    varphi: Any,
    phi: Any,
    R: Any,
    N: int,
    K: int,
    pu: float,
    damping: float,
    iters: int,
    tol: float,
    window: int,
    out: Any,
    counter: Any,
) -> None:  # pragma: no cover - compiled
    """:func:`_sweep_nb` in _WIDTH lanes: the same sweeps and stopping rules per problem, a
    lane refilled with the next problem as soon as its own stops; the same bits. ``counter``
    (int64 (1,), zero at the start of a call): the next problem to take, shared by every
    thread that runs the call on the same arrays (:func:`_take`)."""
    T, m = a0.shape
    L = min(_WIDTH, max(m, 1))  # a run-time count: LLVM vectorises the loops, not unrolls
    if iters <= 0:
        for t in range(T):
            for j in range(m):
                out[t, j] = a0[t, j]
        return
    rc = _round_constants(phi, N, K)
    w = np.zeros((9, T + 1, L))
    # a lane's state from tick to tick, in blocks that _narrow moves whole: α; r0, vp and the
    # stall test's reference; the sweeps done
    state = np.full((1, T, L), 0.5)
    A = state[0]
    lane = np.empty((3, L))
    r0, vp, ref = lane[0], lane[1], lane[2]
    r0[:], vp[:] = 1.0, 0.5
    its = np.zeros((1, L), dtype=np.int64)
    none3, none2 = np.zeros((0, T, L), dtype=np.bool_), np.zeros((0, L), dtype=np.bool_)  # no flags to move
    cc, size, U = np.empty(L), np.empty(L), np.empty(L)
    job = np.full(L, -1, dtype=np.int64)
    loaded = np.zeros(L, dtype=np.bool_)
    left = True
    while True:
        left, busy = _refill(a0, rho0, varphi, A, r0, vp, job, loaded, counter, left, L)
        if busy == 0:
            return
        if not left:
            L = _narrow(L, busy, job, state, lane, its, none3, none2)
        for j in range(L):
            if loaded[j]:
                its[0, j], ref[j] = 0, np.inf
        _evaluate_lanes(A, r0, vp, phi, R, K, pu, _COSTATE, w, rc, U, L)
        rho, P, lam = w[0], w[1], w[7]
        for j in range(L):
            cc[j] = 2.0 * (1.0 - vp[j])
            size[j] = 0.0
        for t in range(T):
            p = phi[t]
            for j in range(L):
                st = (rho[t, j] - p) * lam[t + 1, j] / (P[t, j] * cc[j])
                st = st if st >= 0.0 else 0.0  # fmax(·, 0): NaN → 0
                st = st if st <= 1.0 else 1.0
                st = (st - A[t, j]) * damping
                A[t, j] += st
                size[j] = abs(st) if abs(st) > size[j] else size[j]
        for j in range(L):
            if job[j] < 0:
                continue
            its[0, j] += 1
            moving = size[j] > tol
            if window and its[0, j] % window == 0:
                if its[0, j] >= 2 * window:
                    moving = moving and size[j] < 0.5 * ref[j]
                ref[j] = size[j]
            if not moving or its[0, j] >= iters:
                for t in range(T):
                    out[t, job[j]] = A[t, j]
                job[j] = -1


def _kkt_lanes(a: Any, grad: Any, r: Any, L: int) -> None:  # pragma: no cover - compiled
    """:func:`_kkt_col` for the first ``L`` lanes of ``a``, ``grad`` (T, lanes) into ``r``
    (lanes,)."""
    for j in range(L):
        r[j] = 0.0
    for t in range(a.shape[0]):
        for j in range(L):
            y = a[t, j] + grad[t, j]
            y = 0.0 if y < 0.0 else (1.0 if y > 1.0 else y)
            e = abs(y - a[t, j])
            r[j] = e if (e > r[j] or e != e) else r[j]


def _riccati_lanes(
    a: Any, B: Any, cP: Any, W: Any, S: Any, f2: Any, bound: Any, k: Any, Kg: Any, curv: Any, V: Any, v: Any, L: int
) -> None:  # pragma: no cover - compiled
    """:func:`_riccati_col` for the first ``L`` lanes (arrays (rounds, lanes); ``V``, ``v``
    (lanes,) scratch)."""
    T = a.shape[0]
    for j in range(L):
        V[j] = -f2[T, j]
        v[j] = -S[T, j]
    for t in range(T - 1, -1, -1):
        for j in range(L):
            A = a[t, j]
            Bt = B[t, j]
            cPt = cP[t, j]
            BV = Bt * V[j]
            Quu = abs(Bt * BV + cPt)
            fl = (abs(BV) * Bt + cPt) * 1e-10 + 1e-300
            Qm = Quu if (Quu != Quu or Quu >= fl) else fl
            curv[t, j] = Qm
            Qu = cPt * A + Bt * v[j]
            Qux = A * BV + W[t, j]
            kt = 0.0 if bound[t, j] else -(Qu / Qm)
            Kt = 0.0 if bound[t, j] else -(Qux / Qm)
            k[t, j] = kt
            Kg[t, j] = Kt
            v[j] = (A * v[j] - S[t, j]) + Kt * Qu
            V[j] = (A * A * V[j] - f2[t, j]) + Kt * Qux
    for j in range(L):
        V[j] = 0.0  # now dx
    for t in range(T):
        for j in range(L):
            du = Kg[t, j] * V[j] + k[t, j]
            Kg[t, j] = du
            V[j] = V[j] * a[t, j] + B[t, j] * du


def _newton_lanes(
    a0: Any,
    rho0: Any,
    varphi: Any,
    phi: Any,
    R: Any,
    N: int,
    K: int,
    pu: float,
    tol: float,
    max_iter: int,
    out_a: Any,
    out_U: Any,
    out_k: Any,
    counter: Any,
) -> None:  # pragma: no cover - compiled
    """:func:`_newton_nb` in _WIDTH lanes, the same bits (``counter``: as for
    :func:`_sweep_lanes`). Each tick evaluates one point per lane to the second-order level:
    a lane's new problem, or the Armijo trial of its step. A trial that is accepted is the
    next point, already evaluated (the one-problem kernel evaluates it again, to the same
    bits); one that is refused is halved for the next tick. So every lane moves at its own
    pace, and a lane whose problem has stopped takes the next one at the following tick. The
    loops over rounds and lanes compute every lane and keep the lanes that need the result
    (selects, not branches), so that they vectorise; each touches few arrays, so that LLVM's
    checks that they do not overlap stay within bounds."""
    T, m = a0.shape
    L = min(_WIDTH, max(m, 1))  # a run-time count: LLVM vectorises the loops, not unrolls
    rc = _round_constants(phi, N, K)
    w = np.zeros((9, T + 1, L))
    rows = np.zeros((12, T, L))  # Numba has no generator expressions: one block, cut up
    A, X, gJ, B, cP, Wr, k, d = (rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7])
    kd, dd, cd = rows[8], rows[9], rows[10]  # the Riccati pass's outputs, before they are kept
    marks = np.zeros((1, T, L), dtype=np.bool_)
    bound = marks[0]
    A[:, :] = 0.5
    X[:, :] = 0.5
    lane = np.zeros((18, L))
    c2, U, Ux, r, rx, pred, big = lane[0], lane[1], lane[2], lane[3], lane[4], lane[5], lane[6]
    J0, noise, s, V, v, moved, e, pr, bg = (lane[7], lane[8], lane[9], lane[10], lane[11], lane[12], lane[13], lane[14], lane[15])
    r0, vp = lane[16], lane[17]
    r0[:], vp[:] = 1.0, 0.5
    counts = np.zeros((2, L), dtype=np.int64)
    steps, h = counts[0], counts[1]
    job = np.full(L, -1, dtype=np.int64)
    flags = np.zeros((5, L), dtype=np.bool_)
    # X is the trial of a step (else a new problem); the trial was accepted / refused; the lane
    # needs a direction from X = A; X is to be made a trial from A along d
    trying, acc, rej, new, redo = flags[0], flags[1], flags[2], flags[3], flags[4]
    loaded = np.zeros(L, dtype=np.bool_)
    left = True
    while True:
        left, busy = _refill(a0, rho0, varphi, A, r0, vp, job, loaded, counter, left, L)
        if busy == 0:
            return
        if not left:
            L = _narrow(L, busy, job, rows, lane, counts, marks, flags)
        for j in range(L):
            if loaded[j]:
                for t in range(T):
                    X[t, j] = A[t, j]
                c2[j] = 2.0 * (1.0 - vp[j])
                steps[j] = 0
                trying[j] = False
        _evaluate_lanes(X, r0, vp, phi, R, K, pu, _SECOND, w, rc, Ux, L)
        _kkt_lanes(X, w[8], rx, L)
        for j in range(L):
            moved[j] = 0.0
        for t in range(T):
            for j in range(L):
                moved[j] += (A[t, j] - X[t, j]) * gJ[t, j] if bound[t, j] else 0.0
        n_new = 0
        for j in range(L):  # each lane's decision
            acc[j] = False
            rej[j] = False
            new[j] = False
            if job[j] < 0:
                continue
            if trying[j]:  # the Armijo test of the trial X
                Jt = -Ux[j]
                dec = J0[j] - Jt
                req = 1e-4 * (s[j] * pred[j] + moved[j])
                ok = dec >= req
                if h[j] == 0 and not ok and req <= 1e3 * noise[j] and dec >= -noise[j]:
                    ok = rx[j] < r[j]
                if not ok:
                    s[j] *= 0.5
                    h[j] += 1
                    if h[j] == 50:  # no step accepted: stop at A
                        _finish(j, A, U, r, job, out_a, out_U, out_k)
                    else:
                        rej[j] = True
                    continue
                acc[j] = True
                steps[j] += 1
            U[j] = Ux[j]
            r[j] = rx[j]
            if r[j] <= tol or steps[j] > max_iter:
                _finish(j, X, U, r, job, out_a, out_U, out_k)  # X: the lane's point now
                continue
            new[j] = True
            n_new += 1
        for t in range(T):
            for j in range(L):
                A[t, j] = X[t, j] if acc[j] else A[t, j]
        if n_new:
            _direction_lanes(A, w, phi, c2, r, e, new, gJ, bound, B, cP, Wr, kd, dd, cd, V, v, d, pr, bg, L)
        for j in range(L):
            if new[j]:
                pred[j] = pr[j]
                J0[j] = -U[j]
                noise[j] = 1e-13 * (1.0 + abs(J0[j]))
                s[j] = min(1.0, 1.0 / max(bg[j], 1e-300))
                h[j] = 0
                trying[j] = True
            redo[j] = new[j] or rej[j]
        for t in range(T):
            for j in range(L):
                y = d[t, j] * s[j] + A[t, j]
                y = 0.0 if y < 0.0 else (1.0 if y > 1.0 else y)
                X[t, j] = y if redo[j] else X[t, j]


def _direction_lanes(
    A: Any,
    w: Any,
    phi: Any,
    c2: Any,
    r: Any,
    e: Any,
    new: Any,
    gJ: Any,
    bound: Any,
    B: Any,
    cP: Any,
    Wr: Any,
    kd: Any,
    dd: Any,
    cd: Any,
    V: Any,
    v: Any,
    d: Any,
    pr: Any,
    bg: Any,
    L: int,
) -> None:  # pragma: no cover - compiled
    """The Newton direction at A of the lanes marked ``new`` (their ``gJ``, ``bound`` and
    ``d``; the other lanes' are kept: their trials need them): the ε-active set, the Riccati
    step, the scaled gradient on the active set; ``pr``, ``bg``: each lane's predicted
    decrease and largest free step (read for the new lanes only). ``L``: the lanes in use."""
    T = A.shape[0]
    for j in range(L):
        e[j] = min(min(1e-3, r[j]), 1e3 * r[j] * r[j])
    g8 = w[8]
    for t in range(T):
        for j in range(L):
            gj = -g8[t, j]
            a = A[t, j]
            bd = (a <= e[j] and gj > 0.0) or (a >= 1.0 - e[j] and gj < 0.0)
            gJ[t, j] = gj if new[j] else gJ[t, j]
            bound[t, j] = bd if new[j] else bound[t, j]
    rho, P, dP, lam = w[0], w[1], w[2], w[7]
    for t in range(T):  # only the Riccati pass reads B, cP, Wr: every lane's may be replaced
        p = phi[t]
        for j in range(L):
            B[t, j] = rho[t, j] - p
            cP[t, j] = c2[j] * P[t, j]
        for j in range(L):
            Wr[t, j] = c2[j] * dP[t, j] * A[t, j] - lam[t + 1, j]
    _riccati_lanes(A, B, cP, Wr, w[6], w[4], bound, kd, dd, cd, V, v, L)
    for t in range(T):
        for j in range(L):
            scale = cd[t, j] if cd[t, j] >= cP[t, j] else cP[t, j]
            scale = scale if scale >= 1e-12 else 1e-12
            dt = -(gJ[t, j] / scale) if bound[t, j] else dd[t, j]
            d[t, j] = dt if new[j] else d[t, j]
    for j in range(L):
        pr[j] = 0.0
        bg[j] = 0.0
    for t in range(T):
        for j in range(L):
            free = not bound[t, j]
            pr[j] += -(gJ[t, j] * d[t, j]) if free else 0.0
            ad = abs(d[t, j])
            bg[j] = ad if (free and ad > bg[j]) else bg[j]


def _finish(j: int, A: Any, U: Any, r: Any, job: Any, out_a: Any, out_U: Any, out_k: Any) -> None:  # pragma: no cover - compiled
    """Write lane ``j``'s problem out (α, U, r_KKT) and free the lane."""
    i = job[j]
    for t in range(A.shape[0]):
        out_a[t, i] = A[t, j]
    out_U[i] = U[j]
    out_k[i] = r[j]
    job[j] = -1


# --------------------------------------------------------------------------------------------
# Book-keeping of the mean field's archive of optima: one pass where NumPy sorts or gathers
# (T, P) arrays. Each has a NumPy form, used without Numba, that gives the same answer.
# --------------------------------------------------------------------------------------------


def _closest_per_owner_py(a: FloatArray, prev: FloatArray, owner: NDArray[np.intp], out: NDArray[np.intp]) -> None:
    """For each owner j the entry p (a column of ``a``, ``owner[p]`` = j) closest to its
    previous choice ``prev[:, j]`` in max_t |a[t, p] − prev[t, j]| into ``out`` (m,): the
    first on ties, a NaN distance counting as the largest; −1 for an owner without entries."""
    dist = np.abs(a[0] - prev[0, owner])
    for t in range(1, a.shape[0]):
        np.maximum(dist, np.abs(a[t] - prev[t, owner]), out=dist)  # NaN propagates
    order = np.lexsort((dist, owner))  # NaN sorts last
    first = order[np.r_[True, owner[order][1:] != owner[order][:-1]]]
    out[:] = -1
    out[owner[first]] = first


def _closest_per_owner_nb(a: Any, prev: Any, owner: Any, out: Any) -> None:  # pragma: no cover - compiled
    best = np.empty(out.size)
    out[:] = -1
    for p in range(a.shape[1]):
        o = owner[p]
        d = abs(a[0, p] - prev[0, o])
        for t in range(1, a.shape[0]):
            x = abs(a[t, p] - prev[t, o])
            d = x if (x > d or x != x) else d  # np.maximum: NaN propagates
        if out[o] < 0 or (best[o] != best[o] and d == d) or d < best[o]:
            out[o] = p
            best[o] = d


def _best_per_owner_py(U: FloatArray, owner: NDArray[np.intp], out: NDArray[np.intp]) -> None:
    """Index of the highest-U entry of each owner into ``out`` (m,), the first on ties; U
    that is not finite counts as −∞; −1 for an owner without entries."""
    Us = np.where(np.isfinite(U), U, -np.inf)
    order = np.lexsort((np.arange(U.size), -Us, owner))
    first = order[np.r_[True, owner[order][1:] != owner[order][:-1]]]
    out[:] = -1
    out[owner[first]] = first


def _best_per_owner_nb(U: Any, owner: Any, out: Any) -> None:  # pragma: no cover - compiled
    best = np.empty(out.size)
    out[:] = -1
    for p in range(U.size):
        o = owner[p]
        u = U[p] if math.isfinite(U[p]) else -np.inf
        if out[o] < 0 or u > best[o]:
            out[o] = p
            best[o] = u


def _key_hash(a: FloatArray, same: float) -> FloatArray:
    """A fixed linear hash of each column's key ``np.round(a / same)`` (a (T, P)), computed
    row by row so that the (T, P) key matrix is never held: equal keys, equal hash."""
    T, P = a.shape
    w: FloatArray = np.random.default_rng(0).uniform(1.0, 2.0, (T,))
    h = np.zeros(P)
    for t in range(T):
        h += np.round(a[t] / same) * w[t]
    return h


def _first_distinct(owner: NDArray[np.intp], h: FloatArray, keys: Callable[[NDArray[np.intp]], FloatArray]) -> NDArray[np.intp]:
    """Sorted positions of the first occurrence of each distinct (owner, key) pair: what
    ``np.unique(column_stack([owner, key.T]), axis=0, return_index=True)`` gives, without
    sorting P rows of T + 1 fields. ``h``: :func:`_key_hash` of the keys; ``keys(idx)``:
    the key columns (T, len(idx)) of positions ``idx``, compared in blocks. Rows are grouped
    by owner and by hash, and a row repeats its predecessor in that order if its whole key
    is equal (compared only where the hashes agree); a hash shared by different keys (never
    seen) falls back to ``np.unique``."""
    P = owner.size
    if P == 0:
        return np.empty(0, dtype=np.intp)
    pos = np.arange(P)
    o = np.lexsort((pos, h, owner))
    group = (owner[o][1:] == owner[o][:-1]) & (h[o][1:] == h[o][:-1])
    same = group.copy()
    pairs = np.flatnonzero(group)
    for b in range(0, pairs.size, _PAIR_BLOCK):
        q = pairs[b : b + _PAIR_BLOCK]
        same[q] = np.all(keys(o[q]) == keys(o[q + 1]), axis=0)
    if np.any(group & ~same):  # a hash collision: the exact, slow way
        _, first = np.unique(np.column_stack([owner, keys(pos).T]), axis=0, return_index=True)
        return np.sort(first)
    return np.sort(o[np.r_[True, ~same]])


#: key columns compared at once by :func:`_first_distinct`
_PAIR_BLOCK = 1 << 15


def _archive_pick_py(
    keep: FloatArray, a: FloatArray, U: FloatArray, kkt: FloatArray, owner: NDArray[np.intp], m: int, cap: int, same: float
) -> tuple[FloatArray, NDArray[np.intp]]:
    """The archive's selection (``_mean_field._Archive.replace``) for m client types: each
    type's current choice (column j of ``keep`` (T, ≤ m), if it has one), then its
    candidates (columns of ``a`` (T, P), type ``owner``) with a finite ``U`` and a KKT residual
    ``kkt`` ≤ 1e-6 by decreasing U (ties by position), the first of each distinct key
    ``np.round(α / same)``, at most ``cap`` per type. Returns the kept columns (T, P') and
    their types, in order of type. NumPy form: only 1-D arrays are sorted (a hash of each
    key, :func:`_first_distinct`) and only the kept columns gathered."""
    ok = np.flatnonzero(np.isfinite(U) & (kkt <= 1e-6))
    n_keep = keep.shape[1]
    Us = np.concatenate([np.zeros(n_keep), U[ok]])
    types = np.concatenate([np.arange(n_keep), owner[ok]])
    prio = np.concatenate([-np.ones(n_keep), np.zeros(ok.size)])
    h = np.concatenate([_key_hash(keep, same), _key_hash(a, same)[ok]])

    def columns(idx: NDArray[np.intp]) -> FloatArray:
        """α of the entries ``idx`` (the choices, then the accepted candidates)."""
        out = np.empty((a.shape[0], idx.size))
        mine = idx < n_keep
        out[:, mine] = keep[:, idx[mine]]
        out[:, ~mine] = a[:, ok[idx[~mine] - n_keep]]
        return out

    order = np.lexsort((-Us, prio, types))
    types = types[order]
    first = _first_distinct(types, h[order], lambda q: np.round(columns(order[q]) / same))
    idx, types = order[first], types[first]
    start = np.r_[0, np.flatnonzero(types[1:] != types[:-1]) + 1]
    rank = np.arange(types.size) - np.repeat(start, np.diff(np.r_[start, types.size]))
    kept = rank < cap
    return np.ascontiguousarray(columns(idx[kept])), types[kept]


def _archive_pick_nb(keep: Any, a: Any, U: Any, kkt: Any, owner: Any, m: int, cap: int, same: float) -> Any:  # pragma: no cover - compiled
    """:func:`_archive_pick_py` in one pass: each type's few candidates are ordered in place
    (grouped by a counting pass, then an insertion sort) and compared with the at most
    ``cap`` keys already kept, instead of hashing and sorting all P — the same entries in
    the same order (tested)."""
    T, P = a.shape
    n_keep = keep.shape[1]
    start = np.zeros(m + 1, dtype=np.int64)
    for p in range(P):
        if math.isfinite(U[p]) and kkt[p] <= 1e-6:
            start[owner[p] + 1] += 1
    for j in range(m):
        start[j + 1] += start[j]
    order = np.empty(start[m], dtype=np.int64)
    fill = start[:m].copy()
    for p in range(P):
        if math.isfinite(U[p]) and kkt[p] <= 1e-6:
            order[fill[owner[p]]] = p
            fill[owner[p]] += 1
    for j in range(m):  # insertion sort by decreasing U: stable, so ties keep their positions
        for i in range(start[j] + 1, start[j + 1]):
            p = order[i]
            k = i
            while k > start[j] and U[order[k - 1]] < U[p]:
                order[k] = order[k - 1]
                k -= 1
            order[k] = p
    keys = np.empty((cap, T))
    key = np.empty(T)
    pick = np.empty(m * cap, dtype=np.int64)  # < 0: column −1 − pick of keep; else a column of a
    types = np.empty(m * cap, dtype=np.int64)
    n = 0
    for j in range(m):
        kept = 0
        for e in range(-1, start[j + 1] - start[j]):
            if kept == cap:
                break
            if e < 0 and j >= n_keep:
                continue
            for t in range(T):
                key[t] = np.rint((keep[t, j] if e < 0 else a[t, order[start[j] + e]]) / same)  # np.round: half to even
            seen = False
            for q in range(kept):
                eq = True
                for t in range(T):
                    if keys[q, t] != key[t]:  # NaN: never equal, as in the NumPy form
                        eq = False
                        break
                if eq:
                    seen = True
                    break
            if seen:
                continue
            keys[kept] = key
            pick[n] = -1 - j if e < 0 else order[start[j] + e]
            types[n] = j
            kept += 1
            n += 1
    out = np.empty((T, n))
    for i in range(n):
        c = pick[i]
        for t in range(T):
            out[t, i] = keep[t, -1 - c] if c < 0 else a[t, c]
    return out, types[:n].copy()


# --------------------------------------------------------------------------------------------
# The consistent update's mean trajectory: a loop over the rounds of population sums, compiled
# with NumPy's order of summation so that it gives the NumPy form's bits.
# --------------------------------------------------------------------------------------------


def _pairwise_block(x: Any, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """x[lo] + … + x[lo + n − 1] for n ≤ 128 as NumPy's ``pairwise_sum`` adds them: below 8
    terms one by one, else eight interleaved partial sums combined as
    ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest one by one."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[lo + i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += x[lo + i]
        r1 += x[lo + i + 1]
        r2 += x[lo + i + 2]
        r3 += x[lo + i + 3]
        r4 += x[lo + i + 4]
        r5 += x[lo + i + 5]
        r6 += x[lo + i + 6]
        r7 += x[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return float(res)


def _pairwise_sum(x: Any, n: int) -> float:  # pragma: no cover - compiled
    """x[0] + … + x[n − 1] in NumPy's order for a contiguous float64 reduction
    (``pairwise_sum`` in its ``loops_utils.h``): blocks of at most 128 by
    :func:`_pairwise_block`, a longer range split in two halves (the first a multiple of 8
    long) summed apart. NumPy's recursion is walked with an explicit stack (Numba cannot
    cache a recursive function). ``np.sum`` adds this to its identity 0.0 (tested)."""
    lo_s, n_s, stage = np.empty(64, np.int64), np.empty(64, np.int64), np.empty(64, np.int64)
    vals = np.empty(64)
    top, nv = 0, 0
    lo_s[0], n_s[0], stage[0] = 0, n, 0
    while top >= 0:
        lo, k = lo_s[top], n_s[top]
        if k <= 128:
            vals[nv] = _pairwise_block(x, lo, k)
            nv += 1
            top -= 1
            continue
        half = k // 2 - (k // 2) % 8
        if stage[top] == 2:  # both halves summed: combine them
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
            top -= 1
            continue
        first = stage[top] == 0
        stage[top] += 1
        top += 1
        lo_s[top], n_s[top], stage[top] = (lo, half, 0) if first else (lo + half, k - half, 0)
    return float(vals[0])


def _consistent_mean_py(a: FloatArray, rho0: FloatArray, w: FloatArray, mean0: float, out: FloatArray) -> None:
    """The mean trajectory of Eq. (15) under decisions ``a`` (T, m) of m types with weights
    ``w``, into ``out`` (T+1,): out[0] = ``mean0``, ρ^{t+1} = out[t] + α^t (ρ^t − out[t]),
    out[t+1] = Σ_i ρ_i^{t+1} w_i (:func:`._linalg.dot`: products, then NumPy's pairwise sum)."""
    rho = rho0.copy()
    out[0] = mean0
    for t in range(a.shape[0]):
        rho = out[t] + a[t] * (rho - out[t])
        out[t + 1] = _linalg.dot(rho, w)


def _consistent_mean_nb(a: Any, rho0: Any, w: Any, mean0: float, out: Any) -> None:  # pragma: no cover - compiled
    m = rho0.size
    rho = rho0.copy()
    prod = np.empty(m)
    out[0] = mean0
    for t in range(a.shape[0]):
        p = out[t]
        for i in range(m):
            rho[i] = p + a[t, i] * (rho[i] - p)
            prod[i] = rho[i] * w[i]
        out[t + 1] = 0.0 + _pairwise_sum(prod, m)


def _log1m_py(x: FloatArray, out: FloatArray) -> None:
    """log(1 − x) into ``out`` (NumPy's log1p: its SIMD form differs by CPU kind)."""
    with np.errstate(divide="ignore"):
        np.log1p(np.negative(x), out=out)


def _log1m_nb(x: Any, out: Any) -> None:  # pragma: no cover - compiled
    """log(1 − x) into ``out`` for 1-D ``x`` ≤ 1 (−∞ at x = 1) by :func:`_log1p`: the same
    bits on every CPU kind, where NumPy's log1p is a SIMD routine on AVX-512 hosts and the C
    library's elsewhere, which differ in the last bit."""
    for i in range(x.size):
        y = -x[i]
        out[i] = -np.inf if y == -1.0 else _log1p(y)


def _neg_expm1_py(z: FloatArray, out: FloatArray) -> None:
    """1 − e^z into ``out`` (NumPy's expm1)."""
    np.negative(np.expm1(z), out=out)


def _neg_expm1_arr_nb(z: Any, out: Any) -> None:  # pragma: no cover - compiled
    """1 − e^z into ``out`` for 1-D ``z`` ≤ 0 by :func:`_neg_expm1` (the same bits on every
    CPU kind, as :func:`_log1m_nb`)."""
    for i in range(z.size):
        out[i] = _neg_expm1(z[i])


_Kernel = Callable[..., None]
_NAMES = (
    "trajectory",
    "costate",
    "riccati",
    "newton",
    "sweep",
    "closest_per_owner",
    "best_per_owner",
    "archive_pick",
    "consistent_mean",
    "log1m",
    "neg_expm1",
)


def _bitcasts() -> tuple[Any, Any]:
    """Numba intrinsics that reinterpret a float64's bits as an int64 and back (LLVM's
    bitcast): the exponent arithmetic of :func:`_log1p` and :func:`_neg_expm1`, which
    ``math.frexp``/``ldexp`` would do by a library call per value."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def f2i(typingctx: Any, x: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.bitcast(args[0], ir.IntType(64))

        return types.int64(types.float64), codegen

    @intrinsic
    def i2f(typingctx: Any, x: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.bitcast(args[0], ir.DoubleType())

        return types.float64(types.int64), codegen

    return f2i, i2f


def _counter_take() -> Any:
    """A Numba intrinsic ``take(counter)``: ``counter[0]`` (an int64 array) incremented by
    one atomically, its value before returned (LLVM's ``atomicrmw add``). The threads that
    solve one call's problems (``_best_response._on_threads``) share one counter, so each
    takes the next problem when a lane of its own frees and they finish together, where
    fixed shares left one thread idle while the other finished the slower half."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def take(typingctx: Any, counter: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            return builder.atomic_rmw("add", ary.data, ir.Constant(ir.IntType(64), 1), "monotonic")

        return types.int64(counter), codegen

    return take


def _full_vector_width() -> None:
    """Let LLVM fill AVX-512's 512-bit registers in the lane loops. LLVM's models of Intel's
    server CPUs (Skylake-SP to Emerald Rapids) carry the tuning flag ``prefer-256-bit``, so on
    them it vectorised the :data:`_WIDTH` lanes in 256-bit halves, while its AMD Zen 4 model
    uses the full width: one mean-field evaluation of the paper-budget game took 0.199 s on one
    thread of an Intel Xeon (family 6, model 207) against 0.079 s with the flag off (same
    values; docs/speed.md, "Why the Intel hosts were slower per evaluation"). Turning it off
    changes only which instructions run: the kernels do the same IEEE operations in the same order (no ``fastmath``, so no
    reassociation or fused multiply-add; the lanes are independent problems), and the tests
    compare their bits with the NumPy forms'. Applied through Numba's ``CPU_FEATURES`` (the
    host's own features plus ``-prefer-256-bit``), which Numba reads when it first compiles
    in this process: a user's ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` is kept, and where
    Numba already compiled something the setting comes too late and nothing changes. Numba's
    on-disk cache keys each compile by these features, so the two never mix."""
    from numba.core import config as numba_config

    config: Any = numba_config  # its settings are set from the environment at import, untyped
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return
    import llvmlite.binding as ll

    features = ll.get_host_cpu_features()
    if features.get("avx512f"):
        config.CPU_FEATURES = features.flatten() + ",-prefer-256-bit"


def _compile() -> tuple[_Kernel, ...] | None:
    """The three recursions, the two lane solves and the book-keeping passes compiled by
    Numba (cached on disk after the first compile), or None where Numba is not installed
    (:data:`COMPILED`). The helpers the solves call are compiled first and bound to their
    module names, where Numba looks them up."""
    if not _numba_installed():  # pragma: no cover - numba is a dependency; kept for platforms without it
        return None
    import numba

    _full_vector_width()
    jit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
    g = globals()
    g["_f2i"], g["_i2f"] = _bitcasts()
    g["_take"] = _counter_take()
    for helper in (
        "_log1p",
        "_neg_expm1",
        "_padded",
        "_round_constants",
        "_riccati_col",
        "_evaluate_col",
        "_kkt_col",
        "_evaluate_lanes",
        "_kkt_lanes",
        "_refill",
        "_narrow",
        "_riccati_lanes",
        "_finish",
        "_direction_lanes",
        "_pairwise_block",
        "_pairwise_sum",
        "_sweep_nb",
        "_newton_nb",
    ):  # once: __getattr__ holds _LOAD
        g[helper] = jit(g[helper])
    # the solves take whole arrays and views (``a0[:, skip:]`` in _best_response.solve_types):
    # typed for any layout, each is compiled once (the lane loops run on their own arrays);
    # the counter its threads share is one contiguous int64
    f8, i8 = numba.float64, numba.int64
    m1, m2 = f8[:], f8[:, :]
    c1 = numba.int64[::1]
    newton = numba.njit(
        (m2, m1, m1, m1, m1, i8, i8, f8, f8, i8, m2, m1, m1, c1), cache=True, nogil=True, fastmath=False, error_model="numpy"
    )(_newton_lanes)
    sweep = numba.njit(
        (m2, m1, m1, m1, m1, i8, i8, f8, f8, i8, f8, i8, m2, c1), cache=True, nogil=True, fastmath=False, error_model="numpy"
    )(_sweep_lanes)
    return (
        jit(_trajectory_nb),
        jit(_costate_nb),
        jit(_riccati_nb),
        newton,
        sweep,
        jit(_closest_per_owner_nb),
        jit(_best_per_owner_nb),
        jit(_archive_pick_nb),
        jit(_consistent_mean_nb),
        jit(_log1m_nb),
        jit(_neg_expm1_arr_nb),
    )


#: whether the compiled kernels are in use (Numba installed); answered by :func:`__getattr__`
#: without importing Numba or compiling anything: the solves' lane kernels are typed, so Numba
#: compiles (or loads) them as soon as they are bound, which only a solve should pay
COMPILED: bool
trajectory: _Kernel
costate: _Kernel
riccati: _Kernel
#: the per-problem solves (``_newton_lanes``, ``_sweep_lanes``) compiled, or None without Numba
newton: _Kernel | None
sweep: _Kernel | None
#: the archive's book-keeping (compiled, or their NumPy forms without Numba)
closest_per_owner: _Kernel
best_per_owner: _Kernel
archive_pick: Callable[..., tuple[FloatArray, NDArray[np.intp]]]
#: the mean trajectory of Eq. (15) (``_mean_field._consistent_mean``), NumPy's sums to the bit
consistent_mean: _Kernel
#: elementwise log(1 − x) and 1 − e^z on 1-D arrays (x, out): host-independent when compiled
log1m: _Kernel
neg_expm1: _Kernel
_LOAD = threading.Lock()


def __getattr__(name: str) -> Any:
    """The kernels on first use (and ``COMPILED``, which loads nothing): binding them costs
    about 0.5 s of CPU (12 s the first time, compiling) and importing Numba 0.2 s, which every
    process that imports the games but never solves one (a Flower ClientApp reading a FedPCS
    recipe, a CLI call, a look-up of a cached plan) would pay at import. After the first use
    they are plain module attributes. The lock makes the threads of
    ``_best_response._on_threads`` load them once."""
    if name == "COMPILED":  # asked to choose an engine (a plan's cache key): compile nothing yet
        return _numba_installed()
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _LOAD:
        g = globals()
        if "riccati" not in g:
            kernels = _compile()
            fallback = (
                _trajectory_py,
                _costate_py,
                _riccati_py,
                None,
                None,
                _closest_per_owner_py,
                _best_per_owner_py,
                _archive_pick_py,
                _consistent_mean_py,
                _log1m_py,
                _neg_expm1_py,
            )
            g.update(zip(_NAMES, kernels if kernels is not None else fallback, strict=True))
    return g[name]


def _numba_installed() -> bool:
    """Whether Numba is installed, found without importing it."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None
