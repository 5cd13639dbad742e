"""Problem 1 of PHS: the privacy-aware selection distribution (R. Xu, Y.-J. A. Zhang, J. Huang,
"Tackling privacy heterogeneity in differentially private federated learning", Sec. V)::

    minimise_p   f(p) = ‖p − p^u‖_1 + sqrt(‖p − p^u‖_1² + η Σ_k w_k p_k²),   w_k = D V_k
    subject to   Σ_k p_k = 1,  p_k ≥ 0                                       (Problem 1)

It is Theorem 2's persistent error (Eq. 20) with the clipping gap dropped
(G^{select,clip} ≈ ‖p − p^u‖_1) and G^DP = Σ_k p_k² D V_k (Eq. 16); V_k is Eq. 7
(:func:`fedgame.privacy.analysis.phs.phs_V`). In theory η = 2 L √(T^g T^l) (re-deriving
Eqs. 66-67: the text's η = D√T L counts D twice, as w_k already holds it); L is unknown, so η is
a hyperparameter fixed per run (p^s must be fixed before the schedule is drawn, so the paper's
"adjust η" is read as tuning it). f is convex (Prop. 1) and, with every w_k > 0, its minimiser is
unique and strictly positive (Prop. 2).

Three solvers, one answer:

* :func:`solve_p1_structured` — the optimality structure derived from the KKT conditions
  (82)–(87) (Appendix D, proof of Prop. 2): p_k = min(max(p^u_k, τ_lo/w_k), τ_hi/w_k) with
  τ_hi − τ_lo = 2(R + s)/η and Σ p = 1, where s = ‖p − p^u‖_1, R = sqrt(s² + η Σ w p²).
  For a gap g = τ_hi − τ_lo the sum is piecewise linear and non-decreasing in τ_lo, so τ_lo(g)
  is found exactly after one sort; g is the root of h(g) = g − 2(R + s)/η (Brent). Needs every
  w_k > 0; N = 10⁴ takes milliseconds.
* :func:`solve_p1_cvxpy` — the DCP epigraph form of Problem 1 (:func:`p1_cvxpy_problem`) with
  Clarabel; also handles w_k = 0 (public data, ε_k = ∞, Sec. V-B). With two or more public
  clients the optimum is not unique: how the extra mass is split among them changes neither
  ‖p − p^u‖_1 nor Σ w p², hence not f.
* :func:`p1_slsqp` — SLSQP on the smooth split form p = p^u + a − b, a cross-check for tests
  (small N).

η ≤ η* = 4 Σ w (p^u)² / (max w p^u − min w p^u)² ⇔ p* = p^u (:func:`eta_star`); the
structured solver then returns p^u exactly. :func:`kkt_residual` measures the interval condition
above at any p (0 at the optimum, in units of probability).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq, minimize

from fedgame.core.validate import as_vector

if TYPE_CHECKING:
    import cvxpy as cp

__all__ = [
    "Method",
    "P1Solution",
    "eta_star",
    "kkt_residual",
    "p1_objective",
    "p1_cvxpy_problem",
    "p1_objectives",
    "p1_slsqp",
    "solve_p1",
    "solve_p1_cvxpy",
    "solve_p1_structured",
]

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]
Method = Literal["structured", "cvxpy", "auto"]

KKT_TOL = 1e-6
"""A solution counts as converged when its KKT residual is at most this;
a CVXPY one also when Clarabel reports "optimal"."""
_CLARABEL_TOL = 1e-9
"""Clarabel's gap and feasibility tolerances; its p is then accurate to about 1e-6."""
_FLOOR = 1e-18
"""KKT residuals below this are not resolved (p_k is O(1) and carries 16 digits)."""


# -- validation ------------------------------------------------------------------------------
def _first_bad(name: str, arr: FloatArray, good: NDArray[np.bool_], allowed: str) -> None:
    if not np.all(good):
        i = int(np.argmin(good))
        raise ValueError(f"{name}: must be {allowed}, got {arr[i]:g} at index {i}")


def _check_eta(eta: float) -> float:
    try:
        e = float(eta)
    except (TypeError, ValueError):
        raise ValueError(f"eta: must be a number > 0, got {eta!r}") from None
    if not (e > 0 and math.isfinite(e)):
        raise ValueError(f"eta: must be > 0 and finite, got {e:g}")
    return e


