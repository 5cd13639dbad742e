"""Optimal client sampling, AOCS (W. Chen, S. Horváth, P. Richtárik, "Optimal client sampling
for federated learning", TMLR 2022; a baseline of FedPCS, Sec. VIII-A).

Each client participates independently with probability p_i, where (u_i = θ_i‖U_i‖ sorted
ascending u_(1) ≤ … ≤ u_(N), m = K expected participants) l is the largest index with
0 < m + l − N ≤ Σ_{j≤l} u_(j) / u_(l), p_(j) = (m + l − N) u_(j) / Σ_{k≤l} u_(k) for j ≤ l and
p_(j) = 1 above. This is p_i = min(1, c u_i) with Σ p = m, the minimiser of the aggregate's
variance Σ u_i²/p_i; the aggregate Σ_{i∈S} θ_i U_i / p_i is unbiased (``aggregation.kind:
importance`` gives exactly these Horvitz–Thompson weights for ``scheme="inclusion"``).

**Exact mode** (``stale_norms=False``): AOCS proper. Every client computes its (noisy) update
U_i at the current model each round, through the engine's probe (:attr:`RoundState.probe`,
N local trainings per round, each privacy-accounted); p comes from this round's norms and the
sampled clients upload the very updates they computed (the probe caches them, nothing is
trained twice). The round record's ``probe_trainings`` counts the unsampled trainings.

**Stale norms** (``stale_norms=True``, the default): each client's norm ‖U_i‖ from the last
round it trained (learned in :meth:`after_round`); clients never seen use the mean of the known
norms, or 1 when none is known (then p ∝ θ, capped). Computing all norms once at t = 0 would
train every client in the first round; we do not train unsampled clients at all.

**Empty rounds.** Independent Bernoulli draws can select nobody (probability P_0 = Π(1 − p_i)),
which no aggregation can use; :meth:`select` redraws until someone is selected. The realised
inclusion probabilities are then exactly π_i = p_i / (1 − P_0) ≤ 1, and those are declared in
``probs``, so θ_i/π_i weighting stays unbiased (conditionally on a non-empty round).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from fedgame.core.plugins import PluginConfig

from fedgame.core.types import RoundOutcome, RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_k_at_most_n

__all__ = ["AOCS", "aocs_probabilities"]


def aocs_probabilities(u: np.ndarray, m: int) -> np.ndarray:
    """Optimal participation probabilities for importances ``u`` and ``m`` expected participants
    (Chen, Horváth & Richtárik 2022; the sorted formula above). Zero importances
    are floored at 1e-12 · max u so that every p lies in (0, 1]; all-zero u gives p = m/N."""
    u = np.asarray(u, dtype=np.float64)
    n = u.size
    if u.ndim != 1 or n == 0 or not (math.isfinite(float(u.sum())) and float(u.min()) >= 0):
        raise ValueError(f"aocs: importances must be a non-empty vector of finite values >= 0, got {u}")
    if not 1 <= m <= n:
        raise ValueError(f"train.clients_per_round: must be in [1, {n}] (expected participants), got {m}")
    u = np.ones(n) if u.max() == 0 else np.maximum(u, 1e-12 * u.max())
    order = np.argsort(u, kind="stable")
    us = u[order]
    cs = np.cumsum(us)
    l = np.arange(1, n + 1)
    ok = (m + l - n > 0) & ((m + l - n) * us <= cs * (1 + 1e-12))
    ell = int(l[ok].max())  # ℓ = N − m + 1 always qualifies
    ps = np.where(l <= ell, (m + ell - n) * us / cs[ell - 1], 1.0)
    p = np.empty(n)
    p[order] = np.minimum(ps, 1.0)
    return p


def _inclusion(p: np.ndarray) -> np.ndarray:
    """π_i = p_i / (1 − Π_j(1 − p_j)) from the participation probabilities p."""
    with np.errstate(divide="ignore"):
        p0 = float(np.exp(np.log1p(-p).sum()))
    out: np.ndarray = np.minimum(p / (1.0 - p0), 1.0)
    return out


@SELECTIONS.register("aocs")
class AOCS(SelectionStrategy):
    """AOCS (Chen et al., TMLR 2022): Bernoulli p_i = min(1, c θ_i‖U_i‖), Σ p = K.

    Exact (this round's norms, every client trains) or stale norms (module docstring)."""

    class Config(PluginConfig):
        """AOCS (a FedPCS baseline, Sec. VIII-A): Bernoulli p_i = min(1, c θ_i‖U_i‖), Σp = K;
        ``importance``. ``stale_norms: true`` uses each client's last known norm; ``false`` is
        exact AOCS (every client trains every round at the current model, N trainings per round)."""

        kind: Literal["aocs"] = "aocs"

        def check_run(self, run: Any) -> None:
            check_k_at_most_n(run, f"selection '{self.kind}'")

        stale_norms: bool = True

    def __init__(self, *, stale_norms: bool = True) -> None:
        if not isinstance(stale_norms, (bool, np.bool_)):
            raise ValueError(f"selection.stale_norms: must be true or false, got {stale_norms!r}")
        self.stale_norms = bool(stale_norms)
        self._norm: np.ndarray | None = None
        self._seen: np.ndarray | None = None

    def _state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self._norm is None or self._seen is None or self._norm.size != n:
            self._norm, self._seen = np.zeros(n), np.zeros(n, dtype=bool)
        return self._norm, self._seen

    def participation(self, state: RoundState) -> np.ndarray:
        """p_i of the sorted formula, from θ_i times the last known ‖U_i‖ (unseen: the mean)."""
        norm, seen = self._state(state.n_clients)
        fill = norm[seen].mean() if seen.any() else 1.0
        return aocs_probabilities(np.asarray(state.theta) * np.where(seen, norm, fill), state.k)

    def inclusion(self, state: RoundState) -> np.ndarray:
        """π_i = p_i / (1 − Π_j(1 − p_j)): inclusion given that the round is not empty."""
        return _inclusion(self.participation(state))

    def probabilities(self, state: RoundState) -> np.ndarray:
        """Inclusion probabilities normalised to one draw (≈ p_i / K)."""
        pi = self.inclusion(state)
        probs: np.ndarray = pi / pi.sum()
        return probs

    def _measure(self, state: RoundState) -> None:
        """Exact mode: every client's update norm at the current model, via the probe."""
        if state.probe is None:
            raise ValueError("selection.stale_norms: false (exact AOCS) needs the engine's probe, got none")
        norm, seen = self._state(state.n_clients)
        for r in state.probe.updates(np.arange(state.n_clients)):
            norm[r.client], seen[r.client] = float(np.linalg.norm(r.update.double().numpy())), True

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        if not self.stale_norms:
            self._measure(state)
        p = self.participation(state)
        while not (mask := rng.random(p.size) < p).any():
            pass
        idx = np.flatnonzero(mask)
        return Selection(indices=idx, probs=_inclusion(p)[idx], k=state.k, scheme="inclusion")

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        """Remember ‖U_i‖ of every client that uploaded this round."""
        norm, seen = self._state(state.n_clients)
        for c, v in outcome.update_norms().items():
            norm[c], seen[c] = v, True

    def state_dict(self) -> dict[str, Any]:
        return {"norm": None if self._norm is None else self._norm.copy(), "seen": None if self._seen is None else self._seen.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        norm, seen = state.get("norm"), state.get("seen")
        self._norm = None if norm is None else np.asarray(norm, dtype=np.float64).copy()
        self._seen = None if seen is None else np.asarray(seen, dtype=bool).copy()
