"""The client side of the FedPCS game as pure formulas (Yuan & Wang, Sec. IV-A, App. C).

Public functions take client-major arrays: ``alpha`` of shape ``(n_clients, T)`` (decisions
α^0..α^{T-1}, α^T = 0) or ``(n_clients, T+1)`` (α^T given explicitly), ``rho`` of shape
``(n_clients, T+1)``, per-round series ``phi`` and ``R`` of shape ``(T+1,)`` and per-client
``rho0``/``varphi`` of shape ``(n_clients,)``; a 1-D ``alpha`` is one client. The solvers use
the time-major engine :func:`evaluate` (arrays ``(T+1, m)``: one contiguous row per round) so
that the recursions over t are a handful of vector operations over all clients at once.

Every function whose result involves the inclusion probability P takes the sampling rule as
the keyword ``inclusion`` (:data:`Inclusion`, default ``"privacy"``, Eq. 14); the public ones
check it (ValueError), :func:`evaluate` and the solvers' engines trust what they are handed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.incentives.fedpcs import _kernels

__all__ = [
    "Inclusion",
    "client_utility",
    "client_utility_gradient",
    "client_utility_hessian",
    "costate",
    "inclusion_probability",
    "inclusion_probability_derivative",
    "inclusion_probability_second_derivative",
    "kkt_residual",
    "rho_next",
    "stage_payoff",
    "stationary_alpha",
    "trajectory",
]

FloatArray = NDArray[np.float64]

#: The sampling rule the clients face. ``"privacy"``: x_i = ρ_i/(Nφ), P = 1 − (1 − x)^K
#: (FedPCS Eq. 14). ``"uniform"``: x_i = 1/N whatever ρ is, so P = 1 − (1 − 1/N)^K is a
#: constant and P' = P'' = 0 — the game the clients of the Random baseline (and of every
#: baseline whose probabilities ignore ρ) play when they are in the game at all
#: (docs/fedpcs.md, 'Baseline budgets'). Every formula and solver that depends on it takes it
#: as the keyword ``inclusion`` (default ``"privacy"``) and hands it on to what it calls.
Inclusion = Literal["privacy", "uniform"]


def _check_inclusion(inclusion: object) -> Inclusion:
    """``inclusion`` if it names a sampling rule (:data:`Inclusion`), else ValueError. The
    public functions check it once on entry; the engines below them trust it."""
    if inclusion not in ("privacy", "uniform"):
        raise ValueError(f"inclusion: must be 'privacy' or 'uniform', got {inclusion!r}")
    return inclusion


def _uniform_p(N: int, K: int, inclusion: Inclusion = "privacy") -> float | None:
    """P = 1 − (1 − 1/N)^K under the uniform rule, else None."""
    if inclusion != "uniform":
        return None
    return -math.expm1(K * math.log1p(-1.0 / N)) if N > 1 else 1.0


# --------------------------------------------------------------------------------------------
# Inclusion probability (Sec. III-C, Eq. 14) and its derivatives
# --------------------------------------------------------------------------------------------


def _elementwise(kernel: str, x: FloatArray, out: FloatArray | None = None) -> FloatArray:
    """``_kernels.log1m`` or ``_kernels.neg_expm1`` over an array of any shape (into ``out``
    when given). Not NumPy's log1p/expm1: those run a SIMD routine on AVX-512
    hosts and the C library's on others, which differ in the last bit, and the game's solve
    compares costs, so a last bit could send the search another way on another CPU kind
    (docs/speed.md, "The same plan on every CPU kind")."""
    src = np.ascontiguousarray(x, dtype=float)
    direct = out is not None and out.flags.c_contiguous
    dst = out if direct else np.empty_like(src)
    assert dst is not None  # for mypy: out is not None when direct
    getattr(_kernels, kernel)(src.reshape(-1), dst.reshape(-1))
    if out is None or direct:
        return dst
    out[...] = dst  # a workspace's column slice: not contiguous
    return out


def _log1mx(rho: FloatArray, nphi: FloatArray) -> tuple[FloatArray, NDArray[np.bool_]]:
    """x = min(1, ρ/(Nφ)) (guarded: ρ/(Nφ) can exceed 1 while φ is not yet the true mean) as
    ``log(1 - x)`` and the mask ``ρ/(Nφ) < 1``."""
    x = rho / nphi
    inside = x < 1.0
    return _elementwise("log1m", np.minimum(x, 1.0)), inside


def inclusion_probability(rho: ArrayLike, phi: ArrayLike, N: int, K: int, *, inclusion: Inclusion = "privacy") -> FloatArray:
    """P = 1 − (1 − ρ/(N φ))^K: chance of being drawn at least once in K draws with
    replacement from x = ρ/(N φ) (FedPCS Sec. III-C, Eq. 14; x capped at 1).

    ``rho`` broadcasts against ``phi`` along the last axis (rounds). With
    ``inclusion="uniform"``: the constant 1 − (1 − 1/N)^K."""
    inclusion = _check_inclusion(inclusion)
    L, _ = _log1mx(np.asarray(rho, float), N * np.asarray(phi, float))
    pu = _uniform_p(N, K, inclusion)
    return _elementwise("neg_expm1", K * L) if pu is None else np.full(L.shape, pu)


def inclusion_probability_derivative(rho: ArrayLike, phi: ArrayLike, N: int, K: int, *, inclusion: Inclusion = "privacy") -> FloatArray:
    """P'(ρ) = (K/(N φ)) (1 − ρ/(N φ))^{K−1} (FedPCS Eqs. 52, 54);
    0 where the cap x = 1 binds, and everywhere with ``inclusion="uniform"`` (P constant)."""
    inclusion = _check_inclusion(inclusion)
    nphi = N * np.asarray(phi, float)
    L, inside = _log1mx(np.asarray(rho, float), nphi)
    if _uniform_p(N, K, inclusion) is not None:
        return np.zeros(np.broadcast_shapes(L.shape, nphi.shape))
    # (1 − x)^{K−1} = 1 − (1 − e^{(K−1) L}): host-independent (:func:`_elementwise`)
    out = (K / nphi) * (1.0 - _elementwise("neg_expm1", (K - 1) * L) if K > 1 else np.ones_like(L))
    return np.where(inside, out, 0.0)


def inclusion_probability_second_derivative(
    rho: ArrayLike, phi: ArrayLike, N: int, K: int, *, inclusion: Inclusion = "privacy"
) -> FloatArray:
    """P''(ρ) = −K(K−1)/(N φ)² (1 − ρ/(N φ))^{K−2} (derivative of Eq. 52's P'); used by the
    exact Newton step of the best response. 0 with ``inclusion="uniform"`` (P constant)."""
    inclusion = _check_inclusion(inclusion)
    nphi = N * np.asarray(phi, float)
    L, inside = _log1mx(np.asarray(rho, float), nphi)
    if K < 2 or _uniform_p(N, K, inclusion) is not None:
        return np.zeros(np.broadcast_shapes(L.shape, nphi.shape))
    out = -(K * (K - 1) / nphi**2) * (1.0 - _elementwise("neg_expm1", (K - 2) * L) if K > 2 else np.ones_like(L))
    return np.where(inside, out, 0.0)


# --------------------------------------------------------------------------------------------
# Dynamics (Eq. 20) and payoff (Eqs. 14-15)
# --------------------------------------------------------------------------------------------


def rho_next(alpha: ArrayLike, rho: ArrayLike, phi_t: ArrayLike) -> FloatArray:
    """ρ_i^{t+1} = (1 − α_i^t) φ(t) + α_i^t ρ_i^t (FedPCS Eq. 20; Eq. 15 with the mean-field
    term)."""
    a = np.asarray(alpha, float)
    nxt: FloatArray = (1.0 - a) * np.asarray(phi_t, float) + a * np.asarray(rho, float)
    return nxt


def _horizon(phi: ArrayLike) -> tuple[FloatArray, int]:
    p = np.asarray(phi, float)
    if p.ndim != 1 or p.size < 2:
        raise ValueError(f"phi: expected a list of T+1 >= 2 values, got shape {p.shape}")
    return p, p.size - 1


def _split_alpha(alpha: ArrayLike, T: int) -> tuple[FloatArray, FloatArray, bool, bool]:
    """``alpha`` (n, T) or (n, T+1) → (decisions (n, T), α^T (n,), had_T_column, was_1d)."""
    a = np.asarray(alpha, float)
    one = a.ndim == 1
    a2 = a[None, :] if one else a
    if a2.ndim != 2 or a2.shape[1] not in (T, T + 1):
        raise ValueError(f"alpha: expected shape (n_clients, T) or (n_clients, T+1) with T = {T}, got {a.shape}")
    full = a2.shape[1] == T + 1
    dec = a2[:, :T]
    aT = a2[:, T] if full else np.zeros(a2.shape[0])
    return dec, aT, full, one


def _per_client(value: ArrayLike, n: int) -> FloatArray:
    return np.broadcast_to(np.asarray(value, float), (n,)).astype(float)


def trajectory(alpha: ArrayLike, rho0: ArrayLike, phi: ArrayLike) -> FloatArray:
    """ρ_i^0..ρ_i^T from Eq. (20) given α_i^0..α_i^{T−1} (a column α^T is ignored)."""
    p, T = _horizon(phi)
    dec, _, _, one = _split_alpha(alpha, T)
    rho = _trajectory_tm(np.ascontiguousarray(dec.T), _per_client(rho0, dec.shape[0]), p).T
    return rho[0] if one else rho


def stage_payoff(rho: ArrayLike, alpha: ArrayLike, R: ArrayLike, varphi: ArrayLike) -> FloatArray:
    """g_i^t = ρ_i^t R_t − ϕ_i (ρ_i^t)² − (1−ϕ_i)(α_i^t)² (FedPCS Eq. 14; paid R_t ρ, privacy
    cost ϕρ², correction cost (1−ϕ)α²). ``varphi`` broadcasts per client (last axis = rounds)."""
    r = np.asarray(rho, float)
    a = np.asarray(alpha, float)
    v = np.asarray(varphi, float)
    if v.ndim:
        v = v[..., None]
    g: FloatArray = r * np.asarray(R, float) - v * r**2 - (1.0 - v) * a**2
    return g


# --------------------------------------------------------------------------------------------
# Time-major engine: one forward pass (ρ, P, g) and one backward pass (λ)
# --------------------------------------------------------------------------------------------


class Workspace:
    """Reusable scratch arrays for :func:`evaluate`.

    Solvers call :func:`evaluate` thousands of times on (T+1, m) arrays of a few MB; fresh
    allocations of that size are page-faulted in on every call and cost more than the
    arithmetic. Buffers grow to the largest m seen and are handed out as views ``[:, :m]``.
    Arrays in an :class:`Evaluation` produced with a workspace alias it: copy what must
    survive the next call on the same workspace."""

    def __init__(self) -> None:
        self._buf: dict[str, FloatArray] = {}

    def get(self, name: str, rows: int, m: int) -> FloatArray:
        b = self._buf.get(name)
        if b is None or b.shape[0] != rows or b.shape[1] < m:
            b = np.empty((rows, m))
            self._buf[name] = b
        return b[:, :m]


def _trajectory_tm(a: FloatArray, rho0: FloatArray, phi: FloatArray, out: FloatArray | None = None) -> FloatArray:
    T, m = a.shape
    rho = np.empty((T + 1, m)) if out is None else out
    _kernels.trajectory(a, rho0, phi, rho)
    return rho


@dataclass
class Evaluation:
    """Everything one forward/backward pass produces (time-major, m problems)."""

    rho: FloatArray  # (T+1, m)
    P: FloatArray  # (T+1, m) inclusion probability
    dP: FloatArray  # (T+1, m) P'(ρ)
    g: FloatArray  # (T+1, m) stage payoff
    S: FloatArray  # (T+1, m) ∂(P g)/∂ρ
    lam: FloatArray  # (T+1, m) costate λ(t)
    U: FloatArray  # (m,) utility
    grad: FloatArray  # (T, m) ∂U/∂α^t, t < T
    f2: FloatArray | None = None  # (T+1, m) ∂²(P g)/∂ρ²


def evaluate(
    a: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    aT: FloatArray | None = None,
    second: bool = False,
    need_grad: bool = True,
    costate_only: bool = False,
    ws: Workspace | None = None,
    inclusion: Inclusion = "privacy",
) -> Evaluation:
    """Utility, adjoint gradient (and second-order terms) for m independent problems.

    ``a``: decisions (T, m); ``rho0``, ``varphi``: (m,); ``phi``, ``R``: (T+1,).
    Implements FedPCS Eqs. 49-54: S = P' g + P (R − 2ϕρ) (= Q R + M, with Theorem 1's M
    corrected by the factor K/(Nφ) that Eqs. 52 and 54 carry),
    λ(T) = S(T), λ(t) = α^t λ(t+1) + S(t) (Eqs. 53-54), ∂U/∂α^t = −2(1−ϕ)P^t α^t +
    λ(t+1)(ρ^t − φ(t)) (Eq. 49); with ``second`` also f'' = ∂²(P g)/∂ρ² =
    P'' g + 2P'(R − 2ϕρ) − 2ϕP for the Newton step. ``costate_only``: stop after λ (U and
    the gradient are left empty; the damped sweep needs only ρ, P and λ). ``inclusion``: the
    sampling rule (:data:`Inclusion`; not checked here — the public functions check it);
    with ``"uniform"`` P is the constant of :func:`_uniform_p` and P' = 0."""
    T, m = a.shape
    w = Workspace() if ws is None else ws
    n1 = T + 1
    rho = _trajectory_tm(a, rho0, phi, w.get("rho", n1, m))
    nphi = (N * phi)[:, None]
    x = np.divide(rho, nphi, out=w.get("x", n1, m))
    all_inside = bool((x < 1.0).all())
    inside = None if all_inside else x < 1.0
    if not all_inside:
        np.minimum(x, 1.0, out=x)
    u = np.subtract(1.0, x, out=w.get("u", n1, m))  # 1 − x
    P = w.get("P", n1, m)
    dP = w.get("dP", n1, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = _elementwise("log1m", x, out=x)  # not NumPy's log1p and expm1: _elementwise
        np.multiply(L, K, out=P)
        _elementwise("neg_expm1", P, out=P)
        # P' = (K/(Nφ)) (1 − x)^{K−1} = (K/(Nφ)) (1 − P)/(1 − x): one transcendental less
        np.subtract(1.0, P, out=dP)
        np.divide(dP, u, out=dP)
        dP *= K / nphi
        if inside is not None:
            dP[~inside] = 0.0
    pu = _uniform_p(N, K, inclusion)
    if pu is not None:
        P.fill(pu)
        dP.fill(0.0)
    c = 1.0 - varphi
    # g = ρ R − ϕ ρ² − (1−ϕ) α²
    mr = np.multiply(rho, varphi, out=w.get("mr", n1, m))
    np.subtract(R[:, None], mr, out=mr)  # R − ϕρ
    g = np.multiply(rho, mr, out=w.get("g", n1, m))
    tmp = np.multiply(a, a, out=w.get("tmp", T, m))
    tmp *= c
    g[:T] -= tmp
    if aT is not None:
        g[T] -= c * aT * aT
    # Σ_t P g as products summed row by row (einsum's SIMD loop fuses multiply-adds in
    # vector bodies whose length depends on the CPU kind: other last bits there)
    U = np.empty(0) if costate_only else np.multiply(P, g, out=w.get("Pg", n1, m)).sum(axis=0)
    if not need_grad and not second:
        empty = np.empty((0, m))
        return Evaluation(rho, P, dP, g, empty, empty, U, empty)
    tmp1 = np.multiply(rho, varphi, out=w.get("tmp1", n1, m))
    mr -= tmp1  # R − 2ϕρ
    S = np.multiply(dP, g, out=w.get("S", n1, m))
    np.multiply(P, mr, out=tmp1)
    S += tmp1
    lam = w.get("lam", n1, m)
    _kernels.costate(a, S, lam)
    if costate_only:
        return Evaluation(rho, P, dP, g, S, lam, U, np.empty((0, m)))
    grad = np.subtract(rho[:T], phi[:T, None], out=w.get("grad", T, m))
    grad *= lam[1:]
    np.multiply(P[:T], a, out=tmp)
    tmp *= 2.0 * c
    grad -= tmp
    f2 = None
    if second:
        f2 = np.multiply(dP, mr, out=w.get("f2", n1, m))
        f2 *= 2.0
        np.multiply(P, 2.0 * varphi, out=tmp1)
        f2 -= tmp1
        if K > 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                np.divide(dP, u, out=tmp1)  # (K/(Nφ)) (1 − x)^{K−2}
            tmp1 *= -(K - 1) / nphi  # P''
            if inside is not None:
                tmp1[~inside] = 0.0
            tmp1 *= g
            f2 += tmp1
    return Evaluation(rho, P, dP, g, S, lam, U, grad, f2)


def _evaluate_public(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    second: bool = False,
    inclusion: Inclusion = "privacy",
) -> tuple[Evaluation, FloatArray, FloatArray, bool, bool]:
    """:func:`evaluate` on the public functions' client-major arguments, ``inclusion``
    checked."""
    inclusion = _check_inclusion(inclusion)
    p, T = _horizon(phi)
    dec, aT, full, one = _split_alpha(alpha, T)
    n = dec.shape[0]
    Rv = np.broadcast_to(np.asarray(R, float), (T + 1,)).astype(float)
    ev = evaluate(
        np.ascontiguousarray(dec.T),
        _per_client(rho0, n),
        _per_client(varphi, n),
        p,
        Rv,
        int(N),
        int(K),
        aT=aT,
        second=second,
        inclusion=inclusion,
    )
    return ev, dec, aT, full, one


def client_utility(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    inclusion: Inclusion = "privacy",
) -> FloatArray | float:
    """U_i(α_i) = Σ_{t=0}^{T} P_i^t g_i^t along the trajectory of Eq. (20) (FedPCS Eqs. 14,
    19). Returns one value per client (a float for a 1-D ``alpha``)."""
    ev, *_, one = _evaluate_public(alpha, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    return float(ev.U[0]) if one else ev.U


def costate(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """λ_i(t), t = 0..T: λ(T) = S(T), λ(t) = α^t λ(t+1) + S(t) with
    S = Q R + M, Q = P + ρP', M = −2ϕρP − P'(ϕρ² + (1−ϕ)α²) (FedPCS Eqs. 53-54, M corrected
    by the factor K/(Nφ) that Eqs. 52 and 54 carry and Theorem 1's M lacks). λ(t) = dU/dρ^t."""
    ev, *_, one = _evaluate_public(alpha, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    lam = ev.lam.T
    return lam[0] if one else lam


def client_utility_gradient(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """Exact adjoint gradient ∂U_i/∂α_i^t = −2(1−ϕ_i) P_i^t α_i^t + λ_i(t+1)(ρ_i^t − φ(t))
    (FedPCS Eq. 49 with Eqs. 53-54, M corrected by the factor K/(Nφ)). Same shape as
    ``alpha``; the α^T entry (if given) is −2(1−ϕ)P^T α^T."""
    ev, dec, aT, full, one = _evaluate_public(alpha, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    grad = ev.grad.T
    if full:
        c = 1.0 - _per_client(varphi, dec.shape[0])
        grad = np.concatenate([grad, (-2.0 * c * ev.P[-1] * aT)[:, None]], axis=1)
    return grad[0] if one else grad


def client_utility_hessian(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """Dense Hessian ∂²U_i/∂α^t∂α^u over the decisions t, u < T (shape (n, T, T)).

    H = Dᵀ diag(f'') D − diag(2(1−ϕ)P) + C + Cᵀ with D[s,u] = ∂ρ^s/∂α^u =
    (ρ^u − φ(u)) Π_{r=u+1}^{s−1} α^r, f'' = ∂²(P g)/∂ρ² and C[t,u] = (λ(t+1) −
    2(1−ϕ)P'(ρ^t)α^t) D[t,u] for t > u. A check on the solver's Newton step, O(n T³)."""
    ev, dec, _, _, one = _evaluate_public(alpha, rho0, varphi, phi, R, N, K, second=True, inclusion=inclusion)
    assert ev.f2 is not None
    n, T = dec.shape
    p = np.asarray(phi, float)
    D = np.zeros((n, T + 1, T))
    for u in range(T):
        D[:, u + 1, u] = ev.rho[u] - p[u]
        for s in range(u + 2, T + 1):
            D[:, s, u] = D[:, s - 1, u] * dec[:, s - 1]
    H = np.einsum("nsu,sn,nsv->nuv", D, ev.f2, D)
    c = 1.0 - _per_client(varphi, n)
    coef = ev.lam[1:].T - 2.0 * c[:, None] * ev.dP[:T].T * dec  # (n, T), indexed by t
    C = coef[:, :, None] * D[:, :T, :]  # C[t, u] = coef_t D[t, u], zero unless t > u
    H += C + C.transpose(0, 2, 1)
    idx = np.arange(T)
    H[:, idx, idx] -= 2.0 * c[:, None] * ev.P[:T].T
    res: FloatArray = H[0] if one else H
    return res


def stationary_alpha(
    alpha: ArrayLike,
    rho0: ArrayLike,
    varphi: ArrayLike,
    phi: ArrayLike,
    R: ArrayLike,
    N: int,
    K: int,
    *,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """Right-hand side of Theorem 1 projected on [0, 1]:
    clip(λ(t+1)(ρ^t − φ(t)) / (2(1−ϕ)P^t), 0, 1), t < T (FedPCS Eqs. 21, 51). At a KKT
    point α equals this map (an implicit condition: λ(t+1) depends on α^t)."""
    ev, dec, _, _, one = _evaluate_public(alpha, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    p = np.asarray(phi, float)
    c = 1.0 - _per_client(varphi, dec.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        new = ev.lam[1:] * (ev.rho[:-1] - p[:-1, None]) / (2.0 * c * ev.P[:-1])
    out = np.clip(np.nan_to_num(new), 0.0, 1.0).T
    res: FloatArray = out[0] if one else out
    return res


def kkt_residual(alpha: ArrayLike, grad: ArrayLike) -> FloatArray | float:
    """r_KKT = max_t |clip(α^t + ∂U/∂α^t, 0, 1) − α^t| (projected gradient of the box
    [0, 1]^T). One value per client."""
    a = np.asarray(alpha, float)
    r = np.abs(np.clip(a + np.asarray(grad, float), 0.0, 1.0) - a)
    out = r.max(axis=-1) if r.size else np.zeros(r.shape[:-1])
    return float(out) if np.ndim(out) == 0 else out