def _check_pu_w(pu: ArrayLike, w: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """p^u: a strictly positive distribution (Prop. 2 needs p^u_k > 0); w: finite, ≥ 0, same shape."""
    u = as_vector("pu", pu)
    ww = as_vector("w", w)
    if ww.shape != u.shape:
        raise ValueError(f"w: must have the shape of pu {u.shape}, got {ww.shape}")
    _first_bad("pu", u, np.isfinite(u) & (u > 0), "> 0 (p^u_k = |M_k|/Σ|M_i|)")
    total = float(u.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"pu: must sum to 1 (within 1e-9), got sum {total!r}")
    _first_bad("w", ww, np.isfinite(ww) & (ww >= 0), ">= 0 and finite (w_k = D V_k; 0 for public data)")
    return u, ww


def _check_p(p: ArrayLike, n: int) -> FloatArray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] != n:
        raise ValueError(f"p: must have shape ({n},) or (M, {n}), got {arr.shape}")
    return arr


def _validate(pu: ArrayLike, w: ArrayLike, eta: float) -> tuple[FloatArray, FloatArray, float]:
    e = _check_eta(eta)
    u, ww = _check_pu_w(pu, w)
    return u, ww, e


# -- the objective and its constants ---------------------------------------------------------
def _f(p: FloatArray, pu: FloatArray, w: FloatArray, eta: float) -> FloatArray:
    s = np.abs(p - pu).sum(axis=-1)
    return np.asarray(s + np.sqrt(s * s + eta * (w * p * p).sum(axis=-1)), dtype=np.float64)


def p1_objective(p: ArrayLike, pu: ArrayLike, w: ArrayLike, eta: float) -> float:
    """f(p) = ‖p − p^u‖_1 + sqrt(‖p − p^u‖_1² + η Σ_k w_k p_k²), the objective of Problem 1
    (PHS Sec. V-A). ``p`` is not required to be feasible."""
    u, ww, e = _validate(pu, w, eta)
    pp = _check_p(p, u.size)
    if pp.ndim != 1:
        raise ValueError(f"p: must be 1-D here (use p1_objectives for rows), got shape {pp.shape}")
    return float(_f(pp, u, ww, e))


def p1_objectives(p: ArrayLike, pu: ArrayLike, w: ArrayLike, eta: float) -> FloatArray:
    """:func:`p1_objective` of every row of ``p`` (shape (M, N) → (M,)), vectorised."""
    u, ww, e = _validate(pu, w, eta)
    pp = _check_p(p, u.size)
    return np.atleast_1d(_f(pp, u, ww, e))


def _eta_star(pu: FloatArray, w: FloatArray) -> float:
    a = w * pu
    spread = float(a.max() - a.min())
    if spread <= 0.0:
        return math.inf
    return float(4.0 * (w * pu * pu).sum() / spread**2)


def eta_star(pu: ArrayLike, w: ArrayLike) -> float:
    """η* = 4 Σ_k w_k (p^u_k)² / (max_k w_k p^u_k − min_k w_k p^u_k)²: p* = p^u iff η ≤ η*
    (from the interval condition at p = p^u, where τ_hi − τ_lo = 2 sqrt(Σ w (p^u)²/η)
    must cover all w_k p^u_k). ``inf`` when every w_k p^u_k is equal."""
    u, ww = _check_pu_w(pu, w)
    return _eta_star(u, ww)


# -- KKT residual: the interval condition of the optimality structure -----------------------
def _gap(p: FloatArray, pu: FloatArray, w: FloatArray, eta: float) -> tuple[float, float]:
    """(G, R): G = τ_hi − τ_lo = 2(R + s)/η that the KKT conditions (87) impose at p."""
    s = float(np.abs(p - pu).sum())
    r = math.sqrt(s * s + eta * float((w * p * p).sum()))
    return 2.0 * (r + s) / eta, r


