"""Central DP-FedAvg: the server clips each client's update, noises their sum, and accounts
user-level privacy (McMahan, Ramage, Talwar & Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018), optionally with an adaptive clip norm (Andrew, Thakkar, McMahan &
Ramaswamy, "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021).

One round, with m the *expected* number of clients per round and C the clip norm:

1. each selected client's displacement Δ_i = w_i − w is clipped to L2 norm C;
2. the server releases (Σ_i clip(Δ_i) + N(0, (z_Δ C)² I)) / m (a fixed denominator);
3. with adaptive clipping each client also reports b_i = 1[‖Δ_i‖ ≤ C]; the server releases the
   noisy unclipped fraction b̄ = (Σ_i (b_i − ½) + N(0, σ_b²)) / m + ½ and moves the clip
   geometrically towards the γ-quantile of the norms: C ← C · exp(−η_C (b̄ − γ)) (Alg. 1/2).

The bits are centred (b_i − ½, as TFF's ``QuantileEstimator`` does): adding or removing one client
moves their sum by ½, so the count query has noise multiplier 2σ_b and the pair of queries is one
Gaussian mechanism of multiplier z with z⁻² = z_Δ⁻² + (2σ_b)⁻² (Andrew et al., Thm 1). For a
requested z the update noise is therefore raised to z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), which needs
2σ_b > z (:func:`update_noise_multiplier`). With exactly m clients the centred fraction equals
(Σ b_i + N(0, σ_b²)) / m.

Accounting, user level, the same for every client (:func:`round_event`): a round is the Gaussian
mechanism of multiplier z on a sample of the N clients —

* ``"poisson"``: each client joins with probability q = m/N (add/remove adjacency;
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``); q = 1 is full participation;
* ``"fixed_size"``: exactly m of the N clients, uniformly without replacement. dp-accounting
  states this under *replace-one* adjacency (``SampledWithoutReplacementDpEvent``), where one
  client's clipped update moves the sum by up to 2C (and its centred bit by 1): the round is the
  replace-one Gaussian of multiplier z/2.

The plan :class:`CentralDP` (``privacy.kind: central_dp``) plugs this into the engine through
:meth:`~fedgame.privacy.plans.ClientPrivacy.server_update`: the clients upload their raw
displacements, and :func:`central_server_update` (a :class:`~fedgame.core.ServerUpdate` taking
the place of the aggregation rule) clips, sums, noises, adapts C (kept in the server state, so
checkpointed) and charges every client's ledger once per release.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from fedgame.core.plugins import PluginConfig, refuse_bools
from fedgame.core.server_update import RoundContext, ServerUpdate, Updates
from fedgame.core.types import Params
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.plans import PRIVACY_PLANS, ClientPrivacy

if TYPE_CHECKING:
    from fedgame.core.plugins import BuildContext
    from fedgame.privacy.accountants import Accountant

__all__ = [
    "AdaptiveClip",
    "CentralDP",
    "CentralGaussian",
    "calibrate_central_dp",
    "Release",
    "Sampling",
    "central_dp_epsilon",
    "central_server_update",
    "round_event",
    "update_noise_multiplier",
]

Sampling = Literal["poisson", "fixed_size"]


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name}: must be > 0 and finite, got {value}")
    return v


def update_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float) -> float:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): the noise multiplier of the update sum that, composed with
    the centred clipped-count query of noise std σ_b, gives the requested z (Andrew et al. 2021,
    Thm 1; TFF ``_adaptive_clipping``, Flower ``compute_adaptive_noise_params``). Needs 2σ_b > z."""
    z = _positive("privacy.noise_multiplier", noise_multiplier)
    s = float(clipped_count_stddev)
    if not (2.0 * s > z and math.isfinite(s)):
        raise ValueError(
            f"privacy.adaptive.clipped_count_stddev: must be > privacy.noise_multiplier / 2 = {z / 2:g} (the update's "
            f"noise multiplier (z^-2 - (2 clipped_count_stddev)^-2)^-1/2 must exist), got {s:g}"
        )
    return float((z**-2 - (2.0 * s) ** -2) ** -0.5)


