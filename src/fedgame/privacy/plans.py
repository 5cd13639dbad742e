"""Client privacy plans: what privacy a client applies in a round, and what it costs.

A plan answers three questions for client ``i`` in round ``t``:

* :meth:`ClientPrivacy.dpsgd` — clip per example and noise every local step (DP-SGD)?
* :meth:`ClientPrivacy.upload` — a :class:`~fedgame.privacy.mechanisms.GaussianMechanism` that
  clips and noises the uploaded displacement once per round (FedPCS / QI-DPFL, from ρ_i^t)?
* :meth:`ClientPrivacy.events` — the privacy events the accountant records for that round.

A plan whose noise is added by the server instead (central DP-FedAvg,
:mod:`fedgame.privacy.central`) gives :meth:`ClientPrivacy.server_update`: the server update
that clips, sums and noises the round's uploads, and charges the accountant itself.

Plans are per client because budgets are: the engine never branches on which plan it holds.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator, model_validator

from fedgame.core.plugins import PluginConfig

from fedgame.core.registry import Registry
from fedgame.core.server_update import ServerUpdate
from fedgame.core.types import finite_or_none, steps_per_round
from fedgame.privacy.analysis.phs import phs_epsilon_spent, phs_noise_multiplier, phs_V
from fedgame.privacy.budgets import PrivacyBudgetCfg, UniformBudgetCfg, draw_budgets
from fedgame.privacy.analysis.subsampled import dpsgd_epsilon, dpsgd_noise_multipliers
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.mechanisms import GaussianMechanism

__all__ = [
    "DPSGD",
    "ClientPrivacy",
    "NoPrivacy",
    "LocalDPSGD",
    "ZCDPUpload",
    "PHSDPSGD",
    "PRIVACY_PLANS",
    "ClientBudgets",
    "accounting_label",
    "record_verified",
    "steps_per_round",
]

if TYPE_CHECKING:
    from fedgame.core.plugins import BuildContext
    from fedgame.privacy.accountants import Accountant

log = logging.getLogger(__name__)

PRIVACY_PLANS: Registry["ClientPrivacy"] = Registry("privacy plan")


@dataclass(frozen=True)
class DPSGD:
    """Per-step DP-SGD of one client (Abadi et al. 2016; PHS Algorithm 1 lines 12-17).

    ``sampling="poisson"``: each example joins a step's batch independently with rate
    ``q = batch_size / n`` and the clipped sum is divided by the *expected* batch size (fixed
    denominator; an empty batch still gets noise) — the setting RDP/PLD accountants assume.
    ``"shuffle"``: fixed-size batches, reshuffled once per pass over the data.
    ``"fixed"``: an independent uniform subset of exactly ``batch_size`` examples each step,
    divided by ``batch_size`` (PHS ``fixed_batch``: replace-one adjacency, sensitivity 2C).
    The noise added to the clipped sum has std ``noise_multiplier · max_grad_norm``.
    """

    max_grad_norm: float
    noise_multiplier: float
    sampling: Literal["poisson", "shuffle", "fixed"] = "poisson"

    def __post_init__(self) -> None:
        if not self.max_grad_norm > 0:
            raise ValueError(f"privacy.max_grad_norm: must be > 0, got {self.max_grad_norm}")
        if not self.noise_multiplier >= 0:
            raise ValueError(f"privacy.noise_multiplier: must be >= 0, got {self.noise_multiplier}")


@dataclass(frozen=True)
class ClientBudgets:
    """What PHS's privacy plan fixes before training, for the selection to read (its
    ``provides: client_budgets``): each client's budget ε_k, V_k of Eq. 7 (the noise variance
    its budget forces per unit of model size), p^u_k = |M_k| / Σ|M_i|, the sizes |M_k| and the
    model size D."""

    eps: np.ndarray
    V: np.ndarray
    p_u: np.ndarray
    sizes: np.ndarray
    dim: int

    def summary(self) -> dict[str, Any]:
        """``phs.json`` when no selection solved Problem 1 on these budgets (p^s = p^u)."""
        return {
            "D": self.dim,
            "eta": None,
            "eps": [finite_or_none(e) for e in self.eps],
            "V": self.V.tolist(),
            "p_u": self.p_u.tolist(),
            "p_s": self.p_u.tolist(),
            "l1_from_p_u": 0.0,
            "objective": None,
            "objective_at_p_u": None,
            "eta_star": None,
            "kkt_residual": None,
            "solver": None,
            "solve_seconds": None,
        }


class ClientPrivacy(ABC):
    """What privacy each client applies, round by round (see module docstring)."""

    name: str = "base"
    #: "formal" when the recorded events are a DP guarantee of what was run; "paper accounting"
    #: when they follow a paper's convention that is not one (FedPCS/QI-DPFL multi-step updates);
    #: "none" when nothing is given (ε ∞). A plug-in's label is reported as "unverified" until
    #: :func:`fedgame.testing.check_privacy_plan` has passed for its source in this installation
    #: (:func:`fedgame.privacy.plans.accounting_label`).
    accounting: str = "formal"
    Config: ClassVar[type[BaseModel] | None] = None
    """A plug-in's recipe model (``kind: Literal["<name>"]`` plus its fields); None for the
    built-in plans, whose models live in the recipe schema (``docs/plugins.md``)."""
    #: True for a plan whose :meth:`server_update` must run every round, also when no upload
    #: arrived (central DP releases its noise, and is charged, whatever the sample was); the
    #: engine reads it to decide whether to call the server update on an empty round
    releases_empty_rounds: ClassVar[bool] = False

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> ClientPrivacy:
        """Build from the recipe's ``privacy`` section; default: its fields but ``kind`` as
        keyword arguments. Override to use ``ctx`` (the clients' data sizes, the run's rounds)."""
        del ctx
        return cls(**cfg.model_dump(exclude={"kind"}))

    @classmethod
    def setup(cls, cfg: BaseModel, ctx: BuildContext) -> Any:
        """What this plan fixes before training that the selection reads (one of its
        Config's ``provides``), called once by the pipeline before the selection is built; the
        selection and this plan's :meth:`from_config` find it as ``ctx.phs``. None (the default):
        nothing to fix."""
        del cfg, ctx
        return None

    def dpsgd(self, client: int, t: int, n_examples: int) -> DPSGD | None:
        return None

    def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism | None:
        """The mechanism applied to the uploaded displacement (``privatize(v, gen)``), if any."""
        return None

    @abstractmethod
    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        """Events for the accountant, as ``(event, count)`` pairs."""

    def server_update(self, accountant: Accountant) -> ServerUpdate | None:
        """The server-side mechanism of a central-DP plan (:mod:`fedgame.privacy.central`): a
        :class:`~fedgame.core.ServerUpdate` that takes the round's raw uploads in place of the
        recipe's aggregation rule, releases their noised aggregate, and records every round's
        privacy event in ``accountant`` (for every client: under central DP each round costs
        each client whether or not it was sampled). None (the default): the plan's noise, if
        any, is the clients' (:meth:`dpsgd`, :meth:`upload`), and the recipe's rule aggregates."""
        del accountant
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state

    def report(self, delta: float) -> list[dict[str, Any]] | None:
        """Per-client privacy beyond the accountant's ε (e.g. PHS's three accountants); None."""
        del delta
        return None


def _check_dpsgd_accounting(cfg: Any, run: Any) -> None:
    """DP-SGD (``dpsgd``, ``phs``): the noise is calibrated for (ε, δ) at ``privacy.delta``, so
    the accountant must report at the same δ, and RDP or PLD compose its Poisson-subsampled steps
    tightly where zCDP cannot."""
    if cfg.delta != run.accountant.delta:
        raise ValueError(
            f"privacy.delta ({cfg.delta:g}) and accountant.delta ({run.accountant.delta:g}) differ: the noise is calibrated "
            "for a budget (ε, δ) and the accountant would report ε at another δ; give both the same value"
        )


@PRIVACY_PLANS.register("none")
class NoPrivacy(ClientPrivacy):
    """No clipping, no noise, nothing recorded."""

    #: no privacy is given, so none is reported: ε is ∞ (null in JSON), never 0
    accounting = "none"

    class Config(PluginConfig):
        kind: Literal["none"] = "none"

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        return []


@PRIVACY_PLANS.register("dpsgd")
class LocalDPSGD(ClientPrivacy):
    """DP-SGD on every client (the "DP-FedAvg" of PHS, Algorithm 1): per-example clipping to
    ``max_grad_norm``, Poisson batches of expected size ``batch_size``, Gaussian noise.

    Either a common ``noise_multiplier`` is given, or ``target_epsilon`` at ``delta``, in which
    case each client's multiplier is calibrated (through the RDP or PLD accountant of
    ``dp-accounting``) so that ``max_rounds`` participations of ``steps_per_round(n_i)`` steps
    at sample rate ``q_i = batch_size/n_i`` spend at most ``target_epsilon``. Each step is
    recorded as a Poisson-subsampled Gaussian event, so the accountant reports what was spent.
    """

    class Config(PluginConfig):
        kind: Literal["dpsgd"] = "dpsgd"
        max_grad_norm: float = Field(1.0, gt=0, le=1e6)
        noise_multiplier: float | None = Field(
            None, gt=0, le=1e6, description="noise std / max_grad_norm; > 0 (zero noise is no privacy: use privacy.kind none)"
        )
        target_epsilon: float | None = Field(None, gt=0, le=1e4)
        delta: float = Field(1e-5, gt=0, lt=1)
        calibrate_over: Literal["all", "expected"] = Field(
            "all", description="rounds a client is assumed to join when calibrating to target_epsilon"
        )
        sampling: Literal["poisson", "shuffle"] = "poisson"

        def check_run(self, run: Any) -> None:
            _check_dpsgd_accounting(self, run)
            if run.accountant.kind == "zcdp":
                raise ValueError(
                    "accountant.kind: 'zcdp' cannot compose Poisson-subsampled DP-SGD steps tightly; "
                    "use 'rdp' or 'pld' with privacy.kind 'dpsgd', got 'zcdp'"
                )

        @model_validator(mode="after")
        def _one_noise(self) -> Any:
            if (self.noise_multiplier is None) == (self.target_epsilon is None):
                raise ValueError("give exactly one of privacy.noise_multiplier and privacy.target_epsilon")
            return self

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> LocalDPSGD:
        """DP-SGD on every client, calibrated over the rounds a client is assumed to join."""
        c: Any = cfg
        if ctx.data is None:
            raise ValueError("privacy.kind: 'dpsgd' calibrates to the clients' data sizes: pass the federated data")
        run, sizes = ctx.run, np.asarray(ctx.data.sizes)
        local = run.train.local
        spr = steps_per_round(sizes, batch_size=local.batch_size, epochs=local.epochs, steps=local.steps)
        rounds = run.train.rounds
        if c.calibrate_over == "expected":
            rounds = max(1, int(np.ceil(rounds * run.train.clients_per_round / sizes.size)))
        return cls(
            sizes=sizes,
            batch_size=local.batch_size,
            steps_per_round=spr,
            max_grad_norm=c.max_grad_norm,
            noise_multiplier=c.noise_multiplier,
            target_epsilon=c.target_epsilon,
            delta=c.delta,
            max_rounds=rounds,
            accountant="pld" if run.accountant.kind == "pld" else "rdp",
            sampling=c.sampling,
        )

    def __init__(
        self,
        *,
        sizes: np.ndarray,
        batch_size: int,
        steps_per_round: list[int],
        max_grad_norm: float,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = 1e-5,
        max_rounds: int = 1,
        accountant: Literal["rdp", "pld"] = "rdp",
        sampling: Literal["poisson", "shuffle"] = "poisson",
    ) -> None:
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ValueError("privacy: give exactly one of noise_multiplier and target_epsilon")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.sampling = sampling
        self.rates = np.minimum(1.0, batch_size / self.sizes)
        if noise_multiplier is not None:
            self.z = np.full(self.sizes.size, float(noise_multiplier))
        else:
            assert target_epsilon is not None
            z = dpsgd_noise_multipliers(
                target_epsilon,
                delta,
                self.rates,
                np.asarray(steps_per_round, dtype=np.int64) * max_rounds,
                method=accountant,
            )
            self.z = z
            log.info("calibrated DP-SGD noise multipliers: min %.3f max %.3f", z.min(), z.max())

    def dpsgd(self, client: int, t: int, n_examples: int) -> DPSGD:
        return DPSGD(max_grad_norm=self.max_grad_norm, noise_multiplier=float(self.z[client]), sampling=self.sampling)

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        q = float(self.rates[client])
        z = float(self.z[client])
        return [(PrivacyEvent.subsampled_gaussian(noise_multiplier=z, sample_rate=q), steps)]


@PRIVACY_PLANS.register("phs")
class PHSDPSGD(ClientPrivacy):
    """DP-SGD of PHS (Algorithm 1, Eqs. 6-7): client k calibrates its noise for its own budget
    (ε_k, δ) and the number of local steps it will run, T_k T^l, with T_k fixed before training
    by the selection (the schedule's count, or a cap; :meth:`SelectionStrategy.participation_bound`).

    ``calibration="paper"`` (default, what the paper's tables used): z_k of Eq. 6-7, Lemmas 1-2
    (compose, then amplify); ``"pld"`` / ``"rdp"``: the smallest z whose tight per-step Poisson
    accounting (dp-accounting) meets ε_k. Each step is recorded as a Poisson-subsampled Gaussian
    (q = r_k, z_k), so the run's accountant reports the tight spend; :meth:`report` gives all three
    (paper forward map, PLD, RDP) side by side.

    ``fixed_batch`` (the reading of Lemma 1's "without replacement" and Definition 1's
    replace-one neighbours): exactly B_k examples without replacement per step, replace-one
    adjacency, sensitivity 2C, so the noise std on the sum is 2 z_k C. Its tight accounting is
    RDP of sampling without replacement (dp-accounting), reported in the ``eps_rdp`` column; the
    PLD column is left empty (dp-accounting's PLD has no such event); the events the run's
    accountant records are Poisson add/remove ones at multiplier 2 z_k, an approximation.

    ε_k = inf (public data) gives z_k = 0: no noise, nothing spent. A client with T_k = 0 never
    runs and gets z_k = 0.
    """

    class Config(PluginConfig):
        """DP-FedAvg of PHS (Algorithm 1, Eqs. 6-7): every client runs DP-SGD calibrated for its own
        budget ε_k (drawn from ``budgets``) over the T_k T^l steps it will run, T_k fixed before
        training by the selection (``phs``, or ``power_of_choice`` with ``cap: planned``).
        ``calibration: paper`` is Eq. 6-7 (the tables), ``pld``/``rdp`` the smallest noise a tight
        accountant certifies; ``batch: fixed_batch`` reads the paper's sampling as exactly B_k
        examples without replacement and replace-one neighbours (σ doubled)."""

        kind: Literal["phs"] = "phs"
        provides: ClassVar[frozenset[str]] = frozenset({"client_budgets"})
        budgets: PrivacyBudgetCfg = Field(default_factory=lambda: UniformBudgetCfg(low=0.0, high=1.0))
        delta: float = Field(1e-5, gt=0, lt=1)
        max_grad_norm: float = Field(1.0, gt=0, le=1e6)
        calibration: Literal["paper", "pld", "rdp"] = "paper"
        batch: Literal["poisson", "fixed_batch"] = "poisson"

        def check_run(self, run: Any) -> None:
            _check_dpsgd_accounting(self, run)
            sel = run.selection
            if not (sel.kind == "phs" or (sel.kind == "power_of_choice" and sel.cap == "planned")):
                raise ValueError(
                    "privacy.kind: 'phs' calibrates for participation counts fixed before training: use selection.kind "
                    f"'phs', or 'power_of_choice' with cap 'planned', got '{sel.kind}'"
                )
            if run.accountant.kind == "zcdp":
                raise ValueError("accountant.kind: use 'rdp' or 'pld' with privacy.kind 'phs', got 'zcdp'")

    @classmethod
    def setup(cls, cfg: BaseModel, ctx: BuildContext) -> ClientBudgets:
        """The clients' budgets ε_k from the run's ``budgets`` stream, V_k (Eq. 7, sampling rate
        r_k = min(1, B/|M_k|)) and p^u: what the PHS selection solves Problem 1 on."""
        c: Any = cfg
        if ctx.data is None or ctx.streams is None or ctx.dim is None:
            raise ValueError("privacy.kind: 'phs' draws the budgets before training: pass the data, streams and model size")
        sizes = np.asarray(ctx.data.sizes, dtype=np.float64)
        eps = draw_budgets(c.budgets.model_dump(mode="json"), sizes.size, ctx.streams.numpy("budgets"))
        r = np.minimum(1.0, ctx.run.train.local.batch_size / sizes)
        V = np.asarray(phs_V(eps, c.delta, r, sizes), dtype=np.float64)
        return ClientBudgets(eps=eps, V=V, p_u=sizes / sizes.sum(), sizes=sizes, dim=int(ctx.dim))

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> PHSDPSGD:
        """Each client's noise for its budget (``ctx.phs``) over the participation count the
        selection fixed before training (``ctx.selection.participation_bound()``)."""
        c: Any = cfg
        if ctx.data is None:
            raise ValueError("privacy.kind: 'phs' calibrates to the clients' data sizes: pass the federated data")
        run, sizes = ctx.run, np.asarray(ctx.data.sizes)
        local = run.train.local
        bound = None if ctx.selection is None else ctx.selection.participation_bound()
        if ctx.phs is None or bound is None:
            raise ValueError(
                "privacy.kind: 'phs' calibrates for each client's participation count, fixed before training: use "
                "selection.kind 'phs', or 'power_of_choice' with cap 'planned'"
            )
        steps = steps_per_round(sizes, batch_size=local.batch_size, epochs=local.epochs, steps=local.steps)
        return cls(
            eps=ctx.phs.eps,
            delta=c.delta,
            sizes=sizes,
            batch_size=local.batch_size,
            local_steps=np.asarray(steps, dtype=np.int64),
            counts=bound,
            max_grad_norm=c.max_grad_norm,
            calibration=c.calibration,
            fixed_batch=c.batch == "fixed_batch",
        )

    def __init__(
        self,
        *,
        eps: np.ndarray,
        delta: float,
        sizes: np.ndarray,
        batch_size: int,
        local_steps: np.ndarray,
        counts: np.ndarray,
        max_grad_norm: float = 1.0,
        calibration: Literal["paper", "pld", "rdp"] = "paper",
        fixed_batch: bool = False,
    ) -> None:
        self.eps = np.asarray(eps, dtype=np.float64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        n = self.sizes.size
        self.local_steps = np.broadcast_to(np.asarray(local_steps, dtype=np.int64), (n,)).copy()
        self.counts = np.asarray(counts, dtype=np.int64)
        if self.eps.shape != (n,) or self.counts.shape != (n,):
            raise ValueError(f"privacy.budgets: need one ε and one count per client ({n}), got {self.eps.shape}, {self.counts.shape}")
        if np.any(np.isnan(self.eps)) or np.any(self.eps <= 0):
            raise ValueError(f"privacy.budgets: every ε_k must be > 0 (or inf for public data), got min {np.nanmin(self.eps)}")
        if batch_size < 1:
            raise ValueError(f"train.local.batch_size: must be >= 1, got {batch_size}")
        if calibration not in ("paper", "pld", "rdp"):
            raise ValueError(f"privacy.calibration: must be 'paper', 'pld' or 'rdp', got {calibration!r}")
        self.delta, self.max_grad_norm, self.calibration, self.fixed_batch = float(delta), float(max_grad_norm), calibration, fixed_batch
        self.rates = np.minimum(1.0, batch_size / self.sizes)  # B_k > |M_k| → r_k = 1, B_k = |M_k|
        self.batch = self.rates * self.sizes
        if np.any(self.delta / self.rates > 1):
            bad = float((self.delta / self.rates).max())
            raise ValueError(f"privacy.delta: must satisfy delta/r_k <= 1 for every client (Lemma 1), got {bad:g}")
        self.total_steps = self.counts * self.local_steps
        self.z = np.zeros(n)
        run = (self.total_steps > 0) & np.isfinite(self.eps)
        if calibration == "paper":
            self.z[run] = phs_noise_multiplier(self.eps[run], self.delta, self.rates[run], self.total_steps[run])
        else:
            for e in np.unique(self.eps[run]):
                m = run & (self.eps == e)
                self.z[m] = dpsgd_noise_multipliers(float(e), self.delta, self.rates[m], self.total_steps[m], method=calibration)
        self.factor = 2.0 if fixed_batch else 1.0
        self.steps_done = np.zeros(n, dtype=np.int64)

    @property
    def sigma(self) -> np.ndarray:
        """σ_k: per-coordinate std of the noise on the *averaged* clipped gradient (Eq. 6, × 2 in fixed_batch)."""
        sigma: np.ndarray = np.asarray(self.factor * self.z * self.max_grad_norm / self.batch, dtype=np.float64)
        return sigma

    def dpsgd(self, client: int, t: int, n_examples: int) -> DPSGD:
        return DPSGD(
            max_grad_norm=self.max_grad_norm,
            noise_multiplier=float(self.factor * self.z[client]),
            sampling="fixed" if self.fixed_batch else "poisson",
        )

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        self.steps_done[client] += steps
        z = float(self.factor * self.z[client])
        if z == 0:  # public data: nothing to account
            return []
        return [(PrivacyEvent.subsampled_gaussian(noise_multiplier=z, sample_rate=float(self.rates[client])), steps)]

    def state_dict(self) -> dict[str, Any]:
        return {"steps_done": self.steps_done.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "steps_done" in state:
            self.steps_done = np.asarray(state["steps_done"], dtype=np.int64).copy()

    def epsilons(self, delta: float, steps: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """ε per client after ``steps`` (default: the steps run so far) by the paper's forward map
        (Eqs. 6-7 inverted), by PLD and by RDP (dp-accounting; PLD discretisation ≤ ε_k/100)."""
        k = self.steps_done if steps is None else np.asarray(steps, dtype=np.int64)
        n = self.z.size
        out = {"eps_paper": np.zeros(n), "eps_pld": np.zeros(n), "eps_rdp": np.zeros(n)}
        for i in range(n):
            if k[i] == 0 or not np.isfinite(self.eps[i]):
                continue
            z, q = float(self.z[i]), float(self.rates[i])
            if z == 0:
                for v in out.values():
                    v[i] = math.inf
                continue
            out["eps_paper"][i] = float(phs_epsilon_spent(z, int(k[i]), q, delta))
            if self.fixed_batch:
                out["eps_pld"][i] = math.nan
                out["eps_rdp"][i] = _rdp_without_replacement(z, int(self.sizes[i]), int(round(self.batch[i])), int(k[i]), delta)
            else:
                grid = min(1e-4, float(self.eps[i]) / 100)
                out["eps_pld"][i] = dpsgd_epsilon(z, q, int(k[i]), delta, method="pld", value_discretization_interval=grid)
                out["eps_rdp"][i] = dpsgd_epsilon(z, q, int(k[i]), delta, method="rdp")
        return out

    def report(self, delta: float) -> list[dict[str, Any]]:
        eps = self.epsilons(delta)
        return [
            {
                "client": i,
                "eps_budget": float(self.eps[i]),
                "T_k": int(self.counts[i]),
                "steps_planned": int(self.total_steps[i]),
                "steps_done": int(self.steps_done[i]),
                "sample_rate": float(self.rates[i]),
                "noise_multiplier": float(self.z[i]),
                "sigma": float(self.sigma[i]),
                **{key: float(v[i]) for key, v in eps.items()},
            }
            for i in range(self.z.size)
        ]


def _rdp_without_replacement(z: float, n: int, b: int, steps: int, delta: float) -> float:
    """ε of ``steps`` Gaussian steps on a uniform b-of-n subsample without replacement,
    replace-one adjacency (sensitivity 2C, noise 2 z C: multiplier z), by dp-accounting's RDP."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    acc = rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    step = dp_event.SampledWithoutReplacementDpEvent(n, b, dp_event.GaussianDpEvent(z))
    acc.compose(dp_event.SelfComposedDpEvent(step, steps))
    return float(acc.get_epsilon(delta))


@PRIVACY_PLANS.register("zcdp_upload")
class ZCDPUpload(ClientPrivacy):
    """ρ-zCDP Gaussian mechanism on each client's upload (FedPCS Eq. 3 / QI-DPFL Eqs. 8-10):
    σ_i(t) = Δ_i / sqrt(2 ρ_i^t), Δ_i = 2W/|D_i| (FedPCS Eq. 46, Prop. 1).

    ``rho`` is a scalar, a per-client vector, or an (N, rounds) schedule (the game's ρ_i^t).

    The vector the mechanism protects is a gradient-like g_i with per-example norm ≤ W; the
    client's displacement is −s_i g_i for a step scale s_i (``scale``), so the engine clips
    the displacement to s_i W and adds noise of std s_i σ_i — the same mechanism, expressed
    in parameter space.

    * ``mode="paper_update"`` (default, the papers' experiments): E local epochs; g_i is the
      pseudo-gradient (w(t) − w_i^E)/η_eff with η_eff = η · (local steps), i.e. s_i = η_eff,
      clipped to W. Its ledger follows the papers' accounting, not a formal guarantee for
      multi-step training: labelled "paper accounting".
    * ``mode="exact"``: one full-batch step of per-example-clipped gradients (the trainer
      clips each example to W, no DP-SGD noise), s_i = η: replacing one example moves the
      mean by ≤ 2W/|D_i|, so each round is exactly ρ_i^t-zCDP ("formal").
    * ``mode="paper_params"``: Prop. 1 and App. A (Eq. 46) read literally, as NbAFL (Wei et al.,
      IEEE TIFS 2020) does: after local training the client scales its *whole parameter vector*
      to norm ≤ W, w_i ← w_i / max(1, ‖w_i‖/W), and uploads w_i + N(0, σ_i² I) with
      σ_i = √2 W / (|D_i| √ρ_i^t); the server forms w̃_i − w(t) and aggregates as in
      ``paper_update``. The noise then sits on the parameters at a scale set by W, not relative
      to the round's step, which is what can separate the methods. Paper accounting.
    """

    class Config(PluginConfig):
        """ρ-zCDP Gaussian noise on each upload (FedPCS Prop. 1). ``rho: game`` takes ρ_i^t from the
        FedPCS game. ``mode``: ``paper_update`` (E local epochs, pseudo-gradient clipped to
        ``clip``, paper accounting), ``paper_params`` (the local model's parameters clipped to
        norm ``clip`` = W and noised, NbAFL: Prop. 1 read literally; paper accounting) or
        ``exact`` (one full-batch step of per-example-clipped gradients: needs
        ``train.local.steps: 1`` and a batch size >= every client's data)."""

        kind: Literal["zcdp_upload"] = "zcdp_upload"
        rho: float | Literal["game"] = Field(1.0, description="per-round zCDP level, or 'game'")
        clip: float = Field(1.0, gt=0, le=1e6)
        mode: Literal["paper_update", "exact", "paper_params"] = "paper_update"

        def check_run(self, run: Any) -> None:
            if self.rho == "game" and "rho_schedule" not in run.provided():
                raise ValueError("privacy.rho: 'game' needs incentive.kind 'fedpcs' or 'qidpfl'")
            if self.mode == "exact" and run.train.local.steps != 1:
                raise ValueError(
                    f"train.local.steps: privacy.mode 'exact' is one full-batch step per round, must be 1, got {run.train.local.steps}"
                )

        @field_validator("rho")
        @classmethod
        def _rho_positive(cls, v: float | str) -> float | str:
            if not isinstance(v, str) and not (0 < v <= 1e6):
                raise ValueError(f"must be in (0, 1e6] or 'game', got {v}")
            return v

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> ZCDPUpload:
        """ρ from the recipe or the game's plan (``ctx.plan``); the update's scale from the local
        learning rate and steps."""
        c: Any = cfg
        if ctx.data is None:
            raise ValueError("privacy.kind: 'zcdp_upload' scales to the clients' data sizes: pass the federated data")
        run, sizes = ctx.run, np.asarray(ctx.data.sizes)
        local = run.train.local
        if c.rho == "game":
            if ctx.plan is None:
                raise ValueError("privacy.rho: 'game' needs incentive.kind 'fedpcs' or 'qidpfl'")
            rho: float | np.ndarray = ctx.plan.rho
        else:
            rho = float(c.rho)
        if c.mode == "exact":
            if local.batch_size < int(sizes.max()):
                raise ValueError(
                    f"train.local.batch_size: privacy.mode 'exact' takes one full-batch step, must be >= the "
                    f"largest client's data ({int(sizes.max())}), got {local.batch_size}"
                )
            scale: float | np.ndarray = local.lr
        elif c.mode == "paper_params":
            scale = 1.0  # the parameters themselves: no step scale
        else:
            spr = steps_per_round(sizes, batch_size=local.batch_size, epochs=local.epochs, steps=local.steps)
            scale = local.lr * np.asarray(spr, dtype=np.float64)
        return cls(rho=rho, clip=c.clip, sizes=sizes, scale=scale, mode=c.mode)

    def __init__(
        self,
        *,
        rho: float | np.ndarray,
        clip: float,
        sizes: np.ndarray,
        scale: float | np.ndarray = 1.0,
        mode: Literal["paper_update", "exact", "paper_params"] = "paper_update",
    ) -> None:
        r = np.asarray(rho, dtype=np.float64)
        if np.any(~np.isfinite(r)) or np.any(r < 0) or (r.ndim < 2 and np.any(r == 0)):
            raise ValueError(f"privacy.rho: must be > 0 (0 only in a schedule, for a client sitting a round out), got min {r.min()}")
        if not clip > 0:
            raise ValueError(f"privacy.clip: must be > 0, got {clip}")
        if mode not in ("paper_update", "exact", "paper_params"):
            raise ValueError(f"privacy.mode: must be 'paper_update', 'exact' or 'paper_params', got {mode!r}")
        self.rho = r
        self.clip = clip
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), self.sizes.shape).copy()
        if np.any(~(self.scale > 0)):
            raise ValueError("privacy scale (learning rate x local steps): must be > 0")
        self.mode = mode
        self.accounting = "formal" if mode == "exact" else "paper accounting"

    def rho_of(self, client: int, t: int) -> float:
        r = self.rho
        if r.ndim == 0:
            return float(r)
        if r.ndim == 1:
            return float(r[client])
        return float(r[client, min(t, r.shape[1] - 1)])

    def dpsgd(self, client: int, t: int, n_examples: int) -> DPSGD | None:
        if self.mode == "exact":
            return DPSGD(max_grad_norm=self.clip, noise_multiplier=0.0, sampling="shuffle")
        return None

    def noise_std(self, client: int, t: int, n_examples: int) -> float:
        """σ_i(t) = sqrt(2) W / (|D_i| sqrt(ρ_i^t)) on g_i (FedPCS Prop. 1, Eq. 46)."""
        return math.sqrt(2.0) * self.clip / (n_examples * math.sqrt(self.rho_of(client, t)))

    def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism:
        if self.rho_of(client, t) <= 0:
            raise ValueError(f"privacy.rho: client {client} has rho = 0 in round {t} (it sits the round out) but was selected")
        s = float(self.scale[client])
        return GaussianMechanism.for_zcdp(
            self.rho_of(client, t),
            clip=s * self.clip,
            sensitivity=2.0 * s * self.clip / n_examples,
            on="params" if self.mode == "paper_params" else "update",
        )

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        return [(PrivacyEvent.zcdp(self.rho_of(client, t)), 1)]


def _verified_file() -> Path:
    """``$FEDGAME_CACHE/verified/privacy_plans.json``: the source hashes of plug-in plans whose
    contract passed in this installation."""
    return Path(os.environ.get("FEDGAME_CACHE", Path.home() / ".cache" / "fedgame")) / "verified" / "privacy_plans.json"


def plan_source_hash(cls: type) -> str:
    """SHA-256 of the source of the module defining ``cls`` (its class alone where the module's
    source cannot be read): an edit to a plug-in's file makes it unverified again."""
    mod = sys.modules.get(cls.__module__)
    try:
        text = inspect.getsource(mod) if mod is not None else inspect.getsource(cls)
    except (OSError, TypeError):
        text = f"{cls.__module__}.{cls.__qualname__}"
    return hashlib.sha256(text.encode()).hexdigest()


def _verified() -> dict[str, str]:
    try:
        got = json.loads(_verified_file().read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def record_verified(cls: type) -> None:
    """Record that the privacy-plan contract passed for ``cls`` as its source is now
    (:func:`fedgame.testing.check_privacy_plan` calls this on a pass)."""
    got = _verified()
    got[plan_source_hash(cls)] = f"{cls.__module__}.{cls.__qualname__}"
    path = _verified_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(got, indent=1, sort_keys=True))
    os.replace(tmp, path)


def accounting_label(plan: ClientPrivacy) -> str:
    """What a run reports as its privacy accounting: ``"none"`` for a plan that gives none; a
    built-in plan's own label (``"formal"`` or ``"paper accounting"``); a plug-in's own label only
    once :func:`fedgame.testing.check_privacy_plan` has passed for its current source in this
    installation, ``"unverified"`` before (the label is a class attribute any plug-in can set, so
    it is not believed on its word)."""
    if plan.accounting == "none":
        return "none"
    cls = type(plan)
    if cls.__module__.startswith("fedgame."):
        return plan.accounting
    return plan.accounting if plan_source_hash(cls) in _verified() else "unverified"
