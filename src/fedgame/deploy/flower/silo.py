"""Silo deployments: every SuperNode trains on its own files, and the ServerApp never opens them.

A silo app (``fedgame flower app RECIPE DIR --silo``) starts each SuperNode with its own data
folder (``--node-config "data-dir='/srv/silo-a'"``); the node loads its files with the recipe's
dataset plug-in and its whole training split is its client data (:mod:`.client_app`). The server
side here:

1. :meth:`SiloExecutor.connect` waits for the recipe's ``n_clients`` nodes, gives them client
   indices in the order of their Flower node ids, and asks each for its
   :class:`~fedgame.data.SiloReport` (``query.register``: number of examples, label histogram,
   kind and shape of an example, number of classes, fingerprint of its files). A node whose
   data cannot be read answers with an error naming it and its folder, and the run stops with
   one line naming every such node (:class:`SiloRefused`); so do nodes that disagree on the
   shape, the kind of example or the number of classes.
2. :func:`build_silo` builds the engine exactly as for an in-process run, on a
   :class:`~fedgame.data.SiloDataset` made of the reports (no example), with the executor as
   the engine's only way to its clients: whatever a plan or a selection needs of them (label
   histograms for Fed-CBS / QI-DPFL screening, losses for power-of-choice, trial trainings for
   AOCS) is asked as query messages.
3. Evaluation: on the server's own test set when it has one (``server-data``), else federated —
   every node with a held-out split evaluates the global model on it (Flower's ``evaluate``
   message) and the server averages accuracy and loss weighted by those splits' sizes.

A JDP-FL recipe (:func:`build_silo` with a ``jdp`` section) registers the nodes the same way,
holds the auction on their ``query.bid`` answers (:func:`~fedgame.deploy.flower.jdp.ask_bids`),
builds the JDP engine on the reports (:func:`~fedgame.pipeline.build.build_jdp`) and drives the
winners' rounds with ``train.jdp``/``train.jdp_publish`` messages that name the client index
(:class:`~fedgame.deploy.flower.jdp.FlowerJDPClients`); each winner's model stays on its node. A
personal rule (``leave_one_out``, ``random_groups``) scores the groups on the server's *own*
validation set: ``data.validation`` examples drawn (the ``validation`` stream, as in process)
from the training split of the server's data folder, ``server-data`` — whose test split, when it
has one, the server also evaluates on (:func:`server_validation`). Without ``server-data`` such a
recipe is refused in one line before any node is asked anything. A JDP-FL silo run cannot resume
(the winners' models are on their nodes, not in the checkpoint).

Every answer the server received from a node is listed, one JSON line each, in the run
folder's ``queries.jsonl`` (:class:`QueryLog`): round (null before training), query
(``register``, ``label_counts``, ``losses``, ``bid``, ``train``, ``evaluate``...), Flower node
id, client index and what was answered — sizes, histograms, losses, metrics; of a training
reply its metrics and the size of its (noised) update, not the update itself. So a user sees
what left each silo.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedgame.core.types import ClientResult  # noqa: E402
from fedgame.core.seeding import Streams  # noqa: E402
from fedgame.data import ArrayDataset, DatasetSplit, SiloDataset, SiloReport, check_agreement  # noqa: E402
from fedgame.deploy.flower._messages import (  # noqa: E402
    CLIENT,
    EVALUATE,
    REGISTER,
    client_record,
    config_record,
    encode_params,
    metric_record,
)
from fedgame.deploy.flower.executor import FlowerExecutor, NodesNotReady, _error_text  # noqa: E402
from fedgame.deploy.flower.jdp import FlowerJDPClients, ask_bids  # noqa: E402
from fedgame.deploy.flower.strategy import job_info  # noqa: E402
from fedgame.models import model_options  # noqa: E402
from fedgame.pipeline.build import (  # noqa: E402
    Built,
    BuiltJDP,
    build_engine,
    build_jdp,
    check_delta,
    check_silo,
    scores_on_validation,
)
from fedgame.pipeline.config import RunConfig  # noqa: E402
from fedgame.sim.client import ClientJob  # noqa: E402

__all__ = ["QUERY_LOG", "QueryLog", "SiloExecutor", "SiloRefused", "build_silo", "check_server_data", "server_validation"]

log = logging.getLogger(__name__)

QUERY_LOG = "queries.jsonl"
"""The run folder's list of every answer the server received from a silo node."""

