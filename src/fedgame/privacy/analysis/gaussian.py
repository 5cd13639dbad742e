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
  exact for every ε > 0 (dp-accounting's ``get_sigma_gaussian`` solves it; we then make sure the
  condition holds exactly, not just to the root finder's tolerance).

All functions are vectorised over their arguments; scalar inputs give a ``float``.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr

from fedgame.core.validate import FloatArray, check_elementwise, scalar_or_array

__all__ = ["classic_gaussian_std", "analytic_gaussian_std", "gaussian_delta"]

log = logging.getLogger(__name__)


def _eps(eps: ArrayLike, *, allow_zero: bool = False) -> FloatArray:
    if allow_zero:
        return check_elementwise("eps", eps, lambda x: x >= 0, ">= 0")
    return check_elementwise("eps", eps, lambda x: x > 0, "> 0")


def _delta(delta: ArrayLike) -> FloatArray:
    return check_elementwise("delta", delta, lambda d: (d > 0) & (d < 1), "in (0, 1)")


def _sensitivity(sensitivity: ArrayLike) -> FloatArray:
    return check_elementwise("sensitivity", sensitivity, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")


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
    sd = check_elementwise("std", std, lambda x: x >= 0, ">= 0")
    s = _sensitivity(sensitivity)
    e_b, sd_b, s_b = np.broadcast_arrays(e, sd, s)
    flat = zip(e_b.ravel(), sd_b.ravel(), s_b.ravel(), strict=True)
    out = np.array([_gaussian_delta_scalar(float(a), float(b), float(c)) for a, b, c in flat], dtype=np.float64)
    out = out.reshape(e_b.shape)
    return scalar_or_array(out, eps, std, sensitivity)


def _analytic_mu(eps: float, delta: float) -> float:
    """The largest μ = Δ/σ with δ(μ) ≤ delta: σ for Δ = 1 from dp-accounting's exact Gaussian
    calibration (``dp_accounting.gaussian_mechanism.get_sigma_gaussian``, Balle & Wang 2018,
    solved to machine precision), then raised by ulps until δ(σ) ≤ delta holds exactly (a root
    found to rounding may sit on either side of it)."""
    if math.isinf(eps):
        return math.inf
    # imported here: dp-accounting's package import costs about 2 s of CPU (SciPy's stats and
    # signal modules), paid otherwise by every process that imports fedgame.privacy, such as
    # each Flower ClientApp process (one per message), which never calibrates
    from dp_accounting.gaussian_mechanism import get_sigma_gaussian

    sigma = float(get_sigma_gaussian(eps, delta, tol=1e-300))
    target = math.log(delta)
    while _log_delta_of_mu(1.0 / sigma, eps) > target:
        sigma = math.nextafter(sigma, math.inf)
    return 1.0 / sigma


def analytic_gaussian_std(eps: ArrayLike, delta: ArrayLike, sensitivity: ArrayLike) -> float | FloatArray:
    """The smallest σ for which N(0, σ²) on a query of L2 sensitivity Δ is (ε, δ)-DP, exact for
    every ε > 0 (Balle & Wang 2018, Theorem 8 and Algorithm 1; JDP-FL M3's
    ``calibrator=analytic``).

    Solves Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) = δ for Δ = 1 with dp-accounting's
    calibration and scales by Δ (the condition depends on Δ/σ only). ``eps = inf`` gives 0.
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
