"""Social welfare and price of anarchy (FedPCS Sec. VI, Eqs. 30-37, Def. 4, Prop. 4,
Theorem 6). Theorem 6 is exposed only as the paper's expression: step (a) of Eq. 37 does not
follow, and SW^pri turns negative as ρ_H grows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.core.validate import check_positive

__all__ = [
    "SocialOptimum",
    "paper_poa_privacy_aware",
    "paper_theorem6_bound",
    "paper_theorem6_limit",
    "poa_random_lower_bounds",
    "price_of_anarchy",
    "social_optimum",
    "social_welfare",
    "social_welfare_per_round",
    "welfare_privacy_worst",
    "welfare_random_worst",
]

FloatArray = NDArray[np.float64]


def _varphi(varphi: ArrayLike) -> FloatArray:
    v = np.atleast_1d(np.asarray(varphi, dtype=float))
    bad = np.flatnonzero(~((v > 0) & (v < 1)))
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"varphi: expected a non-empty 1-D list, got shape {v.shape}")
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"clients[{i}].varphi: must be in (0, 1), got {v[i]:.6g}")
    return v


def _rewards(R: ArrayLike) -> FloatArray:
    r = np.atleast_1d(np.asarray(R, dtype=float))
    if r.ndim != 1 or np.any(~np.isfinite(r)) or np.any(r < 0):
        raise ValueError("R: expected a list of T+1 rewards >= 0")
    return r


def social_welfare_per_round(rho: ArrayLike, R: ArrayLike, varphi: ArrayLike) -> FloatArray:
    """SW_t = Σ_i [ρ_i^t R_t − ϕ_i (ρ_i^t)²] for t = 0..T (summand of Eq. 30; the paper's
    Fig. 5 plots it per iteration). ``rho`` (n, T+1)."""
    r = np.atleast_2d(np.asarray(rho, dtype=float))
    v = _varphi(varphi)
    Rv = _rewards(R)
    if r.shape != (v.size, Rv.size):
        raise ValueError(f"rho: expected shape ({v.size}, {Rv.size}), got {r.shape}")
    sw: FloatArray = (r * Rv - v[:, None] * r**2).sum(axis=0)
    return sw


def social_welfare(rho: ArrayLike, R: ArrayLike, varphi: ArrayLike) -> float:
    """SW(ρ) = Σ_{t=0}^{T} Σ_i [ρ_i^t R_t − ϕ_i (ρ_i^t)²] (Eq. 30)."""
    return float(social_welfare_per_round(rho, R, varphi).sum())


@dataclass(frozen=True)
class SocialOptimum:
    """Welfare-maximising budgets ``rho`` (n, T+1) and their welfare ``welfare``."""

    rho: FloatArray
    welfare: float


def social_optimum(
    R: ArrayLike, varphi: ArrayLike, *, bounded: bool = False, rho_min: float = 0.01, rho_max: float = 12.0
) -> SocialOptimum:
    """ρ_i^{t,opt} = R_t / (2ϕ_i), SW^opt = ¼ Σ_t R_t² Σ_i 1/ϕ_i (Eqs. 31-32). With
    ``bounded`` the budgets are clipped to [ρ_L, ρ_H] (exact: SW is separable and concave in
    each ρ_i^t)."""
    v = _varphi(varphi)
    Rv = _rewards(R)
    rho = Rv[None, :] / (2.0 * v[:, None])
    if bounded:
        if not 0 < rho_min < rho_max:
            raise ValueError(f"rho_min, rho_max: must satisfy 0 < rho_min < rho_max, got {rho_min!r}, {rho_max!r}")
        rho = np.clip(rho, rho_min, rho_max)
        sw = float((rho * Rv - v[:, None] * rho**2).sum())
    else:
        sw = 0.25 * float(np.sum(Rv**2)) * float(np.sum(1.0 / v))
    rho.setflags(write=False)
    return SocialOptimum(rho, sw)


def welfare_random_worst(R: ArrayLike, varphi: ArrayLike, rho_min: float = 0.01) -> float:
    """SW^rand = N ρ_L Σ_t R_t − (T+1) ρ_L² Σ_i ϕ_i: every budget at ρ_L (Eq. 34)."""
    v, Rv = _varphi(varphi), _rewards(R)
    rl = check_positive("rho_min", rho_min)
    return float(v.size * rl * Rv.sum() - Rv.size * rl**2 * v.sum())


def welfare_privacy_worst(R: ArrayLike, varphi: ArrayLike, rho_max: float = 12.0) -> float:
    """SW^pri = N ρ_H Σ_t R_t − (T+1) ρ_H² Σ_i ϕ_i: every budget at ρ_H (Eq. 36)."""
    v, Rv = _varphi(varphi), _rewards(R)
    rh = check_positive("rho_max", rho_max)
    return float(v.size * rh * Rv.sum() - Rv.size * rh**2 * v.sum())


def price_of_anarchy(
    rho_eq: ArrayLike, R: ArrayLike, varphi: ArrayLike, *, bounded: bool = False, rho_min: float = 0.01, rho_max: float = 12.0
) -> float:
    """PoA = SW^opt / SW(ρ^eq) from an equilibrium trajectory (Def. 4); +inf when
    SW(ρ^eq) ≤ 0 (the paper has no participation constraint, so equilibrium welfare can be
    negative)."""
    sw_eq = social_welfare(rho_eq, R, varphi)
    if sw_eq <= 0:
        return float("inf")
    opt = social_optimum(R, varphi, bounded=bounded, rho_min=rho_min, rho_max=rho_max)
    return opt.welfare / sw_eq


def poa_random_lower_bounds(R: ArrayLike, varphi: ArrayLike, rho_min: float = 0.01) -> tuple[float, float]:
    """Proposition 4 (valid when SW^rand > 0): PoA^rand = SW^opt/SW^rand ≥
    Σ_t R_t² Σ_i (1/ϕ_i) / (4 N ρ_L Σ_t R_t) ≥ Σ_t R_t Σ_i (1/ϕ_i) / (4 N ρ_L (T+1))
    (second step Cauchy–Schwarz). Returns both bounds."""
    v, Rv = _varphi(varphi), _rewards(R)
    rl = check_positive("rho_min", rho_min)
    inv = float(np.sum(1.0 / v))
    b1 = float(np.sum(Rv**2)) * inv / (4.0 * v.size * rl * float(Rv.sum()))
    b2 = float(Rv.sum()) * inv / (4.0 * v.size * rl * Rv.size)
    return b1, b2


def paper_poa_privacy_aware(R: ArrayLike, varphi: ArrayLike, rho_max: float = 12.0) -> float:
    """The paper's PoA^pri = SW^opt / SW^pri as written (Eq. 37), *without* the +inf rule:
    it is negative whenever SW^pri < 0 (e.g. N = 10, T = 0, R_0 = 1, ϕ = 0.5,
    ρ_H = 12 gives 5 / −600). Exposed to document the flaw, not as a PoA."""
    opt = social_optimum(R, varphi)
    return opt.welfare / welfare_privacy_worst(R, varphi, rho_max)


def paper_theorem6_bound(R: ArrayLike, varphi: ArrayLike, rho_max: float = 12.0, R_max: float | None = None) -> float:
    """Theorem 6's claimed bound R_max Σ_i(1/ϕ_i) / (2(N − (T+1) Σ_i ϕ_i / (ρ_H Σ_t R_t))),
    R_max = max_t R_t by default. NOT a valid bound (step (a) of Eq. 37 assumes
    N Σ_t R_t ≤ (T+1) Σ_i ϕ_i); exposed only as the paper's expression."""
    v, Rv = _varphi(varphi), _rewards(R)
    rh = check_positive("rho_max", rho_max)
    rmax = float(Rv.max()) if R_max is None else float(R_max)
    den = 2.0 * (v.size - Rv.size * float(v.sum()) / (rh * float(Rv.sum())))
    return rmax * float(np.sum(1.0 / v)) / den


def paper_theorem6_limit(R: ArrayLike, varphi: ArrayLike, R_max: float | None = None) -> float:
    """The ρ_H → ∞ limit claimed after Theorem 6: (R_max / (2N)) Σ_i 1/ϕ_i (not a bound: SW^pri
    is negative in that limit)."""
    v, Rv = _varphi(varphi), _rewards(R)
    rmax = float(Rv.max()) if R_max is None else float(R_max)
    return rmax * float(np.sum(1.0 / v)) / (2.0 * v.size)