SILO_HINT = "start one SuperNode per silo, each with its own data: --node-config \"data-dir='/path/to/its/data'\""


class SiloRefused(NodesNotReady):
    """The silo nodes cannot run the recipe: a node's data is missing or unreadable, the nodes
    disagree on their data's shape or classes, or the evaluation has nothing to evaluate on.
    One line naming the nodes (a :class:`~fedgame.sim.engine.MissingReplies`, so the CLI and
    the ServerApp report it without a traceback)."""


def _plain(value: Any) -> Any:
    """``value`` as strict JSON: non-finite floats become null, NumPy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class QueryLog:
    """What left the silos: one entry per answer the server received (``entries``), appended
    as a JSON line to ``path`` (None: kept in memory only) as soon as it arrives, so a run
    that fails still lists what it was told."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.entries: list[dict[str, Any]] = []

    def write(self, *, round: int | None, query: str, node: int, client: int, answer: Any) -> None:
        entry = {"round": round, "query": query, "node": int(node), "client": int(client), "answer": _plain(answer)}
        self.entries.append(entry)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry, allow_nan=False) + "\n")


class SiloExecutor(FlowerExecutor):
    """The engine's executor over the silo nodes behind ``grid`` (module docstring): client
    ``i`` is the ``i``-th smallest Flower node id; every message to a node names the client
    index it answers as; every answer is written to ``log``. ``round_of()`` is the round the
    engine is in (set by :func:`build_silo`; None before training)."""

    def __init__(
        self,
        grid: Grid,
        *,
        n_clients: int,
        log: QueryLog | None = None,
        round_timeout: float | None = None,
        register_timeout: float = 300.0,
        poll_interval: float = 0.5,
    ) -> None:
        super().__init__(
            grid, n_clients=n_clients, round_timeout=round_timeout, register_timeout=register_timeout, poll_interval=poll_interval
        )
        self.log = log if log is not None else QueryLog(None)
        self.reports: list[SiloReport] = []
        self.round_of: Callable[[], int | None] = lambda: None
        self.order: list[str] | None = None
        """On resume, the data fingerprints of the checkpointed run's clients in client order
        (its ``partition.json``): :meth:`connect` gives client ``i`` to the node whose files have
        ``order[i]``'s fingerprint, whatever Flower node id it has now (a restarted SuperNode
        gets a new one)."""

    # -- registration --------------------------------------------------------------------
    def connect(self) -> dict[int, int]:
        """Wait for ``n_clients`` nodes, ask each for its report and return ``{client: node}``
        (clients in node-id order); :class:`SiloRefused` naming every node whose data could not
        be read (or that disagrees with the others), NodesNotReady when too few or too many
        nodes connect within ``register_timeout``."""
        deadline = time.monotonic() + self.register_timeout
        n = self.n_clients
        nodes = self._wait_for_nodes(deadline, SILO_HINT)
        if len(nodes) > n:
            raise NodesNotReady(
                f"{len(nodes)} SuperNodes connected, the recipe has {n} clients (data.partition.n_clients, "
                f"`fedgame flower app --nodes N`): a silo federation trains every node, so start exactly {n}"
            )
        log.info("%d silo nodes connected; asking for their data reports", len(nodes))
        msgs = [Message(RecordDict({"ask": ConfigRecord({"what": "silo"})}), dst_node_id=i, message_type=REGISTER) for i in nodes]
        replies = list(self.grid.send_and_receive(msgs, timeout=max(1.0, deadline - time.monotonic())))
        problems: list[str] = []
        got: dict[int, SiloReport] = {}
        for r in replies:
            src = int(r.metadata.src_node_id)
            if r.has_error():
                problems.append(f"node {src}: {_error_text(r)}")
                continue
            info = config_record(r.content, "node")
            if "error" in info:
                problems.append(str(info["error"]))
                continue
            try:
                got[src] = SiloReport.from_record(src, info)
            except ValueError as e:
                problems.append(str(e))
        silent = sorted(set(nodes) - {int(r.metadata.src_node_id) for r in replies})
        if silent:
            problems.append(f"node(s) {silent} did not answer the registration query in time")
        if problems:
            raise SiloRefused("silo nodes: " + "; ".join(problems))
        nodes = _by_fingerprint(nodes, got, self.order)
        reports = [got[node] for node in nodes]
        for c, rep in enumerate(reports):
            self.log.write(round=None, query="register", node=rep.node, client=c, answer=rep.public())
        try:
            check_agreement(reports)
        except ValueError as e:
            raise SiloRefused(str(e)) from None
        self.reports = reports
        self.node_of = dict(enumerate(nodes))
        log.info(
            "silo clients: %s",
            ", ".join(f"{c} = node {nd} ({rep.n_examples} examples)" for (c, nd), rep in zip(self.node_of.items(), reports)),
        )
        return dict(self.node_of)

    # -- messages and answers ------------------------------------------------------------
    def _content(self, client: int, records: dict[str, Any]) -> RecordDict:
        return RecordDict({**records, CLIENT: client_record(client, self.n_clients)})

    def _received(self, query: str, client: int, node: int, answer: Any) -> None:
        self.log.write(round=self.round_of(), query=query, node=node, client=client, answer=answer)

    def collect(self, jobs: Sequence[ClientJob], msgs: Sequence[Message], replies: Iterable[Message]) -> list[ClientResult | None]:
        """The base matching, then each training reply listed: its metrics and the size of its
        update (the noised displacement itself is not copied into the log)."""
        results = super().collect(jobs, msgs, replies)
        for job, res in zip(jobs, results, strict=True):
            if res is not None:
                answer = {
                    "n_examples": res.n_examples,
                    "steps": res.steps,
                    "train_loss": res.train_loss,
                    "update": f"{int(res.update.numel())} floats",
                    **res.extras,
                }
                self.log.write(round=job.t, query="train", node=self._node(job.client), client=job.client, answer=answer)
        return results

    def evaluate(self, params: torch.Tensor) -> tuple[float, float]:
        """Federated evaluation: every node with a held-out split evaluates ``params`` on it;
        accuracy and mean loss averaged over the nodes that answered, weighted by their
        held-out sizes (summed in client order: the arrival order changes no bit). NaN when no
        node answered."""
        clients = [c for c, rep in enumerate(self.reports) if rep.n_test > 0]
        record = encode_params(params)
        msgs = [Message(self._content(c, {"params": record}), dst_node_id=self._node(c), message_type=EVALUATE) for c in clients]
        self.queries["evaluate"] = self.queries.get("evaluate", 0) + len(msgs)
        got: dict[int, tuple[float, float, int]] = {}
        for r in self.grid.send_and_receive(msgs, timeout=self.round_timeout):
            if r.has_error():
                text = f"evaluate: {_error_text(r)}"
                self.errors.append(text)
                log.warning("no evaluation: %s", text)
                continue
            m = metric_record(r.content, "metrics")
            c, n = int(m["partition-id"]), int(m["num-examples"])
            got[c] = (float(m["accuracy"]), float(m["loss"]), n)
            self._received("evaluate", c, int(r.metadata.src_node_id), {"accuracy": got[c][0], "loss": got[c][1], "num_examples": n})
        total = sum(n for _, _, n in got.values())
        if not total:
            return float("nan"), float("nan")
        acc = sum(got[c][0] * got[c][2] for c in sorted(got)) / total
        loss = sum(got[c][1] * got[c][2] for c in sorted(got)) / total
        return float(acc), float(loss)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "node_ids": [self.node_of[c] for c in sorted(self.node_of)]}


