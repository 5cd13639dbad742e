"""QI-DPFL: quality-aware screening and the reward/privacy Stackelberg game, pure maths.

W. Yuan, X. Wang, "QI-DPFL: Quality-Aware and Incentive-Boosted Federated Learning with
Differential Privacy" (Sec. III-A screening; Secs. III-B and IV the game). Where the paper is
garbled, inconsistent or silent, each function's docstring states the reading it implements.
Pure NumPy/SciPy, no training. Paper equation → function:

=================================  ==========================================================
Eq. 11, Sec. III-A                  :func:`label_emd`, :func:`reference_distribution`,
                                    :func:`screen`
Eqs. 16-17                          :func:`client_utility`
Eq. 23                              :func:`best_response`
Eqs. 20, 25, Theorem 1 (+ S)*       :func:`participants`, :func:`participation_loop`,
                                    :func:`equilibrium_slopes`, :func:`client_equilibrium`
Eq. 31 (numerical check)            :func:`deviation_gains`
Eq. 15                              :func:`server_round_cost`
Eqs. 26-29, Theorem 2               :func:`theorem2_constant`, :func:`reward_cost`,
                                    :func:`optimal_reward`
Sec. IV-B, Eqs. 32-33               :class:`AccuracyCurve`, :func:`fit_accuracy_curve`,
                                    :func:`reward_range`
Sec. V-B (reward policies)          :func:`qidpfl_reward`, :func:`max_reward`,
                                    :func:`random_reward`, :func:`calibrate_acc_scale`
Algorithm 1, offline game loop      :func:`reward_schedule`
Def. 2, Eqs. 30-31                  :func:`stackelberg_check`
Algorithm 1 (game part)             :func:`solve_qidpfl_game` → :class:`QIDPFLOutcome`
=================================  ==========================================================

* Theorem 1's closed form (Eq. 20) assumes every client's budget is positive; fedgame computes
the equilibrium with a participation set S (clients whose privacy is too costly choose ρ = 0),
the unique equilibrium of this contest (Yang et al., MobiCom 2012).

Conventions: clients are 0-based (the paper numbers them 1..N); rounds are t = 1..T, as Eq. 15
sums them (Algorithm 1's loop over t = 0..T is read as T rounds); κ_i^t = φ_1 ν_i^t is the
marginal privacy cost. ν may be one value per client (constant over rounds; the experiments say
nothing of ν over time) or an (N, T) array. Every error names the field, the allowed range and
the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import curve_fit

from fedgame.core.validate import check_positive, check_unit_open

__all__ = [
    "AccuracyCurve",
    "ClientEquilibrium",
    "CurveFit",
    "QIDPFLOutcome",
    "RewardPolicy",
    "RewardSchedule",
    "ScreeningResult",
    "ServerParams",
    "StackelbergCheck",
    "best_response",
    "calibrate_acc_scale",
    "client_equilibrium",
    "client_utility",
    "deviation_gains",
    "equilibrium_slopes",
    "fit_accuracy_curve",
    "label_emd",
    "max_reward",
    "optimal_reward",
    "participants",
    "participation_loop",
    "qidpfl_reward",
    "random_reward",
    "reference_distribution",
    "reward_cost",
    "reward_range",
    "reward_schedule",
    "screen",
    "server_round_cost",
    "solve_qidpfl_game",
    "stackelberg_check",
    "theorem2_constant",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Reference = Literal["pooled", "uniform"] | ArrayLike


@overload
def _ro(x: ArrayLike) -> FloatArray: ...
@overload
def _ro(x: ArrayLike, dtype: type[np.float64]) -> FloatArray: ...
@overload
def _ro(x: ArrayLike, dtype: type[np.int64]) -> IntArray: ...
def _ro(x: ArrayLike, dtype: type = np.float64) -> NDArray[np.generic]:
    arr: NDArray[np.generic] = np.array(x, dtype=dtype, copy=True)
    arr.setflags(write=False)
    return arr


def _fmt(x: float) -> str:
    return f"{float(x):.10g}"


# ============================================================================================
# Screening by label EMD (Sec. III-A, Eq. 11)
# ============================================================================================


def _label_counts(label_counts: ArrayLike, name: str = "label_counts") -> FloatArray:
    m = np.asarray(label_counts, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 2:
        raise ValueError(f"{name}: expected an H x P table of class counts (P >= 2 classes), got shape {m.shape}")
    bad = np.argwhere(~(np.isfinite(m) & (m >= 0)))
    if bad.size:
        h, j = (int(v) for v in bad[0])
        raise ValueError(f"{name}[{h}][{j}]: must be a count >= 0, got {_fmt(m[h, j])}")
    empty = np.flatnonzero(m.sum(axis=1) <= 0)
    if empty.size:
        raise ValueError(f"{name}[{int(empty[0])}]: must have a positive total (|D_h| > 0), got all zeros")
    return m


def reference_distribution(label_counts: ArrayLike, reference: Reference = "pooled") -> FloatArray:
    """The reference ("actual") label distribution P_a of Eq. 11 (the paper gives no value).

    ``"pooled"`` (default): P_a(j) = Σ_h m_{h,j} / Σ_h Σ_k m_{h,k}, the label distribution of the
    union of all candidates' data (= the |D_h|-weighted mean of their distributions);
    ``"uniform"``: 1/P; or an explicit vector of P non-negative weights (normalised here, so a
    histogram such as the test set's class counts is accepted)."""
    return _reference(_label_counts(label_counts), reference)


def _reference(m: FloatArray, reference: Reference) -> FloatArray:
    P = m.shape[1]
    if isinstance(reference, str):
        if reference == "pooled":
            col = m.sum(axis=0)
            return np.asarray(col / col.sum(), dtype=np.float64)
        if reference == "uniform":
            return np.full(P, 1.0 / P)
        raise ValueError(f'reference: must be "pooled", "uniform" or a list of P = {P} weights, got {reference!r}')
    q = np.asarray(reference, dtype=np.float64)
    if q.ndim != 1 or q.size != P:
        got = q.size if q.ndim == 1 else f"shape {q.shape}"
        raise ValueError(f"reference: must have P = {P} values (one per class, as label_counts), got {got}")
    bad = np.flatnonzero(~(np.isfinite(q) & (q >= 0)))
    if bad.size:
        raise ValueError(f"reference[{int(bad[0])}]: must be >= 0, got {_fmt(q[bad[0]])}")
    if q.sum() <= 0:
        raise ValueError("reference: must have a positive total, got all zeros")
    return np.asarray(q / q.sum(), dtype=np.float64)


def label_emd(label_counts: ArrayLike, reference: Reference = "pooled") -> FloatArray:
    """θ_h = Σ_j |P_h(j) − P_a(j)| for every candidate h (Eq. 11), shape (H,), in [0, 2].

    P_h(j) = m_{h,j} / |D_h|. This is the L1 distance of the label histograms, i.e. 2·W_1 with
    the discrete ground distance 1[j ≠ k] (total variation) — not the ordinal 1-D Wasserstein
    distance over class indices, which would depend on the arbitrary class numbering (labels are
    nominal). Vectorised over H candidates × P classes."""
    return _emd(_label_counts(label_counts), reference)[0]


def _emd(m: FloatArray, reference: Reference) -> tuple[FloatArray, FloatArray]:
    p_ref = _reference(m, reference)
    p = m / m.sum(axis=1, keepdims=True)
    return np.asarray(np.abs(p - p_ref).sum(axis=1), dtype=np.float64), p_ref


@dataclass(frozen=True)
class ScreeningResult:
    """Outcome of the screening layer (Sec. III-A): θ per candidate, the kept candidates (ascending
    indices, i.e. order preserved), the threshold used, and the reference distribution."""

    emd: FloatArray
    kept: IntArray
    theta_th: float
    p_ref: FloatArray

    @property
    def n_selected(self) -> int:
        return int(self.kept.size)


def _keep_count(q: float, H: int) -> int:
    """⌈qH⌉ without the float artefact ⌈0.3·10⌉ = ⌈3.0000000000000004⌉ = 4."""
    return max(1, min(H, math.ceil(round(q * H, 9))))


def screen(
    label_counts: ArrayLike,
    *,
    reference: Reference = "pooled",
    theta_th: float | None = None,
    keep_fraction: float | None = None,
    min_kept: int = 2,
) -> ScreeningResult:
    """Quality-aware screening (Sec. III-A, Alg. 1 lines 3-8).

    Give exactly one of ``theta_th`` (keep h iff θ_h ≤ θ_th — the text's rule, which excludes
    only θ_h > θ_th, where Algorithm 1 line 5 writes θ_h < θ_th; θ_th = inf keeps everyone, the
    FedAvg-DP baseline, read as QI-DPFL without screening) and ``keep_fraction`` q ∈ (0, 1]
    (keep exactly the ⌈qH⌉ smallest θ, ties broken by the lower index; the reported θ_th is the
    largest kept θ, so a candidate with θ = θ_th may be left out in this mode only). Fewer than
    ``min_kept`` = 2 kept clients raise ``ValueError`` (the game has no equilibrium for N = 1:
    any ρ > 0 wins the whole reward)."""
    emd, p_ref = _emd(_label_counts(label_counts), reference)
    H = emd.size
    if (theta_th is None) == (keep_fraction is None):
        raise ValueError("theta_th, keep_fraction: give exactly one of them")
    if theta_th is not None:
        th = float(theta_th)
        if math.isnan(th) or th < 0:
            raise ValueError(f"theta_th: must be >= 0 (or inf to keep everyone), got {theta_th!r}")
        kept = np.flatnonzero(emd <= th).astype(np.int64)
    else:
        assert keep_fraction is not None  # exactly one of theta_th, keep_fraction is given (checked above)
        q = float(keep_fraction)
        if not 0.0 < q <= 1.0:
            raise ValueError(f"keep_fraction: must be in (0, 1], got {keep_fraction!r}")
        k = _keep_count(q, H)
        order = np.argsort(emd, kind="stable")  # stable: equal θ → lower index first
        kept = np.sort(order[:k]).astype(np.int64)
        th = float(emd[kept].max())
    if kept.size < min_kept:
        raise ValueError(f"screening kept N = {kept.size} client(s); the game needs at least {min_kept}")
    return ScreeningResult(emd=_ro(emd), kept=_ro(kept, np.int64), theta_th=th, p_ref=_ro(p_ref))


# ============================================================================================
# Stage II (Sec. IV-A): utilities, best responses and the equilibrium with a participation set
# ============================================================================================


def _kappa(nu: ArrayLike, phi1: float, name: str = "nu") -> FloatArray:
    """κ = φ_1 ν with ν > 0 finite, 1-D (N,) or 2-D (N, T), N ≥ 2 (no equilibrium for N = 1)."""
    p = check_positive("phi1", phi1)
    v = np.asarray(nu, dtype=np.float64)
    if v.ndim not in (1, 2) or v.shape[0] < 2:
        raise ValueError(f"{name}: expected one value per client (at least 2 clients; or N x T), got shape {v.shape}")
    bad = np.argwhere(~(np.isfinite(v) & (v > 0)))
    if bad.size:
        idx = "".join(f"[{int(i)}]" for i in bad[0])
        raise ValueError(f"{name}{idx}: must be > 0 (privacy value), got {_fmt(v[tuple(bad[0])])}")
    return p * v


def _reward(R: float, name: str = "R") -> float:
    return check_positive(name, R, strict=False)


def client_utility(x: ArrayLike, others: ArrayLike, R: float, kappa: ArrayLike, fixed_cost: ArrayLike = 0.0) -> FloatArray:
    """U_i = R·x/(x + X) − κ_i x − K_i with X = Σ_{j≠i} ρ_j (Eqs. 16-17; the data, computation
    and communication costs of Eq. 17 do not depend on ρ and enter as the constant K_i); share 0
    at x = 0.

    Broadcasts over clients and candidate budgets ``x``."""
    x = np.asarray(x, dtype=np.float64)
    X = np.asarray(others, dtype=np.float64)
    tot = x + X
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(x > 0, x / np.where(tot > 0, tot, 1.0), 0.0)
    return np.asarray(R * share - np.asarray(kappa) * x - np.asarray(fixed_cost), dtype=np.float64)


def best_response(others: ArrayLike, R: float, kappa: ArrayLike) -> FloatArray:
    """BR_i(X) = max(0, sqrt(R X / κ_i) − X) for X = Σ_{j≠i} ρ_j > 0 (Eq. 23, from Eq. 21's
    first-order condition; U_i is strictly concave for X > 0, Eq. 22). X = 0 has no best
    response (any ρ_i > 0 wins R); it is returned as 0."""
    X = np.asarray(others, dtype=np.float64)
    return np.asarray(np.maximum(0.0, np.sqrt(R * X / np.asarray(kappa)) - X), dtype=np.float64)


def participants(kappa: ArrayLike) -> NDArray[np.bool_]:
    """Participation set of the Stage II equilibrium (Theorem 1 extended to clients who choose
    ρ = 0; Yang et al. 2012), O(N log N).

    Sort κ ascending (stable); S is the longest prefix {1..n} (n ≥ 2) with
    κ_(k)·(k−1) < Σ_{j≤k} κ_(j) for every k ≤ n. Works column-wise on an (N, T) array
    (one set per round). Returns a boolean mask in the original order."""
    k = np.asarray(kappa, dtype=np.float64)
    N = k.shape[0]
    order = np.argsort(k, axis=0, kind="stable")
    ks = np.take_along_axis(k, order, axis=0)
    cs = np.cumsum(ks, axis=0)
    idx = np.arange(N, dtype=np.float64).reshape((N,) + (1,) * (k.ndim - 1))  # k − 1
    ok = ks * idx < cs
    n = np.where(ok.all(axis=0), N, np.argmin(ok, axis=0))
    inside = idx < n
    mask = np.zeros(k.shape, dtype=bool)
    np.put_along_axis(mask, order, inside, axis=0)
    return mask


def participation_loop(kappa: ArrayLike, *, one_at_a_time: bool = False) -> tuple[IntArray, int]:
    """The dropping loop: repeat {n = |S|, K = Σ_S κ; drop every i with (n−1)κ_i ≥ K}
    until nothing drops (``one_at_a_time``: drop only the costliest per pass). Returns the
    participants (ascending indices) and the number of passes (≤ N − 1, the last drops
    nothing). Equal to :func:`participants` (checked in the tests); kept as the reference."""
    k = np.asarray(kappa, dtype=np.float64)
    S = np.arange(k.size)
    passes = 0
    while True:
        passes += 1
        n, K = S.size, float(k[S].sum())
        bad = (n - 1) * k[S] >= K
        if not bad.any():
            return S.astype(np.int64), passes
        if one_at_a_time:
            j = int(np.flatnonzero(k[S] == k[S].max())[-1])
            S = np.delete(S, j)
        else:
            S = S[~bad]


def equilibrium_slopes(
    kappa: ArrayLike, *, mode: Literal["participation", "paper"] = "participation"
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Equilibrium slopes G_i (ρ_i* = G_i R) and the participation mask (Eq. 20 applied on the
    participation set S; a negative budget is infeasible).

    On S (n = |S|, K = Σ_S κ): G_i = (n−1)/K · (1 − (n−1)κ_i/K) (the paper's C_i), and
    G_i = 0 off S, so Σ_S ρ* = (n−1)R/K (Eq. 25). Column-wise for (N, T). ``mode="paper"``
    applies Eq. 20 to all N clients with n = N and raises ``ValueError`` listing the clients
    with G_i ≤ 0 (Theorem 1 as printed, which has no participation set)."""
    k = np.asarray(kappa, dtype=np.float64)
    if mode == "paper":
        N = k.shape[0]
        K = k.sum(axis=0)
        G = (N - 1) / K * (1.0 - (N - 1) * k / K)
        bad = np.flatnonzero((G <= 0).any(axis=1)) if G.ndim == 2 else np.flatnonzero(G <= 0)
        if bad.size:
            raise ValueError(
                f"mode='paper': Eq. 20 gives G_i <= 0 (a budget rho_i* <= 0) for client(s) "
                f"{bad.tolist()} (0-based; {(bad + 1).tolist()} 1-based); use mode='participation'"
            )
        return np.asarray(G, dtype=np.float64), np.ones(k.shape, dtype=bool)
    if mode != "participation":
        raise ValueError(f"mode: must be 'participation' or 'paper', got {mode!r}")
    mask = participants(k)
    n = mask.sum(axis=0)
    K = np.where(mask, k, 0.0).sum(axis=0)
    G = np.where(mask, (n - 1) / K * (1.0 - (n - 1) * k / K), 0.0)
    # a client whose G rounds to <= 0 sits on the margin (n−1)κ_i = K: it is dropped (it would
    # upload with infinite noise), which leaves every other G unchanged ((n−2)/K' = (n−1)/K
    # with K' = K − κ_i)
    mask &= G > 0
    return np.asarray(np.where(mask, G, 0.0), dtype=np.float64), mask


@dataclass(frozen=True)
class ClientEquilibrium:
    """The Stage II equilibrium at reward R (Theorem 1 with a participation set), one entry per
    (kept) client.

    ``participants``: indices of S (ascending); ``slope``: G_i (0 off S); ``rho`` = G R;
    ``share``: s_i = 1 − (n−1)κ_i/K on S (Σ = 1); ``payment`` = s R; ``utility`` = R s² − K_i
    on S and 0 off S (they do not train; Eq. 16 at ρ = 0 would give −K_i)."""

    reward: float
    participants: IntArray
    slope: FloatArray
    rho: FloatArray
    share: FloatArray
    payment: FloatArray
    utility: FloatArray

    @property
    def rho_total(self) -> float:
        """Σ_S ρ* = (n−1)R/K (Eq. 25): the curve's x-variable ρ_t (a noise-level index only:
        Lemma 1 calls it the global model's zCDP level, but the clients' data are disjoint, so the
        sum guarantees nothing)."""
        return float(self.rho.sum())


def client_equilibrium(
    nu: ArrayLike, R: float, *, phi1: float = 1.0, fixed_cost: ArrayLike = 0.0, mode: Literal["participation", "paper"] = "participation"
) -> ClientEquilibrium:
    """Unique Nash equilibrium of the clients' contest at reward R (Theorem 1 with a
    participation set).

    ``nu``: privacy values ν_i > 0 of the N ≥ 2 kept clients; κ = φ_1 ν; ``fixed_cost`` K_i ≥ 0
    (number or one per client) only shifts utilities (it does not depend on ρ). S does not
    depend on R and ρ* is linear in R."""
    k = _kappa(nu, phi1)
    if k.ndim != 1:
        raise ValueError(f"nu: expected one value per client for a single round, got shape {k.shape}")
    R = _reward(R)
    Kc = np.broadcast_to(np.asarray(fixed_cost, dtype=np.float64), k.shape)
    bad = np.flatnonzero(~(np.isfinite(Kc) & (Kc >= 0)))
    if bad.size:
        raise ValueError(f"fixed_cost[{int(bad[0])}]: must be >= 0, got {_fmt(Kc[bad[0]])}")
    G, mask = equilibrium_slopes(k, mode=mode)
    n = int(mask.sum())
    K = float(k[mask].sum())
    share = np.where(mask, 1.0 - (n - 1) * k / K, 0.0)
    return ClientEquilibrium(
        reward=R,
        participants=_ro(np.flatnonzero(mask), np.int64),
        slope=_ro(G),
        rho=_ro(G * R),
        share=_ro(share),
        payment=_ro(share * R),
        utility=_ro(np.where(mask, R * share**2 - Kc, 0.0)),
    )


_GOLD = (math.sqrt(5.0) - 1.0) / 2.0


def deviation_gains(rho: ArrayLike, R: float, kappa: ArrayLike, fixed_cost: ArrayLike = 0.0, *, iterations: int = 120) -> FloatArray:
    """Largest gain max_{x ∈ [0, R/κ_i]} U_i(x, ρ_−i) − U_i(ρ) of each client (Eq. 31 check).

    Direct bounded 1-D maximisation, vectorised over clients: golden-section search on
    [0, R/κ_i] (U_i is strictly concave there when X = Σ_{j≠i} ρ_j > 0, Eq. 22; above R/κ_i
    U_i < U_i(0)) plus both end points. ~0 (rounding) at an equilibrium."""
    r = np.asarray(rho, dtype=np.float64)
    k = np.broadcast_to(np.asarray(kappa, dtype=np.float64), r.shape)
    X = r.sum() - r
    hi = R / k

    def U(x: FloatArray) -> FloatArray:
        return client_utility(x, X, R, k, fixed_cost)

    a, b = np.zeros_like(r), hi.copy()
    c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
    fc, fd = U(c), U(d)
    for _ in range(iterations):
        left = fc >= fd  # maximum in [a, d]
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        nc = np.where(left, b - _GOLD * (b - a), d)
        nd = np.where(left, c, a + _GOLD * (b - a))
        fnc = np.where(left, U(nc), fd)
        fnd = np.where(left, fc, U(nd))
        c, d, fc, fd = nc, nd, fnc, fnd
    best = np.maximum.reduce([U(np.zeros_like(r)), U(hi), fc, fd, U(0.5 * (a + b))])
    return np.asarray(best - U(r), dtype=np.float64)


# ============================================================================================
# Stage I: server cost and the optimal reward (Eqs. 13-15, 26-29, Theorem 2)
# ============================================================================================


@dataclass(frozen=True)
class ServerParams:
    """The server's constants (Eq. 15): model dimension d (``dim``), rounds T (``rounds``),
    discount π (``discount``), γ, β, λ (``lam``), V (``grad_bound``), clip C (``clip``) and the
    accuracy-term multiplier κ_acc (``acc_scale``; fedgame's addition, since β, λ, V, γ and C are
    not given and fix the scale of R_t*). Defaults are fedgame's own: the paper gives none."""

    dim: int
    rounds: int
    discount: float
    gamma: float = 0.5
    beta: float = 1.0
    lam: float = 1.0
    grad_bound: float = 1.0
    clip: float = 1.0
    acc_scale: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int | np.integer) or self.dim < 1:
            raise ValueError(f"dim: must be an integer >= 1 (model parameters d), got {self.dim!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int | np.integer) or self.rounds < 1:
            raise ValueError(f"rounds: must be an integer >= 1 (T), got {self.rounds!r}")
        check_unit_open("discount", self.discount)
        check_unit_open("gamma", self.gamma)
        for name in ("beta", "lam", "grad_bound", "clip", "acc_scale"):
            check_positive(name, getattr(self, name))

    @property
    def accuracy_factor(self) -> float:
        """κ_acc · 2βγ/(λ² T²), the multiplier of Γ²(t) in u_t (Eq. 15)."""
        return self.acc_scale * 2.0 * self.beta * self.gamma / (self.lam**2 * self.rounds**2)

    def discounts(self) -> FloatArray:
        """π^{t−1}, t = 1..T (Eq. 15's rounds)."""
        return np.asarray(self.discount ** np.arange(self.rounds, dtype=np.float64), dtype=np.float64)


def _sizes(sizes: ArrayLike, n: int) -> FloatArray:
    s = np.asarray(sizes, dtype=np.float64)
    if s.shape != (n,):
        raise ValueError(f"sizes: expected {n} dataset sizes (one per client), got shape {s.shape}")
    bad = np.flatnonzero(~(np.isfinite(s) & (s > 0)))
    if bad.size:
        raise ValueError(f"sizes[{int(bad[0])}]: must be > 0, got {_fmt(s[bad[0]])}")
    return s


def server_round_cost(rho: ArrayLike, R: float, t: int, sizes: ArrayLike, params: ServerParams) -> float:
    """u_t from the budgets directly (summand of Eq. 15 with the uniform mean over the n_t =
    |{i: ρ_i > 0}| participants of Eq. 12, times κ_acc):

        u_t = κ_acc·2βγ/(λ²T²)·[V² + (2 d C²/n_t²) Σ_{ρ_i>0} 1/(|D_i|² ρ_i)] + (1−γ) π^{t−1} R.

    ``inf`` if nobody participates."""
    r = np.asarray(rho, dtype=np.float64)
    D = _sizes(sizes, r.size)
    on = r > 0
    n = int(on.sum())
    if n == 0:
        return math.inf
    noise = 2.0 * params.dim * params.clip**2 / n**2 * float(np.sum(1.0 / (D[on] ** 2 * r[on])))
    return params.accuracy_factor * (params.grad_bound**2 + noise) + (1.0 - params.gamma) * params.discount ** (t - 1) * R


def theorem2_constant(slope: ArrayLike, sizes: ArrayLike, params: ServerParams) -> FloatArray | float:
    """A_t = κ_acc·4dγβC²/(T²λ²n_t²) · Σ_{i∈S_t} 1/(G_i^t |D_i|²) (Theorem 2 with N → n_t and
    sums over the participants S_t).

    ``slope`` (N,) for one round → float, or (N, T) → (T,). Clients with G = 0 are outside S_t."""
    G = np.asarray(slope, dtype=np.float64)
    D = _sizes(sizes, G.shape[0])
    Dc = D if G.ndim == 1 else D[:, None]
    on = G > 0
    n = on.sum(axis=0)
    with np.errstate(divide="ignore"):
        inv = np.where(on, 1.0 / (np.where(on, G, 1.0) * Dc**2), 0.0).sum(axis=0)
    A = params.acc_scale * 4.0 * params.dim * params.gamma * params.beta * params.clip**2 / (params.rounds**2 * params.lam**2 * n**2) * inv
    return float(A) if G.ndim == 1 else np.asarray(A, dtype=np.float64)


def reward_cost(R: ArrayLike, A: ArrayLike, t: ArrayLike, params: ServerParams) -> FloatArray:
    """u_t(R) = κ_acc·2βγV²/(λ²T²) + A_t/R + (1−γ)π^{t−1} R with the followers' equilibrium
    substituted (Eq. 26 per round); strictly convex on R > 0 (Eq. 29). Broadcasts."""
    R = np.asarray(R, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.asarray(
            params.accuracy_factor * params.grad_bound**2
            + np.asarray(A) / R
            + (1.0 - params.gamma) * params.discount ** (np.asarray(t, dtype=np.float64) - 1.0) * R,
            dtype=np.float64,
        )


def optimal_reward(A: ArrayLike, t: ArrayLike, params: ServerParams) -> FloatArray:
    """R_t* = sqrt(A_t π^{1−t} / (1−γ)) (Theorem 2): the unconstrained minimiser of u_t."""
    disc = params.discount ** (np.asarray(t, dtype=np.float64) - 1.0)
    return np.asarray(np.sqrt(np.asarray(A) / ((1.0 - params.gamma) * disc)), dtype=np.float64)


# ============================================================================================
# Accuracy curve and the reward range (Sec. IV-B, Remark 1, Eqs. 32-33)
# ============================================================================================


@dataclass(frozen=True)
class AccuracyCurve:
    """I(ρ) = I_1 − B e^{−I_3 ρ}, B = I_2 e^{−I_4} (Sec. IV-B; only the product B of I_2 and
    e^{−I_4} can be identified from data, so I_4 = 0)."""

    I1: float
    B: float
    I3: float

    def __post_init__(self) -> None:
        for name in ("I1", "B", "I3"):
            check_positive(f"curve.{name}", getattr(self, name))

    @classmethod
    def from_paper(cls, I1: float, I2: float, I3: float, I4: float = 0.0) -> AccuracyCurve:
        """From the paper's four constants: B = I_2 e^{−I_4}."""
        check_positive("curve.I2", I2)
        if not math.isfinite(I4):
            raise ValueError(f"curve.I4: must be finite, got {I4!r}")
        return cls(I1=float(I1), B=float(I2) * math.exp(-float(I4)), I3=float(I3))

    def __call__(self, rho: ArrayLike) -> FloatArray:
        return np.asarray(self.I1 - self.B * np.exp(-self.I3 * np.asarray(rho, dtype=np.float64)), dtype=np.float64)

    def rho_lo(self, x: float, name: str = "eps") -> float:
        """ρ_lo(x) = max(0, ln(B/(I_1 − x))/I_3): the least global budget with I(ρ) ≥ x
        (Eq. 33, whose log is the natural one; 0 when the target holds at ρ = 0); requires
        x < I_1."""
        if not (math.isfinite(x) and x < self.I1):
            raise ValueError(f"{name}: must be < I1 = {_fmt(self.I1)} (the curve's ceiling), got {_fmt(x)}")
        return max(0.0, math.log(self.B / (self.I1 - x)) / self.I3)


def reward_range(slope_sum: ArrayLike, curve: AccuracyCurve, eps: float, eps_max: float) -> tuple[FloatArray, FloatArray]:
    """[R_min,t, R_max,t] = [ρ_lo(ε), ρ_lo(ε_max)] / Σ_{S_t} G_i^t (Eq. 33; at the equilibrium
    ρ_t = R_t Σ_S G = (n−1)R_t/(φ_1 Σ_S ν), Remark 1). R_min = 0 when I(0) ≥ ε.

    Raises ``ValueError`` naming the field for ε ≥ I_1, ε_max ≥ I_1 or ε > ε_max."""
    curve.rho_lo(eps_max, "eps_max")
    curve.rho_lo(eps, "eps")
    if eps > eps_max:
        raise ValueError(f"eps: must be <= eps_max = {_fmt(eps_max)}, got {_fmt(eps)}")
    g = np.asarray(slope_sum, dtype=np.float64)
    return (np.asarray(curve.rho_lo(eps) / g, dtype=np.float64), np.asarray(curve.rho_lo(eps_max, "eps_max") / g, dtype=np.float64))


@dataclass(frozen=True)
class CurveFit:
    """Least-squares fit of I(ρ) = I_1 − B e^{−I_3 ρ} (Sec. IV-B): parameters, their standard errors
    sqrt(diag(cov)) (order I_1, B, I_3), the covariance and the RMSE of the residuals."""

    curve: AccuracyCurve
    stderr: FloatArray
    cov: FloatArray
    rmse: float


def fit_accuracy_curve(rho: ArrayLike, acc: ArrayLike, *, max_nfev: int = 20000) -> CurveFit:
    """Fit (I_1, B, I_3) with ``scipy.optimize.curve_fit`` (I_2 and I_4 cannot be fitted apart):
    p0 = [max acc, max(spread, 1e-3), 1/median ρ], bounds I_1 ∈ [0, 1], B ≥ 0, I_3 ≥ 1e-12."""
    r = np.asarray(rho, dtype=np.float64)
    a = np.asarray(acc, dtype=np.float64)
    if r.ndim != 1 or r.shape != a.shape or r.size < 4:
        raise ValueError(f"rho, acc: need two 1-D arrays of equal length >= 4, got shapes {r.shape} and {a.shape}")
    if not (np.all(np.isfinite(r)) and np.all(r > 0) and np.all(np.isfinite(a))):
        raise ValueError("rho, acc: every rho must be > 0 and every value finite")

    def f(x: FloatArray, I1: float, B: float, I3: float) -> FloatArray:
        return np.asarray(I1 - B * np.exp(-I3 * x), dtype=np.float64)

    p0 = [float(a.max()), max(float(a.max() - a.min()), 1e-3), 1.0 / float(np.median(r))]
    popt, pcov = curve_fit(f, r, a, p0=p0, bounds=([0.0, 0.0, 1e-12], [1.0, np.inf, np.inf]), max_nfev=max_nfev)
    resid = a - f(r, *popt)
    return CurveFit(
        curve=AccuracyCurve(I1=float(popt[0]), B=float(popt[1]), I3=float(popt[2])),
        stderr=_ro(np.sqrt(np.diag(pcov))),
        cov=_ro(pcov),
        rmse=float(np.sqrt(np.mean(resid**2))),
    )


# ============================================================================================
# Reward policies (Sec. V-B) and the calibration of κ_acc
# ============================================================================================

#: A reward policy: (R_t*, R_min,t, R_max,t, rng) → applied R_t, arrays of shape (T,).
RewardPolicy = Callable[[FloatArray, FloatArray, FloatArray, "np.random.Generator | None"], FloatArray]


def qidpfl_reward(R_star: FloatArray, R_min: FloatArray, R_max: FloatArray, rng: np.random.Generator | None = None) -> FloatArray:
    """QI-DPFL: R_t = clip(R_t*, R_min,t, R_max,t), the exact minimiser of the strictly convex
    u_t over the range (the paper does not say how Theorem 2 and Eq. 33 combine); without a
    range (R_min = 0, R_max = inf) R_t = R_t*."""
    return np.asarray(np.clip(R_star, R_min, R_max), dtype=np.float64)


def max_reward(R_star: FloatArray, R_min: FloatArray, R_max: FloatArray, rng: np.random.Generator | None = None) -> FloatArray:
    """Max ("Max-select", Sec. V-B): R_t = R_max,t."""
    if not np.all(np.isfinite(R_max)):
        raise ValueError("policy max: needs a reward range (an accuracy curve with eps_max)")
    return np.asarray(R_max, dtype=np.float64).copy()


def random_reward(R_star: FloatArray, R_min: FloatArray, R_max: FloatArray, rng: np.random.Generator | None = None) -> FloatArray:
    """Random (Sec. V-B; the paper does not give its distribution): R_t ~ U[R_min,t, R_max,t]
    i.i.d. over rounds from the policy's own generator."""
    if rng is None:
        raise ValueError("policy random: needs rng (a numpy Generator of its own)")
    if not np.all(np.isfinite(R_max)):
        raise ValueError("policy random: needs a reward range (an accuracy curve with eps_max)")
    return np.asarray(rng.uniform(R_min, R_max), dtype=np.float64)


def calibrate_acc_scale(R_min1: float, A1_unit: float, gamma: float) -> float:
    """κ_acc = R_min,1² (1 − γ) / A_1|_{κ_acc=1}, so that R_1* = R_min,1 (fedgame's calibration:
    the first round just meets the target);
    1 (no calibration) when R_min,1 = 0."""
    if R_min1 <= 0:
        return 1.0
    return float(R_min1**2 * (1.0 - gamma) / A1_unit)


# ============================================================================================
# The offline game over T rounds (Algorithm 1)
# ============================================================================================


@dataclass(frozen=True)
class RewardSchedule:
    """Per round t = 1..T (arrays of shape (T,)): Theorem 2's A_t and R_t*, the range (0 and inf
    without a curve), the applied reward, u_t at it, n_t = |S_t|, Σ_{S_t} G and the κ_acc used."""

    t: IntArray
    A: FloatArray
    R_star: FloatArray
    R_min: FloatArray
    R_max: FloatArray
    R_applied: FloatArray
    cost: FloatArray
    n_part: IntArray
    slope_sum: FloatArray
    acc_scale: float

    @property
    def total_cost(self) -> float:
        """U_T = Σ_t u_t (Eq. 15)."""
        return float(self.cost.sum())


def _per_round(kappa: FloatArray, T: int) -> FloatArray:
    if kappa.ndim == 1:
        return kappa[:, None]
    if kappa.shape[1] != T:
        raise ValueError(f"nu: an N x T array needs T = {T} columns (rounds 1..T), got {kappa.shape[1]}")
    return kappa


def reward_schedule(
    nu: ArrayLike,
    sizes: ArrayLike,
    params: ServerParams,
    *,
    phi1: float = 1.0,
    curve: AccuracyCurve | None = None,
    eps: float | None = None,
    eps_max: float | None = None,
    calibrate: bool = False,
    policy: RewardPolicy = qidpfl_reward,
    rng: np.random.Generator | None = None,
) -> RewardSchedule:
    """The offline game of Algorithm 1 for rounds t = 1..T: S_t and G^t (Theorem 1 with a
    participation set), A_t and R_t* (Theorem 2), the range (Eq. 33, when ``curve`` is given)
    and the applied reward ``policy(R*, R_min, R_max, rng)`` (Sec. V-B), with u_t at it.

    ``nu`` (N,) constant over rounds or (N, T); ``calibrate`` sets κ_acc so that
    R_1* = R_min,1 (:func:`calibrate_acc_scale`) instead of ``params.acc_scale``. Needs
    ``eps`` and ``eps_max`` with a curve."""
    T = params.rounds
    k = _per_round(_kappa(nu, phi1), T)
    D = _sizes(sizes, k.shape[0])
    G, mask = equilibrium_slopes(k)
    slope_sum = np.broadcast_to(G.sum(axis=0), (T,)).astype(np.float64)
    n_part = np.broadcast_to(mask.sum(axis=0), (T,)).astype(np.int64)
    unit = replace(params, acc_scale=1.0)
    A_unit = np.broadcast_to(np.asarray(theorem2_constant(G, D, unit)), (T,)).astype(np.float64)
    if curve is not None:
        if eps is None or eps_max is None:
            raise ValueError("eps, eps_max: an accuracy curve needs both targets")
        R_min, R_max = reward_range(slope_sum, curve, eps, eps_max)
    else:
        if calibrate:
            raise ValueError("calibrate: needs an accuracy curve (R_min,1)")
        R_min, R_max = np.zeros(T), np.full(T, np.inf)
    acc = calibrate_acc_scale(float(R_min[0]), float(A_unit[0]), params.gamma) if calibrate else params.acc_scale
    used = replace(params, acc_scale=acc)
    t = np.arange(1, T + 1)
    A = acc * A_unit
    R_star = optimal_reward(A, t, used)
    R_applied = np.asarray(policy(R_star, R_min, R_max, rng), dtype=np.float64)
    return RewardSchedule(
        t=_ro(t, np.int64),
        A=_ro(A),
        R_star=_ro(R_star),
        R_min=_ro(R_min),
        R_max=_ro(R_max),
        R_applied=_ro(R_applied),
        cost=_ro(reward_cost(R_applied, A, t, used)),
        n_part=_ro(n_part, np.int64),
        slope_sum=_ro(slope_sum),
        acc_scale=float(acc),
    )


# ============================================================================================
# Algorithm 1 (game part): one entry point
# ============================================================================================


@dataclass(frozen=True)
class QIDPFLOutcome:
    """Everything the QI-DPFL game decides before training (Algorithm 1).

    ``screening`` (None without label counts); ``kept``: candidate indices of the N game
    clients; ``kappa``: φ_1 ν of the kept clients, (N,) or (N, T); ``equilibria``: the Stage II
    equilibrium at each of the requested ``rewards``; ``schedule`` (None without ``server``);
    ``params``: the server constants actually used (κ_acc after calibration); ``slope`` (N, T),
    ``rho``, ``payment``, ``utility`` (N, T) at the applied rewards (empty without a server)."""

    screening: ScreeningResult | None
    kept: IntArray
    kappa: FloatArray
    sizes: FloatArray
    equilibria: tuple[ClientEquilibrium, ...]
    schedule: RewardSchedule | None
    params: ServerParams | None
    curve: AccuracyCurve | None
    slope: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    rho: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    payment: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    utility: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))


