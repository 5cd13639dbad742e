"""The Flower bridge without Ray: jobs and results survive the message records bit for bit, and
the executor's discovery, reply matching and missing replies, over an in-memory fake grid that
calls the real ClientApp."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.app import Context, Error, Message, RecordDict  # noqa: E402

from fedgame.core.types import ClientResult  # noqa: E402
from fedgame.deploy.flower import FlowerExecutor, NodesNotReady  # noqa: E402
from fedgame.deploy.flower._messages import decode_job, decode_result, encode_job, encode_result  # noqa: E402
from fedgame.deploy.flower.client_app import make_client_app  # noqa: E402
from fedgame.pipeline.build import build_engine  # noqa: E402
from fedgame.pipeline.config import parse_recipe  # noqa: E402
from fedgame.privacy.mechanisms import GaussianMechanism  # noqa: E402
from fedgame.privacy.plans import DPSGD  # noqa: E402
from fedgame.sim import ClientJob  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


@pytest.fixture(autouse=True)
def task_identity() -> Iterator[None]:
    """Messages are stamped with the process's Flower task identity, which a ServerApp run sets."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def test_a_job_and_its_result_round_trip_exactly() -> None:
    params = torch.randn(1234, generator=torch.Generator().manual_seed(0))
    job = ClientJob(
        t=7,
        client=3,
        copy=1,
        params=params,
        dpsgd=DPSGD(max_grad_norm=0.7, noise_multiplier=1.2345678901234567, sampling="poisson"),
        upload=GaussianMechanism(clip=0.3, noise_std=0.1 / 3),
        grad_variance=True,
    )
    back = decode_job(encode_job(job, info={"local-steps": np.int64(5), "privacy": "dpsgd"}))
    assert torch.equal(back.params, params) and back.params.dtype == torch.float32
    assert (back.t, back.client, back.copy, back.grad_variance) == (7, 3, 1, True)
    assert back.dpsgd == job.dpsgd
    assert back.upload is not None and job.upload is not None
    assert (back.upload.clip, back.upload.noise_std) == (job.upload.clip, job.upload.noise_std)
    plain = decode_job(encode_job(ClientJob(t=0, client=0, copy=0, params=params)))
    assert plain.dpsgd is None and plain.upload is None
    res = ClientResult(3, params * 2, 0.125, 9, 40, {"clipped_fraction": 0.5, "local_grad_variance": 1e-3})
    key, got = decode_result(encode_result(job, res))
    assert key == (7, 3, 1)
    assert torch.equal(got.update, res.update) and (got.train_loss, got.steps, got.n_examples, got.extras) == (0.125, 9, 40, res.extras)


class FakeGrid:
    """Nodes 100+i hold partition i and run the real ClientApp in this process, each with its
    own Context kept across messages; ``dead`` nodes never answer, ``unavailable`` ones answer
    with Flower's NODE_UNAVAILABLE error."""

    def __init__(self, cfg, n: int, *, dead: set[int] | None = None, unavailable: set[int] | None = None, pids: list[int] | None = None):  # type: ignore[no-untyped-def]
        self.app = make_client_app(cfg)
        self.pids = pids if pids is not None else list(range(n))
        self.n = n
        self.dead, self.unavailable = dead or set(), unavailable or set()
        self.sent: list[int] = []
        self.contexts: dict[int, Context] = {}  # one per node, kept across messages (as Flower keeps Context.state)

    def get_node_ids(self) -> Iterable[int]:
        return [100 + i for i in range(len(self.pids))]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        out = []
        for m in messages:
            node = m.metadata.dst_node_id
            self.sent.append(node)
            if node in self.dead:
                continue
            if node in self.unavailable:
                out.append(Message(Error(code=5, reason="node unavailable"), reply_to=m))
                continue
            if node not in self.contexts:
                nc = {"partition-id": self.pids[node - 100], "num-partitions": self.n}
                self.contexts[node] = Context(run_id=1, node_id=node, node_config=nc, state=RecordDict(), run_config={})
            out.append(self.app(m, self.contexts[node]))
        return out


