"""Tight accounting of Poisson-subsampled Gaussian steps (DP-SGD), as thin wrappers over
Google's ``dp-accounting`` library.

Each step is one Poisson-subsampled Gaussian mechanism (sampling rate q, noise multiplier z:
noise std z·C on the sum of per-example gradients clipped to C) under add/remove-one adjacency
(Abadi et al. 2016; Mironov, Talwar & Zhang 2019 for RDP; Koskela et al. 2020 / Doroshenko et al.
2022 for privacy-loss distributions). ``method="rdp"`` uses ``dp_accounting.rdp.RdpAccountant``
on its default order grid; ``method="pld"`` uses ``dp_accounting.pld.PLDAccountant``.
This is what Opacus reports (``accountant="rdp"`` / ``"prv"``) and what fedgame sets beside the
PHS paper's calibration (docs/phs.md, 'Pieces').

The RDP curves used here are cached per (q, z), so accountants and calibration share the work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from math import exp, log1p
from typing import Literal, cast

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "DEFAULT_PLD_DISCRETIZATION",
    "Method",
    "rdp_curve",
    "rdp_curve_wor",
    "rdp_to_epsilon",
    "dpsgd_epsilon",
    "dpsgd_noise_multiplier",
    "dpsgd_noise_multipliers",
]

Method = Literal["rdp", "pld"]

#: RDP orders α used throughout fedgame: dp-accounting's default grid (1.1 … 1024), written out
#: so that importing this module does not import dp-accounting (about 2 s of CPU: SciPy's stats
#: and signal modules), which every function here imports when it first needs it;
#: tests/privacy check it equals ``dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS``.
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)
#: Value discretisation interval of the PLD accountant (dp-accounting's default).
DEFAULT_PLD_DISCRETIZATION: float = 1e-4


def _check_z(noise_multiplier: float) -> float:
    z = float(noise_multiplier)
    if not z >= 0:
        raise ValueError(f"noise_multiplier: must be >= 0, got {noise_multiplier}")
    return z


def _check_q(sample_rate: float) -> float:
    q = float(sample_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate: must be in (0, 1], got {sample_rate}")
    return q


def _check_steps(steps: int) -> int:
    if isinstance(steps, bool) or int(steps) != steps or steps < 0:
        raise ValueError(f"steps: must be an integer >= 0, got {steps}")
    return int(steps)


def _check_delta(delta: float) -> float:
    d = float(delta)
    if not 0 < d < 1:
        raise ValueError(f"delta: must be in (0, 1), got {delta}")
    return d


def _check_method(method: str) -> Method:
    if method not in ("rdp", "pld"):
        raise ValueError(f"method: must be 'rdp' or 'pld', got {method!r}")
    return cast(Method, method)


@lru_cache(maxsize=4096)
def _rdp_curve_cached(sample_rate: float, noise_multiplier: float) -> tuple[float, ...]:
    if sample_rate < 1.0:
        return _poisson_gaussian_rdp(sample_rate, noise_multiplier)
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant(orders=list(DEFAULT_RDP_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(noise_multiplier))
    return tuple(float(x) for x in acc.rdp)


#: dp-accounting's cap on the terms of the fractional-order series (``_MAX_STEPS_LOG_A_FRAC``)
_FRAC_TERMS = 1000


def _poisson_gaussian_rdp(q: float, z: float) -> tuple[float, ...]:
    """RDP ε(α) = log A_α / (α − 1) of one Poisson-subsampled Gaussian step (0 < q < 1) on
    :data:`DEFAULT_RDP_ORDERS` (Mironov, Talwar & Zhang 2019, Sec. 3.3): the same series, term
    for term and operation for operation, as dp-accounting's
    ``_compute_rdp_poisson_subsampled_gaussian``, so the same floats (tests/privacy check
    equality on a grid of q, z).

    Hand-written for speed only: dp-accounting evaluates each term with scalar SciPy calls
    (three ``gammaln``, two ``log_ndtr``) inside a Python loop, up to 1,000 terms for each of
    the ~150 orders, and a DP-SGD calibration evaluates a curve per trial noise multiplier:
    7 of a 14 s smoke run's seconds went there. Here every order's terms are computed at once
    as arrays (the same element-wise IEEE operations and SciPy functions), and only the running
    log-sums, whose rounding depends on their order, stay Python loops. A fractional order whose
    series has not converged after :data:`_FRAC_TERMS` terms gives ``inf`` (excluded from the ε
    minimum) as in dp-accounting, which also logs a warning for each such order."""
    from scipy import special

    orders = np.array(DEFAULT_RDP_ORDERS)
    whole = orders == np.floor(orders)
    lq, l1mq, zz = math.log(q), math.log1p(-q), 2 * (z**2)
    log_a = np.empty(orders.size)

    # integer α = n: A_α = Σ_{i≤n} C(n,i) q^i (1−q)^{n−i} exp((i²−i)/(2z²))
    n = orders[whole][:, None]
    i = np.arange(int(n.max()) + 1, dtype=np.float64)[None, :]
    terms = special.gammaln(n + 1) - special.gammaln(i + 1) - special.gammaln((n - i) + 1) + i * lq + (n - i) * l1mq + (i * i - i) / zz
    log_a[whole] = [_log_sum(row[: int(m) + 1]) for row, m in zip(terms, n[:, 0], strict=True)]

    # fractional α: the two half-line integrals as series, stopped once both terms fall and the
    # larger is 30 below the running sum
    alpha = orders[~whole][:, None]
    i = np.arange(_FRAC_TERMS, dtype=np.float64)[None, :]
    j = alpha - i
    z0 = z**2 * math.log(1 / q - 1) + 0.5
    den, root2, log_half, log2 = math.sqrt(2) * z, 2**0.5, math.log(0.5), math.log(2)
    coef = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln((alpha - i) + 1)
    s0 = (coef + i * lq + j * l1mq) + (i * i - i) / zz + (log_half + (log2 + special.log_ndtr(-((i - z0) / den) * root2)))
    s1 = (coef + j * lq + i * l1mq) + (j * j - j) / zz + (log_half + (log2 + special.log_ndtr(-((z0 - j) / den) * root2)))
    falling = np.zeros(s0.shape, dtype=bool)
    falling[:, 1:] = (s0[:, 1:] < s0[:, :-1]) & (s1[:, 1:] < s1[:, :-1])
    # the running log-sum at once (within 1e-12 of the loop's; the margin 1e-6 covers it): a
    # series that cannot stop even so is not run term by term for nothing
    bound = np.logaddexp.accumulate(np.logaddexp(s0, s1), axis=1) + 1e-6 - 30
    may_stop = np.any(falling & (np.maximum(s0, s1) < bound), axis=1)
    log_a[~whole] = [_frac_sum(r0, r1) if ok else math.inf for r0, r1, ok in zip(s0, s1, may_stop, strict=True)]
    return tuple((log_a / (orders - 1.0)).tolist())


def _log_sum(terms: NDArray[np.float64]) -> float:
    """log Σ exp(terms), added left to right as dp-accounting's ``_log_add`` does (inlined)."""
    acc = -math.inf
    for t in terms.tolist():
        a, b = (t if t < acc else acc), (t if t > acc else acc)  # min(acc, t), max(acc, t)
        acc = b if a == -math.inf else log1p(exp(a - b)) + b
    return acc


