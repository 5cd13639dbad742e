"""Loading by name: root resolution, normalisation, the cache, errors, real Fashion-MNIST."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedgame.data import (
    DatasetNotFoundError,
    clear_cache,
    dataset_info,
    describe_datasets,
    list_datasets,
    load_dataset,
    make_split,
    resolve_roots,
)
from fedgame.data.readers import read_cifar10
from tests.data._formats import mnist_arrays, write_cifar10, write_cifar100, write_mnist_dir, write_svhn

FMNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    import os

    for k in list(os.environ):
        if k.startswith("FEDGAME_DATA"):
            monkeypatch.delenv(k)
    monkeypatch.delenv("FEDGAME_CACHE", raising=False)  # the dataset cache goes under the test's HOME
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_list_and_info() -> None:
    assert list_datasets() == ["cifar10", "cifar100", "emnist", "fashion_mnist", "image_folder", "mnist", "svhn"]
    fm = dataset_info("fashion_mnist")
    assert (fm.shape, fm.classes, fm.train_size, fm.test_size) == ((1, 28, 28), 10, 60000, 10000)
    assert fm.env_var == "FEDGAME_DATA_FASHION_MNIST" and fm.default_root == FMNIST
    assert dataset_info("emnist").classes == 62 and dataset_info("cifar100").classes == 100
    assert describe_datasets()["cifar10"].startswith("3×32×32, 10 classes, 50000/10000")
    with pytest.raises(ValueError, match=r"dataset: unknown name 'imagenet'; known: cifar10, cifar100, emnist, fashion_mnist"):
        dataset_info("imagenet")
    with pytest.raises(ValueError, match="unknown name 'nope'"):
        load_dataset("nope")


def test_explicit_root_env_var_data_root_and_default(tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    arr = mnist_arrays(rng)
    a = write_mnist_dir(tmp_path / "a", arr)
    write_mnist_dir(tmp_path / "b" / "mnist", arr)  # parent folder layout
    c = write_mnist_dir(tmp_path / "c" / "mnist", arr)
    d = write_mnist_dir(tmp_path / "home" / ".cache" / "fedgame" / "data" / "mnist", arr)
    assert resolve_roots("mnist") == [(d, "default")]
    assert load_dataset("mnist").train.x.shape == (30, 1, 28, 28)
    monkeypatch.setenv("FEDGAME_DATA_ROOT", str(tmp_path / "c"))
    assert [r for r, _ in resolve_roots("mnist")] == [c, d]
    monkeypatch.setenv("FEDGAME_DATA_MNIST", str(tmp_path / "b"))
    assert resolve_roots("mnist") == [(tmp_path / "b", "$FEDGAME_DATA_MNIST")]
    assert len(load_dataset("mnist").train) == 30
    assert resolve_roots("mnist", a) == [(a, "root argument")]
    assert load_dataset("mnist", root=str(a)).test.x.shape == (10, 1, 28, 28)


def test_data_root_falls_back_to_default(tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    write_mnist_dir(tmp_path / "home" / ".cache" / "fedgame" / "data" / "mnist", mnist_arrays(rng))
    monkeypatch.setenv("FEDGAME_DATA_ROOT", str(tmp_path / "empty"))
    assert len(load_dataset("mnist").train) == 30


def test_explicit_root_is_authoritative(tmp_path: Path, rng: np.random.Generator) -> None:
    write_mnist_dir(tmp_path / "home" / ".cache" / "fedgame" / "data" / "mnist", mnist_arrays(rng))
    with pytest.raises(DatasetNotFoundError, match="from root argument"):
        load_dataset("mnist", root=tmp_path / "wrong")


def test_missing_dataset_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_DATA_FASHION_MNIST", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetNotFoundError) as e:
        load_dataset("fashion_mnist")
    msg = str(e.value)
    assert isinstance(e.value, FileNotFoundError)
    for f in ("train-images-idx3-ubyte[.gz]", "train-labels-idx1-ubyte[.gz]", "t10k-images-idx3-ubyte[.gz]", "t10k-labels-idx1-ubyte[.gz]"):
        assert f in msg
    assert str(tmp_path / "nowhere") in msg and "$FEDGAME_DATA_FASHION_MNIST" in msg
    assert "sudo apt-get install dataset-fashion-mnist" in msg and "FEDGAME_DATA_FASHION_MNIST=" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__ is False

    with pytest.raises(DatasetNotFoundError) as e2:
        load_dataset("cifar10")
    msg = str(e2.value)
    default = tmp_path / "home" / ".cache" / "fedgame" / "data" / "cifar10"
    assert "data_batch_1" in msg and "test_batch" in msg and str(default) in msg
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg and "FEDGAME_DATA_CIFAR10" in msg
    assert f"-C {default}`" in msg  # the hint names the real default folder
    with pytest.raises(DatasetNotFoundError, match=r"(?s)train_32x32.mat.*ufldl.stanford.edu.*FEDGAME_DATA_SVHN"):
        load_dataset("svhn")


def test_unknown_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"load_dataset\('cifar100'\): unknown option\(s\) split; allowed: labels"):
        load_dataset("cifar100", root=tmp_path, split="x")


def test_normalised_with_training_statistics(tmp_path: Path, rng: np.random.Generator) -> None:
    write_cifar10(tmp_path / "cifar-10-batches-py", rng)
    s = load_dataset("cifar10", root=tmp_path)
    assert s.train.x.dtype == np.float32 and s.train.y.dtype == np.int64 and s.train.classes == 10
    assert s.name == "cifar10" and len(s.mean) == len(s.std) == 3
    np.testing.assert_allclose(s.train.x.mean(axis=(0, 2, 3)), 0.0, atol=1e-5)
    np.testing.assert_allclose(s.train.x.std(axis=(0, 2, 3)), 1.0, atol=1e-5)
    raw = read_cifar10(tmp_path)
    m = raw.train_x.astype(np.float64).mean(axis=(0, 2, 3)) / 255
    sd = raw.train_x.astype(np.float64).std(axis=(0, 2, 3)) / 255
    np.testing.assert_allclose(s.mean, m, rtol=1e-12)
    np.testing.assert_allclose(s.std, sd, rtol=1e-12)
    # the test set uses the training statistics, not its own
    expect = ((raw.test_x / 255.0) - m[None, :, None, None]) / sd[None, :, None, None]
    np.testing.assert_allclose(s.test.x, expect, rtol=1e-5, atol=1e-5)
    assert not s.train.x.flags.writeable  # shared through the cache


def test_make_split_validates() -> None:
    x = np.zeros((2, 1, 2, 2), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"toy.train_x: must be a uint8 array \(N, C, H, W\), got dtype float64"):
        make_split(train_x=x.astype(float), train_y=np.array([0, 1]), test_x=x, test_y=np.array([0, 1]), classes=2, name="toy")
    with pytest.raises(ValueError, match=r"toy.y: labels must be in \[0, 1\], got range \[0, 5\]"):
        make_split(train_x=x, train_y=np.array([0, 5]), test_x=x, test_y=np.array([0, 1]), classes=2, name="toy")
    s = make_split(train_x=x, train_y=np.array([0, 1]), test_x=x, test_y=np.array([1, 1]), classes=2, name="toy")
    assert s.std == (0.0,) and np.all(s.train.x == 0)  # a constant channel is centred, not divided by 0


def test_cache_returns_same_object(tmp_path: Path, rng: np.random.Generator) -> None:
    write_mnist_dir(tmp_path / "mnist", mnist_arrays(rng))
    a = load_dataset("mnist", root=tmp_path / "mnist")
    assert load_dataset("mnist", root=tmp_path) is a  # parent folder resolves to the same path
    assert load_dataset("mnist", root=tmp_path / "mnist", cache=False) is not a
    clear_cache()
    assert load_dataset("mnist", root=tmp_path / "mnist") is not a


def test_other_formats_through_the_catalog(tmp_path: Path, rng: np.random.Generator) -> None:
    write_cifar100(tmp_path / "c100" / "cifar-100-python", rng)
    s = load_dataset("cifar100", root=tmp_path / "c100")
    assert s.train.classes == 100 and s.train.x.shape == (20, 3, 32, 32)
    assert load_dataset("cifar100", root=tmp_path / "c100", labels="coarse").train.classes == 20
    write_svhn(tmp_path / "svhn", rng)
    s = load_dataset("svhn", root=tmp_path / "svhn")
    assert s.train.x.shape == (12, 3, 32, 32) and s.test.y.max() <= 9
    arr = mnist_arrays(rng, n_train=20, n_test=4, classes=47)
    write_mnist_dir(tmp_path / "e" / "gzip", arr, prefix="emnist-balanced-", test_word="test")
    s = load_dataset("emnist", root=tmp_path / "e", split="balanced")
    assert s.train.classes == 47 and s.train.x.shape == (20, 1, 28, 28)
    with pytest.raises(DatasetNotFoundError, match="emnist-byclass-train-images-idx3-ubyte"):
        load_dataset("emnist", root=tmp_path / "e")


def test_image_folder_through_the_catalog(tmp_path: Path, rng: np.random.Generator) -> None:
    Image = pytest.importorskip("PIL.Image")
    for cls in ("dog", "cat", "eel"):
        for i in range(4):
            (tmp_path / "imgs" / cls).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (5, 5, 3), dtype=np.uint8)).save(tmp_path / "imgs" / cls / f"{i}.jpg")
    s = load_dataset("image_folder", root=tmp_path / "imgs", test_fraction=0.25, size=[4, 4])
    assert s.train.classes == 3 and s.train.x.shape == (9, 3, 4, 4) and s.test.x.shape == (3, 3, 4, 4)


@pytest.mark.skipif(not FMNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist() -> None:
    s = load_dataset("fashion_mnist")
    assert s.train.x.shape == (60000, 1, 28, 28) and s.test.x.shape == (10000, 1, 28, 28)
    assert s.train.classes == 10 and s.train.x.dtype == np.float32
    np.testing.assert_array_equal(np.bincount(s.train.y), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(s.test.y), [1000] * 10)
    assert s.mean[0] == pytest.approx(0.2860, abs=1e-4) and s.std[0] == pytest.approx(0.3530, abs=1e-4)
    assert abs(float(s.train.x.mean())) < 1e-4
    assert load_dataset("fashion_mnist") is s  # cached: free the second time


@pytest.mark.parametrize("gz", [True, False], ids=["gz", "raw"])
def test_mnist_idx_files_through_load_dataset(tmp_path: Path, rng: np.random.Generator, gz: bool) -> None:
    """PHS §5.1: MNIST as IDX files (the distributed .gz and unpacked), loaded by name: shapes
    N×1×28×28, labels as written, pixels = (raw/255 − mean)/std with the training statistics."""
    arr = mnist_arrays(rng, n_train=30, n_test=10)
    write_mnist_dir(tmp_path / "mnist", arr, gz=gz)
    s = load_dataset("mnist", root=tmp_path / "mnist", cache=False)
    assert s.train.classes == 10 and s.train.x.shape == (30, 1, 28, 28) and s.test.x.shape == (10, 1, 28, 28)
    np.testing.assert_array_equal(s.train.y, arr["train_y"])
    np.testing.assert_array_equal(s.test.y, arr["test_y"])
    mean, std = arr["train_x"].mean() / 255.0, arr["train_x"].std() / 255.0
    assert s.mean[0] == pytest.approx(mean, rel=1e-12) and s.std[0] == pytest.approx(std, rel=1e-12)
    np.testing.assert_allclose(s.train.x[:, 0] * std + mean, arr["train_x"] / 255.0, atol=1e-5)
    np.testing.assert_allclose(s.test.x[:, 0] * std + mean, arr["test_x"] / 255.0, atol=1e-5)


def test_cifar10_pickle_batches_through_load_dataset(tmp_path: Path, rng: np.random.Generator) -> None:
    """PHS §5.1: CIFAR-10 as the python pickle batches, loaded by name: the five training batches
    in order, then test_batch; each 3072-byte row is the R, G, B planes of 32×32 (N×3×32×32)."""
    exp = write_cifar10(tmp_path / "cifar-10-batches-py", rng, per_batch=4, n_test=3)
    s = load_dataset("cifar10", root=tmp_path, cache=False)
    assert s.train.classes == 10 and s.train.x.shape == (20, 3, 32, 32) and s.test.x.shape == (3, 3, 32, 32)
    np.testing.assert_array_equal(s.train.y, exp["train_y"])
    np.testing.assert_array_equal(s.test.y, exp["test_y"])
    mean, std = np.array(s.mean)[None, :, None, None], np.array(s.std)[None, :, None, None]
    np.testing.assert_allclose(s.train.x * std + mean, exp["train_x"].reshape(20, 3, 32, 32) / 255.0, atol=1e-5)
    np.testing.assert_allclose(s.test.x * std + mean, exp["test_x"].reshape(3, 3, 32, 32) / 255.0, atol=1e-5)
    # the red plane of example 0 is its first 1024 bytes, row-major
    assert s.train.x[0, 0, 0, 1] * s.std[0] + s.mean[0] == pytest.approx(exp["train_x"][0, 1] / 255.0, abs=1e-5)


def test_a_subset_holds_the_full_splits_values_and_statistics(tmp_path: Path, rng: np.random.Generator) -> None:
    """``max_train``/``max_test`` keep each split's first examples, normalised with the whole
    training set's statistics: bit for bit the rows of the full split; other sizes come from the
    raw arrays already read (the same statistics), and bad sizes name the field."""
    write_cifar10(tmp_path / "cifar-10-batches-py", rng)
    full = load_dataset("cifar10", root=tmp_path)
    part = load_dataset("cifar10", root=tmp_path, max_train=7, max_test=3)
    assert part is not full and (part.mean, part.std) == (full.mean, full.std)
    assert len(part.train) == 7 and len(part.test) == 3
    np.testing.assert_array_equal(part.train.x, full.train.x[:7])
    np.testing.assert_array_equal(part.train.y, full.train.y[:7])
    np.testing.assert_array_equal(part.test.x, full.test.x[:3])
    assert load_dataset("cifar10", root=tmp_path, max_train=7, max_test=3) is part  # cached per size
    assert len(load_dataset("cifar10", root=tmp_path, max_train=10**9).train) == len(full.train)
    with pytest.raises(ValueError, match=r"cifar10.max_train: must be >= 1 or None, got 0"):
        load_dataset("cifar10", root=tmp_path, max_train=0, cache=False)


# -- the dataset cache on disk (fedgame.data._disk_cache) ------------------------------------
def _never_read(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """From now on, reading ``name``'s files fails the test."""
    import dataclasses

    from fedgame.data import catalog

    def boom(folder: Path, kw: object) -> None:
        raise AssertionError(f"the files of {folder} were read")

    monkeypatch.setitem(catalog._SPECS, name, dataclasses.replace(catalog._SPECS[name], read=boom))


