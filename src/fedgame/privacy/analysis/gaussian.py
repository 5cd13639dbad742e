"""(ε, δ) calibration of the Gaussian mechanism: the classic bound and the exact analytic one.

References
----------
* Dwork & Roth, "The Algorithmic Foundations of Differential Privacy", 2014, Theorem A.1:
  σ ≥ sqrt(2 ln(1.25/δ)) Δ/ε gives (ε, δ)-DP for ε ∈ (0, 1). JDP-FL Eq. 6 uses it with equality
  (M3); reference value ε = 1, δ = 1e-5, Δ = 1 ⇒ σ = 4.844805.
* Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical
  Calibration and Optimal Denoising", ICML 2018, Theorem 8: N(0, σ²) added to a query of L2
  sensitivity Δ is (ε, δ)-DP iff
      Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ,
  exact for every ε > 0 (their Algorithm 1 solves it; we solve it with Brent's method).

All functions are vectorised over their arguments; scalar inputs give a ``float``.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import log_ndtr

from fedgame.privacy.analysis._checks import FloatArray, check, scalar_or_array

__all__ = ["classic_gaussian_std", "analytic_gaussian_std", "gaussian_delta"]

log = logging.getLogger(__name__)


def _eps(eps: ArrayLike, *, allow_zero: bool = False) -> FloatArray:
    if allow_zero:
        return check("eps", eps, lambda x: x >= 0, ">= 0")
    return check("eps", eps, lambda x: x > 0, "> 0")


def _delta(delta: ArrayLike) -> FloatArray:
    return check("delta", delta, lambda d: (d > 0) & (d < 1), "in (0, 1)")


def _sensitivity(sensitivity: ArrayLike) -> FloatArray:
    return check("sensitivity", sensitivity, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")


def classic_gaussian_std(eps: ArrayLike, delta: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """σ = sqrt(2 ln(1.25/δ)) · Δ / ε (Dwork & Roth 2014, Thm A.1; JDP-FL Eq. 6 with equality).

    The theorem is proven only for ε < 1; larger ε still returns the formula (paper fidelity)
    but logs a warning — use :func:`analytic_gaussian_std` for an exact calibration.
    """
    e = _eps(eps)
    d = _delta(delta)
    s = _sensitivity(sensitivity)
    if np.any(e >= 1):
        log.warning(
            "classic Gaussian calibration is proven only for eps < 1, got eps = %s; "
            "the (eps, delta) guarantee is not certified (use the analytic calibrator)",
            np.max(e),
        )
    out = np.sqrt(2.0 * np.log(1.25 / d)) * s / e
    return scalar_or_array(out, eps, delta, sensitivity)


def _log_delta_of_mu(mu: float, eps: float) -> float:
    """log δ(μ) for the Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018, Thm 8), computed in
    log space: δ = Φ(a) (1 − exp(ε + log Φ(b) − log Φ(a))), a = μ/2 − ε/μ, b = −μ/2 − ε/μ."""
    if mu == 0.0:
        return -math.inf
    if math.isinf(mu):
        return 0.0
    a = mu / 2.0 - eps / mu
    b = -mu / 2.0 - eps / mu
    la = float(log_ndtr(a))
    lb = float(log_ndtr(b))
    x = eps + lb - la  # <= 0
    if x >= 0.0:  # only through rounding when δ underflows
        return -math.inf
    return la + math.log(-math.expm1(x))


def _gaussian_delta_scalar(eps: float, std: float, sensitivity: float) -> float:
    if std == 0.0:
        return 1.0
    return math.exp(_log_delta_of_mu(sensitivity / std, eps))


def gaussian_delta(eps: ArrayLike, std: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """The smallest δ for which N(0, σ²) on a query of L2 sensitivity Δ is (ε, δ)-DP:
    δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) (Balle & Wang 2018, Theorem 8).
    ``std = 0`` gives δ = 1."""
    e = _eps(eps, allow_zero=True)
    sd = check("std", std, lambda x: x >= 0, ">= 0")
    s = _sensitivity(sensitivity)
    e_b, sd_b, s_b = np.broadcast_arrays(e, sd, s)
    flat = zip(e_b.ravel(), sd_b.ravel(), s_b.ravel(), strict=True)
    out = np.array([_gaussian_delta_scalar(float(a), float(b), float(c)) for a, b, c in flat], dtype=np.float64)
    out = out.reshape(e_b.shape)
    return scalar_or_array(out, eps, std, sensitivity)


def _analytic_mu(eps: float, delta: float) -> float:
    """The largest μ = Δ/σ with δ(μ) ≤ delta, by Brent's method on log δ(μ) − log delta."""
    if math.isinf(eps):
        return math.inf
    target = math.log(delta)

    def f(mu: float) -> float:
        return _log_delta_of_mu(mu, eps) - target

    if f(1.0) < 0.0:
        hi = 2.0
        while f(hi) < 0.0:  # δ(μ) → 1 as μ → ∞, so this ends for delta < 1
            hi *= 2.0
        lo = hi / 2.0
    else:
        lo = 0.5
        while f(lo) >= 0.0:  # δ(μ) → 0 as μ → 0
            lo /= 2.0
        hi = 2.0 * lo
    mu = float(brentq(f, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    # δ(μ) is increasing: step down until the condition holds exactly (not just within xtol).
    while f(mu) > 0.0:
        mu = math.nextafter(mu, 0.0)
    return mu


def analytic_gaussian_std(eps: ArrayLike, delta: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """The smallest σ for which N(0, σ²) on a query of L2 sensitivity Δ is (ε, δ)-DP, exact for
    every ε > 0 (Balle & Wang 2018, Theorem 8 and Algorithm 1; JDP-FL §3.4 ``calibrator=analytic``).

    Solves Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) = δ with Brent's method in μ = Δ/σ (the
    condition depends on Δ/σ only, so σ = Δ/μ(ε, δ)). ``eps = inf`` gives 0.
    """
    e = _eps(eps)
    d = _delta(delta)
    s = _sensitivity(sensitivity)
    e_b, d_b = np.broadcast_arrays(e, d)
    cache: dict[tuple[float, float], float] = {}
    mus = np.empty(e_b.shape, dtype=np.float64)
    for idx in np.ndindex(e_b.shape):
        key = (float(e_b[idx]), float(d_b[idx]))
        if key not in cache:
            cache[key] = _analytic_mu(*key)
        mus[idx] = cache[key]
    with np.errstate(divide="ignore"):
        out = s / mus
    return scalar_or_array(np.asarray(out, dtype=np.float64), eps, delta, sensitivity)
