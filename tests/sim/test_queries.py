"""The client query registry: a client answers ``label_counts`` and ``bid`` from its own data
and the run's streams alone; the answers equal what the server's own copy gives (the partition's
label histograms, JDP-FL's drawn costs); an unknown name is a clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedgame.core.seeding import Streams
from fedgame.pipeline.build import build_engine, build_jdp
from fedgame.pipeline.config import parse_recipe
from fedgame.sim import QUERIES, ClientView, InProcessExecutor, answer_query
from fedgame.incentives.auctions import draw_costs

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def view(labels: list[int], *, client: int = 0, n_clients: int = 3, classes: int = 4, seed: int = 0) -> ClientView:
    y = torch.tensor(labels, dtype=torch.long)
    return ClientView.of(client, y=y, indices=torch.arange(len(labels)), classes=classes, n_clients=n_clients, streams=Streams(seed=seed))


def test_label_counts_is_the_histogram_of_the_clients_own_labels() -> None:
    got = answer_query("label_counts", view([0, 2, 2, 3, 2]))
    assert got.dtype == np.int64 and got.tolist() == [1, 0, 3, 1]
    assert answer_query("label_counts", view([], classes=3)).tolist() == [0, 0, 0]


def test_bid_is_the_clients_entry_of_the_seeded_cost_draw() -> None:
    costs = draw_costs(Streams(seed=5), 3, low=1, high=1000)
    bids = [float(answer_query("bid", view([0], client=i, seed=5), {"low": 1, "high": 1000})) for i in range(3)]
    assert bids == costs.tolist()
    assert answer_query("bid", view([0], seed=5), {"low": 1, "high": 1000}).shape == ()
    with pytest.raises(ValueError, match=r"query 'bid': needs args 'low' and 'high'.*missing \['high'\]"):
        answer_query("bid", view([0]), {"low": 1})


def test_an_unknown_query_names_itself_and_the_known_ones() -> None:
    assert sorted(QUERIES) == ["bid", "label_counts"]
    with pytest.raises(ValueError, match=r"query 'histogram': unknown; known queries: 'bid', 'label_counts'"):
        answer_query("histogram", view([0]))
    y = torch.tensor([0, 1, 1, 0])
    ex = InProcessExecutor(
        trainer=type("T", (), {"y": y})(), model=torch.nn.Linear(1, 1), parts=[torch.arange(2), torch.arange(2, 4)], streams=Streams(seed=0)
    )  # type: ignore[arg-type]
    assert ex.classes == 2 and [a.tolist() for a in ex.query("label_counts", [1, 0]) if a is not None] == [[1, 1], [1, 1]]
    with pytest.raises(ValueError, match=r"query 'histogram': unknown; known queries: 'bid', 'label_counts'"):
        ex.query("histogram", [0])


def qidpfl(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "q",
        "seed": 0,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 1200,
            "max_test": 100,
            "partition": {"kind": "dirichlet", "n_clients": 6, "alpha": 0.5},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 32, "lr": 0.01}},
        "selection": {"kind": "participants"},
        "aggregation": {"kind": "mean"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "paper_update"},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "qidpfl", "keep_fraction": 0.5},
    }
    raw.update(over)
    return raw


@needs_fmnist
def test_in_process_answers_equal_the_servers_copy() -> None:
    built = build_engine(parse_recipe(qidpfl()))
    ex = built.engine.executor
    got = np.stack([a for a in ex.query("label_counts", np.arange(6)) if a is not None])
    assert np.array_equal(got, built.data.label_counts()) and got.dtype == np.int64


@needs_fmnist
def test_bids_equal_the_costs_of_the_jdp_auction() -> None:
    raw = {
        "name": "jdp_bids",
        "seed": 3,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 600,
            "max_test": 100,
            "validation": 100,
            "partition": {"kind": "iid", "n_clients": 5},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 1, "local": {"epochs": None, "steps": 1, "batch_size": 32, "lr": 0.01}},
        "selection": {"kind": "full"},
        "privacy": {"kind": "none"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "jdp": {
            "aggregator": "fedavg",
            "attack": {"kind": "none"},
            "auction": {"mechanism": "M2", "budget": 1e6, "cost_low": 1, "cost_high": 50},
        },
    }
    built = build_jdp(parse_recipe(raw))
    engine = build_engine(parse_recipe({k: v for k, v in raw.items() if k != "jdp"})).engine
    bids = engine.executor.query("bid", range(5), {"low": 1, "high": 50})
    assert built.costs is not None and [float(b) for b in bids if b is not None] == built.costs.tolist()
