"""Writers of tiny files in the datasets' exact distribution formats, for the reader tests."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np

IDX_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def idx_bytes(arr: np.ndarray) -> bytes:
    """IDX encoding: 0x0000, dtype code, ndim, big-endian uint32 dims, big-endian data."""
    code = IDX_CODES[arr.dtype]
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, arr: np.ndarray, *, gz: bool) -> Path:
    data = idx_bytes(arr)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def mnist_arrays(
    rng: np.random.Generator, n_train: int = 30, n_test: int = 10, h: int = 28, w: int = 28, classes: int = 10
) -> dict[str, np.ndarray]:
    return {
        "train_x": rng.integers(0, 256, (n_train, h, w), dtype=np.uint8),
        "train_y": (np.arange(n_train) % classes).astype(np.uint8),
        "test_x": rng.integers(0, 256, (n_test, h, w), dtype=np.uint8),
        "test_y": (np.arange(n_test) % classes).astype(np.uint8),
    }


def write_mnist_dir(folder: Path, arrays: dict[str, np.ndarray], *, prefix: str = "", gz: bool = True, test_word: str = "t10k") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(folder / f"{prefix}train-images-idx3-ubyte", arrays["train_x"], gz=gz)
    write_idx(folder / f"{prefix}train-labels-idx1-ubyte", arrays["train_y"], gz=gz)
    write_idx(folder / f"{prefix}{test_word}-images-idx3-ubyte", arrays["test_x"], gz=gz)
    write_idx(folder / f"{prefix}{test_word}-labels-idx1-ubyte", arrays["test_y"], gz=gz)
    return folder


def write_cifar10(folder: Path, rng: np.random.Generator, per_batch: int = 6, n_test: int = 7) -> dict[str, np.ndarray]:
    """``cifar-10-batches-py``: five training batches and ``test_batch`` (protocol-2 pickles, bytes keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump(
                {
                    b"batch_label": f"training batch {i} of 5".encode(),
                    b"labels": labels,
                    b"data": data,
                    b"filenames": [b"x.png"] * per_batch,
                },
                f,
                protocol=2,
            )
        xs.append(data)
        ys.append(labels)
    tdata = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    tlabels = [int(v) for v in rng.integers(0, 10, n_test)]
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(
            {b"batch_label": b"testing batch 1 of 1", b"labels": tlabels, b"data": tdata, b"filenames": [b"t.png"] * n_test}, f, protocol=2
        )
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane"] * 10}, protocol=2))
    return {"train_x": np.concatenate(xs), "train_y": np.concatenate(ys), "test_x": tdata, "test_y": np.array(tlabels)}


def write_cifar100(folder: Path, rng: np.random.Generator, n_train: int = 20, n_test: int = 8) -> dict[str, np.ndarray]:
    """``cifar-100-python``: ``train`` and ``test`` with ``b"fine_labels"`` and ``b"coarse_labels"``."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, np.ndarray] = {}
    for name, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(v) for v in rng.integers(0, 100, n)]
        coarse = [v // 5 for v in fine]
        with open(folder / name, "wb") as f:
            pickle.dump(
                {
                    b"filenames": [b"a.png"] * n,
                    b"batch_label": name.encode(),
                    b"fine_labels": fine,
                    b"coarse_labels": coarse,
                    b"data": data,
                },
                f,
                protocol=2,
            )
        out[f"{name}_x"], out[f"{name}_fine"], out[f"{name}_coarse"] = data, np.array(fine), np.array(coarse)
    return out


def write_svhn(folder: Path, rng: np.random.Generator, n_train: int = 12, n_test: int = 5) -> dict[str, np.ndarray]:
    """``train_32x32.mat``/``test_32x32.mat``: X (32, 32, 3, N) uint8, y (N, 1) in 1..10 (10 = digit 0)."""
    from scipy.io import savemat

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, np.ndarray] = {}
    for name, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = (np.arange(n) % 10 + 1).astype(np.uint8).reshape(n, 1)  # 1..10
        savemat(str(folder / f"{name}_32x32.mat"), {"X": x, "y": y})
        out[f"{name}_X"], out[f"{name}_y"] = x, y
    return out
