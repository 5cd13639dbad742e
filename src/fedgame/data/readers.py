"""Readers for the standard on-disk formats of the image datasets fedgame uses.

Nothing is downloaded: every reader reads files the user already has, in the exact layout
the dataset's authors distribute, and returns raw ``uint8`` images ``(N, C, H, W)`` plus
integer labels (:class:`RawSplit`); :func:`fedgame.data.make_split` normalises them.

Formats:

* IDX (MNIST, Fashion-MNIST, EMNIST), gzipped or plain: :func:`read_idx`,
  :func:`read_mnist`, :func:`read_fashion_mnist`, :func:`read_emnist`;
* CIFAR-10 / CIFAR-100 "python version" pickles: :func:`read_cifar10`, :func:`read_cifar100`;
* SVHN cropped digits MATLAB files: :func:`read_svhn`;
* a folder of images, one sub-folder per class: :func:`read_image_folder`.

Each dataset reader accepts either the dataset's own folder or its parent (for example both
``root`` and ``root/cifar-10-batches-py``). A missing file raises
:class:`DatasetNotFoundError` naming every file and folder that was looked at; a file that
exists but is malformed raises :class:`DatasetFormatError` naming the file and what is wrong.

CIFAR pickles are read with a restricted unpickler that only reconstructs numpy arrays and
plain containers, so a tampered file cannot run code.
"""

from __future__ import annotations

import logging
import pickle
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "DatasetNotFoundError",
    "DatasetFormatError",
    "RawSplit",
    "EMNIST_SPLITS",
    "find_dataset_dir",
    "read_idx",
    "read_mnist",
    "read_fashion_mnist",
    "read_emnist",
    "read_cifar10",
    "read_cifar100",
    "read_svhn",
    "read_image_folder",
    "read_image_folder_split",
]

log = logging.getLogger(__name__)


# -- errors ----------------------------------------------------------------------------------
class DatasetNotFoundError(FileNotFoundError):
    """The files of a dataset are not where they were looked for.

    ``files`` are the file names that were required, ``searched`` the folders that were
    examined, ``hint`` how to obtain the data (may be empty).
    """

    def __init__(self, *, dataset: str, files: Sequence[str], searched: Sequence[str], hint: str = "") -> None:
        self.dataset = dataset
        self.files = tuple(files)
        self.searched = tuple(searched)
        self.hint = hint
        msg = f"dataset {dataset!r} not found: looked for {', '.join(self.files)} in " + "; ".join(self.searched) + "."
        if hint:
            msg += "\n" + hint
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:  # keep picklable despite keyword-only __init__
        return (_rebuild_not_found, (self.dataset, self.files, self.searched, self.hint))