def smoke() -> dict[str, object]:
    return {
        "name": "fake_grid",
        "seed": 2,
        "data": {"dataset": "fashion_mnist", "max_train": 800, "max_test": 100, "partition": {"kind": "iid", "n_clients": 4}},
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
        "selection": {"kind": "uniform"},
        "privacy": {"kind": "zcdp_upload", "rho": 1.0},
        "accountant": {"kind": "zcdp"},
        "aggregation": {"kind": "importance"},
    }


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fake_grid_run_equals_in_process_and_a_dead_node_is_not_charged() -> None:
    cfg = parse_recipe(smoke())
    ref = build_engine(cfg).engine.run(2)
    built = build_engine(cfg)
    ex = FlowerExecutor(FakeGrid(cfg, 4), data=built.data, register_timeout=1)  # type: ignore[arg-type]
    assert ex.connect() == {i: 100 + i for i in range(4)}
    built.engine.executor = ex
    got = built.engine.run(2)
    assert torch.equal(got.params, ref.params) and np.array_equal(got.epsilons, ref.epsilons)

    first = {int(c) for c in json.loads(ref.records[0]["selected"])}
    dead = min(first)
    built = build_engine(cfg)
    ex = FlowerExecutor(FakeGrid(cfg, 4, unavailable={100 + dead}), data=built.data, register_timeout=1)  # type: ignore[arg-type]
    ex.node_of = {i: 100 + i for i in range(4)}  # registered before it died
    built.engine.executor = ex
    res = built.engine.run(1)
    assert json.loads(res.records[0]["missing"]) == [dead]
    assert res.epsilons[dead] == 0 and ex.errors and "node unavailable" in ex.errors[0]


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_discovery_fails_clearly_and_in_bounded_time() -> None:
    cfg = parse_recipe(smoke())
    data = build_engine(cfg).data

    class Three(FakeGrid):
        def get_node_ids(self) -> Iterable[int]:
            return [100, 101, 102]

    tic = time.monotonic()
    with pytest.raises(NodesNotReady, match=r"only 3 of 4 SuperNodes connected after 0.3 s"):
        FlowerExecutor(Three(cfg, 4), data=data, register_timeout=0.3, poll_interval=0.05).connect()  # type: ignore[arg-type]
    assert time.monotonic() - tic < 2
    with pytest.raises(NodesNotReady, match=r"partition 1: claimed by more than one node.*no node holds partition\(s\) \[3\]"):
        FlowerExecutor(FakeGrid(cfg, 4, pids=[0, 1, 1, 2]), data=data, register_timeout=1).connect()  # type: ignore[arg-type]
    with pytest.raises(NodesNotReady, match=r"did not answer the registration query"):
        FlowerExecutor(FakeGrid(cfg, 4, dead={103}), data=data, register_timeout=1).connect()  # type: ignore[arg-type]
    other = parse_recipe({**smoke(), "seed": 3})
    with pytest.raises(NodesNotReady, match=r"another recipe, seed or data files"):
        FlowerExecutor(FakeGrid(other, 4), data=data, register_timeout=1).connect()  # type: ignore[arg-type]


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_query_messages_are_answered_by_the_registry_function() -> None:
    """``query.label_counts`` and ``query.bid`` over the grid give the in-process answers (one
    message per client); an unknown name fails on the server, before anything is sent."""
    cfg = parse_recipe(smoke())
    built = build_engine(cfg)
    grid = FakeGrid(cfg, 4)
    ex = FlowerExecutor(grid, data=built.data, register_timeout=1)  # type: ignore[arg-type]
    ex.connect()
    got = ex.query("label_counts", [2, 0, 3, 1])
    ref = built.engine.executor.query("label_counts", [2, 0, 3, 1])
    assert all(g is not None and r is not None and g.dtype == r.dtype and np.array_equal(g, r) for g, r in zip(got, ref, strict=True))
    bids = ex.query("bid", range(4), {"low": 1, "high": 1000})
    assert [float(b) for b in bids if b is not None] == [
        float(b) for b in built.engine.executor.query("bid", range(4), {"low": 1, "high": 1000}) if b is not None
    ]
    assert ex.queries == {"label_counts": 4, "bid": 4}
    sent = len(grid.sent)
    with pytest.raises(ValueError, match=r"query 'histogram': unknown; known queries: 'bid', 'label_counts'"):
        ex.query("histogram", [0])
    assert len(grid.sent) == sent
    dead = FlowerExecutor(FakeGrid(cfg, 4, unavailable={101}), data=built.data, register_timeout=1)  # type: ignore[arg-type]
    dead.node_of = {i: 100 + i for i in range(4)}
    assert [a is None for a in dead.query("label_counts", range(4))] == [False, True, False, False]
    assert "query 'label_counts'" in dead.errors[0]
