"""The client side of a round, in one place: a job, the function that runs it, and executors.

The server (:class:`~fedgame.sim.engine.Engine`) decides everything about a client's round —
the round ``t``, which client (and which independent copy), the global parameters it starts
from, its DP-SGD settings and the mechanism that privatises its upload — and writes it into a
:class:`ClientJob`. :func:`run_client_job` does the work: it is the *only* client-side code
path, called in process by :class:`InProcessExecutor` and on a Flower SuperNode by the
ClientApp of :mod:`fedgame.deploy.flower`. The client draws its randomness from the run's
streams at ``(t, client, copy)`` (``train`` for batches and DP-SGD noise, ``noise`` for the
upload), so the same job gives the same result in any process.

An :class:`Executor` is how the engine reaches clients: ``train(jobs)`` returns one result per
job in job order, or None for a client that did not reply (a dead or unreachable node);
``losses(params, clients)`` answers the probe's loss queries; ``query(name, clients, args)``
asks clients a named question before (or between) rounds. The accountant is *not* touched
here: the server records privacy events only for the results that came back.

Queries (:data:`~fedgame.core.queries.QUERIES`, re-exported here) are what a mechanism needs
from clients besides training: QI-DPFL's screening needs each client's label histogram
(``label_counts``), JDP-FL's auction each client's cost bid (``bid``, registered by
:mod:`fedgame.incentives.auctions`). A client answers from its own data only (a
:class:`ClientView`), with the same registered function in process and on a Flower SuperNode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

import fedgame.incentives.auctions  # noqa: F401  (registers the built-in ``bid`` query)
from fedgame.core.queries import QUERIES, ClientView, QueryArgs, answer_query, check_query
from fedgame.core.seeding import Streams
from fedgame.core.types import DIVERGED, LOCAL_GRAD_VARIANCE, ClientResult
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalTrainer, client_losses

__all__ = [
    "QUERIES",
    "ClientJob",
    "ClientView",
    "Executor",
    "InProcessExecutor",
    "QueryArgs",
    "answer_query",
    "check_query",
    "run_client_job",
]


@dataclass(frozen=True)
class ClientJob:
    """One client's (or one independent copy's) work in round ``t``, as the server sets it.

    ``params`` are the global parameters to start from (flat float32); ``dpsgd`` the per-step
    DP-SGD of the client's privacy plan (None: plain SGD); ``upload`` the mechanism that clips
    and noises its displacement (None: sent as is); ``grad_variance`` asks the trainer for the
    local mini-batch gradient variance (DELTA)."""

    t: int
    client: int
    copy: int
    params: torch.Tensor
    dpsgd: DPSGD | None = None
    upload: GaussianMechanism | None = None
    grad_variance: bool = False

    def __post_init__(self) -> None:
        for name in ("t", "client", "copy"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"job.{name}: must be >= 0, got {getattr(self, name)}")


def run_client_job(job: ClientJob, *, trainer: LocalTrainer, indices: torch.Tensor, streams: Streams) -> ClientResult:
    """Train ``job.client`` from ``job.params`` on its examples ``indices`` and return its
    (privatised) upload.

    Local training draws from ``streams.torch("train", t, client, copy)``; the upload, if the
    job says to privatise it, is clipped and noised with ``streams.torch("noise", t, client,
    copy)``. Nothing is accounted here: the server records the privacy events of the results
    it receives.

    A local training that *diverged* (its displacement has a NaN or an infinite entry, e.g.
    plain SGD at a large step size on a skewed shard) uploads a zero displacement instead, as if
    the client had not moved, and says so in ``extras[DIVERGED]`` (1.0; else 0.0). Why zero and
    not a missing reply: under DP a reply that is withheld *because* of the client's data would
    itself leak, while the substitution keeps the upload's guarantee — with an upload mechanism
    it is a function of the data of norm ≤ C, like any clipped displacement, and the noise is
    added as usual; under DP-SGD it is post-processing of the noisy steps. So the client is
    charged as usual and the engine lists it in the round's ``diverged`` column."""
    gen = streams.torch("train", job.t, job.client, job.copy)
    res = trainer.train(job.params, indices, gen, job.dpsgd, grad_variance=job.grad_variance)
    update = res.params - job.params
    diverged = not bool(torch.isfinite(update).all())
    if diverged:
        update = torch.zeros_like(update)
    if job.upload is not None:
        noise = streams.torch("noise", job.t, job.client, job.copy)
        if job.upload.on == "params":  # NbAFL: clip and noise the local model w_i itself, send w̃_i − w(t)
            update = job.upload.privatize(job.params + update, noise) - job.params
        else:
            update = job.upload.privatize(update, noise)
    extras: dict[str, float] = {"clipped_fraction": res.clipped_fraction, DIVERGED: float(diverged)}
    if res.grad_variance is not None and math.isfinite(res.grad_variance):
        extras[LOCAL_GRAD_VARIANCE] = res.grad_variance
    return ClientResult(job.client, update, res.train_loss, res.steps, int(indices.numel()), extras)


class Executor(Protocol):
    """How the engine reaches its clients (in process, or over Flower)."""

    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        """Run ``jobs`` (a whole batch at once, so a remote executor can send them in
        parallel); one entry per job, in job order; None where no reply came back."""
        ...

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        """Mean training loss of ``params`` on each of ``clients``' whole local data."""
        ...

    def query(self, name: str, clients: Sequence[int] | np.ndarray, args: QueryArgs | None = None) -> list[np.ndarray | None]:
        """Ask each of ``clients`` the registered query ``name`` (:data:`QUERIES`; an unknown
        name is a ValueError naming the known ones); one answer per client, in order; None
        where no reply came back."""
        ...


class InProcessExecutor:
    """Every client in this process, one after the other, with one shared trainer.

    ``classes`` is the number of label classes (for ``label_counts``); None: the largest
    training label + 1."""

    def __init__(
        self,
        *,
        trainer: LocalTrainer,
        model: nn.Module,
        parts: Sequence[torch.Tensor],
        streams: Streams,
        classes: int | None = None,
    ) -> None:
        self.trainer = trainer
        self.model = model
        self.parts = list(parts)
        self.streams = streams
        self.classes = int(classes) if classes is not None else int(trainer.y.max()) + 1

    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        return [run_client_job(j, trainer=self.trainer, indices=self.parts[j.client], streams=self.streams) for j in jobs]

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        parts = [self.parts[int(c)] for c in clients]
        return client_losses(self.model, params, self.trainer.x, self.trainer.y, parts, loss=self.trainer.loss)

    def view(self, client: int) -> ClientView:
        """What client ``client`` answers queries from (its own labels only)."""
        return ClientView.of(
            client, y=self.trainer.y, indices=self.parts[int(client)], classes=self.classes, n_clients=len(self.parts), streams=self.streams
        )

    def query(self, name: str, clients: Sequence[int] | np.ndarray, args: QueryArgs | None = None) -> list[np.ndarray | None]:
        check_query(name)
        return [answer_query(name, self.view(int(c)), args) for c in clients]
