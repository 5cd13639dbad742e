"""The run report's figures: runs labelled by recipe name and seed, rounds numbered as in
metrics.csv on integer ticks spanning every round run, training loss beside test loss, and the
partition's label distribution from partition.json."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from fedgame.experiments import report


def _run(d: Path, name: str, seed: int, rounds: int, counts: list[list[int]]) -> None:
    d.mkdir(parents=True)
    rows = ["round,train_loss,test_acc,test_loss"]
    for t in range(rounds):
        last = t == rounds - 1
        rows.append(f"{t},{1.0 / (t + 1)},{0.5 if last else 'nan'},{0.9 if last else 'nan'}")
    (d / "metrics.csv").write_text("\n".join(rows) + "\n")
    (d / "config.yaml").write_text(f"name: {name}\nseed: {seed}\n")
    (d / "partition.json").write_text(json.dumps({"label_counts": counts}))


def test_report_labels_axes_and_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path / "runs" / "a" / "seed_0", "fedavg", 0, 2, [[3, 0], [1, 2]])
    _run(tmp_path / "runs" / "b" / "seed_0", "fedpcs", 0, 2, [[3, 0], [1, 2]])
    axes_seen: list[object] = []
    real_save = report._save

    def save(fig, out, name, caption, figs):  # type: ignore[no-untyped-def]
        if name == "accuracy.png":
            axes_seen.extend(fig.axes)
        real_save(fig, out, name, caption, figs)

    monkeypatch.setattr(report, "_save", save)
    path = report.write_report([tmp_path / "runs"], tmp_path / "rep")
    text = path.read_text()
    assert "partition.png" in text and (tmp_path / "rep" / "partition.png").exists()
    acc, test_loss, train_loss = axes_seen
    assert [t.get_text() for t in acc.get_legend().get_texts()] == ["fedavg (seed 0)", "fedpcs (seed 0)"]
    assert acc.get_xlim() == (-0.5, 1.5)  # both rounds, not a sliver around the one evaluated
    assert all(float(x).is_integer() for x in acc.get_xticks())
    assert train_loss.get_ylabel().startswith("training loss") and list(train_loss.lines[0].get_xdata()) == [0, 1]
    assert list(acc.lines[0].get_xdata()) == [1]  # round numbers as in metrics.csv (from 0)
    plt.close("all")