@dataclass(frozen=True)
class AdaptiveClip:
    """Geometric clip-norm update towards the ``target_quantile`` γ of the update norms
    (Andrew et al. 2021, Alg. 1/2): C ← C · exp(−η_C (b̄ − γ)), b̄ the noisy unclipped fraction.
    ``clipped_count_stddev`` σ_b is the noise std on the count (None: m/20, TFF's and Flower's
    default, m the expected clients per round)."""

    target_quantile: float = 0.5
    clip_lr: float = 0.2
    clipped_count_stddev: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.target_quantile < 1:
            raise ValueError(f"privacy.adaptive.target_quantile: must be in (0, 1), got {self.target_quantile}")
        _positive("privacy.adaptive.clip_lr", self.clip_lr)
        s = self.clipped_count_stddev
        if s is not None and not (s >= 0 and math.isfinite(s)):
            raise ValueError(f"privacy.adaptive.clipped_count_stddev: must be >= 0 and finite, got {s}")

    def count_stddev(self, expected_clients: int) -> float:
        """σ_b: the given one, else m/20."""
        return float(expected_clients) / 20.0 if self.clipped_count_stddev is None else float(self.clipped_count_stddev)

    def noised_fraction(self, unclipped: Tensor, expected_clients: int, gen: torch.Generator, *, draws: int | None = None) -> Tensor:
        """b̄ = (Σ_i (b_i − ½) + N(0, σ_b²)) / m + ½ of the bits ``unclipped`` (the last axis is
        the clients); ``draws`` independent noise draws at once (a ``(draws,)`` tensor), else one
        (a scalar tensor). float64, on the CPU generator ``gen``."""
        bits = unclipped.detach().to("cpu", torch.float64)
        centred = bits.sum(-1) - 0.5 * bits.shape[-1]
        shape = (draws,) if draws is not None else ()
        noise = torch.randn(shape, generator=gen, dtype=torch.float64) * self.count_stddev(expected_clients)
        return (centred + noise) / expected_clients + 0.5

    def next_clip(self, clip: float, fraction: float) -> float:
        """C · exp(−η_C (b̄ − γ))."""
        return float(clip * math.exp(-self.clip_lr * (fraction - self.target_quantile)))


@dataclass(frozen=True)
class Release:
    """What one round of :class:`CentralGaussian` released: the noised mean update, the clip C it
    was clipped to, the std of the noise on the *sum* (z_Δ C), the noisy unclipped fraction b̄
    (None without adaptive clipping) and the clip for the next round."""

    mean: Tensor
    clip: float
    noise_std: float
    noised_fraction: float | None
    next_clip: float