def solve_qidpfl_game(
    nu: ArrayLike,
    sizes: ArrayLike,
    *,
    phi1: float = 1.0,
    fixed_cost: ArrayLike = 0.0,
    rewards: Sequence[float] = (),
    label_counts: ArrayLike | None = None,
    reference: Reference = "pooled",
    theta_th: float | None = None,
    keep_fraction: float | None = None,
    server: ServerParams | None = None,
    curve: AccuracyCurve | None = None,
    eps: float | None = None,
    eps_max: float | None = None,
    calibrate: bool = False,
    policy: RewardPolicy = qidpfl_reward,
    rng: np.random.Generator | None = None,
) -> QIDPFLOutcome:
    """The QI-DPFL game end to end, without training (Alg. 1 minus the training layer).

    ``nu``, ``sizes`` (and ``fixed_cost`` if a list) are per candidate, (H,) or ``nu`` (H, T).
    With ``label_counts`` (H × P) the candidates are screened first (Eq. 11; ``theta_th`` or
    ``keep_fraction``, ``reference``) and only the kept N enter the game. Then: the Stage II
    equilibrium at each of ``rewards`` (Theorem 1) and, with ``server``, the reward schedule over
    T rounds (Eqs. 15-33; ``curve``/``eps``/``eps_max`` for the range, ``calibrate`` for κ_acc)
    with budgets, payments and utilities at the applied rewards."""
    v = np.asarray(nu, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    H = v.shape[0] if v.ndim >= 1 else 0
    if v.ndim not in (1, 2) or H < 2:
        raise ValueError(f"nu: expected one value per candidate (at least 2), got shape {v.shape}")
    if s.shape != (H,):
        raise ValueError(f"sizes: expected {H} dataset sizes (one per candidate, as nu), got shape {s.shape}")
    fc = np.asarray(fixed_cost, dtype=np.float64)
    if fc.ndim == 1 and fc.size != H:
        raise ValueError(f"fixed_cost: a list must have one value per candidate (H = {H}), got {fc.size}")
    scr: ScreeningResult | None = None
    if label_counts is not None:
        lc = np.asarray(label_counts, dtype=np.float64)
        if lc.ndim != 2 or lc.shape[0] != H:
            raise ValueError(f"label_counts: expected {H} rows (one per candidate, as nu), got shape {lc.shape}")
        scr = screen(lc, reference=reference, theta_th=theta_th, keep_fraction=keep_fraction)
        kept = np.asarray(scr.kept, dtype=np.int64)
    else:
        kept = np.arange(H, dtype=np.int64)
    kappa = _kappa(v, phi1)[kept]  # errors name the candidate
    D = _sizes(s, H)[kept]
    fck = fc[kept] if fc.ndim == 1 else fc
    eqs: tuple[ClientEquilibrium, ...] = ()
    if len(rewards):
        if kappa.ndim != 1:
            raise ValueError("rewards: per-reward equilibria need nu constant over rounds (one value per client)")
        eqs = tuple(client_equilibrium(kappa, float(R), phi1=1.0, fixed_cost=fck) for R in rewards)
    if server is None:
        return QIDPFLOutcome(
            screening=scr, kept=_ro(kept, np.int64), kappa=_ro(kappa), sizes=_ro(D), equilibria=eqs, schedule=None, params=None, curve=curve
        )
    sched = reward_schedule(kappa, D, server, phi1=1.0, curve=curve, eps=eps, eps_max=eps_max, calibrate=calibrate, policy=policy, rng=rng)
    used = replace(server, acc_scale=sched.acc_scale)
    k2 = _per_round(kappa, server.rounds)
    G, mask = equilibrium_slopes(k2)
    G = np.broadcast_to(G, (kappa.shape[0], server.rounds))
    mask = np.broadcast_to(mask, G.shape)
    rho = G * sched.R_applied
    n = mask.sum(axis=0)
    K = np.where(mask, np.broadcast_to(k2, G.shape), 0.0).sum(axis=0)
    share = np.where(mask, 1.0 - (n - 1) * np.broadcast_to(k2, G.shape) / K, 0.0)
    fcc = np.broadcast_to(fck if np.ndim(fck) == 0 else np.asarray(fck)[:, None], G.shape)
    return QIDPFLOutcome(
        screening=scr,
        kept=_ro(kept, np.int64),
        kappa=_ro(kappa),
        sizes=_ro(D),
        equilibria=eqs,
        schedule=sched,
        params=used,
        curve=curve,
        slope=_ro(G),
        rho=_ro(rho),
        payment=_ro(share * sched.R_applied),
        utility=_ro(np.where(mask, sched.R_applied * share**2 - fcc, 0.0)),
    )


# ============================================================================================
# Stackelberg equilibrium check (Definition 2)
# ============================================================================================


@dataclass(frozen=True)
class StackelbergCheck:
    """Numerical check of Definition 2 at the applied rewards, per round (T,):
    ``leader_gap`` = u_t(R_t) − min over a grid of feasible R of u_t(R, ρ*(R)) (Eq. 30: ≤ 0 up
    to rounding); ``follower_gain`` = the largest gain of a unilateral deviation (Eq. 31: ~0)."""

    leader_gap: FloatArray
    follower_gain: FloatArray

    def holds(self, tol: float = 1e-9) -> bool:
        return bool(np.all(self.leader_gap <= tol) and np.all(self.follower_gain <= tol))


def stackelberg_check(outcome: QIDPFLOutcome, *, grid_points: int = 401) -> StackelbergCheck:
    """Check Eqs. 30-31 for an outcome with a schedule: u_t is evaluated from the budgets
    (Eq. 15, :func:`server_round_cost`) with the clients' equilibrium re-solved at every grid
    reward (ρ*(R) = G R, Theorem 1) over the feasible set [R_min,t, R_max,t] (or R_t*·[1e-3, 1e3]
    without a range); deviations by :func:`deviation_gains`."""
    sched, params = outcome.schedule, outcome.params
    if sched is None or params is None:
        raise ValueError("outcome: needs a reward schedule (solve with server=...)")
    T = params.rounds
    k2 = _per_round(np.asarray(outcome.kappa), T)
    gap, gain = np.empty(T), np.empty(T)
    for j in range(T):
        kt = k2[:, min(j, k2.shape[1] - 1)]
        eq = client_equilibrium(kt, 1.0)
        lo, hi, Rt = float(sched.R_min[j]), float(sched.R_max[j]), float(sched.R_applied[j])
        if math.isfinite(hi):
            grid = np.linspace(lo, hi, grid_points)
            grid = grid[grid > 0]
        else:
            grid = float(sched.R_star[j]) * np.logspace(-3, 3, grid_points)
        u_at = server_round_cost(eq.slope * Rt, Rt, j + 1, outcome.sizes, params)
        u_grid = min(server_round_cost(eq.slope * R, float(R), j + 1, outcome.sizes, params) for R in grid)
        gap[j] = u_at - u_grid
        gain[j] = float(deviation_gains(eq.slope * Rt, Rt, kt).max())
    return StackelbergCheck(leader_gap=_ro(gap), follower_gain=_ro(gain))
