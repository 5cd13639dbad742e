"""JDP-FL on Flower: every winner's model lives on its own node (JDP-FL Sec. 4.1, steps ①-⑦).

JDP-FL clients never restart from a server model: each keeps its own θ_i between rounds and
forms it by M5 from the public signal and its *un-noised* parameters, which must never leave
the node. So on Flower the winners' state is the nodes' (Flower keeps a node's
``Context.state`` across the messages of a run), and a round is two messages per winner:

``train.jdp`` (server → winner i)
    round t, M3's clip and noise std, whether this client is the recipe's poisoning client
    (a testbed device: the attack is part of the experiment), and θ⁰ in round 0. The node runs
    :func:`~fedgame.sim.jdp.jdp_client_train` — the function the in-process clients run — and
    replies with its M3 upload θ̂_i, its training loss and whether clipping bound.
``train.jdp_publish`` (server → winner i)
    the rule's outcome: the model every winner restarts from (FedAvg, Krum, median, trimmed
    mean), or M4's public signal (agg_{k*}, sum_{k*}) and whether i is in the chosen group;
    the node runs :func:`~fedgame.sim.jdp.jdp_client_update` (M5) and acknowledges.

Before training, the auction runs on the candidates' ``query.bid`` answers
(:func:`connect_jdp`), so who trains is decided by what the nodes bid. The server (scores,
exponential mechanism, ledger, evaluation) is the in-process :class:`~fedgame.sim.jdp.JDPEngine`,
driven round by round by the same Flower strategy as every other protocol
(:class:`~fedgame.deploy.flower.strategy.FedgameStrategy`: ``configure_train`` sends the
``train.jdp`` messages, ``aggregate_train`` runs the server rule on the uploads and sends the
publications); the same seed gives the same uploads, draws, ledgers and metrics as in process.

A winner that does not reply stops the run (JDP-FL's groups need every upload). A run cannot
resume from the server's checkpoint: the winners' models are on their nodes, not in it.

On silo nodes (:mod:`fedgame.deploy.flower.silo`, each node its own files) the same two
messages carry the client index the server gave the node (the ``client`` record every silo
message has, :meth:`~fedgame.deploy.flower.executor.FlowerExecutor._content`), the node trains
its whole training split, and every bid, upload's metrics and acknowledgement the server
received is listed in the run folder's ``queries.jsonl`` (the upload itself is not). The
auction runs before the engine is built (:func:`ask_bids`); the personal rules score on the
server's own validation set, drawn from its ``server-data``'s training split.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402

from fedgame.deploy.flower._messages import (  # noqa: E402
    array_record,
    config_record,
    decode_params,
    encode_params,
    metric_record,
)
from fedgame.deploy.flower.executor import FlowerExecutor, NodesNotReady, _error_text  # noqa: E402
from fedgame.pipeline.build import BuiltJDP, build_jdp  # noqa: E402
from fedgame.pipeline.config import RunConfig  # noqa: E402
from fedgame.privacy.mechanisms import GaussianMechanism  # noqa: E402
from fedgame.sim.jdp import JDPClientState, JDPJob, JDPPublish, JDPReply  # noqa: E402

__all__ = [
    "JDP_PUBLISH",
    "JDP_TRAIN",
    "FlowerJDPClients",
    "ask_bids",
    "connect_jdp",
    "decode_jdp_job",
    "decode_publish",
    "encode_jdp_job",
    "encode_publish",
    "load_state",
    "save_state",
]

log = logging.getLogger(__name__)

JDP_TRAIN = "train.jdp"
JDP_PUBLISH = "train.jdp_publish"
STATE_KEY = "fedgame-jdp"


# -- messages ---------------------------------------------------------------------------------
def encode_jdp_job(job: JDPJob, *, adversary: bool) -> RecordDict:
    cfg: dict[str, Any] = {
        "round": int(job.t),
        "partition-id": int(job.client),
        "adversary": bool(adversary),
        "m3": job.mechanism is not None,
    }
    if job.mechanism is not None:
        cfg["m3.clip"] = float(job.mechanism.clip)
        cfg["m3.noise-std"] = float(job.mechanism.noise_std)
    content = RecordDict({"job": ConfigRecord(cfg)})
    if job.start is not None:
        content["start"] = encode_params(job.start, "start")
    return content


def decode_jdp_job(content: RecordDict) -> tuple[JDPJob, bool]:
    """The job and whether the node is the recipe's poisoning client."""
    cfg = config_record(content, "job")
    mech = GaussianMechanism(clip=float(cfg["m3.clip"]), noise_std=float(cfg["m3.noise-std"])) if cfg["m3"] else None
    start = decode_params(array_record(content, "start"), "start") if "start" in content else None
    return JDPJob(t=int(cfg["round"]), client=int(cfg["partition-id"]), mechanism=mech, start=start), bool(cfg["adversary"])


