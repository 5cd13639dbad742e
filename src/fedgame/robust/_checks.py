"""Tensor checks shared by the robust rules: every error names the field, the allowed range and
the value given. Only what needs torch lives here; the scalar and array validators (``check_int``,
``check_weights``, ``check_positive``) are in :mod:`fedgame.core.validate`, which may not import
torch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["check_vectors", "stack"]


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
