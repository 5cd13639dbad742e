"""In-memory datasets: one array of examples and one int64 array of labels per split.

Three kinds of example, told apart by the array (:attr:`ArrayDataset.kind`):

* ``image``: float32 ``(N, C, H, W)``. Every reader in :mod:`fedgame.data.readers` returns raw
  ``uint8`` images; :func:`make_split` scales them to ``[0, 1]`` and standardises each channel
  with the *training* set's mean and standard deviation (the test set never leaks into the
  statistics). Statistics are computed exactly from integer pixel values in float64, and the
  conversion is a single vectorised pass, so loading 60 000 images costs well under a second.
* ``features``: float32 ``(N, F)`` (tabular records); :func:`features_split` standardises each
  feature with the training split's mean and standard deviation.
* ``tokens``: int64 ``(N, L)`` token ids, ``0`` the padding id (text); :func:`tokens_split`
  keeps them as they are.

A split may carry per-example group ids of its training examples (``groups``: the user, the
hospital, the speaker of each record), from which a natural partition makes one client per
group (:func:`fedgame.data.natural`).

Arrays are stored read-only: loaded splits are shared through an in-process cache, and a
training loop that wrote into them would silently corrupt every later run in the process.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["ArrayDataset", "DatasetSplit", "ExampleKind", "make_split", "features_split", "tokens_split", "channel_stats", "group_codes"]

#: What one example is: an image ``(C, H, W)``, a feature vector ``(F,)``, a token sequence ``(L,)``.
ExampleKind = Literal["image", "features", "tokens"]

_CHUNK = 4096  # images per chunk when accumulating statistics (bounded temporary memory)


def _readonly(a: np.ndarray) -> np.ndarray:
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


@dataclass(frozen=True, kw_only=True, eq=False)
class ArrayDataset:
    """One split of a classification dataset held in memory.

    ``x`` is float32 ``(N, C, H, W)`` (images) or ``(N, F)`` (features), already normalised, or
    int64 ``(N, L)`` (token ids >= 0, 0 the padding id); ``y`` has shape ``(N,)``: int64 class
    labels in ``[0, classes)``, or, with ``classes == 0`` (regression), finite float32 targets.
    """

    x: np.ndarray
    y: np.ndarray
    classes: int
    name: str

    def __post_init__(self) -> None:
        x, y = self.x, self.y
        if not isinstance(x, np.ndarray) or x.ndim not in (2, 4):
            raise ValueError(
                f"{self.name}.x: must be images (N, C, H, W), features (N, F) or tokens (N, L), got shape {getattr(x, 'shape', None)}"
            )
        if x.dtype == np.int64:
            if x.ndim != 2:
                raise ValueError(f"{self.name}.x: int64 token ids must be 2-d (N, L), got shape {x.shape}")
            if x.size and int(x.min()) < 0:
                raise ValueError(f"{self.name}.x: token ids must be >= 0 (0 is the padding id), got minimum {int(x.min())}")
        elif x.dtype != np.float32:
            raise ValueError(f"{self.name}.x: must have dtype float32 (images, features) or int64 (tokens), got {x.dtype}")
        if min(x.shape[1:], default=1) < 1:
            raise ValueError(f"{self.name}.x: every example dimension must be >= 1, got shape {x.shape}")
        if not isinstance(self.classes, int) or isinstance(self.classes, bool) or self.classes < 0:
            raise ValueError(f"{self.name}.classes: must be an int >= 1 (classification) or 0 (regression), got {self.classes!r}")
        want = np.float32 if self.classes == 0 else np.int64
        if not isinstance(y, np.ndarray) or y.ndim != 1 or y.dtype != want:
            raise ValueError(
                f"{self.name}.y: must be a 1-d {np.dtype(want).name} array ({'regression targets' if self.classes == 0 else 'class labels'}), "
                f"got shape {getattr(y, 'shape', None)} dtype {getattr(y, 'dtype', None)}"
            )
        if len(x) != len(y):
            raise ValueError(f"{self.name}: x has {len(x)} examples but y has {len(y)}")
        if self.classes == 0:
            if not np.isfinite(y).all():
                raise ValueError(f"{self.name}.y: regression targets must be finite, got {int((~np.isfinite(y)).sum())} non-finite")
        elif y.size and (int(y.min()) < 0 or int(y.max()) >= self.classes):
            raise ValueError(f"{self.name}.y: labels must be in [0, {self.classes - 1}], got range [{int(y.min())}, {int(y.max())}]")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one example: ``(C, H, W)``, ``(F,)`` or ``(L,)``."""
        return tuple(int(d) for d in self.x.shape[1:])

    @property
    def kind(self) -> ExampleKind:
        """``image``, ``features`` or ``tokens`` (from the array's dtype and rank)."""
        if self.x.dtype == np.int64:
            return "tokens"
        return "image" if self.x.ndim == 4 else "features"