class CentralGaussian:
    """The server's Gaussian mechanism of central DP-FedAvg (module docstring): clip each of the
    round's updates to C, add N(0, (z_Δ C)² I) to their sum, divide by the expected number of
    clients m; with ``adaptive``, the noisy clipped-count update of C.

    ``noise_multiplier`` is the requested z of the whole round (update and count queries
    together); :attr:`update_noise_multiplier` is z_Δ (= z without adaptive clipping)."""

    def __init__(self, *, noise_multiplier: float, clip: float, expected_clients: int, adaptive: AdaptiveClip | None = None) -> None:
        self.noise_multiplier = _positive("privacy.noise_multiplier", noise_multiplier)
        self.clip = _positive("privacy.clip", clip)
        if isinstance(expected_clients, bool) or int(expected_clients) != expected_clients or expected_clients < 1:
            raise ValueError(f"expected_clients: must be an integer >= 1, got {expected_clients!r}")
        self.expected_clients = int(expected_clients)
        self.adaptive = adaptive
        self.count_stddev = None if adaptive is None else adaptive.count_stddev(self.expected_clients)
        self.update_noise_multiplier = (
            self.noise_multiplier if self.count_stddev is None else update_noise_multiplier(self.noise_multiplier, self.count_stddev)
        )

    def noise_std(self, clip: float | None = None) -> float:
        """z_Δ · C: the std of the noise on the clipped sum (per coordinate)."""
        return self.update_noise_multiplier * (self.clip if clip is None else float(clip))

    def clip_updates(self, updates: Tensor, clip: float | None = None) -> tuple[Tensor, Tensor]:
        """(the ``(k, d)`` updates each scaled to L2 norm ≤ C, the bits b_i = 1[‖Δ_i‖ ≤ C]).
        Rows already within C are returned bit-identical; norms are computed in float64."""
        c = _positive("clip", self.clip if clip is None else clip)
        if updates.ndim != 2:
            raise ValueError(f"updates: must be a (clients, parameters) tensor, got shape {tuple(updates.shape)}")
        norms = torch.linalg.vector_norm(updates.to(torch.float64), dim=1)
        if not bool(torch.isfinite(norms).all()):
            raise ValueError("updates: every update must have a finite L2 norm")
        unclipped = norms <= c
        scale = (c / norms.clamp(min=c)).to(updates.dtype)
        clipped = torch.where(unclipped[:, None], updates, updates * scale[:, None])
        return clipped, unclipped

    def noised_sum(self, clipped: Tensor, gen: torch.Generator, *, clip: float | None = None, draws: int | None = None) -> Tensor:
        """Σ_i clipped_i + N(0, (z_Δ C)² I): one draw (shape ``(d,)``), or ``draws`` independent
        ones at once (shape ``(draws, d)``). The noise comes from the CPU generator ``gen``."""
        total = clipped.sum(0)
        shape = (*((draws,) if draws is not None else ()), *total.shape)
        noise = torch.randn(shape, generator=gen, dtype=total.dtype).to(total.device)
        return total + noise * self.noise_std(clip)

    def release(self, updates: Tensor, gen: torch.Generator, *, clip: float | None = None) -> Release:
        """One round on the ``(k, d)`` uploads (k may be 0: the noise alone is released): the
        noised mean (Σ clip(Δ_i) + noise) / m and, with adaptive clipping, the next clip."""
        c = self.clip if clip is None else _positive("clip", clip)
        clipped, unclipped = self.clip_updates(updates, c)
        mean = self.noised_sum(clipped, gen, clip=c) / self.expected_clients
        fraction: float | None = None
        nxt = c
        if self.adaptive is not None:
            fraction = float(self.adaptive.noised_fraction(unclipped, self.expected_clients, gen))
            nxt = self.adaptive.next_clip(c, fraction)
        return Release(mean=mean, clip=c, noise_std=self.noise_std(c), noised_fraction=fraction, next_clip=nxt)

    def __repr__(self) -> str:
        ad = "" if self.adaptive is None else f", adaptive={self.adaptive}"
        return (
            f"CentralGaussian(z={self.noise_multiplier:g}, z_update={self.update_noise_multiplier:g}, clip={self.clip:g}, "
            f"m={self.expected_clients}{ad})"
        )


# -- accounting ------------------------------------------------------------------------------
def round_event(noise_multiplier: float, *, population_size: int, sample_size: int, sampling: Sampling) -> PrivacyEvent:
    """One round's privacy event for every client (module docstring): ``"poisson"``: the
    Poisson-subsampled Gaussian (q = m/N, multiplier z; q = 1 is the plain Gaussian);
    ``"fixed_size"``: the Gaussian on m of N without replacement, replace-one adjacency,
    multiplier z/2 (one client moves the clipped sum by up to 2C)."""
    z = _positive("privacy.noise_multiplier", noise_multiplier)
    n, m = int(population_size), int(sample_size)
    if not 1 <= m <= n:
        raise ValueError(f"clients per round: must be in [1, {n}] (the number of clients), got {sample_size}")
    if sampling == "poisson":
        return PrivacyEvent.subsampled_gaussian(noise_multiplier=z, sample_rate=m / n)
    if sampling == "fixed_size":
        return PrivacyEvent.wor_subsampled_gaussian(noise_multiplier=z / 2.0, sample_size=m, population_size=n)
    raise ValueError(f"sampling: must be 'poisson' or 'fixed_size', got {sampling!r}")


