"""Input validation shared by the robust rules: every error names the field, the allowed range
and the value given."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["check_vectors", "check_weights", "check_int", "check_epsilon", "stack"]


def check_vectors(updates: Sequence[Tensor] | Tensor, *, name: str = "updates", min_count: int = 1) -> list[Tensor]:
    """``updates`` as a list of flat floating-point tensors of one length and dtype (a 2-D
    tensor is read row by row); at least ``min_count`` of them."""
    if isinstance(updates, Tensor):
        if updates.ndim != 2:
            raise ValueError(f"{name}: a tensor of updates must be 2-D (one row per client), got shape {tuple(updates.shape)}")
        vecs = list(updates.unbind(0))
    else:
        vecs = list(updates)
    if len(vecs) < min_count:
        raise ValueError(f"{name}: need at least {min_count} flat vectors, got {len(vecs)}")
    first = vecs[0]
    for j, v in enumerate(vecs):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}[{j}]: must be a torch.Tensor, got {type(v).__name__}")
        if v.ndim != 1:
            raise ValueError(f"{name}[{j}]: must be a flat (1-D) vector, got shape {tuple(v.shape)}")
        if not v.is_floating_point():
            raise TypeError(f"{name}[{j}]: must be floating point, got dtype {v.dtype}")
        if v.shape != first.shape or v.dtype != first.dtype:
            raise ValueError(
                f"{name}[{j}]: every vector must match {name}[0] (shape {tuple(first.shape)}, {first.dtype}), "
                f"got shape {tuple(v.shape)}, {v.dtype}"
            )
    return vecs


def stack(vecs: Sequence[Tensor]) -> Tensor:
    """The vectors as rows of an (m, P) float64 tensor (the rules compute in float64)."""
    return torch.stack([v.to(torch.float64) for v in vecs])


def check_weights(weights: Any, m: int, *, name: str = "sizes") -> np.ndarray:
    """One positive finite weight per vector (data sizes d_j), as float64."""
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a 1-D array of numbers, got {weights!r}") from None
    if w.ndim != 1 or w.size != m:
        raise ValueError(f"{name}: must hold one value per client (m = {m}), got shape {w.shape}")
    bad = np.flatnonzero(~(np.isfinite(w) & (w > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}]: must be > 0 and finite, got {float(w[i])!r}")
    return w


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """An integer in [lo, hi] (hi = None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: must be an integer {rng}, got {v}")
    return v


def check_epsilon(epsilon: Any, *, name: str = "epsilon", allow_inf: bool = True) -> float:
    """ε > 0 (``inf`` allowed: the exponential mechanism's argmax limit)."""
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number > 0, got {epsilon!r}") from None
    if not (e > 0 and (allow_inf or math.isfinite(e))):
        raise ValueError(f"{name}: must be > 0{'' if allow_inf else ' and finite'}, got {epsilon!r}")
    return e
