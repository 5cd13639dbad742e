"""Run tracking: the per-round records of ``metrics.csv`` sent to TensorBoard or MLflow as well.

``fedgame run --log-to tensorboard --log-to mlflow`` (or :func:`open_trackers` from Python, its
:meth:`Trackers.on_round` passed to :func:`~fedgame.pipeline.runner.run_one`) writes the same
numbers the results folder holds, step = round (from 0, as in ``metrics.csv``):

* **TensorBoard** (``torch.utils.tensorboard``; the ``tracking`` extra installs ``tensorboard``):
  event files in ``<run folder>/tensorboard``, one scalar per numeric field of the round record
  (``test_acc``, ``train_loss``, ``eps_max``, the game's ``reward``/``phi``/``welfare``...), the
  recipe as text, and the summary's final numbers at the last step. ``tensorboard --logdir runs``.
* **MLflow** (``mlflow-skinny``, no server needed): a run in the experiment named after the recipe,
  in the store ``MLFLOW_TRACKING_URI`` names, by default the SQLite file ``mlflow.db`` beside the run
  folder (``mlflow ui --backend-store-uri sqlite:///runs/mlflow.db``); the recipe's fields as
  params, the rounds as metric histories, the code version and run folder as tags.

The trackers only read the records; the results folder stays the record of the run.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import yaml

from fedgame.pipeline.results import flatten

__all__ = ["TRACKERS", "Tracker", "Trackers", "open_trackers", "TrackingUnavailable"]

TRACKERS = ("tensorboard", "mlflow")


class TrackingUnavailable(ImportError):
    """The library a tracker writes with is not installed (the message says which extra adds it)."""


def _numbers(rec: dict[str, Any]) -> dict[str, float]:
    """The record's finite numeric fields (lists, strings and NaNs are left out)."""
    out: dict[str, float] = {}
    for k, v in rec.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if k != "round" and math.isfinite(float(v)):
            out[k] = float(v)
    return out


class Tracker:
    """One tracking back-end: told of each round's record, then of the summary."""

    def on_round(self, rec: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self, summary: dict[str, Any] | None) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    def __init__(self, out: Path, config: dict[str, Any]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise TrackingUnavailable("--log-to tensorboard: needs tensorboard (pip install 'fedgame[tracking]')") from e
        self.dir = out / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.writer.add_text("recipe", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)
        self.last = 0

    def on_round(self, rec: dict[str, Any]) -> None:
        step = int(rec["round"])
        self.last = max(self.last, step)
        for k, v in _numbers(rec).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            for k, v in _numbers(
                {k: v for k, v in summary.items() if k in ("final_accuracy", "final_loss", "epsilon_max", "epsilon_mean", "wall_time")}
            ).items():
                self.writer.add_scalar(f"summary/{k}", v, self.last)
        self.writer.close()


class MLflowTracker(Tracker):
    def __init__(self, out: Path, config: dict[str, Any], *, code: str) -> None:
        try:
            import mlflow
        except ImportError as e:
            raise TrackingUnavailable("--log-to mlflow: needs mlflow-skinny (pip install 'fedgame[tracking]')") from e
        self.mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(out.parent / 'mlflow.db').resolve()}"
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self.uri = uri
        name = str(config.get("name", "fedgame"))
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        run_name = f"{out.name} (seed {config.get('seed', 0)})"
        self.run_id = self.client.create_run(
            exp_id, run_name=run_name, tags={"fedgame.code": code, "fedgame.run_folder": str(out.resolve())}
        ).info.run_id
        params = {k: str(v)[:500] for k, v in flatten(config).items()}
        items = list(params.items())
        for i in range(0, len(items), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=[mlflow.entities.Param(k, v) for k, v in items[i : i + 100]])

    def on_round(self, rec: dict[str, Any]) -> None:
        import time

        step = int(rec["round"])
        now = int(time.time() * 1000)
        metrics = [self.mlflow.entities.Metric(k, v, now, step) for k, v in _numbers(rec).items()]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def close(self, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            for k in ("final_accuracy", "final_loss", "epsilon_max", "wall_time"):
                v = summary.get(k)
                if isinstance(v, (int, float)) and math.isfinite(float(v)):
                    self.client.log_metric(self.run_id, k, float(v))
        self.client.set_terminated(self.run_id, status="FINISHED" if summary is not None else "FAILED")


class Trackers:
    """The trackers of one run, fed together; close them with the run's summary (None if it failed)."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def on_round(self, rec: dict[str, Any]) -> None:
        for t in self.trackers:
            t.on_round(rec)

    def close(self, summary: dict[str, Any] | None) -> None:
        for t in self.trackers:
            t.close(summary)


def open_trackers(kinds: list[str], out: str | Path, cfg: Any) -> Trackers:
    """Trackers of ``kinds`` (``tensorboard``, ``mlflow``) for the run of ``cfg`` in folder ``out``."""
    from fedgame.pipeline.runner import code_version

    bad = [k for k in kinds if k not in TRACKERS]
    if bad:
        raise ValueError(f"--log-to: must be one of {', '.join(TRACKERS)}, got {bad[0]!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = cfg.model_dump(mode="json")
    made: list[Tracker] = []
    for k in dict.fromkeys(kinds):
        made.append(TensorBoardTracker(out, config) if k == "tensorboard" else MLflowTracker(out, config, code=code_version()))
    return Trackers(made)
