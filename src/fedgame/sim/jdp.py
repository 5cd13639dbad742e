"""The JDP-FL training protocol in this process (Zhang et al., TKDE 2023; Sec. 4.1, steps ①-⑦).

Unlike FedAvg rounds (:mod:`fedgame.sim.engine`), every winner keeps its *own* model between
rounds: it starts round t from its M5 output, which mixes the public signal with its own
un-noised parameters, so no client ever restarts from a server model (Algorithm 5 line 3; step
④'s "download the global model" is not read literally). Round ``t``:

1. every winner i trains locally from θ_i (the shared hot loop, :class:`~fedgame.sim.local.LocalTrainer`,
   generator ``train[t, i, 0]``, the stream the FedAvg engine gives a client's first copy;
   dropout masks seeded from it);
2. M3: θ_i is clipped, θ̂_i = θ_i + N(0, σ_i² I) is uploaded (``noise[t, i, 0]``), the clipped
   θ_i is kept (:func:`~fedgame.privacy.jdp.perturb`); the ledger records the Gaussian release;
3. the server combines the uploads with its :class:`ServerRule` (``server[t]``):

   * :class:`LeaveOneOut` — M4: the m leave-one-out groups scored on the server's validation
     set, k* by the exponential mechanism (eq. (7)); every winner then applies M5 to the
     broadcast (agg_{k*}, sum_{k*}) and records the exponential release;
   * :class:`RandomGroups` — Fig. 5's fresh random partition into groups of s, same M5;
   * :class:`GlobalRule` — FedAvg ("traditional"), Krum, coordinate median or trimmed mean on
     the same perturbed parameters; every winner restarts from the server's model;
4. the server's model θ^t (agg/sum of the chosen group, or the rule's output) is evaluated on
   the test split; the record holds the scores, probabilities, the chosen group, whether the
   adversary was left out, the fraction of clients whose M3 clipping bound, and ε spent;
5. the record is appended and a checkpoint written: a killed run resumes at the first
   unfinished round with identical results (every stream is a function of the seed, the round
   and the client).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from fedgame.core.seeding import Streams
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.jdp import SelfWeighting, jdp_local_update, perturb
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.robust import (
    GroupSelection,
    ScoreSensitivity,
    coordinate_median,
    krum_select,
    leave_one_out_aggregate,
    random_group_aggregate,
    trimmed_mean,
    weighted_average,
)
from fedgame.sim.engine import MissingReplies, RoundLoop
from fedgame.sim.local import LocalTrainer, evaluate

if TYPE_CHECKING:
    from fedgame.data import FederatedDataset
    from fedgame.privacy.accountants import Accountant
    from fedgame.sim.pool import WorkerContext, WorkerPool

__all__ = [
    "Broadcast",
    "ServerRule",
    "LeaveOneOut",
    "RandomGroups",
    "GlobalRule",
    "global_rule",
    "JDPEngine",
    "JDPJob",
    "JDPReply",
    "JDPPublish",
    "JDPClientState",
    "JDPClients",
    "InProcessJDPClients",
    "JDPPending",
    "jdp_client_train",
    "jdp_client_update",
]

log = logging.getLogger(__name__)

Score = Callable[[Tensor], float]


@dataclass(frozen=True, eq=False)
class Broadcast:
    """What the server publishes after one round.

    ``model``: θ^t, the server's model of the round (evaluated on the test split); ``signal``:
    the chosen group's (agg, sum) and its exponential-mechanism draw when clients apply M5
    (None: every client restarts from ``model``); ``used``: positions of the uploads the model
    is built from (the chosen group; Krum's pick; every position for FedAvg/median/trimmed mean).
    """

    model: Tensor
    signal: GroupSelection | None
    used: np.ndarray


class ServerRule(Protocol):
    """How the server combines the winners' M3 uploads (one obvious interface per rule).

    Its attributes are read-only (properties), so frozen dataclasses implement it."""

    @property
    def name(self) -> str: ...
    @property
    def personal(self) -> bool:
        """True when clients form their own models by M5 from the signal (needs ``epsilon``)."""
        ...

    @property
    def epsilon(self) -> float:
        """ε_E of the exponential mechanism each winner's ledger is charged per round (0: none)."""
        ...

    def __call__(self, uploads: Sequence[Tensor], sizes: np.ndarray, score: Score, rng: np.random.Generator) -> Broadcast: ...


@dataclass(frozen=True)
class LeaveOneOut:
    """M4 (Algorithm 4, eq. (7)): k* ~ exp(ε_E y_k/(2Δy)) over the m leave-one-out groups."""

    epsilon: float
    sensitivity: ScoreSensitivity = "paper"
    name: str = "leave_one_out"
    personal: bool = True

    def __call__(self, uploads: Sequence[Tensor], sizes: np.ndarray, score: Score, rng: np.random.Generator) -> Broadcast:
        sel = leave_one_out_aggregate(uploads, sizes, score, epsilon=self.epsilon, rng=rng, sensitivity=self.sensitivity)
        return Broadcast(model=sel.global_params(uploads[0].dtype), signal=sel, used=sel.members)


@dataclass(frozen=True)
class RandomGroups:
    """Fig. 5 (JDP-FL Sec. 6.2.5): a fresh random partition into m/s groups of ``group_size`` s,
    g* by the exponential mechanism with Δy = 1/s (paper) or 1."""

    epsilon: float
    group_size: int
    sensitivity: ScoreSensitivity = "paper"
    name: str = "random_groups"
    personal: bool = True

    def __call__(self, uploads: Sequence[Tensor], sizes: np.ndarray, score: Score, rng: np.random.Generator) -> Broadcast:
        sel = random_group_aggregate(
            uploads, sizes, score, group_size=self.group_size, epsilon=self.epsilon, rng=rng, sensitivity=self.sensitivity
        )
        return Broadcast(model=sel.global_params(uploads[0].dtype), signal=sel, used=sel.members)


@dataclass(frozen=True)
class GlobalRule:
    """A server-side aggregate every winner restarts from (JDP-FL's "traditional" FedAvg,
    Sec. 6.2.2, and the usual robust rules): ``combine(uploads, sizes) -> (model, used
    positions)``. No exponential release."""

    name: str
    combine: Callable[[Sequence[Tensor], np.ndarray], tuple[Tensor, np.ndarray]]
    personal: bool = False
    epsilon: float = 0.0

    def __call__(self, uploads: Sequence[Tensor], sizes: np.ndarray, score: Score, rng: np.random.Generator) -> Broadcast:
        model, used = self.combine(uploads, sizes)
        return Broadcast(model=model.to(uploads[0].dtype), signal=None, used=used)


def global_rule(name: str, *, krum_byzantine: int = 1, trim_beta: float = 0.1) -> GlobalRule:
    """``fedavg`` (Σ d_j θ̂_j / Σ d_j, the paper's "traditional"), ``krum`` (Blanchard et al.
    2017, f = ``krum_byzantine``), ``median`` (coordinate-wise), ``trimmed_mean`` (β = ``trim_beta``)."""

    def every(m: int) -> np.ndarray:
        return np.arange(m)

    if name == "fedavg":
        return GlobalRule(name, lambda u, d: (weighted_average(u, d), every(len(u))))
    if name == "krum":

        def krum_pick(u: Sequence[Tensor], d: np.ndarray) -> tuple[Tensor, np.ndarray]:
            k = krum_select(u, n_byzantine=krum_byzantine)
            return u[int(k[0])].clone(), k

        return GlobalRule(name, krum_pick)
    if name == "median":
        return GlobalRule(name, lambda u, d: (coordinate_median(u), every(len(u))))
    if name == "trimmed_mean":
        return GlobalRule(name, lambda u, d: (trimmed_mean(u, beta=trim_beta), every(len(u))))
    raise ValueError(f"jdp.aggregator: must be one of fedavg, krum, median, trimmed_mean, leave_one_out, random_groups; got {name!r}")


# -- the client side: one winner's own model between rounds ----------------------------------
@dataclass(frozen=True, eq=False)
class JDPJob:
    """Round ``t``'s instruction to winner ``client``: train from your own model, upload M3 of
    it (``mechanism``; None: upload the model itself). ``start`` is θ⁰ for a client that holds
    no model yet (round 0)."""

    t: int
    client: int
    mechanism: GaussianMechanism | None
    start: Tensor | None = None


@dataclass(frozen=True, eq=False)
class JDPReply:
    """What winner ``client`` sends back: its M3 output θ̂_i and what the round's record logs."""

    client: int
    upload: Tensor
    train_loss: float
    clip_active: bool


@dataclass(frozen=True, eq=False)
class JDPPublish:
    """What the server sends winner ``client`` after the rule: the model every client restarts
    from (``model``: FedAvg, Krum, median, trimmed mean), or M4's public signal (``agg``,
    ``total``) and whether the client is in the chosen group (``member``) for M5."""

    t: int
    client: int
    model: Tensor | None = None
    agg: Tensor | None = None
    total: float = 0.0
    member: bool = False


@dataclass
class JDPClientState:
    """A winner's private state: its model θ_i, and between its upload and the server's
    publication, its clipped un-noised θ_i (``kept``, which M5 uses) and its upload of round
    ``t``."""

    theta: Tensor | None = None
    kept: Tensor | None = None
    upload: Tensor | None = None
    t: int = -1


def jdp_client_train(state: JDPClientState, job: JDPJob, *, trainer: LocalTrainer, indices: Tensor, streams: Streams) -> JDPReply:
    """Steps 1-2 of the round on the client: local training from θ_i (generator ``train[t, i,
    0]``), then M3 (``noise[t, i, 0]``); ``state`` keeps the clipped θ_i and the upload for M5.
    The one function the in-process clients and a Flower node both run."""
    if job.start is not None:
        state.theta = job.start.clone()
    if state.theta is None:
        raise RuntimeError(f"round {job.t}: client {job.client} holds no model (a node restarted mid-run loses its JDP-FL state)")
    res = trainer.train(state.theta, indices, streams.torch("train", job.t, job.client, 0))
    if not bool(torch.isfinite(res.params).all()):
        raise FloatingPointError(
            f"round {job.t}: client {job.client}'s local training diverged (non-finite parameters); M3's noise "
            f"(σ = {getattr(job.mechanism, 'noise_std', 0.0):.3g} per coordinate) or train.local.lr "
            "is too large for this model: raise privacy.epsilon, give clients more data "
            "(record-level sensitivity is 2C/d_i) or lower train.local.lr"
        )
    if job.mechanism is None:
        upload, kept, active = res.params, res.params, False
    else:
        out = perturb(res.params, job.mechanism, streams.torch("noise", job.t, job.client, 0))
        upload, kept, active = out.upload, out.clipped, out.clip_active
    state.kept, state.upload, state.t = kept, upload, job.t
    return JDPReply(client=job.client, upload=upload, train_loss=res.train_loss, clip_active=active)


def pool_train(ctx: WorkerContext, payload: tuple[JDPClientState, JDPJob, int]) -> tuple[JDPReply, JDPClientState]:
    """:func:`jdp_client_train` as a worker-pool task (:meth:`fedgame.sim.pool.WorkerPool.map`):
    the winner's state travels with the job and comes back with the reply."""
    state, job, position = payload
    reply = jdp_client_train(state, job, trainer=ctx.trainer, indices=ctx.parts[position], streams=ctx.streams)
    return reply, state


def jdp_client_update(state: JDPClientState, pub: JDPPublish, *, n_examples: float, self_weighting: SelfWeighting) -> None:
    """Step 3's client half: restart from the published model, or M5 on the public signal with
    the client's own kept θ_i and data size (:func:`~fedgame.privacy.jdp.jdp_local_update`)."""
    if state.t != pub.t or state.kept is None:
        raise RuntimeError(f"round {pub.t}: client {pub.client} got the server's publication but did not train in round {pub.t}")
    if pub.agg is None:
        if pub.model is None:
            raise ValueError(f"round {pub.t}: the publication to client {pub.client} holds neither a model nor a signal")
        state.theta = pub.model.clone()
    else:
        state.theta = jdp_local_update(
            pub.agg,
            pub.total,
            state.kept,
            float(n_examples),
            self_weighting=self_weighting,
            upload=state.upload,
            member=pub.member,
        )
    state.kept = state.upload = None


class JDPClients(Protocol):
    """How the JDP-FL server reaches its winners (in this process, or Flower nodes)."""

    def train(self, jobs: Sequence[JDPJob]) -> list[JDPReply | None]: ...
    def publish(self, pubs: Sequence[JDPPublish]) -> list[bool]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class InProcessJDPClients:
    """Every winner's state in this process (``winners`` in position order). With a worker
    ``pool`` the trainings run in its processes (each winner's state travels with its job and
    comes back with the reply); the publication step is cheap and stays here."""

    def __init__(
        self,
        *,
        trainer: LocalTrainer,
        parts: Sequence[Tensor],
        streams: Streams,
        winners: np.ndarray,
        sizes: np.ndarray,
        start: Tensor,
        self_weighting: SelfWeighting,
        pool: "WorkerPool | None" = None,
    ) -> None:
        self.trainer, self.streams, self.self_weighting = trainer, streams, self_weighting
        self.pool = pool
        self.pos = {int(c): k for k, c in enumerate(winners)}
        self.parts = list(parts)
        self.sizes = np.asarray(sizes, dtype=np.float64)
        self.states = [JDPClientState(theta=start.clone()) for _ in self.pos]

    @property
    def thetas(self) -> Tensor:
        """(m, d): every winner's own θ_i, in position order."""
        return torch.stack([s.theta for s in self.states])  # type: ignore[misc]  # every state's theta is set; the field is Optional

    @thetas.setter
    def thetas(self, value: Tensor) -> None:
        for s, row in zip(self.states, value, strict=True):
            s.theta = row.clone()

    def train(self, jobs: Sequence[JDPJob]) -> list[JDPReply | None]:
        if self.pool is not None:
            payloads = [(self.states[self.pos[j.client]], j, self.pos[j.client]) for j in jobs]
            out_pool: list[JDPReply | None] = []
            costs = [int(self.parts[self.pos[j.client]].numel()) for j in jobs]
            for job, (reply, state) in zip(jobs, self.pool.map(pool_train, payloads, costs=costs), strict=True):
                self.states[self.pos[job.client]] = state
                out_pool.append(reply)
            return out_pool
        out: list[JDPReply | None] = []
        for job in jobs:
            k = self.pos[job.client]
            out.append(jdp_client_train(self.states[k], job, trainer=self.trainer, indices=self.parts[k], streams=self.streams))
        return out

    def publish(self, pubs: Sequence[JDPPublish]) -> list[bool]:
        for pub in pubs:
            k = self.pos[pub.client]
            jdp_client_update(self.states[k], pub, n_examples=float(self.sizes[k]), self_weighting=self.self_weighting)
        return [True] * len(pubs)

    def state_dict(self) -> dict[str, Any]:
        return {"thetas": self.thetas.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.thetas = state["thetas"]


class JDPEngine(RoundLoop):
    """One JDP-FL run (see the module docstring for the round).

    ``winners``: client ids that train (the auction's W); ``mechanisms``: M3 per winner (None
    everywhere: no perturbation, the non-private reference); ``adversary``: the poisoning
    winner's client id or None (its labels are already poisoned in ``trainer.y``);
    ``events(i)``: the privacy events one round charges winner i (M3's Gaussian and, with a
    personal rule, the exponential mechanism).
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        data: "FederatedDataset",
        trainer: LocalTrainer,
        winners: np.ndarray,
        mechanisms: Sequence[GaussianMechanism | None],
        rule: ServerRule,
        events: Callable[[int], list[tuple[PrivacyEvent, int]]],
        accountant: "Accountant",
        streams: Streams,
        self_weighting: SelfWeighting = "add",
        adversary: int | None = None,
        eval_every: int = 1,
        delta: float = 1e-5,
        clients: JDPClients | None = None,
        pool: "WorkerPool | None" = None,
    ) -> None:
        w = np.asarray(winners, dtype=np.int64)
        if w.ndim != 1 or w.size < 1:
            raise ValueError(f"winners: must be a non-empty list of client ids, got {winners!r}")
        if rule.personal and w.size < 2:
            raise ValueError(f"winners: aggregator '{rule.name}' needs m >= 2 winners, got m = {w.size}")
        if len(mechanisms) != w.size:
            raise ValueError(f"mechanisms: one per winner ({w.size}), got {len(mechanisms)}")
        # self.params is θ^t, the server's model (θ⁰ before the first round)
        self._init_loop(
            model=model,
            data=data,
            trainer=trainer,
            accountant=accountant,
            streams=streams,
            eval_every=eval_every,
            delta=delta,
        )
        self.winners = w
        self.mechanisms = list(mechanisms)
        self.rule = rule
        self.events = events
        self.self_weighting = self_weighting
        self.adversary = adversary
        self.sizes = np.asarray(data.sizes)[w].astype(np.float64)
        self._parts = [torch.as_tensor(data.parts[int(i)], dtype=torch.long) for i in w]
        self._val = data.validation_tensors() if rule.personal else None
        self.clients: JDPClients = clients or InProcessJDPClients(
            trainer=trainer,
            parts=self._parts,
            streams=streams,
            winners=w,
            sizes=self.sizes,
            start=self.params,
            self_weighting=self_weighting,
            pool=pool,
        )

    @property
    def adversary_position(self) -> int | None:
        if self.adversary is None:
            return None
        return int(np.flatnonzero(self.winners == self.adversary)[0])

    # -- checkpointing ------------------------------------------------------------------
    @property
    def thetas(self) -> Tensor:
        """(m, d): every winner's own θ_i (in-process clients only: on Flower they live on the nodes)."""
        clients = self.clients
        if not isinstance(clients, InProcessJDPClients):
            raise AttributeError("thetas: the winners' models live on their nodes")
        return clients.thetas

    @thetas.setter
    def thetas(self, value: Tensor) -> None:
        clients = self.clients
        if not isinstance(clients, InProcessJDPClients):
            raise AttributeError("thetas: the winners' models live on their nodes")
        clients.thetas = value

    def state_dict(self) -> dict[str, Any]:
        return {**self._loop_state(), **self.clients.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_loop_state(state)
        self.clients.load_state_dict(state)

    # -- one round ----------------------------------------------------------------------
    def _score(self, params: Tensor) -> float:
        """The server's score of a group's model: accuracy on its validation set (Alg. 4)."""
        assert self._val is not None
        return evaluate(self.model, params, *self._val, loss=self.trainer.loss)[0]

    def round(self, t: int) -> dict[str, Any]:
        """One round in process (or over any :class:`JDPClients`): :meth:`begin_round`, the
        winners' trainings, :meth:`aggregate`, the publication, :meth:`finish_round`. A
        Flower strategy runs the same three steps around its own messages."""
        pending = self.begin_round(t)
        self.aggregate(pending, self.clients.train(pending.jobs))
        self.finish_round(pending, self.clients.publish(pending.publications))
        return pending.record

    def begin_round(self, t: int) -> "JDPPending":
        """Round t's jobs: one per winner, with its M3 (and θ⁰ in round 0)."""
        jobs = [
            JDPJob(t=t, client=int(c), mechanism=self.mechanisms[pos], start=self.params if t == 0 else None)
            for pos, c in enumerate(self.winners)
        ]
        return JDPPending(t=t, jobs=jobs, tic=time.perf_counter())

    def aggregate(self, pending: "JDPPending", replies: Sequence[JDPReply | None]) -> None:
        """The server's side of the round on the winners' uploads: the server rule (M4's
        exponential mechanism, or a global rule), the winners' privacy events, and the
        publications to send back (M5's signal, or the new model). Every winner must have
        replied (JDP-FL's groups need every upload): else :class:`MissingReplies`."""
        t, jobs, tic = pending.t, pending.jobs, pending.tic
        lost = [j.client for j, r in zip(jobs, replies, strict=True) if r is None]
        if lost:
            raise MissingReplies(f"round {t}: no upload from winner(s) {lost}; JDP-FL's groups need every winner's upload")
        got = [r for r in replies if r is not None]
        uploads = [r.upload for r in got]
        train_time = time.perf_counter() - tic
        b = self.rule(uploads, self.sizes, self._score, self.streams.numpy("server", t))
        server_time = time.perf_counter() - tic - train_time
        for client in self.winners:
            for event, count in self.events(int(client)):
                self.accountant.record([int(client)], event, count)
        sig = b.signal
        pending.publications = [
            JDPPublish(t=t, client=int(c), model=b.model)
            if sig is None
            else JDPPublish(t=t, client=int(c), agg=sig.agg, total=float(sig.total), member=sig.contains(pos))
            for pos, c in enumerate(self.winners)
        ]
        pending.broadcast = b
        adv = self.adversary_position
        pending.record = {
            "round": t,
            "n_selected": int(self.winners.size),
            "train_loss": float(np.mean([r.train_loss for r in got])),
            "clipped_fraction": float(np.mean([r.clip_active for r in got])),
            "aggregator": self.rule.name,
            "used": json.dumps(self.winners[b.used].tolist()),
            "chosen": -1 if sig is None else int(sig.chosen),
            "scores": "" if sig is None else json.dumps(np.round(sig.scores, 6).tolist()),
            "probs": "" if sig is None else json.dumps(np.round(sig.probs, 6).tolist()),
            "adversary_used": None if adv is None else bool(np.any(b.used == adv)),
            "train_time": train_time,
            "server_time": server_time,
        }

    def finish_round(self, pending: "JDPPending", acked: Sequence[bool]) -> dict[str, Any]:
        """After the publication: every winner must have confirmed it (else its model is
        unknown: :class:`MissingReplies`); the server's model moves on, the round is
        evaluated and its record returned."""
        t, pubs, b = pending.t, pending.publications, pending.broadcast
        assert b is not None, "finish_round: aggregate() was not called"
        if not all(acked):
            lost = [p.client for p, ok in zip(pubs, acked, strict=True) if not ok]
            raise MissingReplies(f"round {t}: winner(s) {lost} did not confirm the server's publication; their models are unknown")
        self.params = b.model.clone()
        self.selected_counts[self.winners] += 1
        record = pending.record
        self._evaluate_into(record, t, self.winners)
        record["round_time"] = time.perf_counter() - pending.tic
        return record


@dataclass
class JDPPending:
    """A JDP-FL round in flight: its jobs, then (after :meth:`JDPEngine.aggregate`) the
    server rule's outcome, the publications for the winners and the round's record so far."""

    t: int
    jobs: list[JDPJob]
    tic: float
    publications: list[JDPPublish] = field(default_factory=list)
    broadcast: Broadcast | None = None
    record: dict[str, Any] = field(default_factory=dict)
