"""Datasets as plug-ins: a recipe's ``data.dataset`` names a class registered in :data:`DATASETS`.

A dataset plug-in is one class with a pydantic ``Config`` (its recipe options, under
``data.options``; ``kind`` is the registered name) and ``load``, which returns a normalised
:class:`~fedgame.data.DatasetSplit`: images ``(N, C, H, W)``, feature vectors ``(N, F)`` or
token ids ``(N, L)``, int64 labels, and optionally per-example group ids of the training
examples (what ``data.partition.kind: natural`` makes its clients of). Nothing is downloaded:
a plug-in reads files the user has (``data.root``, or a path among its options) or builds
arrays in memory.

Built in, one declaration each: the catalog's datasets (:mod:`fedgame.data.catalog`: the
readers of Fashion-MNIST, MNIST, EMNIST, CIFAR-10/100, SVHN and image folders) and two formats
for a researcher's own data, ``csv`` (tabular records, one row per example) and ``npz`` (NumPy
arrays: images, features or tokens). ``fedgame.testing.check_dataset`` is the contract every
plug-in, built-in or not, is held to (docs/your_data.md).
"""

from __future__ import annotations

import csv
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedgame.core import Registry
from fedgame.data._arrays import DatasetSplit, features_split, group_codes, make_split, tokens_split
from fedgame.data.catalog import dataset_info, load_dataset

__all__ = ["DATASETS", "Dataset", "DatasetConfig", "split_from_arrays", "open_dataset"]

#: Name → dataset plug-in class (``data.dataset`` in a recipe).
DATASETS: Registry[Dataset] = Registry("dataset")


class DatasetConfig(BaseModel):
    """The base of every dataset plug-in's ``Config``: its fields are the recipe's
    ``data.options``; ``kind`` is the registered name (set from ``data.dataset``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: str


class Dataset(ABC):
    """A dataset plug-in: ``Config`` (the options), ``from_config`` and :meth:`load`.

    ``disjoint``: the plug-in promises that no example of its test split is also in its
    training split (by construction: separate files, a split of distinct records);
    ``check_dataset`` then looks for identical examples across the two and fails on one.
    """

    Config: ClassVar[type[DatasetConfig]] = DatasetConfig
    disjoint: ClassVar[bool] = True

    def __init__(self, cfg: DatasetConfig) -> None:
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: DatasetConfig, ctx: object = None) -> Dataset:
        """The plug-in for recipe options ``cfg`` (``ctx`` unused: a dataset needs nothing else)."""
        del ctx
        return cls(cfg)

    @abstractmethod
    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        """The normalised split. ``root``: ``data.root`` (where files are looked for, or what a
        relative path among the options is relative to); ``max_train``/``max_test`` keep the first
        that many examples of each split (smoke runs), normalised with the whole training split's
        statistics."""

    @classmethod
    def summary(cls) -> str:
        """One line for ``fedgame list datasets``: the class docstring's first line."""
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else cls.__name__


def open_dataset(name: str, options: dict[str, Any] | None = None) -> Dataset:
    """The registered dataset ``name`` built with recipe ``options`` (validated by its Config)."""
    cls = DATASETS.get(name)
    conf = cls.Config(kind=name, **(options or {}))  # type: ignore[attr-defined]  # Config: a plug-in convention, not in the base type
    ds: Dataset = cls.from_config(conf)  # type: ignore[attr-defined]  # from_config: a plug-in convention, not in the base type
    return ds


# -- the catalog: files fedgame knows how to read, one declaration each -------------------------
class _CatalogConfig(DatasetConfig):
    pass


class _Catalog(Dataset):
    """A dataset of :mod:`fedgame.data.catalog` (its files found as that module says)."""

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        return load_dataset(self.cfg.kind, root=root, max_train=max_train, max_test=max_test, **self.cfg.model_dump(exclude={"kind"}))

    @classmethod
    def summary(cls) -> str:
        return dataset_info(cls.Config.model_fields["kind"].default).summary()


@DATASETS.register("fashion_mnist")
class FashionMNIST(_Catalog):
    """Zalando Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist)."""

    class Config(_CatalogConfig):
        kind: Literal["fashion_mnist"] = "fashion_mnist"


@DATASETS.register("mnist")
class MNIST(_Catalog):
    """MNIST handwritten digits from their IDX files."""

    class Config(_CatalogConfig):
        kind: Literal["mnist"] = "mnist"


