"""The privacy ledger of JDP-FL's training stage (Zhang et al., TKDE 2023; Algorithms 3-4,
eqs. (6)-(7), Theorem 5): what M3 and M4 cost per round and how the rounds compose.

* **M3** (Algorithm 3, eq. (6)): each winner clips its parameter vector to L2 norm C and adds
  N(0, σ²I); with sensitivity Δ₂f the classic calibration σ = sqrt(2 ln(1.25/δ)) Δ₂f/ε_L makes one
  upload (ε_L, δ)-DP. Δ₂f is not fixed by the paper: ``"record"`` = 2C/d_i (one changed
  record, Wei et al. [11]), ``"client"`` = 2C (the client's whole clipped vector replaced), or a
  number (:func:`m3_sensitivity`).
* **M4** (Algorithm 4, eq. (7)): an exponential mechanism with parameter ε_E and score
  sensitivity Δy. It is ε_E-DP w.r.t. one submission only if Δy bounds the score's change; the
  paper's Δy = 1/(m−1) does not (accuracy can move by 1), so the rigorous parameter of a run
  calibrated with Δy_used is ε_E · Δy_true / Δy_used (:func:`exponential_epsilon`).
* **Theorem 5** (with M3's δ, which the paper drops): one round of (M3, M4, M5) is
  (ε_L + ε_E, δ)-jointly DP (parallel composition over clients for M3, sequential composition
  with M4, billboard lemma for M5) — :func:`jdp_round_guarantee`. The paper gives no
  multi-round result; fedgame reports basic composition ``(T(ε_L+ε_E), Tδ)``
  (:func:`jdp_paper_total`) and, beside it, the Gaussian part by RDP (T Gaussian releases of
  noise multiplier z = σ/Δ₂f, ρ = T/(2z²), converted at the same total δ = Tδ with the plain
  conversion min_α [ρα + ln(1/δ)/(α−1)] = ρ + 2 sqrt(ρ ln(1/δ))) plus T ε_E
  for M4 (:func:`gaussian_rdp_epsilon`, :func:`jdp_rdp_total`).

Note: M4 only sees M3's already-noised uploads and the server's own validation set, so
by post-processing the broadcast signal is already (ε_L, δ)-DP w.r.t. the clients' raw data; the
paper's ε_L + ε_E is a valid, looser bound, and the ε_E term is what limits one *submission's*
influence on the chosen group (the robustness argument).

NumPy only; scalar inputs give floats, array inputs broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedgame.core.validate import FloatArray, check_elementwise, scalar_or_array
from fedgame.privacy.analysis.gaussian import analytic_gaussian_std, classic_gaussian_std
from fedgame.privacy.analysis.zcdp import zcdp_to_eps

__all__ = [
    "SensitivityKind",
    "JDPTotals",
    "m3_sensitivity",
    "m3_noise_std",
    "exponential_epsilon",
    "jdp_round_guarantee",
    "jdp_paper_total",
    "gaussian_rdp_epsilon",
    "jdp_rdp_total",
    "jdp_totals",
]

#: How M3's L2 sensitivity Δ₂f is read (the paper does not fix it): one record of d_i, or the
#: whole client.
SensitivityKind = Literal["record", "client"]


def _positive(name: str, x: ArrayLike) -> FloatArray:
    return check_elementwise(name, x, lambda v: (v > 0) & np.isfinite(v), "> 0 and finite")


def _rounds(rounds: int) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds: must be an integer >= 1, got {rounds!r}")
    return int(rounds)


def _delta(delta: float, name: str = "delta") -> float:
    d = float(delta)
    if not 0 < d < 1:
        raise ValueError(f"{name}: must be in (0, 1), got {delta!r}")
    return d


def _eps(name: str, eps: float, *, allow_zero: bool = False) -> float:
    e = float(eps)
    ok = (e >= 0 if allow_zero else e > 0) and math.isfinite(e)
    if not ok:
        raise ValueError(f"{name}: must be {'>= 0' if allow_zero else '> 0'} and finite, got {eps!r}")
    return e


def m3_sensitivity(kind: SensitivityKind | float, *, clip: ArrayLike, n_examples: ArrayLike | None = None) -> float | FloatArray:
    """Δ₂f of M3 (the paper does not fix it) for a parameter vector clipped to L2 norm C:

    * ``"record"`` (the default) — 2C/d_i: replacing one of client i's d_i records moves
      its trained, clipped parameters by at most 2C/d_i (the convention of Wei et al. [11]);
    * ``"client"`` — 2C: the client's whole clipped vector replaced (Theorem 5's adjacency);
    * a positive number — used as given (``clip`` and ``n_examples`` are then ignored).

    E.g. C = 20, d_i = 2,950: record 0.013559, client 40.
    """
    if isinstance(kind, str):
        c = _positive("clip", clip)
        if kind == "client":
            return scalar_or_array(2.0 * c, clip)
        if kind == "record":
            if n_examples is None:
                raise ValueError("n_examples: required for sensitivity 'record' (Δ₂f = 2C/d_i), got None")
            d = check_elementwise("n_examples", n_examples, lambda v: (v >= 1) & np.isfinite(v), ">= 1 and finite")
            return scalar_or_array(2.0 * c / d, clip, n_examples)
        raise ValueError(f"sensitivity: must be 'record', 'client' or a number > 0, got {kind!r}")
    if isinstance(kind, bool):
        raise ValueError(f"sensitivity: must be 'record', 'client' or a number > 0, got {kind!r}")
    return scalar_or_array(_positive("sensitivity", kind), kind)


def m3_noise_std(
    epsilon: ArrayLike,
    delta: ArrayLike,
    sensitivity: ArrayLike,
    *,
    calibrator: Literal["classic", "analytic"] = "classic",
) -> float | FloatArray:
    """σ of M3 for (ε_L, δ) and Δ₂f. ``"classic"`` (default, paper fidelity): eq. (6) with
    equality, σ = sqrt(2 ln(1.25/δ)) Δ₂f/ε_L (Dwork & Roth Thm A.1: the square root covers
    2 ln(1.25/δ) only, where the printed eq. (6) is garbled; proven for ε_L < 1, a warning is
    logged otherwise); ``"analytic"``: the exact smallest σ (Balle & Wang 2018).
    Reference: ε = 1, δ = 1e-5, Δ = 1 ⇒ σ = 4.844805."""
    if calibrator == "classic":
        return classic_gaussian_std(epsilon, delta, sensitivity)
    if calibrator == "analytic":
        return analytic_gaussian_std(epsilon, delta, sensitivity)
    raise ValueError(f"calibrator: must be 'classic' or 'analytic', got {calibrator!r}")


def exponential_epsilon(epsilon: ArrayLike, *, sensitivity_used: ArrayLike, sensitivity_true: ArrayLike = 1.0) -> float | FloatArray:
    """The privacy parameter an exponential mechanism actually has when it was run with
    parameter ε and score sensitivity Δy_used but the score can change by Δy_true between
    neighbouring inputs: Pr ∝ exp(ε y/(2Δy_used)) = exp(ε' y/(2Δy_true)) with
    ε' = ε Δy_true/Δy_used (McSherry & Talwar 2007). For M4 with the paper's Δy = 1/(m−1) and
    accuracy scores (Δy_true = 1: accuracy on a fixed validation set can move by 1):
    ε' = (m−1) ε_E."""
    e = check_elementwise("epsilon", epsilon, lambda v: (v > 0) & np.isfinite(v), "> 0 and finite")
    used = _positive("sensitivity_used", sensitivity_used)
    true = _positive("sensitivity_true", sensitivity_true)
    return scalar_or_array(e * true / used, epsilon, sensitivity_used, sensitivity_true)


def jdp_round_guarantee(eps_local: float, eps_exp: float, delta: float) -> tuple[float, float]:
    """One round of (M3, M4, M5) is (ε_L + ε_E, δ)-jointly DP (Theorem 5, with the δ of M3 that
    the paper drops): M3 on disjoint clients (parallel composition, Lemma 3), then M4's
    exponential mechanism (sequential composition, Lemma 4), then M5 as a function of the signal
    and the client's own data (billboard lemma, Lemma 1)."""
    return _eps("eps_local", eps_local) + _eps("eps_exp", eps_exp, allow_zero=True), _delta(delta)


def jdp_paper_total(rounds: int, eps_local: float, eps_exp: float, delta: float) -> tuple[float, float]:
    """The "paper" ledger after T rounds: basic composition (Dwork & Roth Thm 3.16) of T rounds
    of :func:`jdp_round_guarantee`, ``(T(ε_L + ε_E), Tδ)`` (the paper gives no multi-round
    result). Requires Tδ < 1."""
    t = _rounds(rounds)
    eps, d = jdp_round_guarantee(eps_local, eps_exp, delta)
    _delta(t * d, "rounds * delta")
    return t * eps, t * d


def gaussian_rdp_epsilon(rounds: int, noise_multiplier: float, delta: float) -> float:
    """ε at ``delta`` of T Gaussian releases of noise multiplier z = σ/Δ₂f (M3 over T rounds) by
    RDP with the plain conversion: the composed RDP curve is ρα with ρ = T/(2z²) (Mironov 2017,
    Prop. 3 and 7), and min_{α>1} [ρα + ln(1/δ)/(α−1)] = ρ + 2 sqrt(ρ ln(1/δ)) (attained at
    α* = 1 + sqrt(ln(1/δ)/ρ); Bun & Steinke 2016 Prop. 1.3). At the paper ledger's total
    δ = Tδ: T = 30, ε_L = 1, δ = 1e-5 (z = 4.844805) gives ≈ 5.19 < 30.
    ``noise_multiplier = 0`` gives inf. (The RDP accountant of :mod:`fedgame.privacy.accountants`
    uses the tighter conversion of Balle et al. 2020.)"""
    t = _rounds(rounds)
    z = float(noise_multiplier)
    if not (z >= 0 and math.isfinite(z)):
        raise ValueError(f"noise_multiplier: must be >= 0 and finite, got {noise_multiplier!r}")
    d = _delta(delta)
    if z == 0.0:
        return math.inf
    return float(zcdp_to_eps(t / (2.0 * z * z), d))


def jdp_rdp_total(rounds: int, noise_multiplier: float, eps_exp: float, delta: float) -> tuple[float, float]:
    """The tighter ledger beside the paper's: M3's T Gaussian releases by RDP at the
    same total δ = Tδ (:func:`gaussian_rdp_epsilon`) plus T ε_E for M4 by basic composition,
    ``(ε_RDP(T, z, Tδ) + T ε_E, Tδ)``."""
    t = _rounds(rounds)
    total_delta = _delta(t * _delta(delta), "rounds * delta")
    e = _eps("eps_exp", eps_exp, allow_zero=True)
    return gaussian_rdp_epsilon(t, noise_multiplier, total_delta) + t * e, total_delta


@dataclass(frozen=True)
class JDPTotals:
    """Both JDP-FL ledgers of one winner after ``rounds`` rounds: the paper's basic
    composition and the RDP figure of the Gaussian part plus T ε_E, each at δ = Tδ."""

    rounds: int
    round_epsilon: float  # ε_L + ε_E (Theorem 5)
    round_delta: float
    paper_epsilon: float  # T(ε_L + ε_E)
    total_delta: float  # Tδ
    gaussian_rdp_epsilon: float  # M3 part alone, by RDP at Tδ
    rdp_epsilon: float  # gaussian_rdp_epsilon + T ε_E


def jdp_totals(rounds: int, *, eps_local: float, eps_exp: float, delta: float, noise_multiplier: float) -> JDPTotals:
    """:func:`jdp_paper_total` and :func:`jdp_rdp_total` in one record, for reports and logs.
    ``noise_multiplier`` is σ/Δ₂f of M3 (for the classic calibration sqrt(2 ln(1.25/δ))/ε_L)."""
    t = _rounds(rounds)
    r_eps, r_delta = jdp_round_guarantee(eps_local, eps_exp, delta)
    p_eps, total_delta = jdp_paper_total(t, eps_local, eps_exp, delta)
    g = gaussian_rdp_epsilon(t, noise_multiplier, total_delta)
    return JDPTotals(
        rounds=t,
        round_epsilon=r_eps,
        round_delta=r_delta,
        paper_epsilon=p_eps,
        total_delta=total_delta,
        gaussian_rdp_epsilon=g,
        rdp_epsilon=g + t * float(eps_exp),
    )
