"""Clients fixed before training, round by round: a game's participation sets (QI-DPFL's S_t,
the clients with ρ_i^t > 0 at the Theorem 1 equilibrium) or a screening's kept set every round
(FedAvg-select, QI-DPFL Sec. V-B)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from fedgame.core.plugins import BuildContext, PluginConfig
from fedgame.core.types import RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy

__all__ = ["FixedSets", "Participants", "Screened"]


@SELECTIONS.register("fixed_sets")
class FixedSets(SelectionStrategy):
    """Round t takes exactly the clients of ``members[:, t]`` (or ``members`` every round for a
    1-D mask), each with inclusion probability 1: nothing is random, nothing is reweighted."""

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


@SELECTIONS.register("participants")
class Participants(FixedSets):
    """QI-DPFL: round t takes the participation set S_t of the reward game (the clients with
    ρ_i^t > 0 at the Theorem 1 equilibrium); aggregate with ``mean`` (Eq. 12)."""

    class Config(PluginConfig):
        """QI-DPFL: round t takes the participation set S_t of the reward game
        (``incentive.kind: qidpfl``); aggregate with ``mean`` (Eq. 12)."""

        kind: Literal["participants"] = "participants"
        requires: ClassVar[frozenset[str]] = frozenset({"participant_sets"})

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> Participants:
        """The clients with ρ_i^t > 0 in the QI-DPFL plan of ``ctx.plan``."""
        from fedgame.incentives.qidpfl import QIDPFLPlan

        del cfg
        if not isinstance(ctx.plan, QIDPFLPlan):
            raise ValueError("selection.kind: 'participants' needs incentive.kind 'qidpfl'")
        return cls(members=ctx.plan.rho > 0)


@SELECTIONS.register("screened")
class Screened(FixedSets):
    """FedAvg-select (QI-DPFL Sec. V-B): the candidates the label-EMD screening keeps (Alg. 1
    lines 3-8), all of them every round."""

    class Config(PluginConfig):
        """FedAvg-select (QI-DPFL Sec. V-B): the candidates the label-EMD screening keeps (Alg. 1
        lines 3-8), all of them every round; ``keep_fraction`` q keeps the ⌈qH⌉ closest,
        ``theta_th`` those with θ ≤ θ_th."""

        kind: Literal["screened"] = "screened"

        def client_queries(self) -> frozenset[str]:
            return frozenset({"label_counts"})

        keep_fraction: float | None = Field(0.5, gt=0, le=1)
        theta_th: float | None = Field(None, ge=0)
        reference: Literal["pooled", "uniform"] = "pooled"

        @model_validator(mode="after")
        def _one_rule(self) -> Any:
            if (self.keep_fraction is None) == (self.theta_th is None):
                raise ValueError("selection.keep_fraction, selection.theta_th: give exactly one (set the other to null)")
            return self

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> Screened:
        """Screen the clients' label histograms (queried, else the partition's)."""
        from fedgame.incentives.qidpfl.game import screen

        c: Any = cfg
        counts = ctx.counts()
        kept = screen(counts, reference=c.reference, theta_th=c.theta_th, keep_fraction=c.keep_fraction).kept
        return cls(members=np.isin(np.arange(counts.shape[0]), kept))
