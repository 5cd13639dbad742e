"""The decoded arrays of a dataset's files, kept on disk for the next process.

Reading Fashion-MNIST from Debian's gzipped IDX files costs about 0.3 s of CPU (gunzip of
26 MB) and its training statistics another 0.14 s; a Flower ClientApp process (Flower 1.42
starts one per message), a spawned pool worker and every CLI call pay it again. The first read
writes the uint8 arrays as ``.npy`` files and the statistics as JSON under
``$FEDGAME_CACHE/datasets`` (default ``~/.cache/fedgame/datasets``); later processes load them
(tens of milliseconds), the same bytes.

Datasets under :data:`MIN_BYTES` of images (4 MiB) are read every time. An entry is keyed on
the dataset, its options, its folder and every file in that folder (name, size, modification
time), so rewriting, adding or removing a file reads the files again. Your own image folders
(``image_folder``: a file per image, in subfolders) are not cached. Entries are written to a
temporary folder and renamed into place, so a process never sees half an entry and two
processes that read at once both succeed (one entry stays). An entry that cannot be read
(damaged, removed meanwhile) is logged, the files are read and the entry written again; a
cache folder that cannot be written only costs the speed-up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedgame.data.readers import RawSplit

__all__ = ["Stats", "cached_read", "data_cache_dir"]

log = logging.getLogger(__name__)

Stats = tuple[tuple[float, ...], tuple[float, ...]]
_FORMAT = 1  # bump when what an entry holds changes
#: datasets whose decoded images are smaller than this are not kept: reading them costs less than
#: an entry's files would save (and the small folders tests write would pile up entries)
MIN_BYTES = 4 << 20
_ARRAYS = RawSplit._fields


def data_cache_dir() -> Path:
    """``$FEDGAME_CACHE/datasets`` (default ``~/.cache/fedgame/datasets``)."""
    return Path(os.environ.get("FEDGAME_CACHE", Path.home() / ".cache" / "fedgame")) / "datasets"


def _files(folder: Path) -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of every file in ``folder`` (the readers that use this cache read
    files of the folder itself, never of its subfolders)."""
    out = []
    with os.scandir(folder) as it:
        for e in it:
            if e.is_file():
                st = e.stat()
                out.append((e.name, st.st_size, st.st_mtime_ns))
    return sorted(out)


def _key(name: str, folder: Path, options: tuple[tuple[str, Any], ...]) -> str:
    what = json.dumps([_FORMAT, name, str(folder), repr(options), _files(folder)])
    return f"{name}-{hashlib.sha256(what.encode()).hexdigest()[:20]}"


def _load(entry: Path) -> tuple[RawSplit, int, Stats] | None:
    try:
        meta = json.loads((entry / "meta.json").read_text())
        raw = RawSplit(*(np.load(entry / f"{a}.npy", allow_pickle=False) for a in _ARRAYS))
        stats: Stats = (tuple(meta["mean"]), tuple(meta["std"]))
        return raw, int(meta["classes"]), stats
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("dataset cache entry %s could not be read (%s); reading the files", entry, e)
        return None


def _store(entry: Path, raw: RawSplit, classes: int, stats: Stats) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as e:
        log.info("dataset cache %s not writable (%s); nothing kept", entry.parent, e)
        return
    try:
        for a, arr in zip(_ARRAYS, raw, strict=True):
            np.save(tmp / f"{a}.npy", np.ascontiguousarray(arr), allow_pickle=False)
        (tmp / "meta.json").write_text(json.dumps({"classes": classes, "mean": list(stats[0]), "std": list(stats[1])}))
        os.rename(tmp, entry)  # atomic; fails if another process put the entry there first
    except OSError as e:
        if not entry.exists():
            log.info("dataset cache entry %s not written (%s)", entry, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_read(
    name: str,
    folder: Path,
    options: tuple[tuple[str, Any], ...],
    read: Callable[[], tuple[RawSplit, int]],
    stats: Callable[[RawSplit], Stats],
) -> tuple[RawSplit, int, Stats]:
    """The raw arrays, class count and training statistics of dataset ``name`` in ``folder``:
    from the cache entry of these files when there is one, otherwise from ``read()`` and
    ``stats(raw)``, then kept for the next process."""
    entry = data_cache_dir() / _key(name, folder, options)
    if (entry / "meta.json").is_file():
        if (hit := _load(entry)) is not None:
            return hit
        shutil.rmtree(entry, ignore_errors=True)  # damaged: written again below
    raw, classes = read()
    st = stats(raw)
    if raw.train_x.nbytes + raw.test_x.nbytes >= MIN_BYTES:
        _store(entry, raw, classes, st)
    return raw, classes, st
