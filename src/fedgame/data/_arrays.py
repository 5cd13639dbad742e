"""In-memory datasets: one float32 array of images and one int64 array of labels per split.

Every reader in :mod:`fedgame.data.readers` returns raw ``uint8`` images; :func:`make_split`
turns them into a :class:`DatasetSplit` by scaling to ``[0, 1]`` and standardising each
channel with the *training* set's mean and standard deviation (the test set never leaks into
the statistics). Statistics are computed exactly from integer pixel values in float64, and
the conversion is a single vectorised pass, so loading 60 000 images costs well under a
second.

Arrays are stored read-only: loaded splits are shared through an in-process cache, and a
training loop that wrote into them would silently corrupt every later run in the process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ArrayDataset", "DatasetSplit", "make_split", "channel_stats"]

_CHUNK = 4096  # images per chunk when accumulating statistics (bounded temporary memory)


def _readonly(a: np.ndarray) -> np.ndarray:
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


@dataclass(frozen=True, kw_only=True, eq=False)
class ArrayDataset:
    """One split of an image-classification dataset held in memory.

    ``x`` has shape ``(N, C, H, W)`` and dtype float32 (already normalised); ``y`` has shape
    ``(N,)`` and dtype int64 with values in ``[0, classes)``.
    """

    x: np.ndarray
    y: np.ndarray
    classes: int
    name: str

    def __post_init__(self) -> None:
        x, y = self.x, self.y
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(f"{self.name}.x: must be a 4-d array (N, C, H, W), got shape {getattr(x, 'shape', None)}")
        if x.dtype != np.float32:
            raise ValueError(f"{self.name}.x: must have dtype float32, got {x.dtype}")
        if not isinstance(y, np.ndarray) or y.ndim != 1 or y.dtype != np.int64:
            raise ValueError(
                f"{self.name}.y: must be a 1-d int64 array, got shape {getattr(y, 'shape', None)} "
                f"dtype {getattr(y, 'dtype', None)}"
            )
        if len(x) != len(y):
            raise ValueError(f"{self.name}: x has {len(x)} examples but y has {len(y)}")
        if not isinstance(self.classes, int) or self.classes < 1:
            raise ValueError(f"{self.name}.classes: must be an int >= 1, got {self.classes!r}")
        if y.size and (int(y.min()) < 0 or int(y.max()) >= self.classes):
            raise ValueError(
                f"{self.name}.y: labels must be in [0, {self.classes - 1}], got range [{int(y.min())}, {int(y.max())}]"
            )

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        """Shape of one example, ``(C, H, W)``."""
        c, h, w = self.x.shape[1:]
        return int(c), int(h), int(w)


@dataclass(frozen=True, kw_only=True, eq=False)
class DatasetSplit:
    """A train/test pair plus the per-channel statistics used to normalise both.

    ``mean`` and ``std`` are on the ``[0, 1]`` pixel scale and come from the training set.
    """

    train: ArrayDataset
    test: ArrayDataset
    mean: tuple[float, ...] = field(default=())
    std: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.train.shape != self.test.shape:
            raise ValueError(f"{self.train.name}: train examples have shape {self.train.shape} but test {self.test.shape}")
        if self.train.classes != self.test.classes:
            raise ValueError(f"{self.train.name}: train has {self.train.classes} classes but test {self.test.classes}")

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
