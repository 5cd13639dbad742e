"""The mean-field fixed point φ(t) = (1/N) Σ_i ρ_i^t[φ, R] (FedPCS Def. 2, Eq. 18, Theorem 3,
Algorithm 1; spec §3.7 and A6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.incentives.games._best_response import (
    Solver,
    _random_starts,
    _Raw,
    solve_types,
    unique_types,
)
from fedgame.incentives.games._dynamics import evaluate
from fedgame.incentives.games._validation import (
    as_clients,
    as_rounds,
    check_horizon,
    check_population,
    check_positive,
)

__all__ = ["PAPER_MF_TOL", "MeanFieldResult", "Restarts", "mean_field"]

FloatArray = NDArray[np.float64]
Restarts = Literal["final", "every"]

#: the paper's stopping tolerance ε_0 of Algorithm 1 (Sec. VIII-A3; spec A17)
PAPER_MF_TOL = 1e-3


def _ro(x: ArrayLike) -> FloatArray:
    arr = np.array(x, dtype=float, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class MeanFieldResult:
    """Mean-field equilibrium of the client game for fixed rewards R (arrays read-only).

    ``phi`` (T+1,): the fixed point, φ(0) = mean ρ^0. ``alpha``, ``rho`` (n, T+1): the
    clients' best responses to ``phi`` and their trajectories; ``utility``,
    ``kkt_residual`` (n,). ``residual`` = max_t |φ(t) − mean_i ρ_i^t| at return;
    ``history[m]`` the residual of Picard iteration m and ``phi_history[m]`` its φ_m (the
    paper's Fig. 3); ``iterations`` best-response evaluations of the map;
    ``full_solves`` of them with the complete multi-start; ``converged``: residual ≤ tol and
    every KKT residual ≤ kkt_tol."""

    phi: FloatArray
    alpha: FloatArray
    rho: FloatArray
    utility: FloatArray
    kkt_residual: FloatArray
    residual: float
    iterations: int
    full_solves: int
    history: tuple[float, ...]
    phi_history: FloatArray
    beta: float
    converged: bool


def mean_field(rho0: ArrayLike, varphi: ArrayLike, R: ArrayLike, K: int, T: int, *,
               phi_init: ArrayLike | None = None, tol: float = 1e-7, max_iter: int = 200,
               beta: float = 1.0, beta_min: float = 0.05, restarts: Restarts = "final",
               vectorize: bool = True, n_starts: int = 8,
               rng: np.random.Generator | int | None = None, solver: Solver = "newton",
               kkt_tol: float = 1e-7, sweep_restarts: int = 3, sweep_iters: int = 2000,
               sweep_damping: float = 0.05) -> MeanFieldResult:
    """Damped Picard iteration for the mean field (spec §3.7, reading A6).

    φ_0(t) = mean ρ^0 (or ``phi_init``; φ(0) is always pinned to mean ρ^0); each iteration
    solves every client's best response to φ_m (spec §3.6, warm-started from the previous
    α), Φ(t) = mean_i ρ_i^t, r_m = max_t |Φ(t) − φ_m(t)|; stop when r_m ≤ ``tol``, else
    φ_{m+1} = (1−β)φ_m + βΦ with β halved (not below ``beta_min``) whenever r grows twice in
    a row. N = len(rho0); ``K`` draws per round; rounds t = 0..T.

    ``restarts="every"`` runs the complete multi-start of :func:`best_response` (α ≡ 0, 1,
    0.5, damped sweeps, ``n_starts`` random draws, warm start) at every iteration — the spec
    read literally. ``restarts="final"`` (default) iterates with the warm start (α ≡ 0, 1,
    0.5 at the first iteration) and, once the residual is below ``tol``, re-solves with the
    complete multi-start at that φ; if it finds a better response for any client the
    iteration continues from it, so the returned α is always a complete multi-start best
    response to the returned φ. ``vectorize=False`` solves client by client (for checks)."""
    r0, vp = as_clients(rho0, varphi)
    T = check_horizon(T)
    R_arr = as_rounds("R", R, T, lower=0.0)
    N, K = check_population(r0.size, K)
    check_positive("tol", tol)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: must be an integer >= 1, got {max_iter!r}")
    if not 0.0 < beta_min <= beta <= 1.0:
        raise ValueError(f"beta: must satisfy 0 < beta_min <= beta <= 1, got beta={beta!r}, "
                         f"beta_min={beta_min!r}")
    if restarts not in ("final", "every"):
        raise ValueError(f"restarts: must be 'final' or 'every', got {restarts!r}")
    mean0 = float(r0.mean())
    if phi_init is None:
        phi = np.full(T + 1, mean0)
    else:
        phi = as_rounds("phi_init", phi_init, T, lower=0.0, strict=True)
    phi[0] = mean0

    u_r0, u_vp, _first, inverse = unique_types(r0, vp)
    weights = np.bincount(inverse, minlength=u_r0.size) / N
    starts = _random_starts(rng, n_starts, T) if n_starts else None

    def solve(phi_m: FloatArray, warm: FloatArray | None, full: bool) -> _Raw:
        kw = dict(starts=starts if full else None,
                  sweep_restarts=sweep_restarts if full else 0, sweep_iters=sweep_iters,
                  sweep_damping=sweep_damping, solver=solver, chunk=1,
                  include_corners=full or warm is None)
        if vectorize:
            return solve_types(u_r0, u_vp, phi_m, R_arr, N, K, warm=warm, **kw)  # type: ignore[arg-type]
        parts = [solve_types(u_r0[j:j + 1], u_vp[j:j + 1], phi_m, R_arr, N, K,
                             warm=None if warm is None else warm[:, j:j + 1], **kw)  # type: ignore[arg-type]
                 for j in range(u_r0.size)]
        return _Raw(np.concatenate([p.a for p in parts], axis=1),
                    np.concatenate([p.U for p in parts]),
                    np.concatenate([p.kkt for p in parts]), parts[0].n_starts)

    def field(raw: _Raw, phi_m: FloatArray) -> FloatArray:
        rho_u = evaluate(raw.a, u_r0, u_vp, phi_m, R_arr, N, K, need_grad=False).rho
        return rho_u @ weights

    history: list[float] = []
    phis: list[FloatArray] = []
    warm: FloatArray | None = None
    full_solves = 0
    grow = 0
    converged = False
    raw: _Raw | None = None
    res = np.inf
    iterations = 0
    for _m in range(max_iter):
        full = restarts == "every"
        raw = solve(phi, warm, full)
        iterations += 1
        full_solves += int(full)
        Phi = field(raw, phi)
        res = float(np.max(np.abs(Phi - phi)))
        phis.append(phi.copy())
        history.append(res)
        if res <= tol and not full:
            # verification: the complete multi-start at the converged φ
            full_raw = solve(phi, raw.a, True)
            full_solves += 1
            raw = full_raw
            Phi = field(raw, phi)
            res = float(np.max(np.abs(Phi - phi)))
        if res <= tol:
            converged = True
            break
        if _m == max_iter - 1:
            break
        if len(history) >= 2 and history[-1] > history[-2]:
            grow += 1
            if grow >= 2:
                beta, grow = max(beta / 2.0, beta_min), 0
        else:
            grow = 0
        phi = (1.0 - beta) * phi + beta * Phi
        phi[0] = mean0
        warm = raw.a
    assert raw is not None
    ev = evaluate(raw.a, u_r0, u_vp, phi, R_arr, N, K)
    kkt = np.abs(np.clip(raw.a + ev.grad, 0.0, 1.0) - raw.a).max(axis=0)
    alpha_u = np.zeros((u_r0.size, T + 1))
    alpha_u[:, :T] = raw.a.T
    kk = kkt[inverse]
    return MeanFieldResult(
        phi=_ro(phi), alpha=_ro(alpha_u[inverse]), rho=_ro(ev.rho.T[inverse]),
        utility=_ro(ev.U[inverse]), kkt_residual=_ro(kk), residual=float(res),
        iterations=iterations, full_solves=full_solves, history=tuple(history),
        phi_history=_ro(np.array(phis)), beta=float(beta),
        converged=bool(converged and np.all(kk <= kkt_tol)))
