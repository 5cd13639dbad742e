"""Query messages on Flower's Simulation Engine (Ray): a QI-DPFL run screens on the label
histograms its nodes sent as ``query.label_counts`` messages (the server's copy of the
partition is made unavailable) and still equals the in-process run bit for bit; JDP-FL's cost
bids (``query.bid``) are the in-process answers and the auction's costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")
pytest.importorskip("ray", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.app import Context  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedgame.data import FederatedDataset  # noqa: E402
from fedgame.deploy.flower import FlowerExecutor, FlowerSimulation  # noqa: E402
from fedgame.deploy.flower.client_app import make_client_app  # noqa: E402
from fedgame.pipeline.build import build_engine, build_jdp  # noqa: E402
from fedgame.pipeline.config import parse_recipe  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = [
    pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed"),
    pytest.mark.slow,
]

BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 1}}


def qidpfl() -> dict[str, Any]:
    """A smoke QI-DPFL run (tests/pipeline/test_qidpfl_run.py, smaller): 6 candidates, half
    kept by the EMD screening, the game's participation sets train for 2 rounds."""
    return {
        "name": "qidpfl_flower",
        "seed": 0,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 1200,
            "max_test": 200,
            "partition": {"kind": "dirichlet", "n_clients": 6, "alpha": 0.5},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 3, "threads": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.01}},
        "selection": {"kind": "participants"},
        "aggregation": {"kind": "mean"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "paper_update"},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "qidpfl", "keep_fraction": 0.5},
    }


def test_qidpfl_on_flower_screens_on_queried_histograms_and_equals_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = parse_recipe(qidpfl())
    ref_built = build_engine(cfg)
    ref = ref_built.engine.run(cfg.train.rounds)

    built = build_engine(cfg)

    def unavailable(self: FederatedDataset) -> np.ndarray:
        raise AssertionError("the server read its own copy of the label histograms")

    # from here on the server has no histograms but the ones its nodes send (the ClientApps
    # run in Ray's worker processes and answer with the registry function)
    monkeypatch.setattr(FederatedDataset, "label_counts", unavailable)
    sim = FlowerSimulation(backend_config=BACKEND)
    got = sim(built, cfg, lambda: built.engine.run(cfg.train.rounds))

    assert sim.executor is not None and sim.executor.queries == {"label_counts": 6} and sim.executor.errors == []
    assert built.plan is not None and ref_built.plan is not None
    assert built.plan.kept.tolist() == ref_built.plan.kept.tolist() and np.array_equal(built.plan.rho, ref_built.plan.rho)
    assert [r["selected"] for r in got.records] == [r["selected"] for r in ref.records]
    assert np.array_equal(got.epsilons, ref.epsilons) and torch.equal(got.params, ref.params)
    for g, r in zip(got.records, ref.records, strict=True):
        for key in ("train_loss", "test_acc", "test_loss", "reward", "payments", "rho_global"):
            assert g[key] == r[key] or (np.isnan(g[key]) and np.isnan(r[key])), key


def test_jdp_bids_over_flower_equal_in_process_and_the_auction_costs() -> None:
    raw = {
        "name": "jdp_bids",
        "seed": 3,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 600,
            "max_test": 100,
            "validation": 100,
            "partition": {"kind": "iid", "n_clients": 4},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 1, "threads": 1, "local": {"epochs": None, "steps": 1, "batch_size": 32, "lr": 0.01}},
        "selection": {"kind": "full"},
        "privacy": {"kind": "none"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "jdp": {
            "aggregator": "fedavg",
            "attack": {"kind": "none"},
            "auction": {"mechanism": "M2", "budget": 1e6, "cost_low": 1, "cost_high": 50},
        },
    }
    cfg = parse_recipe(raw)
    jdp = build_jdp(cfg)
    args = {"low": 1, "high": 50}
    in_process = build_engine(parse_recipe({k: v for k, v in raw.items() if k != "jdp"})).engine.executor
    box: dict[str, Any] = {}
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        ex = FlowerExecutor(grid, data=jdp.data, register_timeout=300)
        ex.connect()
        box["bids"] = ex.query("bid", [3, 1, 0, 2], args)
        box["errors"] = list(ex.errors)

    from flwr.simulation import run_simulation

    run_simulation(server_app=app, client_app=make_client_app(cfg), num_supernodes=4, backend_config=dict(BACKEND))  # type: ignore[arg-type]
    assert box.get("errors") == []
    flower = [float(b) for b in box["bids"]]
    assert flower == [float(b) for b in in_process.query("bid", [3, 1, 0, 2], args) if b is not None]
    assert jdp.costs is not None and flower == jdp.costs[[3, 1, 0, 2]].tolist()
