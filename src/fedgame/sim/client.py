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
``losses(params, clients)`` answers the probe's loss queries. The accountant is *not* touched
here: the server records privacy events only for the results that came back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

from fedgame.core.seeding import Streams
from fedgame.core.types import LOCAL_GRAD_VARIANCE, ClientResult
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalTrainer, client_losses

__all__ = ["ClientJob", "Executor", "InProcessExecutor", "run_client_job"]


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
    it receives."""
    gen = streams.torch("train", job.t, job.client, job.copy)
    res = trainer.train(job.params, indices, gen, job.dpsgd, grad_variance=job.grad_variance)
    update = res.params - job.params
    if job.upload is not None:
        update = job.upload.privatize(update, streams.torch("noise", job.t, job.client, job.copy))
    extras: dict[str, float] = {"clipped_fraction": res.clipped_fraction}
    if res.grad_variance is not None:
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


class InProcessExecutor:
    """Every client in this process, one after the other, with one shared trainer."""

    def __init__(self, *, trainer: LocalTrainer, model: nn.Module, parts: Sequence[torch.Tensor], streams: Streams) -> None:
        self.trainer = trainer
        self.model = model
        self.parts = list(parts)
        self.streams = streams

    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        return [run_client_job(j, trainer=self.trainer, indices=self.parts[j.client], streams=self.streams) for j in jobs]

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        parts = [self.parts[int(c)] for c in clients]
        return client_losses(self.model, params, self.trainer.x, self.trainer.y, parts)
