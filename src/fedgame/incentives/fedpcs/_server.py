"""Stage I: the server's cost and reward (FedPCS Sec. IV-B, Lemma 2, Theorem 2, Eqs. 12-13,
22, 57-62). Eq. 13's 1/t is read as 1/(t+1) (rounds start at 0), its sum over "i = 1..K" as
the expectation over the sampler, Σ_i P_i^t(·), and the accuracy term carries a scale κ. Why the
default solver departs from Lemma 2: docs/fedpcs.md, 'The accuracy scale κ and the server's
solve'.

Two server solvers. :func:`stackelberg_true_cost` (the default of :func:`stackelberg`)
minimises the true expected server cost Σ_t U_t(R_t, ρ*[R]) with ρ*[R] the clients'
mean-field equilibrium under the whole reward schedule R. :func:`stackelberg_lemma2` is the
paper's outer loop on the frozen Lemma-2 linearisation (Eqs. 57-62), kept as the paper's
method: it sets G = 0 for clients whose α sits on a bound, so R = 0 can reinforce itself.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize_scalar

from fedgame.core.validate import (
    as_clients,
    as_rounds,
    check_horizon,
    check_population,
    check_positive,
    check_unit_open,
)
from fedgame.incentives.fedpcs import _linalg
from fedgame.incentives.fedpcs._best_response import CoreShare, cores
from fedgame.incentives.fedpcs._dynamics import (
    Inclusion,
    _check_inclusion,
    _split_alpha,
    costate,
    inclusion_probability,
    inclusion_probability_derivative,
)
from fedgame.incentives.fedpcs._mean_field import (
    MeanFieldResult,
    MeanFieldSolverOptions,
    Restarts,
    Update,
    mean_field,
)

__all__ = [
    "AffineResponse",
    "EquilibriumCost",
    "RewardSolution",
    "ServerSolver",
    "StackelbergResult",
    "accuracy_weights",
    "affine_response",
    "equilibrium_cost",
    "optimal_reward",
    "reward_fixed_point",
    "reward_interval",
    "server_cost",
    "stackelberg",
    "stackelberg_lemma2",
    "stackelberg_true_cost",
    "surrogate_cost",
    "surrogate_cost_derivative",
    "surrogate_cost_second_derivative",
]

FloatArray = NDArray[np.float64]
ServerSolver = Literal["true_cost", "lemma2"]

log = logging.getLogger(__name__)


def _ro(x: ArrayLike) -> FloatArray:
    arr = np.array(x, dtype=float, copy=True)
    arr.setflags(write=False)
    return arr


# --------------------------------------------------------------------------------------------
# Server cost (Eqs. 12-13)
# --------------------------------------------------------------------------------------------


def accuracy_weights(T: int, *, gamma: float = 0.5, sizes: ArrayLike | None = None, acc_scale: float = 1.0) -> FloatArray:
    """v^t = γ κ θ_i² / ((t+1) |D_i|²), t = 0..T (Eq. 13 with t → t+1: 1/t is undefined at t = 0).

    θ_i/|D_i| = 1/Σ_j |D_j| for every client, so v^t is the same for all clients:
    γ κ / ((t+1) (Σ_j |D_j|)²); without ``sizes`` the factor θ/|D| is taken as 1, i.e.
    v^t = γ κ/(t+1) (the setting κ = (Σ|D|)²; docs/fedpcs.md, 'The accuracy scale κ and the
    server's solve'). Shape (T+1,)."""
    T = check_horizon(T)
    g = check_unit_open("gamma", gamma)
    k = check_positive("acc_scale", acc_scale)
    scale = 1.0
    if sizes is not None:
        s = np.asarray(sizes, dtype=float)
        if s.ndim != 1 or s.size == 0 or not np.all(s > 0):
            raise ValueError("sizes: expected a non-empty list of dataset sizes > 0")
        scale = 1.0 / float(s.sum()) ** 2
    return cast(FloatArray, g * k * scale / (np.arange(T + 1) + 1.0))


def server_cost(
    rho: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    v: ArrayLike,
    *,
    gamma: float = 0.5,
    phi: ArrayLike | None = None,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """Expected server cost of each round (Eq. 13 with t → t+1, in expectation over the sampler):
    U_t = Σ_i P_i^t [v_i^t / ρ_i^t + (1−γ) R_t ρ_i^t], P_i^t = 1 − (1 − ρ_i^t/(N φ(t)))^K.

    ``rho`` (n, T+1); ``v`` broadcastable to it ((T+1,) or (n, T+1)); ``phi`` defaults to
    the realised average Σ_j ρ_j^t / N (x = ρ/Σρ). ``inclusion="uniform"``: P_i^t is the
    constant 1 − (1 − 1/N)^K of a sampler that ignores ρ. Returns (T+1,)."""
    inclusion = _check_inclusion(inclusion)
    r = np.atleast_2d(np.asarray(rho, dtype=float))
    T = r.shape[1] - 1
    N, K = check_population(N, K)
    g = check_unit_open("gamma", gamma)
    Rv = as_rounds("R", R, T)
    ph = r.sum(axis=0) / N if phi is None else as_rounds("phi", phi, T, strict=True)
    P = inclusion_probability(r, ph, N, K, inclusion=inclusion)
    U: FloatArray = (P * (np.asarray(v, float) / r + (1.0 - g) * Rv * r)).sum(axis=0)
    return U


# --------------------------------------------------------------------------------------------
# Lemma 2: affine response of the equilibrium budgets to R_t (Eqs. 57-58)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AffineResponse:
    """ρ_i^t ≈ G_i^t R_t + H_i^t (Lemma 2), with the inclusion probabilities P_i^t frozen at
    the same iterate; arrays (n, T+1), column 0 is G = 0, H = ρ^0 (ρ^0 is given)."""

    G: FloatArray
    H: FloatArray
    P: FloatArray


def affine_response(
    alpha: ArrayLike,
    rho: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    varphi: ArrayLike,
    N: int,
    K: int,
    *,
    bound_tol: float = 1e-9,
    inclusion: Inclusion = "privacy",
) -> AffineResponse:
    """Lemma 2 coefficients from the current iterate (FedPCS Lemma 2, Appendix D):

        α_i^{t−1} = I R_t + J,  I = (ρ^{t−1} − φ(t−1)) Q^t / (2(1−ϕ)P^{t−1}),
        J = (ρ^{t−1} − φ(t−1)) (M^t + α^t λ(t+1)) / (2(1−ϕ)P^{t−1}),
        G = (ρ^{t−1} − φ(t−1)) I ≥ 0,  H = φ(t−1) + J (ρ^{t−1} − φ(t−1))     (57)-(58)

    with Q = P + ρP', M = −2ϕρP − P'(ϕρ² + (1−ϕ)α²) (Theorem 1's M corrected by the factor
    K/(Nφ) that Eqs. 52 and 54 carry) and λ(T+1) = 0. A client whose α^{t−1} sits on a bound
    (within ``bound_tol``) does not react locally: G = 0, H = ρ^t (its true local response is
    flat). At the iterate G R_t + H reproduces ρ^t exactly. ``inclusion``: the sampling rule
    of P, P' (and λ); with ``"uniform"`` P' = 0, so Q = P and M = −2ϕρP."""
    inclusion = _check_inclusion(inclusion)
    ph = np.asarray(phi, dtype=float)
    T = ph.size - 1
    a_dec, aT, _, _ = _split_alpha(alpha, T)
    n = a_dec.shape[0]
    a = np.zeros((n, T + 1))
    a[:, :T] = a_dec
    a[:, T] = aT
    r = np.asarray(rho, dtype=float).reshape(n, T + 1)
    vp = np.broadcast_to(np.asarray(varphi, dtype=float), (n,))[:, None]
    Rv = np.broadcast_to(np.asarray(R, dtype=float), (T + 1,))
    P = inclusion_probability(r, ph, N, K, inclusion=inclusion)
    dP = inclusion_probability_derivative(r, ph, N, K, inclusion=inclusion)
    Q = P + r * dP
    M = -2.0 * vp * r * P - dP * (vp * r**2 + (1.0 - vp) * a**2)
    lam = costate(a, r[:, 0], vp[:, 0], ph, Rv, N, K, inclusion=inclusion)
    lam_next = np.concatenate([lam[:, 1:], np.zeros((n, 1))], axis=1)  # λ(t+1), λ(T+1) = 0
    G = np.zeros((n, T + 1))
    H = r.copy()
    dev = r[:, :-1] - ph[:-1]  # ρ^{t−1} − φ(t−1), t = 1..T
    den = 2.0 * (1.0 - vp) * P[:, :-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        I_ = dev * Q[:, 1:] / den
        J_ = dev * (M[:, 1:] + a[:, 1:] * lam_next[:, 1:]) / den
    interior = (a[:, :-1] > bound_tol) & (a[:, :-1] < 1.0 - bound_tol) & (den > 0)
    G[:, 1:] = np.where(interior, dev * I_, 0.0)
    H[:, 1:] = np.where(interior, ph[:-1] + J_ * dev, r[:, 1:])
    return AffineResponse(_ro(G), _ro(H), _ro(P))


# --------------------------------------------------------------------------------------------
# Per-round convex surrogate (Eqs. 59-61) and its minimisation
# --------------------------------------------------------------------------------------------


def surrogate_cost(R: float, G: ArrayLike, H: ArrayLike, P: ArrayLike, v: ArrayLike, gamma: float) -> float:
    """Ũ_t(R) = Σ_i P_i [v_i / (G_i R + H_i) + (1−γ) R (G_i R + H_i)] (Eq. 59, with t → t+1
    and in expectation over the sampler, as :func:`server_cost`)."""
    rho = np.asarray(G, float) * R + np.asarray(H, float)
    return float(np.sum(np.asarray(P, float) * (np.asarray(v, float) / rho + (1.0 - gamma) * R * rho)))


def surrogate_cost_derivative(R: float, G: ArrayLike, H: ArrayLike, P: ArrayLike, v: ArrayLike, gamma: float) -> float:
    """dŨ_t/dR = Σ_i P_i [(1−γ)(2 G_i R + H_i) − v_i G_i / (G_i R + H_i)²] (Eq. 60)."""
    g, h = np.asarray(G, float), np.asarray(H, float)
    rho = g * R + h
    return float(np.sum(np.asarray(P, float) * ((1.0 - gamma) * (2.0 * g * R + h) - np.asarray(v, float) * g / rho**2)))


def surrogate_cost_second_derivative(R: float, G: ArrayLike, H: ArrayLike, P: ArrayLike, v: ArrayLike, gamma: float) -> float:
    """d²Ũ_t/dR² = Σ_i P_i [2(1−γ)G_i + 2 v_i G_i² / (G_i R + H_i)³] ≥ 0 (Eq. 61 with the
    exponent corrected from 2 to 3: the surrogate is convex, not "strictly concave" as
    Theorem 2 says while showing d²U/dR² > 0)."""
    g, h = np.asarray(G, float), np.asarray(H, float)
    rho = g * R + h
    return float(np.sum(np.asarray(P, float) * (2.0 * (1.0 - gamma) * g + 2.0 * np.asarray(v, float) * g**2 / rho**3)))


def reward_fixed_point(R: float, G: ArrayLike, H: ArrayLike, P: ArrayLike, v: ArrayLike, gamma: float) -> float:
    """Right-hand side of the fixed-point form (22):
    [Σ_i P_i (v_i G_i/(G_i R + H_i)² − (1−γ) H_i)] / (2(1−γ) Σ_i P_i G_i);
    an interior minimiser R* of Ũ_t satisfies R* = reward_fixed_point(R*, ...)."""
    g, h, p = np.asarray(G, float), np.asarray(H, float), np.asarray(P, float)
    num = np.sum(p * (np.asarray(v, float) * g / (g * R + h) ** 2 - (1.0 - gamma) * h))
    return float(num / (2.0 * (1.0 - gamma) * np.sum(p * g)))


def reward_interval(
    G: ArrayLike, H: ArrayLike, *, rho_min: float = 0.01, rho_max: float = 12.0, R_max: float = 100.0
) -> tuple[float, float]:
    """Feasible rewards {R ∈ [0, R_max] : G_i R + H_i ∈ [ρ_L, ρ_H] ∀i} as (lo, hi)
    (R_hi = min(R_max, min_{G_i > 0} (ρ_H − H_i)/G_i)); lo > hi if empty."""
    g, h = np.asarray(G, float), np.asarray(H, float)
    pos = g > 0
    lo, hi = 0.0, float(R_max)
    if pos.any():
        hi = min(hi, float(np.min((rho_max - h[pos]) / g[pos])))
        lo = max(lo, float(np.max((rho_min - h[pos]) / g[pos])))
    fixed = ~pos
    if fixed.any() and (np.any(h[fixed] < rho_min) or np.any(h[fixed] > rho_max)):
        return 0.0, -1.0
    return lo, hi


@dataclass(frozen=True)
class RewardSolution:
    """Minimiser of the round-t surrogate: ``reward`` in [``lower``, ``upper``],
    ``derivative`` dŨ/dR there, ``at_bound``: "lower", "upper" or "" (interior);
    ``degenerate``: no client reacts (all G = 0) or the feasible interval is empty → R = 0."""

    reward: float
    lower: float
    upper: float
    derivative: float
    at_bound: str
    degenerate: bool


def optimal_reward(
    G: ArrayLike,
    H: ArrayLike,
    P: ArrayLike,
    v: ArrayLike,
    gamma: float,
    *,
    rho_min: float = 0.01,
    rho_max: float = 12.0,
    R_max: float = 100.0,
    xatol: float = 1e-12,
) -> RewardSolution:
    """R_t* = argmin Ũ_t(R) over the feasible interval (:func:`reward_interval`) with
    ``minimize_scalar(method="bounded")``; the end points are compared too, so a minimiser
    on a bound is returned exactly on it. ``G, H, P, v`` are the round's per-client arrays."""
    g = np.asarray(G, float)
    h = np.asarray(H, float)
    p = np.asarray(P, float)
    vv = np.broadcast_to(np.asarray(v, float), g.shape)
    gm = check_unit_open("gamma", gamma)
    lo, hi = reward_interval(g, h, rho_min=rho_min, rho_max=rho_max, R_max=R_max)
    if not np.any(g > 0) or lo > hi:
        return RewardSolution(0.0, 0.0, max(hi, 0.0), 0.0, "lower", True)

    def f(R: float) -> float:
        return surrogate_cost(R, g, h, p, vv, gm)

    def df(R: float) -> float:
        return surrogate_cost_derivative(R, g, h, p, vv, gm)

    cands = [lo, hi]
    if hi > lo:
        res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
        x = float(res.x)
        # Brent's bounded search stops at a relative x-tolerance of ~1.5e-8; polish with
        # safeguarded Newton steps on dŨ/dR (Ũ is convex, G ≥ 0) inside the sign bracket
        a, b = lo, hi
        for _ in range(60):
            d1 = df(x)
            if d1 == 0.0:
                break
            if d1 > 0:
                b = x
            else:
                a = x
            d2 = surrogate_cost_second_derivative(x, g, h, p, vv, gm)
            xn = x - d1 / d2 if d2 > 0 else 0.5 * (a + b)
            if not a < xn < b:
                xn = 0.5 * (a + b)
            if abs(xn - x) <= 4e-16 * max(1.0, abs(x)):
                x = xn
                break
            x = xn
        cands.append(x)
    vals = [f(c) for c in cands]
    R = cands[int(np.argmin(vals))]
    if R not in (lo, hi) and (df(lo) >= 0 or df(hi) <= 0):
        R = lo if df(lo) >= 0 else hi  # monotone on the interval: the minimiser is an end
    where = "lower" if R == lo else "upper" if R == hi else ""
    return RewardSolution(R, lo, hi, surrogate_cost_derivative(R, g, h, p, vv, gm), where, False)


