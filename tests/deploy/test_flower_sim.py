"""The Flower bridge in simulation: the same recipe and seed through Flower's Simulation
Engine (Ray) and through the in-process engine select the same clients every round, apply the
same per-client noise, charge the same ledgers and end with the same parameters — exactly
(bit for bit): both sides run the one client function with the same generators, one torch
thread each (``train.threads: 1``), and the server aggregates the replies in job order, not
arrival order, so no summation order depends on scheduling."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")
pytest.importorskip("ray", reason="the flower extra is not installed (pip install -e '.[flower]')")

from fedgame.cli import app  # noqa: E402
from fedgame.deploy.flower import FlowerSimulation  # noqa: E402
from fedgame.pipeline.build import build_engine  # noqa: E402
from fedgame.pipeline.config import parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = [
    pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed"),
    pytest.mark.slow,
]

BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 1}}


def recipe(**over: Any) -> dict[str, Any]:
    """6 clients, 2 rounds, 3 per round; DP-SGD with each client's multiplier calibrated to ε = 8
    (so the noise scale differs per client) and a uniform draw without replacement."""
    raw: dict[str, Any] = {
        "name": "flower_smoke",
        "seed": 11,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 1200,
            "max_test": 300,
            "partition": {"kind": "dirichlet", "n_clients": 6, "alpha": 0.5, "min_size": 30},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 3, "threads": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        "selection": {"kind": "uniform", "replace": False},
        "aggregation": {"kind": "fedavg"},
        "privacy": {"kind": "dpsgd", "max_grad_norm": 1.0, "target_epsilon": 8.0, "delta": 1e-5},
        "accountant": {"kind": "rdp", "delta": 1e-5},
    }
    raw.update(over)
    return raw


def test_flower_simulation_equals_in_process_bit_for_bit() -> None:
    cfg = parse_recipe(recipe())
    ref = build_engine(cfg).engine.run(cfg.train.rounds)

    built = build_engine(cfg)
    sim = FlowerSimulation(backend_config=BACKEND)
    got = sim(built, cfg, lambda: built.engine.run(cfg.train.rounds))

    assert [r["selected"] for r in got.records] == [r["selected"] for r in ref.records]
    assert all(json.loads(g["replied"]) == sorted(set(json.loads(r["selected"]))) for g, r in zip(got.records, ref.records, strict=True))
    assert all(json.loads(r["missing"]) == [] for r in got.records)
    assert np.array_equal(got.epsilons, ref.epsilons)  # the same ledgers
    assert torch.equal(got.params, ref.params)  # the same noise, the same training
    for g, r in zip(got.records, ref.records, strict=True):
        for key in ("train_loss", "clipped_fraction", "test_acc", "test_loss", "eps_max"):
            assert g[key] == r[key] or (np.isnan(g[key]) and np.isnan(r[key])), key
    assert sim.executor is not None and sim.executor.errors == []
    assert len(sim.executor.node_of) == 6
    # Ray and gRPC ran in this process: a worker pool started now no longer forks it
    from fedgame.core.processes import safe_start_method

    assert safe_start_method() == "forkserver"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_fedgame_run_backend_flower_sim_writes_the_in_process_results(tmp_path: Path) -> None:
    """`fedgame run --backend flower-sim` (Ray with its default actors: one per core, replies
    arriving in any order) against `run_one` in process: the same files, the same numbers."""
    raw = recipe(name="files", privacy={"kind": "zcdp_upload", "rho": 0.5, "clip": 1.0}, accountant={"kind": "zcdp"})
    path = tmp_path / "files.yaml"
    path.write_text(yaml.safe_dump(raw))
    a = run_one(parse_recipe(raw), tmp_path / "inprocess")
    r = CliRunner().invoke(app, ["run", str(path), "--backend", "flower-sim", "--out", str(tmp_path / "flower")])
    assert r.exit_code == 0, r.output
    b = json.loads((tmp_path / "flower" / "summary.json").read_text())
    names = sorted(p.name for p in (tmp_path / "inprocess").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "flower").iterdir())
    assert b["backend"] == "flower-sim" and a["backend"] == "inprocess"
    assert b["final_accuracy"] == a["final_accuracy"] and b["epsilon_per_client"] == a["epsilon_per_client"]
    ma, mb = _rows(tmp_path / "inprocess" / "metrics.csv"), _rows(tmp_path / "flower" / "metrics.csv")
    for ra, rb in zip(ma, mb, strict=True):
        assert {k: v for k, v in ra.items() if not k.endswith("time")} == {k: v for k, v in rb.items() if not k.endswith("time")}
    assert _rows(tmp_path / "inprocess" / "privacy.csv") == _rows(tmp_path / "flower" / "privacy.csv")
