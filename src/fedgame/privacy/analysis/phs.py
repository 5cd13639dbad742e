"""Noise calibration of the PHS paper (privacy-heterogeneous client selection for DP-FedAvg),
exactly as written in the paper: Eq. 6–7 with Lemmas 1–2.

* Lemma 1 (inverse amplification by subsampling, Balle, Barthe & Gaboardi 2018): if M is
  (log(1 + (e^ε − 1)/r), δ/r)-DP, M on an r-subsample is (ε, δ)-DP.
* Lemma 2 (Gaussian under k-fold composition, Kairouz, Oh & Viswanath 2015): a query of L2
  sensitivity S answered k times with noise variance 8 k S² log(e + ε/δ)/ε² is (ε, δ)-DP.

The paper composes first and amplifies second, with per-step sensitivity S = C/(r|M|)::

    ε' = log(1 + (e^ε − 1)/r),   δ' = δ/r
    V  = 8 log(e + r ε'/δ) / (|M|² r² ε'²)                       (Eq. 7)
    σ² = V · k · C²,  k = T_k T^l                                  (Eq. 6)
    z  = σ B/C = sqrt(8 k log(e + ε'/δ')) / ε'                     (B = r|M|)

This is neither RDP nor PLD accounting and it is not what those certify (the paper amplifies the
composed mechanism); it is kept for reproduction. :mod:`fedgame.privacy.analysis.subsampled`
gives the tight per-step Poisson-subsampled accounting.

``eps = inf`` (public data, PHS §V-B) gives ε' = inf, V = 0, σ = 0, z = 0. All calibration
functions are vectorised; :func:`phs_epsilon_spent` (the paper's forward map) too, element-wise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq

from fedgame.core.validate import FloatArray, check_elementwise, scalar_or_array

__all__ = [
    "phs_epsilon_prime",
    "phs_V",
    "phs_sigma",
    "phs_noise_multiplier",
    "phs_epsilon_spent",
]


def _eps(eps: ArrayLike) -> FloatArray:
    return check_elementwise("eps", eps, lambda x: x > 0, "> 0 (inf allowed for public data)")


def _r(r: ArrayLike) -> FloatArray:
    return check_elementwise("r", r, lambda x: (x > 0) & (x <= 1), "in (0, 1]")


def _delta_r(delta: ArrayLike, r: FloatArray) -> FloatArray:
    d = check_elementwise("delta", delta, lambda x: x > 0, "> 0")
    ratio = np.broadcast_to(d / r, np.broadcast(d, r).shape)
    if np.any(ratio > 1):
        bad = float(np.ravel(ratio[ratio > 1])[0])
        raise ValueError(f"delta: must satisfy delta/r <= 1 (Lemma 1 needs delta' = delta/r <= 1), got delta/r = {bad:g}")
    return d


def _epsilon_prime(e: FloatArray, r: FloatArray) -> FloatArray:
    """log(1 + (e^ε − 1)/r), stable for small ε (log1p/expm1) and large ε (no overflow)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        small = np.log1p(np.expm1(np.minimum(e, 30.0)) / r)
        # 1 + (e^ε − 1)/r = e^ε/r · (1 − (1 − r) e^{−ε})
        large = e - np.log(r) + np.log1p(-(1.0 - r) * np.exp(-e))
    return np.asarray(np.where(e < 30.0, small, large), dtype=np.float64)


def phs_epsilon_prime(eps: ArrayLike, r: ArrayLike) -> float | FloatArray:
    """ε' = log(1 + (e^ε − 1)/r): the per-mechanism ε that Lemma 1 amplifies to ε on an
    r-subsample (PHS Lemma 1)."""
    e = _eps(eps)
    rr = _r(r)
    return scalar_or_array(_epsilon_prime(e, rr), eps, r)


def _V(e: FloatArray, d: FloatArray, rr: FloatArray, n: FloatArray) -> FloatArray:
    ep = _epsilon_prime(e, rr)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        v = 8.0 * np.log(np.e + rr * ep / d) / (n * n * rr * rr * ep * ep)
    return np.asarray(np.where(np.isinf(e), 0.0, v), dtype=np.float64)


