"""The results store: one folder per run, every file written atomically.

Layout of a run folder::

    config.yaml        the resolved recipe (every default filled in)
    partition.npz      the client index arrays; partition.json holds its fingerprint
    metrics.csv        one row per round (rewritten atomically each round)
    privacy.csv        ε spent per client at δ, and how often each was selected
    summary.json       final accuracy, ε per client, wall time, versions
    checkpoint.pt      model, plug-in and accountant state after the last finished round

A file is written to a temporary name in the same folder, flushed, fsynced and renamed over
its target, so a crash never leaves a half-written result. ``checkpoint.pt`` is written after
``metrics.csv``; on resume the rows past the checkpoint's round are dropped.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["LOCK_FILE", "ResultStore", "RunFolderBusy", "atomic_write_bytes", "atomic_write_text", "lock_run_folder", "read_metrics"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path`` (an
    interrupted write leaves the old file whole). The file gets the permissions an ordinary
    ``open`` would give it (0666 less the umask: 0644 by default), not mkstemp's private 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _atomic_with(path: Path, writer: Callable[[io.BytesIO], None]) -> None:
    buf = io.BytesIO()
    writer(buf)
    atomic_write_bytes(path, buf.getvalue())


_NDARRAY = "__ndarray__"


def _to_plain(obj: Any) -> Any:
    """A checkpoint's state with NumPy arrays as tagged tensors and NumPy scalars as Python
    numbers: what ``torch.load(weights_only=True)`` reads back without running any code."""
    if isinstance(obj, np.ndarray):
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_plain(v) for v in obj)
    return obj


def _from_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY}:
            return obj[_NDARRAY].numpy()
        return {k: _from_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_from_plain(v) for v in obj)
    return obj


class UnsafeCheckpoint(ValueError):
    """A checkpoint holds more than tensors and plain types: loading it could run code."""


def _csv_text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    fields: list[str] = []
    for r in rows:
        fields.extend(k for k in r if k not in fields)
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


#: the advice every "this run file is damaged" error ends with (store and results readers alike)
DAMAGED = "the file is damaged: delete its run folder, or run it again with --force"


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read a metrics CSV back with numbers as floats (``nan`` kept)."""
    rows = []
    with open(path, newline="", encoding="utf-8", errors="strict") as f:
        try:
            records = list(csv.DictReader(f))
        except (UnicodeDecodeError, csv.Error) as e:
            raise ValueError(f"{path}: not a readable CSV ({type(e).__name__}); {DAMAGED}") from None
        for r in records:
            if None in r or any(v is None for v in r.values()):
                raise ValueError(f"{path}: a row has {'more' if None in r else 'fewer'} fields than the header (truncated?); {DAMAGED}")
            row: dict[str, Any] = {}
            for k, v in r.items():
                try:
                    row[k] = float(v)
                except (TypeError, ValueError):
                    row[k] = v
            rows.append(row)
    return rows


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _jsonable(obj.tolist())
    return obj


#: The run folder's advisory lock (:func:`lock_run_folder`); it holds the writer's PID.
LOCK_FILE = ".lock"

_HELD: dict[Path, tuple[int, int]] = {}  # folder -> (fd, depth): the locks this process holds


class RunFolderBusy(RuntimeError):
    """Another process is writing this run folder."""


@contextlib.contextmanager
def lock_run_folder(root: str | Path) -> Any:
    """Hold ``root``'s advisory lock (``fcntl.flock`` on ``root/.lock``) for the block: one
    writer per run folder. A second process is refused at once with :class:`RunFolderBusy`
    naming the PID that holds it. The kernel drops a lock when its process dies, so the lock
    of a killed run is taken over without a step. Re-entrant within a process (the CLI holds
    it across ``--force``'s clearing and the run; :func:`~fedgame.pipeline.runner.run_one`
    takes it again)."""
    folder = Path(root).resolve()
    if folder in _HELD:
        fd, depth = _HELD[folder]
        _HELD[folder] = (fd, depth + 1)
        try:
            yield
        finally:
            fd, depth = _HELD[folder]
            _HELD[folder] = (fd, depth - 1)
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise RunFolderBusy(
            f"out: {root} is being written by another run (PID {pid}); wait for it to finish, or choose another --out"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[folder] = (fd, 1)
    try:
        yield
    finally:
        fd, depth = _HELD[folder]
        if depth <= 1:
            del _HELD[folder]
            os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor drops the lock
        else:
            _HELD[folder] = (fd, depth - 1)


class ResultStore:
    """A run folder (see module docstring). Implements the engine's ``RunSink``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []

    # files
    def path(self, name: str) -> Path:
        return self.root / name

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.path(name), json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")

    def read_json(self, name: str) -> Any:
        """``name``'s JSON; a one-line :class:`ValueError` naming the file when it is damaged."""
        try:
            return json.loads(self.path(name).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{self.path(name)}: not valid JSON ({type(e).__name__}); {DAMAGED}") from None

    def write_text(self, name: str, text: str) -> None:
        atomic_write_text(self.path(name), text)

    def write_csv(self, name: str, rows: list[dict[str, Any]]) -> None:
        atomic_write_text(self.path(name), _csv_text(rows))

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    # RunSink
    def append(self, record: dict[str, Any]) -> None:
        self.rows.append(record)
        self.write_csv("metrics.csv", self.rows)

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Save the round's state as tensors and plain types only (NumPy arrays as tensors)."""
        plain = _to_plain(state)
        _atomic_with(self.path("checkpoint.pt"), lambda f: torch.save(plain, f))

    def load_checkpoint(self) -> dict[str, Any] | None:
        """Load with ``weights_only=True``: a checkpoint from someone else's folder cannot run code."""
        p = self.path("checkpoint.pt")
        if not p.exists():
            return None
        try:
            state: dict[str, Any] = _from_plain(torch.load(p, weights_only=True))
        except pickle.UnpicklingError as e:
            if "Weights only load failed" not in str(e):
                raise UnsafeCheckpoint(
                    f"{p}: not a checkpoint fedgame can read (damaged or truncated); delete it to start the run afresh"
                ) from None
            raise UnsafeCheckpoint(
                f"{p}: holds objects beyond tensors and plain types (an older fedgame's checkpoint, or not ours); "
                "refusing to load it, since that could run code: delete it to start the run afresh"
            ) from e
        except (RuntimeError, EOFError, OSError, ValueError, KeyError) as e:
            raise UnsafeCheckpoint(
                f"{p}: not a checkpoint fedgame can read ({type(e).__name__}: damaged or truncated); delete it to start the run afresh"
            ) from None
        if not isinstance(state, dict) or "records" not in state:
            raise UnsafeCheckpoint(f"{p}: not a fedgame checkpoint (no records); delete it to start the run afresh")
        self.rows = list(state["records"])
        self.write_csv("metrics.csv", self.rows)
        return state

    RUN_FILES = (
        "config.yaml",
        "partition.npz",
        "partition.json",
        "metrics.csv",
        "privacy.csv",
        "summary.json",
        "checkpoint.pt",
        "sessions.json",
        "queries.jsonl",
    )

    def clear(self) -> None:
        """Remove the files of a previous run (and only those) to start afresh."""
        for name in self.RUN_FILES:
            self.path(name).unlink(missing_ok=True)
        self.rows = []

    @property
    def finished(self) -> bool:
        return self.exists("summary.json")
