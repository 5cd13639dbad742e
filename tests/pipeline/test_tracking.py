"""Run tracking: ``--log-to tensorboard`` and ``--log-to mlflow`` carry the rounds of
``metrics.csv``, read back with each library's own reader (TensorBoard's EventAccumulator,
MLflow's client on its SQLite store)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedgame.cli import app

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
TINY = {
    "name": "tiny",
    "data": {"dataset": "fashion_mnist", "max_train": 1000, "max_test": 200, "partition": {"kind": "iid", "n_clients": 5}},
    "model": {"name": "logreg"},
    "train": {"rounds": 3, "clients_per_round": 2, "eval_every": 1, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
}


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_tracked_run_reads_back_in_tensorboard_and_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    mlflow = pytest.importorskip("mlflow")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rec = tmp_path / "tiny.yaml"
    rec.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "runs" / "tiny"
    r = CliRunner().invoke(app, ["run", str(rec), "--out", str(out), "--log-to", "tensorboard", "--log-to", "mlflow"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    acc = [float(x["test_acc"]) for x in rows]

    ea = EventAccumulator(str(out / "tensorboard"))
    ea.Reload()
    tb = ea.Scalars("test_acc")
    assert [e.step for e in tb] == [0, 1, 2]
    assert [e.value for e in tb] == pytest.approx(acc, abs=1e-6)
    assert "train_loss" in ea.Tags()["scalars"] and "summary/final_accuracy" in ea.Tags()["scalars"]

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["train.rounds"] == "3"
    hist = sorted(client.get_metric_history(run.info.run_id, "test_acc"), key=lambda m: m.step)
    assert [m.step for m in hist] == [0, 1, 2]
    assert [m.value for m in hist] == pytest.approx(acc, abs=1e-12)
    assert run.data.tags["fedgame.code"]


def test_unknown_tracker_is_one_line(tmp_path: Path) -> None:
    rec = tmp_path / "tiny.yaml"
    rec.write_text(yaml.safe_dump(TINY))
    r = CliRunner().invoke(app, ["run", str(rec), "--out", str(tmp_path / "o"), "--log-to", "wandb"])
    assert r.exit_code == 2 and "--log-to: must be one of tensorboard, mlflow, got 'wandb'" in r.stderr
