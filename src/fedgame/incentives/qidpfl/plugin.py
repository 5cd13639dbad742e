"""QI-DPFL's training plug-ins (W. Yuan, X. Wang, "QI-DPFL: quality-aware and incentive-boosted
federated learning with differential privacy", Algorithm 1).

Before training the server screens the candidates by label EMD and plays the reward game for
every round (:func:`fedgame.incentives.qidpfl.game.solve_qidpfl_game`, public quantities only).
The result, a :class:`QIDPFLPlan` over *all* H candidates of the partition (non-kept candidates
and clients sitting a round out have ρ_i^t = 0), drives three plug-ins:

* selection ``participants`` — round t's participation set S_t (every client with ρ_i^t > 0);
* privacy ``zcdp_upload`` with ``rho: game`` — ρ_i^t-zCDP noise on each upload (Eq. 10);
* incentive ``qidpfl`` — pays r_i^t = R_t ρ_i^t / Σ_{S_t} ρ^t and logs R_t, its range, u_t.

The Max and Random policies (Sec. V-B) and FedAvg-DP (read as QI-DPFL without screening: the
same game, reward policy and noise over all H candidates) are the same plan with another
``policy`` / ``screening``.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from fedgame.core.plugins import PluginConfig

from fedgame.core.types import Selection
from fedgame.incentives.base import INCENTIVES, PlannedIncentive
from fedgame.incentives.qidpfl.game import (
    AccuracyCurve,
    ServerParams,
    max_reward,
    qidpfl_reward,
    random_reward,
    screen,
    solve_qidpfl_game,
)

__all__ = ["QIDPFLPlan", "QIDPFLIncentive", "plan_qidpfl", "POLICIES"]

POLICIES = {"qidpfl": qidpfl_reward, "max": max_reward, "random": random_reward}
Policy = Literal["qidpfl", "max", "random"]


@dataclass(frozen=True)
class QIDPFLPlan:
    """The offline game over the H candidates and T rounds: ``rho`` (H, T) with zeros for
    non-kept candidates and non-participants, ``payment`` (H, T), per round ``reward`` R_t,
    ``R_star``, ``R_min``, ``R_max``, ``cost`` u_t, ``n_part``; ``kept`` candidate indices,
    ``emd`` per candidate (NaN without screening), ``nu`` per candidate, ``acc_scale`` κ_acc."""

    rho: np.ndarray
    payment: np.ndarray
    reward: np.ndarray
    R_star: np.ndarray
    R_min: np.ndarray
    R_max: np.ndarray
    cost: np.ndarray
    n_part: np.ndarray
    kept: np.ndarray
    emd: np.ndarray
    nu: np.ndarray
    acc_scale: float
    policy: str

    def participants(self, t: int) -> np.ndarray:
        """S_t: the candidates with ρ_i^t > 0, ascending."""
        return np.flatnonzero(self.rho[:, min(t, self.rho.shape[1] - 1)] > 0)

    def summary(self) -> dict[str, Any]:
        def fin(a: np.ndarray) -> list[float | None]:
            return [float(v) if np.isfinite(v) else None for v in np.asarray(a, dtype=np.float64)]

        return {
            "policy": self.policy,
            "kept": self.kept.tolist(),
            "emd": fin(self.emd),
            "nu": self.nu.tolist(),
            "acc_scale": self.acc_scale,
            "reward": fin(self.reward),
            "R_star": fin(self.R_star),
            "R_min": fin(self.R_min),
            "R_max": fin(self.R_max),
            "cost": fin(self.cost),
            "total_cost": float(np.sum(self.cost)),
            "total_reward": float(np.sum(self.reward)),
            "n_part": self.n_part.tolist(),
        }


def plan_qidpfl(
    *,
    sizes: np.ndarray,
    label_counts: np.ndarray,
    nu: np.ndarray,
    dim: int,
    rounds: int,
    discount: float,
    clip: float,
    screening: Literal["keep_fraction", "theta_th", "none"] = "keep_fraction",
    keep_fraction: float = 0.5,
    theta_th: float | None = None,
    reference: Literal["pooled", "uniform"] = "pooled",
    phi1: float = 1.0,
    gamma: float = 0.5,
    beta: float = 1.0,
    lam: float = 1.0,
    grad_bound: float = 1.0,
    acc_scale: float | Literal["calibrate"] = 1.0,
    curve: AccuracyCurve | None = None,
    eps: float | None = None,
    eps_max: float | None = None,
    policy: Policy = "qidpfl",
    rng: np.random.Generator | None = None,
) -> QIDPFLPlan:
    """Screen (Eq. 11), play the game for T rounds (Eqs. 16-33) and lay the result out over all
    H candidates. ``screening: none`` keeps every candidate (FedAvg-DP: the same game over all
    candidates, no screening)."""
    h = int(np.asarray(sizes).size)
    if screening == "none":
        kept = np.arange(h)
        emd = np.full(h, np.nan)
    else:
        scr = screen(
            label_counts,
            reference=reference,
            theta_th=theta_th if screening == "theta_th" else None,
            keep_fraction=keep_fraction if screening == "keep_fraction" else None,
        )
        kept, emd = np.asarray(scr.kept), np.asarray(scr.emd)
    server = ServerParams(
        dim=int(dim),
        rounds=int(rounds),
        discount=float(discount),
        gamma=gamma,
        beta=beta,
        lam=lam,
        grad_bound=grad_bound,
        clip=clip,
        acc_scale=1.0 if acc_scale == "calibrate" else float(acc_scale),
    )
    out = solve_qidpfl_game(
        np.asarray(nu, dtype=np.float64)[kept],
        np.asarray(sizes, dtype=np.float64)[kept],
        phi1=phi1,
        server=server,
        curve=curve,
        eps=eps,
        eps_max=eps_max,
        calibrate=acc_scale == "calibrate",
        policy=POLICIES[policy],
        rng=rng,
    )
    sched = out.schedule
    assert sched is not None
    rho = np.zeros((h, rounds))
    pay = np.zeros((h, rounds))
    rho[kept] = out.rho
    pay[kept] = out.payment
    return QIDPFLPlan(
        rho=rho,
        payment=pay,
        reward=np.asarray(sched.R_applied),
        R_star=np.asarray(sched.R_star),
        R_min=np.asarray(sched.R_min),
        R_max=np.asarray(sched.R_max),
        cost=np.asarray(sched.cost),
        n_part=np.asarray(sched.n_part),
        kept=kept,
        emd=emd,
        nu=np.asarray(nu, dtype=np.float64),
        acc_scale=sched.acc_scale,
        policy=policy,
    )


class QICurveCfg(PluginConfig):
    """The fitted accuracy curve I(ρ) = I1 − B e^{−I3 ρ} (QI-DPFL Sec. IV-B) and the targets
    ε = I1 − eps_drop·B, ε_max = I1 − eps_max_drop·B that bound the reward (Eq. 33)."""

    I1: float = Field(gt=0, le=1)
    B: float = Field(gt=0, le=10)
    I3: float = Field(gt=0, le=1e6)
    eps_drop: float = Field(0.10, gt=0, lt=1)
    eps_max_drop: float = Field(0.01, gt=0, lt=1)

    @model_validator(mode="after")
    def _order(self) -> Any:
        if not self.eps_max_drop <= self.eps_drop:
            raise ValueError(f"incentive.curve.eps_max_drop: must be <= eps_drop ({self.eps_drop}), got {self.eps_max_drop}")
        return self


@INCENTIVES.register("qidpfl")
class QIDPFLIncentive(PlannedIncentive):
    """Pays each participant r_i^t = R_t ρ_i^t / Σ_{S_t} ρ^t (Σ r = R_t) and logs the round's
    reward, its range, Theorem 2's R_t* and the server cost u_t (Algorithm 1)."""

    plan_type = QIDPFLPlan
    plan: QIDPFLPlan

    @classmethod
    def build_plan(cls, cfg: Any, ctx: Any) -> QIDPFLPlan:
        """Screen the candidates and solve the reward game for every round (Algorithm 1):
        ν_i ~ U(``nu``) from the ``nu`` stream, C = the upload clip of ``privacy`` (1 without
        one), d = ``ctx.dim``, the candidates' label histograms as they answered the
        ``label_counts`` query (``ctx.counts()``: else the server's copy of the partition)."""
        run, data, streams = ctx.run, ctx.data, ctx.streams
        sizes = np.asarray(data.sizes, dtype=np.float64)
        nu = streams.numpy("nu").uniform(cfg.nu[0], cfg.nu[1], sizes.size)
        clip = float(getattr(run.privacy, "clip", 1.0)) if getattr(run.privacy, "kind", None) == "zcdp_upload" else 1.0
        curve = eps = eps_max = None
        if cfg.curve is not None:
            c = cfg.curve
            curve = AccuracyCurve(I1=c.I1, B=c.B, I3=c.I3)
            eps, eps_max = c.I1 - c.eps_drop * c.B, c.I1 - c.eps_max_drop * c.B
        return plan_qidpfl(
            sizes=sizes,
            label_counts=ctx.counts(),
            nu=nu,
            dim=int(ctx.dim),
            rounds=run.train.rounds,
            discount=cfg.discount,
            clip=clip,
            screening=cfg.screening,
            keep_fraction=cfg.keep_fraction,
            theta_th=cfg.theta_th,
            reference=cfg.reference,
            phi1=cfg.phi1,
            gamma=cfg.gamma,
            beta=cfg.beta,
            lam=cfg.lam,
            grad_bound=cfg.grad_bound,
            acc_scale=cfg.acc_scale,
            curve=curve,
            eps=eps,
            eps_max=eps_max,
            policy=cfg.policy,
            rng=streams.numpy("reward_policy"),
        )

    class Config(PluginConfig):
        """The QI-DPFL reward game solved before training (Eq. 11, Eqs. 15-33; defaults are
        fedgame's, as the paper gives few):
        label-EMD ``screening`` (``keep_fraction`` | ``theta_th`` | ``none`` = FedAvg-DP), privacy
        values ν_i ~ U(``nu``) per candidate, reward ``policy`` qidpfl | max | random, server
        constants (``discount`` π of Table I), κ_acc (``acc_scale``: a number or ``calibrate``,
        which needs ``curve``)."""

        kind: Literal["qidpfl"] = "qidpfl"
        provides: ClassVar[frozenset[str]] = frozenset({"rho_schedule", "participant_sets"})

        def client_queries(self) -> frozenset[str]:
            return frozenset({"label_counts"}) if self.screening != "none" else frozenset()

        def check_run(self, run: Any) -> None:
            if run.selection.kind != "participants":
                raise ValueError(f"selection.kind: incentive 'qidpfl' decides who trains: use 'participants', got '{run.selection.kind}'")

        policy: Literal["qidpfl", "max", "random"] = "qidpfl"
        screening: Literal["keep_fraction", "theta_th", "none"] = "keep_fraction"
        keep_fraction: float = Field(0.5, gt=0, le=1)
        theta_th: float | None = Field(None, ge=0)
        reference: Literal["pooled", "uniform"] = "pooled"
        phi1: float = Field(1.0, gt=0, le=1e6)
        nu: tuple[float, float] = (0.9, 1.1)
        discount: float = Field(0.9429, gt=0, lt=1)
        gamma: float = Field(0.5, gt=0, lt=1)
        beta: float = Field(1.0, gt=0, le=1e6)
        lam: float = Field(1.0, gt=0, le=1e6)
        grad_bound: float = Field(1.0, gt=0, le=1e6)
        acc_scale: float | Literal["calibrate"] = 1.0
        curve: QICurveCfg | None = None

        @model_validator(mode="after")
        def _consistent(self) -> Any:
            lo, hi = self.nu
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
                raise ValueError(f"incentive.nu: must be [a, b] with 0 < a <= b, got {list(self.nu)}")
            if self.screening == "theta_th" and self.theta_th is None:
                raise ValueError("incentive.theta_th: screening 'theta_th' needs a threshold")
            if self.acc_scale == "calibrate" and self.curve is None:
                raise ValueError("incentive.acc_scale: 'calibrate' needs incentive.curve (R_min,1 comes from it)")
            if not isinstance(self.acc_scale, str) and not 0 < self.acc_scale <= 1e12:
                raise ValueError(f"incentive.acc_scale: must be in (0, 1e12] or 'calibrate', got {self.acc_scale}")
            return self

    def _t(self, t: int) -> int:
        return min(t, self.plan.reward.size - 1)

    def settle(self, t: int, selection: Selection) -> np.ndarray:
        paid: np.ndarray = self.plan.payment[selection.clients, self._t(t)]
        return paid

    def metrics(self, t: int, selection: Selection) -> dict[str, float]:
        p, s = self.plan, self._t(t)
        rho = p.rho[selection.clients, s]
        return {
            "reward": float(p.reward[s]),
            "R_star": float(p.R_star[s]),
            "R_min": float(p.R_min[s]),
            "R_max": float(p.R_max[s]) if np.isfinite(p.R_max[s]) else float("nan"),
            "cost_u_t": float(p.cost[s]),
            "rho_global": float(rho.sum()),
            "n_part": float(p.n_part[s]),
        }