def _same(a: object, b: object) -> None:
    for part in ("train", "test"):
        x, y = getattr(a, part), getattr(b, part)
        assert np.array_equal(x.x, y.x) and np.array_equal(x.y, y.y) and x.classes == y.classes
    assert a.mean == b.mean and a.std == b.std  # type: ignore[attr-defined]


def test_a_fresh_load_takes_the_decoded_arrays_from_the_dataset_cache(
    tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first load writes the decoded arrays and the training statistics under
    ``$FEDGAME_CACHE/datasets``; a later one (a new process: the in-process cache cleared) gives
    the same split bit for bit without reading the files, at every max_train."""
    from fedgame.data import _disk_cache
    from fedgame.data._disk_cache import data_cache_dir

    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    write_mnist_dir(tmp_path / "mnist", mnist_arrays(rng, n_train=40, n_test=12))
    assert len(load_dataset("mnist", root=tmp_path / "mnist").train) == 40
    assert not data_cache_dir().exists()  # 40 images: below MIN_BYTES, not worth an entry
    clear_cache()
    monkeypatch.setattr(_disk_cache, "MIN_BYTES", 0)
    files = load_dataset("mnist", root=tmp_path / "mnist", cache=False, max_train=25)
    assert not data_cache_dir().exists()  # cache=False keeps nothing
    first = load_dataset("mnist", root=tmp_path / "mnist", max_train=25)
    assert [p.name for p in data_cache_dir().iterdir()] == [p.name for p in data_cache_dir().glob("mnist-*")] != []
    _same(first, files)
    clear_cache()
    _never_read(monkeypatch, "mnist")
    _same(load_dataset("mnist", root=tmp_path / "mnist", max_train=25), files)
    assert len(load_dataset("mnist", root=tmp_path / "mnist").train) == 40


def test_the_dataset_cache_reads_the_files_again_when_they_change_or_it_is_damaged(
    tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A rewritten file (new size and time) is a new entry: the load holds the new examples. A
    damaged entry is named in a warning, the files are read and the entry is written again."""
    from fedgame.data import _disk_cache
    from fedgame.data._disk_cache import data_cache_dir

    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_disk_cache, "MIN_BYTES", 0)
    folder = write_mnist_dir(tmp_path / "mnist", mnist_arrays(rng, n_train=40, n_test=12))
    assert len(load_dataset("mnist", root=folder).train) == 40
    clear_cache()
    write_mnist_dir(folder, mnist_arrays(rng, n_train=30, n_test=12))
    again = load_dataset("mnist", root=folder)
    assert len(again.train) == 30
    _same(again, load_dataset("mnist", root=folder, cache=False))
    assert len(list(data_cache_dir().glob("mnist-*"))) == 2
    for entry in data_cache_dir().glob("mnist-*"):
        (entry / "train_x.npy").write_bytes(b"not an array")
    clear_cache()
    with caplog.at_level("WARNING", logger="fedgame.data._disk_cache"):
        _same(load_dataset("mnist", root=folder), again)
    assert "could not be read" in caplog.text
    clear_cache()
    _never_read(monkeypatch, "mnist")
    _same(load_dataset("mnist", root=folder), again)  # the entry was written again