# --------------------------------------------------------------------------------------------
# Outer Stackelberg loop (Algorithm 1 structure)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackelbergResult:
    """Stackelberg equilibrium: ``reward`` R_0..R_T (R_0 := R_1: R_0 moves no budget), the clients'
    ``mean_field`` equilibrium under it, the Lemma-2 coefficients ``G``, ``H`` there (what
    Algorithm 3 linearises), the expected per-round server cost ``cost`` (Eq. 13) and
    ``objective`` = Σ_{t=1}^T cost_t (round 0's budgets ρ^0 are given, so only these rounds
    depend on the schedule), ``outer_iterations`` and ``converged``.

    ``solver``: ``"lemma2"`` (:func:`stackelberg_lemma2`) or ``"true_cost"``
    (:func:`stackelberg_true_cost`). ``reward_residual``: for ``"lemma2"`` max_t |R_new,t −
    R_t| / max(1, R_t) of the last outer iteration; for ``"true_cost"`` the largest relative
    decrease of ``objective`` that any one-round perturbation tried at the returned R gave
    (≤ ``cost_tol`` when converged). ``evaluations``: mean-field solves spent."""

    reward: FloatArray
    mean_field: MeanFieldResult
    G: FloatArray
    H: FloatArray
    cost: FloatArray
    reward_residual: float
    outer_iterations: int
    converged: bool
    solver: str = "lemma2"
    objective: float = float("nan")
    evaluations: int = 0