def _frac_sum(s0: NDArray[np.float64], s1: NDArray[np.float64]) -> float:
    """dp-accounting's ``_compute_log_a_frac`` loop on precomputed terms (``_log_add`` inlined,
    with ``min``/``max``'s exact semantics, NaN included)."""
    a0 = a1 = last0 = last1 = -math.inf
    for t0, t1 in zip(s0.tolist(), s1.tolist(), strict=True):
        a, b = (t0 if t0 < a0 else a0), (t0 if t0 > a0 else a0)
        a0 = b if a == -math.inf else log1p(exp(a - b)) + b
        a, b = (t1 if t1 < a1 else a1), (t1 if t1 > a1 else a1)
        a1 = b if a == -math.inf else log1p(exp(a - b)) + b
        a, b = (a1 if a1 < a0 else a0), (a1 if a1 > a0 else a0)
        total = b if a == -math.inf else log1p(exp(a - b)) + b
        if t0 < last0 and t1 < last1 and max(t0, t1) < total - 30:
            return total
        last0, last1 = t0, t1
    return math.inf


def rdp_curve(noise_multiplier: float, sample_rate: float = 1.0) -> NDArray[np.float64]:
    """RDP ε(α) on :data:`DEFAULT_RDP_ORDERS` of one Gaussian step with noise multiplier z,
    Poisson-subsampled at rate q (q = 1: plain Gaussian, α/(2z²)); from dp-accounting's
    ``RdpAccountant`` (Mironov, Talwar & Zhang 2019). ``z = 0`` gives ``inf`` everywhere."""
    z = _check_z(noise_multiplier)
    q = _check_q(sample_rate)
    if z == 0.0:
        return np.full(len(DEFAULT_RDP_ORDERS), np.inf)
    return np.array(_rdp_curve_cached(q, z), dtype=np.float64)


