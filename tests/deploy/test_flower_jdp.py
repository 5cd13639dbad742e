"""JDP-FL on Flower, without Ray: the real ClientApp on an in-memory grid whose nodes keep
their Context across messages. The auction runs on the nodes' bids, each winner trains from
the model its node keeps, uploads M3 and applies M5 to the server's publication — and the run
equals the in-process one (uploads, draws, ledgers, metrics), while the server never holds a
winner's model; a run cannot resume from the server's checkpoint, and says so."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from fedgame.deploy.flower.jdp import FlowerJDPClients  # noqa: E402
from fedgame.deploy.flower.strategy import FedgameStrategy, attach_flower  # noqa: E402
from fedgame.pipeline.build import BuiltJDP  # noqa: E402
from fedgame.pipeline.config import RunConfig, parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from fedgame.sim import RunResult  # noqa: E402
from tests.deploy.test_flower_messages import FakeGrid, task_identity  # noqa: E402,F401

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def jdp_recipe(**jdp: Any) -> dict[str, Any]:
    """6 candidates, an M2 auction on their bids, a dirty-label adversary among the winners,
    M3 at eps = 2, leave-one-out M4 + M5, 2 rounds."""
    return {
        "name": "jdp_flower",
        "seed": 5,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 900,
            "max_test": 200,
            "validation": 150,
            "partition": {"kind": "iid", "n_clients": 6},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "threads": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9}},
        "selection": {"kind": "full"},
        "privacy": {"kind": "jdp", "epsilon": 2.0, "delta": 1e-5, "clip": 20, "sensitivity": "record", "calibrator": "analytic"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "jdp": {
            "aggregator": "leave_one_out",
            "attack": {"kind": "dirty_label"},
            "auction": {"mechanism": "M2", "budget": 3000, "cost_low": 1, "cost_high": 1000},
            **jdp,
        },
    }


class FakeFlower:
    """``run_one``'s execute hook: the run's clients are FakeGrid nodes."""

    name = "flower-fake"

    def __init__(self) -> None:
        self.grid: FakeGrid | None = None
        self.clients: FlowerJDPClients | None = None

    def __call__(self, built: BuiltJDP, cfg: RunConfig, run: Any) -> RunResult:
        self.grid = FakeGrid(cfg, cfg.data.partition.n_clients)
        ex = attach_flower(self.grid, built, cfg, round_timeout=None, register_timeout=1)  # type: ignore[arg-type]
        assert isinstance(built.engine.clients, FlowerJDPClients)
        assert isinstance(built.engine.driver, FedgameStrategy)  # the one strategy drives JDP-FL's rounds too
        self.clients = built.engine.clients
        with pytest.raises(AttributeError, match="live on their nodes"):
            built.engine.thetas  # noqa: B018 - the server holds no winner's model
        self.queries = dict(ex.queries)
        result: RunResult = run()
        return result

    def describe(self) -> dict[str, Any]:
        return {"queries": self.queries}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return [{k: v for k, v in r.items() if not k.endswith("time")} for r in csv.DictReader(f)]


@pytest.mark.parametrize("aggregator", ["leave_one_out", "fedavg"])
def test_jdp_on_flower_nodes_equals_in_process(aggregator: str, tmp_path: Path) -> None:
    cfg = parse_recipe(jdp_recipe(aggregator=aggregator))
    a = run_one(cfg, tmp_path / "inprocess")
    hook = FakeFlower()
    b = run_one(cfg, tmp_path / "flower", execute=hook)  # type: ignore[arg-type]
    assert b["backend"] == "flower-fake" and b["backend_info"]["queries"] == {"bid": 6}
    ja, jb = (json.loads((tmp_path / d / "jdp.json").read_text()) for d in ("inprocess", "flower"))
    assert jb == ja and len(ja["winners"]) >= 3 and ja["adversary"] in ja["winners"]  # the auction on the nodes' bids
    assert _rows(tmp_path / "flower" / "metrics.csv") == _rows(tmp_path / "inprocess" / "metrics.csv")
    assert _rows(tmp_path / "flower" / "privacy.csv") == _rows(tmp_path / "inprocess" / "privacy.csv")
    assert b["final_accuracy"] == a["final_accuracy"] and b["epsilon_per_client"] == a["epsilon_per_client"]
    assert hook.grid is not None and hook.clients is not None
    assert hook.clients.executor.errors == []
    winners = set(ja["winners"])
    kept = {hook.grid.pids[node - 100] for node, ctx in hook.grid.contexts.items() if "fedgame-jdp" in ctx.state}
    assert kept == winners  # every winner's model is in its node's state, nobody else trained
    # 6 registrations + 6 bids, then 2 messages per winner and round
    assert len(hook.grid.sent) == 6 + 6 + 2 * 2 * len(winners)


def test_a_jdp_run_on_flower_cannot_resume_from_the_server_checkpoint(tmp_path: Path) -> None:
    from fedgame.pipeline.build import build_jdp
    from fedgame.pipeline.store import ResultStore

    cfg = parse_recipe(jdp_recipe())
    run_one(cfg, tmp_path / "run")
    (tmp_path / "run" / "summary.json").unlink()  # as if killed after round 0's checkpoint
    eng = build_jdp(cfg).engine
    eng.run(1)
    ResultStore(tmp_path / "run").save_checkpoint(eng.state_dict())
    with pytest.raises(RuntimeError, match="keeps every winner's model on its node.*cannot resume"):
        run_one(cfg, tmp_path / "run", resume=True, execute=FakeFlower())  # type: ignore[arg-type]


@pytest.mark.slow
def test_fedgame_run_jdp_on_flower_simulation_equals_in_process(tmp_path: Path) -> None:
    """`fedgame run --backend flower-sim` of a JDP-FL recipe: the ClientApps in Ray's workers
    bid, train, perturb and apply M5 with the models their nodes keep; same files, same numbers."""
    pytest.importorskip("ray", reason="the flower extra is not installed (pip install -e '.[flower]')")
    import yaml
    from typer.testing import CliRunner

    from fedgame.cli import app

    raw = jdp_recipe()
    path = tmp_path / "jdp.yaml"
    path.write_text(yaml.safe_dump(raw))
    a = run_one(parse_recipe(raw), tmp_path / "inprocess")
    r = CliRunner().invoke(app, ["run", str(path), "--backend", "flower-sim", "--out", str(tmp_path / "flower")])
    assert r.exit_code == 0, r.output
    b = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert b["backend"] == "flower-sim" and b["backend_info"]["queries"] == {"bid": 6} and b["backend_info"]["errors"] == []
    assert b["final_accuracy"] == a["final_accuracy"] and b["epsilon_per_client"] == a["epsilon_per_client"]
    assert json.loads((tmp_path / "flower" / "jdp.json").read_text()) == json.loads((tmp_path / "inprocess" / "jdp.json").read_text())
    assert _rows(tmp_path / "flower" / "metrics.csv") == _rows(tmp_path / "inprocess" / "metrics.csv")


def test_the_flower_strategy_in_a_users_server_app_runs_jdp_fl(tmp_path: Path) -> None:
    """``FedgameStrategy(build_jdp(cfg), cfg)`` put in one's own ServerApp (Flower's
    ``Strategy.start`` loop): the auction on the nodes' bids, then per round the train.jdp
    messages and the publications; the same model, records and ledgers as in process."""
    import torch
    from flwr.serverapp.strategy import Strategy

    from fedgame.deploy.flower._messages import decode_params
    from fedgame.pipeline.build import build_jdp
    from fedgame.pipeline.store import ResultStore

    cfg = parse_recipe(jdp_recipe())
    ref = build_jdp(cfg).engine.run(cfg.train.rounds)
    built = build_jdp(cfg)
    grid = FakeGrid(cfg, cfg.data.partition.n_clients)
    strategy = FedgameStrategy(built, cfg, register_timeout=1, sink=ResultStore(tmp_path))
    assert isinstance(strategy, Strategy)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=cfg.train.rounds)  # type: ignore[arg-type]
    assert torch.equal(decode_params(result.arrays), ref.params)
    assert [r["chosen"] for r in built.engine.records] == [r["chosen"] for r in ref.records]
    assert [r["test_acc"] for r in built.engine.records] == [r["test_acc"] for r in ref.records]
    assert (built.engine.accountant.epsilons(1e-5) == ref.epsilons).all()
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    with (tmp_path / "metrics.csv").open() as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["0", "1"]