def _tau_bounds(e: float, p: FloatArray, pu: FloatArray, w: FloatArray, g: float) -> tuple[float, float]:
    """The τ_lo for which every |p_k − clip(p^u_k, τ/w_k, (τ+G)/w_k)| ≤ e form [max l_k, min h_k].

    clip(p^u_k, τ/w_k, (τ+G)/w_k) is continuous and non-decreasing in τ; it reaches y < p^u_k at
    τ = w_k y − G and y > p^u_k at τ = w_k y (w_k = 0: only at τ = −G resp. 0)."""
    lo_y, hi_y = p - e, p + e
    lo = np.where(lo_y <= pu, w * lo_y - g, w * lo_y)
    hi = np.where(hi_y < pu, w * hi_y - g, w * hi_y)
    return float(lo.max()), float(hi.min())


def _fit_tau(p: FloatArray, pu: FloatArray, w: FloatArray, eta: float) -> tuple[float, float, float]:
    """(residual, τ_lo, τ_hi): the smallest e such that some τ_lo has
    |p_k − min(max(p^u_k, τ_lo/w_k), (τ_lo + G)/w_k)| ≤ e for all k, G = 2(R + s)/η, found by
    bisection on e; τ_lo is the middle of the admissible interval. Σ p ≠ 1 and negative entries
    add to the residual."""
    g, r = _gap(p, pu, w, eta)
    infeasible = max(abs(float(p.sum()) - 1.0), float(np.maximum(-p, 0.0).max()))
    if r == 0.0:  # f(p) = 0, the global minimum (only with w_k p_k = 0 for all k and p = p^u)
        return infeasible, 0.0, 0.0
    lo, hi = _tau_bounds(0.0, p, pu, w, g)
    e_hi = 0.0
    if lo > hi:  # bisect e geometrically on [1e-18, e_hi] to relative precision 1e-3
        e_lo, e_hi = _FLOOR, 1.0
        while True:
            lo, hi = _tau_bounds(e_hi, p, pu, w, g)
            if lo <= hi:
                break
            e_lo, e_hi = e_hi, 2.0 * e_hi
        while e_hi > 1.001 * e_lo:
            mid = math.sqrt(e_lo * e_hi)
            l_m, h_m = _tau_bounds(mid, p, pu, w, g)
            if l_m <= h_m:
                e_hi, lo, hi = mid, l_m, h_m
            else:
                e_lo = mid
    tau = 0.5 * (lo + hi)
    resolved = e_hi if e_hi > 1.001 * _FLOOR else 0.0
    return max(resolved, infeasible), tau, tau + g


def kkt_residual(p: ArrayLike, pu: ArrayLike, w: ArrayLike, eta: float) -> float:
    """Distance of ``p`` from the optimality structure of Problem 1 (derived from the KKT
    conditions (82)–(87)): the smallest e ≥ 0 for which one τ_lo makes
    |p_k − min(max(p^u_k, τ_lo/w_k), τ_hi/w_k)| ≤ e for every k, τ_hi = τ_lo + 2(R + s)/η,
    combined (max) with |Σ p − 1| and the largest negative entry. 0 exactly at the optimum;
    in units of probability (relative precision 1e-3)."""
    u, ww, e = _validate(pu, w, eta)
    pp = _check_p(p, u.size)
    if pp.ndim != 1:
        raise ValueError(f"p: must be 1-D, got shape {pp.shape}")
    return _fit_tau(pp, u, ww, e)[0]


# -- the result ------------------------------------------------------------------------------
@dataclass(frozen=True)
class P1Solution:
    """A solution of Problem 1.

    ``p`` — p*, a distribution; ``objective`` — f(p*) recomputed with :func:`p1_objective`;
    ``objective_at_pu`` — f(p^u); ``kkt_residual`` — :func:`kkt_residual` at p*; ``tau_lo``,
    ``tau_hi`` — the two levels of w_k p*_k (clients above p^u share τ_lo, those below τ_hi;
    for p* = p^u the middle of the admissible range); ``eta_star`` — η* (inf if none);
    ``method`` — "structured" or "cvxpy"; ``seconds`` — wall time of the solve; ``converged`` —
    kkt_residual ≤ 1e-6, or, for CVXPY, Clarabel reported "optimal" (an interior point, whose p
    is accurate to about 1e-6, so its KKT residual is of that order)."""

    p: FloatArray
    objective: float
    objective_at_pu: float
    kkt_residual: float
    tau_lo: float
    tau_hi: float
    eta_star: float
    method: str
    seconds: float
    converged: bool = True


