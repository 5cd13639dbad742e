"""The vocabulary every plug-in shares: who was selected, with which probabilities, what came back.

Model parameters and client updates travel as flat ``float32`` tensors (``Params``): every
mechanism of the four papers (update clipping, parameter perturbation, importance weighting,
leave-one-out groups) is a vector operation, so one representation serves them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

__all__ = [
    "ClientId",
    "Params",
    "Selection",
    "RoundState",
    "Probe",
    "ClientResult",
    "DIVERGED",
    "LOCAL_GRAD_VARIANCE",
    "RoundOutcome",
    "steps_per_round",
    "finite_or_none",
]

ClientId = int
Params = torch.Tensor

Scheme = Literal["draws", "inclusion"]


@dataclass(frozen=True)
class Selection:
    """The clients of one round and the probabilities they were chosen with.

    ``scheme="draws"``: ``indices`` are ``k`` independent draws (repeats allowed) from a
    distribution ``x``; ``probs[j] = x[indices[j]]``. Unbiased weight of slot j:
    ``theta_i / (k x_i)`` (FedPCS Eq. 4).

    ``scheme="inclusion"``: ``indices`` are distinct clients, each included with probability
    ``probs[j] = pi_i`` (Poisson/Bernoulli, systematic PIPS, without-replacement uniform);
    unbiased (Horvitz-Thompson) weight ``theta_i / pi_i``. ``k`` is the target sample size
    (the expected size for independent inclusion).

    ``independent_copies``: a client drawn m times trains m independent copies (PHS,
    Algorithm 1) instead of training once and counting m times (FedPCS, Sec. III-C).
    """

    indices: np.ndarray
    probs: np.ndarray
    k: int
    scheme: Scheme = "draws"
    independent_copies: bool = False

    def __post_init__(self) -> None:
        idx = np.asarray(self.indices, dtype=np.int64)
        p = np.asarray(self.probs, dtype=np.float64)
        if idx.ndim != 1 or p.shape != idx.shape:
            raise ValueError(f"selection: indices {idx.shape} and probs {p.shape} must be aligned 1-D arrays")
        lo, hi = float(p.min(initial=1)), float(p.max(initial=0))  # NaN fails both tests below
        if not (lo > 0 and hi <= 1 + 1e-12):
            raise ValueError(f"selection.probs: must lie in (0, 1], got min {lo} max {hi}")
        if self.scheme == "inclusion" and np.unique(idx).size != idx.size:
            raise ValueError("selection.indices: an inclusion sample cannot repeat a client")
        object.__setattr__(self, "indices", idx)
        object.__setattr__(self, "probs", p)

    @property
    def clients(self) -> np.ndarray:
        """The distinct selected clients, sorted."""
        return np.unique(self.indices)

    def importance_weights(self, theta: np.ndarray) -> np.ndarray:
        """Per-slot weights that make ``Σ_j w_j g_{i_j}`` unbiased for ``Σ_i θ_i g_i``."""
        th = np.asarray(theta, dtype=np.float64)[self.indices]
        w: np.ndarray
        if self.scheme == "draws":
            w = th / (self.k * self.probs)
        else:
            w = th / self.probs
        return w

    def size_weights(self, theta: np.ndarray) -> np.ndarray:
        """Per-slot data-size weights normalised over the selected slots (FedAvg; biased)."""
        th = np.asarray(theta, dtype=np.float64)[self.indices]
        w: np.ndarray = th / th.sum()
        return w

    def to_json(self) -> dict[str, Any]:
        return {
            "indices": self.indices.tolist(),
            "probs": self.probs.tolist(),
            "k": self.k,
            "scheme": self.scheme,
            "independent_copies": self.independent_copies,
        }


class Probe(Protocol):
    """What a strategy may measure at the current global model *before* it draws (the engine
    gives one per round in :attr:`RoundState.probe`; strategies that need nothing ignore it).

    ``losses`` — each client's mean training loss of the global model on its whole local data
    (power-of-choice, Cho et al. 2022; PHS's "Biased" baseline, docs/phs.md, 'Pieces'); these
    queries touch private data without noise and are counted in the round's record
    (``probe_loss_queries``) rather than privatised, as in the paper.
    ``updates`` — train the clients now (exact AOCS trains everyone); the results are cached,
    so selected clients are not trained twice, and every training is privacy-accounted."""

    def losses(self, clients: np.ndarray) -> np.ndarray: ...

    def updates(self, clients: np.ndarray) -> list[ClientResult]: ...


@dataclass(frozen=True)
class RoundState:
    """What a selection strategy may look at when it draws round ``t``."""

    t: int
    """the round, from 0"""
    k: int
    """how many clients the round draws (``train.clients_per_round``, or the incentive's
    ``clients_per_round(t)`` where it sets one)"""
    sizes: np.ndarray
    """each client's number of training examples n_i, shape (N,)"""
    theta: np.ndarray
    """each client's data weight θ_i = n_i / Σ_j n_j, shape (N,): the FedAvg weights"""
    probe: Probe | None = field(default=None, compare=False, repr=False)
    """measurements at the current global model before anyone trains (:class:`Probe`: losses,
    updates), None where nothing can be measured (the contract suites)"""

    @property
    def n_clients(self) -> int:
        return int(self.sizes.size)


LOCAL_GRAD_VARIANCE = "local_grad_variance"
"""``ClientResult.extras`` key (and ``SelectionStrategy.needs`` entry) of the client's local
mini-batch gradient variance σ_L² (DELTA, Wang et al. 2023, a FedPCS baseline, Sec. VIII-A),
measured by the trainer on request."""

DIVERGED = "diverged"
"""``ClientResult.extras`` key: 1.0 when the client's local training diverged (a non-finite
displacement) and it uploaded a zero displacement instead (see
:func:`fedgame.sim.client.run_client_job`), else 0.0."""


@dataclass
class ClientResult:
    """What one client (or one independent copy) sent back in a round.

    ``update`` is the uploaded displacement ``w_local - w_global`` (after any privatisation),
    ``train_loss`` the mean loss over its local steps, ``steps`` the local steps taken.
    """

    client: ClientId
    update: Params
    train_loss: float
    steps: int
    n_examples: int
    extras: dict[str, float] = field(default_factory=dict)


@dataclass
class RoundOutcome:
    """What strategies and mechanisms learn after round ``t`` (losses, update norms...)."""

    t: int
    selection: Selection
    results: list[ClientResult]
    metrics: Mapping[str, float] = field(default_factory=dict)

    def losses(self) -> dict[ClientId, float]:
        return {r.client: r.train_loss for r in self.results}

    def update_norms(self) -> dict[ClientId, float]:
        return {r.client: float(torch.linalg.vector_norm(r.update)) for r in self.results}


def steps_per_round(sizes: np.ndarray, *, batch_size: int, epochs: int | None, steps: int | None) -> list[int]:
    """Local steps each client takes per round (same rule as the local trainer)."""
    if steps is not None:
        return [steps] * len(sizes)
    assert epochs is not None
    return [epochs * max(1, math.ceil(int(n) / batch_size)) for n in sizes]


def finite_or_none(v: float) -> float | None:
    """``v`` as a JSON number, None where it is infinite (a public-data client's ε = ∞) or NaN."""
    return None if not np.isfinite(v) else float(v)
