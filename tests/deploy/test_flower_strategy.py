"""fedgame as a Flower Message-API Strategy, without Ray: Flower's own ``Strategy.start`` loop
over an in-memory grid whose nodes run the real ClientApp. Whatever registered selection
strategy the recipe names — a plain draw, one that queries losses at the global model, one
that trains every client to see its update norm — the strategy's rounds equal the in-process
engine's bit for bit; each message carries its own client's noise scale; a missing reply is
neither charged nor aggregated; and as the engine's round driver it writes ``run_one``'s
results folder and resumes an interrupted run to the same numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.app import ArrayRecord, ConfigRecord  # noqa: E402
from flwr.serverapp.strategy import Strategy  # noqa: E402

from fedgame.deploy.flower._messages import decode_params  # noqa: E402
from fedgame.deploy.flower.strategy import FedgameStrategy  # noqa: E402
from fedgame.pipeline.build import Built, build_engine  # noqa: E402
from fedgame.pipeline.config import RunConfig, parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from fedgame.pipeline.store import ResultStore  # noqa: E402
from fedgame.sim import RunResult  # noqa: E402
from fedgame.sim.engine import MissingReplies  # noqa: E402
from tests.deploy.test_flower_messages import FakeGrid, task_identity  # noqa: E402,F401

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def recipe(**over: Any) -> dict[str, Any]:
    """5 clients, 2 rounds, 2 per round; zCDP upload noise."""
    raw: dict[str, Any] = {
        "name": "strategy",
        "seed": 4,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 700,
            "max_test": 100,
            "partition": {"kind": "dirichlet", "n_clients": 5, "alpha": 0.5, "min_size": 20},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 2, "threads": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        "selection": {"kind": "uniform"},
        "aggregation": {"kind": "importance"},
        "privacy": {"kind": "zcdp_upload", "rho": 1.0, "clip": 1.0},
        "accountant": {"kind": "zcdp"},
    }
    raw.update(over)
    return raw


SELECTIONS = {
    "uniform": {},
    # queries every candidate's loss at the global model (query.losses messages) while selecting
    "power_of_choice": {"selection": {"kind": "power_of_choice", "d": 4, "losses": "current"}, "aggregation": {"kind": "fedavg"}},
    # exact AOCS trains every client at the current model to see its update norm, then keeps K
    "aocs": {"selection": {"kind": "aocs", "stale_norms": False}},
    # FedPCS: the Stackelberg game's rho_i^t, sampling x_i ∝ rho_i^t, per-client zCDP noise, payments
    "fedpcs": {
        "selection": {"kind": "privacy_aware"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0},
        "incentive": {"kind": "fedpcs", "gamma": 0.5, "inclusion": "privacy"},
    },
}


@pytest.mark.parametrize("kind", sorted(SELECTIONS))
def test_flower_strategy_start_equals_the_in_process_engine(kind: str, tmp_path: Path) -> None:
    cfg = parse_recipe(recipe(**SELECTIONS[kind]))
    ref = build_engine(cfg).engine.run(cfg.train.rounds)

    built = build_engine(cfg)
    grid = FakeGrid(cfg, 5)
    strategy = FedgameStrategy(built, cfg, register_timeout=1, sink=ResultStore(tmp_path))
    assert isinstance(strategy, Strategy)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=cfg.train.rounds)  # type: ignore[arg-type]

    assert torch.equal(decode_params(result.arrays), ref.params)  # Flower's Result holds the engine's model
    assert np.array_equal(built.engine.accountant.epsilons(1e-5), ref.epsilons)
    assert [r["selected"] for r in built.engine.records] == [r["selected"] for r in ref.records]
    for g, r in zip(built.engine.records, ref.records, strict=True):
        for key in ("train_loss", "test_acc", "eps_max", "payments", "probe_loss_queries", "probe_trainings"):
            assert g[key] == r[key], key
    metrics = result.train_metrics_clientapp
    assert sorted(metrics) == [1, 2] and metrics[2]["test_acc"] == ref.records[1]["test_acc"]
    with (tmp_path / "metrics.csv").open() as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["0", "1"]
    assert ResultStore(tmp_path).load_checkpoint() is not None
    if kind == "aocs":  # its probes went over the grid: every client trained, only K aggregated
        assert ref.records[0]["probe_trainings"] > 0
    if kind == "power_of_choice":
        assert ref.records[0]["probe_loss_queries"] == 4


def test_each_message_carries_its_clients_noise_and_a_missing_reply_is_not_charged() -> None:
    """DP-SGD with each client's multiplier calibrated to ε = 8 over its own data size: the
    train message to each chosen node carries that client's multiplier, so they differ; the
    node whose reply never comes is listed missing, not charged, not aggregated."""
    raw = recipe(
        selection={"kind": "uniform", "replace": False},
        aggregation={"kind": "fedavg"},
        train={**recipe()["train"], "clients_per_round": 3},
        privacy={"kind": "dpsgd", "max_grad_norm": 1.0, "target_epsilon": 8.0, "delta": 1e-5},
        accountant={"kind": "rdp", "delta": 1e-5},
    )
    cfg = parse_recipe(raw)
    built = build_engine(cfg)
    grid = FakeGrid(cfg, 5)
    strategy = FedgameStrategy(built, cfg, register_timeout=1)
    msgs = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid))  # type: ignore[arg-type]
    engine = built.engine
    assert len(msgs) == 3
    chosen = []
    for m in msgs:
        job = m.content["job"]
        pid = int(job["partition-id"])  # type: ignore[arg-type]
        chosen.append(pid)
        assert m.metadata.dst_node_id == 100 + pid  # the node holding the partition, learned at registration
        plan = engine.privacy.dpsgd(pid, 0, int(engine.sizes[pid]))
        assert plan is not None and job["dpsgd.noise-multiplier"] == plan.noise_multiplier
        assert job["local-steps"] == engine.trainer.spec.n_steps(int(engine.sizes[pid]))
    assert len({m.content["job"]["dpsgd.noise-multiplier"] for m in msgs}) == 3  # type: ignore[index]

    lost = chosen[0]
    replies = [r for r in grid.send_and_receive(msgs) if int(r.content["job"]["partition-id"]) != lost]  # type: ignore[arg-type]
    arrays, metrics = strategy.aggregate_train(1, replies)
    record = engine.records[-1]
    assert json.loads(record["missing"]) == [lost] and sorted(json.loads(record["replied"])) == sorted(chosen[1:])
    eps = engine.accountant.epsilons(1e-5)
    assert eps[lost] == 0 and all(eps[c] > 0 for c in chosen[1:])
    assert isinstance(arrays, ArrayRecord) and torch.equal(decode_params(arrays), engine.params)
    assert metrics is not None and metrics["n_selected"] == 3 and "selected" not in metrics
    with pytest.raises(RuntimeError, match="no round was configured"):
        strategy.aggregate_train(2, [])


class FakeFlower:
    """An ``execute`` hook for ``run_one``: the strategy drives the engine over a FakeGrid."""

    name = "flower-fake"

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after

    def __call__(self, built: Built, cfg: RunConfig, run: Any) -> RunResult:
        strategy = FedgameStrategy(built, cfg, register_timeout=1)
        strategy.drive(FakeGrid(cfg, cfg.data.partition.n_clients))
        if self.stop_after is not None:
            real = built.engine.commit

            def commit(record: dict[str, Any], **kw: Any) -> None:
                real(record, **kw)
                if record["round"] + 1 == self.stop_after:
                    raise KeyboardInterrupt

            built.engine.commit = commit  # type: ignore[method-assign]
        result: RunResult = run()
        return result

    def describe(self) -> dict[str, Any]:
        return {}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return [{k: v for k, v in row.items() if not k.endswith("time")} for row in csv.DictReader(f)]


def test_as_the_round_driver_it_writes_run_ones_folder_and_resumes(tmp_path: Path) -> None:
    raw = recipe(train={**recipe()["train"], "rounds": 3})
    cfg = parse_recipe(raw)
    a = run_one(cfg, tmp_path / "inprocess")
    with pytest.raises(KeyboardInterrupt):
        run_one(cfg, tmp_path / "flower", execute=FakeFlower(stop_after=2))
    assert len(_rows(tmp_path / "flower" / "metrics.csv")) == 2  # the finished rounds are kept
    b = run_one(cfg, tmp_path / "flower", execute=FakeFlower())
    assert b["resumed_from_round"] == 2 and b["backend"] == "flower-fake"
    assert b["final_accuracy"] == a["final_accuracy"] and b["epsilon_per_client"] == a["epsilon_per_client"]
    assert _rows(tmp_path / "inprocess" / "metrics.csv") == _rows(tmp_path / "flower" / "metrics.csv")
    assert _rows(tmp_path / "inprocess" / "privacy.csv") == _rows(tmp_path / "flower" / "privacy.csv")


def test_bad_strategy_options_are_refused() -> None:
    cfg = parse_recipe(recipe())
    built = build_engine(cfg)
    with pytest.raises(ValueError, match=r"on_missing: must be 'continue' or 'fail' \(None: the recipe's\), got 'skip'"):
        FedgameStrategy(built, cfg, on_missing="skip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="round_timeout: must be > 0 seconds"):
        FedgameStrategy(built, cfg, round_timeout=0)
    with pytest.raises(RuntimeError, match=r"call drive\(grid\)"):
        FedgameStrategy(built, cfg)(built.engine, range(0, 1), lambda r: None)


def test_the_recipes_on_missing_fail_stops_the_round_naming_the_client() -> None:
    cfg = parse_recipe(recipe(train={**recipe()["train"], "on_missing": "fail"}))
    built = build_engine(cfg)
    assert built.engine.on_missing == "fail"
    grid = FakeGrid(cfg, 5)
    strategy = FedgameStrategy(built, cfg, register_timeout=1)
    msgs = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid))  # type: ignore[arg-type]
    lost = int(msgs[0].content["job"]["partition-id"])  # type: ignore[arg-type]
    with pytest.raises(MissingReplies, match=rf"round 0: no reply from selected client\(s\) \[{lost}\]"):
        strategy.aggregate_train(1, list(grid.send_and_receive(msgs[1:])))
    # the strategy's own option overrides the recipe
    built = build_engine(cfg)
    strategy = FedgameStrategy(built, cfg, register_timeout=1, on_missing="continue")
    msgs = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid))  # type: ignore[arg-type]
    strategy.aggregate_train(1, list(grid.send_and_receive(msgs[1:])))
    assert json.loads(built.engine.records[-1]["missing"]) == [int(msgs[0].content["job"]["partition-id"])]  # type: ignore[arg-type]
