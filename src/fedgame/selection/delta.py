"""DELTA: diverse client sampling (L. Wang, Y. Guo, T. Lin, X. Tang, "DELTA: Diverse client
sampling for fasting federated learning", NeurIPS 2023; a baseline of FedPCS, Sec. VIII-A).

p_i = sqrt(α1 ζ_i² + α2 σ_{L,i}²) / Σ_j sqrt(α1 ζ_j² + α2 σ_{L,j}²); K draws with replacement,
aggregated with θ_i/(K p_i) (FedPCS Eq. 4, ``aggregation.kind: importance``), unbiased.

**ζ_i (gradient diversity)** = ‖g_i − ḡ‖ with g_i the client's latest upload (the displacement
w_i − w, a pseudo-gradient up to sign and step size). The direct estimate of ∇F is Σ_j θ_j g_j
over the latest known g_j of *all* clients; keeping those is N vectors of the model's size, and a
running sum cannot drop a client's old vector without it. We estimate ∇F(w(t)) instead from the
round's own uploads, ḡ_t = Σ_{i∈S_t} θ_i g_i / Σ_{i∈S_t} θ_i (all computed at the same model
w(t); a convex combination, so one large importance weight cannot blow it up), store
ζ_i² = ‖g_i − ḡ_t‖² per client and keep it until the client is sampled again. A round with one
distinct client teaches nothing (ḡ_t = g_i), so it is skipped.

**σ_{L,i}² (local variance)** = mean over local mini-batches of ‖g_batch − ∇F_i‖² needs per-batch
gradients. The strategy declares ``needs = {LOCAL_GRAD_VARIANCE}``, so the engine asks the trainer to
measure it (``LocalTrainer.train(grad_variance=True)``: the unbiased sample variance of the
mini-batch gradients the client stepped with, their mean standing in for ∇F_i) and reads it
from ``ClientResult.extras``. A client with one local step gives no estimate; σ_L² then stays at
its last value (0 before). (The variance of mini-batch *losses* is not a gradient variance and
is not used as a proxy.)

Clients never seen take the mean of the known ζ² and σ² (uniform p while nothing is known);
if every score is 0, p is uniform. State: three length-N arrays, no model-sized vector.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedgame.core.plugins import PluginConfig
import torch

from fedgame.core.types import LOCAL_GRAD_VARIANCE, RoundOutcome, RoundState
from fedgame.selection.base import SELECTIONS, SelectionStrategy

__all__ = ["Delta", "delta_probabilities"]


def delta_probabilities(zeta2: np.ndarray, sigma2: np.ndarray, *, alpha1: float = 1.0, alpha2: float = 1.0) -> np.ndarray:
    """p_i ∝ sqrt(α1 ζ_i² + α2 σ_i²), uniform if all are 0 (Wang et al. 2023)."""
    score = np.sqrt(alpha1 * np.asarray(zeta2, dtype=np.float64) + alpha2 * np.asarray(sigma2, dtype=np.float64))
    total = score.sum()
    return np.full(score.size, 1.0 / score.size) if not total > 0 else score / total


@SELECTIONS.register("delta")
class Delta(SelectionStrategy):
    """DELTA (Wang et al., NeurIPS 2023): K draws, p_i ∝ sqrt(α1 ζ_i² + α2 σ_{L,i}²).

    ζ_i² and σ_{L,i}² are the values last measured for each client (module docstring)."""

    needs = frozenset({LOCAL_GRAD_VARIANCE})

    class Config(PluginConfig):
        """DELTA (a FedPCS baseline): K draws with p ∝ sqrt(alpha1 ζ² + alpha2 σ_L²); ``importance``."""

        kind: Literal["delta"] = "delta"

        def check_run(self, run: Any) -> None:
            if self.alpha1 == 0 and self.alpha2 == 0:
                raise ValueError("selection.alpha1, selection.alpha2: must not both be 0, got 0 and 0")

        alpha1: float = Field(1.0, ge=0, le=1e6)
        alpha2: float = Field(1.0, ge=0, le=1e6)

    def __init__(self, *, alpha1: float = 1.0, alpha2: float = 1.0) -> None:
        for field, v in (("alpha1", alpha1), ("alpha2", alpha2)):
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"selection.{field}: must be >= 0, got {v}")
        if alpha1 == 0 and alpha2 == 0:
            raise ValueError("selection.alpha1, selection.alpha2: must not both be 0, got 0 and 0")
        self.alpha1, self.alpha2 = float(alpha1), float(alpha2)
        self._zeta2: np.ndarray | None = None
        self._sigma2: np.ndarray | None = None
        self._seen: np.ndarray | None = None

    def _state(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._zeta2 is None or self._sigma2 is None or self._seen is None or self._seen.size != n:
            self._zeta2, self._sigma2, self._seen = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
        return self._zeta2, self._sigma2, self._seen

    def probabilities(self, state: RoundState) -> np.ndarray:
        zeta2, sigma2, seen = self._state(state.n_clients)
        if not seen.any():
            return np.full(state.n_clients, 1.0 / state.n_clients)
        z = np.where(seen, zeta2, zeta2[seen].mean())
        s = np.where(seen, sigma2, sigma2[seen].mean())
        return delta_probabilities(z, s, alpha1=self.alpha1, alpha2=self.alpha2)

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        """ζ_i² = ‖g_i − ḡ_t‖², ḡ_t the θ-weighted mean of the round's uploads; σ_i² from extras."""
        latest = {r.client: r for r in outcome.results}
        if len(latest) < 2:
            return
        zeta2, sigma2, seen = self._state(state.n_clients)
        clients = np.fromiter(latest, dtype=np.int64)
        w = np.asarray(state.theta, dtype=np.float64)[clients]
        w = w / w.sum()
        # two passes over the round's uploads, in their own dtype, no (|S|, D) copy: ḡ, then ‖g_i − ḡ‖²
        first = latest[int(clients[0])].update
        gbar = torch.zeros_like(first)
        for wi, c in zip(w, clients, strict=True):
            gbar.add_(latest[int(c)].update, alpha=float(wi))
        z2 = [float(torch.dist(latest[int(c)].update, gbar)) ** 2 for c in clients]
        for c, v in zip(clients, z2, strict=True):
            r = latest[int(c)]
            zeta2[c] = v
            if LOCAL_GRAD_VARIANCE in r.extras:
                sigma2[c] = float(r.extras[LOCAL_GRAD_VARIANCE])
            seen[c] = True

    def state_dict(self) -> dict[str, Any]:
        return {
            "zeta2": None if self._zeta2 is None else self._zeta2.copy(),
            "sigma2": None if self._sigma2 is None else self._sigma2.copy(),
            "seen": None if self._seen is None else self._seen.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seen") is None:
            self._zeta2 = self._sigma2 = self._seen = None
            return
        self._zeta2 = np.asarray(state["zeta2"], dtype=np.float64).copy()
        self._sigma2 = np.asarray(state["sigma2"], dtype=np.float64).copy()
        self._seen = np.asarray(state["seen"], dtype=bool).copy()
