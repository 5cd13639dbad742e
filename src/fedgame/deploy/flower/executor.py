"""The engine's executor over a Flower Grid: one Message per job, to the node holding its partition.

The fedgame :class:`~fedgame.sim.engine.Engine` keeps selection, privacy plans, accounting and
aggregation on the server; :class:`FlowerExecutor` only carries its jobs to SuperNodes and the
results back. Before the first round, :meth:`FlowerExecutor.connect` waits (bounded by
``register_timeout``) until the expected number of nodes has registered — nodes join
asynchronously — and asks each for its partition id, so selection works on fedgame partition
ids, never on Flower's random node ids.

A job whose reply does not arrive within ``round_timeout`` seconds, or comes back as a Flower
error (the node died: ``NODE_UNAVAILABLE``; the ClientApp raised), is returned as None; the
engine then aggregates the replies that arrived, or stops (``on_missing``).

:meth:`FlowerExecutor.query` sends one ``query.<name>`` message per client for the named
client queries of :data:`fedgame.sim.client.QUERIES` (label histograms, auction bids), which
the ClientApp answers with the same registry function the in-process executor calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedgame.core.types import ClientResult  # noqa: E402
from fedgame.data import FederatedDataset  # noqa: E402
from fedgame.deploy.flower._messages import (  # noqa: E402
    LOSSES,
    REGISTER,
    TRAIN,
    JobKey,
    config_record,
    decode_answer,
    decode_result,
    encode_job,
    encode_params,
    metric_record,
    query_type,
)
from fedgame.sim.client import ClientJob, QueryArgs, check_query  # noqa: E402
from fedgame.sim.engine import MissingReplies  # noqa: E402

__all__ = ["FlowerExecutor", "NodesNotReady"]

log = logging.getLogger(__name__)


class NodesNotReady(MissingReplies):
    """The expected SuperNodes did not all register (or registered inconsistently) in time.
    A :class:`MissingReplies`, so the CLI reports it as a clear error, not a traceback."""


def _error_text(msg: Message) -> str:
    return f"error {msg.error.code}: {msg.error.reason}"


class FlowerExecutor:
    """Runs the engine's jobs on Flower nodes through ``grid`` (simulation or deployment).

    ``data`` is the server's copy of the federated dataset: its partition fingerprint and
    client sizes are checked against what every node reports at registration (a subclass
    that holds no copy, the silo deployment's, gives ``n_clients`` instead).
    ``info(job)`` adds read-only fields to each train message (local steps, plan name...)."""

    def __init__(
        self,
        grid: Grid,
        *,
        data: FederatedDataset | None = None,
        n_clients: int | None = None,
        round_timeout: float | None = None,
        register_timeout: float = 120.0,
        poll_interval: float = 0.5,
        info: Callable[[ClientJob], Mapping[str, int | float | str]] | None = None,
    ) -> None:
        if round_timeout is not None and not round_timeout > 0:
            raise ValueError(f"round_timeout: must be > 0 seconds (or None: wait for every reply), got {round_timeout}")
        if not register_timeout > 0:
            raise ValueError(f"register_timeout: must be > 0 seconds, got {register_timeout}")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval: must be > 0 seconds, got {poll_interval}")
        if data is not None and n_clients is None:
            n_clients = int(data.n_clients)
        elif data is not None or n_clients is None:
            raise ValueError("FlowerExecutor: give data (the server's copy of the partition) or n_clients, exactly one")
        self.grid = grid
        self.data = data
        self.n_clients = int(n_clients)
        self.round_timeout = round_timeout
        self.register_timeout = float(register_timeout)
        self.poll_interval = float(poll_interval)
        self.info = info
        self.node_of: dict[int, int] = {}
        self.errors: list[str] = []  # every error reply, for the run's log
        self.queries: dict[str, int] = {}  # query name -> messages sent (the run's log, tests)

    # -- discovery ----------------------------------------------------------------------
    def connect(self) -> dict[int, int]:
        """Wait until ``n_clients`` nodes are connected, learn each one's partition id, and
        return ``{partition id: node id}``; :class:`NodesNotReady` after ``register_timeout``."""
        if self.data is None:
            raise RuntimeError("FlowerExecutor: connect() checks the nodes' partitions against the server's data; none was given")
        deadline = time.monotonic() + self.register_timeout
        n = self.n_clients
        nodes = self._wait_for_nodes(
            deadline, f'start one SuperNode per partition (--node-config "partition-id=<0..{n - 1}> num-partitions={n}")'
        )
        log.info("%d nodes connected; asking for their partitions", len(nodes))
        msgs = [Message(RecordDict({"ask": ConfigRecord({"what": "partition"})}), dst_node_id=i, message_type=REGISTER) for i in nodes]
        replies = list(self.grid.send_and_receive(msgs, timeout=max(1.0, deadline - time.monotonic())))
        part_of: dict[int, int] = {}
        problems: list[str] = []
        sizes = np.asarray(self.data.sizes)
        for r in replies:
            src = int(r.metadata.src_node_id)
            if r.has_error():
                problems.append(f"node {src}: {_error_text(r)}")
                continue
            info = config_record(r.content, "node")
            pid = int(info["partition-id"])
            if str(info["fingerprint"]) != self.data.fingerprint:
                problems.append(
                    f"node {src} (partition {pid}) built partition fingerprint {info['fingerprint']}, the server "
                    f"{self.data.fingerprint}: it runs another recipe, seed or data files"
                )
            elif int(info["n-examples"]) != int(sizes[pid]):
                problems.append(f"node {src} (partition {pid}) holds {info['n-examples']} examples, the server expects {sizes[pid]}")
            if pid in part_of.values():
                problems.append(f"partition {pid}: claimed by more than one node (partition-id must be unique)")
            part_of[src] = pid
        silent = sorted(set(nodes) - {int(r.metadata.src_node_id) for r in replies})
        if silent:
            problems.append(f"node(s) {silent} did not answer the registration query in time")
        missing = sorted(set(range(n)) - set(part_of.values()))
        if missing:
            problems.append(f"no node holds partition(s) {missing}")
        if problems:
            raise NodesNotReady("Flower nodes: " + "; ".join(problems))
        self.node_of = {pid: node for node, pid in part_of.items()}
        log.info("partition -> node map complete (%d partitions)", len(self.node_of))
        return dict(self.node_of)

    def _wait_for_nodes(self, deadline: float, hint: str) -> list[int]:
        """The connected node ids, sorted, once ``n_clients`` are connected; NodesNotReady
        (ending with ``hint``: how to start the missing ones) at ``deadline``."""
        n = self.n_clients
        while True:
            nodes = sorted(int(i) for i in self.grid.get_node_ids())
            if len(nodes) >= n:
                return nodes
            if time.monotonic() >= deadline:
                raise NodesNotReady(f"only {len(nodes)} of {n} SuperNodes connected after {self.register_timeout:g} s; {hint}")
            time.sleep(self.poll_interval)

    def _content(self, client: int, records: dict[str, Any]) -> RecordDict:
        """The content of a query or loss message to ``client``'s node (a silo executor adds
        the client index, which its node does not know)."""
        del client
        return RecordDict(records)

    def _received(self, query: str, client: int, node: int, answer: Any) -> None:
        """Called with every answer a node sent (a silo executor lists them in the run folder)."""

    def _node(self, client: int) -> int:
        if not self.node_of:
            raise RuntimeError("FlowerExecutor: call connect() before sending jobs")
        return self.node_of[int(client)]

    # -- the Executor protocol ------------------------------------------------------------
    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        """One train message per job, all sent at once; the replies matched back to the jobs."""
        if not jobs:
            return []
        msgs = self.messages(jobs)
        return self.collect(jobs, msgs, self.grid.send_and_receive(msgs, timeout=self.round_timeout))

    def messages(self, jobs: Sequence[ClientJob]) -> list[Message]:
        """The train message of each job, addressed to the node holding its partition."""
        return [
            Message(
                encode_job(j, info=None if self.info is None else self.info(j)),
                dst_node_id=self._node(j.client),
                message_type=TRAIN,
                group_id=str(j.t),
            )
            for j in jobs
        ]

    def collect(self, jobs: Sequence[ClientJob], msgs: Sequence[Message], replies: Iterable[Message]) -> list[ClientResult | None]:
        """The result of each job from ``replies`` to ``msgs`` (sent), None where none came
        back or the node answered with an error (logged in :attr:`errors`)."""
        # the grid stamps each message it pushes with its id; an error the SuperLink writes for
        # a dead node comes from the SuperLink itself, so its job is found by the id it answers
        sent = {m.metadata.message_id: j for m, j in zip(msgs, jobs, strict=True) if m.metadata.message_id}
        got: dict[JobKey, ClientResult] = {}
        partition_of = {node: pid for pid, node in self.node_of.items()}
        for r in replies:
            if r.has_error():
                job = sent.get(r.metadata.reply_to_message_id)
                who = job.client if job is not None else partition_of.get(int(r.metadata.src_node_id), "?")
                text = f"round {jobs[0].t}, partition {who}: {_error_text(r)}"
                self.errors.append(text)
                log.warning("no result: %s", text)
                continue
            key, res = decode_result(r.content)
            got[key] = res
        return [got.get((j.t, j.client, j.copy)) for j in jobs]

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        """One ``query.losses`` message per client; NaN where no reply came back."""
        clients = np.asarray(clients, dtype=np.int64)
        record = encode_params(params)
        msgs = [Message(self._content(int(c), {"params": record}), dst_node_id=self._node(int(c)), message_type=LOSSES) for c in clients]
        out = {int(c): float("nan") for c in clients}
        for r in self.grid.send_and_receive(msgs, timeout=self.round_timeout):
            if r.has_error():
                self.errors.append(_error_text(r))
                log.warning("no loss: %s", _error_text(r))
                continue
            m = metric_record(r.content, "loss")
            out[int(m["partition-id"])] = float(m["loss"])
            self._received("losses", int(m["partition-id"]), int(r.metadata.src_node_id), {"loss": float(m["loss"])})
        return np.array([out[int(c)] for c in clients], dtype=np.float64)

    def query(self, name: str, clients: Sequence[int] | np.ndarray, args: QueryArgs | None = None) -> list[np.ndarray | None]:
        """One ``query.<name>`` message per client, answered by the node's ClientApp with the
        registry function of :mod:`fedgame.sim.client`; None where no reply came back."""
        check_query(name)
        clients = [int(c) for c in clients]
        if not clients:
            return []
        msgs = [
            Message(self._content(c, {"args": ConfigRecord(dict(args or {}))}), dst_node_id=self._node(c), message_type=query_type(name))
            for c in clients
        ]
        self.queries[name] = self.queries.get(name, 0) + len(msgs)
        got: dict[int, np.ndarray] = {}
        for r in self.grid.send_and_receive(msgs, timeout=self.round_timeout):
            if r.has_error():
                text = f"query {name!r}: {_error_text(r)}"
                self.errors.append(text)
                log.warning("no answer: %s", text)
                continue
            _, pid, answer = decode_answer(r.content)
            got[pid] = answer
            self._received(name, pid, int(r.metadata.src_node_id), answer.tolist())
        return [got.get(c) for c in clients]

    def describe(self) -> dict[str, Any]:
        """What the run's summary records about the deployment."""
        return {"nodes": len(self.node_of), "errors": list(self.errors), "queries": dict(self.queries)}