@dataclass(frozen=True, kw_only=True, eq=False)
class DatasetSplit:
    """A train/test pair plus the statistics used to normalise both.

    ``mean`` and ``std`` come from the training set: per channel on the ``[0, 1]`` pixel scale
    for images, per feature for features, empty for tokens. ``groups`` maps a grouping's name
    (e.g. a CSV's ``client`` column) to one int64 code per *training* example in ``[0, G)``
    (:func:`group_codes`): what a natural partition makes its clients of.
    """

    train: ArrayDataset
    test: ArrayDataset
    mean: tuple[float, ...] = field(default=())
    std: tuple[float, ...] = field(default=())
    groups: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.train.shape != self.test.shape:
            raise ValueError(f"{self.train.name}: train examples have shape {self.train.shape} but test {self.test.shape}")
        if self.train.x.dtype != self.test.x.dtype:
            raise ValueError(f"{self.train.name}: train examples are {self.train.x.dtype} but test {self.test.x.dtype}")
        if self.train.classes != self.test.classes:
            raise ValueError(f"{self.train.name}: train has {self.train.classes} classes but test {self.test.classes}")
        groups = {}
        for key, g in self.groups.items():
            g = np.asarray(g)
            if g.shape != (len(self.train),) or not np.issubdtype(g.dtype, np.integer):
                raise ValueError(
                    f"{self.train.name}.groups[{key!r}]: must be one integer code per training example, shape ({len(self.train)},), "
                    f"got shape {g.shape} dtype {g.dtype}"
                )
            if g.size and int(g.min()) < 0:
                raise ValueError(f"{self.train.name}.groups[{key!r}]: codes must be >= 0, got {int(g.min())}")
            groups[str(key)] = _readonly(g.astype(np.int64, copy=False))
        object.__setattr__(self, "groups", groups)

    @property
    def kind(self) -> ExampleKind:
        return self.train.kind

    @property
    def vocab(self) -> int | None:
        """For token data, the number of token ids (the largest id + 1, padding id 0 included)."""
        if self.kind != "tokens":
            return None
        return int(max(self.train.x.max(initial=0), self.test.x.max(initial=0))) + 1

    @property
    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of the examples, labels and groups of both splits: what a
        run folder records of data it does not copy, so a resume on other data is refused."""
        h = hashlib.sha256()
        for a in (self.train.x, self.train.y, self.test.x, self.test.y, *(self.groups[k] for k in sorted(self.groups))):
            h.update(str((a.dtype.str, a.shape)).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(str(sorted(self.groups)).encode())
        return h.hexdigest()[:16]

    @property
    def name(self) -> str:
        return self.train.name

    @property
    def classes(self) -> int:
        return self.train.classes


def channel_stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) std of uint8 images ``(N, C, H, W)`` on the [0, 1] scale.

    Sums of pixel values and of their squares are exact (integers below 2**53 held in float64),
    accumulated over chunks of images so no full-size float64 copy is made.
    """
    if x.dtype != np.uint8 or x.ndim != 4:
        raise ValueError(f"x: must be a uint8 array (N, C, H, W), got dtype {x.dtype} shape {x.shape}")
    n, c = x.shape[0], x.shape[1]
    count = n * x.shape[2] * x.shape[3]
    if count == 0:
        raise ValueError(f"x: needs at least one pixel per channel to compute statistics, got shape {x.shape}")
    s = np.zeros(c, dtype=np.float64)
    q = np.zeros(c, dtype=np.float64)
    for i in range(0, n, _CHUNK):
        chunk = x[i : i + _CHUNK].astype(np.float32)  # exact: values <= 255, squares <= 65025 < 2**24
        s += chunk.sum(axis=(0, 2, 3), dtype=np.float64)
        q += (chunk * chunk).sum(axis=(0, 2, 3), dtype=np.float64)
    mean = s / count
    var = np.maximum(q / count - mean * mean, 0.0)
    std = np.sqrt(var)
    return tuple(float(m / 255.0) for m in mean), tuple(float(v / 255.0) for v in std)