@lru_cache(maxsize=1024)
def _rdp_curve_wor_cached(noise_multiplier: float, sample_size: int, population_size: int) -> tuple[float, ...]:
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    acc = rdp.RdpAccountant(orders=list(DEFAULT_RDP_ORDERS), neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.SampledWithoutReplacementDpEvent(population_size, sample_size, dp_event.GaussianDpEvent(noise_multiplier)))
    return tuple(float(x) for x in acc.rdp)


def rdp_curve_wor(noise_multiplier: float, sample_size: int, population_size: int) -> NDArray[np.float64]:
    """RDP ε(α) on :data:`DEFAULT_RDP_ORDERS` of one Gaussian release (noise multiplier z over
    the *replace-one* sensitivity) on a uniform sample of exactly ``sample_size`` of
    ``population_size`` records without replacement, replace-one adjacency (Wang, Balle &
    Kasiviswanathan 2019, Thm 27), from dp-accounting's ``RdpAccountant`` (about 0.4 s a curve;
    cached per (z, m, N)). ``z = 0`` gives ``inf`` everywhere."""
    z = _check_z(noise_multiplier)
    n, m = int(population_size), int(sample_size)
    if n != population_size or n < 1:
        raise ValueError(f"population_size: must be an integer >= 1, got {population_size}")
    if m != sample_size or not 1 <= m <= n:
        raise ValueError(f"sample_size: must be an integer in [1, {n}], got {sample_size}")
    if z == 0.0:
        return np.full(len(DEFAULT_RDP_ORDERS), np.inf)
    return np.array(_rdp_curve_wor_cached(z, m, n), dtype=np.float64)


def rdp_to_epsilon(rdp: NDArray[np.float64], delta: float) -> float:
    """ε at δ from an RDP curve on :data:`DEFAULT_RDP_ORDERS` (dp-accounting's
    ``compute_epsilon``: the conversion of Balle et al. 2020, Thm 21, minimised over orders)."""
    d = _check_delta(delta)
    curve = np.asarray(rdp, dtype=np.float64)
    if curve.shape != (len(DEFAULT_RDP_ORDERS),):
        raise ValueError(f"rdp: must have one value per order ({len(DEFAULT_RDP_ORDERS)}), got shape {curve.shape}")
    if np.all(curve == 0.0):
        return 0.0
    if np.all(np.isinf(curve)):
        return math.inf
    from dp_accounting.rdp import rdp_privacy_accountant

    eps, _ = rdp_privacy_accountant.compute_epsilon(np.array(DEFAULT_RDP_ORDERS), curve, d)
    return float(eps)


def dpsgd_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    method: Method = "rdp",
    value_discretization_interval: float = DEFAULT_PLD_DISCRETIZATION,
) -> float:
    """ε at δ after ``steps`` Poisson-subsampled Gaussian steps (rate q, noise multiplier z),
    add/remove-one adjacency, by dp-accounting's RDP or PLD accountant (what Opacus and
    dp-accounting compute instead of the PHS paper's Lemmas 1-2). ``z = 0`` gives ``inf``;
    ``steps = 0`` gives 0."""
    z = _check_z(noise_multiplier)
    q = _check_q(sample_rate)
    k = _check_steps(steps)
    d = _check_delta(delta)
    m = _check_method(method)
    if k == 0:
        return 0.0
    if z == 0.0:
        return math.inf
    if m == "rdp":
        return rdp_to_epsilon(k * rdp_curve(z, q), d)
    if not value_discretization_interval > 0:
        raise ValueError(f"value_discretization_interval: must be > 0, got {value_discretization_interval}")
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=value_discretization_interval)
    gauss = dp_event.GaussianDpEvent(z)
    step = gauss if q == 1.0 else dp_event.PoissonSampledDpEvent(q, gauss)
    acc.compose(dp_event.SelfComposedDpEvent(step, k))
    return float(acc.get_epsilon(d))


