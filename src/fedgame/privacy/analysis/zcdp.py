"""Zero-concentrated differential privacy (zCDP) of the Gaussian mechanism and its conversion
to (ε, δ)-DP.

References
----------
* Bun & Steinke, "Concentrated Differential Privacy: Simplifications, Extensions, and Lower
  Bounds", TCC 2016 — Prop. 1.6 (Gaussian mechanism is Δ²/(2σ²)-zCDP), Lemma 2.3 (composition:
  ρ adds up), Prop. 1.3 (ρ-zCDP ⇒ (ρ + 2 sqrt(ρ ln(1/δ)), δ)-DP).
* FedPCS Prop. 1 / Eq. 46 and QI-DPFL Corollary 1 / Eq. 10: per-round Gaussian noise
  σ_i = sqrt(2)·W / (|D_i| sqrt(ρ_i)) for an average of |D_i| vectors clipped to norm W
  (replace-one sensitivity Δ_i = 2W/|D_i|).

All functions are vectorised: array arguments broadcast, scalar arguments give a ``float``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fedgame.core.validate import FloatArray, check_elementwise, scalar_or_array

__all__ = [
    "gaussian_std_for_zcdp",
    "zcdp_of_gaussian",
    "zcdp_to_eps",
    "eps_to_zcdp",
    "fedpcs_sensitivity",
    "fedpcs_noise_std",
]


def _delta(delta: ArrayLike) -> FloatArray:
    return check_elementwise("delta", delta, lambda d: (d > 0) & (d < 1), "in (0, 1)")


def gaussian_std_for_zcdp(rho: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """σ = Δ / sqrt(2ρ): the Gaussian noise std that makes a query of L2 sensitivity Δ ρ-zCDP
    (Bun & Steinke 2016, Prop. 1.6; FedPCS Prop. 1; QI-DPFL Eq. 10).

    ``rho = 0`` gives ``inf`` (no release is possible at zero budget); ``rho = inf`` gives 0.
    """
    r = check_elementwise("rho", rho, lambda x: x >= 0, ">= 0")
    s = check_elementwise("sensitivity", sensitivity, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")
    with np.errstate(divide="ignore"):
        out = s / np.sqrt(2.0 * r)
    return scalar_or_array(out, rho, sensitivity)


def zcdp_of_gaussian(std: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """ρ = Δ² / (2σ²): the zCDP of adding N(0, σ²I) to a query of L2 sensitivity Δ
    (Bun & Steinke 2016, Prop. 1.6). ``std = 0`` gives ``inf`` (no privacy)."""
    sd = check_elementwise("std", std, lambda x: x >= 0, ">= 0")
    s = check_elementwise("sensitivity", sensitivity, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")
    with np.errstate(divide="ignore"):
        out = s * s / (2.0 * sd * sd)
    return scalar_or_array(out, std, sensitivity)


def zcdp_to_eps(rho: ArrayLike, delta: ArrayLike) -> float | FloatArray:
    """ε(ρ, δ) = ρ + 2 sqrt(ρ ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3; used for FedPCS and QI-DPFL,
    whose papers never convert ρ to ε).

    Equals min over a > 1 of [ρa + ln(1/δ)/(a − 1)], attained at a* = 1 + sqrt(ln(1/δ)/ρ).
    ``rho = inf`` gives ``inf``.
    """
    r = check_elementwise("rho", rho, lambda x: x >= 0, ">= 0")
    d = _delta(delta)
    out = r + 2.0 * np.sqrt(r * -np.log(d))
    return scalar_or_array(out, rho, delta)


def eps_to_zcdp(eps: ArrayLike, delta: ArrayLike) -> float | FloatArray:
    """The largest ρ with ``zcdp_to_eps(ρ, δ) <= ε``: the inverse of Bun & Steinke Prop. 1.3,
    ρ = (sqrt(L + ε) − sqrt(L))² with L = ln(1/δ), evaluated as ε² / (sqrt(L + ε) + sqrt(L))²
    to avoid cancellation for small ε."""
    e = check_elementwise("eps", eps, lambda x: x >= 0, ">= 0")
    d = _delta(delta)
    L = -np.log(d)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isinf(e), np.inf, e * e / (np.sqrt(L + e) + np.sqrt(L)) ** 2)
    return scalar_or_array(np.asarray(out, dtype=np.float64), eps, delta)


def fedpcs_sensitivity(clip: ArrayLike, n_samples: ArrayLike) -> float | FloatArray:
    """Δ_i = 2W/|D_i|: replace-one L2 sensitivity of an average of |D_i| vectors clipped to
    norm W (FedPCS Eq. 46; QI-DPFL Corollary 1)."""
    w = check_elementwise("clip", clip, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")
    n = check_elementwise("n_samples", n_samples, lambda x: x >= 1, ">= 1")
    return scalar_or_array(2.0 * w / n, clip, n_samples)


def fedpcs_noise_std(rho: ArrayLike, clip: ArrayLike, n_samples: ArrayLike) -> float | FloatArray:
    """σ_i = sqrt(2)·W / (|D_i| sqrt(ρ_i)) (FedPCS Prop. 1 / Eq. 46; QI-DPFL Eq. 10).

    Identical to ``gaussian_std_for_zcdp(rho, 2·clip/n_samples)``; ``rho = 0`` gives ``inf``.
    """
    r = check_elementwise("rho", rho, lambda x: x >= 0, ">= 0")
    w = check_elementwise("clip", clip, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")
    n = check_elementwise("n_samples", n_samples, lambda x: x >= 1, ">= 1")
    with np.errstate(divide="ignore"):
        out = np.sqrt(2.0) * w / (n * np.sqrt(r))
    return scalar_or_array(out, rho, clip, n_samples)
