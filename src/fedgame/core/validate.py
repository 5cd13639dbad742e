"""Argument validators shared by every package (privacy, incentives, robust, selection).

Each validator returns the checked value (as a float, int or float64 array) or raises a one-line
error that names the field, the allowed range and the offending value, e.g.
``ValueError("rho: must be >= 0, got -1")``. The packages word a few checks differently and their
tests match the words, so where two callers share a check the wording is a parameter (see
:func:`check_positive`), never unified.

This module is the bottom layer: it imports only NumPy and the standard library.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "FloatArray",
    "as_clients",
    "as_float_array",
    "as_rounds",
    "as_vector",
    "check_elementwise",
    "check_horizon",
    "check_int",
    "check_population",
    "check_positive",
    "check_unit_open",
    "check_weights",
    "scalar_or_array",
]

FloatArray = NDArray[np.float64]

Show = Literal["g", "str", "repr"]
"""How an error writes the offending value: ``"g"`` six significant digits for a real number
(``repr`` for anything else), ``"str"`` ``f"{value}"``, ``"repr"`` ``repr(value)``."""


def _fmt(x: Any) -> str:
    return f"{float(x):.6g}" if isinstance(x, numbers.Real | np.floating) else repr(x)


def _show(value: Any, show: Show) -> str:
    if show == "g":
        return _fmt(value)
    if show == "str":
        return f"{value}"
    return repr(value)


def _to_float(name: str, value: Any, not_a_number: str | None) -> float:
    if not_a_number is None:
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {not_a_number}, got {value!r}") from None


# -- scalars ---------------------------------------------------------------------------------
def check_positive(
    name: str,
    value: Any,
    *,
    strict: bool = True,
    allow_inf: bool = False,
    say_finite: bool = False,
    show: Show = "g",
    not_a_number: str | None = "expected a number",
) -> float:
    """``value`` as a float that is > 0 (``strict``) or >= 0, and finite unless ``allow_inf``.

    Out of range: ``ValueError("{name}: must be > 0, got {value}")`` (``>=`` when not ``strict``;
    ``"> 0 and finite"`` when ``say_finite``; the value written as ``show`` says). Not a number:
    ``ValueError("{name}: {not_a_number}, got {value!r}")``, or, with ``not_a_number=None``, the
    ``TypeError``/``ValueError`` of ``float(value)`` itself.

    The callers' wordings: games ``check_positive(name, v)``; Gaussian mechanisms
    ``say_finite=not allow_inf, show="str", not_a_number=None``; robust rules' ε
    ``allow_inf=True, show="repr", not_a_number="must be a number > 0"``.
    """
    v = _to_float(name, value, not_a_number)
    if not ((v > 0 if strict else v >= 0) and (allow_inf or math.isfinite(v))):
        allowed = f"{'>' if strict else '>='} 0{' and finite' if say_finite else ''}"
        raise ValueError(f"{name}: must be {allowed}, got {_show(value, show)}")
    return v


def check_unit_open(name: str, value: Any) -> float:
    """``value`` as a float in the open interval (0, 1).

    Raises ``ValueError("{name}: must be in (0, 1), got {value:.6g}")``, or
    ``ValueError("{name}: expected a number, got {value!r}")`` for a non-number."""
    v = _to_float(name, value, "expected a number")
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name}: must be in (0, 1), got {_fmt(value)}")
    return v


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """``value`` as an int in [lo, hi] (``hi=None``: no upper bound); a bool is not an integer.

    Raises ``ValueError("{name}: must be an integer, got {value!r}")`` for a non-integer and
    ``ValueError("{name}: must be an integer >= {lo}, got {value}")`` (``in [{lo}, {hi}]`` with a
    ``hi``) out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: must be an integer {rng}, got {v}")
    return v


def check_horizon(T: Any) -> int:
    """``T`` (the last round index; rounds are 0..T) as an int >= 1.

    Raises ``TypeError("T: must be an integer >= 1, got {T!r}")`` for a non-integer and
    ``ValueError("T: must be >= 1, got {T}")`` for T < 1."""
    if isinstance(T, bool) or not isinstance(T, numbers.Integral):
        raise TypeError(f"T: must be an integer >= 1, got {T!r}")
    if T < 1:
        raise ValueError(f"T: must be >= 1, got {T}")
    return int(T)


def check_population(N: Any, K: Any) -> tuple[int, int]:
    """``N`` clients (an integer >= 1) and ``K`` draws per round (an integer in [1, N]).

    Raises ``ValueError("N: must be an integer >= 1, got {N!r}")``,
    ``ValueError("K: must be an integer in [1, N] = [1, {N}], got {K!r}")`` for a non-integer K, or
    ``ValueError("K: must be in [1, N] = [1, {N}], got {K}")`` for K out of range."""
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1:
        raise ValueError(f"N: must be an integer >= 1, got {N!r}")
    if isinstance(K, bool) or not isinstance(K, numbers.Integral):
        raise ValueError(f"K: must be an integer in [1, N] = [1, {int(N)}], got {K!r}")
    if not 1 <= int(K) <= int(N):
        raise ValueError(f"K: must be in [1, N] = [1, {int(N)}], got {K}")
    return int(N), int(K)