def dpsgd_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    *,
    method: Method = "rdp",
    rtol: float = 1e-4,
    value_discretization_interval: float = DEFAULT_PLD_DISCRETIZATION,
    guess: float | None = None,
) -> float:
    """The smallest noise multiplier z (to relative precision ``rtol``) with
    ``dpsgd_epsilon(z, q, steps, δ) <= target_epsilon`` — like Opacus ``get_noise_multiplier``
    but by Brent's method with a bisection fallback rather than a fixed ε tolerance.

    The returned z always meets the target; z·(1 − rtol) does not (up to the PLD's
    discretisation, which can make ε(z) slightly non-monotone on that scale). ``guess`` (a z
    believed close to the answer, e.g. a neighbouring client's) narrows the bracketing and saves
    most of the accountant evaluations; it never changes the answer beyond ``rtol``.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon: must be > 0 and finite, got {target_epsilon}")
    d = _check_delta(delta)
    q = _check_q(sample_rate)
    k = _check_steps(steps)
    m = _check_method(method)
    if not 0 < rtol < 1:
        raise ValueError(f"rtol: must be in (0, 1), got {rtol}")
    if k == 0:
        return 0.0

    def eps_of(z: float) -> float:
        return dpsgd_epsilon(z, q, k, d, method=m, value_discretization_interval=value_discretization_interval)

    if guess is not None:
        if not (guess > 0 and math.isfinite(guess)):
            raise ValueError(f"guess: must be > 0 and finite, got {guess}")
        start, factor = float(guess), 1.03
    elif m == "pld":
        # PLD evaluations are costly: start from the (cheap) RDP answer, which PLD rarely exceeds.
        start, factor = dpsgd_noise_multiplier(target_epsilon, d, q, k, method="rdp", rtol=1e-3), 1.15
    else:
        start, factor = 1.0, 2.0
    return _smallest_feasible(eps_of, target_epsilon, guess=start, factor=factor, rtol=rtol)


def dpsgd_noise_multipliers(
    target_epsilon: float,
    delta: float,
    sample_rates: NDArray[np.float64] | list[float],
    steps: NDArray[np.int64] | list[int],
    *,
    method: Method = "rdp",
    rtol: float = 1e-4,
) -> NDArray[np.float64]:
    """:func:`dpsgd_noise_multiplier` for many clients at once (one z per (q_i, steps_i)).

    Distinct (q, steps) pairs are solved once each, in order of q, each search warm-started
    from the previous answer (ε is smooth in q and steps, and clients of similar size have
    similar (q, steps), so neighbours' multipliers differ by a few per cent): about half the accountant evaluations of independent searches. Every answer
    meets the target exactly as a cold search would (same ``rtol``).
    """
    q = np.asarray(sample_rates, dtype=np.float64)
    k = np.asarray(steps, dtype=np.int64)
    if q.shape != k.shape or q.ndim != 1:
        raise ValueError(f"sample_rates, steps: must be 1-D of equal length, got {q.shape} and {k.shape}")
    out = np.empty(q.size)
    solved: dict[tuple[float, int], float] = {}
    previous: float | None = None
    for r, s in sorted({(float(r), int(s)) for r, s in zip(q, k, strict=True)}):
        z = dpsgd_noise_multiplier(target_epsilon, delta, r, s, method=method, rtol=rtol, guess=previous)
        solved[(r, s)] = z
        if z > 0:
            previous = z
    for i, (r, s) in enumerate(zip(q, k, strict=True)):
        out[i] = solved[(float(r), int(s))]
    return out


def _smallest_feasible(eps_of: Callable[[float], float], target: float, *, guess: float, factor: float, rtol: float) -> float:
    """Smallest z (relative precision ``rtol``) with eps_of(z) <= target, for eps_of decreasing
    in z: geometric bracketing from ``guess``, Brent's method, then bisection on the bracket."""
    seen: dict[float, float] = {}
    feasible = math.inf  # smallest z seen with eps_of(z) <= target
    infeasible = 0.0  # largest z seen with eps_of(z) > target

    def f(z: float) -> float:
        nonlocal feasible, infeasible
        if z not in seen:
            seen[z] = eps_of(z) - target
            if seen[z] <= 0.0:
                feasible = min(feasible, z)
            else:
                infeasible = max(infeasible, z)
        return seen[z]

    z = guess
    if f(z) > 0.0:
        while f(z) > 0.0:
            z *= factor
            if z > 1e8:
                raise ValueError(f"target_epsilon: {target} is unreachable with noise multiplier <= 1e8")
    else:
        while f(z) <= 0.0:
            z /= factor
            if z < 1e-8:
                return feasible
    lo, hi = infeasible, feasible
    if math.isfinite(f(lo)) and math.isfinite(f(hi)):
        brentq(f, lo, hi, xtol=1e-12, rtol=rtol / 4.0, maxiter=100)
    lo, hi = infeasible, feasible
    while hi - lo > rtol * hi:
        f(0.5 * (lo + hi))
        lo, hi = infeasible, feasible
    return feasible
