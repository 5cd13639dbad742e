"""Convergence bounds of FedPCS as reference formulas (Theorem 4, Proposition 3, Theorem 5;
Eqs. 25-29, 71). Pure functions of their named constants, for plotting and
sanity checks; the training loop does not use them."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fedgame.core.validate import check_population, check_positive

__all__ = [
    "bound_prop3",
    "bound_thm4_convex",
    "bound_thm4_nonconvex",
    "bound_thm5_error",
    "bound_thm5_rate",
    "noisy_update_bound",
    "participation_factor",
]


def participation_factor(N: int, K: int, rho_min: float, rho_max: float) -> float:
    """Γ = [(N−1)ρ_H + ρ_L] / (K ρ_L) ≥ 1/(K x_i^t), from
    ρ_L/((N−1)ρ_H + ρ_L) ≤ x_i^t ≤ ρ_H/((N−1)ρ_L + ρ_H) (Eq. 71)."""
    N, K = check_population(N, K)
    rl = check_positive("rho_min", rho_min)
    rh = check_positive("rho_max", rho_max)
    if rh < rl:
        raise ValueError(f"rho_max: must be >= rho_min = {rl:g}, got {rh:g}")
    return ((N - 1) * rh + rl) / (K * rl)


def noisy_update_bound(D: float, d: int, K: int, W: float, rho_min: float, total_size: float) -> float:
    """E₀ = D² + 2 d K W² / (ρ_L (Σ_i |D_i|)²): bound on E‖g̃‖² (gradient bound D plus the
    Gaussian noise at the smallest budget; Theorem 4)."""
    return D**2 + 2.0 * d * K * W**2 / (check_positive("rho_min", rho_min) * check_positive("total_size", total_size) ** 2)


def bound_thm4_convex(
    *,
    T: int,
    eta: float,
    psi: float,
    beta: float,
    D: float,
    d: int,
    W: float,
    N: int,
    K: int,
    rho_min: float,
    rho_max: float,
    total_size: float,
    init_gap: float,
) -> float:
    """Theorem 4, strongly convex case (Eq. 25):
    E‖w(T)−w*‖² ≤ (1−ψηΓ)^T E‖w(0)−w*‖² + Σ_{s<T} (1−ψηΓ)^s {βD²η³Γ + η²Γ²E₀ + βη³Γ³E₀}."""
    G = participation_factor(N, K, rho_min, rho_max)
    E0 = noisy_update_bound(D, d, K, W, rho_min, total_size)
    q = 1.0 - psi * eta * G
    geo = float(np.sum(q ** np.arange(T)))
    return q**T * init_gap + geo * (beta * D**2 * eta**3 * G + eta**2 * G**2 * E0 + beta * eta**3 * G**3 * E0)


def bound_thm4_nonconvex(
    *,
    T: int,
    eta: float,
    g_norm: float,
    beta: float,
    D: float,
    d: int,
    W: float,
    N: int,
    K: int,
    rho_min: float,
    rho_max: float,
    total_size: float,
    init_gap: float,
) -> float:
    """Theorem 4, non-convex case with subgradient norm ‖g‖ (Eq. 26):
    (1 + 2Tη‖g‖Γ) E‖w(0)−w*‖² + Tβη³Γ³E₀ + Tη²Γ²((T−1)‖g‖D + E₀) + TβD²η³Γ."""
    G = participation_factor(N, K, rho_min, rho_max)
    E0 = noisy_update_bound(D, d, K, W, rho_min, total_size)
    return (
        (1.0 + 2.0 * T * eta * g_norm * G) * init_gap
        + T * beta * eta**3 * G**3 * E0
        + T * eta**2 * G**2 * ((T - 1) * g_norm * D + E0)
        + T * beta * D**2 * eta**3 * G
    )


def bound_prop3(
    *,
    eta: float,
    kappa: float,
    grad_norm_sq: float,
    beta: float,
    d: int,
    D: float,
    M: float,
    K: int,
    theta: ArrayLike,
    sigma2: ArrayLike,
    x: ArrayLike,
) -> float:
    """Proposition 3, one-round progress (Eq. 27):
    E[F(w(t)) − F(w(t−1))] ≤ −(ηκ/2)‖∇F(w(t−1))‖² + (dβη²/2) Σ_i θ_i² σ_i²(t−1)
    + (βη/(2K)) Σ_i (θ_i²/x_i^t)(D² + d σ_i²(t−1)) + M β η² N / 2. Arrays per client."""
    th = np.asarray(theta, float)
    s2 = np.asarray(sigma2, float)
    xx = np.asarray(x, float)
    N = th.size
    return float(
        -0.5 * eta * kappa * grad_norm_sq
        + 0.5 * d * beta * eta**2 * np.sum(th**2 * s2)
        + beta * eta / (2.0 * K) * np.sum(th**2 / xx * (D**2 + d * s2))
        + 0.5 * M * beta * eta**2 * N
    )


def _per_round(name: str, value: ArrayLike, T: int, n: int) -> np.ndarray:
    arr = np.asarray(value, float)
    try:
        return np.broadcast_to(arr, (T, n))
    except ValueError:
        raise ValueError(f"{name}: expected shape (T, n) = ({T}, {n}) or broadcastable, got {arr.shape}") from None


def bound_thm5_rate(
    *,
    T: int,
    eta: float,
    mu: float,
    kappa: float,
    beta: float,
    M: float,
    K: int,
    D: float,
    d: int,
    theta: ArrayLike,
    x: ArrayLike,
    sigma2: ArrayLike,
    init_gap: float,
) -> float:
    """Theorem 5, convergence rate (Eq. 28): E[F(w(T))] − F* ≤ (1−μηκ)^T (E F(w(0)) − F*)
    + (βη/2) Σ_{t<T} (1−μηκ)^t [M N η + Σ_i (θ_i²D²/(K x_i^t) + (1/(K x_i^t) + η) d θ_i²
    σ_i²(t))]. ``x``, ``sigma2``: (T, n) for t = 0..T−1 (or broadcastable)."""
    th = np.asarray(theta, float)
    n = th.size
    xx, s2 = _per_round("x", x, T, n), _per_round("sigma2", sigma2, T, n)
    q = 1.0 - mu * eta * kappa
    inner = M * n * eta + np.sum(th**2 * D**2 / (K * xx) + (1.0 / (K * xx) + eta) * d * th**2 * s2, axis=1)
    return float(q**T * init_gap + 0.5 * beta * eta * np.sum(q ** np.arange(T) * inner))


def bound_thm5_error(
    *,
    T: int,
    eta: float,
    kappa: float,
    beta: float,
    M: float,
    K: int,
    D: float,
    d: int,
    theta: ArrayLike,
    x: ArrayLike,
    sigma2: ArrayLike,
    init_gap: float,
) -> float:
    """Theorem 5, convergence error (Eq. 29): (1/T) Σ_t E‖∇F(w(t))‖² ≤
    2/(ηκT) (E F(w(0)) − F*) + (βη/(2T)) Σ_{t<T} [Mβη²N/2 + Σ_i (θ_i²/(K x_i^t))(D² +
    d σ_i²(t)) + d η θ_i² σ_i²(t)]."""
    th = np.asarray(theta, float)
    n = th.size
    xx, s2 = _per_round("x", x, T, n), _per_round("sigma2", sigma2, T, n)
    inner = 0.5 * M * beta * eta**2 * n + np.sum(th**2 / (K * xx) * (D**2 + d * s2) + d * eta * th**2 * s2, axis=1)
    return float(2.0 / (eta * kappa * T) * init_gap + beta * eta / (2.0 * T) * np.sum(inner))