def central_dp_epsilon(
    noise_multiplier: float,
    *,
    population_size: int,
    sample_size: int,
    rounds: int,
    delta: float,
    sampling: Sampling = "poisson",
    accountant: str = "rdp",
) -> float:
    """User-level ε at δ of ``rounds`` rounds of central DP-FedAvg (every client alike): the
    round's :func:`round_event` recorded ``rounds`` times in a fedgame ``accountant`` (what a run
    reports)."""
    from fedgame.privacy.accountants import make_accountant

    acc = make_accountant(accountant, n_clients=1)
    acc.record(0, round_event(noise_multiplier, population_size=population_size, sample_size=sample_size, sampling=sampling), rounds)
    return float(acc.epsilon(0, delta))


def calibrate_central_dp(
    target_epsilon: float,
    *,
    population_size: int,
    sample_size: int,
    rounds: int,
    delta: float,
    sampling: Sampling = "poisson",
    accountant: str = "rdp",
) -> float:
    """The smallest noise multiplier z (to 4 significant digits, rounded up) whose
    :func:`central_dp_epsilon` over ``rounds`` rounds is at most ``target_epsilon``: bisection on
    log z over [1e-2, 1e4] (ε falls as z grows). Refused in one line when even z = 1e4 spends
    more."""
    eps = _positive("privacy.target_epsilon", target_epsilon)

    def spent(z: float) -> float:
        return central_dp_epsilon(
            z,
            population_size=population_size,
            sample_size=sample_size,
            rounds=rounds,
            delta=delta,
            sampling=sampling,
            accountant=accountant,
        )

    lo, hi = math.log(1e-2), math.log(1e4)
    if spent(math.exp(hi)) > eps:
        raise ValueError(
            f"privacy.target_epsilon: {eps:g} cannot be met over {rounds} rounds at δ = {delta:g} even with noise_multiplier 1e4"
        )
    if spent(math.exp(lo)) <= eps:
        return 1e-2
    while hi - lo > 1e-5:  # log z to 1e-5: z to a relative 1e-5
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if spent(math.exp(mid)) <= eps else (mid, hi)
    z = float(f"{math.exp(hi):.4g}")
    return z if spent(z) <= eps else float(f"{math.exp(hi) * 1.0001:.4g}")


# -- the server update -----------------------------------------------------------------------
def central_server_update(mechanism: CentralGaussian, *, charge: Callable[[int], None] | None = None) -> ServerUpdate:
    """``mechanism`` as a :class:`~fedgame.core.ServerUpdate` in place of an aggregation rule:
    the raw uploads in, one noised mean out. Its state is ``{"clip": C}`` (checkpointed with
    the run); the noise is drawn from a CPU generator seeded from ``ctx.rng`` (the round's
    ``server`` stream, so a resumed run draws the same noise). ``charge(t)`` is called once per
    release, after the noise is added (:class:`CentralDP` records the round's event for every
    client there). The round's ``k`` must be the mechanism's m: the noise and the accounting
    are calibrated for it. Reports ``dp_clip`` (the C used), ``dp_noise_std`` (the std on the
    mean, z_Δ C / m) and, when adaptive, ``dp_unclipped_fraction`` (the noisy b̄) in
    ``ctx.metrics``."""

    def init(params: Params) -> dict[str, float]:
        del params
        return {"clip": mechanism.clip}

    def update(updates: Sequence[Params], state: Any, ctx: RoundContext) -> tuple[Updates, Any]:
        m = mechanism.expected_clients
        if ctx.selection.k != m:
            raise RuntimeError(
                f"round {ctx.t}: central DP is calibrated for {m} clients per round, the selection drew k = {ctx.selection.k}"
            )
        if updates:
            stacked = torch.stack(list(updates))
        else:
            stacked = ctx.params.reshape(-1).new_zeros((0, ctx.params.numel()))
        gen = torch.Generator().manual_seed(int(ctx.rng.integers(0, 2**63 - 1)))
        rel = mechanism.release(stacked, gen, clip=float(state["clip"]))
        ctx.metrics["dp_clip"] = rel.clip
        ctx.metrics["dp_noise_std"] = rel.noise_std / m
        if rel.noised_fraction is not None:
            ctx.metrics["dp_unclipped_fraction"] = rel.noised_fraction
        if charge is not None:
            charge(ctx.t)
        return [rel.mean.reshape(ctx.params.shape)], {"clip": rel.next_clip}

    return ServerUpdate(init, update)