def _by_fingerprint(nodes: list[int], reports: dict[int, SiloReport], order: Sequence[str] | None) -> list[int]:
    """``nodes`` (sorted Flower node ids) reordered so that the ``i``-th holds the files of
    fingerprint ``order[i]`` (nodes with equal files keep their id order); unchanged without
    ``order`` or when the nodes' fingerprints are not ``order``'s (the resume check then
    refuses them, naming both)."""
    if order is None or sorted(reports[n].fingerprint for n in nodes) != sorted(order):
        return nodes
    free = list(nodes)
    placed = []
    for fp in order:
        node = next(n for n in free if reports[n].fingerprint == fp)
        free.remove(node)
        placed.append(node)
    if placed != nodes:
        log.info("resume: every client keeps its data; node ids now %s (restarted SuperNodes have new ones)", placed)
    return placed


def check_server_data(cfg: RunConfig, server_data: object) -> None:
    """Refuse (ValueError, one line naming ``server-data``) a recipe whose server scores on a
    validation set (JDP-FL's personal rules) when the server has no data folder of its own
    (``server_data`` None or empty): a silo server holds no client example to draw it from."""
    if not scores_on_validation(cfg) or (server_data is not None and server_data != ""):
        return
    assert cfg.jdp is not None
    raise ValueError(
        f"server-data: jdp.aggregator {cfg.jdp.aggregator!r} scores the groups on a server validation set "
        f"(data.validation = {cfg.data.validation} examples), and a silo server holds no client example to draw it from: "
        "give the server a data folder of its own with a training split (fedgame flower app --silo --server-data DIR)"
    )


