"""The simulation engine: one run, round by round, with clients behind an executor.

Round ``t``:

1. ``sel = selection.select(state_t, rng_selection[t])`` — clients *and* their probabilities
2. ``payments = incentive.settle(t, sel)``
3. one :class:`~fedgame.sim.client.ClientJob` per selected client (or independent copy): the
   global parameters, its DP-SGD settings and upload mechanism from its privacy plan; the
   executor runs them all at once (:func:`~fedgame.sim.client.run_client_job`: local training
   with ``train[t, i, copy]``, upload clipped and noised with ``noise[t, i, copy]``)
4. ``accountant.record(i, events)`` for every result that came back — a client whose reply
   never arrived did no work the server can see, so its ledger is not charged
5. ``params += server_update(updates, ctx)`` over the slots that replied (importance- or
   size-weighted, then server step); the record lists who ``replied`` and who is ``missing``,
   and takes what the server update reported in ``ctx.metrics`` (e.g. ``max_agg_weight``)
6. ``selection.after_round(...)``; evaluation every ``eval_every`` rounds
7. the round's record is appended and a checkpoint written (both atomic): a killed run resumes
   at the first unfinished round with identical results, because every random stream is a
   function of ``(seed, stream, round, client)`` and all plug-in state is checkpointed.

The engine composes plug-ins and never branches on their type. In process
(:class:`~fedgame.sim.client.InProcessExecutor`, the default) every client replies; a remote
executor (Flower) may return None for a client, and ``on_missing`` says whether the round then
goes on with the replies that arrived (``"continue"``) or the run stops (``"fail"``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from fedgame.core.processes import pin_threads_here
from fedgame.core.seeding import Streams
from fedgame.core.server_update import RoundContext, ServerUpdate
from fedgame.core.types import DIVERGED, LOCAL_GRAD_VARIANCE, ClientResult, RoundOutcome, RoundState, Selection
from fedgame.incentives.base import Incentive, NoIncentive
from fedgame.privacy.plans import ClientPrivacy
from fedgame.selection.base import SelectionStrategy
from fedgame.sim.client import ClientJob, Executor, InProcessExecutor
from fedgame.sim.local import LocalTrainer, evaluate, flat_params

if TYPE_CHECKING:
    from fedgame.data import FederatedDataset
    from fedgame.privacy.accountants import Accountant

__all__ = ["Engine", "MissingReplies", "OnMissing", "PendingRound", "RoundDriver", "RoundLoop", "RunSink", "RunResult"]

OnMissing = Literal["continue", "fail"]

log = logging.getLogger(__name__)


class RoundDriver(Protocol):
    """Runs ``loop``'s rounds ``todo`` and hands each finished record to ``commit``, in order."""

    def __call__(self, loop: "RoundLoop", todo: range, commit: Callable[[dict[str, Any]], None]) -> None: ...


class RunSink(Protocol):
    """Where a run's records and checkpoints go (``experiments.ResultStore`` is one)."""

    def append(self, record: dict[str, Any]) -> None: ...
    def save_checkpoint(self, state: dict[str, Any]) -> None: ...
    def load_checkpoint(self) -> dict[str, Any] | None: ...


@dataclass
class RunResult:
    params: torch.Tensor
    records: list[dict[str, Any]]
    epsilons: np.ndarray
    selected_counts: np.ndarray
    wall_time: float
    resumed_from: int = 0
    extras: dict[str, Any] = field(default_factory=dict)


class MissingReplies(RuntimeError):
    """Selected clients did not reply and the run was told to fail (``on_missing="fail"``)."""


