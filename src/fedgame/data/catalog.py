"""Datasets by name: where their files are looked for, how they are read, what they hold.

:func:`load_dataset` resolves the folder of dataset ``name`` in this order:

1. the ``root`` argument;
2. the environment variable ``FEDGAME_DATA_<NAME>`` (e.g. ``FEDGAME_DATA_FASHION_MNIST``);
3. ``$FEDGAME_DATA_ROOT/<name>``;
4. the default: Debian's ``/usr/share/datasets/fashion-mnist`` for ``fashion_mnist``
   (``sudo apt-get install dataset-fashion-mnist``), ``~/.cache/fedgame/data/<name>`` otherwise.

An explicit ``root`` or per-dataset variable is authoritative (a wrong path is an error, not a
silent fallback); ``$FEDGAME_DATA_ROOT/<name>`` and the default are tried in turn. Every reader
also accepts the parent of the dataset's own folder. If nothing is found, one
:class:`DatasetNotFoundError` names the files, every folder examined and how to get the data.

Loaded splits are kept in a small in-process LRU cache keyed on the resolved folder and the
options, so the second load of a dataset in a process is free (the arrays are read-only). The
decoded arrays and the training statistics are also kept on disk for the next process
(:mod:`fedgame.data._disk_cache`, ``$FEDGAME_CACHE/datasets``), keyed on the folder's files;
``cache=False`` uses neither cache.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedgame.data._arrays import DatasetSplit, channel_stats, make_split
from fedgame.data._disk_cache import Stats, cached_read
from fedgame.data.readers import (
    CIFAR10_FILES,
    CIFAR100_FILES,
    EMNIST_SPLITS,
    EMNIST_SUBDIRS,
    FASHION_MNIST_SUBDIRS,
    MNIST_SUBDIRS,
    SVHN_FILES,
    DatasetNotFoundError,
    RawSplit,
    find_dataset_dir,
    idx_file_names,
    read_cifar10,
    read_cifar100,
    read_emnist,
    read_fashion_mnist,
    read_image_folder_split,
    read_mnist,
    read_svhn,
)

__all__ = [
    "DatasetInfo",
    "load_dataset",
    "list_datasets",
    "dataset_info",
    "describe_datasets",
    "resolve_roots",
    "clear_cache",
    "env_var",
    "DEBIAN_FASHION_MNIST",
]

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_CACHE_SIZE = 4


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """What a dataset holds and where its files come from (``None``: depends on the files)."""

    name: str
    description: str
    shape: tuple[int, int, int] | None
    classes: int | None
    train_size: int | None
    test_size: int | None
    files: tuple[str, ...]
    source: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def env_var(self) -> str:
        return env_var(self.name)

    @property
    def default_root(self) -> Path:
        return _default_root(self.name)

    def summary(self) -> str:
        """One line for listings, e.g. ``1×28×28, 10 classes, 60000/10000 — Fashion-MNIST``."""
        parts = []
        if self.shape is not None:
            parts.append("×".join(map(str, self.shape)))
        if self.classes is not None:
            parts.append(f"{self.classes} classes")
        if self.train_size is not None and self.test_size is not None:
            parts.append(f"{self.train_size}/{self.test_size}")
        head = ", ".join(parts)
        return f"{head} — {self.description}" if head else self.description


@dataclass(frozen=True, kw_only=True)
class _Spec:
    info: DatasetInfo
    locate: Callable[[Path, Mapping[str, Any]], Path]
    read: Callable[[Path, Mapping[str, Any]], tuple[RawSplit, int]]
    get_it: str  # how to obtain the files
    on_disk: bool = True  # decoded arrays kept in the dataset cache (fedgame.data._disk_cache)


def env_var(name: str) -> str:
    """The per-dataset environment variable, e.g. ``FEDGAME_DATA_FASHION_MNIST``."""
    return "FEDGAME_DATA_" + name.upper()


def _default_root(name: str) -> Path:
    if name == "fashion_mnist":
        return DEBIAN_FASHION_MNIST
    return Path("~/.cache/fedgame/data").expanduser() / name


# -- the datasets ----------------------------------------------------------------------------
def _idx_spec(
    name: str,
    *,
    description: str,
    subdirs: tuple[str, ...],
    reader: Callable[[Path], RawSplit],
    train: int,
    test: int,
    source: str,
    get_it: str,
) -> _Spec:
    files = idx_file_names()
    return _Spec(
        info=DatasetInfo(
            name=name,
            description=description,
            shape=(1, 28, 28),
            classes=10,
            train_size=train,
            test_size=test,
            files=tuple(f + ".gz" for f in files),
            source=source,
        ),
        locate=lambda root, kw: find_dataset_dir(root, dataset=name, files=files, subdirs=subdirs, gz=True),
        read=lambda d, kw: (reader(d), 10),
        get_it=get_it,
    )


def _emnist_split(kw: Mapping[str, Any]) -> str:
    split = kw.get("split", "byclass")
    if split not in EMNIST_SPLITS:
        raise ValueError(f"emnist.split: must be one of {', '.join(EMNIST_SPLITS)}, got {split!r}")
    return str(split)


def _emnist_files(split: str) -> tuple[str, ...]:
    return tuple(
        f"emnist-{split}-{f}"
        for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "test-images-idx3-ubyte", "test-labels-idx1-ubyte")
    )


def _locate_image_folder(root: Path, kw: Mapping[str, Any]) -> Path:
    if root.is_dir() and any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir()):
        return root
    raise DatasetNotFoundError(dataset="image_folder", files=["<class_name>/*.png|jpg"], searched=[str(root)])


def _read_image_folder(root: Path, kw: Mapping[str, Any]) -> tuple[RawSplit, int]:
    size = kw.get("size")
    raw, names = read_image_folder_split(
        root,
        test_fraction=float(kw.get("test_fraction", 0.2)),
        seed=int(kw.get("seed", 0)),
        size=None if size is None else (int(size[0]), int(size[1])),
        mode=kw.get("mode"),
    )
    return raw, len(names)


_SPECS: dict[str, _Spec] = {
    "fashion_mnist": _idx_spec(
        "fashion_mnist",
        description="Zalando Fashion-MNIST (IDX files)",
        subdirs=FASHION_MNIST_SUBDIRS,
        reader=read_fashion_mnist,
        train=60000,
        test=10000,
        source="https://github.com/zalandoresearch/fashion-mnist",
        get_it=(
            "Install Debian's package: `sudo apt-get install dataset-fashion-mnist` (files go to "
            f"{DEBIAN_FASHION_MNIST}), or download the four *-ubyte.gz files from "
            "https://github.com/zalandoresearch/fashion-mnist and set FEDGAME_DATA_FASHION_MNIST=<folder> "
            "(or pass root=<folder> / data.root in the recipe)."
        ),
    ),
    "mnist": _idx_spec(
        "mnist",
        description="MNIST handwritten digits (IDX files)",
        subdirs=MNIST_SUBDIRS,
        reader=read_mnist,
        train=60000,
        test=10000,
        source="https://ossci-datasets.s3.amazonaws.com/mnist/ (mirror of yann.lecun.com/exdb/mnist)",
        get_it=(
            "Download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
            "t10k-labels-idx1-ubyte.gz from https://ossci-datasets.s3.amazonaws.com/mnist/ into "
            "{default}, or set FEDGAME_DATA_MNIST=<folder> (or pass root=<folder>)."
        ),
    ),
    "emnist": _Spec(
        info=DatasetInfo(
            name="emnist",
            description="EMNIST handwritten characters (IDX files); split= byclass (62 classes, default), "
            "bymerge (47), balanced (47), letters (26), digits (10), mnist (10)",
            shape=(1, 28, 28),
            classes=62,
            train_size=697932,
            test_size=116323,
            files=tuple(f + ".gz" for f in _emnist_files("byclass")),
            source="https://www.nist.gov/itl/products-and-services/emnist-dataset",
            options={"split": "byclass"},
        ),
        locate=lambda root, kw: find_dataset_dir(
            root, dataset="emnist", files=_emnist_files(_emnist_split(kw)), subdirs=EMNIST_SUBDIRS, gz=True
        ),
        read=lambda d, kw: (read_emnist(d, split=_emnist_split(kw)), EMNIST_SPLITS[_emnist_split(kw)]),
        get_it=(
            "Download gzip.zip (the 'binary format as the original MNIST dataset') from "
            "https://www.nist.gov/itl/products-and-services/emnist-dataset, unzip it into "
            "{default} (the emnist-<split>-*-ubyte.gz files may stay in its gzip/ folder), "
            "or set FEDGAME_DATA_EMNIST=<folder> (or pass root=<folder>)."
        ),
    ),
    "cifar10": _Spec(
        info=DatasetInfo(
            name="cifar10",
            description="CIFAR-10 (python pickle batches)",
            shape=(3, 32, 32),
            classes=10,
            train_size=50000,
            test_size=10000,
            files=CIFAR10_FILES,
            source="https://www.cs.toronto.edu/~kriz/cifar.html",
        ),
        locate=lambda root, kw: find_dataset_dir(root, dataset="cifar10", files=CIFAR10_FILES, subdirs=("cifar-10-batches-py",)),
        read=lambda d, kw: (read_cifar10(d), 10),
        get_it=(
            "Download https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz and extract it "
            "(`tar xzf cifar-10-python.tar.gz -C {default}`, giving cifar-10-batches-py/), "
            "or set FEDGAME_DATA_CIFAR10=<folder> (or pass root=<folder>)."
        ),
    ),
    "cifar100": _Spec(
        info=DatasetInfo(
            name="cifar100",
            description="CIFAR-100 (python pickles); labels= fine (100 classes, default) or coarse (20)",
            shape=(3, 32, 32),
            classes=100,
            train_size=50000,
            test_size=10000,
            files=CIFAR100_FILES,
            source="https://www.cs.toronto.edu/~kriz/cifar.html",
            options={"labels": "fine"},
        ),
        locate=lambda root, kw: find_dataset_dir(root, dataset="cifar100", files=CIFAR100_FILES, subdirs=("cifar-100-python",)),
        read=lambda d, kw: (
            read_cifar100(d, labels=str(kw.get("labels", "fine"))),
            100 if kw.get("labels", "fine") == "fine" else 20,
        ),
        get_it=(
            "Download https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz and extract it "
            "(`tar xzf cifar-100-python.tar.gz -C {default}`, giving cifar-100-python/), "
            "or set FEDGAME_DATA_CIFAR100=<folder> (or pass root=<folder>)."
        ),
    ),
    "svhn": _Spec(
        info=DatasetInfo(
            name="svhn",
            description="SVHN cropped digits (MATLAB .mat)",
            shape=(3, 32, 32),
            classes=10,
            train_size=73257,
            test_size=26032,
            files=SVHN_FILES,
            source="http://ufldl.stanford.edu/housenumbers/",
        ),
        locate=lambda root, kw: find_dataset_dir(root, dataset="svhn", files=SVHN_FILES, subdirs=("svhn", "SVHN")),
        read=lambda d, kw: (read_svhn(d), 10),
        get_it=(
            "Download http://ufldl.stanford.edu/housenumbers/train_32x32.mat and test_32x32.mat into {default}, "
            "or set FEDGAME_DATA_SVHN=<folder> (or pass root=<folder>)."
        ),
    ),
    "image_folder": _Spec(
        info=DatasetInfo(
            name="image_folder",
            description="your images: <root>/<class_name>/*.png|jpg (or <root>/train/... and <root>/test/...); "
            "options test_fraction=0.2, seed=0, size=(H, W), mode='L'|'RGB'",
            shape=None,
            classes=None,
            train_size=None,
            test_size=None,
            files=("<class_name>/*.png|jpg",),
            source="local",
            options={"test_fraction": 0.2, "seed": 0, "size": None, "mode": None},
        ),
        locate=_locate_image_folder,
        read=_read_image_folder,
        on_disk=False,  # a file per image in subfolders: the cache's key would walk them all
        get_it=(
            "Put one folder per class holding its images (png/jpg) under the root, "
            "and pass root=<folder> or set FEDGAME_DATA_IMAGE_FOLDER=<folder>."
        ),
    ),
}


_Raw = tuple[RawSplit, int, Stats | None]


# -- public API ------------------------------------------------------------------------------
def list_datasets() -> list[str]:
    """Names :func:`load_dataset` accepts, sorted."""
    return sorted(_SPECS)


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"dataset: unknown name {name!r}; known: {', '.join(list_datasets())}") from None


def dataset_info(name: str) -> DatasetInfo:
    """Shape, classes, sizes, files and source of dataset ``name`` (default options)."""
    return _spec(name).info


def describe_datasets() -> dict[str, str]:
    """``name → one-line summary`` for every dataset (what ``fedgame list datasets`` shows)."""
    return {n: _SPECS[n].info.summary() for n in list_datasets()}


def resolve_roots(name: str, root: str | Path | None = None) -> list[tuple[Path, str]]:
    """The folders that would be searched for ``name``, in order, each with where it came from.

    One entry if ``root`` or ``FEDGAME_DATA_<NAME>`` is set (they are authoritative), else
    ``$FEDGAME_DATA_ROOT/<name>`` (if that variable is set) followed by the default.
    """
    _spec(name)
    if root is not None and str(root) != "":
        return [(Path(root).expanduser(), "root argument")]
    var = env_var(name)
    if os.environ.get(var):
        return [(Path(os.environ[var]).expanduser(), f"${var}")]
    out: list[tuple[Path, str]] = []
    if os.environ.get("FEDGAME_DATA_ROOT"):
        out.append((Path(os.environ["FEDGAME_DATA_ROOT"]).expanduser() / name, "$FEDGAME_DATA_ROOT"))
    out.append((_default_root(name), "default"))
    return out


def _hashable(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_hashable(x) for x in v)
    return v


def _check_options(name: str, spec: _Spec, kw: Mapping[str, Any]) -> dict[str, Any]:
    allowed = spec.info.options
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        allowed_s = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"load_dataset({name!r}): unknown option(s) {', '.join(unknown)}; allowed: {allowed_s}")
    return {k: _hashable(v) for k, v in kw.items()}


def _read(name: str, folder: Path, stamp: int, options: tuple[tuple[str, Any], ...], disk: bool = True) -> _Raw:
    """The raw arrays, class count and training statistics; with ``disk``, through the dataset
    cache of :mod:`fedgame.data._disk_cache` (a fresh process skips decoding the files)."""
    del stamp  # part of the in-process cache key only: a rewritten folder is read again
    spec = _SPECS[name]
    read = functools.partial(spec.read, folder, dict(options))
    if disk and spec.on_disk:
        return cached_read(name, folder, options, read, lambda raw: channel_stats(raw.train_x))
    raw, classes = read()
    return raw, classes, None


# the raw uint8 arrays, kept so that splits of other sizes (max_train, max_test) are cut from
# them without reading the files again
_read_cached = functools.lru_cache(maxsize=2)(_read)


def _load_resolved(
    name: str, folder: Path, stamp: int, options: tuple[tuple[str, Any], ...], rows: tuple[int | None, int | None]
) -> DatasetSplit:
    return _split(name, folder, _read_cached(name, folder, stamp, options), rows)


_load_cached = functools.lru_cache(maxsize=_CACHE_SIZE)(_load_resolved)


def _split(name: str, folder: Path, read: _Raw, rows: tuple[int | None, int | None]) -> DatasetSplit:
    raw, classes, stats = read
    split = make_split(
        train_x=raw.train_x,
        train_y=raw.train_y,
        test_x=raw.test_x,
        test_y=raw.test_y,
        classes=classes,
        name=name,
        max_train=rows[0],
        max_test=rows[1],
        stats=stats,
    )
    log.info("loaded %s from %s: %d train, %d test, shape %s", name, folder, len(split.train), len(split.test), split.train.shape)
    return split


def clear_cache() -> None:
    """Forget every split loaded in this process."""
    _load_cached.cache_clear()
    _read_cached.cache_clear()


def load_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    cache: bool = True,
    max_train: int | None = None,
    max_test: int | None = None,
    **kw: Any,
) -> DatasetSplit:
    """Load dataset ``name`` as a normalised :class:`DatasetSplit`.

    ``root`` (or the environment, see the module docstring) says where the files are;
    ``kw`` are dataset options (``split`` for emnist, ``labels`` for cifar100, ``test_fraction``,
    ``seed``, ``size``, ``mode`` for image_folder). ``max_train``/``max_test`` keep the first
    that many examples of each split, normalised with the whole training set's statistics
    (the same values as in the full split; see :func:`~fedgame.data.make_split`). With
    ``cache=True`` a second call with the same resolved folder, options and sizes returns the
    same object without reading anything, and other sizes are cut from the raw arrays kept
    from the first read.
    """
    spec = _spec(name)
    options = _check_options(name, spec, kw)
    candidates = resolve_roots(name, root)
    files: tuple[str, ...] = ()
    searched: list[str] = []
    for cand, origin in candidates:
        try:
            folder = spec.locate(cand, options)
        except DatasetNotFoundError as e:
            files = e.files
            searched += [f"{s} (from {origin})" if s == str(cand) else s for s in e.searched]
            continue
        folder = folder.resolve()
        key = tuple(sorted(options.items()))
        stamp = folder.stat().st_mtime_ns
        rows = (max_train, max_test)
        if cache:
            return _load_cached(name, folder, stamp, key, rows)
        return _split(name, folder, _read(name, folder, stamp, key, disk=False), rows)
    hint = spec.get_it.replace("{default}", str(_default_root(name)))
    raise DatasetNotFoundError(dataset=name, files=files, searched=searched, hint=hint)