@DATASETS.register("emnist")
class EMNIST(_Catalog):
    """EMNIST handwritten characters from their IDX files, one of its splits."""

    class Config(_CatalogConfig):
        kind: Literal["emnist"] = "emnist"
        split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"] = "byclass"


@DATASETS.register("cifar10")
class CIFAR10(_Catalog):
    """CIFAR-10 from its python pickle batches."""

    class Config(_CatalogConfig):
        kind: Literal["cifar10"] = "cifar10"


@DATASETS.register("cifar100")
class CIFAR100(_Catalog):
    """CIFAR-100 from its python pickles, fine or coarse labels."""

    class Config(_CatalogConfig):
        kind: Literal["cifar100"] = "cifar100"
        labels: Literal["fine", "coarse"] = "fine"


@DATASETS.register("svhn")
class SVHN(_Catalog):
    """SVHN cropped digits from their MATLAB files."""

    class Config(_CatalogConfig):
        kind: Literal["svhn"] = "svhn"


@DATASETS.register("image_folder")
class ImageFolder(_Catalog):
    """Your images, one folder per class (a seeded test share unless train/ and test/ exist)."""

    class Config(_CatalogConfig):
        kind: Literal["image_folder"] = "image_folder"
        test_fraction: float = Field(0.2, gt=0, lt=1)
        seed: int = Field(0, ge=0)
        size: tuple[int, int] | None = None
        mode: Literal["L", "RGB"] | None = None


