"""PHS selection: the participation schedule of DP-FedAvg drawn before training (R. Xu,
Y.-J. A. Zhang, J. Huang, "Tackling privacy heterogeneity in differentially private federated
learning"; Algorithm 1).

The server fixes the selection probabilities p^s (Problem 1 for the privacy-aware mechanism,
p^u = |M_k|/Σ|M_i| for the unbiased one; :mod:`fedgame.selection.phs_problem`), draws every
round's K slots i.i.d. from Categorical(p^s) *before* training (Algorithm 1 line 3) and tells each
client its count T_k (line 4), from which the client calibrates its DP-SGD noise (Eq. 6). A
client drawn j times in a round runs j independent copies (``independent_copies``).

``count_mode="expected"`` calibrates for ⌈p^s_k K T^g⌉ instead (the expected count of the
paper's analysis, Eq. 40, rounded up) and enforces it as a hard cap while drawing (a slot drawn
for a capped client is redrawn among the others), so the count is again known before training.

The aggregation of the paper is the plain mean over slots (``aggregation.kind: mean``,
Algorithm 1 line 8; biased towards F^b = Σ p^s_k f_k on purpose). ``importance`` aggregation
gives the ``phs_ic`` variant (importance compensation, the paper's "unbiased" category of
Sec. VI-B): slot weights p^u_k/(K p^s_k), unbiased for F.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from fedgame.core.plugins import BuildContext, PluginConfig
from fedgame.core.types import RoundState, Selection, finite_or_none, steps_per_round
from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_distribution
from fedgame.selection.phs_problem import P1Solution, solve_p1

__all__ = ["PHSSchedule", "PHSSetup", "planned_counts", "draw_schedule", "solve_setup"]

log = logging.getLogger(__name__)

CountMode = Literal["realized", "expected"]


@dataclass(frozen=True)
class PHSSetup:
    """What the PHS server fixes before training (before Algorithm 1 runs): the clients' budgets
    (ε_k, V_k of Eq. 7, p^u, the model size D: the privacy plan's ``client_budgets``), the
    selection distribution p^s and Problem 1's solution (privacy-aware mechanism; p^s = p^u and no
    solution for the unbiased one). Written to the run's ``phs.json`` by :meth:`summary`."""

    budgets: Any  # fedgame.privacy.plans.ClientBudgets: eps, V, p_u, sizes, dim
    p_s: np.ndarray
    eta: float | None
    solution: P1Solution | None

    def summary(self) -> dict[str, Any]:
        sol = self.solution
        return {
            **self.budgets.summary(),
            "eta": self.eta,
            "p_s": self.p_s.tolist(),
            "l1_from_p_u": float(np.abs(self.p_s - self.budgets.p_u).sum()),
            "objective": None if sol is None else sol.objective,
            "objective_at_p_u": None if sol is None else sol.objective_at_pu,
            "eta_star": None if sol is None else finite_or_none(sol.eta_star),
            "kkt_residual": None if sol is None else sol.kkt_residual,
            "solver": None if sol is None else sol.method,
            "solve_seconds": None if sol is None else sol.seconds,
        }


def solve_setup(budgets: Any, cfg: Any, run: Any) -> PHSSetup:
    """p^s for the recipe's ``selection`` section ``cfg``: Problem 1 on the clients' budgets
    (η = ``eta``, or 2 L̂ √(T^g T^l), the theory value with L estimated by L̂, T^l the mean local
    steps) for ``mechanism: privacy_aware``; p^u for ``unbiased``."""
    p_u = np.asarray(budgets.p_u, dtype=np.float64)
    if cfg.mechanism == "unbiased":
        return PHSSetup(budgets=budgets, p_s=p_u.copy(), eta=None, solution=None)
    local = run.train.local
    t_l = float(np.mean(steps_per_round(budgets.sizes, batch_size=local.batch_size, epochs=local.epochs, steps=local.steps)))
    eta = cfg.eta if cfg.eta is not None else 2.0 * (cfg.L_hat or 1.0) * math.sqrt(run.train.rounds * t_l)
    sol = solve_p1(p_u, budgets.dim * np.asarray(budgets.V, dtype=np.float64), eta, method="auto")
    log.info(
        "PHS Problem 1: eta %.4g, ||p* - p^u||_1 %.4g, KKT residual %.2g (%s)", eta, np.abs(sol.p - p_u).sum(), sol.kkt_residual, sol.method
    )
    return PHSSetup(budgets=budgets, p_s=sol.p, eta=eta, solution=sol)


def planned_counts(p: np.ndarray, k: int, rounds: int) -> np.ndarray:
    """⌈p_k K T^g⌉ per client (``count_mode="expected"``; with p = p^u, the cap T^plan_k of the
    "Biased" baseline, :mod:`fedgame.selection.power_of_choice`).

    A relative slack of 1e-9 keeps products that are integers up to rounding (0.2 · 10 · 50)
    from rounding up to the next integer."""
    x = np.asarray(p, dtype=np.float64) * k * rounds
    return np.ceil(x * (1 - 1e-9) - 1e-9).astype(np.int64).clip(min=0)