def stackelberg_lemma2(
    rho0: ArrayLike,
    varphi: ArrayLike,
    K: int,
    T: int,
    *,
    v: ArrayLike,
    gamma: float = 0.5,
    R_init: float = 1.0,
    rho_min: float = 0.01,
    rho_max: float = 12.0,
    R_max: float = 100.0,
    beta_R: float = 0.5,
    tol: float = 1e-6,
    max_outer: int = 100,
    mf_tol: float = 1e-7,
    restarts: Restarts = "final",
    update: Update = "consistent",
    n_starts: int = 8,
    rng: np.random.Generator | int | None = None,
    acceleration: Literal["anderson"] | None = "anderson",
    inclusion: Inclusion = "privacy",
) -> StackelbergResult:
    """The paper's Stackelberg solve on the Lemma-2 surrogate (the structure of Algorithm 1):
    R ≡ ``R_init``; repeat {mean-field fixed point given R (:func:`mean_field`); Lemma-2 G, H;
    R_new,t = argmin Ũ_t (t ≥ 1), R_new,0 = R_new,1; R ← (1−β_R) R + β_R R_new} until
    max_t |R_new,t − R_t| ≤ ``tol``·max(1, R_t) or ``max_outer`` iterations. ``v``: accuracy
    weights, (T+1,) or (n, T+1) (see :func:`accuracy_weights`). Each mean-field solve is
    warm-started from the previous one; ``mf_tol``, ``restarts``, ``update``, ``n_starts``,
    ``rng`` go to :func:`mean_field`, and the sampling rule ``inclusion`` to it, to
    :func:`affine_response` and to :func:`server_cost`.

    Not the default: a client whose α sits on a bound gets G = 0, so once R is small most
    clients stop "reacting" and R = 0 can be a fixed point of this loop although a positive
    reward lowers the true cost (docs/fedpcs.md, 'The accuracy scale κ and the server's
    solve'); :func:`stackelberg_true_cost` solves that."""
    inclusion = _check_inclusion(inclusion)
    r0, vp = as_clients(rho0, varphi)
    T = check_horizon(T)
    N, K = check_population(r0.size, K)
    gm = check_unit_open("gamma", gamma)
    check_positive("R_init", R_init, strict=False)
    if not 0.0 < beta_R <= 1.0:
        raise ValueError(f"beta_R: must be in (0, 1], got {beta_R!r}")
    vv = np.broadcast_to(np.asarray(v, dtype=float), (N, T + 1))
    R = np.full(T + 1, float(R_init))
    mf: MeanFieldResult | None = None
    res = np.inf
    converged = False
    it = 0
    aff: AffineResponse | None = None
    last_side = np.zeros(T + 1, dtype="<U5")
    verify = restarts == "every"
    last_jump = np.zeros(T + 1, dtype=bool)
    xs: list[FloatArray] = []
    fs: list[FloatArray] = []
    if acceleration not in (None, "anderson"):
        raise ValueError(f"acceleration: must be None or 'anderson', got {acceleration!r}")
    for it in range(1, max_outer + 1):
        inner = MeanFieldSolverOptions(tol=mf_tol, restarts=restarts if verify else "none", update=update, n_starts=n_starts)
        mf = mean_field(
            r0,
            vp,
            R,
            K,
            T,
            options=inner,
            rng=rng,
            phi_init=None if mf is None else mf.phi,
            alpha_init=None if mf is None else mf.alpha,
            inclusion=inclusion,
        )
        aff = affine_response(mf.alpha, mf.rho, mf.phi, R, vp, N, K, inclusion=inclusion)
        R_new = R.copy()
        side = np.zeros(T + 1, dtype="<U5")
        for t in range(1, T + 1):
            sol = optimal_reward(aff.G[:, t], aff.H[:, t], aff.P[:, t], vv[:, t], gm, rho_min=rho_min, rho_max=rho_max, R_max=R_max)
            R_new[t], side[t] = sol.reward, sol.at_bound
        R_new[0], side[0] = R_new[1], side[1]
        res = float(np.max(np.abs(R_new - R) / np.maximum(1.0, R)))
        if res <= tol:
            if verify or restarts == "none":
                converged = True
                break
            # converged with the cheap inner solves: verify once with the complete
            # multi-start best responses (a better basin found there moves R on)
            verify = True
            continue
        verify = restarts == "every"
        # Damping steadies interior rewards; a reward whose minimiser sat on the same bound
        # in two successive iterations is moved onto it at once (a corner is a fixed point
        # of the damped map too, reached only geometrically: ~40 halvings from R = 1 to the
        # 1e-6 tolerance, each costing a mean-field solve).
        jump = (side != "") & (side == last_side)
        step = (1.0 - beta_R) * R + beta_R * R_new
        if acceleration == "anderson":
            # Anderson mixing of the damped map (memory 5): near a fixed point whose map has
            # slope close to 1 the damped iteration only creeps (100+ outer iterations on
            # N = 100, T = 9); the mixed step solves the secant model of R_new(R) − R.
            xs.append(R.copy())
            fs.append(R_new - R)
            del xs[:-6], fs[:-6]
            if len(xs) >= 2:
                X, F = np.array(xs), np.array(fs)
                mixed = _linalg.anderson_mix(X, F, beta_R)
                if np.all(np.isfinite(mixed)):
                    step = np.clip(mixed, 0.0, R_max)
        R = np.where(jump, R_new, step)
        if np.any(jump != last_jump):
            xs, fs = [], []  # the map changed shape (a reward moved onto a bound): new memory
        last_side, last_jump = side, jump
    assert mf is not None and aff is not None
    if not converged:
        # the last iteration moved R after its mean-field solve: report the clients'
        # equilibrium (and so the cost) under the R returned, not under the previous one
        final = MeanFieldSolverOptions(tol=mf_tol, restarts=restarts, update=update, n_starts=n_starts)
        mf = mean_field(r0, vp, R, K, T, options=final, rng=rng, phi_init=mf.phi, alpha_init=mf.alpha, inclusion=inclusion)
        aff = affine_response(mf.alpha, mf.rho, mf.phi, R, vp, N, K, inclusion=inclusion)
    cost = server_cost(mf.rho, R, N, K, vv, gamma=gm, phi=mf.phi, inclusion=inclusion)
    return StackelbergResult(
        _ro(R), mf, aff.G, aff.H, _ro(cost), res, it, bool(converged and mf.converged), "lemma2", float(cost[1:].sum()), it
    )