def _finish(
    p: FloatArray,
    pu: FloatArray,
    w: FloatArray,
    eta: float,
    method: str,
    t0: float,
    tau: tuple[float, float] | None = None,
    converged: bool = False,
) -> P1Solution:
    seconds = time.perf_counter() - t0
    res, tau_lo, tau_hi = _fit_tau(p, pu, w, eta)
    if tau is not None:
        tau_lo, tau_hi = tau
    return P1Solution(
        p=p,
        objective=float(_f(p, pu, w, eta)),
        objective_at_pu=float(_f(pu, pu, w, eta)),
        kkt_residual=res,
        tau_lo=tau_lo,
        tau_hi=tau_hi,
        eta_star=_eta_star(pu, w),
        method=method,
        seconds=seconds,
        converged=res <= KKT_TOL or converged,
    )


# -- structured solver -----------------------------------------------------------------------
class _Levels:
    """p(τ, g) = min(max(p^u, τ/w), (τ + g)/w) and the τ_lo(g) making Σ p = 1.

    With a = w p^u sorted, S(τ) = (τ + g) Σ_{a_k > τ+g} 1/w_k + Σ_{τ ≤ a_k ≤ τ+g} p^u_k
    + τ Σ_{a_k < τ} 1/w_k is continuous, piecewise linear and non-decreasing in τ, with kinks at
    a_k − g and a_k; prefix sums over the sorted a (sorted once) give S at all 2N kinks by
    binary search, so the piece holding S = 1 is found without sorting again."""

    def __init__(self, pu: FloatArray, w: FloatArray) -> None:
        self.pu, self.w, self.inv = pu, w, 1.0 / w
        order = np.argsort(w * pu, kind="stable")
        self.a = (w * pu)[order]
        self.cum_inv = np.concatenate(([0.0], np.cumsum(self.inv[order])))
        self.cum_pu = np.concatenate(([0.0], np.cumsum(pu[order])))

    def _parts(self, tau: FloatArray | float, g: float) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(Σ 1/w of raised clients, Σ p^u of unchanged ones, Σ 1/w of capped ones) at τ."""
        il = np.searchsorted(self.a, tau, side="left")  # raised: a_k < τ
        ih = np.searchsorted(self.a, np.asarray(tau) + g, side="right")  # capped: a_k > τ + g
        raised = self.cum_inv[il]
        mid = self.cum_pu[ih] - self.cum_pu[il]
        capped = self.cum_inv[-1] - self.cum_inv[ih]
        return raised, mid, capped

    def tau_lo(self, g: float) -> float:
        """τ_lo with Σ_k p_k(τ_lo, g) = 1, exactly (up to rounding) for one g ≥ 0."""
        below: list[float] = []  # the largest kink of each kind with S ≤ 1 ...
        above: list[float] = []  # ... and the smallest with S > 1
        for kinks in (self.a - g, self.a):  # each sorted, so S is monotone along it
            raised, mid, capped = self._parts(kinks, g)
            j = int(np.count_nonzero((kinks + g) * capped + mid + kinks * raised <= 1.0))
            if j > 0:
                below.append(float(kinks[j - 1]))
            if j < kinks.size:
                above.append(float(kinks[j]))
        b = max(below) if below else float(self.a[0] - g)  # S(a_min − g) ≤ 1 up to rounding
        nxt = min(above) if above else b + 1.0
        # Classify the clients inside the piece, not at its ends: (a_k − g) + g need not be a_k
        # in floating point, and one misplaced client changes the slope of the whole piece.
        r, m, c = (float(x) for x in self._parts(0.5 * (b + nxt), g))
        slope = r + c
        tau = b if slope <= 0.0 else (1.0 - m - g * c) / slope
        return min(max(tau, b), nxt)

    def p(self, tau: float, g: float) -> FloatArray:
        return np.minimum(np.maximum(self.pu, tau * self.inv), (tau + g) * self.inv)


def _structured(pu: FloatArray, w: FloatArray, eta: float) -> tuple[FloatArray, float, float]:
    a = w * pu
    spread = float(a.max() - a.min())
    g_pu = 2.0 * math.sqrt(float((w * pu * pu).sum()) / eta)  # the gap 2(R+s)/η at p = p^u
    mid = 0.5 * (float(a.min()) + float(a.max()) - g_pu)  # p = p^u: any τ_lo in [max a − G, min a]
    if eta <= _eta_star(pu, w):
        return pu.copy(), mid, mid + g_pu
    lv = _Levels(pu, w)

    def h(g: float) -> float:
        p = lv.p(lv.tau_lo(g), g)
        s = float(np.abs(p - pu).sum())
        r = math.sqrt(s * s + eta * float((w * p * p).sum()))
        return g - 2.0 * (r + s) / eta

    # h(0) = −2(R+s)/η < 0; at g = spread, p = p^u and h = spread − g_pu > 0 (η > η*).
    if h(spread) <= 0.0:  # η above η* by a rounding error
        return pu.copy(), mid, mid + g_pu
    g = float(brentq(h, 0.0, spread, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    tau = lv.tau_lo(g)
    p = lv.p(tau, g)
    return p / p.sum(), tau, tau + g


def solve_p1_structured(pu: ArrayLike, w: ArrayLike, eta: float) -> P1Solution:
    """Problem 1 through its optimality structure (KKT (82)–(87)): nested monotone root finding,
    τ_lo(g) exact by sorting, g by Brent on h(g) = g − 2(R + s)/η. Needs every w_k > 0
    (public data, w_k = 0: :func:`solve_p1_cvxpy`). Returns p^u exactly when η ≤ η*."""
    t0 = time.perf_counter()
    u, ww, e = _validate(pu, w, eta)
    if np.any(ww <= 0):
        i = int(np.argmin(ww > 0))
        raise ValueError(f"w: the structured solver needs every w_k > 0 (public data, w = 0: use method='cvxpy'), got 0 at index {i}")
    p, tau_lo, tau_hi = _structured(u, ww, e)
    return _finish(p, u, ww, e, "structured", t0, (tau_lo, tau_hi))


# -- CVXPY -----------------------------------------------------------------------------------
def _cvxpy_module() -> Any:
    """CVXPY, imported on first use (it takes a second to import); typed loosely, as its atoms
    are re-exported dynamically."""
    import cvxpy

    return cvxpy


def p1_cvxpy_problem(pu: ArrayLike, w: ArrayLike, eta: float) -> tuple[cp.Problem, cp.Variable]:
    """The epigraph form of Problem 1, DCP with a free p::

        minimise s + ‖(s, √(η w) ∘ p)‖_2   s.t.  s ≥ ‖p − p^u‖_1,  Σ p = 1,  p ≥ 0

    exact because φ(s, p) = s + ‖(s, √(η w) ∘ p)‖ increases in s (Prop. 1), so s = ‖p − p^u‖_1
    at the optimum. Returns the problem and its variable p."""
    cp = _cvxpy_module()
    u, ww, e = _validate(pu, w, eta)
    p = cp.Variable(u.size)
    s = cp.Variable()
    obj = s + cp.norm(cp.hstack([s, cp.multiply(np.sqrt(e * ww), p)]), 2)
    return cp.Problem(cp.Minimize(obj), [s >= cp.norm1(p - u), cp.sum(p) == 1, p >= 0]), p


def _cvxpy(pu: FloatArray, w: FloatArray, eta: float) -> tuple[FloatArray, bool]:
    """(p, Clarabel reported "optimal")."""
    cp = _cvxpy_module()
    n = pu.size
    prob, p = p1_cvxpy_problem(pu, w, eta)
    assert prob.is_dcp(), "Problem 1 epigraph form must be DCP (docs/phs.md, Problem 1)"
    # Tighter than Clarabel's 1e-8 defaults; at 1e-10 it often stops "inaccurate" instead.
    # CVXPY's "may be inaccurate" warning is replaced by the returned flag and a log line.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Solution may be inaccurate", category=UserWarning)
        prob.solve(  # type: ignore[no-untyped-call]  # cvxpy leaves Problem.solve unannotated
            solver=cp.CLARABEL, tol_gap_abs=_CLARABEL_TOL, tol_gap_rel=_CLARABEL_TOL, tol_feas=_CLARABEL_TOL
        )
    if p.value is None or prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"Problem 1: Clarabel returned status {prob.status!r}")
    if prob.status != cp.OPTIMAL:
        log.info("Problem 1: Clarabel status %s (N = %d, eta = %g)", prob.status, n, eta)
    x = np.maximum(np.asarray(p.value, dtype=np.float64), 0.0)  # clip tiny negatives
    return x / x.sum(), prob.status == cp.OPTIMAL


def solve_p1_cvxpy(pu: ArrayLike, w: ArrayLike, eta: float) -> P1Solution:
    """Problem 1 with CVXPY + Clarabel on the epigraph form of :func:`p1_cvxpy_problem` (exact
    because φ(s, p) increases in s). The returned p is clipped at 0, renormalised and evaluated
    with f, not with the solver's value. Handles w_k = 0 (public data, ε_k = ∞)."""
    t0 = time.perf_counter()
    u, ww, e = _validate(pu, w, eta)
    p, optimal = _cvxpy(u, ww, e)
    return _finish(p, u, ww, e, "cvxpy", t0, converged=optimal)


