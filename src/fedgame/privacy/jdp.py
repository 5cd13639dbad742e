"""The client side of JDP-FL's training stage (Zhang et al., TKDE 2023; Sec. 4.3, Algorithms 3
and 5, Theorem 5): M3 local Gaussian perturbation and M5 jointly-DP local update, plus the privacy
events one round records. The server side (M4, the comparison aggregators) is in
:mod:`fedgame.robust`; the ledger maths in :mod:`fedgame.privacy.analysis.jdp`.

One round of winner i (JDP-FL Sec. 4.1, steps ④-⑦)::

    mech = local_perturbation(epsilon=ε_L, delta=δ, clip=C, n_examples=d_i)   # once per client
    out  = perturb(θ_i, mech, gen_i)          # M3: out.upload to the server, keep out.clipped
    ... server: M4 → (agg, sum)               # fedgame.robust.leave_one_out_aggregate
    θ_i  = jdp_local_update(agg, sum, out.clipped, d_i)                        # M5
    ledger_i += jdp_events(mech, eps_exp=ε_E)

M3 perturbs the whole parameter vector after local training, not the update: a client's
starting point is its own M5 output, so ``start + noisy update`` would not protect it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedgame.privacy.analysis.jdp import SensitivityKind, m3_sensitivity
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.mechanisms import GaussianMechanism

__all__ = [
    "SelfWeighting",
    "Perturbed",
    "local_perturbation",
    "perturb",
    "jdp_local_update",
    "jdp_events",
]

#: M5's treatment of the client's own contribution when it is in the chosen group (the paper's
#: formula counts it twice: once noisy inside ``agg``, once true).
SelfWeighting = Literal["add", "replace"]


def local_perturbation(
    *,
    epsilon: float,
    delta: float,
    clip: float,
    n_examples: int | None = None,
    sensitivity: SensitivityKind | float = "record",
    calibrator: Literal["classic", "analytic"] = "classic",
) -> GaussianMechanism:
    """M3's mechanism for one client (Algorithm 3, eq. (6)): clip the flat parameter vector to
    L2 norm C = ``clip`` and add N(0, σ²I) with σ calibrated to (ε_L, δ) = (``epsilon``,
    ``delta``) for Δ₂f = :func:`~fedgame.privacy.analysis.jdp.m3_sensitivity` (``"record"``:
    2C/d_i, needs ``n_examples`` = d_i; ``"client"``: 2C; or a number). ``"classic"``: eq. (6)
    with equality (a warning is logged for ε_L ≥ 1, where eq. (6) is not proven);
    ``"analytic"``: Balle & Wang 2018.

    The result remembers Δ₂f, so ``mech.event()`` is the Gaussian release with noise multiplier
    σ/Δ₂f. σ depends only on d_i, so build it once per client, not once per round.
    Example: ε_L = 1, δ = 1e-5, C = 20, d_i = 2,950 → σ = 0.065692 (record), 193.792 (client).
    """
    delta_2f = float(m3_sensitivity(sensitivity, clip=clip, n_examples=n_examples))
    return GaussianMechanism.for_epsilon_delta(epsilon, delta, clip=clip, sensitivity=delta_2f, calibrator=calibrator)


@dataclass(frozen=True)
class Perturbed:
    """M3's output for one client: ``upload`` = θ̂_i (sent to the server), ``clipped`` = θ_i
    after clipping, un-noised (kept by the client for M5, which uses the true θ_i), and whether
    clipping changed it (the runs log the fraction of clients whose clipping was active)."""

    clipped: Tensor
    upload: Tensor
    clip_active: bool


def perturb(theta: Tensor, mechanism: GaussianMechanism, gen: torch.Generator) -> Perturbed:
    """M3 (Algorithm 3): θ_i ← θ_i / max(1, ‖θ_i‖₂/C) on the whole flat vector (line 2's
    garbled θ_i/C read as the L2 norm), then θ̂_i = θ_i + Z, Z ~ N(0, σ²I) from ``gen`` (the
    client's own stream). Clips, then adds noise (the paper samples first; the two are
    independent)."""
    if theta.ndim != 1:
        raise ValueError(f"theta: must be a flat (1-D) parameter vector, got shape {tuple(theta.shape)}")
    clipped = mechanism.constrain(theta)  # returns theta itself when ‖θ‖₂ ≤ C (clip_by_l2)
    return Perturbed(clipped=clipped, upload=mechanism.add_noise(clipped, gen), clip_active=clipped is not theta)


def _check_weight(name: str, value: float) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name}: must be > 0 and finite, got {value!r}")
    return v


def jdp_local_update(
    agg: Tensor,
    total: float,
    theta: Tensor,
    n_examples: float,
    *,
    self_weighting: SelfWeighting = "add",
    upload: Tensor | None = None,
    member: bool | None = None,
) -> Tensor:
    """M5 (Algorithm 5): client i combines the broadcast signal ``(agg, total)`` = (agg_{k*},
    sum_{k*}) with its own clipped, un-noised parameters θ_i (as Algorithm 5 writes; step ⑦'s
    noisy θ̂_i is read as θ_i) and data size d_i:

    * ``"add"`` (default, the paper's formula): θ_i ← (agg + d_i θ_i)/(sum + d_i). For i = k*
      this is the exact weighted average of all m clients with i's true vector; for i in the
      chosen group i counts twice (noisy inside agg, true outside).
    * ``"replace"``: for a ``member`` of the chosen group, θ_i ← (agg − d_i θ̂_i + d_i θ_i)/sum
      with θ̂_i = ``upload`` (its own M3 output); for a non-member the same as ``"add"``.

    Both read only the public signal (and, for ``replace``, whether i is in the chosen group) and
    client i's own data — all the billboard lemma (Lemma 1) needs. Computed in float64, returned
    in θ_i's dtype. The next round's local training starts from the result (Algorithm 5 line 3),
    not from a downloaded global model.
    """
    if theta.ndim != 1:
        raise ValueError(f"theta: must be a flat (1-D) parameter vector, got shape {tuple(theta.shape)}")
    if agg.shape != theta.shape:
        raise ValueError(f"agg: must have theta's shape {tuple(theta.shape)}, got {tuple(agg.shape)}")
    s = _check_weight("total", total)
    d = _check_weight("n_examples", n_examples)
    a = agg.to(torch.float64)
    own = theta.to(torch.float64)
    if self_weighting == "add":
        out = (a + d * own) / (s + d)
    elif self_weighting == "replace":
        if member is None or upload is None:
            raise ValueError("self_weighting 'replace': needs member (is client i in the chosen group?) and upload (its θ̂_i)")
        if not member:
            out = (a + d * own) / (s + d)
        else:
            if upload.shape != theta.shape:
                raise ValueError(f"upload: must have theta's shape {tuple(theta.shape)}, got {tuple(upload.shape)}")
            if s < d:
                raise ValueError(f"total: must be >= n_examples ({d:g}) when client i is a member of the chosen group, got {s:g}")
            out = (a - d * upload.to(torch.float64) + d * own) / s
    else:
        raise ValueError(f"self_weighting: must be 'add' or 'replace', got {self_weighting!r}")
    return out.to(theta.dtype)


def jdp_events(
    mechanism: GaussianMechanism,
    *,
    eps_exp: float,
    accounting: Literal["mechanisms", "paper"] = "mechanisms",
    eps_local: float | None = None,
    delta: float | None = None,
) -> list[tuple[PrivacyEvent, int]]:
    """The events one round charges a winner (Theorem 5, per round), as ``(event, count)`` pairs:

    * ``"mechanisms"``: M3's Gaussian release (``mechanism.event()``: noise multiplier σ/Δ₂f)
      and M4's ``exponential(ε_E)``; the accountants compose them (RDP/zCDP charge the
      exponential mechanism ε_E²/8 by bounded range — tighter than the T ε_E of
      :func:`~fedgame.privacy.analysis.jdp.jdp_rdp_total`).
    * ``"paper"``: ``approx_dp(ε_L, δ)`` and ``approx_dp(ε_E, 0)``, so any accountant reports the
      paper's basic composition (T(ε_L+ε_E), Tδ) at target δ = Tδ (needs ``eps_local``, ``delta``).
    """
    e = _check_weight("eps_exp", eps_exp)
    if accounting == "mechanisms":
        return [(mechanism.event(), 1), (PrivacyEvent.exponential(e), 1)]
    if accounting == "paper":
        if eps_local is None or delta is None:
            raise ValueError("accounting 'paper': needs eps_local (ε_L) and delta (δ of M3)")
        return [(PrivacyEvent.approx_dp(eps_local, delta), 1), (PrivacyEvent.approx_dp(e, 0.0), 1)]
    raise ValueError(f"accounting: must be 'mechanisms' or 'paper', got {accounting!r}")