class RoundLoop:
    """The run loop every engine shares (:class:`Engine`, :class:`~fedgame.sim.jdp.JDPEngine`):
    resume from the sink's checkpoint, then one ``round(t)`` at a time, each record appended and
    a checkpoint written (both atomic) before the next round starts, so a killed run loses at
    most the round in progress. Subclasses provide ``round``, ``state_dict``/``load_state_dict``
    and the attributes below."""

    t_next: int
    records: list[dict[str, Any]]
    params: torch.Tensor
    selected_counts: np.ndarray
    accountant: "Accountant"
    delta: float
    _rounds: int | None
    driver: "RoundDriver | None" = None
    """Who drives the rounds: None runs them here, one ``round(t)`` after another; a Flower
    strategy (:class:`~fedgame.deploy.flower.strategy.FedgameStrategy`) drives them from its
    own loop, calling back into ``begin_round``/``finish_round`` and ``commit``."""

    model: nn.Module
    data: "FederatedDataset"
    trainer: LocalTrainer
    streams: Streams
    eval_every: int
    _test: tuple[torch.Tensor, torch.Tensor]
    evaluator: "Callable[[torch.Tensor], tuple[float, float]] | None" = None
    """Test accuracy and loss of flat parameters; None: :func:`~fedgame.sim.local.evaluate`
    here. A worker pool shares the test batches out (:meth:`~fedgame.sim.pool.WorkerPool.evaluate`)."""

    def _init_loop(
        self,
        *,
        model: nn.Module,
        data: "FederatedDataset",
        trainer: LocalTrainer,
        accountant: "Accountant",
        streams: Streams,
        eval_every: int,
        delta: float,
    ) -> None:
        """The set-up every engine shares, called once by each constructor after its own checks:
        checks ``eval_every``, keeps the arguments, takes the test tensors from ``data``, starts
        the server's parameters from ``model`` (:func:`~fedgame.sim.local.flat_params`, θ⁰), no
        client selected yet, no record, round 0 next. Draws nothing at random."""
        if eval_every < 1:
            raise ValueError(f"train.eval_every: must be >= 1, got {eval_every}")
        self.model = model
        self.data = data
        self.trainer = trainer
        self.accountant = accountant
        self.streams = streams
        self.eval_every = eval_every
        self.delta = delta
        _, _, x_test, y_test = data.as_tensors()
        self._test = (x_test, y_test)
        self.params = flat_params(model)
        self.selected_counts = np.zeros(data.n_clients, dtype=np.int64)
        self.records = []
        self.t_next = 0
        self._rounds = None  # set by run(); the last round is always evaluated

    def round(self, t: int) -> dict[str, Any]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def _loop_state(self) -> dict[str, Any]:
        """The checkpoint entries every engine has (subclasses add their plug-ins' state)."""
        return {
            "t_next": self.t_next,
            "params": self.params.clone(),
            "selected_counts": self.selected_counts.copy(),
            "accountant": self.accountant.state_dict(),
            "records": list(self.records),
        }

    def _load_loop_state(self, state: dict[str, Any]) -> None:
        self.t_next = int(state["t_next"])
        self.params = state["params"].clone()
        self.selected_counts = np.asarray(state["selected_counts"]).copy()
        self.accountant.load_state_dict(state["accountant"])
        self.records = list(state["records"])

    def _evaluate_into(self, record: dict[str, Any], t: int, clients: np.ndarray | None = None) -> None:
        """Test accuracy/loss of the server's model and ε spent (max and mean over ``clients``,
        default all) every ``eval_every`` rounds and on the last; NaN on the other rounds."""
        last = self._rounds is not None and t == self._rounds - 1
        if (t + 1) % self.eval_every == 0 or last:
            acc, loss = (
                self.evaluator(self.params)
                if self.evaluator is not None
                else evaluate(self.model, self.params, *self._test, loss=self.trainer.loss)
            )
            eps = self.accountant.epsilons(self.delta)
            eps = eps if clients is None else eps[clients]
            record.update(test_acc=acc, test_loss=loss, eps_max=float(eps.max()), eps_mean=float(eps.mean()))
        else:
            nan = float("nan")
            record.update(test_acc=nan, test_loss=nan, eps_max=nan, eps_mean=nan)

    def run(
        self,
        rounds: int,
        *,
        sink: RunSink | None = None,
        resume: bool = False,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Rounds ``t_next .. rounds-1`` (after resuming from ``sink``'s checkpoint when
        ``resume``), each committed (record appended, checkpoint written) before the next. The
        rounds are driven by ``self.driver`` when one is set (Flower's strategy), else here."""
        if rounds < 1:
            raise ValueError(f"train.rounds: must be >= 1, got {rounds}")
        pin_threads_here()
        self._rounds = rounds
        resumed_from = 0
        if resume and sink is not None:
            ckpt = sink.load_checkpoint()
            if ckpt is not None:
                self.load_state_dict(ckpt)
                resumed_from = self.t_next
                log.info("resuming at round %d", self.t_next)

        def commit(record: dict[str, Any]) -> None:
            self.commit(record, sink=sink, on_round=on_round)

        todo = range(self.t_next, rounds)
        if self.driver is None:
            for t in todo:
                commit(self.round(t))
        elif todo:
            self.driver(self, todo, commit)
        if self.t_next != rounds:
            raise RuntimeError(f"the round driver stopped at round {self.t_next} of {rounds}")
        wall = float(sum(r["round_time"] for r in self.records))
        return RunResult(
            params=self.params,
            records=self.records,
            epsilons=self.accountant.epsilons(self.delta),
            selected_counts=self.selected_counts,
            wall_time=wall,
            resumed_from=resumed_from,
        )

    def commit(
        self, record: dict[str, Any], *, sink: RunSink | None = None, on_round: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Round ``record["round"]`` is done: keep its record, move on, and (with a sink)
        append the record and write the checkpoint before anything else happens."""
        if int(record["round"]) != self.t_next:
            raise RuntimeError(f"commit: round {record['round']} finished but round {self.t_next} was next")
        self.records.append(record)
        self.t_next += 1
        if sink is not None:
            sink.append(record)
            sink.save_checkpoint(self.state_dict())
        if on_round is not None:
            on_round(record)


class Engine(RoundLoop):
    """One federated run (see module docstring for the round); clients are reached only
    through ``executor`` (default: in this process)."""

    def __init__(
        self,
        *,
        model: nn.Module,
        data: "FederatedDataset",
        trainer: LocalTrainer,
        selection: SelectionStrategy,
        privacy: ClientPrivacy,
        accountant: "Accountant",
        server_update: ServerUpdate,
        streams: Streams,
        clients_per_round: int,
        incentive: Incentive | None = None,
        eval_every: int = 1,
        delta: float = 1e-5,
        executor: Executor | None = None,
        on_missing: OnMissing = "continue",
    ) -> None:
        if on_missing not in ("continue", "fail"):
            raise ValueError(f"on_missing: must be 'continue' or 'fail', got {on_missing!r}")
        if clients_per_round < 1:
            raise ValueError(f"train.clients_per_round: must be >= 1, got {clients_per_round}")
        self._init_loop(
            model=model,
            data=data,
            trainer=trainer,
            accountant=accountant,
            streams=streams,
            eval_every=eval_every,
            delta=delta,
        )
        self.selection = selection
        self.privacy = privacy
        self.server_update = server_update
        self.k = clients_per_round
        self.incentive = incentive or NoIncentive()
        self._grad_variance = LOCAL_GRAD_VARIANCE in selection.needs
        self.sizes = np.asarray(data.sizes)
        self.theta = self.sizes / self.sizes.sum()
        self._parts = [torch.as_tensor(p, dtype=torch.long) for p in data.parts]
        self.executor: Executor = executor or InProcessExecutor(
            trainer=trainer, model=model, parts=self._parts, streams=streams, classes=data.train.classes
        )
        self.on_missing: OnMissing = on_missing
        self.server_state = self.server_update.init(self.params)

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **self._loop_state(),
            "server_state": self.server_state,
            "selection": self.selection.state_dict(),
            "privacy": self.privacy.state_dict(),
            "incentive": self.incentive.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_loop_state(state)
        self.server_state = state["server_state"]
        self.selection.load_state_dict(state["selection"])
        self.privacy.load_state_dict(state["privacy"])
        self.incentive.load_state_dict(state["incentive"])

    # -- one round ----------------------------------------------------------------------
    def job(self, t: int, client: int, copy: int) -> ClientJob:
        """Client ``client``'s job in round ``t``: the global parameters and what its privacy
        plan says it applies (DP-SGD per step, a mechanism on the upload)."""
        n = int(self.sizes[client])
        return ClientJob(
            t=t,
            client=client,
            copy=copy,
            params=self.params,
            dpsgd=self.privacy.dpsgd(client, t, n),
            upload=self.privacy.upload(client, t, n),
            grad_variance=self._grad_variance,
        )

    def account(self, t: int, result: ClientResult) -> None:
        """Charge the client's ledger for a training whose result arrived."""
        client = int(result.client)
        for event, count in self.privacy.events(client, t, int(self.sizes[client]), result.steps):
            self.accountant.record([client], event, count)

    def round(self, t: int) -> dict[str, Any]:
        """Round ``t`` in process: select, train the selected clients through the executor,
        aggregate what came back (see the module docstring)."""
        pending = self.begin_round(t)
        pending.probe.train_many(pending.keys)
        return self.finish_round(pending)

    def begin_round(self, t: int) -> "PendingRound":
        """The first half of round ``t``: selection (which may probe clients through the
        executor) and payments; the returned round lists the trainings still to run
        (:meth:`PendingRound.jobs`). A strategy that sends them itself (Flower's) hands the
        results to :meth:`PendingRound.deliver`, then calls :meth:`finish_round`."""
        tic = time.perf_counter()
        k = self.incentive.clients_per_round(t) or self.k
        probe = _RoundProbe(self, t)
        state = RoundState(t=t, k=k, sizes=self.sizes, theta=self.theta, probe=probe)
        sel = self.selection.select(state, self.streams.numpy("selection", t))
        select_time = time.perf_counter() - tic
        payments = self.incentive.settle(t, sel)
        if sel.independent_copies:
            keys = [(int(c), j) for j, c in enumerate(sel.indices)]
        else:
            keys = [(int(c), 0) for c in sel.clients]
        return PendingRound(t=t, state=state, selection=sel, payments=payments, probe=probe, keys=keys, tic=tic, select_time=select_time)

    def finish_round(self, pending: "PendingRound") -> dict[str, Any]:
        """The second half of round ``pending.t``: aggregate the replies that arrived (or stop,
        ``on_missing="fail"``), update the selection's state, evaluate; the round's record."""
        t, sel, probe, payments, state = pending.t, pending.selection, pending.probe, pending.payments, pending.state
        got = probe.train_many(pending.keys, run=False)
        if sel.independent_copies:
            slot_keys = pending.keys
            results = [r for r in (got[key] for key in slot_keys) if r is not None]
        else:
            results = [r for r in (got[(int(c), 0)] for c in sel.clients) if r is not None]
            slot_keys = [(int(c), 0) for c in sel.indices]
        keep = np.array([got[key] is not None for key in slot_keys], dtype=bool)
        missing = sorted({key[0] for key, ok in zip(slot_keys, keep, strict=True) if not ok})
        if missing and self.on_missing == "fail":
            raise MissingReplies(
                f"round {t}: no reply from selected client(s) {missing} (on_missing='fail'; "
                "'continue' ends the round with the replies that arrived)"
            )
        if missing:
            log.warning("round %d: no reply from client(s) %s; aggregating the %d replies that arrived", t, missing, len(results))
        used = sel if keep.all() else replace(sel, indices=sel.indices[keep], probs=sel.probs[keep])
        slot_updates = [got[key].update for key, ok in zip(slot_keys, keep, strict=True) if ok]  # type: ignore[union-attr]  # ok: not None
        server_metrics: dict[str, float] = {}  # what the server update reports (e.g. max_agg_weight)
        # a central-DP plan releases (and is charged for) noise every round, even when no client
        # was sampled or replied: skipping the release would make the output depend on the sample
        if slot_updates or self.privacy.releases_empty_rounds:
            ctx = RoundContext(
                t=t, selection=used, theta=self.theta, params=self.params, rng=self.streams.numpy("server", t), metrics=server_metrics
            )
            out, self.server_state = self.server_update.update(slot_updates, self.server_state, ctx)
            self.params = self.params + out[0]
        replied = np.unique(np.array([r.client for r in results], dtype=np.int64))
        diverged = sorted({int(r.client) for r in results if r.extras.get(DIVERGED, 0.0) > 0})
        if diverged:
            log.warning(
                "round %d: local training of client(s) %s diverged (non-finite update); they uploaded a zero displacement", t, diverged
            )
        np.add.at(self.selected_counts, sel.clients, 1)
        outcome = RoundOutcome(t=t, selection=sel, results=results)
        self.selection.after_round(state, outcome)

        nan = float("nan")
        record: dict[str, Any] = {
            "round": t,
            "n_selected": int(sel.clients.size),
            "train_loss": float(np.mean(losses)) if (losses := [r.train_loss for r in results if math.isfinite(r.train_loss)]) else nan,
            "payments": float(np.sum(payments)),
            "clipped_fraction": float(np.mean([r.extras["clipped_fraction"] for r in results])) if results else nan,
            "selected": json.dumps(sel.indices.tolist()),
            "replied": json.dumps(replied.tolist()),
            "missing": json.dumps(missing),
            "diverged": json.dumps(diverged),
            "select_time": pending.select_time,
            "probe_loss_queries": probe.loss_queries,
            "probe_trainings": probe.extra_trainings(sel),
            **server_metrics,
            **self.incentive.metrics(t, sel),
        }
        self._evaluate_into(record, t)
        record["round_time"] = time.perf_counter() - pending.tic
        return record

    def client_losses(self, clients: np.ndarray) -> np.ndarray:
        """Global-model training loss on each of ``clients``' whole local data (no noise)."""
        losses = np.asarray(self.executor.losses(self.params, np.asarray(clients, dtype=np.int64)), dtype=np.float64)
        if np.isnan(losses).any():
            lost = np.asarray(clients)[np.isnan(losses)].tolist()
            raise MissingReplies(f"round {self.t_next}: no loss reply from client(s) {lost}; the probe needs every candidate's loss")
        return losses


@dataclass
class PendingRound:
    """A round between :meth:`Engine.begin_round` and :meth:`Engine.finish_round`: the
    selection made, the trainings it needs (``keys``: ``(client, copy)``)."""

    t: int
    state: RoundState
    selection: Selection
    payments: np.ndarray
    probe: "_RoundProbe"
    keys: list[tuple[int, int]]
    tic: float
    select_time: float

    def jobs(self) -> list[ClientJob]:
        """The jobs of the trainings not yet run (a strategy may have trained some while
        selecting: they are reused, not sent again)."""
        engine = self.probe.engine
        return [engine.job(self.t, c, j) for c, j in self.probe.todo(self.keys)]

    def deliver(self, jobs: Sequence[ClientJob], results: Sequence[ClientResult | None]) -> None:
        """The results of :meth:`jobs` (None where no reply came back), in job order."""
        self.probe.deliver(jobs, results)


class _RoundProbe:
    """The round's :class:`~fedgame.core.types.Probe`: loss queries at the global model and
    local trainings, cached per (client, copy) so the round reuses what a strategy trained.

    Trainings go to the executor in batches (a whole list at once, never one client at a
    time when the list is known), and every result that comes back is accounted at once."""

    def __init__(self, engine: Engine, t: int) -> None:
        self.engine, self.t = engine, t
        self.cache: dict[tuple[int, int], ClientResult | None] = {}
        self.loss_queries = 0

    def train_many(self, keys: Sequence[tuple[int, int]], *, run: bool = True) -> dict[tuple[int, int], ClientResult | None]:
        """Results for ``(client, copy)`` keys, training those not yet tried in one batch
        (``run=False``: those not yet tried count as not replied)."""
        todo = self.todo(keys)
        if todo and run:
            jobs = [self.engine.job(self.t, c, j) for c, j in todo]
            self.deliver(jobs, self.engine.executor.train(jobs))
        return {key: self.cache.get(key) for key in keys}

    def todo(self, keys: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The keys not yet trained this round, each once, in order."""
        return list(dict.fromkeys(key for key in keys if key not in self.cache))

    def deliver(self, jobs: Sequence[ClientJob], results: Sequence[ClientResult | None]) -> None:
        """Record the results of ``jobs`` (None: no reply); every result is accounted once."""
        if len(results) != len(jobs):
            raise RuntimeError(f"executor: {len(jobs)} jobs but {len(results)} results")
        for job, res in zip(jobs, results, strict=True):
            key = (job.client, job.copy)
            if key in self.cache:
                raise RuntimeError(f"round {self.t}: client {job.client} (copy {job.copy}) delivered twice")
            if res is not None:
                self.engine.account(self.t, res)
            self.cache[key] = res

    def train(self, client: int, copy: int = 0) -> ClientResult | None:
        return self.train_many([(client, copy)])[(client, copy)]

    def losses(self, clients: np.ndarray) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64)
        self.loss_queries += int(clients.size)
        return self.engine.client_losses(clients)

    def updates(self, clients: np.ndarray) -> list[ClientResult]:
        """Train ``clients`` now (one batch); clients that did not reply are left out."""
        keys = [(int(c), 0) for c in np.asarray(clients, dtype=np.int64)]
        got = self.train_many(keys)
        return [r for r in (got[key] for key in keys) if r is not None]

    def extra_trainings(self, sel: Selection) -> int:
        """Trainings the strategy asked for beyond the selected clients (exact AOCS)."""
        used = {(int(c), j) for j, c in enumerate(sel.indices)} if sel.independent_copies else {(int(c), 0) for c in sel.clients}
        return len(set(self.cache) - used)