def encode_jdp_reply(job: JDPJob, reply: JDPReply) -> RecordDict:
    return RecordDict(
        {
            "upload": encode_params(reply.upload, "upload"),
            "result": MetricRecord({"train-loss": float(reply.train_loss), "clip-active": int(reply.clip_active)}),
            "job": ConfigRecord({"round": int(job.t), "partition-id": int(job.client)}),
        }
    )


def decode_jdp_reply(content: RecordDict) -> tuple[int, JDPReply]:
    """(round, reply)."""
    job, m = config_record(content, "job"), metric_record(content, "result")
    client = int(job["partition-id"])
    reply = JDPReply(
        client=client,
        upload=decode_params(array_record(content, "upload"), "upload"),
        train_loss=float(m["train-loss"]),
        clip_active=bool(m["clip-active"]),
    )
    return int(job["round"]), reply


def encode_publish(pub: JDPPublish) -> RecordDict:
    cfg: dict[str, Any] = {
        "round": int(pub.t),
        "partition-id": int(pub.client),
        "signal": pub.agg is not None,
        "total": float(pub.total),
        "member": bool(pub.member),
    }
    content = RecordDict({"publish": ConfigRecord(cfg)})
    if pub.agg is not None:
        content["agg"] = ArrayRecord({"agg": Array(np.ascontiguousarray(pub.agg.detach().cpu().numpy()))})  # float64, exact
    elif pub.model is not None:
        content["model"] = encode_params(pub.model, "model")
    return content


def decode_publish(content: RecordDict) -> JDPPublish:
    cfg = config_record(content, "publish")
    t, client = int(cfg["round"]), int(cfg["partition-id"])
    if cfg["signal"]:
        agg = torch.from_numpy(np.array(array_record(content, "agg")["agg"].numpy(), copy=True))
        return JDPPublish(t=t, client=client, agg=agg, total=float(cfg["total"]), member=bool(cfg["member"]))
    return JDPPublish(t=t, client=client, model=decode_params(array_record(content, "model"), "model"))


# -- the node's state ---------------------------------------------------------------------------
def load_state(context: Context) -> JDPClientState:
    """The winner's JDP-FL state kept in its node's ``Context.state`` (empty before round 0)."""
    if STATE_KEY not in context.state:
        return JDPClientState()
    rec = array_record(context.state, STATE_KEY)
    arrays = {k: torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in rec.items()}
    t = int(config_record(context.state, STATE_KEY + "-round")["t"])
    return JDPClientState(theta=arrays.get("theta"), kept=arrays.get("kept"), upload=arrays.get("upload"), t=t)


def save_state(context: Context, state: JDPClientState) -> None:
    arrays = {
        k: Array(np.ascontiguousarray(v.detach().cpu().numpy()))
        for k, v in (("theta", state.theta), ("kept", state.kept), ("upload", state.upload))
        if v is not None
    }
    context.state[STATE_KEY] = ArrayRecord(arrays)
    context.state[STATE_KEY + "-round"] = ConfigRecord({"t": int(state.t)})


