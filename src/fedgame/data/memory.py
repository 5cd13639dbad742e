"""Data given in Python: NumPy arrays, torch ``Dataset``\\ s, Hugging Face ``datasets.Dataset``\\ s.

:func:`as_split` turns what a researcher holds into a :class:`~fedgame.data.DatasetSplit` for
``run_one(cfg, out, data=...)`` (docs/your_data.md). Per-example client ids become the split's
groups, which ``data.partition.kind: natural`` makes one client each; :func:`from_hf` can take
the groups from a `flwr-datasets <https://flower.ai/docs/datasets/>`_ partitioner instead
(IID, Dirichlet, pathological, shard, natural id: the partitioners Flower users split their
data with), so a partition made the Flower way runs through fedgame unchanged.

A run records such data as ``data.dataset: memory`` with the split's fingerprint
(:func:`in_memory_options`); no example is written to the run folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from fedgame.data._arrays import DatasetSplit
from fedgame.data.datasets import DATASETS, Dataset, DatasetConfig, split_from_arrays

__all__ = ["as_split", "from_torch", "from_hf", "in_memory_options", "InMemory"]


def _is_hf(obj: object) -> bool:
    return hasattr(obj, "column_names") and hasattr(obj, "with_format")


def _is_torch_dataset(obj: object) -> bool:
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not isinstance(obj, np.ndarray | tuple | list | Mapping)


def _xy(part: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(part, tuple | list) and len(part) == 2:
        return np.asarray(part[0]), np.asarray(part[1])
    raise ValueError(f"data.{what}: must be a pair (x, y) of arrays, got {type(part).__name__}")


def as_split(data: Any, *, name: str = "memory") -> DatasetSplit:
    """A :class:`DatasetSplit` of ``data``:

    * a :class:`DatasetSplit` (as it is);
    * a mapping ``{"train": (x, y), "test": (x, y), "groups": {"client": ids}}`` of arrays
      (``groups`` optional: one id of any kind per training example);
    * a pair ``(train, test)`` of torch ``Dataset``\\ s yielding ``(x, y)`` (:func:`from_torch`),
      or of Hugging Face ``datasets.Dataset``\\ s with columns ``x`` and ``label``
      (:func:`from_hf` takes other column names, groups and partitioners).

    The kind of example (image, features, tokens) and the normalisation follow from the
    arrays (:func:`~fedgame.data.split_from_arrays`)."""
    if isinstance(data, DatasetSplit):
        return data
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - {"train", "test", "groups", "classes"})
        if unknown or "train" not in data or "test" not in data:
            raise ValueError(f"data: a mapping needs keys train and test (and optional groups, classes), got {sorted(data)}")
        (tx, ty), (ex, ey) = _xy(data["train"], "train"), _xy(data["test"], "test")
        return split_from_arrays(
            train_x=tx, train_y=ty, test_x=ex, test_y=ey, name=name, classes=data.get("classes"), groups=data.get("groups")
        )
    if isinstance(data, tuple | list) and len(data) == 2:
        train, test = data
        if _is_hf(train) and _is_hf(test):
            return from_hf(train, test, name=name)
        if _is_torch_dataset(train) and _is_torch_dataset(test):
            return from_torch(train, test, name=name)
    raise ValueError(
        "data: must be a DatasetSplit, a mapping {train: (x, y), test: (x, y)}, or a pair (train, test) of torch or "
        f"Hugging Face datasets, got {type(data).__name__}"
    )


def _stack(ds: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(x, y)`` of a torch-style dataset, stacked (one pass; tensors become arrays)."""
    xs, ys = [], []
    for i in range(len(ds)):
        item = ds[i]
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise ValueError(f"data.{what}[{i}]: must be a pair (x, y), got {type(item).__name__}")
        x, y = item
        xs.append(np.asarray(x.numpy() if hasattr(x, "numpy") else x))
        ys.append(int(y.item() if hasattr(y, "item") else y))
    if not xs:
        raise ValueError(f"data.{what}: is empty")
    shapes = {a.shape for a in xs}
    if len(shapes) != 1:
        raise ValueError(f"data.{what}: every x must have one shape, got {len(shapes)} different ones (e.g. {sorted(shapes)[:2]})")
    return np.stack(xs), np.asarray(ys, dtype=np.int64)