def _rebuild_not_found(dataset: str, files: Sequence[str], searched: Sequence[str], hint: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(dataset=dataset, files=files, searched=searched, hint=hint)


class DatasetFormatError(ValueError):
    """A dataset file exists but is not in the expected format (bad magic, truncated, ...)."""


class RawSplit(NamedTuple):
    """Raw arrays as stored on disk: images ``uint8 (N, C, H, W)``, labels ``int64 (N,)``."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


# -- locating files --------------------------------------------------------------------------
def _present(folder: Path, name: str, *, gz: bool) -> Path | None:
    p = folder / name
    if p.is_file():
        return p
    if gz and (folder / (name + ".gz")).is_file():
        return folder / (name + ".gz")
    return None


def find_dataset_dir(root: str | Path, *, dataset: str, files: Sequence[str], subdirs: Sequence[str] = (), gz: bool = False) -> Path:
    """The first of ``root`` and ``root/<subdir>`` that holds every name in ``files``.

    With ``gz=True`` each file may also be present as ``<name>.gz``. Raises
    :class:`DatasetNotFoundError` listing the files and every folder examined.
    """
    root = Path(root).expanduser()
    candidates = [root, *(root / s for s in subdirs)]
    for folder in candidates:
        if folder.is_dir() and all(_present(folder, f, gz=gz) is not None for f in files):
            return folder
    shown = [f + "[.gz]" if gz else f for f in files]
    raise DatasetNotFoundError(dataset=dataset, files=shown, searched=[str(c) for c in candidates])


def _file(folder: Path, name: str, *, gz: bool) -> Path:
    p = _present(folder, name, gz=gz)
    if p is None:  # only reachable if a file vanished after find_dataset_dir
        raise DatasetNotFoundError(dataset=str(folder), files=[name], searched=[str(folder)])
    return p


# -- IDX -------------------------------------------------------------------------------------
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress every member of a gzip stream; raise on a truncated or corrupt file."""
    out: list[bytes] = []
    data = raw
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
            out.append(d.flush())
        except zlib.error as e:
            raise DatasetFormatError(f"{path}: corrupt gzip data ({e})") from None
        if not d.eof:
            raise DatasetFormatError(f"{path}: gzip stream is truncated (file incomplete; download it again)")
        data = d.unused_data.lstrip(b"\x00")
    return b"".join(out)


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (gzipped or plain, detected from the content) into a numpy array.

    The header is two zero bytes, a dtype code (0x08 ubyte, 0x09 byte, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions and one big-endian uint32 per
    dimension; the data follow in C order. The result has the native byte order.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetNotFoundError(dataset="idx", files=[path.name], searched=[str(path.parent)])
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path)
    if len(raw) < 4:
        raise DatasetFormatError(f"{path}: too short for an IDX header ({len(raw)} bytes, need at least 4)")
    if raw[0] != 0 or raw[1] != 0:
        raise DatasetFormatError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()}: the first two bytes must be 0x0000 "
            "(is this an IDX file such as train-images-idx3-ubyte?)"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DatasetFormatError(f"{path}: unknown IDX dtype code 0x{code:02X}; allowed: {known}")
    if ndim < 1:
        raise DatasetFormatError(f"{path}: IDX header declares {ndim} dimensions; must be >= 1")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetFormatError(f"{path}: truncated IDX header: {ndim} dimensions need {header} bytes, file has {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found != expected:
        what = "truncated" if found < expected else "has trailing bytes"
        raise DatasetFormatError(
            f"{path}: IDX data {what}: shape {dims} of {dtype.name} needs {expected} bytes after the header, found {found}"
        )
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    if dtype.byteorder == ">":
        arr = arr.astype(dtype.newbyteorder("="))
    return arr


def _idx_images(path: Path) -> np.ndarray:
    x = read_idx(path)
    if x.ndim != 3 or x.dtype != np.uint8:
        raise DatasetFormatError(f"{path}: expected uint8 images (N, H, W) (idx3-ubyte), got {x.dtype} {x.shape}")
    return x


def _idx_labels(path: Path, n: int) -> np.ndarray:
    y = read_idx(path)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetFormatError(f"{path}: expected integer labels (N,) (idx1-ubyte), got {y.dtype} {y.shape}")
    if y.shape[0] != n:
        raise DatasetFormatError(f"{path}: has {y.shape[0]} labels but the matching images file has {n} images")
    return y.astype(np.int64)


_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MNIST_SUBDIRS = ("mnist", "MNIST/raw")
FASHION_MNIST_SUBDIRS = ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw")
EMNIST_SUBDIRS = ("gzip", "emnist", "emnist/gzip", "EMNIST/raw")

#: EMNIST split → number of classes (``letters`` labels are stored as 1..26 and shifted to 0..25).
EMNIST_SPLITS: dict[str, int] = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


def idx_file_names(prefix: str = "") -> tuple[str, ...]:
    """The four IDX file names of an MNIST-style dataset, e.g. ``emnist-letters-train-images-idx3-ubyte``."""
    return tuple(prefix + f for f in _IDX_FILES)


def _read_idx_dataset(root: str | Path, *, dataset: str, prefix: str, subdirs: Sequence[str], transpose: bool) -> RawSplit:
    names = idx_file_names(prefix)
    folder = find_dataset_dir(root, dataset=dataset, files=names, subdirs=subdirs, gz=True)
    paths = [_file(folder, n, gz=True) for n in names]
    log.debug("reading %s from %s", dataset, folder)
    out: list[np.ndarray] = []
    for img_path, lab_path in ((paths[0], paths[1]), (paths[2], paths[3])):
        x = _idx_images(img_path)
        if transpose:
            x = x.transpose(0, 2, 1)
        out += [x[:, None, :, :], _idx_labels(lab_path, x.shape[0])]
    if out[0].shape[1:] != out[2].shape[1:]:
        raise DatasetFormatError(f"{folder}: train images are {out[0].shape[2:]} but test images {out[2].shape[2:]}")
    return RawSplit(*out)


def read_mnist(root: str | Path) -> RawSplit:
    """MNIST from the four IDX files (``train-images-idx3-ubyte[.gz]`` ...) in ``root``
    (or ``root/mnist``, ``root/MNIST/raw``)."""
    return _read_idx_dataset(root, dataset="mnist", prefix="", subdirs=MNIST_SUBDIRS, transpose=False)


def read_fashion_mnist(root: str | Path) -> RawSplit:
    """Fashion-MNIST: the same four IDX file names as MNIST, in ``root`` (or ``root/fashion-mnist``,
    ``root/fashion_mnist``, ``root/FashionMNIST/raw``)."""
    return _read_idx_dataset(root, dataset="fashion_mnist", prefix="", subdirs=FASHION_MNIST_SUBDIRS, transpose=False)


def read_emnist(root: str | Path, *, split: str = "byclass") -> RawSplit:
    """EMNIST ``split`` from ``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]``.

    The files (NIST's ``gzip.zip``) store every image transposed; they are transposed back so
    characters appear upright as in MNIST. ``letters`` labels 1..26 are shifted to 0..25.
    """
    if split not in EMNIST_SPLITS:
        raise ValueError(f"emnist.split: must be one of {', '.join(EMNIST_SPLITS)}, got {split!r}")
    names = (
        f"emnist-{split}-train-images-idx3-ubyte",
        f"emnist-{split}-train-labels-idx1-ubyte",
        f"emnist-{split}-test-images-idx3-ubyte",
        f"emnist-{split}-test-labels-idx1-ubyte",
    )
    folder = find_dataset_dir(root, dataset="emnist", files=names, subdirs=EMNIST_SUBDIRS, gz=True)
    paths = [_file(folder, n, gz=True) for n in names]
    out: list[np.ndarray] = []
    for img_path, lab_path in ((paths[0], paths[1]), (paths[2], paths[3])):
        x = _idx_images(img_path).transpose(0, 2, 1)
        y = _idx_labels(lab_path, x.shape[0])
        if split == "letters":
            y = y - 1
        classes = EMNIST_SPLITS[split]
        if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
            raise DatasetFormatError(
                f"{lab_path}: labels must be in [0, {classes - 1}] for EMNIST {split}, got [{int(y.min())}, {int(y.max())}]"
            )
        out += [x[:, None, :, :], y]
    return RawSplit(*out)


# -- CIFAR -----------------------------------------------------------------------------------
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("builtins", "bytearray"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch holds only arrays and lists")


def _load_pickle(path: Path) -> dict[Any, Any]:
    try:
        with path.open("rb") as f:
            obj = _SafeUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DatasetFormatError(f"{path}: not a readable CIFAR python batch ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DatasetFormatError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return obj


def _key(d: dict[Any, Any], key: str, path: Path) -> Any:
    for k in (key.encode(), key):
        if k in d:
            return d[k]
    shown = ", ".join(repr(k) for k in d)
    raise DatasetFormatError(f"{path}: missing key b{key!r}; keys present: {shown}")


def _cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    d = _load_pickle(path)
    data = np.asarray(_key(d, "data", path))
    labels = np.asarray(_key(d, label_key, path))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DatasetFormatError(f"{path}: b'data' must be uint8 (N, 3072), got {data.dtype} {data.shape}")
    if labels.ndim != 1 or labels.shape[0] != data.shape[0] or not np.issubdtype(labels.dtype, np.integer):
        raise DatasetFormatError(f"{path}: b{label_key!r} must hold {data.shape[0]} integer labels, got {labels.dtype} {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _check_label_range(y: np.ndarray, classes: int, where: Path) -> None:
    if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise DatasetFormatError(f"{where}: labels must be in [0, {classes - 1}], got [{int(y.min())}, {int(y.max())}]")


CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR100_FILES = ("train", "test")


def read_cifar10(root: str | Path) -> RawSplit:
    """CIFAR-10 "python version": ``data_batch_1`` .. ``data_batch_5`` and ``test_batch`` in
    ``root`` or ``root/cifar-10-batches-py``; each a pickled dict with ``b"data"`` (N×3072
    uint8, channel-major) and ``b"labels"``."""
    folder = find_dataset_dir(root, dataset="cifar10", files=CIFAR10_FILES, subdirs=("cifar-10-batches-py",))
    train = [_cifar_batch(folder / f"data_batch_{i}", "labels") for i in range(1, 6)]
    tx, ty = _cifar_batch(folder / "test_batch", "labels")
    x = np.concatenate([b[0] for b in train])
    y = np.concatenate([b[1] for b in train])
    _check_label_range(y, 10, folder)
    _check_label_range(ty, 10, folder / "test_batch")
    return RawSplit(x, y, tx, ty)


def read_cifar100(root: str | Path, *, labels: str = "fine") -> RawSplit:
    """CIFAR-100 "python version": ``train`` and ``test`` in ``root`` or ``root/cifar-100-python``,
    labels from ``b"fine_labels"`` (100 classes) or, with ``labels="coarse"``, ``b"coarse_labels"`` (20)."""
    if labels not in ("fine", "coarse"):
        raise ValueError(f"cifar100.labels: must be 'fine' or 'coarse', got {labels!r}")
    folder = find_dataset_dir(root, dataset="cifar100", files=CIFAR100_FILES, subdirs=("cifar-100-python",))
    key = f"{labels}_labels"
    x, y = _cifar_batch(folder / "train", key)
    tx, ty = _cifar_batch(folder / "test", key)
    classes = 100 if labels == "fine" else 20
    _check_label_range(y, classes, folder / "train")
    _check_label_range(ty, classes, folder / "test")
    return RawSplit(x, y, tx, ty)


# -- SVHN ------------------------------------------------------------------------------------
SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


def _svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from scipy.io import loadmat

    try:
        m = loadmat(str(path))
    except Exception as e:  # scipy raises several types (ValueError, MatReadError, TypeError)
        raise DatasetFormatError(f"{path}: not a readable MATLAB file ({type(e).__name__}: {e})") from None
    if "X" not in m or "y" not in m:
        raise DatasetFormatError(f"{path}: must contain variables 'X' and 'y', found {sorted(k for k in m if not k.startswith('__'))}")
    x, y = np.asarray(m["X"]), np.asarray(m["y"]).reshape(-1)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.dtype != np.uint8:
        raise DatasetFormatError(f"{path}: 'X' must be uint8 (32, 32, 3, N), got {x.dtype} {x.shape}")
    if y.shape[0] != x.shape[3]:
        raise DatasetFormatError(f"{path}: 'y' has {y.shape[0]} labels but 'X' has {x.shape[3]} images")
    y = y.astype(np.int64)
    if y.size and (int(y.min()) < 1 or int(y.max()) > 10):
        raise DatasetFormatError(f"{path}: SVHN labels must be in [1, 10] (10 = digit 0), got [{int(y.min())}, {int(y.max())}]")
    y[y == 10] = 0
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), y


def read_svhn(root: str | Path) -> RawSplit:
    """SVHN cropped digits: ``train_32x32.mat`` and ``test_32x32.mat`` in ``root`` or ``root/svhn``.

    ``X`` is ``(32, 32, 3, N)`` and becomes ``(N, 3, 32, 32)``; label 10 (digit 0) becomes 0.
    """
    folder = find_dataset_dir(root, dataset="svhn", files=SVHN_FILES, subdirs=("svhn", "SVHN"))
    x, y = _svhn_mat(folder / SVHN_FILES[0])
    tx, ty = _svhn_mat(folder / SVHN_FILES[1])
    return RawSplit(x, y, tx, ty)


# -- image folder ----------------------------------------------------------------------------
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
_GREY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("image_folder: reading images needs Pillow; install it with `pip install pillow`") from None
    return Image


def _class_dirs(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def _images_in(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def read_image_folder(
    root: str | Path,
    *,
    classes: Sequence[str] | None = None,
    size: tuple[int, int] | None = None,
    mode: str | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Images under ``root/<class_name>/*.png|jpg|jpeg|bmp|gif``; classes sorted by name.

    Returns ``(x uint8 (N, C, H, W), y int64 (N,), class_names)``. ``classes`` fixes the class
    list (a test folder must use the training folder's); ``size=(H, W)`` resizes every image
    (otherwise all must share one size); ``mode`` is ``"L"`` (1 channel) or ``"RGB"`` (3), by
    default ``"L"`` if every image is greyscale and ``"RGB"`` otherwise.
    """
    image_mod = _pil()
    root = Path(root).expanduser()
    if mode is not None and mode not in ("L", "RGB"):
        raise ValueError(f"image_folder.mode: must be 'L' or 'RGB', got {mode!r}")
    if size is not None:
        if len(size) != 2 or any(int(s) < 1 for s in size):
            raise ValueError(f"image_folder.size: must be (height, width) with both >= 1, got {size!r}")
        size = (int(size[0]), int(size[1]))
    if not root.is_dir():
        raise DatasetNotFoundError(dataset="image_folder", files=["<class_name>/*.png|jpg"], searched=[str(root)])
    found = {d.name: d for d in _class_dirs(root)}
    names = sorted(found) if classes is None else list(classes)
    if classes is not None:
        extra = sorted(set(found) - set(names))
        if extra:
            raise DatasetFormatError(f"{root}: class folders {extra} are not among the training classes {names}")
    files: list[tuple[Path, int]] = []
    for label, name in enumerate(names):
        if name not in found:
            continue  # a test folder may lack a class
        imgs = _images_in(found[name])
        if not imgs and classes is None:
            raise DatasetFormatError(f"{found[name]}: class folder has no images ({', '.join(IMAGE_EXTENSIONS)})")
        files += [(p, label) for p in imgs]
    if not files:
        raise DatasetNotFoundError(dataset="image_folder", files=["<class_name>/*.png|jpg"], searched=[str(root)])
    images = []
    for p, _ in files:
        try:
            im = image_mod.open(p)
            im.load()
        except Exception as e:  # PIL raises UnidentifiedImageError, OSError, SyntaxError ...
            raise DatasetFormatError(f"{p}: not a readable image ({type(e).__name__}: {e})") from None
        images.append(im)
    if mode is None:
        mode = "L" if all(im.mode in _GREY_MODES for im in images) else "RGB"
    channels = 1 if mode == "L" else 3
    if size is None:
        w0, h0 = images[0].size
        for im, (p, _) in zip(images, files):
            if im.size != (w0, h0):
                raise DatasetFormatError(
                    f"{p}: image is {im.size[1]}x{im.size[0]} but {files[0][0]} is {h0}x{w0}; "
                    "pass size=(height, width) to resize every image"
                )
        h, w = h0, w0
    else:
        h, w = size
    x = np.empty((len(files), channels, h, w), dtype=np.uint8)
    for i, im in enumerate(images):
        im = im.convert(mode)
        if im.size != (w, h):
            im = im.resize((w, h), image_mod.Resampling.BILINEAR)
        a = np.asarray(im, dtype=np.uint8)
        x[i] = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    y = np.array([label for _, label in files], dtype=np.int64)
    return x, y, names


def read_image_folder_split(
    root: str | Path,
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    size: tuple[int, int] | None = None,
    mode: str | None = None,
) -> tuple[RawSplit, list[str]]:
    """A train/test split of an image folder.

    If ``root`` has ``train/`` and ``test/`` sub-folders (each ``<class_name>/*.png``) they are
    used as given; otherwise the images of ``root/<class_name>/`` are split at random, a
    ``test_fraction`` of each class to the test set, with ``numpy.random.default_rng(seed)``.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"image_folder.test_fraction: must be in (0, 1), got {test_fraction}")
    root = Path(root).expanduser()
    if (root / "train").is_dir() and (root / "test").is_dir():
        x, y, names = read_image_folder(root / "train", size=size, mode=mode)
        c, h, w = x.shape[1:]
        tx, ty, _ = read_image_folder(root / "test", classes=names, size=(h, w), mode="L" if c == 1 else "RGB")
        return RawSplit(x, y, tx, ty), names
    x, y, names = read_image_folder(root, size=size, mode=mode)
    rng = np.random.default_rng(seed)
    test_mask = np.zeros(len(y), dtype=bool)
    for c in range(len(names)):
        idx = np.flatnonzero(y == c)
        k = int(round(test_fraction * idx.size))
        if idx.size >= 2:
            k = min(max(k, 1), idx.size - 1)  # every class on both sides when possible
        else:
            k = 0
        test_mask[rng.permutation(idx)[:k]] = True
    if not test_mask.any():
        raise DatasetFormatError(f"{root}: too few images ({len(y)}) to hold out a test set; add images or a test/ folder")
    return RawSplit(x[~test_mask], y[~test_mask], x[test_mask], y[test_mask]), names
