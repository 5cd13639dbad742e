"""The results store writes atomically and resumes from its checkpoint."""

import os
from pathlib import Path

import pytest
import torch

from fedgame.pipeline.store import ResultStore, atomic_write_text, read_metrics


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


def test_result_files_respect_the_umask(tmp_path: Path) -> None:
    """Result files are readable by the group and others under the default umask (0644), not
    mkstemp's private 0600; a stricter umask is honoured."""
    import os

    from fedgame.pipeline.store import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        os.umask(0o077)
        atomic_write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600


def test_checkpoint_is_plain_and_loads_without_code(tmp_path: Path) -> None:
    """Checkpoints hold tensors and plain types only and load with weights_only=True (NumPy
    arrays and scalars round-trip exactly); a checkpoint holding any other object is refused."""
    import numpy as np
    import torch

    from fedgame.pipeline.store import ResultStore, UnsafeCheckpoint

    store = ResultStore(tmp_path)
    rng = np.random.default_rng(3)
    state = {
        "records": [{"round": 0, "acc": np.float64(0.5)}],
        "params": torch.arange(4.0),
        "selection": {"loss": rng.random(5), "mask": np.array([True, False]), "n": np.int64(7)},
        "rng": rng.bit_generator.state,
        "pair": (1, np.arange(3)),
    }
    store.save_checkpoint(state)
    torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # no code needed to read it
    back = ResultStore(tmp_path).load_checkpoint()
    assert back is not None
    np.testing.assert_array_equal(back["selection"]["loss"], state["selection"]["loss"])
    assert back["selection"]["mask"].dtype == np.bool_ and back["selection"]["n"] == 7
    assert back["rng"] == state["rng"] and back["records"][0]["acc"] == 0.5
    np.testing.assert_array_equal(back["pair"][1], np.arange(3))

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    torch.save({"records": [], "x": Evil()}, tmp_path / "checkpoint.pt")
    with pytest.raises(UnsafeCheckpoint, match="refusing to load it"):
        ResultStore(tmp_path).load_checkpoint()
