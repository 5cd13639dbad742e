"""The three scalar recursions of the client problem, compiled: the trajectory of Eq. (20),
the costate of Eqs. (53-54) and the Riccati pass of the Newton step (Pantoja 1988).

Each is a loop over the T rounds whose body is a handful of operations on one row of m
problems. Written as NumPy row operations (the fallback below, and the form the rest of
``_dynamics`` and ``_best_response`` use), the Riccati pass alone is ~25 calls per round, each
a few microseconds of arithmetic behind a microsecond of interpreter that holds the GIL — so
it costs more than its arithmetic and the threads of ``_best_response._on_threads`` wait on
each other. Compiled with Numba (``nogil``), each recursion is one call that releases the
GIL.

Hand-written, not a library call: no solver library exposes these recursions. Both versions
do the same IEEE operations in the same order (no fused multiply-add, no reassociation:
Numba's default, not ``fastmath``), so they agree to the last bit — the tests compare them —
and the library gives the same numbers with or without Numba installed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

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


def _riccati_py(a: FloatArray, B: FloatArray, cP: FloatArray, W: FloatArray, S: FloatArray,
                f2: FloatArray, bound: NDArray[np.bool_], k: FloatArray, Kg: FloatArray,
                curv: FloatArray) -> None:
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


def _riccati_nb(a: Any, B: Any, cP: Any, W: Any, S: Any, f2: Any, bound: Any, k: Any, Kg: Any,
                curv: Any) -> None:  # pragma: no cover - compiled
    T, m = a.shape
    V = np.empty(m)
    v = np.empty(m)
    for j in range(m):
        V[j] = -f2[T, j]
        v[j] = -S[T, j]
    for t in range(T - 1, -1, -1):
        for j in range(m):
            A = a[t, j]
            Bt = B[t, j]
            cPt = cP[t, j]
            BV = Bt * V[j]
            Quu = abs(Bt * BV + cPt)
            fl = (abs(BV) * Bt + cPt) * 1e-10 + 1e-300
            Qm = Quu if (Quu != Quu or Quu >= fl) else fl  # np.maximum, NaN included
            curv[t, j] = Qm
            Qu = cPt * A + Bt * v[j]
            Qux = A * BV + W[t, j]
            if bound[t, j]:
                kt = 0.0
                Kt = 0.0
            else:
                kt = -(Qu / Qm)
                Kt = -(Qux / Qm)
            k[t, j] = kt
            Kg[t, j] = Kt
            v[j] = (A * v[j] - S[t, j]) + Kt * Qu
            V[j] = (A * A * V[j] - f2[t, j]) + Kt * Qux
    dx = np.zeros(m)
    for t in range(T):
        for j in range(m):
            du = Kg[t, j] * dx[j] + k[t, j]
            Kg[t, j] = du
            dx[j] = dx[j] * a[t, j] + B[t, j] * du


_Kernel = Callable[..., None]


def _compile() -> tuple[_Kernel, _Kernel, _Kernel] | None:
    """The three recursions compiled by Numba (cached on disk after the first compile), or
    None where Numba cannot be imported."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency; kept for platforms without it
        return None
    jit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
    return jit(_trajectory_nb), jit(_costate_nb), jit(_riccati_nb)


#: whether the compiled recursions are in use (Numba importable); like the three kernels, set on
#: first use by :func:`__getattr__`
COMPILED: bool
trajectory: _Kernel
costate: _Kernel
riccati: _Kernel
_LOAD = threading.Lock()


def __getattr__(name: str) -> Any:
    """The kernels (and ``COMPILED``) on first use: importing Numba costs about 0.2 s of CPU,
    which every process that imports the games but never solves one (a Flower ClientApp reading
    a FedPCS recipe, a CLI call) would pay at import. After the first use they are plain module
    attributes. The lock makes the threads of ``_best_response._on_threads`` load them once."""
    if name not in ("COMPILED", "trajectory", "costate", "riccati"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _LOAD:
        g = globals()
        if "riccati" not in g:
            kernels = _compile()
            g["trajectory"], g["costate"], g["riccati"] = kernels if kernels is not None else (
                _trajectory_py, _costate_py, _riccati_py)
            g["COMPILED"] = kernels is not None
    return g[name]
