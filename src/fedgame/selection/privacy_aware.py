"""Privacy-aware sampling (FedPCS Sec. III-C, Def. 2): clients are drawn in proportion to their
privacy budgets, x_i^t = ρ_i^t / Σ_j ρ_j^t, so a client that accepts less noise is sampled
more often (and, with importance-weighted aggregation, weighted less per draw).

Two samplers (the paper's inclusion probability 1 − (1 − x_i)^K and unbiased weights
θ_i/(K x_i) both hold only for K draws *with* replacement, though its text says "without"):

* ``"multinomial"`` (default): K independent draws with replacement; P(i in sample) =
  1 − (1 − x_i)^K, the inclusion probability of the client utility (Eq. 14).
* ``"pips"``: exactly K distinct clients with inclusion probabilities π_i = min(1, c ρ_i),
  Σ π = K (iterative capping), drawn by Madow's systematic sampling; Horvitz–Thompson weights.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel

from fedgame.core.plugins import BuildContext, PluginConfig

from fedgame.core.types import RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_k_at_most_n, multinomial

__all__ = ["PrivacyAware", "pips_inclusion", "systematic_sample"]


def pips_inclusion(weights: np.ndarray, k: int) -> np.ndarray:
    """Inclusion probabilities π_i = min(1, c w_i) with Σ π = k, by iterative capping
    (``pips``): cap the clients whose share would exceed 1, spread the rest."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.size
    if not 1 <= k <= n:
        raise ValueError(f"train.clients_per_round: must be in [1, {n}] for sampling without replacement, got {k}")
    if np.any(w < 0) or not np.all(np.isfinite(w)) or np.count_nonzero(w) < k:
        raise ValueError(f"pips: weights must be finite, >= 0, with at least k = {k} positive, got {w}")
    pi = np.zeros(n)
    capped = np.zeros(n, dtype=bool)
    while True:
        free = ~capped
        rest = k - capped.sum()
        pi[free] = rest * w[free] / w[free].sum()
        pi[capped] = 1.0
        over = free & (pi >= 1.0)
        if not over.any():
            return pi
        capped |= over


def systematic_sample(pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Madow's systematic sampling: one u ~ U[0,1); select i when the cumulative sum of π
    crosses u + m for an integer m. Exactly round(Σπ) distinct units, each with probability π_i."""
    cum = np.concatenate([[0.0], np.cumsum(pi)])
    k = int(round(cum[-1]))
    points = rng.random() + np.arange(k)
    return np.searchsorted(cum, points, side="right") - 1


@SELECTIONS.register("privacy_aware")
class PrivacyAware(SelectionStrategy):
    """x_i^t ∝ ρ_i^t (FedPCS Sec. III-C); ``rho`` is per client or an (N, rounds) schedule."""

    class Config(PluginConfig):
        """x_i^t ∝ ρ_i^t (FedPCS Sec. III-C); the ρ schedule is the FedPCS game's
        (``incentive.kind: fedpcs``)."""

        kind: Literal["privacy_aware"] = "privacy_aware"

        def check_run(self, run: Any) -> None:
            if self.sampler == "pips":
                check_k_at_most_n(run, "sampler 'pips'")

        requires: ClassVar[frozenset[str]] = frozenset({"fedpcs_game"})
        sampler: Literal["multinomial", "pips"] = "multinomial"

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> PrivacyAware:
        """The ρ schedule of the FedPCS plan in ``ctx.plan``."""
        from fedgame.incentives.fedpcs import FedPCSPlan

        if not isinstance(ctx.plan, FedPCSPlan):
            raise ValueError("selection.kind: 'privacy_aware' needs incentive.kind 'fedpcs'")
        c: Any = cfg
        return cls(rho=ctx.plan.rho, sampler=c.sampler)

    def __init__(self, *, rho: np.ndarray, sampler: Literal["multinomial", "pips"] = "multinomial") -> None:
        r = np.asarray(rho, dtype=np.float64)
        if r.ndim not in (1, 2) or np.any(~np.isfinite(r)) or np.any(r <= 0):
            raise ValueError("selection.rho: must be a positive vector (N,) or schedule (N, rounds)")
        if sampler not in ("multinomial", "pips"):
            raise ValueError(f"selection.sampler: must be 'multinomial' or 'pips', got {sampler!r}")
        self.rho = r
        self.sampler = sampler
        self._pips: tuple[bytes, int, np.ndarray] | None = None  # the last round's π (same ρ: same π)

    def rho_at(self, t: int) -> np.ndarray:
        return self.rho if self.rho.ndim == 1 else self.rho[:, min(t, self.rho.shape[1] - 1)]

    def probabilities(self, state: RoundState) -> np.ndarray:
        r = self.rho_at(state.t)
        if r.size != state.n_clients:
            raise ValueError(f"selection.rho: has {r.size} clients, the data has {state.n_clients}")
        probs: np.ndarray = r / r.sum()
        return probs

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        x = self.probabilities(state)
        if self.sampler == "multinomial":
            return multinomial(rng, x, state.k)
        key = x.tobytes()
        if self._pips is None or self._pips[0] != key or self._pips[1] != state.k:
            pi = pips_inclusion(x, state.k)
            pi.flags.writeable = False
            self._pips = (key, state.k, pi)
        pi = self._pips[2]
        idx = systematic_sample(pi, rng)
        return Selection(indices=idx, probs=pi[idx], k=state.k, scheme="inclusion")
