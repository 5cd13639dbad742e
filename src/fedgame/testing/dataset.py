"""The contract of a dataset plug-in (``fedgame.data.Dataset``): what every split it loads must be."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fedgame.data import DATASETS, DatasetSplit, open_dataset

__all__ = ["check_dataset", "check_split"]


def _rows(x: np.ndarray) -> set[bytes]:
    """A digest of every example (its bytes), to find identical examples across splits."""
    flat = np.ascontiguousarray(x).reshape(len(x), -1)
    return {hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in flat}


def check_dataset(name: str, options: dict[str, Any] | None = None, *, root: str | None = None) -> DatasetSplit:
    """Load dataset plug-in ``name`` (registered in :data:`~fedgame.data.DATASETS`, e.g. by a
    ``--plugin`` file) with recipe ``options`` twice and check, raising ``AssertionError``
    with one line on the first failure:

    * examples are images float32 ``(N, C, H, W)``, features float32 ``(N, F)`` or token ids
      int64 ``(N, L)`` (>= 0), all finite; train and test have one example shape and dtype;
    * labels are int64 ``(N,)`` in ``[0, classes)``, and the training split has at least two
      classes' worth of examples (one example at least);
    * group ids, when given, are one code per training example and number every group
      ``0..G-1`` with at least one example each;
    * the order is deterministic: a second load gives the same examples, labels and groups (the
      same fingerprint);
    * where the plug-in declares ``disjoint`` (the default), no test example is identical to a
      training example.

    Returns the loaded split."""
    first = open_dataset(name, options).load(root=root)
    check_split(name, first)
    second = open_dataset(name, options).load(root=root)
    if second.fingerprint != first.fingerprint:
        raise AssertionError(
            f"dataset {name!r}: two loads gave different data (fingerprints {first.fingerprint} and {second.fingerprint}); the order must be deterministic"
        )
    return first


def check_split(name: str, first: DatasetSplit) -> None:
    """The checks of :func:`check_dataset` on one loaded split (all but determinism): what
    ``fedgame validate`` runs on a recipe's data."""
    cls = DATASETS.get(name)
    if not isinstance(first, DatasetSplit):
        raise AssertionError(f"dataset {name!r}: load() must return a fedgame.data.DatasetSplit, got {type(first).__name__}")
    for part, ds in (("train", first.train), ("test", first.test)):
        x, y = ds.x, ds.y
        if len(ds) == 0 and part == "train":
            raise AssertionError(f"dataset {name!r}: the training split is empty")
        if x.dtype == np.float32 and not np.isfinite(x).all():
            raise AssertionError(f"dataset {name!r}: {part} examples hold {int((~np.isfinite(x)).sum())} non-finite values")
        if x.dtype not in (np.float32, np.int64) or x.ndim not in (2, 4):
            raise AssertionError(
                f"dataset {name!r}: {part} examples are {x.dtype} {x.shape}; allowed: float32 (N,C,H,W) or (N,F), int64 (N,L)"
            )
        if ds.classes == 0:  # regression
            if y.dtype != np.float32 or y.shape != (len(x),) or not np.isfinite(y).all():
                raise AssertionError(
                    f"dataset {name!r}: {part} regression targets must be finite float32 ({len(x)},), got {y.dtype} {y.shape}"
                )
            continue
        if y.dtype != np.int64 or y.shape != (len(x),):
            raise AssertionError(f"dataset {name!r}: {part} labels must be int64 ({len(x)},), got {y.dtype} {y.shape}")
        if y.size and not (0 <= int(y.min()) and int(y.max()) < ds.classes):
            raise AssertionError(f"dataset {name!r}: {part} labels span [{int(y.min())}, {int(y.max())}], outside [0, {ds.classes})")
    for key, g in first.groups.items():
        used = np.bincount(g, minlength=int(g.max(initial=-1)) + 1)
        if used.size and (used == 0).any():
            raise AssertionError(
                f"dataset {name!r}: grouping {key!r} skips code {int(np.argmin(used))} (codes must number the groups 0..G-1)"
            )
    if getattr(cls, "disjoint", True) and len(first.test):
        shared = _rows(first.train.x) & _rows(first.test.x)
        if shared:
            raise AssertionError(
                f"dataset {name!r}: {len(shared)} test example(s) are identical to training examples, but the plug-in declares "
                "its splits disjoint (set disjoint = False on the class if they may share examples)"
            )
