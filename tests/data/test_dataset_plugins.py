"""Datasets as plug-ins (fedgame.data.datasets): the built-in csv and npz formats on files the
tests write, the contract ``check_dataset`` (and what it refuses), natural partitions, data
given in memory, and one clear line for each bad input."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from fedgame.data import (
    DATASETS,
    Dataset,
    DatasetConfig,
    DatasetSplit,
    as_split,
    natural,
    open_dataset,
    split_from_arrays,
)
from fedgame.testing import check_dataset

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def write_records(path: Path, n: int = 120, seed: int = 0, *, hole: bool = False) -> Path:
    """A CSV of n records: client (a hospital's name), three numeric features, a yes/no outcome."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["hospital", "age", "dose", "marker", "outcome"])
        for i in range(n):
            age, dose, marker = rng.normal(60, 10), rng.uniform(0, 5), rng.normal(0, 1)
            outcome = "yes" if marker + 0.3 * dose > 0.7 else "no"
            w.writerow([f"site-{i % 4}", f"{age:.3f}", "" if hole and i == 7 else f"{dose:.3f}", f"{marker:.3f}", outcome])
    return path


@pytest.fixture
def records(tmp_path: Path) -> Path:
    return write_records(tmp_path / "records.csv")


@pytest.fixture
def restore_datasets() -> object:
    items, docs = dict(DATASETS._items), dict(DATASETS._docs)
    yield None
    DATASETS._items, DATASETS._docs = items, docs


def test_csv_passes_the_contract_with_features_standardised_on_the_training_split(records: Path) -> None:
    split = check_dataset("csv", {"path": str(records), "label": "outcome", "groups": ["hospital"]})
    assert split.kind == "features" and split.train.shape == (3,)
    assert len(split.train) + len(split.test) == 120 and len(split.test) == 24
    np.testing.assert_allclose(split.train.x.mean(0), 0.0, atol=1e-6)
    np.testing.assert_allclose(split.train.x.std(0), 1.0, atol=1e-5)
    assert abs(float(split.test.x.mean())) > 1e-4  # the test split is not standardised on itself
    assert split.classes == 2 and set(np.unique(split.train.y)) == {0, 1}  # "no" → 0, "yes" → 1 (sorted)
    assert sorted(split.groups) == ["hospital"] and set(np.unique(split.groups["hospital"])) == {0, 1, 2, 3}


def test_a_natural_partition_makes_one_client_per_hospital(records: Path) -> None:
    split = open_dataset("csv", {"path": str(records), "label": "outcome", "groups": ["hospital"]}).load()
    parts = natural(split.groups["hospital"])
    assert len(parts) == 4 and sum(p.size for p in parts) == len(split.train)
    for code, p in enumerate(parts):
        assert (split.groups["hospital"][p] == code).all()


def test_natural_refuses_a_wrong_client_count_and_small_groups() -> None:
    with pytest.raises(ValueError, match=r"n_clients: a natural partition has one client per group; the data has 3 groups, got 5"):
        natural(np.array([0, 1, 2, 2]), n_clients=5)
    with pytest.raises(ValueError, match=r"min_size: group 0 has 1 example\(s\), fewer than 2"):
        natural(np.array([0, 1, 1, 2, 2]), min_size=2)


def test_csv_bad_input_is_one_line_naming_the_field(tmp_path: Path, records: Path) -> None:
    holey = write_records(tmp_path / "holey.csv", hole=True)
    with pytest.raises(ValueError, match=r"data.options.features: column 'dose' of the .* split has a missing or non-finite value"):
        open_dataset("csv", {"path": str(holey), "label": "outcome", "groups": ["hospital"]}).load()
    with pytest.raises(ValueError, match=r"data.options.features: column 'hospital' of the training split holds 'site-0', not a number"):
        open_dataset("csv", {"path": str(records), "label": "outcome"}).load()  # the client column left among the features
    with pytest.raises(ValueError, match=r"data.options: column 'client' is not in .*; its columns: hospital, age, dose, marker, outcome"):
        open_dataset("csv", {"path": str(records), "label": "outcome", "groups": ["client"]}).load()
    with pytest.raises(FileNotFoundError, match=r"data.options.path: no such file"):
        open_dataset("csv", {"path": str(tmp_path / "absent.csv"), "label": "outcome"}).load()
    with pytest.raises(Exception, match=r"test_fraction"):
        open_dataset("csv", {"path": str(records), "label": "outcome", "test_fraction": 1.5})


def test_csv_classes_widens_a_file_that_lacks_the_top_labels(records: Path) -> None:
    """``classes: K`` (one silo of a federation may lack the last labels): the split has K
    classes and its labels are unchanged; fewer classes than the labels hold is one line."""
    opts = {"path": str(records), "label": "outcome", "groups": ["hospital"]}
    base = open_dataset("csv", opts).load()
    wide = open_dataset("csv", {**opts, "classes": 4}).load()
    assert (base.classes, wide.classes) == (2, 4) and np.array_equal(base.train.y, wide.train.y)
    with pytest.raises(
        ValueError, match=r"^data.options.classes: column 'outcome' holds 2 classes \(labels 0..1\), more than the 1 given$"
    ):
        open_dataset("csv", {**opts, "classes": 1}).load()


def test_npz_tokens_and_groups(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(1, 50, size=(60, 12))
    x[:, 9:] = 0  # padding
    np.savez(
        tmp_path / "texts.npz",
        x_train=x[:50],
        y_train=rng.integers(0, 3, 50),
        x_test=x[50:],
        y_test=rng.integers(0, 3, 10),
        group_speaker=np.repeat(["ann", "bob", "cy", "di", "ed"], 10),
    )
    split = check_dataset("npz", {"path": "texts.npz"}, root=str(tmp_path))
    assert split.kind == "tokens" and split.train.x.dtype == np.int64 and split.vocab == int(x.max()) + 1
    assert [p.size for p in natural(split.groups["speaker"])] == [10] * 5


class _Overlapping(Dataset):
    """A plug-in whose test split is its first ten training records: declared disjoint."""

    class Config(DatasetConfig):
        kind: Literal["overlapping"] = "overlapping"
        labels_up_to: int = 2

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(40, 4))
        y = rng.integers(0, self.cfg.labels_up_to, 40)  # type: ignore[attr-defined]
        return split_from_arrays(train_x=x, train_y=y, test_x=x[:10], test_y=y[:10], name="overlapping", classes=2)


def test_the_contract_refuses_a_test_split_that_overlaps_the_training_split(restore_datasets: object) -> None:
    DATASETS.register("overlapping")(_Overlapping)
    with pytest.raises(AssertionError, match=r"10 test example\(s\) are identical to training examples"):
        check_dataset("overlapping")
    with pytest.raises(ValueError, match=r"labels must be in \[0, 1\] \(classes = 2\), got range \[0, 4\]"):
        check_dataset("overlapping", {"labels_up_to": 5})


def test_arrays_in_memory_and_bad_arrays() -> None:
    rng = np.random.default_rng(2)
    given = {
        "train": (rng.normal(size=(30, 5)), rng.integers(0, 2, 30)),
        "test": (rng.normal(size=(8, 5)), rng.integers(0, 2, 8)),
        "groups": {"user": rng.choice(["u1", "u2", "u3"], 30)},
    }
    split = as_split(given)
    assert split.kind == "features" and sorted(split.groups) == ["user"]
    assert as_split(given).fingerprint == split.fingerprint  # what a run folder records of the data
    other = {**given, "train": (given["train"][0] + 1e-3, given["train"][1])}
    assert as_split(other).fingerprint != split.fingerprint
    bad = rng.normal(size=(30, 5))
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"memory.train_x: features must be finite, got nan at row 3, feature 2"):
        as_split({"train": (bad, rng.integers(0, 2, 30)), "test": (bad[:5], rng.integers(0, 2, 5))})
    with pytest.raises(ValueError, match=r"data: a mapping needs keys train and test"):
        as_split({"train": (bad, bad)})


def test_torch_datasets_in_memory() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randint(0, 256, (20, 1, 6, 6), generator=g, dtype=torch.uint8), torch.randint(0, 3, (20,), generator=g))
    test = TensorDataset(torch.randint(0, 256, (6, 1, 6, 6), generator=g, dtype=torch.uint8), torch.randint(0, 3, (6,), generator=g))
    split = as_split((train, test))
    assert split.kind == "image" and split.train.x.dtype == np.float32 and split.train.shape == (1, 6, 6)
    assert abs(float(split.train.x.mean())) < 1e-5  # standardised per channel on the training split


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_the_builtin_fashion_mnist_passes_the_same_contract() -> None:
    split = check_dataset("fashion_mnist")
    assert split.kind == "image" and split.train.shape == (1, 28, 28) and split.classes == 10