# --------------------------------------------------------------------------------------------
# The server's problem on the true cost (docs/fedpcs.md, 'The accuracy scale κ and the
# server's solve')
# --------------------------------------------------------------------------------------------

#: step sizes (× max(R_t, floor)) of the one-round checks that polish the true-cost solution
POLISH_STEPS = (0.1, 0.01, 0.001)


def _seed(rng: np.random.Generator | int | None) -> int:
    """One integer seed for every mean-field solve of a server solve: the clients' random
    best-response starts are then the same at every R, so the cost is a function of R."""
    if rng is None:
        return 0
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**31 - 1))
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool) and rng >= 0:
        return int(rng)
    raise ValueError(f"rng: must be None, an integer >= 0 or a numpy Generator, got {rng!r}")


def _weights(v: ArrayLike, N: int, T: int) -> FloatArray:
    """Accuracy weights v as an (N, T+1) array of finite values > 0."""
    arr = np.asarray(v, dtype=float)
    try:
        out = np.broadcast_to(arr, (N, T + 1))
    except ValueError:
        raise ValueError(
            f"v: expected a number, T+1 = {T + 1} values or an (N, T+1) = ({N}, {T + 1}) array, got shape {arr.shape}"
        ) from None
    if not np.all(np.isfinite(out) & (out > 0)):
        raise ValueError(f"v: every accuracy weight must be finite and > 0, got min {float(np.min(out)):.6g}")
    return out


#: a mean field whose pinned clients give up more utility than this is no equilibrium
REGRET_TOL = 1e-8


@dataclass(frozen=True)
class EquilibriumCost:
    """The true expected server cost of a reward schedule (docs/fedpcs.md, 'The accuracy
    scale κ and the server's solve'): ``reward`` R_0..R_T, ``cost`` U_t (as :func:`server_cost`)
    at the clients' mean-field equilibrium ``mean_field`` under R, and ``objective`` =
    Σ_{t=1}^T U_t, the part the schedule can change (ρ^0 is given; R_0 moves no budget and is
    set to R_1 by convention).

    ``equilibrium``: the mean field converged and no client gives up more than
    ``REGRET_TOL`` of utility (``mean_field.regret``). A finite population can lack a
    pure-strategy equilibrium near some R (a client tied between two of its local optima
    flips φ back and forth); :func:`mean_field` then returns an ε-equilibrium whose cost is
    an artefact of which side it stopped on, and :func:`stackelberg_true_cost` never picks
    such an R (its cost counts as +∞)."""

    reward: FloatArray
    cost: FloatArray
    objective: float
    mean_field: MeanFieldResult
    equilibrium: bool


def equilibrium_cost(
    R: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    K: int,
    T: int,
    *,
    v: ArrayLike,
    gamma: float = 0.5,
    mf_tol: float = 1e-7,
    n_starts: int = 8,
    rng: np.random.Generator | int | None = 0,
    restarts: Restarts = "final",
    phi_init: ArrayLike | None = None,
    alpha_init: ArrayLike | None = None,
    inclusion: Inclusion = "privacy",
) -> EquilibriumCost:
    """U_t(R_t, ρ*[R]) for every round: solve the clients' mean field under the whole
    schedule ``R`` (a number or T+1 values ≥ 0; :func:`mean_field`) and price its
    budgets with :func:`server_cost`. This is the function :func:`stackelberg_true_cost`
    minimises and the one to check its answer with. Without ``phi_init``/``alpha_init``
    the mean field is solved from scratch with the complete multi-start (``restarts``), so
    the value does not depend on any earlier solve; ``rng`` seeds the random starts (an
    integer keeps the cost a deterministic function of R). ``inclusion``: the sampling rule
    the clients face and the server prices with."""
    inclusion = _check_inclusion(inclusion)
    r0, vp = as_clients(rho0, varphi)
    T = check_horizon(T)
    N, K = check_population(r0.size, K)
    gm = check_unit_open("gamma", gamma)
    Rv = as_rounds("R", R, T, lower=0.0)
    vv = _weights(v, N, T)
    mf = mean_field(
        r0,
        vp,
        Rv,
        K,
        T,
        options=MeanFieldSolverOptions(tol=mf_tol, restarts=restarts, n_starts=n_starts),
        rng=_seed(rng),
        phi_init=phi_init,
        alpha_init=alpha_init,
        inclusion=inclusion,
    )
    cost = server_cost(mf.rho, Rv, N, K, vv, gamma=gm, phi=mf.phi, inclusion=inclusion)
    return EquilibriumCost(_ro(Rv), _ro(cost), float(cost[1:].sum()), mf, _is_equilibrium(mf))


def _is_equilibrium(mf: MeanFieldResult) -> bool:
    return bool(mf.converged and float(np.max(mf.regret, initial=0.0)) <= REGRET_TOL)