# -- SLSQP cross-check -----------------------------------------------------------------------
def p1_slsqp(pu: ArrayLike, w: ArrayLike, eta: float, *, max_n: int = 200) -> FloatArray:
    """Problem 1 by SLSQP on the smooth split form p = p^u + a − b, a, b ≥ 0, s = Σ(a + b),
    Σ(a − b) = 0, p^u + a − b ≥ 0: an independent check for tests, small N only."""
    u, ww, e = _validate(pu, w, eta)
    n = u.size
    if n > max_n:
        raise ValueError(f"pu: the SLSQP check is for small problems, at most {max_n} clients, got {n}")

    def fun(x: FloatArray) -> tuple[float, FloatArray]:
        a, b = x[:n], x[n:]
        p = u + a - b
        s = float(x.sum())
        r = math.sqrt(s * s + e * float((ww * p * p).sum()))
        if r == 0.0:
            return 0.0, np.concatenate((np.full(n, 2.0), np.full(n, 2.0)))
        c = 1.0 + s / r
        dp = e * ww * p / r
        return s + r, np.concatenate((c + dp, c - dp))

    eye = np.eye(n)
    cons = [
        {
            "type": "eq",
            "fun": lambda x: np.array([x[:n].sum() - x[n:].sum()]),
            "jac": lambda x: np.concatenate((np.ones(n), -np.ones(n)))[None, :],
        },
        {"type": "ineq", "fun": lambda x: u + x[:n] - x[n:], "jac": lambda x: np.hstack((eye, -eye))},
    ]
    res = minimize(
        fun,
        np.zeros(2 * n),
        jac=True,
        method="SLSQP",
        bounds=[(0.0, None)] * (2 * n),
        constraints=cons,
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    p = np.maximum(u + res.x[:n] - res.x[n:], 0.0)
    return np.asarray(p / p.sum(), dtype=np.float64)


# -- entry point -----------------------------------------------------------------------------
def solve_p1(pu: ArrayLike, w: ArrayLike, eta: float, *, method: Method = "structured") -> P1Solution:
    """Solve Problem 1 (PHS Sec. V). ``pu`` — p^u_k = |M_k|/Σ|M_i| (> 0, sums to 1);
    ``w`` — w_k = D V_k (Eq. 7; 0 for public data); ``eta`` — η > 0 (a hyperparameter; in
    theory 2 L √(T^g T^l)). ``method``: "structured" (:func:`solve_p1_structured`, every
    w_k > 0), "cvxpy" (:func:`solve_p1_cvxpy`) or "auto" (structured unless some w_k = 0, i.e.
    a public-data client, then CVXPY).
    Inputs are validated first: errors name the field, the allowed range and the value."""
    u, ww, e = _validate(pu, w, eta)
    if method == "auto":
        method = "structured" if bool(np.all(ww > 0)) else "cvxpy"
    if method == "structured":
        return solve_p1_structured(u, ww, e)
    if method == "cvxpy":
        return solve_p1_cvxpy(u, ww, e)
    raise ValueError(f"method: must be 'structured', 'cvxpy' or 'auto', got {method!r}")