def phs_V(eps: ArrayLike, delta: ArrayLike, r: ArrayLike, n_samples: ArrayLike) -> float | FloatArray:
    """V = 8 log(e + r ε'/δ) / (|M|² r² ε'²), the noise variance per step and per unit C² (PHS
    Eq. 7); ``eps = inf`` gives 0. Errors for ε ≤ 0, δ ≤ 0, δ/r > 1, r ∉ (0, 1], |M| < 1."""
    e = _eps(eps)
    rr = _r(r)
    d = _delta_r(delta, rr)
    n = check_elementwise("n_samples", n_samples, lambda x: (x >= 1) & np.isfinite(x), ">= 1")
    return scalar_or_array(_V(e, d, rr, n), eps, delta, r, n_samples)


def phs_sigma(
    eps: ArrayLike, delta: ArrayLike, r: ArrayLike, n_samples: ArrayLike, steps: ArrayLike, clip: ArrayLike
) -> float | FloatArray:
    """σ = sqrt(V · k) · C with k = T_k T^l local steps in the run (PHS Eq. 6, σ_k² = V_k T_k T^l C²):
    the std of the noise added to the *mean* clipped gradient (fixed denominator B = r|M|) at every
    step."""
    e = _eps(eps)
    rr = _r(r)
    d = _delta_r(delta, rr)
    n = check_elementwise("n_samples", n_samples, lambda x: (x >= 1) & np.isfinite(x), ">= 1")
    k = check_elementwise("steps", steps, lambda x: (x >= 1) & np.isfinite(x), ">= 1")
    c = check_elementwise("clip", clip, lambda x: (x > 0) & np.isfinite(x), "> 0 and finite")
    out = np.sqrt(_V(e, d, rr, n) * k) * c
    return scalar_or_array(out, eps, delta, r, n_samples, steps, clip)


def phs_noise_multiplier(eps: ArrayLike, delta: ArrayLike, r: ArrayLike, steps: ArrayLike) -> float | FloatArray:
    """z = σ B / C = sqrt(8 k log(e + ε'/δ')) / ε' with ε', δ' of Lemma 1 (PHS Eq. 6–7 as a noise
    multiplier on the clipped-gradient *sum*; independent of |M|). ``eps = inf`` gives 0."""
    e = _eps(eps)
    rr = _r(r)
    d = _delta_r(delta, rr)
    k = check_elementwise("steps", steps, lambda x: (x >= 1) & np.isfinite(x), ">= 1")
    ep = _epsilon_prime(e, rr)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        z = np.sqrt(8.0 * k * np.log(np.e + rr * ep / d)) / ep
    z = np.where(np.isinf(e), 0.0, z)
    return scalar_or_array(np.asarray(z, dtype=np.float64), eps, delta, r, steps)


def _epsilon_spent_scalar(z: float, k: float, r: float, delta: float) -> float:
    if z == 0.0:
        return math.inf
    if math.isinf(z):
        return 0.0
    c = r / delta

    def g(x: float) -> float:  # convex in x, g(0) = −8k < 0
        return z * z * x * x - 8.0 * k * math.log(math.e + c * x)

    hi = 1.0
    while g(hi) <= 0.0:
        hi *= 2.0
    x = float(brentq(g, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    # ε = log(1 + r (e^{ε'} − 1)), stable both ways
    if x < 30.0:
        return math.log1p(r * math.expm1(x))
    return x + math.log(r) + math.log1p((1.0 - r) / r * math.exp(-x))


def phs_epsilon_spent(z: ArrayLike, steps: ArrayLike, r: ArrayLike, delta: ArrayLike) -> float | FloatArray:
    """The paper's accountant, forward map (Eqs. 6-7 inverted): ε' is the unique positive root of
    z² ε'² = 8 k log(e + r ε'/δ) (Lemma 2 solved for ε'), and ε = log(1 + r(e^{ε'} − 1))
    (Lemma 1). Exact inverse of :func:`phs_noise_multiplier`. ``z = 0`` gives ``inf``."""
    zz = check_elementwise("z", z, lambda x: x >= 0, ">= 0")
    k = check_elementwise("steps", steps, lambda x: (x >= 1) & np.isfinite(x), ">= 1")
    rr = _r(r)
    d = _delta_r(delta, rr)
    zb, kb, rb, db = np.broadcast_arrays(zz, k, rr, d)
    out = np.empty(zb.shape, dtype=np.float64)
    for idx in np.ndindex(zb.shape):
        out[idx] = _epsilon_spent_scalar(float(zb[idx]), float(kb[idx]), float(rb[idx]), float(db[idx]))
    return scalar_or_array(out, z, steps, r, delta)