@dataclass(frozen=True)
class _Pricing:
    """What pricing one schedule needs (the clients, the weights, the solver settings, the
    seed and the sampling rule)."""

    r0: FloatArray
    vp: FloatArray
    K: int
    T: int
    vv: FloatArray
    gamma: float
    mf_tol: float
    n_starts: int
    seed: int
    inclusion: Inclusion

    def price(
        self, x: FloatArray, start: tuple[FloatArray, FloatArray] | None, threads: int | None = None
    ) -> tuple[float, MeanFieldResult]:
        """J(x) = Σ_{t≥1} U_t at the clients' mean field under R = (x_1, x_1..x_T): from
        scratch with the complete multi-start (``start`` None; +∞ unless a pure-strategy
        equilibrium), or warm-started from ``start`` = (φ, α) of a nearby solution with
        ``restarts="none"``. ``threads``: of the best responses (None: every core, or inside
        a :meth:`~._best_response.CoreShare.held` block this thread's core and the free
        ones); the answer does not depend on it."""
        R = _TrueCost.schedule(x)
        options = MeanFieldSolverOptions(
            tol=self.mf_tol, restarts="final" if start is None else "none", n_starts=self.n_starts, threads=threads
        )
        mf = mean_field(
            self.r0,
            self.vp,
            R,
            self.K,
            self.T,
            options=options,
            rng=self.seed,
            phi_init=None if start is None else start[0],
            alpha_init=None if start is None else start[1],
            inclusion=self.inclusion,
        )
        cost = server_cost(mf.rho, R, self.r0.size, self.K, self.vv, gamma=self.gamma, phi=mf.phi, inclusion=self.inclusion)
        ok = start is not None or _is_equilibrium(mf)
        return (float(cost[1:].sum()) if ok else np.inf), mf


