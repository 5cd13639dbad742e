"""Adaptive sampling ratio under a per-round privacy budget (FedPCS Sec. VII, Eqs. 38-45,
Theorem 7, Algorithm 3). Theorem 7's closed form is read as the minimiser of the server's
cost with the budget binding (K = B_t/ρ): Eq. 44 as printed cannot hold with v, ρ > 0, while
the closed form is exactly that minimiser."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize_scalar

from fedgame.core.validate import (
    as_rounds,
    check_horizon,
    check_positive,
    check_unit_open,
)

__all__ = [
    "AdaptiveSchedule",
    "Theorem7Result",
    "adaptive_k",
    "adaptive_schedule",
    "budget_binding_cost",
    "linear_budget",
    "theorem7",
]

FloatArray = NDArray[np.float64]


def _check_n(N: object) -> int:
    if isinstance(N, bool) or not isinstance(N, int | np.integer) or N < 1:
        raise ValueError(f"N: must be an integer >= 1, got {N!r}")
    return int(N)


def budget_binding_cost(R: float, G: float, H: float, v: float, gamma: float, budget: float) -> float:
    """C(R) = B [v/(G R + H)² + (1−γ) R]: the cost K [v/ρ + (1−γ) R ρ] with the budget
    binding, K = B/ρ, ρ = G R + H (the reading of Theorem 7 used here)."""
    rho = G * R + H
    return budget * (v / rho**2 + (1.0 - gamma) * R)


def adaptive_k(budget: float, rho_star: float, N: int, *, strict: bool = True) -> int:
    """K_t = clip(floor(B_t / ρ_t*), 1, N) (Eq. 41, "[·]" read as floor), so that
    K_t ρ_t* ≤ B_t. A budget below one client's ρ* cannot pay for any client: ValueError
    (``strict``) or K_t = 1 (the clip rule, budget exceeded)."""
    B = check_positive("budget", budget)
    r = check_positive("rho_star", rho_star)
    N = _check_n(N)
    if B < r:
        if strict:
            raise ValueError(f"budget: must be >= rho* = {r:.6g} (the budget of one sampled client), got {B:.6g}")
        return 1
    k = math.floor(B / r)
    while k > 1 and k * r > B:  # guard against rounding up in B / r
        k -= 1
    return int(min(max(k, 1), N))


@dataclass(frozen=True)
class Theorem7Result:
    """Optimal reward and sampling for one round: ``rho_star`` ρ_t*, ``R_star`` R_t*,
    ``K`` (integer, = N when the budget is ``slack``), ``K_continuous`` = B_t/ρ_t*,
    ``tau`` = K/N, ``corner``: ρ* < H so R* = 0 and ρ* := H; ``capped``: the closed form
    exceeded ``rho_max`` (or fell below ``rho_min``) and ρ* was held at that bound."""

    rho_star: float
    R_star: float
    K: int
    K_continuous: float
    tau: float
    corner: bool
    slack: bool
    capped: bool = False


def theorem7(
    G: float,
    H: float,
    v: float,
    gamma: float,
    budget: float,
    N: int,
    *,
    R_max: float = 100.0,
    rho_max: float | None = None,
    rho_min: float | None = None,
    strict: bool = True,
) -> Theorem7Result:
    """Theorem 7 (homogeneous clients, read with the budget binding, K = B_t/ρ):

        ρ_t* = (2 G v / (1−γ))^{1/3},  R_t* = (ρ_t* − H)/G,  K_t* = B_t/ρ_t*     (40)-(41)

    — the exact minimiser of :func:`budget_binding_cost`. Corner: ρ_t* < H ⇒ R_t* = 0,
    ρ_t* := H. K_t = :func:`adaptive_k`. If B_t/ρ_t* ≥ N the budget is slack: K_t = N and
    R_t minimises N [v/(GR+H) + (1−γ) R (GR+H)] subject to N (G R + H) ≤ B_t (and
    G R + H ≤ ``rho_max`` if given), R ∈ [0, R_max] (the fixed-K Lemma-2 problem).

    ``rho_max``/``rho_min`` (if given) keep ρ_t* in [ρ_L, ρ_H] (no client can spend more
    than ρ_H per round): the binding cost C(R) is convex in R (C'' =
    6vG²B/ρ⁴ > 0), so a closed form beyond ρ_H is replaced by ρ* = ρ_H, R* = (ρ_H − H)/G,
    the constrained minimiser (``capped``)."""
    G = check_positive("G", G, strict=False)
    # H is an intercept of the linearised response ρ = G R + H; averaged over clients it can
    # be <= 0 (the linearisation extrapolates below zero), which is fine while G > 0.
    H = float(H)
    if not np.isfinite(H) or (H <= 0 and G == 0):
        raise ValueError(f"H: must be finite, and > 0 when G = 0, got {H!r}")
    v = check_positive("v", v)
    gm = check_unit_open("gamma", gamma)
    B = check_positive("budget", budget)
    N = _check_n(N)
    rho = (2.0 * G * v / (1.0 - gm)) ** (1.0 / 3.0)
    capped = False
    if rho_max is not None and rho > rho_max:
        rho, capped = float(rho_max), True
    if rho_min is not None and rho < rho_min:
        rho, capped = float(rho_min), True
    corner = not rho > H
    if corner:
        rho, R = H, 0.0
    else:
        R = (rho - H) / G
    k_cont = B / rho
    if k_cont >= N:
        hi = R_max
        if G > 0:
            hi = min(hi, (B / N - H) / G)
            if rho_max is not None:
                hi = min(hi, (rho_max - H) / G)
        # budgets must stay positive: R >= lo keeps ρ = G R + H > 0 when H <= 0
        lo = 0.0 if H > 0 else (-H / G) * (1.0 + 1e-9) + 1e-12 if G > 0 else 0.0
        if G <= 0 or hi <= lo:
            R = lo
        else:

            def f(x: float) -> float:
                r = G * x + H
                return v / r + (1.0 - gm) * x * r

            res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
            cands = [lo, hi, float(res.x)]
            R = cands[int(np.argmin([f(c) for c in cands]))]
        return Theorem7Result(G * R + H, R, N, k_cont, 1.0, corner, True, capped)
    K = adaptive_k(B, rho, N, strict=strict)
    return Theorem7Result(rho, R, K, k_cont, K / N, corner, False, capped)


def linear_budget(T: int, start: float = 700.0, end: float = 300.0) -> FloatArray:
    """B_t = B_start − (B_start − B_end) t / T, t = 0..T ("uniform decrements", Sec. VIII;
    Fashion-MNIST 700 → 300, Tiny-ImageNet 700 → 400)."""
    T = check_horizon(T)
    check_positive("start", start)
    check_positive("end", end)
    return start - (start - end) * np.arange(T + 1) / T


@dataclass(frozen=True)
class AdaptiveSchedule:
    """Per-round Algorithm-3 decisions, arrays of shape (T+1,): ``reward``, ``K``, ``tau``,
    ``rho_star``, ``corner``, ``slack``, and the averaged ``G``, ``H``, ``v`` used."""

    reward: FloatArray
    K: NDArray[np.int64]
    tau: FloatArray
    rho_star: FloatArray
    corner: NDArray[np.bool_]
    slack: NDArray[np.bool_]
    G: FloatArray
    H: FloatArray
    v: FloatArray


def adaptive_schedule(
    G: ArrayLike,
    H: ArrayLike,
    P: ArrayLike,
    v: ArrayLike,
    gamma: float,
    budget: ArrayLike,
    *,
    R_max: float = 100.0,
    rho_max: float | None = None,
    rho_min: float | None = None,
) -> AdaptiveSchedule:
    """Theorem 7 for heterogeneous clients (Algorithm 3): per round the population averages
    G^t = Σ_i P_i^t G_i^t / Σ_i P_i^t, H^t likewise, v^t = mean_i v_i^t, then
    :func:`theorem7` with B_t; R_0 := R_1 (R_0 moves no budget). ``G, H, P`` (n, T+1) from
    :func:`affine_response`; ``v`` (T+1,) or (n, T+1); ``budget`` a number or T+1 values."""
    g = np.atleast_2d(np.asarray(G, dtype=float))
    h = np.atleast_2d(np.asarray(H, dtype=float))
    p = np.atleast_2d(np.asarray(P, dtype=float))
    n, T1 = g.shape
    T = check_horizon(T1 - 1)
    vv = np.broadcast_to(np.asarray(v, dtype=float), (n, T1)).mean(axis=0)
    B = as_rounds("budget", budget, T, lower=0.0, strict=True)
    w = p / p.sum(axis=0)
    Gt, Ht = (w * g).sum(axis=0), (w * h).sum(axis=0)
    out = [
        theorem7(float(Gt[t]), float(Ht[t]), float(vv[t]), gamma, float(B[t]), n, R_max=R_max, rho_max=rho_max, rho_min=rho_min)
        for t in range(T1)
    ]
    R = np.array([o.R_star for o in out])
    if T1 > 1:
        R[0] = R[1]
    return AdaptiveSchedule(
        reward=R,
        K=np.array([o.K for o in out], dtype=np.int64),
        tau=np.array([o.tau for o in out]),
        rho_star=np.array([o.rho_star for o in out]),
        corner=np.array([o.corner for o in out]),
        slack=np.array([o.slack for o in out]),
        G=Gt,
        H=Ht,
        v=vv,
    )