# -- the server side ----------------------------------------------------------------------------
class FlowerJDPClients:
    """:class:`~fedgame.sim.jdp.JDPClients` over Flower: two messages per winner and round."""

    def __init__(self, executor: FlowerExecutor, *, adversary: int | None) -> None:
        self.executor = executor
        self.adversary = adversary

    def _messages(self, kind: str, items: Sequence[JDPJob | JDPPublish], contents: list[RecordDict]) -> list[Message]:
        """One message per item to its client's node; the executor adds what its nodes need
        (a silo node: the client index it answers as)."""
        ex = self.executor
        return [
            Message(ex._content(it.client, dict(c.items())), dst_node_id=ex._node(it.client), message_type=kind, group_id=str(it.t))
            for it, c in zip(items, contents, strict=True)
        ]

    def _match(
        self, kind: str, items: Sequence[JDPJob | JDPPublish], msgs: Sequence[Message], replies: Iterable[Message]
    ) -> dict[int, Message]:
        """The reply of each partition among ``replies`` to ``msgs``; an error reply is logged
        in the executor's ``errors`` and counts as none."""
        ex = self.executor
        sent = {m.metadata.message_id: it.client for m, it in zip(msgs, items, strict=True) if m.metadata.message_id}
        out: dict[int, Message] = {}
        for r in replies:
            if r.has_error():
                who = sent.get(r.metadata.reply_to_message_id, "?")
                text = f"{kind}, round {items[0].t}, partition {who}: {_error_text(r)}"
                ex.errors.append(text)
                log.warning("no reply: %s", text)
                continue
            cfg = config_record(r.content, "job" if "job" in r.content else "ack")
            out[int(cfg["partition-id"])] = r
        return out

    def _send(self, kind: str, items: Sequence[JDPJob | JDPPublish], contents: list[RecordDict]) -> dict[int, Message]:
        msgs = self._messages(kind, items, contents)
        return self._match(kind, items, msgs, self.executor.grid.send_and_receive(msgs, timeout=self.executor.round_timeout))

    def train_messages(self, jobs: Sequence[JDPJob]) -> list[Message]:
        """The ``train.jdp`` message of each job, addressed to its winner's node (what a Flower
        strategy's ``configure_train`` returns)."""
        return self._messages(JDP_TRAIN, jobs, [encode_jdp_job(j, adversary=j.client == self.adversary) for j in jobs])

    def train_replies(self, jobs: Sequence[JDPJob], msgs: Sequence[Message], replies: Iterable[Message]) -> list[JDPReply | None]:
        """Each job's upload from ``replies`` to ``msgs``; None where none (or one of another
        round) came back."""
        got = self._match(JDP_TRAIN, jobs, msgs, replies)
        out: list[JDPReply | None] = []
        for j in jobs:
            r = got.get(j.client)
            if r is None:
                out.append(None)
                continue
            t, reply = decode_jdp_reply(r.content)
            self.executor._received(
                JDP_TRAIN,
                j.client,
                int(r.metadata.src_node_id),
                {"train_loss": reply.train_loss, "clip_active": reply.clip_active, "upload": f"{int(reply.upload.numel())} floats"},
            )
            out.append(reply if t == j.t else None)
        return out

    def train(self, jobs: Sequence[JDPJob]) -> list[JDPReply | None]:
        msgs = self.train_messages(jobs)
        return self.train_replies(jobs, msgs, self.executor.grid.send_and_receive(msgs, timeout=self.executor.round_timeout))

    def publish(self, pubs: Sequence[JDPPublish]) -> list[bool]:
        got = self._send(JDP_PUBLISH, pubs, [encode_publish(p) for p in pubs])
        acked = []
        for p in pubs:
            r = got.get(p.client)
            ok = r is not None and int(config_record(r.content, "ack")["round"]) == p.t
            if r is not None:
                self.executor._received(JDP_PUBLISH, p.client, int(r.metadata.src_node_id), {"ack": ok})
            acked.append(ok)
        return acked

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise RuntimeError(
            "resume: a JDP-FL run on Flower keeps every winner's model on its node, not in the server's checkpoint; "
            "it cannot resume: start it afresh (without --resume) or run it in process"
        )


def ask_bids(ex: FlowerExecutor, cfg: RunConfig, n_clients: int) -> np.ndarray | None:
    """Every candidate's ``query.bid`` answer over ``ex`` (float64, client order), None when the
    recipe holds no auction; :class:`NodesNotReady` naming the candidates that did not bid."""
    assert cfg.jdp is not None
    au = cfg.jdp.auction
    if au.mechanism == "none":
        return None
    bids = ex.query("bid", range(n_clients), {"low": au.cost_low, "high": au.cost_high})
    silent = [i for i, b in enumerate(bids) if b is None]
    if silent:
        raise NodesNotReady(f"query 'bid': candidate(s) {silent} did not bid; the auction needs every candidate's bid")
    return np.array([float(b) for b in bids if b is not None], dtype=np.float64)


def connect_jdp(grid: Any, built: BuiltJDP, cfg: RunConfig, *, round_timeout: float | None, register_timeout: float) -> FlowerExecutor:
    """Discover the nodes, run the auction on their ``query.bid`` answers (the engine is
    rebuilt from them, in place), and point the JDP engine's clients at the winners' nodes."""
    ex = FlowerExecutor(grid, data=built.data, round_timeout=round_timeout, register_timeout=register_timeout)
    ex.connect()
    bids = ask_bids(ex, cfg, built.data.n_clients)
    if bids is not None:
        fresh = build_jdp(cfg, data=built.data, bids=bids)
        for name in ("engine", "model", "auction", "costs", "adversary", "eps_exp"):
            setattr(built, name, getattr(fresh, name))
    built.engine.clients = FlowerJDPClients(ex, adversary=built.adversary)
    return ex
