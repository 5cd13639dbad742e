"""Readers on tiny files written in each dataset's exact distribution format."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedgame.data import DatasetFormatError, DatasetNotFoundError, read_idx
from fedgame.data.readers import (
    read_cifar10,
    read_cifar100,
    read_emnist,
    read_fashion_mnist,
    read_image_folder,
    read_image_folder_split,
    read_mnist,
    read_svhn,
)
from tests.data._formats import idx_bytes, mnist_arrays, write_cifar10, write_cifar100, write_idx, write_mnist_dir, write_svhn


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# -- IDX ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [True, False])
def test_idx_images_and_labels_roundtrip(tmp_path: Path, rng: np.random.Generator, gz: bool) -> None:
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    pi = write_idx(tmp_path / "train-images-idx3-ubyte", images, gz=gz)
    pl = write_idx(tmp_path / "train-labels-idx1-ubyte", labels, gz=gz)
    assert pi.name.endswith(".gz") == gz
    # the header really is the MNIST one: magic 2051 for images, 2049 for labels
    raw = gzip.decompress(pi.read_bytes()) if gz else pi.read_bytes()
    assert struct.unpack(">IIII", raw[:16]) == (2051, 5, 28, 28)
    got_i, got_l = read_idx(pi), read_idx(pl)
    assert got_i.dtype == np.uint8 and got_i.shape == (5, 28, 28)
    np.testing.assert_array_equal(got_i, images)
    assert got_l.shape == (5,)
    np.testing.assert_array_equal(got_l, labels)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_other_dtypes_come_back_native_endian(tmp_path: Path, dtype: type) -> None:
    a: np.ndarray = (np.arange(24).reshape(2, 3, 4) - 7).astype(dtype)
    p = write_idx(tmp_path / "a.idx", a, gz=False)
    got = read_idx(p)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(got, a)


def test_idx_bad_magic_is_named(tmp_path: Path) -> None:
    p = tmp_path / "bad-idx3-ubyte"
    p.write_bytes(b"\x12\x34\x08\x03" + b"\x00" * 12)
    with pytest.raises(DatasetFormatError, match=r"bad IDX magic number 0x12340803.*first two bytes must be 0x0000") as e:
        read_idx(p)
    assert str(p) in str(e.value)


def test_idx_unknown_dtype_code(tmp_path: Path) -> None:
    p = tmp_path / "x"
    p.write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DatasetFormatError, match=r"unknown IDX dtype code 0x07; allowed: 0x08"):
        read_idx(p)


@pytest.mark.parametrize("gz", [True, False])
def test_idx_truncated_data(tmp_path: Path, gz: bool) -> None:
    data = idx_bytes(np.zeros((4, 28, 28), dtype=np.uint8))[:-100]
    p = tmp_path / ("t.gz" if gz else "t")
    p.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(
        DatasetFormatError, match=r"IDX data truncated: shape \(4, 28, 28\) of uint8 needs 3136 bytes after the header, found 3036"
    ):
        read_idx(p)


def test_idx_truncated_header_and_gzip(tmp_path: Path) -> None:
    p = tmp_path / "h"
    p.write_bytes(b"\x00\x00\x08\x03" + struct.pack(">I", 10))
    with pytest.raises(DatasetFormatError, match=r"truncated IDX header: 3 dimensions need 16 bytes, file has 8"):
        read_idx(p)
    g = tmp_path / "g.gz"
    g.write_bytes(gzip.compress(idx_bytes(np.zeros((50, 28, 28), dtype=np.uint8)))[:-40])
    with pytest.raises(DatasetFormatError, match=r"gzip stream is truncated"):
        read_idx(g)


def test_idx_trailing_bytes(tmp_path: Path) -> None:
    p = tmp_path / "t"
    p.write_bytes(idx_bytes(np.zeros(3, dtype=np.uint8)) + b"\x01")
    with pytest.raises(DatasetFormatError, match="trailing bytes"):
        read_idx(p)


# -- MNIST-style folders -----------------------------------------------------------------------
@pytest.mark.parametrize("gz", [True, False])
def test_mnist_folder_and_its_parent(tmp_path: Path, rng: np.random.Generator, gz: bool) -> None:
    arr = mnist_arrays(rng)
    write_mnist_dir(tmp_path / "fashion-mnist", arr, gz=gz)
    for root in (tmp_path / "fashion-mnist", tmp_path):
        raw = read_fashion_mnist(root)
        assert raw.train_x.shape == (30, 1, 28, 28) and raw.train_x.dtype == np.uint8
        assert raw.test_x.shape == (10, 1, 28, 28)
        assert raw.train_y.dtype == np.int64
        np.testing.assert_array_equal(raw.train_x[:, 0], arr["train_x"])
        np.testing.assert_array_equal(raw.test_y, arr["test_y"])


def test_mnist_label_count_mismatch(tmp_path: Path, rng: np.random.Generator) -> None:
    arr = mnist_arrays(rng)
    arr["train_y"] = arr["train_y"][:-1]
    write_mnist_dir(tmp_path, arr)
    with pytest.raises(DatasetFormatError, match=r"has 29 labels but the matching images file has 30 images"):
        read_mnist(tmp_path)


def test_mnist_missing_names_files_and_folders(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as e:
        read_mnist(tmp_path)
    msg = str(e.value)
    assert "train-images-idx3-ubyte[.gz]" in msg and "t10k-labels-idx1-ubyte[.gz]" in msg
    assert str(tmp_path) in msg and str(tmp_path / "mnist") in msg


def test_emnist_images_are_transposed_back(tmp_path: Path, rng: np.random.Generator) -> None:
    arr = mnist_arrays(rng, n_train=8, n_test=4, classes=62)
    stored = {k: (v.transpose(0, 2, 1).copy() if k.endswith("_x") else v) for k, v in arr.items()}
    write_mnist_dir(tmp_path / "gzip", stored, prefix="emnist-byclass-", test_word="test")
    raw = read_emnist(tmp_path)  # the parent of NIST's gzip/ folder
    np.testing.assert_array_equal(raw.train_x[:, 0], arr["train_x"])  # upright again
    np.testing.assert_array_equal(raw.test_x[:, 0], arr["test_x"])
    np.testing.assert_array_equal(raw.train_y, arr["train_y"])


def test_emnist_letters_are_shifted_to_zero(tmp_path: Path, rng: np.random.Generator) -> None:
    arr = mnist_arrays(rng, n_train=26, n_test=5, classes=26)
    arr["train_y"] = arr["train_y"] + 1  # stored 1..26
    arr["test_y"] = arr["test_y"] + 1
    write_mnist_dir(tmp_path, arr, prefix="emnist-letters-", test_word="test", gz=False)
    raw = read_emnist(tmp_path, split="letters")
    assert raw.train_y.min() == 0 and raw.train_y.max() == 25
    with pytest.raises(ValueError, match=r"emnist.split: must be one of byclass, .*got 'nope'"):
        read_emnist(tmp_path, split="nope")


# -- CIFAR -------------------------------------------------------------------------------------
def test_cifar10_batches(tmp_path: Path, rng: np.random.Generator) -> None:
    exp = write_cifar10(tmp_path / "cifar-10-batches-py", rng)
    for root in (tmp_path, tmp_path / "cifar-10-batches-py"):
        raw = read_cifar10(root)
        assert raw.train_x.shape == (30, 3, 32, 32) and raw.train_x.dtype == np.uint8
        assert raw.test_x.shape == (7, 3, 32, 32)
        # channel-major rows: the first 1024 bytes are the red plane, row by row
        np.testing.assert_array_equal(raw.train_x[0, 0].reshape(-1), exp["train_x"][0, :1024])
        np.testing.assert_array_equal(raw.train_x[3, 2, 31], exp["train_x"][3, 2048 + 31 * 32 : 2048 + 32 * 32])
        np.testing.assert_array_equal(raw.train_y, exp["train_y"])
        np.testing.assert_array_equal(raw.test_y, exp["test_y"])
        assert raw.train_y.dtype == np.int64


def test_cifar_pickles_from_numpy1_are_read(tmp_path: Path, rng: np.random.Generator) -> None:
    """The distributed files were written by old numpy: arrays refer to numpy.core.multiarray."""
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder, rng)
    for f in folder.iterdir():
        b = f.read_bytes()
        f.write_bytes(b.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    assert b"numpy.core.multiarray" in (folder / "test_batch").read_bytes()
    assert read_cifar10(tmp_path).test_x.shape == (7, 3, 32, 32)


def test_cifar_pickle_cannot_run_code(tmp_path: Path, rng: np.random.Generator) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder, rng)

    class Evil:
        def __reduce__(self) -> tuple[object, ...]:
            return (print, ("pwned",))

    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(DatasetFormatError, match=r"test_batch: not a readable CIFAR python batch.*refusing to load .*print"):
        read_cifar10(folder)


def test_cifar10_bad_shape(tmp_path: Path, rng: np.random.Generator) -> None:
    folder = tmp_path / "c"
    write_cifar10(folder, rng)
    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f, protocol=2)
    with pytest.raises(DatasetFormatError, match=r"data_batch_2: b'data' must be uint8 \(N, 3072\), got uint8 \(2, 100\)"):
        read_cifar10(folder)


def test_cifar100_fine_and_coarse(tmp_path: Path, rng: np.random.Generator) -> None:
    exp = write_cifar100(tmp_path / "cifar-100-python", rng)
    raw = read_cifar100(tmp_path)
    assert raw.train_x.shape == (20, 3, 32, 32) and raw.test_x.shape == (8, 3, 32, 32)
    np.testing.assert_array_equal(raw.train_x.reshape(20, -1), exp["train_x"])
    np.testing.assert_array_equal(raw.train_y, exp["train_fine"])
    np.testing.assert_array_equal(raw.test_y, exp["test_fine"])
    coarse = read_cifar100(tmp_path / "cifar-100-python", labels="coarse")
    np.testing.assert_array_equal(coarse.train_y, exp["train_coarse"])
    with pytest.raises(ValueError, match=r"cifar100.labels: must be 'fine' or 'coarse', got 'x'"):
        read_cifar100(tmp_path, labels="x")


# -- SVHN --------------------------------------------------------------------------------------
def test_svhn_mat(tmp_path: Path, rng: np.random.Generator) -> None:
    exp = write_svhn(tmp_path / "svhn", rng)
    for root in (tmp_path, tmp_path / "svhn"):
        raw = read_svhn(root)
        assert raw.train_x.shape == (12, 3, 32, 32) and raw.train_x.dtype == np.uint8
        assert raw.test_x.shape == (5, 3, 32, 32)
        # pixel (row 4, col 7, channel 2) of image 3
        assert raw.train_x[3, 2, 4, 7] == exp["train_X"][4, 7, 2, 3]
        np.testing.assert_array_equal(raw.train_x[5], exp["train_X"][..., 5].transpose(2, 0, 1))
        stored = exp["train_y"].ravel()
        np.testing.assert_array_equal(raw.train_y, np.where(stored == 10, 0, stored))
        assert 0 in raw.train_y and 10 not in raw.train_y and raw.train_y.dtype == np.int64


def test_svhn_not_a_mat_file(tmp_path: Path) -> None:
    (tmp_path / "train_32x32.mat").write_bytes(b"not matlab at all" * 10)
    (tmp_path / "test_32x32.mat").write_bytes(b"x")
    with pytest.raises(DatasetFormatError, match=r"train_32x32.mat: not a readable MATLAB file"):
        read_svhn(tmp_path)


# -- image folder ------------------------------------------------------------------------------
def _png(path: Path, arr: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def test_image_folder_grey_and_rgb(tmp_path: Path, rng: np.random.Generator) -> None:
    pytest.importorskip("PIL")
    grey = {"cat": [rng.integers(0, 256, (6, 5), dtype=np.uint8) for _ in range(2)], "ant": [rng.integers(0, 256, (6, 5), dtype=np.uint8)]}
    for cls, imgs in grey.items():
        for i, a in enumerate(imgs):
            _png(tmp_path / "g" / cls / f"{i}.png", a)
    x, y, names = read_image_folder(tmp_path / "g")
    assert names == ["ant", "cat"]  # sorted by name
    assert x.shape == (3, 1, 6, 5) and x.dtype == np.uint8
    np.testing.assert_array_equal(y, [0, 1, 1])
    np.testing.assert_array_equal(x[0, 0], grey["ant"][0])
    np.testing.assert_array_equal(x[2, 0], grey["cat"][1])

    rgb = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    _png(tmp_path / "c" / "a" / "x.png", rgb)
    _png(tmp_path / "c" / "b" / "y.png", rng.integers(0, 256, (4, 4), dtype=np.uint8))
    x, y, names = read_image_folder(tmp_path / "c")
    assert x.shape == (2, 3, 4, 4)  # one colour image makes the folder RGB
    np.testing.assert_array_equal(x[0], rgb.transpose(2, 0, 1))
    x, _, _ = read_image_folder(tmp_path / "c", size=(2, 3), mode="L")
    assert x.shape == (2, 1, 2, 3)


def test_image_folder_size_mismatch_and_pillow_message(tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PIL")
    _png(tmp_path / "a" / "1.png", rng.integers(0, 256, (4, 4), dtype=np.uint8))
    _png(tmp_path / "a" / "2.png", rng.integers(0, 256, (5, 4), dtype=np.uint8))
    with pytest.raises(DatasetFormatError, match=r"2.png: image is 5x4 but .*1.png is 4x4; pass size=\(height, width\)"):
        read_image_folder(tmp_path)
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match="pip install pillow"):
        read_image_folder(tmp_path)


def test_image_folder_split(tmp_path: Path, rng: np.random.Generator) -> None:
    pytest.importorskip("PIL")
    for cls in ("a", "b"):
        for i in range(5):
            _png(tmp_path / "flat" / cls / f"{i}.png", rng.integers(0, 256, (3, 3), dtype=np.uint8))
    raw, names = read_image_folder_split(tmp_path / "flat", test_fraction=0.2, seed=3)
    assert names == ["a", "b"] and len(raw.train_y) == 8 and len(raw.test_y) == 2
    assert sorted(raw.test_y.tolist()) == [0, 1]  # stratified
    again, _ = read_image_folder_split(tmp_path / "flat", test_fraction=0.2, seed=3)
    np.testing.assert_array_equal(raw.test_x, again.test_x)
    # explicit train/ and test/ folders are used as given, with the training class list
    for i in range(2):
        _png(tmp_path / "tt" / "train" / "x" / f"{i}.png", rng.integers(0, 256, (3, 3), dtype=np.uint8))
        _png(tmp_path / "tt" / "train" / "y" / f"{i}.png", rng.integers(0, 256, (3, 3), dtype=np.uint8))
    _png(tmp_path / "tt" / "test" / "y" / "0.png", rng.integers(0, 256, (3, 3), dtype=np.uint8))
    raw, names = read_image_folder_split(tmp_path / "tt")
    assert names == ["x", "y"] and raw.train_x.shape == (4, 1, 3, 3)
    np.testing.assert_array_equal(raw.test_y, [1])
    with pytest.raises(ValueError, match=r"image_folder.test_fraction: must be in \(0, 1\), got 1.5"):
        read_image_folder_split(tmp_path / "flat", test_fraction=1.5)
