"""The engine's executor seam: clients are reached only through an executor, trainings go in
batches, only replies that arrived are accounted and aggregated, and the record says who replied."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgame.core.types import ClientResult, RoundState
from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import parse_recipe
from fedgame.sim import ClientJob, Engine, InProcessExecutor, MissingReplies

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def smoke(**over: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "name": "seam",
        "seed": 5,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 1200,
            "max_test": 200,
            "partition": {"kind": "dirichlet", "n_clients": 8, "alpha": 0.5, "min_size": 20},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        "selection": {"kind": "uniform", "replace": False},
        "privacy": {"kind": "zcdp_upload", "rho": 1.0},
        "accountant": {"kind": "zcdp"},
        "aggregation": {"kind": "importance"},
    }
    raw.update(over)
    return raw


class Recording:
    """Wraps an in-process executor: records every batch, optionally drops some clients' replies."""

    def __init__(self, inner: InProcessExecutor, drop: set[int] | None = None) -> None:
        self.inner, self.drop = inner, drop or set()
        self.batches: list[list[tuple[int, int, int]]] = []
        self.loss_calls: list[list[int]] = []

    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        self.batches.append([(j.t, j.client, j.copy) for j in jobs])
        out = self.inner.train(jobs)
        return [None if j.client in self.drop else r for j, r in zip(jobs, out, strict=True)]

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        self.loss_calls.append([int(c) for c in clients])
        return self.inner.losses(params, clients)


def wrap(engine: Engine, drop: set[int] | None = None) -> Recording:
    assert isinstance(engine.executor, InProcessExecutor)
    rec = Recording(engine.executor, drop)
    engine.executor = rec
    return rec


def test_a_wrapped_executor_changes_nothing_and_every_round_is_one_batch() -> None:
    cfg = parse_recipe(smoke())
    plain = build_engine(cfg).engine.run(2)
    eng = build_engine(cfg).engine
    rec = wrap(eng)
    res = eng.run(2)
    assert torch.equal(plain.params, res.params)
    assert np.array_equal(plain.epsilons, res.epsilons)
    assert len(rec.batches) == 2  # one batch of jobs per round
    for r in res.records:
        assert json.loads(r["replied"]) == sorted(set(json.loads(r["selected"])))
        assert json.loads(r["missing"]) == []


def test_exact_aocs_trains_everyone_in_one_batch_and_reuses_it() -> None:
    eng = build_engine(parse_recipe(smoke(selection={"kind": "aocs", "stale_norms": False}))).engine
    rec = wrap(eng)
    eng.run(2)
    assert [len(b) for b in rec.batches] == [8, 8]  # the probe's batch; the selected reuse it


def test_power_of_choice_asks_all_candidate_losses_at_once() -> None:
    eng = build_engine(
        parse_recipe(smoke(selection={"kind": "power_of_choice", "d": 6, "losses": "current"}, aggregation={"kind": "fedavg"}))
    ).engine
    rec = wrap(eng)
    eng.run(2)
    assert [len(c) for c in rec.loss_calls] == [6, 6]


def test_a_missing_reply_is_not_charged_not_aggregated_and_is_recorded() -> None:
    cfg = parse_recipe(smoke(train={"rounds": 1, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}}))
    full = build_engine(cfg).engine
    sel = full.selection.select(RoundState(t=0, k=3, sizes=full.sizes, theta=full.theta), full.streams.numpy("selection", 0))
    dead = int(sel.clients[0])
    eng = build_engine(cfg).engine
    wrap(eng, drop={dead})
    res = eng.run(1)
    rec = res.records[0]
    assert json.loads(rec["missing"]) == [dead]
    assert dead not in json.loads(rec["replied"]) and len(json.loads(rec["replied"])) == 2
    assert res.epsilons[dead] == 0
    assert np.all(res.epsilons[[c for c in sel.clients if c != dead]] > 0)
    # the aggregate is the importance-weighted sum over the replies that arrived (the dead
    # client's slot counts as a zero update): recompute it from the in-process results
    ref = build_engine(cfg).engine
    start = ref.params.clone()
    w = sel.importance_weights(ref.theta)
    got = ref.executor.train([ref.job(0, int(c), 0) for c in sel.indices])
    expect = start + sum(float(wj) * r.update for wj, r, c in zip(w, got, sel.indices, strict=True) if c != dead)  # type: ignore[union-attr]
    assert torch.allclose(res.params, expect, atol=1e-6)


def test_on_missing_fail_stops_with_the_clients_named() -> None:
    cfg = parse_recipe(smoke())
    eng = build_engine(cfg).engine
    wrap(eng, drop=set(range(8)))
    eng.on_missing = "fail"
    with pytest.raises(MissingReplies, match=r"round 0: no reply from selected client\(s\)"):
        eng.run(1)


def test_nobody_replies_keeps_the_params() -> None:
    eng = build_engine(parse_recipe(smoke())).engine
    start = eng.params.clone()
    wrap(eng, drop=set(range(8)))
    res = eng.run(1)
    assert torch.equal(res.params, start)
    assert np.all(res.epsilons == 0)
    assert json.loads(res.records[0]["replied"]) == []
