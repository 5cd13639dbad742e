"""Clients fixed before training, round by round: a game's participation sets (QI-DPFL's S_t,
the clients with ρ_i^t > 0 at the Theorem 1 equilibrium) or a screening's kept set every round
(FedAvg-select, QI-DPFL Sec. V-B)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedgame.core.types import RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy

__all__ = ["FixedSets"]


@SELECTIONS.register("fixed_sets")
class FixedSets(SelectionStrategy):
    """Round t takes exactly the clients of ``members[:, t]`` (or ``members`` every round for a
    1-D mask), each with inclusion probability 1: nothing is random, nothing is reweighted."""

    name = "fixed_sets"

    def __init__(self, *, members: np.ndarray) -> None:
        m = np.asarray(members)
        if m.dtype != bool or m.ndim not in (1, 2) or m.shape[0] == 0:
            raise ValueError(f"selection.members: must be a boolean (N,) or (N, T) mask, got {m.dtype} {m.shape}")
        cols = m[:, None] if m.ndim == 1 else m
        empty = np.flatnonzero(~cols.any(axis=0))
        if empty.size:
            raise ValueError(f"selection.members: round {int(empty[0])} has no client")
        self.members = cols

    def _column(self, state: RoundState) -> np.ndarray:
        if state.n_clients != self.members.shape[0]:
            raise ValueError(f"selection.members: has {self.members.shape[0]} clients, the run has {state.n_clients}")
        return self.members[:, min(state.t, self.members.shape[1] - 1)]

    def probabilities(self, state: RoundState) -> np.ndarray:
        col = self._column(state).astype(np.float64)
        probs: np.ndarray = col / col.sum()
        return probs

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        del rng
        idx = np.flatnonzero(self._column(state))
        return Selection(indices=idx, probs=np.ones(idx.size), k=int(idx.size), scheme="inclusion")

    def participation_bound(self) -> np.ndarray | None:
        return self.members.sum(axis=1).astype(np.int64) if self.members.shape[1] > 1 else None

    def state_dict(self) -> dict[str, Any]:
        return {}
