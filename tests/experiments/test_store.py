"""The results store writes atomically and resumes from its checkpoint."""

import os
from pathlib import Path

import pytest
import torch

from fedgame.experiments.store import ResultStore, atomic_write_text, read_metrics


def test_atomic_write_leaves_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


def test_metrics_roundtrip_and_checkpoint_truncates(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    for t in range(3):
        s.append({"round": t, "test_acc": 0.1 * t, "selected": "[1, 2]"})
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[2]["test_acc"] == pytest.approx(0.2)
    s.save_checkpoint({"records": s.rows[:2], "params": torch.arange(3.0)})
    s2 = ResultStore(tmp_path)
    ck = s2.load_checkpoint()
    assert ck is not None and torch.equal(ck["params"], torch.arange(3.0))
    assert [r["round"] for r in read_metrics(tmp_path / "metrics.csv")] == [0, 1]
    assert ResultStore(tmp_path / "fresh").load_checkpoint() is None


def test_clear_removes_only_run_files(tmp_path: Path) -> None:
    s = ResultStore(tmp_path)
    s.append({"round": 0})
    s.write_json("summary.json", {"a": 1})
    (tmp_path / "notes.txt").write_text("mine")
    s.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