# -- arrays ----------------------------------------------------------------------------------
def as_float_array(
    name: str, value: ArrayLike, *, expected: str = "a real number or array of real numbers", allow_nan: bool = False
) -> FloatArray:
    """``value`` as a float64 array (any shape).

    Raises ``ValueError("{name}: must be {expected}, got {value!r}")`` when NumPy cannot convert
    it, and, unless ``allow_nan``, ``ValueError("{name}: must be a number, got nan")`` for a NaN
    (NaN satisfies no range)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be {expected}, got {value!r}") from None
    if not allow_nan and np.any(np.isnan(arr)):
        raise ValueError(f"{name}: must be a number, got nan")
    return arr


def check_elementwise(
    name: str,
    value: ArrayLike,
    ok: Callable[[FloatArray], NDArray[np.bool_]],
    allowed: str,
) -> FloatArray:
    """``value`` (scalar or array) as a float64 array on which ``ok`` holds everywhere.

    Raises ``ValueError("{name}: must be {allowed}, got {first bad entry:g}")``; ``allowed``
    completes "must be ...", e.g. ``"> 0"`` or ``"in (0, 1)"``. Non-numbers and NaN fail as in
    :func:`as_float_array`."""
    arr = as_float_array(name, value)
    good = np.asarray(ok(arr), dtype=bool)
    if not np.all(good):
        bad = arr[~np.broadcast_to(good, arr.shape)] if arr.ndim else arr
        first = float(np.ravel(bad)[0])
        raise ValueError(f"{name}: must be {allowed}, got {first:g}")
    return arr


def scalar_or_array(result: FloatArray, *inputs: ArrayLike) -> float | FloatArray:
    """A Python float when every input was a scalar, else the array (NumPy-like behaviour)."""
    if all(np.ndim(x) == 0 for x in inputs):
        return float(result)
    return result


def as_vector(name: str, value: ArrayLike) -> FloatArray:
    """``value`` as a non-empty 1-D float64 array without NaN (±inf pass; range checks are the
    caller's).

    Raises ``ValueError("{name}: must be a 1-D array of real numbers, got {value!r}")`` for a
    non-number, ``ValueError("{name}: must be a non-empty 1-D array, got shape {shape}")``, or
    ``ValueError("{name}: must be numbers, got nan at index {i}")``."""
    arr = as_float_array(name, value, expected="a 1-D array of real numbers", allow_nan=True)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: must be a non-empty 1-D array, got shape {arr.shape}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name}: must be numbers, got nan at index {int(np.argmax(np.isnan(arr)))}")
    return arr


def check_weights(weights: Any, m: int, *, name: str = "sizes") -> FloatArray:
    """One finite weight > 0 per client (e.g. data sizes d_j), as a 1-D float64 array of size ``m``.

    Raises ``ValueError("{name}: must be a 1-D array of numbers, got {weights!r}")``,
    ``ValueError("{name}: must hold one value per client (m = {m}), got shape {shape}")``, or
    ``ValueError("{name}[{i}]: must be > 0 and finite, got {w_i!r}")``."""
    w = as_float_array(name, weights, expected="a 1-D array of numbers", allow_nan=True)
    if w.ndim != 1 or w.size != m:
        raise ValueError(f"{name}: must hold one value per client (m = {m}), got shape {w.shape}")
    bad = np.flatnonzero(~(np.isfinite(w) & (w > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}]: must be > 0 and finite, got {float(w[i])!r}")
    return w


def as_clients(rho0: ArrayLike, varphi: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Per-client types: ``rho0`` finite and > 0, ``varphi`` in (0, 1), 1-D float arrays of one
    length (a scalar is one client).

    Raises ``ValueError("clients[{i}].rho0: must be > 0, got {rho0_i:.6g}")``,
    ``ValueError("clients[{i}].varphi: must be in (0, 1), got {varphi_i:.6g}")``,
    ``ValueError("rho0: expected a number or a non-empty 1-D list, got shape {shape}")`` (likewise
    ``varphi``), or ``ValueError("varphi: expected {n} values (one per client, like rho0), got {m}")``."""
    r = np.atleast_1d(np.asarray(rho0, dtype=float))
    v = np.atleast_1d(np.asarray(varphi, dtype=float))
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rho0: expected a number or a non-empty 1-D list, got shape {r.shape}")
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"varphi: expected a number or a non-empty 1-D list, got shape {v.shape}")
    if v.size != r.size:
        raise ValueError(f"varphi: expected {r.size} values (one per client, like rho0), got {v.size}")
    bad = np.flatnonzero(~(np.isfinite(r) & (r > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"clients[{i}].rho0: must be > 0, got {_fmt(r[i])}")
    bad = np.flatnonzero(~((v > 0) & (v < 1)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"clients[{i}].varphi: must be in (0, 1), got {_fmt(v[i])}")
    return r, v


def as_rounds(name: str, value: ArrayLike, T: int, *, lower: float = 0.0, strict: bool = False) -> FloatArray:
    """A per-round series of T+1 finite values (t = 0..T), each >= ``lower`` (> when ``strict``);
    a number is broadcast. Returns a new float array.

    Raises ``ValueError("{name}: expected a number or a list of T+1 = {T+1} values, got {n}")`` or
    ``ValueError("{name}[{t}]: must be >= {lower:g}, got {value_t:.6g}")`` (``>`` when ``strict``)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(T + 1, float(arr))
    elif arr.ndim != 1 or arr.size != T + 1:
        got = arr.size if arr.ndim == 1 else f"shape {arr.shape}"
        raise ValueError(f"{name}: expected a number or a list of T+1 = {T + 1} values, got {got}")
    ok = np.isfinite(arr) & ((arr > lower) if strict else (arr >= lower))
    bad = np.flatnonzero(~ok)
    if bad.size:
        t = int(bad[0])
        op = ">" if strict else ">="
        raise ValueError(f"{name}[{t}]: must be {op} {lower:g}, got {_fmt(arr[t])}")
    return arr.copy()
