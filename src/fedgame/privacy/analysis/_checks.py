"""Argument validation shared by the pure-maths modules.

Every error names the argument, the allowed range and the offending value, e.g.
``ValueError("rho: must be >= 0, got -1.0")``. For arrays the first offending entry is reported.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["as_float_array", "check", "scalar_or_array"]

FloatArray = NDArray[np.float64]


def as_float_array(name: str, value: ArrayLike) -> FloatArray:
    """``value`` as a float64 array; NaN is rejected (it satisfies no range)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a real number or array of real numbers, got {value!r}") from None
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name}: must be a number, got nan")
    return arr


def check(
    name: str,
    value: ArrayLike,
    ok: Callable[[FloatArray], NDArray[np.bool_]],
    allowed: str,
) -> FloatArray:
    """Return ``value`` as a float64 array, raising ``ValueError`` unless ``ok(value)`` holds
    everywhere. ``allowed`` completes "must be ...", e.g. ``"> 0"`` or ``"in (0, 1)"``."""
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