class _TrueCost:
    """J(x) = Σ_{t=1}^T U_t as a function of x = (R_1..R_T) (R_0 := R_1), memoised.

    Values are :func:`equilibrium_cost`'s: the mean field solved from scratch with the
    complete multi-start, so J does not depend on the order of evaluation (a finite population
    can have several ε-equilibria, and a warm start would follow whichever it came from);
    +∞ where that is no equilibrium (:attr:`EquilibriumCost.equilibrium`).
    Finite-difference gradients perturb one reward at a time around such a solution with
    cheap warm solves (``restarts="none"``) that follow the same equilibrium.

    Independent solves — a gradient's T perturbations, the scan of constant schedules, the
    polish's screens and candidates — are priced side by side on ``workers`` threads of this
    process (1: one at a time), which share the process's cores
    (:class:`~._best_response.CoreShare`): each solve has a core of its own, and one left
    alone at the end of a batch, or a J the search asks for by itself, widens its best
    responses to the cores the others have freed. Each is the same deterministic function of
    its inputs on any number of threads, so the answer does not depend on ``workers``.
    (Until 2026-11-30 they ran on forked worker processes of one thread each: a pair of J's
    of unequal cost left a core idle until the longer one ended, and a process that had run
    gRPC could not fork them; docs/speed.md.) ``inclusion``: the sampling rule of every solve
    and price (kept in :attr:`pricing`)."""

    def __init__(
        self,
        *,
        r0: FloatArray,
        vp: FloatArray,
        K: int,
        T: int,
        vv: FloatArray,
        gamma: float,
        mf_tol: float,
        n_starts: int,
        seed: int,
        R_max: float,
        fd_step: float,
        workers: int = 1,
        inclusion: Inclusion = "privacy",
    ) -> None:
        self.args = (r0, vp, K, T)
        self.vv, self.gamma, self.mf_tol, self.n_starts, self.seed = (vv, gamma, mf_tol, n_starts, seed)
        self.pricing = _Pricing(r0, vp, K, T, vv, gamma, mf_tol, n_starts, seed, inclusion)
        self.R_max, self.fd_step = R_max, fd_step
        self.memo: dict[bytes, tuple[float, MeanFieldResult]] = {}
        self.evaluations = 0
        self.best_x: FloatArray | None = None
        self.best_f = np.inf
        self.workers = workers
        self._share = CoreShare(cores())
        self._threads: ThreadPoolExecutor | None = None

    @staticmethod
    def schedule(x: FloatArray) -> FloatArray:
        return np.concatenate([[x[0]], x])

    def _submit(self, x: FloatArray, start: MeanFieldResult | None) -> Future[tuple[float, MeanFieldResult]]:
        """Start pricing x (from scratch, or warm from ``start``) on one of the threads."""
        self.evaluations += 1
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="fedpcs-price")
        return self._threads.submit(self._price_held, x, None if start is None else (start.phi, start.alpha))

    def _price_held(self, x: FloatArray, start: tuple[FloatArray, FloatArray] | None) -> tuple[float, MeanFieldResult]:
        with self._share.held():
            return self.pricing.price(x, start)

    def _solve_many(self, xs: list[FloatArray], start: MeanFieldResult | None) -> list[tuple[float, MeanFieldResult]]:
        """:meth:`_Pricing.price` of each of ``xs`` (all from ``start``), side by side."""
        futures = [self._submit(x, start) for x in xs]
        return [f.result() for f in futures]

    def _solve(self, x: FloatArray, start: MeanFieldResult | None) -> tuple[float, MeanFieldResult]:
        return self._solve_many([x], start)[0]

    def prefetch(self, xs: list[FloatArray]) -> None:
        """Price the schedules ``xs`` not yet in the memo, side by side, so that the calls
        of J that follow (in their own order, which the record of the best point follows)
        find them there."""
        todo = [x for x in dict.fromkeys(np.asarray(x, dtype=float).tobytes() for x in xs) if x not in self.memo]
        if len(self.memo) + len(todo) > 4096:
            return
        arrays = [np.frombuffer(k) for k in todo]
        for key, value in zip(todo, self._solve_many(arrays, None), strict=True):
            self.memo[key] = value

    def close(self) -> None:
        """Stop the threads (if any were started)."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def solution(self, x: ArrayLike) -> tuple[float, MeanFieldResult]:
        """J(x) and the equilibrium it prices."""
        xx = np.asarray(x, dtype=float)
        key = xx.tobytes()
        if key not in self.memo:
            if len(self.memo) > 4096:  # bound the memory: equilibria are (N, T+1) arrays
                self.memo.clear()
            self.memo[key] = self._solve(xx, None)
        f, mf = self.memo[key]
        if f < self.best_f:
            self.best_x, self.best_f = xx.copy(), f
        return f, mf

    def __call__(self, x: ArrayLike) -> float:
        return self.solution(x)[0]

    def screen(self, zs: list[FloatArray], x: FloatArray) -> list[float]:
        """Cheap estimates of J(z) for each z of ``zs`` near x: the clients' equilibrium
        warm-started from x's (``restarts="none"``), about a sixth of a full solve, priced
        side by side. Used only to decide which candidates J itself prices
        (:func:`_one_round_checks`)."""
        _, base = self.solution(x)
        return [f for f, _ in self._solve_many([np.asarray(z, dtype=float) for z in zs], base)]

    def gradient(self, x: ArrayLike) -> FloatArray:
        """Forward differences, step ``fd_step``·max(1, R_t) (backward at R_max)."""
        xx = np.asarray(x, dtype=float)
        fx, base = self.solution(xx)
        zs = []
        for t in range(xx.size):
            h = self.fd_step * max(1.0, abs(xx[t]))
            z = xx.copy()
            z[t] = xx[t] + h if xx[t] + h <= self.R_max else xx[t] - h
            zs.append(z)
        g = np.empty(xx.size)
        for t, (z, (fz, _)) in enumerate(zip(zs, self._solve_many(zs, base), strict=True)):
            g[t] = (fz - fx) / (z[t] - xx[t])
        return g


def _projected_descent(J: _TrueCost, x: FloatArray, fx: float, R_max: float, max_iter: int) -> tuple[FloatArray, float]:
    """Projected gradient descent on J over [0, R_max]^T: forward-difference gradients
    (:meth:`_TrueCost.gradient`), Barzilai-Borwein step lengths, Armijo backtracking on J
    itself. J is only piecewise smooth (a client switching basin makes it jump), so the
    descent stops at the first failed line search and leaves the rest to the one-round
    checks. Why not SciPy's L-BFGS-B: it asks for the gradient at every line-search trial
    point, T mean-field solves each, and on a jump makes no progress at all."""
    if max_iter == 0:
        return x, fx
    x = x.copy()
    g = J.gradient(x)
    scale = max(float(x.mean()), 1e-2)
    gmax = float(np.max(np.abs(g)))
    step = 0.1 * scale / gmax if gmax > 0 else 0.0
    for _ in range(max_iter):
        d = np.clip(x - step * g, 0.0, R_max) - x
        slope = _linalg.dot(g, d)
        if not np.any(d) or slope >= 0:
            break
        lam, accepted = 1.0, False
        for _ls in range(8):
            y = x + lam * d
            fy = J(y)
            if fy <= fx + 1e-4 * lam * slope:
                accepted = True
                break
            lam *= 0.3
        if not accepted:
            break
        g_new = J.gradient(y)
        sk, yk = y - x, g_new - g
        sy = _linalg.dot(sk, yk)
        step = _linalg.dot(sk, sk) / sy if sy > 0 else 2.0 * step
        x, fx, g = y, fy, g_new
    return x, fx


def _one_round_checks(
    f: Callable[[FloatArray], float],
    x: FloatArray,
    fx: float,
    R_max: float,
    steps: tuple[float, ...],
    floor: float,
    screen: Callable[[list[FloatArray], FloatArray], list[float]] | None = None,
    prefetch: Callable[[list[FloatArray]], None] | None = None,
) -> tuple[FloatArray, float, float]:
    """One pass of one-round perturbations over t = 1..T: R_t ± s·max(R_t, ``floor``) for s
    in ``steps`` (largest first); the first step size that lowers J moves R_t to the better
    of its two signs, then the move is doubled while it keeps lowering J. Returns the new
    point, its value and the largest relative decrease one move gave (0: none did).

    ``screen(zs, x)``, when given, gives cheap estimates of J at the candidates ``zs`` near
    the current point x (the equilibrium warm-started from x's): a candidate is priced by
    ``f`` only when the screen says it is cheaper than the best so far, so every accepted
    move is still a decrease of ``f`` itself. A pass with a screen can miss a decrease the
    screen does not see; the caller certifies the answer with a pass without one.

    ``prefetch(zs)``, when given, prices candidates ahead of ``f``, side by side (``f`` then
    finds them priced). A coordinate's candidates of every step size are screened at once,
    and those ``f`` would price if none of them lowered J — the screen's cheaper ones (every
    one without a screen), in the order the loop asks — are prefetched together: the loop
    below then runs exactly as without it, so the pass's answer is the same to the bit, and
    the candidates after one that lowers J are priced for nothing. Worth it on two cores and
    more: most coordinates price two or three candidates before their step sizes run out."""
    x = x.copy()
    gain = 0.0

    def moved(t: int, y: float) -> FloatArray:
        z = x.copy()
        z[t] = y
        return z

    for t in range(x.size):
        scale = max(x[t], floor)
        best_y, best_f = x[t], fx
        tries = [[y for y in (float(np.clip(x[t] + sign * s * scale, 0.0, R_max)) for sign in (1.0, -1.0)) if y != x[t]] for s in steps]
        zs = [[moved(t, y) for y in ys] for ys in tries]
        flat = [z for group in zs for z in group]
        estimates = screen(flat, x) if screen is not None and flat else [-np.inf] * len(flat)
        if prefetch is not None:
            prefetch([z for z, e in zip(flat, estimates, strict=True) if e < fx])
        ahead = iter(estimates)  # in the loop's order: step sizes, then signs
        for ys, group in zip(tries, zs, strict=True):
            for y, z in zip(ys, group, strict=True):
                estimate = next(ahead)
                if estimate >= best_f:  # the screen says no cheaper: not priced
                    continue
                fz = f(z)
                if fz < best_f:
                    best_y, best_f = y, fz
            if best_f < fx:
                break
        if best_f < fx:
            move = best_y - x[t]
            while True:  # extrapolate along the improving direction
                y = float(np.clip(best_y + move, 0.0, R_max))
                if y == best_y:
                    break
                z = moved(t, y)
                if screen is not None and screen([z], x)[0] >= best_f:
                    break
                fz = f(z)
                if fz >= best_f:
                    break
                best_y, best_f, move = y, fz, 2.0 * move
            gain = max(gain, (fx - best_f) / max(abs(fx), 1e-300))
            x[t], fx = best_y, best_f
    return x, fx, gain


def stackelberg_true_cost(
    rho0: ArrayLike,
    varphi: ArrayLike,
    K: int,
    T: int,
    *,
    v: ArrayLike,
    gamma: float = 0.5,
    rho_min: float = 0.01,
    rho_max: float = 12.0,
    R_max: float = 100.0,
    mf_tol: float = 1e-7,
    n_starts: int = 8,
    rng: np.random.Generator | int | None = None,
    R_start: ArrayLike | None = None,
    lemma2_start: bool = True,
    lemma2_max_outer: int = 30,
    scan_points: int = 24,
    fd_step: float = 1e-4,
    max_iter: int = 30,
    cost_tol: float = 1e-7,
    polish_steps: tuple[float, ...] = POLISH_STEPS,
    max_polish: int = 20,
    workers: int | None = None,
    inclusion: Inclusion = "privacy",
) -> StackelbergResult:
    """The server's Stackelberg problem on the true cost (docs/fedpcs.md, 'The accuracy scale
    κ and the server's solve'): minimise J(R) = Σ_{t=1}^T U_t(R_t, ρ*[R]) (the server's cost
    of Eq. 13, Stage I of Eq. 16 taken over the whole schedule) over
    R_1..R_T ∈ [0, ``R_max``] (R_0 := R_1), with ρ*[R] the clients' mean-field equilibrium
    under the whole schedule (:func:`mean_field`) — the clients look ahead, so each budget ρ^t
    answers R_t and every later reward. J is evaluated by :func:`equilibrium_cost` (the mean
    field solved from scratch with the complete multi-start), the same function a caller
    checks the answer with.

    Why not Lemma 2: its frozen linearisation gives G = 0 to every client whose α sits on a
    bound, so a small R looks useless and R = 0 can be self-confirming although a positive
    reward is cheaper (:func:`stackelberg_lemma2`).

    J is only piecewise smooth: α entering or leaving a bound makes kinks, and a client
    switching between two local optima of its own problem (with N = 100, one client moves
    φ enough to tip others) makes J jump, e.g. by 17 % between two constant rewards 0.005
    apart. Hence a search that does not trust gradients far, one helper per phase, all
    pricing with one memoised J (:class:`_TrueCost`):

    1. starts (:func:`_best_start`) — the best constant schedule (a scan of ``scan_points``
       values on [0, R_max], refined by a bounded scalar search between the scan's
       neighbours), the Lemma-2 outer loop's R (at most ``lemma2_max_outer`` iterations;
       ``lemma2_start=False`` skips it) and ``R_start`` if given; the cheapest is kept;
    2. projected gradient descent (:func:`_descend`; forward differences with step
       ``fd_step``·max(1, R_t), Barzilai-Borwein steps, Armijo backtracking on J; at most
       ``max_iter`` steps, stops at the first failed line search);
    3. polish (:func:`_polish`): passes of one-round checks R_t ± s·max(R_t, floor), s in
       ``polish_steps`` (floor = 1 % of the mean reward, ≥ 1e-3). Candidates are first
       screened with a warm-started equilibrium (about 3× cheaper than J; only those it finds
       cheaper are priced by J), and once a screened pass finds nothing, a full pass prices
       every candidate with J; the solve is converged when a full pass lowers J by at most
       ``cost_tol`` relative (``max_polish`` passes in all) — the property the tests check
       by brute force, together with "no constant schedule is cheaper".

    The answer is a local minimum of J in that sense, not a certified global one.
    ``workers``: threads that price the independent solves side by side (a gradient's T
    perturbations, the scan of constants, the polish's screens and candidates; None: one per
    core, 1: one at a time, on every core); the answer does not depend on it.
    ``rng`` seeds the clients' random best-response starts (one seed for every solve, so
    J is a deterministic function of R). ``rho_min``/``rho_max`` only bound the Lemma-2
    start's rewards: the equilibrium budgets stay in [min(ρ^0, φ), max(ρ^0, φ)] ⊂ [ρ_L, ρ_H]
    by construction (ρ^{t+1} is a convex combination of ρ^t and φ(t), Eq. 20).
    ``inclusion``: the sampling rule of every solve, price and the Lemma-2 start."""
    inclusion = _check_inclusion(inclusion)
    r0, vp = as_clients(rho0, varphi)
    T = check_horizon(T)
    N, K = check_population(r0.size, K)
    gm = check_unit_open("gamma", gamma)
    Rmax = check_positive("R_max", R_max)
    steps = _check_search_settings(
        fd_step=fd_step,
        cost_tol=cost_tol,
        scan_points=scan_points,
        max_iter=max_iter,
        max_polish=max_polish,
        lemma2_max_outer=lemma2_max_outer,
        polish_steps=polish_steps,
    )
    vv = _weights(v, N, T)
    seed = _seed(rng)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256):
        raise ValueError(f"workers: must be None or an integer in [1, 256], got {workers!r}")
    J = _TrueCost(
        r0=r0,
        vp=vp,
        K=K,
        T=T,
        vv=vv,
        gamma=gm,
        mf_tol=mf_tol,
        n_starts=n_starts,
        seed=seed,
        R_max=Rmax,
        fd_step=fd_step,
        workers=cores() if workers is None else workers,
        inclusion=inclusion,
    )
    try:
        x0, f0 = _best_start(
            J,
            scan_points=scan_points,
            lemma2_start=lemma2_start,
            lemma2_max_outer=lemma2_max_outer,
            rho_min=rho_min,
            rho_max=rho_max,
            R_start=R_start,
        )
        if not np.isfinite(f0):
            log.warning(
                "true-cost solve: no start is a pure-strategy equilibrium of the clients; returning the best constant schedule unconverged"
            )
            max_iter, max_polish = 0, 0
        x, fx = _descend(J, x0, f0, max_iter)
        return _true_cost_result(J, _polish(J, x, fx, steps, max_polish, cost_tol))
    finally:
        J.close()


def _check_search_settings(
    *,
    fd_step: float,
    cost_tol: float,
    scan_points: int,
    max_iter: int,
    max_polish: int,
    lemma2_max_outer: int,
    polish_steps: tuple[float, ...],
) -> tuple[float, ...]:
    """Refuse search settings of :func:`stackelberg_true_cost` it cannot run with, naming the
    argument; returns the polish step sizes, largest first (the order
    :func:`_one_round_checks` tries them in)."""
    check_positive("fd_step", fd_step)
    check_positive("cost_tol", cost_tol)
    for name, val, lo in (
        ("scan_points", scan_points, 2),
        ("max_iter", max_iter, 0),
        ("max_polish", max_polish, 0),
        ("lemma2_max_outer", lemma2_max_outer, 1),
    ):
        if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < lo:
            raise ValueError(f"{name}: must be an integer >= {lo}, got {val!r}")
    if not polish_steps or any(not (0 < s) for s in polish_steps):
        raise ValueError(f"polish_steps: must be a non-empty list of steps > 0, got {polish_steps!r}")
    return tuple(sorted((float(s) for s in polish_steps), reverse=True))


def _best_start(
    J: _TrueCost, *, scan_points: int, lemma2_start: bool, lemma2_max_outer: int, rho_min: float, rho_max: float, R_start: ArrayLike | None
) -> tuple[FloatArray, float]:
    """Phase 1 of :func:`stackelberg_true_cost`: the cheapest of the start schedules — the best
    constant one (:func:`_best_constant`), the Lemma-2 outer loop's (:func:`_lemma2_rewards`;
    unless ``lemma2_start`` is False) and the caller's ``R_start`` (T+1 values, R_0 dropped,
    clipped to [0, R_max]) — as (x, J(x))."""
    T = J.args[3]
    c_best, f_best = _best_constant(J, scan_points)
    candidates: list[tuple[float, FloatArray]] = [(f_best, np.full(T, c_best))]
    if lemma2_start:
        x_l = _lemma2_rewards(J, rho_min=rho_min, rho_max=rho_max, max_outer=lemma2_max_outer)
        candidates.append((J(x_l), x_l))
    if R_start is not None:
        x_s = np.clip(as_rounds("R_start", R_start, T, lower=0.0)[1:], 0.0, J.R_max)
        candidates.append((J(x_s), x_s))
    f0, x0 = min(candidates, key=lambda c: c[0])
    log.info("true-cost solve: start J = %.10g (best constant R = %.6g: %.10g; %d evaluations)", f0, c_best, f_best, J.evaluations)
    return x0, f0


def _best_constant(J: _TrueCost, scan_points: int) -> tuple[float, float]:
    """The cheapest constant schedule R_t ≡ c and its J: a scan of c = 0 and ``scan_points``
    − 1 geometrically spaced values up to R_max, refined by a bounded scalar search between
    the best value's two neighbours (a non-equilibrium's J = +∞ is capped at 1e300 there,
    which the search needs finite)."""
    T, Rmax = J.args[3], J.R_max
    grid = np.concatenate([[0.0], _linalg.geomspace(min(1e-2, Rmax / 10.0), Rmax, scan_points - 1)])
    J.prefetch([np.full(T, g) for g in grid])
    vals = [J(np.full(T, g)) for g in grid]
    i = int(np.argmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    c_best, f_best = grid[i], vals[i]
    if hi > lo:
        res = minimize_scalar(
            lambda c: min(J(np.full(T, c)), 1e300), bounds=(lo, hi), method="bounded", options={"xatol": 1e-6 * max(1.0, c_best)}
        )
        if res.fun < f_best:
            c_best, f_best = float(res.x), float(res.fun)
    return c_best, f_best


def _lemma2_rewards(J: _TrueCost, *, rho_min: float, rho_max: float, max_outer: int) -> FloatArray:
    """R_1..R_T of the paper's outer loop on the Lemma-2 surrogate (Eq. 22,
    :func:`stackelberg_lemma2`, at most ``max_outer`` iterations) for the same clients,
    weights and seed as J, clipped to [0, R_max]: a start that J then prices."""
    r0, vp, K, T = J.args
    st = stackelberg_lemma2(
        r0,
        vp,
        K,
        T,
        v=J.vv,
        gamma=J.gamma,
        rho_min=rho_min,
        rho_max=rho_max,
        R_max=J.R_max,
        mf_tol=J.mf_tol,
        n_starts=J.n_starts,
        rng=J.seed,
        max_outer=max_outer,
        inclusion=J.pricing.inclusion,
    )
    x_l: FloatArray = np.clip(np.asarray(st.reward[1:], dtype=float), 0.0, J.R_max)
    return x_l


def _descend(J: _TrueCost, x0: FloatArray, f0: float, max_iter: int) -> tuple[FloatArray, float]:
    """Phase 2 of :func:`stackelberg_true_cost`: :func:`_projected_descent` from the start
    (x0, f0); if J was lower at some point it priced on the way (a rejected line-search trial,
    say), that point instead."""
    x, fx = _projected_descent(J, x0, f0, J.R_max, max_iter)
    if J.best_f < fx:
        assert J.best_x is not None  # best_f drops below inf only where best_x is recorded
        x, fx = J.best_x.copy(), J.best_f
    log.info("true-cost solve: descent J = %.10g (%d evaluations)", fx, J.evaluations)
    return x, fx


@dataclass(frozen=True)
class _Polished:
    """The outcome of :func:`_polish`: the rewards ``x`` = R_1..R_T, the largest relative
    decrease of J the last pass's one-round moves gave (``gain``), the passes run and
    whether a full pass certified ``x`` (``certified``)."""

    x: FloatArray
    gain: float
    passes: int
    certified: bool


def _polish(J: _TrueCost, x: FloatArray, fx: float, steps: tuple[float, ...], max_polish: int, cost_tol: float) -> _Polished:
    """Phase 3 of :func:`stackelberg_true_cost`: passes of one-round checks
    (:func:`_one_round_checks`, floor 1 % of the mean reward, at least 1e-3), screened with
    warm-started equilibria (:meth:`_TrueCost.screen`) while they find decreases; once a
    screened pass gains at most ``cost_tol``, an unscreened (full) pass prices every
    candidate with J, and the answer is certified when that one gains at most ``cost_tol``
    too. At most ``max_polish`` passes."""
    gain = np.inf
    passes = 0
    screened = True  # screened passes first (cheap), then one full pass certifies
    certified = False
    while passes < max_polish:
        floor = max(1e-2 * float(x.mean()), 1e-3)
        x, fx, gain = _one_round_checks(J, x, fx, J.R_max, steps, floor, screen=J.screen if screened else None, prefetch=J.prefetch)
        passes += 1
        log.info(
            "true-cost solve: polish pass %d (%s) J = %.10g, largest one-round gain %.3g (%d evaluations)",
            passes,
            "screened" if screened else "full",
            fx,
            gain,
            J.evaluations,
        )
        if gain <= cost_tol:
            if not screened:
                certified = True
                break
            screened = False
        else:
            screened = True
    return _Polished(x, gain, passes, certified)


def _true_cost_result(J: _TrueCost, polished: _Polished) -> StackelbergResult:
    """The answer at the polished rewards: the schedule R (R_0 := R_1), the clients'
    equilibrium J priced there, its per-round cost U_t (Eq. 13) and the Lemma-2 coefficients
    G, H (Eqs. 57-58) at it; converged if a full pass certified R and that equilibrium is
    a converged, pure-strategy one (finite J)."""
    r0, vp, K, _ = J.args
    N = r0.size
    f, mf = J.solution(polished.x)
    R = J.schedule(polished.x)
    cost = server_cost(mf.rho, R, N, K, J.vv, gamma=J.gamma, phi=mf.phi, inclusion=J.pricing.inclusion)
    aff = affine_response(mf.alpha, mf.rho, mf.phi, R, vp, N, K, inclusion=J.pricing.inclusion)
    return StackelbergResult(
        reward=_ro(R),
        mean_field=mf,
        G=aff.G,
        H=aff.H,
        cost=_ro(cost),
        reward_residual=float(polished.gain),
        outer_iterations=polished.passes,
        converged=bool(polished.certified and np.isfinite(f) and mf.converged),
        solver="true_cost",
        objective=float(cost[1:].sum()),
        evaluations=J.evaluations,
    )


def stackelberg(
    rho0: ArrayLike,
    varphi: ArrayLike,
    K: int,
    T: int,
    *,
    v: ArrayLike,
    gamma: float = 0.5,
    server_solver: ServerSolver = "true_cost",
    rho_min: float = 0.01,
    rho_max: float = 12.0,
    R_max: float = 100.0,
    mf_tol: float = 1e-7,
    n_starts: int = 8,
    rng: np.random.Generator | int | None = None,
    R_init: float = 1.0,
    beta_R: float = 0.5,
    tol: float = 1e-6,
    max_outer: int = 100,
    restarts: Restarts = "final",
    update: Update = "consistent",
    acceleration: Literal["anderson"] | None = "anderson",
    cost_tol: float = 1e-7,
    inclusion: Inclusion = "privacy",
) -> StackelbergResult:
    """The two-stage Stackelberg equilibrium. ``server_solver="true_cost"`` (default;
    docs/fedpcs.md, 'The accuracy scale κ and the server's solve'):
    :func:`stackelberg_true_cost`, rewards minimising the true expected server cost
    at the clients' mean-field equilibrium (``cost_tol``). ``"lemma2"``: the paper's outer
    loop on the Lemma-2 surrogate, :func:`stackelberg_lemma2` (``R_init``, ``beta_R``,
    ``tol``, ``max_outer``, ``restarts``, ``update``, ``acceleration``). Either solver gets
    the sampling rule ``inclusion``."""
    inclusion = _check_inclusion(inclusion)
    if server_solver == "true_cost":
        return stackelberg_true_cost(
            rho0,
            varphi,
            K,
            T,
            v=v,
            gamma=gamma,
            rho_min=rho_min,
            rho_max=rho_max,
            R_max=R_max,
            mf_tol=mf_tol,
            n_starts=n_starts,
            rng=rng,
            cost_tol=cost_tol,
            inclusion=inclusion,
        )
    if server_solver == "lemma2":
        return stackelberg_lemma2(
            rho0,
            varphi,
            K,
            T,
            v=v,
            gamma=gamma,
            R_init=R_init,
            rho_min=rho_min,
            rho_max=rho_max,
            R_max=R_max,
            beta_R=beta_R,
            tol=tol,
            max_outer=max_outer,
            mf_tol=mf_tol,
            restarts=restarts,
            update=update,
            n_starts=n_starts,
            rng=rng,
            acceleration=acceleration,
            inclusion=inclusion,
        )
    raise ValueError(f"server_solver: must be 'true_cost' or 'lemma2', got {server_solver!r}")