def server_validation(cfg: RunConfig, split: DatasetSplit | None, where: str | None = None) -> ArrayDataset | None:
    """The silo server's validation set of a recipe that scores on one (JDP-FL's personal
    rules; None for any other): ``data.validation`` examples of the training split of its own
    data ``split`` (from folder ``where``), drawn uniformly with the run's ``validation`` stream
    as the in-process run draws its own, kept in their order; all of them when
    ``data.validation`` is the split's size. :class:`SiloRefused` in one line without ``split``,
    when it has no training example, or fewer than ``data.validation``."""
    if not scores_on_validation(cfg):
        return None
    try:
        check_server_data(cfg, split)
    except ValueError as e:
        raise SiloRefused(str(e)) from None
    assert split is not None
    tr, n = split.train, cfg.data.validation
    folder = "its data" if where is None else repr(where)
    if not len(tr):
        raise SiloRefused(
            f"server-data: {folder} has no training split, and the server's validation set "
            f"(data.validation = {n}) is drawn from it; give the folder a training split"
        )
    if n > len(tr):
        raise SiloRefused(
            f"data.validation: the silo server draws its validation set from the training split of server-data {folder}, "
            f"which has {len(tr)} examples; must be <= {len(tr)}, got {n}"
        )
    perm = Streams(seed=cfg.seed).numpy("validation").permutation(len(tr))
    idx = np.sort(perm[:n])
    return ArrayDataset(x=tr.x[idx], y=tr.y[idx], classes=tr.classes, name=f"{tr.name}.validation")


def build_silo(
    cfg: RunConfig,
    executor: SiloExecutor,
    *,
    server_test: ArrayDataset | None = None,
    server_validation: ArrayDataset | None = None,
) -> Built | BuiltJDP:
    """The engine of ``cfg`` on the silo nodes behind ``executor`` (module docstring): register
    them, build the run on their reports alone (a JDP-FL recipe: its auction on their bids
    first), evaluate on ``server_test`` (the server's own test set) or, without one, federated;
    ``server_validation``: the server's own validation set (:func:`server_validation`), which a
    JDP-FL personal rule needs. Nothing of the nodes' data is read here."""
    try:
        check_silo(cfg)
        check_server_data(cfg, server_validation)
    except ValueError as e:
        raise SiloRefused(str(e)) from None
    executor.connect()
    try:
        data = SiloDataset.from_reports(executor.reports, test=server_test, validation=server_validation)
    except ValueError as e:
        raise SiloRefused(str(e)) from None
    if data.train.kind == "tokens" and "vocab" in model_options(cfg.model.name) and "vocab" not in cfg.model.options:
        raise SiloRefused(
            f"model.options.vocab: model {cfg.model.name!r} on token data needs the vocabulary size in the recipe on silo data "
            "(each node sees only its own tokens, so the nodes would build different models)"
        )
    if server_test is None and not int(data.test_sizes.sum()):
        raise SiloRefused(
            "evaluation: federated (the server has no test set), but no node has a held-out split (every node reported n-test 0); "
            "give the nodes' dataset a test split (csv: test_fraction or test_path; npz: x_test) or the server a test set "
            "(fedgame flower app --silo --server-data DIR)"
        )
    check_delta(cfg, data)
    built: Built | BuiltJDP
    if cfg.jdp is not None:
        # the auction on the nodes' bids, then the engine on them (each answer logged)
        built = build_jdp(cfg, data=data, bids=ask_bids(executor, cfg, data.n_clients))
        built.engine.clients = FlowerJDPClients(executor, adversary=built.adversary)
    else:
        built = build_engine(cfg, data=data, executor=executor)
        executor.info = job_info(built.engine)
    if server_test is None:
        built.engine.evaluator = executor.evaluate
    engine = built.engine
    executor.round_of = lambda: engine.t_next
    return built