def from_torch(train: Any, test: Any, *, name: str = "memory", groups: Mapping[str, Sequence[Any]] | None = None) -> DatasetSplit:
    """A split of two torch ``Dataset``\\ s whose items are ``(x, y)``: ``x`` an image
    (uint8 or already-normalised float ``(C, H, W)``), a feature vector or token ids, ``y`` a
    class index. ``groups``: name → one id per training item."""
    tx, ty = _stack(train, "train")
    ex, ey = _stack(test, "test")
    return split_from_arrays(train_x=tx, train_y=ty, test_x=ex, test_y=ey, name=name, groups=dict(groups or {}))


def _hf_columns(ds: Any, columns: str | Sequence[str], what: str) -> np.ndarray:
    cols = [columns] if isinstance(columns, str) else list(columns)
    missing = [c for c in cols if c not in ds.column_names]
    if missing:
        raise ValueError(f"{what}: column {missing[0]!r} is not in the dataset; its columns: {', '.join(ds.column_names)}")
    arrays = [np.asarray(ds.with_format("numpy")[c]) for c in cols]
    if len(arrays) == 1:
        return arrays[0]
    return np.stack([a.astype(np.float64) for a in arrays], axis=1)  # several scalar columns: one feature each


def from_hf(
    train: Any,
    test: Any,
    *,
    x: str | Sequence[str] = "x",
    label: str = "label",
    groups: Sequence[str] = (),
    partitioner: Any = None,
    name: str = "memory",
) -> DatasetSplit:
    """A split of two Hugging Face ``datasets.Dataset``\\ s (the ``hf`` extra).

    ``x``: the column of the examples (an image array, a feature vector or token ids) or a list
    of scalar columns (one feature each); ``label``: the class column (integers); ``groups``:
    columns kept as per-example group ids (a natural partition's clients). ``partitioner``: a
    ``flwr_datasets.partitioner.Partitioner`` (e.g. ``DirichletPartitioner(num_partitions=10,
    partition_by="label", alpha=0.5, seed=42)``) applied to ``train``: its partitions become the
    grouping ``"partition"``, so ``data.partition: {kind: natural, column: partition}`` runs
    exactly the clients flwr-datasets drew."""
    if not (_is_hf(train) and _is_hf(test)):
        raise ValueError("data: from_hf needs two datasets.Dataset objects (pip install 'fedgame[hf]')")
    tx, ty = _hf_columns(train, x, "data.x"), _hf_columns(train, label, "data.label")
    ex, ey = _hf_columns(test, x, "data.x"), _hf_columns(test, label, "data.label")
    kept: dict[str, Any] = {g: _hf_columns(train, g, "data.groups") for g in groups}
    if partitioner is not None:
        kept["partition"] = _partition_codes(train, partitioner)
    return split_from_arrays(train_x=tx, train_y=ty, test_x=ex, test_y=ey, name=name, groups=kept)


_INDEX = "__fedgame_index"


def _partition_codes(train: Any, partitioner: Any) -> np.ndarray:
    """Which of ``partitioner``'s partitions each training example fell in, read through its
    public API (an index column added to the data, then ``load_partition(i)`` for every i)."""
    partitioner.dataset = train.add_column(_INDEX, np.arange(len(train)))
    codes = np.full(len(train), -1, dtype=np.int64)
    for i in range(int(partitioner.num_partitions)):
        idx = np.asarray(partitioner.load_partition(i)[_INDEX], dtype=np.int64)
        if (codes[idx] >= 0).any():
            raise ValueError(f"data.partitioner: partition {i} shares examples with another; fedgame's clients hold disjoint data")
        codes[idx] = i
    left = int((codes < 0).sum())
    if left:
        raise ValueError(f"data.partitioner: {left} training example(s) are in no partition; give every example to a client")
    return codes


def in_memory_options(split: DatasetSplit) -> dict[str, Any]:
    """What a run folder records of data given in memory: its name and fingerprint."""
    return {"name": split.name, "fingerprint": split.fingerprint}


@DATASETS.register("memory")
class InMemory(Dataset):
    """Data given in Python to run_one(cfg, out, data=...): recorded by fingerprint, never copied."""

    class Config(DatasetConfig):
        kind: Literal["memory"] = "memory"
        name: str = "memory"
        fingerprint: str | None = None

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        raise ValueError(
            "data.dataset: 'memory' is data given in Python (fedgame.run_one(cfg, out, data=...)); "
            "a run from files names a file dataset instead (csv, npz, image_folder, ...: fedgame list datasets)"
        )