# -- a researcher's own files ------------------------------------------------------------------
def _path(path: str, root: str | None, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and root:
        p = Path(root).expanduser() / p
    if not p.is_file():
        raise FileNotFoundError(
            f"{what}: no such file {str(p)!r}" + ("" if root else " (a relative path is taken from data.root, else the working folder)")
        )
    return p


def _label_codes(values: np.ndarray, what: str) -> tuple[np.ndarray, int]:
    """Labels as int64 codes: integers as they are; anything else numbered by sorted value."""
    try:
        ints = values.astype(np.float64)
        if np.all(np.isfinite(ints)) and np.all(ints == np.round(ints)) and ints.size and ints.min() >= 0:
            y = ints.astype(np.int64)
            return y, int(y.max()) + 1
    except ValueError:
        pass
    codes, names = group_codes(values, what)
    return codes, len(names)


def split_from_arrays(
    *,
    train_x: Any,
    train_y: Any,
    test_x: Any,
    test_y: Any,
    name: str = "memory",
    classes: int | None = None,
    groups: dict[str, Any] | None = None,
) -> DatasetSplit:
    """A :class:`DatasetSplit` from arrays, the kind of example told by the arrays: uint8
    ``(N, C, H, W)`` images (scaled and standardised per channel), float ``(N, C, H, W)``
    images (kept: already normalised), float ``(N, F)`` features (standardised per feature),
    integer ``(N, L)`` token ids (kept). Integer images of another dtype (int64 from Arrow)
    are taken as uint8 pixels when every value is in ``[0, 255]``. Statistics come from the training split only.
    ``groups``: name → one id per training example (any hashable ids: strings, integers),
    numbered by :func:`~fedgame.data.group_codes`."""
    tx, ex = np.asarray(train_x), np.asarray(test_x)
    if tx.ndim == 4 and np.issubdtype(tx.dtype, np.integer) and tx.dtype != np.uint8:
        # integer pixels stored wider (Arrow keeps nested integer lists as int64): 0..255 are uint8 images
        lo, hi = min(int(tx.min(initial=0)), int(ex.min(initial=0))), max(int(tx.max(initial=0)), int(ex.max(initial=0)))
        if not 0 <= lo <= hi <= 255:
            raise ValueError(f"{name}.train_x: integer images must hold pixel values in [0, 255], got [{lo}, {hi}]")
        tx, ex = tx.astype(np.uint8), ex.astype(np.uint8)
    codes = {k: group_codes(v, f"{name}.groups[{k!r}]")[0] for k, v in (groups or {}).items()}
    if tx.ndim == 4 and tx.dtype == np.uint8:
        if classes is None:
            classes = int(max(np.max(train_y, initial=-1), np.max(test_y, initial=-1))) + 1
        s = make_split(train_x=tx, train_y=np.asarray(train_y), test_x=ex, test_y=np.asarray(test_y), classes=classes, name=name)
        return DatasetSplit(train=s.train, test=s.test, mean=s.mean, std=s.std, groups=codes)
    if tx.ndim == 4 and np.issubdtype(tx.dtype, np.floating):
        from fedgame.data._arrays import ArrayDataset

        ytr, yte = np.asarray(train_y).astype(np.int64), np.asarray(test_y).astype(np.int64)
        if classes is None:
            classes = int(max(ytr.max(initial=-1), yte.max(initial=-1))) + 1
        for what, a in (("train_x", tx), ("test_x", ex)):
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{name}.{what}: images must be finite, got {int((~np.isfinite(a)).sum())} non-finite values")
        return DatasetSplit(
            train=ArrayDataset(x=tx.astype(np.float32), y=ytr, classes=classes, name=name),
            test=ArrayDataset(x=ex.astype(np.float32), y=yte, classes=classes, name=name),
            groups=codes,
        )
    if tx.ndim == 2 and np.issubdtype(tx.dtype, np.integer) and tx.dtype != np.uint8:
        return tokens_split(train_x=tx, train_y=train_y, test_x=ex, test_y=test_y, name=name, classes=classes, groups=codes)
    if tx.ndim == 2:
        return features_split(train_x=tx, train_y=train_y, test_x=ex, test_y=test_y, name=name, classes=classes, groups=codes)
    raise ValueError(
        f"{name}.train_x: must be images (N, C, H, W), features (N, F) or token ids (N, L), got shape {tx.shape} dtype {tx.dtype}"
    )


def _head(split: DatasetSplit, max_train: int | None, max_test: int | None) -> DatasetSplit:
    """The first ``max_train``/``max_test`` examples (normalised as in the whole split)."""
    from fedgame.data._arrays import ArrayDataset

    if max_train is None and max_test is None:
        return split
    tr, te = split.train, split.test
    return DatasetSplit(
        train=ArrayDataset(x=tr.x[:max_train], y=tr.y[:max_train], classes=tr.classes, name=tr.name),
        test=ArrayDataset(x=te.x[:max_test], y=te.y[:max_test], classes=te.classes, name=te.name),
        mean=split.mean,
        std=split.std,
        groups={k: group_codes(g[:max_train], f"{tr.name}.groups[{k!r}]")[0] for k, g in split.groups.items()},
    )


@DATASETS.register("csv")
class CSVRecords(Dataset):
    """Your tabular records: a CSV file with a header, one example per row (features, a label, group ids)."""

    class Config(DatasetConfig):
        kind: Literal["csv"] = "csv"
        path: str
        """the CSV file (relative: to ``data.root``, else the working folder)"""
        label: str
        """the column holding each row's class (integers 0..K-1 kept; other values numbered by sorted
        value) or, with ``task: regression``, its numeric target"""
        task: Literal["classification", "regression"] = "classification"
        features: list[str] | None = None
        """the feature columns (numbers); None: every column but the label and the groups"""
        groups: list[str] = Field(default_factory=list)
        """columns kept as per-example group ids (e.g. ``[client]``: a natural partition's clients)"""
        test_path: str | None = None
        """a second CSV of the same columns as the test split; None: a seeded test share of the rows"""
        test_fraction: float = Field(0.2, gt=0, lt=1)
        seed: int = Field(0, ge=0)
        classes: int | None = Field(None, ge=1)
        """the number of classes (classification); None: the largest integer label + 1, or the number
        of distinct labels. Give it when a file may lack the top labels (one silo of a federation)"""

    cfg: Config

    def _read(self, path: Path) -> tuple[list[str], np.ndarray]:
        with open(path, newline="", encoding="utf-8") as f:
            try:
                rows = list(csv.reader(f))
            except (csv.Error, UnicodeDecodeError) as e:
                raise ValueError(f"data.options.path: {path} is not a readable CSV ({type(e).__name__})") from None
        if len(rows) < 2:
            raise ValueError(f"data.options.path: {path} needs a header row and at least one record, got {len(rows)} row(s)")
        header, body = [h.strip() for h in rows[0]], rows[1:]
        bad = next((i for i, r in enumerate(body) if len(r) != len(header)), None)
        if bad is not None:
            raise ValueError(f"data.options.path: {path} row {bad + 2} has {len(body[bad])} fields, the header {len(header)}")
        return header, np.array(body, dtype=object).reshape(len(body), len(header))

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        c = self.cfg
        header, table = self._read(_path(c.path, root, "data.options.path"))
        missing = [col for col in [c.label, *c.groups, *(c.features or [])] if col not in header]
        if missing:
            raise ValueError(f"data.options: column {missing[0]!r} is not in {c.path}; its columns: {', '.join(header)}")
        features = c.features if c.features is not None else [h for h in header if h != c.label and h not in c.groups]
        if not features:
            raise ValueError(f"data.options.features: no feature column left in {c.path} (columns: {', '.join(header)})")
        if c.test_path is not None:
            test_header, test_table = self._read(_path(c.test_path, root, "data.options.test_path"))
            if test_header != header:
                raise ValueError(f"data.options.test_path: {c.test_path} must have the columns of {c.path}")
            train_rows, test_rows = table, test_table
        else:
            perm = np.random.default_rng(c.seed).permutation(len(table))
            n_test = max(1, int(round(c.test_fraction * len(table))))
            if n_test >= len(table):
                raise ValueError(f"data.options.test_fraction: leaves no training record of {len(table)}")
            test_rows, train_rows = table[np.sort(perm[:n_test])], table[np.sort(perm[n_test:])]

        def numbers(rows: np.ndarray, what: str) -> np.ndarray:
            cols = [header.index(f) for f in features]
            out = np.empty((len(rows), len(cols)), dtype=np.float64)
            for j, col in enumerate(cols):
                try:
                    out[:, j] = np.array([float(v) if str(v).strip() else np.nan for v in rows[:, col]])
                except ValueError:
                    i = next(i for i, v in enumerate(rows[:, col]) if not _is_number(v))
                    raise ValueError(
                        f"data.options.features: column {features[j]!r} of the {what} split holds {rows[i, col]!r}, not a number"
                    ) from None
            bad = ~np.isfinite(out)
            if bad.any():
                i, j = (int(v) for v in np.argwhere(bad)[0])
                raise ValueError(
                    f"data.options.features: column {features[j]!r} of the {what} split has a missing or non-finite value "
                    f"({rows[i, cols[j]]!r}; {int(bad.sum())} in all): fill or drop those records"
                )
            return out

        labels = np.concatenate([train_rows[:, header.index(c.label)], test_rows[:, header.index(c.label)]]).astype(str)
        if c.task == "regression":
            bad = [v for v in labels if not _is_number(v)]
            if bad:
                raise ValueError(f"data.options.label: column {c.label!r} holds {bad[0]!r}, not a number (task: regression)")
            y, classes = labels.astype(np.float64), 0
        else:
            y, classes = _label_codes(labels, f"data.options.label ({c.label})")
            if c.classes is not None:
                if classes > c.classes:
                    raise ValueError(
                        f"data.options.classes: column {c.label!r} holds {classes} classes (labels 0..{classes - 1}), "
                        f"more than the {c.classes} given"
                    )
                classes = c.classes
        groups = {g: train_rows[:, header.index(g)].astype(str) for g in c.groups}
        split = split_from_arrays(
            train_x=numbers(train_rows, "training"),
            train_y=y[: len(train_rows)],
            test_x=numbers(test_rows, "test"),
            test_y=y[len(train_rows) :],
            name=Path(c.path).stem,
            classes=classes,
            groups=groups,
        )
        return _head(split, max_train, max_test)


def _is_number(v: object) -> bool:
    try:
        float(str(v))
        return True
    except ValueError:
        return False


@DATASETS.register("npz")
class NPZArrays(Dataset):
    """Your arrays: an .npz holding x_train, y_train, x_test, y_test (and group_<name> ids of the training examples)."""

    class Config(DatasetConfig):
        kind: Literal["npz"] = "npz"
        path: str
        """the .npz file (relative: to ``data.root``, else the working folder)"""
        classes: int | None = Field(None, ge=0)
        """the number of classes (None: the largest label + 1; 0: regression, float targets)"""

    cfg: Config

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        path = _path(self.cfg.path, root, "data.options.path")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (ValueError, OSError) as e:
            raise ValueError(f"data.options.path: {path} is not a readable .npz without pickled objects ({type(e).__name__})") from None
        need = ("x_train", "y_train", "x_test", "y_test")
        missing = [k for k in need if k not in arrays]
        if missing:
            raise ValueError(
                f"data.options.path: {path} lacks array {missing[0]!r}; it needs {', '.join(need)} (and optional group_<name>)"
            )
        groups = {k.removeprefix("group_"): v for k, v in arrays.items() if k.startswith("group_")}
        split = split_from_arrays(
            train_x=arrays["x_train"],
            train_y=arrays["y_train"],
            test_x=arrays["x_test"],
            test_y=arrays["y_test"],
            name=path.stem,
            classes=self.cfg.classes,
            groups=groups,
        )
        return _head(split, max_train, max_test)