def draw_schedule(p: np.ndarray, k: int, rounds: int, rng: np.random.Generator, *, caps: np.ndarray | None = None) -> np.ndarray:
    """The (rounds, k) slot matrix: K i.i.d. Categorical(p) draws per round (Algorithm 1 line 3).

    With ``caps`` a slot whose client has reached its cap is redrawn from p restricted to the
    clients below their cap (``count_mode="expected"``); Σ caps must be ≥ K·rounds."""
    p = check_distribution(p)
    if k < 1 or rounds < 1:
        raise ValueError(f"train.clients_per_round, train.rounds: must be >= 1, got {k} and {rounds}")
    if caps is None:
        return rng.choice(p.size, size=(rounds, k), p=p).astype(np.int64)
    caps = np.asarray(caps, dtype=np.int64)
    if int(caps.sum()) < k * rounds:
        raise ValueError(f"selection.count_mode: the caps allow {int(caps.sum())} slots, fewer than K·T^g = {k * rounds}")
    out = np.empty(rounds * k, dtype=np.int64)
    left = caps.copy()
    for j in range(out.size):
        q = np.where(left > 0, p, 0.0)
        if q.sum() <= 0:  # only clients with p = 0 have room left
            q = (left > 0).astype(np.float64)
        c = int(rng.choice(p.size, p=q / q.sum()))
        out[j] = c
        left[c] -= 1
    return out.reshape(rounds, k)


@SELECTIONS.register("phs")
class PHSSchedule(SelectionStrategy):
    """A participation schedule fixed before training (PHS Algorithm 1 lines 3-4).

    ``p`` — the selection distribution p^s; ``rounds``, ``k`` — T^g and K; ``rng`` — the
    dedicated schedule stream (or an integer seed). Round t returns the K slots of row t as draws from p^s, each slot
    an independent copy."""

    class Config(PluginConfig):
        """PHS (Algorithm 1): the whole schedule drawn before training from p^s — Problem 1's
        solution (``mechanism: privacy_aware``) or p^u ∝ |M_k| (``unbiased``); K slots per round, a
        client drawn twice trains two copies. Needs ``privacy.kind: phs``; aggregate with ``mean``
        (the paper) or ``importance`` (``phs_ic``). η = ``eta``, or 2 ``L_hat`` √(T^g T^l) (the
        theory value with L estimated; default L_hat = 1). ``count_mode``: calibrate for the realised
        counts or for ⌈p^s_k K T^g⌉ enforced as caps."""

        kind: Literal["phs"] = "phs"
        requires: ClassVar[frozenset[str]] = frozenset({"client_budgets"})
        mechanism: Literal["privacy_aware", "unbiased"] = "privacy_aware"
        eta: float | None = Field(None, gt=0, le=1e12)
        L_hat: float | None = Field(None, gt=0, le=1e12)
        count_mode: Literal["realized", "expected"] = "realized"

        @model_validator(mode="after")
        def _one_eta(self) -> Any:
            if self.eta is not None and self.L_hat is not None:
                raise ValueError("selection.eta, selection.L_hat: give at most one (eta = 2 L_hat sqrt(T^g T^l))")
            return self

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> PHSSchedule:
        """p^s from the clients' budgets (``ctx.phs``, :func:`solve_setup`: Problem 1 or p^u),
        then the schedule drawn from it on the run's ``schedule`` stream; :attr:`setup` keeps both."""
        from fedgame.core.seeding import Streams

        c: Any = cfg
        if ctx.phs is None:
            raise ValueError("selection.kind: 'phs' needs privacy.kind 'phs' (the clients' budgets)")
        setup = solve_setup(ctx.phs, c, ctx.run)
        streams = ctx.streams or Streams(seed=ctx.run.seed)
        schedule = cls(
            p=setup.p_s,
            rounds=ctx.run.train.rounds,
            k=ctx.run.train.clients_per_round,
            rng=streams.numpy("schedule"),
            count_mode=c.count_mode,
        )
        schedule.setup = setup
        return schedule

    def __init__(
        self,
        *,
        p: np.ndarray,
        rounds: int,
        k: int,
        rng: np.random.Generator | int,
        count_mode: CountMode = "realized",
    ) -> None:
        if count_mode not in ("realized", "expected"):
            raise ValueError(f"selection.count_mode: must be 'realized' or 'expected', got {count_mode!r}")
        self.p = check_distribution(p)
        self.setup: PHSSetup | None = None
        """The budgets and Problem 1's solution p was taken from (set by :meth:`from_config`)."""
        self.k, self.rounds, self.count_mode = int(k), int(rounds), count_mode
        caps = planned_counts(self.p, self.k, self.rounds) if count_mode == "expected" else None
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.schedule = draw_schedule(self.p, self.k, self.rounds, gen, caps=caps)
        realized = np.bincount(self.schedule.ravel(), minlength=self.p.size).astype(np.int64)
        self.counts = caps if caps is not None else realized
        """T_k the clients calibrate for: realised counts, or the ⌈p K T^g⌉ caps."""
        self.realized_counts = realized

    def participation_bound(self) -> np.ndarray:
        return self.counts.copy()

    def probabilities(self, state: RoundState) -> np.ndarray:
        return self.p.copy()

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        del rng  # the schedule was drawn before training
        if state.k != self.k:
            raise ValueError(f"train.clients_per_round: the PHS schedule has K = {self.k} slots per round, got {state.k}")
        if not 0 <= state.t < self.rounds:
            raise ValueError(f"train.rounds: the PHS schedule has T^g = {self.rounds} rounds, round {state.t} asked")
        if state.n_clients != self.p.size:
            raise ValueError(f"selection.p: has {self.p.size} clients, the run has {state.n_clients}")
        idx = self.schedule[state.t]
        return Selection(indices=idx, probs=self.p[idx], k=self.k, scheme="draws", independent_copies=True)

    def state_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule.copy(), "counts": self.counts.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "schedule" in state:
            sched = np.asarray(state["schedule"], dtype=np.int64)
            if sched.shape != self.schedule.shape or not np.array_equal(sched, self.schedule):
                raise ValueError("selection: the checkpoint's PHS schedule differs from the one this seed draws")
