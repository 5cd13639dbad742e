"""The game solve's few vector sums and its Anderson mixing, with the same bits on every CPU kind.

The Stackelberg search compares costs J(R) and keeps the cheaper point, so a last-bit
difference in J can send it down another path: with BLAS dot products (OpenBLAS picks its
kernel, and so its order of summation, by CPU), LAPACK's least squares and NumPy's SIMD
transcendental functions, the seed-0 paper-budget game took 1,279 mean-field evaluations on
the AVX-512 hosts and 4,737 on the AVX2 one, and ended at other local optima
(docs/speed.md, "The same plan on every CPU kind"). Here every sum is NumPy's pairwise
summation of elementwise products and every square root is ``math.sqrt``: IEEE operations in
an order fixed by the code, not by the CPU.

Hand-written, not a library call: the libraries' routines are the CPU-dependent ones.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["anderson_mix", "dot", "geomspace", "lstsq", "weighted_rows"]

FloatArray = NDArray[np.float64]


def dot(a: FloatArray, b: FloatArray) -> float:
    """Σ a_i b_i of two 1-D arrays (products, then NumPy's pairwise sum)."""
    return float(np.multiply(a, b).sum())


def weighted_rows(M: FloatArray, w: FloatArray) -> FloatArray:
    """M @ w for a 2-D ``M`` and 1-D ``w``: each row's Σ_j M_ij w_j (as :func:`dot`)."""
    out: FloatArray = np.multiply(M, w).sum(axis=1)
    return out


def geomspace(lo: float, hi: float, n: int) -> FloatArray:
    """``n`` ≥ 1 values from ``lo`` to ``hi`` > ``lo`` > 0 in a geometric progression, as
    ``numpy.geomspace`` but by the C library's exp and log (one routine on every x86-64 CPU
    kind with FMA), not NumPy's SIMD ones; the ends are exact."""
    if n == 1:
        return np.array([lo])
    step = math.log(hi / lo) / (n - 1)
    return np.array([lo, *(lo * math.exp(k * step) for k in range(1, n - 1)), hi])


def _orthonormal_columns(A: FloatArray, tol: float) -> tuple[FloatArray, FloatArray]:
    """Modified Gram-Schmidt with one re-orthogonalisation (twice is enough: Giraud et al.
    2005) over A's columns in order, dropping a column whose remainder is at most ``tol``
    (dependent on the earlier ones): Q (n × r) orthonormal and R (r × r) upper triangular
    with A's kept columns = Q R."""
    n, k = A.shape
    Q: list[FloatArray] = []
    R = np.zeros((k, k))
    for j in range(k):
        v = A[:, j].copy()
        coef = np.zeros(k)
        for _ in range(2):
            for i, q in enumerate(Q):
                r = dot(q, v)
                coef[i] += r
                v -= r * q
        nv = math.sqrt(dot(v, v))
        if nv <= tol:
            continue
        R[:, len(Q)] = coef
        R[len(Q), len(Q)] = nv
        Q.append(v / nv)
    r = len(Q)
    return (np.column_stack(Q) if Q else np.zeros((n, 0))), R[:r, :r]


def lstsq(A: FloatArray, b: FloatArray) -> FloatArray:
    """The minimum-norm least-squares solution x of A x ≈ b (what ``numpy.linalg.lstsq``
    returns) for a small A (n × k, either way round), by a complete orthogonal decomposition
    built from Gram-Schmidt: A's independent columns = Q₁ R₁ (a column whose remainder is below
    ``eps · max(n, k) · max_j ‖A_j‖``, lstsq's default cut-off, counts as dependent), then the
    rows of W = Q₁ᵀ A span A's row space, Wᵀ = Q₂ R₂, and x = Q₂ R₂⁻ᵀ Q₁ᵀ b."""
    n, k = A.shape
    scale = max((math.sqrt(dot(A[:, j], A[:, j])) for j in range(k)), default=0.0)
    tol = np.finfo(float).eps * max(n, k) * scale
    Q1, _ = _orthonormal_columns(A, tol)
    if Q1.shape[1] == 0:
        return np.zeros(k)
    c = np.array([dot(Q1[:, i], b) for i in range(Q1.shape[1])])
    W = np.array([[dot(Q1[:, i], A[:, j]) for j in range(k)] for i in range(Q1.shape[1])])
    Q2, R2 = _orthonormal_columns(W.T, tol)
    y = np.zeros(R2.shape[0])
    for i in range(y.size):  # R₂ᵀ y = c, forward substitution
        y[i] = (c[i] - sum(R2[p, i] * y[p] for p in range(i))) / R2[i, i]
    x: FloatArray = np.multiply(Q2, y).sum(axis=1)
    return x


def anderson_mix(X: FloatArray, F: FloatArray, beta: float) -> FloatArray:
    """Anderson mixing (type II, Walker & Ni 2011) of a damped fixed-point map: iterates X
    (rows x_0..x_m) and residuals F (rows g(x_k) − x_k); the step x_m + β f_m − (ΔX + β ΔF) γ
    with γ the least-squares solution of ΔF γ ≈ f_m (ΔX, ΔF the rows' differences)."""
    dX, dF = np.diff(X, axis=0), np.diff(F, axis=0)
    coef = lstsq(dF.T, F[-1])
    mixed: FloatArray = X[-1] + beta * F[-1] - np.multiply(dX + beta * dF, coef[:, None]).sum(axis=0)
    return mixed
