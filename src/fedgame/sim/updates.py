"""Aggregation rules and server steps as :class:`~fedgame.core.ServerUpdate` values.

Each rule maps the per-slot client updates (displacements ``w_i - w``) to one vector; the
engine adds the chain's output to the global parameters. Rules are registered by name so a
recipe can pick one; `chain` composes them with server steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fedgame.core.registry import Registry
from fedgame.core.server_update import RoundContext, ServerUpdate, Updates
from fedgame.core.types import Params, Selection

__all__ = [
    "AGGREGATORS",
    "weighted_sum",
    "upload_weights",
    "size_weighted_mean",
    "importance_weighted_mean",
    "uniform_mean",
    "server_sgd",
]

AGGREGATORS: Registry[ServerUpdate] = Registry("aggregator")


def weighted_sum(updates: Sequence[Params], weights: np.ndarray) -> Params:
    """Σ_j w_j u_j with float64 weights applied in the updates' dtype."""
    if len(updates) != len(weights):
        raise ValueError(f"aggregation: {len(updates)} updates but {len(weights)} weights")
    stacked = torch.stack(list(updates))
    w = torch.as_tensor(np.asarray(weights), dtype=stacked.dtype)
    return w @ stacked


def upload_weights(selection: Selection, weights: np.ndarray) -> np.ndarray:
    """The weight each upload enters the aggregate with, from per-slot ``weights``: a client
    drawn m times uploads once and carries its m slot weights summed (FedPCS Eq. 4); with
    ``independent_copies`` every slot is its own upload. Ordered like ``selection.clients``
    (or like the slots, for independent copies)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != selection.indices.shape:
        raise ValueError(f"aggregation: {selection.indices.size} slots but {w.size} weights")
    if selection.independent_copies:
        return w
    idx = selection.indices  # (bincount over client ids: np.unique's sort costs more at K ~ 10)
    out: np.ndarray = np.bincount(idx, weights=w)[np.bincount(idx) > 0]
    return out


def _rule(weights: Callable[[RoundContext], np.ndarray]) -> ServerUpdate:
    """A weighted sum of the slots; reports ``max_agg_weight``, the largest weight any upload
    got this round (:func:`upload_weights`), in ``ctx.metrics`` (rarely drawn low-ρ clients
    enter FedPCS Eq. 4 with large weights; docs/fedpcs.md, 'Baseline budgets')."""

    def update(updates: Sequence[Params], state: Any, ctx: RoundContext) -> tuple[Updates, Any]:
        w = weights(ctx)
        ctx.metrics["max_agg_weight"] = float(upload_weights(ctx.selection, w).max())
        return [weighted_sum(updates, w)], state

    return ServerUpdate(lambda params: (), update)


@AGGREGATORS.register(
    "fedavg", doc="Data-size weights over the selected slots, θ_i/Σ_S θ (McMahan et al. 2017; biased under non-uniform sampling)."
)
def size_weighted_mean() -> ServerUpdate:
    """Σ_{j∈S} θ_{i_j} u_j / Σ_{j∈S} θ_{i_j} (FedAvg, Eq. 2 of QI-DPFL; Fed-CBS)."""
    return _rule(lambda ctx: ctx.selection.size_weights(ctx.theta))


@AGGREGATORS.register("importance", doc="Unbiased importance weights θ_i/(K x_i) or θ_i/π_i (FedPCS Eq. 4).")
def importance_weighted_mean() -> ServerUpdate:
    """Σ_j θ_{i_j} u_j / (K x_{i_j}) for draws, Σ_{i∈S} θ_i u_i / π_i for inclusion samples;
    unbiased for Σ_i θ_i u_i (FedPCS Eq. 4)."""
    return _rule(lambda ctx: ctx.selection.importance_weights(ctx.theta))


@AGGREGATORS.register("mean", doc="Plain mean over the K slots, (1/K) Σ_j u_j (PHS Algorithm 1 line 8).")
def uniform_mean() -> ServerUpdate:
    """(1/K) Σ_j u_j over slots (PHS line 8, QI-DPFL DP methods)."""
    return _rule(lambda ctx: np.full(ctx.selection.indices.size, 1.0 / ctx.selection.indices.size))


def server_sgd(*, lr: float = 1.0) -> ServerUpdate:
    """Scale the aggregate by the server learning rate η_s (model averaging: η_s = 1)."""
    if not lr > 0:
        raise ValueError(f"server.lr: must be > 0, got {lr}")

    def update(updates: Sequence[Params], state: Any, ctx: RoundContext) -> tuple[Updates, Any]:
        return [u * lr for u in updates], state

    return ServerUpdate(lambda params: (), update)