# -- the privacy plan ------------------------------------------------------------------------
class AdaptiveClipCfg(BaseModel):
    """Adaptive clipping (Andrew et al. 2021): the clip moves towards the ``target_quantile`` of
    the clients' update norms at rate ``clip_lr``; ``clipped_count_stddev`` is the noise std on
    the clipped count (null: clients per round / 20)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_quantile: float = Field(0.5, gt=0, lt=1)
    clip_lr: float = Field(0.2, gt=0, le=1e3)
    clipped_count_stddev: float | None = Field(None, ge=0, le=1e9)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bools(cls, data)


def _fixed_size(run: Any) -> bool:
    """The recipe's selection draws exactly clients_per_round clients without replacement."""
    return bool(run.selection.kind == "uniform" and not getattr(run.selection, "replace", True))


@PRIVACY_PLANS.register("central_dp")
class CentralDP(ClientPrivacy):
    """Central DP-FedAvg (McMahan et al. 2018): the server clips each client's update to ``clip``,
    adds N(0, (z C)² I) to the sum and divides by the clients per round; optional adaptive
    clipping (Andrew et al. 2021). User-level (ε, δ) for every client alike, from the RDP
    accountant: uniform sampling without replacement (``selection: {kind: uniform, replace:
    false}``) or every client every round (``full``). The clients add no noise and record no
    event; the server's release is charged to every client each round."""

    accounting = "formal"
    releases_empty_rounds = True

    class Config(PluginConfig):
        """Central DP-FedAvg (McMahan et al. 2018): the server clips each update to ``clip``,
        noises the sum with std ``noise_multiplier`` x clip and divides by the clients per round;
        ``adaptive`` (Andrew et al. 2021) moves the clip towards a quantile of the update norms
        (null: fixed clip). Needs ``selection: {kind: uniform, replace: false}`` (accounted by
        RDP, sampling without replacement) or ``full``."""

        kind: Literal["central_dp"] = "central_dp"
        noise_multiplier: float = Field(1.0, gt=0, le=1e6, description="z: noise std on the clipped sum / clip (> 0)")
        target_epsilon: float | None = Field(
            None,
            gt=0,
            le=1e4,
            description="calibrate z instead: the smallest z whose ε over the run's rounds at accountant.delta is at most this",
        )
        clip: float = Field(1.0, gt=0, le=1e6, description="L2 clip norm of each client's update (initial clip when adaptive)")
        adaptive: AdaptiveClipCfg | None = None

        @model_validator(mode="after")
        def _one_noise(self) -> Any:
            if self.target_epsilon is not None and "noise_multiplier" in self.model_fields_set:
                raise ValueError("give one of privacy.noise_multiplier and privacy.target_epsilon, not both")
            return self

        def check_run(self, run: Any) -> None:
            sel = run.selection
            fixed = _fixed_size(run)
            if not (fixed or sel.kind == "full"):
                extra = " with replace: true" if sel.kind == "uniform" else ""
                raise ValueError(
                    f"selection.kind: privacy.kind 'central_dp' is accounted for 'uniform' sampling without replacement "
                    f"(replace: false) or 'full' participation, got '{sel.kind}'{extra}"
                )
            if run.aggregation.kind not in ("mean", "fedavg"):
                raise ValueError(
                    f"aggregation.kind: privacy.kind 'central_dp' aggregates itself ((clipped sum + noise) / clients per round): "
                    f"use 'mean' or leave the default, got '{run.aggregation.kind}'"
                )
            if fixed and run.accountant.kind != "rdp":
                raise ValueError(
                    f"accountant.kind: privacy.kind 'central_dp' with a fixed number of clients per round (sampling without "
                    f"replacement) is accounted by RDP: use 'rdp', got '{run.accountant.kind}'"
                )
            n = run.data.partition.n_clients
            if n is not None and not run.accountant.delta < 1.0 / n:
                raise ValueError(
                    f"accountant.delta: must be < 1/N = {1.0 / n:.3g} for privacy.kind 'central_dp' over N = {n} clients "
                    f"(user-level: a larger δ allows publishing one client's data in the clear), got {run.accountant.delta:g}"
                )
            m = run.train.clients_per_round if fixed else n
            if self.adaptive is not None and m is not None and self.target_epsilon is None:
                sigma = AdaptiveClip(**self.adaptive.model_dump()).count_stddev(int(m))
                if not 2.0 * sigma > self.noise_multiplier:
                    said = " (the default: clients per round / 20)" if self.adaptive.clipped_count_stddev is None else ""
                    raise ValueError(
                        f"privacy.adaptive.clipped_count_stddev: must be > privacy.noise_multiplier / 2 = "
                        f"{self.noise_multiplier / 2:g} (the update's noise multiplier (z^-2 - (2 clipped_count_stddev)^-2)^-1/2 "
                        f"must exist), got {sigma:g}{said}"
                    )

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> CentralDP:
        """m and N from the recipe and the data: m = clients per round for uniform sampling
        without replacement, m = N for full participation."""
        c: Any = cfg
        run = ctx.run
        if ctx.data is None:
            raise ValueError("privacy.kind: 'central_dp' needs the federated data (its number of clients)")
        n = int(ctx.data.n_clients)
        fixed = _fixed_size(run)
        m = int(run.train.clients_per_round) if fixed else n
        adaptive = None if c.adaptive is None else AdaptiveClip(**c.adaptive.model_dump())
        sampling: Sampling = "fixed_size" if fixed else "poisson"
        z = c.noise_multiplier
        if c.target_epsilon is not None:
            z = calibrate_central_dp(
                c.target_epsilon,
                population_size=n,
                sample_size=m,
                rounds=int(run.train.rounds),
                delta=float(run.accountant.delta),
                sampling=sampling,
                accountant=str(run.accountant.kind),
            )
            if adaptive is not None and not 2.0 * adaptive.count_stddev(m) > z:
                raise ValueError(
                    f"privacy.adaptive.clipped_count_stddev: must be > z / 2 = {z / 2:g} for the z = {z:g} that privacy.target_epsilon "
                    f"{c.target_epsilon:g} calibrates to, got {adaptive.count_stddev(m):g}"
                )
        return cls(
            n_clients=n,
            clients_per_round=m,
            noise_multiplier=z,
            clip=c.clip,
            adaptive=adaptive,
            sampling=sampling,
        )

    def __init__(
        self,
        *,
        n_clients: int,
        clients_per_round: int,
        noise_multiplier: float,
        clip: float,
        adaptive: AdaptiveClip | None = None,
        sampling: Sampling = "fixed_size",
    ) -> None:
        self.n_clients = int(n_clients)
        self.sampling: Sampling = sampling
        self.mechanism = CentralGaussian(
            noise_multiplier=noise_multiplier, clip=clip, expected_clients=clients_per_round, adaptive=adaptive
        )
        self.event = round_event(noise_multiplier, population_size=self.n_clients, sample_size=clients_per_round, sampling=sampling)

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        """Nothing per client: the server's release is charged by :meth:`server_update`."""
        return []

    def server_update(self, accountant: Accountant) -> ServerUpdate:
        """:func:`central_server_update`, charging :attr:`event` to every client's ledger in
        ``accountant`` once per release (refused now if the accountant cannot charge it)."""
        accountant.check_event(self.event)
        if accountant.n_clients != self.n_clients:
            raise ValueError(f"accountant: has {accountant.n_clients} clients, the plan {self.n_clients}")
        everyone = np.arange(self.n_clients)

        def charge(t: int) -> None:
            del t
            accountant.record(everyone, self.event, 1)

        return central_server_update(self.mechanism, charge=charge)

    def report(self, delta: float) -> list[dict[str, Any]]:
        """Per client (all alike): z as requested, the update's z_Δ, the sampling and q = m/N."""
        del delta
        row = {
            "noise_multiplier": self.mechanism.noise_multiplier,
            "update_noise_multiplier": self.mechanism.update_noise_multiplier,
            "sampling": self.sampling,
            "sample_rate": self.mechanism.expected_clients / self.n_clients,
        }
        return [dict(row) for _ in range(self.n_clients)]
