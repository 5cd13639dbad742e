"""Input checks shared by the games (FedPCS's functions; QI-DPFL's scalar checks).

Every error names the field, the value given and the allowed range, e.g.
``clients[3].varphi: must be in (0, 1), got 1.2`` or ``K: must be in [1, N] = [1, 10], got 11``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "as_clients",
    "as_rounds",
    "check_horizon",
    "check_population",
    "check_positive",
    "check_unit_open",
]

FloatArray = NDArray[np.float64]


def _fmt(x: Any) -> str:
    return f"{float(x):.6g}" if isinstance(x, numbers.Real | np.floating) else repr(x)


def check_horizon(T: Any) -> int:
    """``T`` (last round index; rounds are 0..T): an integer >= 1."""
    if isinstance(T, bool) or not isinstance(T, numbers.Integral):
        raise TypeError(f"T: must be an integer >= 1, got {T!r}")
    if T < 1:
        raise ValueError(f"T: must be >= 1, got {T}")
    return int(T)


def check_population(N: Any, K: Any) -> tuple[int, int]:
    """``N`` clients (integer >= 1) and ``K`` draws per round (integer in [1, N])."""
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1:
        raise ValueError(f"N: must be an integer >= 1, got {N!r}")
    if isinstance(K, bool) or not isinstance(K, numbers.Integral):
        raise ValueError(f"K: must be an integer in [1, N] = [1, {int(N)}], got {K!r}")
    if not 1 <= int(K) <= int(N):
        raise ValueError(f"K: must be in [1, N] = [1, {int(N)}], got {K}")
    return int(N), int(K)


def check_positive(name: str, value: Any, *, strict: bool = True) -> float:
    """A finite scalar > 0 (``strict``) or >= 0."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or (v <= 0 if strict else v < 0):
        raise ValueError(f"{name}: must be {'>' if strict else '>='} 0, got {_fmt(value)}")
    return v


def check_unit_open(name: str, value: Any) -> float:
    """A scalar in the open interval (0, 1)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name}: must be in (0, 1), got {_fmt(value)}")
    return v


def as_clients(rho0: ArrayLike, varphi: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Per-client types: ``rho0 > 0`` and ``varphi`` in (0, 1), 1-D arrays of equal length
    (a scalar is one client). Errors name the client: ``clients[3].varphi: ...``."""
    r = np.atleast_1d(np.asarray(rho0, dtype=float))
    v = np.atleast_1d(np.asarray(varphi, dtype=float))
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rho0: expected a number or a non-empty 1-D list, got shape {r.shape}")
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"varphi: expected a number or a non-empty 1-D list, got shape {v.shape}")
    if v.size != r.size:
        raise ValueError(
            f"varphi: expected {r.size} values (one per client, like rho0), got {v.size}"
        )
    bad = np.flatnonzero(~(np.isfinite(r) & (r > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"clients[{i}].rho0: must be > 0, got {_fmt(r[i])}")
    bad = np.flatnonzero(~((v > 0) & (v < 1)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"clients[{i}].varphi: must be in (0, 1), got {_fmt(v[i])}")
    return r, v


def as_rounds(name: str, value: ArrayLike, T: int, *, lower: float = 0.0,
              strict: bool = False) -> FloatArray:
    """A per-round series of T+1 finite values (t = 0..T): a number is broadcast.

    ``lower``/``strict`` give the allowed range (``> lower`` or ``>= lower``)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(T + 1, float(arr))
    elif arr.ndim != 1 or arr.size != T + 1:
        got = arr.size if arr.ndim == 1 else f"shape {arr.shape}"
        raise ValueError(
            f"{name}: expected a number or a list of T+1 = {T + 1} values, got {got}"
        )
    ok = np.isfinite(arr) & ((arr > lower) if strict else (arr >= lower))
    bad = np.flatnonzero(~ok)
    if bad.size:
        t = int(bad[0])
        op = ">" if strict else ">="
        raise ValueError(f"{name}[{t}]: must be {op} {lower:g}, got {_fmt(arr[t])}")
    return arr.copy()
