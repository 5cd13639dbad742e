"""PHS Problem 1 posed as JSON and solved on its own, without training
(``fedgame solve phs --input problem.json``; PHS Eqs. 6-7 and Problem 1 of Sec. V, what the
server fixes before Algorithm 1 runs).

A problem lists the clients' budgets ``eps`` (a number > 0; ``"inf"`` or ``null`` for public
data, clients with an infinite budget as in Sec. V-B), ``delta`` (one number or one per client),
dataset ``sizes`` |M_k|, and either ``batch_size`` B_k or ``sampling_ratio`` r_k (one number or one
per client; r_k = min(1, B_k/|M_k|): a batch larger than the client's data is all of it); the model
dimension ``D``; ``T_g``, ``T_l``, ``K``; the weight ``eta`` of Problem 1 or the smoothness ``L``
with η = 2 L √(T_g T_l) (re-deriving Eqs. 66-67; neither: L = 1); optionally the clipping norm
``C`` (default 1), the realised participation ``counts`` T_k (default: the expected p*_k K T_g,
Eq. 40) and ``sensitivity_factor`` 2 for the ``fixed_batch`` reading (exactly B_k examples without
replacement, replace-one neighbours: the sensitivity doubles).

The answer gives V_k (Eq. 7), p^u, p* with f(p*), f(p^u), η*, the KKT residual, the noise that
each client calibrates for T_k (σ_k of Eq. 6, × ``sensitivity_factor``, and the noise multiplier
z_k = sqrt(V_k T_k T^l) B_k with respect to the sensitivity, as the PHS privacy plan reports it;
``counts_used`` says whether T_k was given or expected), and p* from both the structured solver
and CVXPY (Clarabel) with their objectives, times and largest difference. p* is the structured
solver's unless a client has public data (w_k = 0, Sec. V-B), when it is CVXPY's.
Every field is validated before any work; errors name the field, the value and the allowed range.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from fedgame.solve.problems import ProblemError, size_errors, validate_problem
from fedgame.privacy.analysis.phs import phs_V
from fedgame.selection.phs_problem import P1Solution, solve_p1

__all__ = ["PHSProblem", "parse_phs_problem", "solve_phs"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Numbers = float | list[float]


class PHSProblem(_Strict):
    """A PHS Problem 1 instance (see the module docstring). Types are checked by pydantic,
    ranges by :meth:`_ranges`, which reports every bad entry on its own line."""

    eps: list[float | None]
    delta: Numbers
    sizes: list[int]
    batch_size: Numbers | None = None
    sampling_ratio: Numbers | None = None
    D: int
    eta: float | None = None
    L: float | None = None
    T_g: int
    T_l: int
    K: int
    C: float = 1.0
    counts: list[int] | None = None
    sensitivity_factor: Literal[1, 2] = 1

    @property
    def n(self) -> int:
        return len(self.eps)

    def per_client(self, v: Numbers) -> np.ndarray:
        return np.full(self.n, float(v)) if not isinstance(v, list) else np.asarray(v, dtype=np.float64)

    def epsilons(self) -> np.ndarray:
        """ε_k with ``null`` (public data) as inf."""
        return np.array([math.inf if e is None else float(e) for e in self.eps])

    def rates(self) -> np.ndarray:
        """r_k = min(1, B_k/|M_k|) (B_k > |M_k| gives r_k = 1), or the given sampling ratios."""
        sizes = np.asarray(self.sizes, dtype=np.float64)
        if self.sampling_ratio is not None:
            return self.per_client(self.sampling_ratio)
        assert self.batch_size is not None
        return np.minimum(1.0, self.per_client(self.batch_size) / sizes)

    def eta_value(self) -> tuple[float, str]:
        """η and where it came from: ``eta``, ``L`` (η = 2L√(T_g T_l), Eqs. 66-67) or the default L = 1."""
        if self.eta is not None:
            return float(self.eta), "eta"
        L, source = (self.L, "L") if self.L is not None else (1.0, "default (L = 1)")
        return 2.0 * L * math.sqrt(self.T_g * self.T_l), source

    @model_validator(mode="after")
    def _ranges(self) -> PHSProblem:
        bad: list[str] = []
        n = self.n
        if n == 0:
            raise ValueError("eps: must list at least one client, got []")

        def entries(name: str, v: Numbers) -> list[tuple[str, float]]:
            if isinstance(v, list):
                if len(v) != n:
                    bad.append(f"{name}: a list must have one value per client (N = {n}, as eps), got {len(v)}")
                    return []
                return [(f"{name}.{i}", float(x)) for i, x in enumerate(v)]
            return [(name, float(v))]

        for i, e in enumerate(self.eps):
            if e is not None and not e > 0:  # inf is public data
                bad.append(f'eps.{i}: must be > 0 (or "inf" for public data), got {e:g}')
        bad += size_errors(self.sizes, n, f"N = {n}, as eps")
        for name, x in entries("delta", self.delta):
            if not (0 < x <= 1):
                bad.append(f"{name}: must be in (0, 1] (and delta/r <= 1), got {x:g}")
        if (self.batch_size is None) == (self.sampling_ratio is None):
            bad.append("batch_size, sampling_ratio: give exactly one of them")
        if self.batch_size is not None:
            for name, x in entries("batch_size", self.batch_size):
                if not (x >= 1 and math.isfinite(x)):
                    bad.append(f"{name}: must be >= 1 (expected examples per local step), got {x:g}")
        if self.sampling_ratio is not None:
            for name, x in entries("sampling_ratio", self.sampling_ratio):
                if not (0 < x <= 1):
                    bad.append(f"{name}: must be in (0, 1], got {x:g}")
        for name, iv in (("D", self.D), ("T_g", self.T_g), ("T_l", self.T_l), ("K", self.K)):
            if iv < 1:
                bad.append(f"{name}: must be >= 1, got {iv}")
        if self.eta is not None and self.L is not None:
            bad.append("eta, L: give at most one of them (eta directly, or L with eta = 2 L sqrt(T_g T_l))")
        for name, fv in (("eta", self.eta), ("L", self.L), ("C", self.C)):
            if fv is not None and not (fv > 0 and math.isfinite(fv)):
                bad.append(f"{name}: must be > 0 and finite, got {fv:g}")
        if self.counts is not None:
            if len(self.counts) != n:
                bad.append(f"counts: must have one value per client (N = {n}, as eps), got {len(self.counts)}")
            for i, c in enumerate(self.counts):
                if c < 0:
                    bad.append(f"counts.{i}: must be >= 0 (times client {i} is selected), got {c}")
        if not bad:  # δ/r ≤ 1 (Lemma 1) needs valid δ, sizes and r
            delta, r = self.per_client(self.delta), self.rates()
            for k in np.flatnonzero(delta / r > 1).tolist():
                name = f"delta.{k}" if isinstance(self.delta, list) else "delta"
                bad.append(f"{name}: must be <= r = min(1, B/|M|) = {r[k]:g} for client {k} (delta/r <= 1, Lemma 1), got {delta[k]:g}")
        if bad:
            raise ValueError("\n".join(bad))
        return self


def parse_phs_problem(raw: Any) -> PHSProblem:
    """Validate a JSON value as a :class:`PHSProblem`; :class:`ProblemError` lists every bad
    field, one per line."""
    return validate_problem(PHSProblem, raw)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _brief(sol: P1Solution) -> dict[str, Any]:
    return {
        "objective": sol.objective,
        "seconds": sol.seconds,
        "kkt_residual": sol.kkt_residual,
        "converged": sol.converged,
    }


def solve_phs(raw: Any) -> dict[str, Any]:
    """Solve a PHS Problem 1 instance (see the module docstring); returns a JSON-ready dict."""
    prob = parse_phs_problem(raw)
    eps, sizes = prob.epsilons(), np.asarray(prob.sizes, dtype=np.float64)
    r = prob.rates()
    batch = r * sizes  # B_k ← r_k |M_k| (|M_k| when B_k > |M_k|)
    eta, eta_from = prob.eta_value()
    try:
        V = np.asarray(phs_V(eps, prob.per_client(prob.delta), r, sizes), dtype=np.float64)  # Eq. 7
        w = prob.D * V
        p_u = sizes / sizes.sum()
        cvx = solve_p1(p_u, w, eta, method="cvxpy")
        structured = solve_p1(p_u, w, eta, method="structured") if bool(np.all(w > 0)) else None
    except ValueError as e:
        raise ProblemError(str(e)) from None
    main = structured if structured is not None else cvx  # structured unless public data (w_k = 0)
    counts: np.ndarray
    if prob.counts is not None:
        counts, counts_used = np.asarray(prob.counts, dtype=np.int64), "given"
    else:
        counts, counts_used = main.p * prob.K * prob.T_g, "expected"  # E[T_k] = p*_k K T^g (Eq. 40)
    # σ_k² = V_k T_k T^l C² (Eq. 6), × sensitivity_factor in the fixed_batch reading;
    # z_k = sqrt(V_k T_k T^l) B_k is the noise multiplier w.r.t. the sensitivity (the std on the
    # clipped-gradient sum is sensitivity_factor · z_k · C).
    root = np.sqrt(V * counts * prob.T_l)
    sigma = prob.sensitivity_factor * root * prob.C
    z = root * batch
    return {
        "N": prob.n,
        "eta": eta,
        "eta_from": eta_from,
        "eta_star": _finite(main.eta_star),
        "r": r.tolist(),
        "V": V.tolist(),
        "w": w.tolist(),
        "p_u": p_u.tolist(),
        "p_star": main.p.tolist(),
        "objective": main.objective,
        "objective_at_p_u": main.objective_at_pu,
        "kkt_residual": main.kkt_residual,
        "tau_lo": main.tau_lo,
        "tau_hi": main.tau_hi,
        "l1_from_p_u": float(np.abs(main.p - p_u).sum()),
        "method": main.method,
        "counts": counts.tolist(),
        "counts_used": counts_used,
        "sigma": sigma.tolist(),
        "noise_multiplier": z.tolist(),
        "sensitivity_factor": prob.sensitivity_factor,
        "structured": None if structured is None else _brief(structured),
        "cvxpy": _brief(cvx),
        "max_abs_difference": None if structured is None else float(np.abs(structured.p - cvx.p).max()),
    }