def _normalise(x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``(x / 255 - mean) / std`` per channel in one float32 allocation."""
    c = x.shape[1]
    safe_std = np.array([s if s > 0 else 1.0 for s in std], dtype=np.float64)
    scale = (1.0 / (255.0 * safe_std)).astype(np.float32).reshape(1, c, 1, 1)
    shift = (np.asarray(mean, dtype=np.float64) / safe_std).astype(np.float32).reshape(1, c, 1, 1)
    out = x.astype(np.float32)
    out *= scale
    out -= shift
    return out


def _labels(y: np.ndarray, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{what}: must be a 1-d integer array, got shape {y.shape} dtype {y.dtype}")
    return y.astype(np.int64, copy=False)


def make_split(
    *,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    classes: int,
    name: str,
    max_train: int | None = None,
    max_test: int | None = None,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> DatasetSplit:
    """Normalise raw uint8 images ``(N, C, H, W)`` with the training statistics.

    ``max_train``/``max_test`` keep only the first that many examples of each split (a smoke
    run's subset); the statistics are still those of the whole training set, so the kept
    examples hold exactly the values they hold in the full split, and the dropped ones are never
    normalised (for Fashion-MNIST, about 1 s of a fresh process's start, e.g. each Flower
    ClientApp's). ``stats`` are those statistics, ``channel_stats(train_x)``, when the caller
    has them already (the dataset cache keeps them beside the arrays).

    >>> import numpy as np
    >>> x = np.arange(2 * 1 * 2 * 2, dtype=np.uint8).reshape(2, 1, 2, 2)
    >>> s = make_split(train_x=x, train_y=np.array([0, 1]), test_x=x, test_y=np.array([1, 0]), classes=2, name="toy")
    >>> round(float(s.train.x.mean()), 6), round(float(s.train.x.std()), 6)
    (0.0, 1.0)
    """
    for what, a in (("train_x", train_x), ("test_x", test_x)):
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 4:
            raise ValueError(
                f"{name}.{what}: must be a uint8 array (N, C, H, W), got dtype {getattr(a, 'dtype', None)} "
                f"shape {getattr(a, 'shape', None)}"
            )
    for what, m in (("max_train", max_train), ("max_test", max_test)):
        if m is not None and m < 1:
            raise ValueError(f"{name}.{what}: must be >= 1 or None, got {m}")
    mean, std = channel_stats(train_x) if stats is None else stats
    train_x, train_y = train_x[:max_train], np.asarray(train_y)[:max_train]
    test_x, test_y = test_x[:max_test], np.asarray(test_y)[:max_test]
    if any(not math.isfinite(v) for v in (*mean, *std)):
        raise ValueError(f"{name}: non-finite channel statistics mean={mean} std={std}")
    train = ArrayDataset(
        x=_readonly(_normalise(train_x, mean, std)), y=_readonly(_labels(train_y, f"{name}.train_y")), classes=classes, name=name
    )
    test = ArrayDataset(
        x=_readonly(_normalise(test_x, mean, std)), y=_readonly(_labels(test_y, f"{name}.test_y")), classes=classes, name=name
    )
    return DatasetSplit(train=train, test=test, mean=mean, std=std)


def group_codes(ids: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, names)``: ids of any hashable kind (strings, integers) as int64 codes in
    ``[0, G)`` numbered by sorted id (``names[code]`` is the id), so the client order does not
    depend on the order of the records."""
    a = np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"{what}: must be one id per example (1-d), got shape {a.shape}")
    if a.dtype == object:
        a = a.astype(str)
    names, codes = np.unique(a, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), names


def _float_features(x: Any, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)) or a.dtype == np.bool_:
        raise ValueError(f"{what}: must be a 2-d numeric array (N, F), got shape {a.shape} dtype {a.dtype}")
    a = a.astype(np.float64, copy=False)
    bad = ~np.isfinite(a)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{what}: features must be finite, got {a[row, col]} at row {row}, feature {col} ({int(bad.sum())} in all)")
    return a


def _labels_for(y: Any, classes: int | None, what: str) -> tuple[np.ndarray, int]:
    if classes == 0:  # regression: float targets
        t = np.asarray(y)
        if t.ndim != 1 or not (np.issubdtype(t.dtype, np.floating) or np.issubdtype(t.dtype, np.integer)) or t.dtype == np.bool_:
            raise ValueError(f"{what}: regression targets must be a 1-d numeric array, got shape {t.shape} dtype {t.dtype}")
        t = t.astype(np.float32)
        if not np.isfinite(t).all():
            raise ValueError(f"{what}: regression targets must be finite, got {int((~np.isfinite(t)).sum())} non-finite")
        return t, 0
    y = _labels(np.asarray(y), what)
    if classes is None:
        classes = int(y.max(initial=-1)) + 1
    if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise ValueError(f"{what}: labels must be in [0, {classes - 1}] (classes = {classes}), got range [{int(y.min())}, {int(y.max())}]")
    return y, classes


def features_split(
    *,
    train_x: Any,
    train_y: Any,
    test_x: Any,
    test_y: Any,
    name: str,
    classes: int | None = None,
    groups: Mapping[str, np.ndarray] | None = None,
    standardise: bool = True,
) -> DatasetSplit:
    """Tabular records ``(N, F)`` as a :class:`DatasetSplit`: each feature standardised with the
    training split's mean and (population) standard deviation, computed in float64 (a constant
    feature keeps scale 1). ``classes`` defaults to the largest training or test label + 1;
    ``classes=0`` makes a regression split (float targets).

    >>> s = features_split(train_x=[[0.0, 1.0], [2.0, 1.0]], train_y=[0, 1], test_x=[[1.0, 1.0]], test_y=[1], name="toy")
    >>> s.train.x.tolist(), s.test.x.tolist(), s.mean
    ([[-1.0, 0.0], [1.0, 0.0]], [[0.0, 0.0]], (1.0, 1.0))
    """
    tr, te = _float_features(train_x, f"{name}.train_x"), _float_features(test_x, f"{name}.test_x")
    if tr.shape[0] == 0:
        raise ValueError(f"{name}.train_x: needs at least one training example")
    if tr.shape[1] != te.shape[1]:
        raise ValueError(f"{name}.test_x: must have the training split's {tr.shape[1]} features, got {te.shape[1]}")
    ytr, yte = np.asarray(train_y), np.asarray(test_y)
    if classes is None:
        classes = int(max(_labels(ytr, f"{name}.train_y").max(initial=-1), _labels(yte, f"{name}.test_y").max(initial=-1))) + 1
    ytr, _ = _labels_for(ytr, classes, f"{name}.train_y")
    yte, _ = _labels_for(yte, classes, f"{name}.test_y")
    if standardise:
        mean, std = tr.mean(axis=0), tr.std(axis=0)
        std = np.where(std > 0, std, 1.0)
    else:
        mean, std = np.zeros(tr.shape[1]), np.ones(tr.shape[1])
    train = ArrayDataset(x=_readonly(((tr - mean) / std).astype(np.float32)), y=_readonly(ytr), classes=classes, name=name)
    test = ArrayDataset(x=_readonly(((te - mean) / std).astype(np.float32)), y=_readonly(yte), classes=classes, name=name)
    return DatasetSplit(train=train, test=test, mean=tuple(map(float, mean)), std=tuple(map(float, std)), groups=dict(groups or {}))


def tokens_split(
    *,
    train_x: Any,
    train_y: Any,
    test_x: Any,
    test_y: Any,
    name: str,
    classes: int | None = None,
    groups: Mapping[str, np.ndarray] | None = None,
) -> DatasetSplit:
    """Token-id sequences ``(N, L)`` (integers >= 0, 0 the padding id; pad shorter texts with
    0) as a :class:`DatasetSplit`; the ids are kept as they are."""
    arrays = []
    for what, x in (("train_x", train_x), ("test_x", test_x)):
        a = np.asarray(x)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
            raise ValueError(f"{name}.{what}: token ids must be a 2-d integer array (N, L), got shape {a.shape} dtype {a.dtype}")
        arrays.append(a.astype(np.int64, copy=False))
    ytr, yte = np.asarray(train_y), np.asarray(test_y)
    if classes is None:
        classes = int(max(_labels(ytr, f"{name}.train_y").max(initial=-1), _labels(yte, f"{name}.test_y").max(initial=-1))) + 1
    ytr, _ = _labels_for(ytr, classes, f"{name}.train_y")
    yte, _ = _labels_for(yte, classes, f"{name}.test_y")
    train = ArrayDataset(x=_readonly(arrays[0]), y=_readonly(ytr), classes=classes, name=name)
    test = ArrayDataset(x=_readonly(arrays[1]), y=_readonly(yte), classes=classes, name=name)
    return DatasetSplit(train=train, test=test, groups=dict(groups or {}))
