"""The in-process simulation engine: one run, round by round.

Round ``t``:

1. ``sel = selection.select(state_t, rng_selection[t])`` — clients *and* their probabilities
2. ``payments = incentive.settle(t, sel)``
3. each selected client (or independent copy) trains locally from the global parameters with
   its own generator ``train[t, i, copy]``; DP-SGD if its privacy plan says so
4. its displacement is clipped and noised if the plan privatises uploads (``noise[t, i, copy]``)
5. ``accountant.record(i, events)`` for every client that trained
6. ``params += server_update(updates, ctx)`` (importance- or size-weighted, then server step)
7. ``selection.after_round(...)``; evaluation every ``eval_every`` rounds
8. the round's record is appended and a checkpoint written (both atomic): a killed run resumes
   at the first unfinished round with identical results, because every random stream is a
   function of ``(seed, stream, round, client)`` and all plug-in state is checkpointed.

The engine composes plug-ins and never branches on their type.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from fedgame.core.seeding import Streams
from fedgame.core.server_update import RoundContext, ServerUpdate
from fedgame.core.types import LOCAL_GRAD_VARIANCE, ClientResult, RoundOutcome, RoundState, Selection
from fedgame.incentives.base import Incentive, NoIncentive

from fedgame.privacy.plans import ClientPrivacy
from fedgame.selection.base import SelectionStrategy
from fedgame.sim.local import LocalTrainer, client_losses, evaluate

if TYPE_CHECKING:
    from fedgame.data import FederatedDataset
    from fedgame.privacy.accountants import Accountant

__all__ = ["Engine", "RunSink", "RunResult"]

log = logging.getLogger(__name__)


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


class Engine:
    """One federated run in this process (see module docstring for the round)."""

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
    ) -> None:
        if clients_per_round < 1:
            raise ValueError(f"train.clients_per_round: must be >= 1, got {clients_per_round}")
        if eval_every < 1:
            raise ValueError(f"train.eval_every: must be >= 1, got {eval_every}")
        self.model = model
        self.data = data
        self.trainer = trainer
        self.selection = selection
        self.privacy = privacy
        self.accountant = accountant
        self.server_update = server_update
        self.streams = streams
        self.k = clients_per_round
        self.incentive = incentive or NoIncentive()
        self.eval_every = eval_every
        self._grad_variance = LOCAL_GRAD_VARIANCE in selection.needs
        self.delta = delta
        self.sizes = np.asarray(data.sizes)
        self.theta = self.sizes / self.sizes.sum()
        self._parts = [torch.as_tensor(p, dtype=torch.long) for p in data.parts]
        x_train, y_train, x_test, y_test = data.as_tensors()
        self._test = (x_test, y_test)
        self.params = parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach().clone()
        self.server_state = self.server_update.init(self.params)
        self.selected_counts = np.zeros(self.sizes.size, dtype=np.int64)
        self.records: list[dict[str, Any]] = []
        self.t_next = 0
        self._rounds: int | None = None  # set by run(); the last round is always evaluated

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "t_next": self.t_next,
            "params": self.params.clone(),
            "server_state": self.server_state,
            "selected_counts": self.selected_counts.copy(),
            "selection": self.selection.state_dict(),
            "privacy": self.privacy.state_dict(),
            "accountant": self.accountant.state_dict(),
            "incentive": self.incentive.state_dict(),
            "records": list(self.records),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t_next = int(state["t_next"])
        self.params = state["params"].clone()
        self.server_state = state["server_state"]
        self.selected_counts = np.asarray(state["selected_counts"]).copy()
        self.selection.load_state_dict(state["selection"])
        self.privacy.load_state_dict(state["privacy"])
        self.accountant.load_state_dict(state["accountant"])
        self.incentive.load_state_dict(state["incentive"])
        self.records = list(state["records"])

    # -- one round ----------------------------------------------------------------------
    def _train_client(self, t: int, client: int, copy: int) -> ClientResult:
        n = int(self.sizes[client])
        gen = self.streams.torch("train", t, client, copy)
        res = self.trainer.train(
            self.params, self._parts[client], gen, self.privacy.dpsgd(client, t, n), grad_variance=self._grad_variance
        )
        update = res.params - self.params
        noise = self.privacy.upload(client, t, n)
        if noise is not None:
            update = noise.privatize(update, self.streams.torch("noise", t, client, copy))
        for event, count in self.privacy.events(client, t, n, res.steps):
            self.accountant.record([client], event, count)
        extras: dict[str, float] = {"clipped_fraction": res.clipped_fraction}
        if res.grad_variance is not None:
            extras[LOCAL_GRAD_VARIANCE] = res.grad_variance
        return ClientResult(client, update, res.train_loss, res.steps, n, extras)

    def round(self, t: int) -> dict[str, Any]:
        tic = time.perf_counter()
        k = self.incentive.clients_per_round(t) or self.k
        probe = _RoundProbe(self, t)
        state = RoundState(t=t, k=k, sizes=self.sizes, theta=self.theta, probe=probe)
        sel = self.selection.select(state, self.streams.numpy("selection", t))
        select_time = time.perf_counter() - tic
        payments = self.incentive.settle(t, sel)
        if sel.independent_copies:
            results = [probe.train(int(c), j) for j, c in enumerate(sel.indices)]
            slot_updates = [r.update for r in results]
        else:
            by_client = {int(c): probe.train(int(c), 0) for c in sel.clients}
            results = list(by_client.values())
            slot_updates = [by_client[int(c)].update for c in sel.indices]
        ctx = RoundContext(t=t, selection=sel, theta=self.theta, params=self.params, rng=self.streams.numpy("server", t))
        out, self.server_state = self.server_update.update(slot_updates, self.server_state, ctx)
        self.params = self.params + out[0]
        np.add.at(self.selected_counts, sel.clients, 1)
        outcome = RoundOutcome(t=t, selection=sel, results=results)
        self.selection.after_round(state, outcome)

        record: dict[str, Any] = {
            "round": t,
            "n_selected": int(sel.clients.size),
            "train_loss": float(np.mean([r.train_loss for r in results])),
            "payments": float(np.sum(payments)),
            "clipped_fraction": float(np.mean([r.extras["clipped_fraction"] for r in results])),
            "selected": json.dumps(sel.indices.tolist()),
            "select_time": select_time,
            "probe_loss_queries": probe.loss_queries,
            "probe_trainings": probe.extra_trainings(sel),
            **self.incentive.metrics(t, sel),
        }
        last = self._rounds is not None and t == self._rounds - 1
        if (t + 1) % self.eval_every == 0 or last:
            acc, loss = evaluate(self.model, self.params, *self._test)
            eps = self.accountant.epsilons(self.delta)
            record.update(test_acc=acc, test_loss=loss, eps_max=float(eps.max()), eps_mean=float(eps.mean()))
        else:
            record.update(test_acc=float("nan"), test_loss=float("nan"), eps_max=float("nan"), eps_mean=float("nan"))
        record["round_time"] = time.perf_counter() - tic
        return record

    def client_losses(self, clients: np.ndarray) -> np.ndarray:
        """Global-model training loss on each of ``clients``' whole local data (no noise)."""
        parts = [self._parts[int(c)] for c in clients]
        return client_losses(self.model, self.params, self.trainer.x, self.trainer.y, parts)

    # -- the run ------------------------------------------------------------------------
    def run(
        self,
        rounds: int,
        *,
        sink: RunSink | None = None,
        resume: bool = False,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        if rounds < 1:
            raise ValueError(f"train.rounds: must be >= 1, got {rounds}")
        self._rounds = rounds
        resumed_from = 0
        if resume and sink is not None:
            ckpt = sink.load_checkpoint()
            if ckpt is not None:
                self.load_state_dict(ckpt)
                resumed_from = self.t_next
                log.info("resuming at round %d", self.t_next)
        for t in range(self.t_next, rounds):
            record = self.round(t)
            self.records.append(record)
            self.t_next = t + 1
            if sink is not None:
                sink.append(record)
                sink.save_checkpoint(self.state_dict())
            if on_round is not None:
                on_round(record)
        wall = float(sum(r["round_time"] for r in self.records))
        return RunResult(
            params=self.params,
            records=self.records,
            epsilons=self.accountant.epsilons(self.delta),
            selected_counts=self.selected_counts,
            wall_time=wall,
            resumed_from=resumed_from,
        )


class _RoundProbe:
    """The round's :class:`~fedgame.core.types.Probe`: loss queries at the global model and
    local trainings, cached per (client, copy) so the round reuses what a strategy trained."""

    def __init__(self, engine: Engine, t: int) -> None:
        self.engine, self.t = engine, t
        self.cache: dict[tuple[int, int], ClientResult] = {}
        self.loss_queries = 0

    def train(self, client: int, copy: int = 0) -> ClientResult:
        key = (client, copy)
        if key not in self.cache:
            self.cache[key] = self.engine._train_client(self.t, client, copy)
        return self.cache[key]

    def losses(self, clients: np.ndarray) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64)
        self.loss_queries += int(clients.size)
        return self.engine.client_losses(clients)

    def updates(self, clients: np.ndarray) -> list[ClientResult]:
        return [self.train(int(c)) for c in np.asarray(clients, dtype=np.int64)]

    def extra_trainings(self, sel: Selection) -> int:
        """Trainings the strategy asked for beyond the selected clients (exact AOCS)."""
        used = {(int(c), j) for j, c in enumerate(sel.indices)} if sel.independent_copies else {(int(c), 0) for c in sel.clients}
        return len(set(self.cache) - used)
