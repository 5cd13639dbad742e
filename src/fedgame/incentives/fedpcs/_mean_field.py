"""The mean-field fixed point φ(t) = (1/N) Σ_i ρ_i^t[φ, R] (FedPCS Def. 2, Eq. 18, Theorem 3,
Algorithm 1), solved by a damped fixed-point iteration: the contraction argument of
Theorem 3 treats α as fixed although it depends on φ, so convergence is checked, not assumed.

:func:`mean_field` takes the problem (ρ^0, ϕ, R, K, T, the inclusion rule, the seed) as
arguments and the numerical settings as one :class:`MeanFieldSolverOptions`. Each iteration
of :func:`_solve` runs these phases, one helper each:

1. :func:`_choose_mode`: how widely to search for the clients' best responses this time;
2. :func:`_apply_map`: every client's best response to φ_m (Theorem 1;
   :class:`_ClientResponses`), the mean Φ of their trajectories (Eqs. 18, 20) and the
   residual r_m = max_t |Φ(t) − φ_m(t)|;
3. :func:`_verify`: once r_m ≤ tol, a wider search at the same φ before accepting it;
4. :class:`_Damping`: the stopping and step-size rules;
5. :func:`_next_phi`: the damped step φ_{m+1} = (1 − β) φ_m + β Φ (or Anderson mixing,
   :class:`_Anderson`).

:func:`_client_types`, :func:`_initial_phi` and :func:`_initial_archive` set the iteration
up; :func:`_result` assembles the answer."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, TypedDict, Unpack

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.core.validate import (
    as_clients,
    as_rounds,
    check_horizon,
    check_population,
    check_positive,
)
from fedgame.incentives.fedpcs import _kernels, _linalg
from fedgame.incentives.fedpcs._best_response import (
    Candidates,
    Engine,
    Solver,
    _random_starts,
    _Raw,
    default_engine,
    solve_types,
    unique_types,
)
from fedgame.incentives.fedpcs._dynamics import Inclusion, _check_inclusion, _trajectory_tm, evaluate

__all__ = ["PAPER_MF_TOL", "Acceleration", "MeanFieldResult", "MeanFieldSolverOptions", "Restarts", "Update", "mean_field"]

FloatArray = NDArray[np.float64]
Restarts = Literal["final", "every", "none"]
Acceleration = Literal["anderson"] | None
Update = Literal["picard", "consistent"]

#: the paper's stopping tolerance ε_0 of Algorithm 1 (Sec. VIII-A, which calls it a clipping
#: threshold of Algorithm 2; it is Algorithm 1's tolerance)
PAPER_MF_TOL = 1e-3

#: residual levels at which the warm iteration also tries the corner starts α ≡ 0, 1, 0.5
_CORNER_CHECKS = (1e-2, 1e-4)

#: iterations without a new best residual, at β = beta_min, before giving up (a cycle)
_CYCLE_PATIENCE = 20

#: once the residual is below this, a client whose choice jumps to another basin is pinned
_PIN_BELOW = 1e-4

#: the complete multi-start is not repeated if φ moved less than this since it last ran
_FULL_REUSE = 1e-2


@dataclass(frozen=True, kw_only=True)
class MeanFieldSolverOptions:
    """How :func:`mean_field` computes the fixed point, not which one: the problem (ρ^0, ϕ,
    R, K, T, the inclusion rule) and the seed are arguments of :func:`mean_field`. Frozen,
    so one instance can serve many solves; checked on construction (``ValueError`` naming
    the field). Distinct from ``fedgame.solve.problems.MeanFieldOptions``, the pydantic
    block of the JSON problem format, which sets three of these fields and converts with
    its ``solver_options()``.

    The fixed-point iteration (Algorithm 1, with damping):

    ``tol``: stop once r_m = max_t |Φ(t) − φ_m(t)| ≤ ``tol`` (the unsigned form of Algorithm
    1's ε ≤ ε_0; the paper's ε_0 is :data:`PAPER_MF_TOL`). ``max_iter``: at most this many
    iterations. ``beta``: the initial damping β of φ_{m+1} = (1−β) φ_m + β Φ (β = 1 is
    Algorithm 1's plain update φ = φ_m^est); halved, never below ``beta_min``, when the
    residual grows twice in a row or stalls (:class:`_Damping`).

    ``update`` chooses the map iterated. ``"picard"`` is Algorithm 1's map: the new φ is Φ,
    the mean of the trajectories of Eq. (20) driven by φ_m. ``"consistent"`` (default): the
    new φ is the mean trajectory of Eq. (15) under the same best responses,
    ρ_i^{t+1} = (1−α_i^t) φ(t) + α_i^t ρ_i^t with φ(t) = mean_j ρ_j^t itself. Both have the
    same fixed points (there φ(t) is the true mean, so Eqs. 15 and 20 coincide) and the same
    residual r_m and stopping rule; the consistent update already accounts for how the mean
    propagates through the rounds (it is the exact Jacobian step for frozen α), so where
    Picard moves the error forward by about one round per iteration (≈ T + 20 iterations;
    T = 30, N = 10⁴: no convergence within 200), it needs a handful (8-11 for N = 100-1000,
    T = 30), matching the paper's Fig. 3 ("mostly within 5 iterations" at ε_0 = 1e-3).

    ``acceleration="anderson"`` (not in the paper) replaces the damped step by Anderson
    mixing over the last ``anderson_memory`` iterates (type II, same β), restarted whenever
    the residual grows; the fixed point and the stopping rule are unchanged.

    The clients' best responses (Theorem 1, solved numerically; :func:`best_response`):

    ``restarts="every"`` adds the complete multi-start of :func:`best_response` (α ≡ 0, 1,
    0.5, damped sweeps of Eq. (21), ``n_starts`` random draws) at every iteration — the
    most thorough and slowest setting. ``restarts="final"`` (default) adds it only once the
    residual is below ``tol`` (after a cheaper check with the corner starts); if it finds a
    better response for any client the iteration continues from it, so the returned α is
    always a complete multi-start best response to the returned φ. ``restarts="none"``
    skips it (the corner starts still run): for the inner solves of an outer loop that
    verifies its own answer with a final complete solve (:func:`stackelberg`).

    ``solver``: the local solver of every start (``"newton"`` or ``"lbfgsb"``).
    ``sweep_restarts``, ``sweep_iters``, ``sweep_damping``: how many damped sweeps of Eq.
    (21) seed the complete multi-start, their iteration cap and damping. The cap is 500
    here (2000 in :func:`best_response`): the sweeps only seed the Newton/L-BFGS-B solves,
    and on N = 1000, T = 30 the lower cap leaves φ and every utility unchanged (to 1e-14)
    while saving ~15 % of the solve. ``kkt_tol``: the result is ``converged`` only if every
    client's KKT residual is at most this. ``vectorize=False`` solves client type by client
    type instead of all at once (for checks). ``threads``: the best responses of an iteration
    are split over this many threads (None: every core the process may use); each client's
    problem is solved by itself, so the answer is the same to the last bit whatever it is."""

    # the fixed-point iteration
    tol: float = 1e-7
    max_iter: int = 200
    beta: float = 1.0
    beta_min: float = 0.05
    update: Update = "consistent"
    acceleration: Acceleration = None
    anderson_memory: int = 5
    # the clients' best responses
    restarts: Restarts = "final"
    n_starts: int = 8
    solver: Solver = "newton"
    sweep_restarts: int = 3
    sweep_iters: int = 500
    sweep_damping: float = 0.05
    kkt_tol: float = 1e-7
    vectorize: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        """Reject settings the iteration cannot run with, naming the field."""
        check_positive("tol", self.tol)
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ValueError(f"max_iter: must be an integer >= 1, got {self.max_iter!r}")
        if not 0.0 < self.beta_min <= self.beta <= 1.0:
            raise ValueError(f"beta: must satisfy 0 < beta_min <= beta <= 1, got beta={self.beta!r}, beta_min={self.beta_min!r}")
        if self.restarts not in ("final", "every", "none"):
            raise ValueError(f"restarts: must be 'final', 'every' or 'none', got {self.restarts!r}")
        if self.update not in ("picard", "consistent"):
            raise ValueError(f"update: must be 'picard' or 'consistent', got {self.update!r}")
        if self.acceleration not in (None, "anderson"):
            raise ValueError(f"acceleration: must be None or 'anderson', got {self.acceleration!r}")
        if isinstance(self.anderson_memory, bool) or not isinstance(self.anderson_memory, int) or self.anderson_memory < 1:
            raise ValueError(f"anderson_memory: must be an integer >= 1, got {self.anderson_memory!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= 256
        ):
            raise ValueError(f"threads: must be None or an integer in [1, 256], got {self.threads!r}")


_DEFAULT_OPTIONS = MeanFieldSolverOptions()


class _OptionKeywords(TypedDict, total=False):
    """The fields of :class:`MeanFieldSolverOptions`, still accepted as keywords of
    :func:`mean_field` (the calling convention before the options object)."""

    tol: float
    max_iter: int
    beta: float
    beta_min: float
    update: Update
    acceleration: Acceleration
    anderson_memory: int
    restarts: Restarts
    n_starts: int
    solver: Solver
    sweep_restarts: int
    sweep_iters: int
    sweep_damping: float
    kkt_tol: float
    vectorize: bool
    threads: int | None


def _resolve_options(options: MeanFieldSolverOptions | None, keywords: _OptionKeywords) -> MeanFieldSolverOptions:
    """``options`` (default: all defaults) with each option given as a keyword of
    :func:`mean_field` replacing that field, so that calls written before the options object
    (``mean_field(..., tol=..., beta=...)``) solve exactly as before."""
    if options is not None and not isinstance(options, MeanFieldSolverOptions):
        raise TypeError(f"options: expected MeanFieldSolverOptions, got {type(options).__name__}")
    base = _DEFAULT_OPTIONS if options is None else options
    return dataclasses.replace(base, **keywords) if keywords else base


def _ro(x: ArrayLike) -> FloatArray:
    """A read-only copy of ``x`` (the result's arrays cannot be changed in place)."""
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
    every KKT residual ≤ kkt_tol. ``pinned``: clients held in one of two tied basins
    (usually empty) and ``regret`` (n,): best utility found in the last solve minus the
    utility played (0 unless pinned) — the equilibrium is then an ε-Nash equilibrium with
    ε = max regret."""

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
    regret: FloatArray
    pinned: NDArray[np.intp]


class _Archive:
    """Distinct local optima found so far for each client type (at most ``cap`` per type,
    the best first). Each Picard iteration re-solves every entry warm, so a client whose
    best response jumps to another known basin as φ moves is caught at once."""

    def __init__(self, T: int, cap: int = 4, same: float = 1e-6) -> None:
        """An empty archive for horizon T: up to ``cap`` optima per type, two optima being
        the same when they agree after rounding to multiples of ``same``."""
        self.a = np.empty((T, 0))
        self.owner = np.empty(0, dtype=np.intp)
        self.cap, self.same = cap, same

    @property
    def extra(self) -> tuple[FloatArray, NDArray[np.intp]] | None:
        """The archived optima as ``solve_types`` warm starts (α (T, P), owner (P,)), or
        None while the archive is empty."""
        return (self.a, self.owner) if self.owner.size else None

    def replace(self, c: Candidates, keep: FloatArray | None = None) -> None:
        """Archive the candidates; the current choices ``keep`` (T, m) always stay.

        Per type: the choice first, then the candidates by decreasing U (ties by position),
        the first of each distinct optimum (equal after rounding to multiples of ``same``),
        at most ``cap`` (``_kernels.archive_pick``: compiled, one pass over each type's few
        candidates; its NumPy form hashes and sorts them, the same entries in the same order)."""
        keep_cols = np.empty((c.a.shape[0], 0)) if keep is None else keep
        m = max(keep_cols.shape[1], int(c.owner.max(initial=-1)) + 1)
        owner = np.asarray(c.owner, dtype=np.intp)
        self.a, self.owner = _kernels.archive_pick(keep_cols, c.a, c.U, c.kkt, owner, m, self.cap, self.same)


def _tracked(cand: Candidates, previous: FloatArray) -> _Raw:
    """For every type the candidate closest to its previous choice: the same basin,
    followed to the new φ by the warm start."""
    pick = np.empty(previous.shape[1], dtype=np.intp)
    _kernels.closest_per_owner(cand.a, previous, np.asarray(cand.owner, dtype=np.intp), pick)  # max_t |Δα|; NaN: farthest
    assert np.all(pick >= 0)  # every type has candidates: its corners or its archived optima
    return _Raw(cand.a[:, pick], cand.U[pick], cand.kkt[pick], 0)


# --------------------------------------------------------------------------------------------
# The public solver
# --------------------------------------------------------------------------------------------


def mean_field(
    rho0: ArrayLike,
    varphi: ArrayLike,
    R: ArrayLike,
    K: int,
    T: int,
    *,
    options: MeanFieldSolverOptions | None = None,
    phi_init: ArrayLike | None = None,
    alpha_init: ArrayLike | None = None,
    rng: np.random.Generator | int | None = None,
    inclusion: Inclusion = "privacy",
    **option_keywords: Unpack[_OptionKeywords],
) -> MeanFieldResult:
    """Mean-field equilibrium of the client game under rewards ``R``: the fixed point
    φ(t) = mean_i ρ_i^t of Def. 2 / Eq. (18), each client playing its best response to φ
    (Theorem 1), found by a damped fixed-point iteration (Algorithm 1 with damping, φ(0)
    pinned to mean ρ^0, and an unsigned stopping rule max_t |Φ(t) − φ(t)| ≤ ``tol``).

    The problem: ``rho0``, ``varphi`` (N clients), ``R`` (a number or T+1 values ≥ 0),
    ``K`` draws per round, rounds t = 0..T, the sampling rule ``inclusion`` ("privacy",
    Eq. 14, by default, or "uniform") and ``rng``, the seed of the random starts. How it is
    solved: ``options`` (:class:`MeanFieldSolverOptions`; defaults when None). Each of its
    fields may also still be passed as a keyword (``tol=..., beta=...``), replacing that
    field of ``options``. ``phi_init`` (T+1,) and ``alpha_init`` (n, T) or (n, T+1)
    warm-start the iteration from an earlier equilibrium.

    The iteration: φ_0(t) = mean ρ^0 (or ``phi_init``; φ(0) is always mean ρ^0); each
    iteration solves every client's best response to φ_m, warm-started from the previous
    iteration, Φ(t) = mean_i ρ_i^t, r_m = max_t |Φ(t) − φ_m(t)|; stop when r_m ≤ ``tol``,
    else φ_{m+1} = (1−β)φ_m + βΦ with β halved (not below ``beta_min``) whenever r grows
    twice in a row, and also (an addition to that rule) when r has not fallen over three
    iterations (by 10% with ``update="consistent"``), which breaks the cycles a client
    switching basins back and forth can cause.

    Warm starts: every distinct local optimum found so far for a client (up to 4) is
    re-solved from its previous position, and the best kept — so a client whose best
    response jumps between known basins is followed at once. The first iteration (without
    ``alpha_init``) starts from α ≡ 0, 1, 0.5, and so does the first iteration after the
    residual falls below 1e-2 and below 1e-4 (new basins found early cost fewer iterations).
    When the residual reaches ``tol`` the answer is verified with wider searches
    (``restarts``, :class:`MeanFieldSolverOptions`); when a verification finds new basins,
    β is reset to its initial value.

    Every best response of an iteration is solved at once for all clients and starts: no
    loop over clients (the engines of ``_best_response``: each problem solved to the end by
    compiled kernels where Numba is installed, else row operations over a window of
    problems; the complete multi-start that follows the corner check at the same φ reuses
    that check's corner solutions).
    ``_mean_field_reference`` keeps the path before these engines, for the equality tests.

    Ties: a finite population can lack a pure-strategy fixed point at ``tol`` — a client
    whose two best basins tie near the fixed point switches between them, moving the mean by
    about |Δρ|/N each time, so the residual never settles. Hence a client whose best response
    switches basin (rather than following its previous one) a second time once the residual
    is below 1e-4, or in the iterations before the residual stalls, is pinned: it keeps
    following that basin, the map becomes continuous and the iteration converges to a fixed
    point at which the pinned clients play a local optimum whose utility is within
    ``regret`` of their best (an ε-Nash equilibrium; reported in ``pinned``/``regret``). If
    even that fails, the iteration stops once β = ``beta_min`` and the residual has not
    improved for 20 iterations, with ``converged=False``. The complete multi-start is not
    repeated when φ has moved by less than 1e-2 (max-norm) since it last ran: its local
    optima are followed to the new φ by the warm starts."""
    inclusion = _check_inclusion(inclusion)
    return _solve(
        rho0,
        varphi,
        R,
        K,
        T,
        options=_resolve_options(options, option_keywords),
        phi_init=phi_init,
        alpha_init=alpha_init,
        rng=rng,
        engine=default_engine(),
        inclusion=inclusion,
    )


def _mean_field_reference(
    rho0: ArrayLike,
    varphi: ArrayLike,
    R: ArrayLike,
    K: int,
    T: int,
    *,
    options: MeanFieldSolverOptions | None = None,
    phi_init: ArrayLike | None = None,
    alpha_init: ArrayLike | None = None,
    rng: np.random.Generator | int | None = None,
    inclusion: Inclusion = "privacy",
    **option_keywords: Unpack[_OptionKeywords],
) -> MeanFieldResult:
    """:func:`mean_field` as it was before the streamed engines: the same damped fixed-point
    iteration, with every best response solved by the chunked ``_solvers.newton`` and the
    batched ``_solvers.damped_sweep`` (and, with ``vectorize=False``, client by client), and
    the corner starts of a complete multi-start solved again even when the verification has
    just solved them at the same φ. An independent implementation for the equality tests;
    same arguments and result as :func:`mean_field`."""
    inclusion = _check_inclusion(inclusion)
    return _solve(
        rho0,
        varphi,
        R,
        K,
        T,
        options=_resolve_options(options, option_keywords),
        phi_init=phi_init,
        alpha_init=alpha_init,
        rng=rng,
        engine="reference",
        inclusion=inclusion,
    )


# --------------------------------------------------------------------------------------------
# The iteration
# --------------------------------------------------------------------------------------------


def _solve(
    rho0: ArrayLike,
    varphi: ArrayLike,
    R: ArrayLike,
    K: int,
    T: int,
    *,
    options: MeanFieldSolverOptions,
    phi_init: ArrayLike | None,
    alpha_init: ArrayLike | None,
    rng: np.random.Generator | int | None,
    engine: Engine,
    inclusion: Inclusion = "privacy",
) -> MeanFieldResult:
    """The damped fixed-point iteration behind :func:`mean_field` and
    :func:`_mean_field_reference` (rules in :func:`mean_field`): Algorithm 1's loop — best
    responses to φ_m (Theorem 1), their mean Φ (Eq. 18), the residual, the next φ — with the
    verification, damping and tie handling that make it converge on a finite population.
    ``inclusion``: the sampling rule, already checked by the caller."""
    types = _client_types(rho0, varphi, R, K, T, inclusion)
    phi = _initial_phi(types, phi_init)
    starts = _random_starts(rng, options.n_starts, types.T) if options.n_starts else None
    responses = _ClientResponses(types, options, starts, engine, _initial_archive(types, alpha_init))
    damping = _Damping.start(options)
    anderson = _Anderson(options.anderson_memory) if options.acceleration == "anderson" else None
    trace = _Trace()
    milestones = [level for level in _CORNER_CHECKS if level > options.tol]
    raw: _Raw | None = None
    res = np.inf
    converged = False
    for m in range(options.max_iter):
        mode = _choose_mode(options.restarts, milestones, trace.history, damping.stalled)
        raw, Phi, res = _apply_map(responses, phi, mode)
        trace.count(phi, mode)
        if res <= options.tol and mode != "full":
            raw, Phi, res = _verify(responses, phi, options, trace)
            if res > options.tol:  # new basins changed the map: restart the damping afresh
                damping.restart(len(trace.history) + 1)
        responses.end_iteration(raw, trace.history)
        trace.record(phi, res)
        if res <= options.tol:
            converged = True
            break
        if m == options.max_iter - 1 or damping.cycling(res):
            break
        grew = damping.adapt(trace.history)
        if damping.stalled:
            responses.pin_recent()
        target = _consistent_mean(types, raw) if options.update == "consistent" else Phi
        phi = _next_phi(phi, target, damping.beta, anderson, grew, types.mean0)
    assert raw is not None
    return _result(types, responses, raw, phi, res, trace, damping.beta, converged, options.kkt_tol)


# --------------------------------------------------------------------------------------------
# Setting up: the client types, φ_0 and the warm starts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Types:
    """The problem reduced to its distinct client types. A client's best response (Theorem
    1) depends on it only through (ρ_i^0, ϕ_i), so the map is evaluated once per type, and
    the population means of Eq. (18) weight each type by its share of the N clients."""

    rho0: FloatArray  # ρ^0 of each type (m,)
    varphi: FloatArray  # ϕ of each type (m,)
    weights: FloatArray  # share of the N clients of each type (m,)
    first: NDArray[np.intp]  # one client of each type (m,)
    inverse: NDArray[np.intp]  # the type of each client (N,)
    R: FloatArray  # rewards (T+1,)
    N: int
    K: int
    T: int
    mean0: float  # φ(0) = mean_i ρ_i^0, which Eq. (18) fixes whatever α is
    inclusion: Inclusion  # the sampling rule the clients face (P of Eq. 14, or uniform)

    @property
    def m(self) -> int:
        """Number of distinct types."""
        return int(self.rho0.size)


def _client_types(rho0: ArrayLike, varphi: ArrayLike, R: ArrayLike, K: int, T: int, inclusion: Inclusion) -> _Types:
    """Validate the problem (each message names its field; ``inclusion`` is checked by the
    caller) and group the clients into types of equal (ρ^0, ϕ)."""
    r0, vp = as_clients(rho0, varphi)
    T = check_horizon(T)
    R_arr = as_rounds("R", R, T, lower=0.0)
    N, K = check_population(r0.size, K)
    u_r0, u_vp, first, inverse = unique_types(r0, vp)
    weights = np.bincount(inverse, minlength=u_r0.size) / N
    return _Types(u_r0, u_vp, weights, first, inverse, R_arr, N, K, T, float(r0.mean()), inclusion)


def _initial_phi(types: _Types, phi_init: ArrayLike | None) -> FloatArray:
    """φ_0, the start of the iteration. Algorithm 1 allows any φ_0; without ``phi_init`` it
    is the constant mean ρ^0 (no client moves). φ(0) is mean ρ^0 whatever was given: no
    decision has acted yet at t = 0, so Eq. (18) fixes it."""
    if phi_init is None:
        phi = np.full(types.T + 1, types.mean0)
    else:
        phi = as_rounds("phi_init", phi_init, types.T, lower=0.0, strict=True)
    phi[0] = types.mean0
    return phi


def _initial_archive(types: _Types, alpha_init: ArrayLike | None) -> _Archive:
    """The archive of known local optima, seeded with ``alpha_init`` (an earlier
    equilibrium's α, (N, T) or (N, T+1); α^T = 0 is dropped) so that the first iteration
    warm-starts every type from it; empty without it (the corner starts are used then)."""
    archive = _Archive(types.T)
    if alpha_init is not None:
        N, T = types.N, types.T
        w = np.asarray(alpha_init, dtype=float)
        if w.ndim != 2 or w.shape[0] != N or w.shape[1] not in (T, T + 1):
            raise ValueError(f"alpha_init: expected shape ({N}, {T}) or ({N}, {T + 1}), got {w.shape}")
        if not np.all((w >= 0) & (w <= 1)):
            raise ValueError("alpha_init: values must be in [0, 1]")
        archive.a = np.ascontiguousarray(w[types.first, :T].T)
        archive.owner = np.arange(types.m)
    return archive


# --------------------------------------------------------------------------------------------
# One evaluation of the map: best responses to φ_m and the mean field they produce
# --------------------------------------------------------------------------------------------

#: which starts the best responses are solved from: "warm" the archive (the corners while it
#: is empty), "corners" α ≡ 0, 1, 0.5 and the archive, "full" the complete multi-start and
#: the archive
_Mode = Literal["warm", "corners", "full"]


class _ClientResponses:
    """Every client type's best response to a given φ: the α maximising the utility of
    Eq. (19) under the dynamics of Eq. (20) (Theorem 1, solved numerically by multi-start),
    with the memory that carries over between iterations.

    ``archive``: the distinct local optima found so far (:class:`_Archive`), each re-solved
    from its previous position at every call. ``switched``: the types whose last best
    response left the basin their previous choice was in; ``pinned``: the types held in
    their basin because they switch back and forth at a tie (:func:`mean_field`, 'Ties');
    ``best_U``: the best utility found in the last solve, for the regret of pinned types."""

    def __init__(
        self, types: _Types, options: MeanFieldSolverOptions, starts: FloatArray | None, engine: Engine, archive: _Archive
    ) -> None:
        """No type pinned or switched yet. ``starts``: the random starts of the complete
        multi-start, drawn once from the seed and reused by every complete solve."""
        self.types, self.options, self.starts, self.engine = types, options, starts, engine
        self.archive = archive
        m = types.m
        self.pinned = np.zeros(m, dtype=bool)  # types held in their basin (ties)
        self.best_U = np.full(m, -np.inf)  # best utility found for each type in the last solve
        self.switched = np.zeros(m, dtype=bool)  # the last solve moved the type to another basin
        self.late_switches = np.zeros(m, dtype=np.int64)  # switches once the residual is small
        self.recent: list[NDArray[np.bool_]] = []  # switches of the last iterations
        self.selected: list[FloatArray] = []  # α chosen at each iteration (for the tie detection)
        # the φ of the last batched solve and its corner solutions, when it had corner starts
        self._corners: tuple[FloatArray, tuple[FloatArray, FloatArray, FloatArray]] | None = None

    def solve(self, phi: FloatArray, mode: _Mode) -> _Raw:
        """Best responses (T, m) to ``phi`` from the starts of ``mode``; pinned types keep
        the basin they were in. Every candidate found goes into the archive."""
        if self.options.vectorize:
            raw, cand = self._solve_at_once(phi, mode)
        else:
            raw, cand = self._solve_type_by_type(phi, mode)
        self.best_U[:] = raw.U
        raw = self._follow_basins(raw, cand)
        self.archive.replace(cand, keep=raw.a)
        return raw

    def _solve_types(
        self,
        rho0: FloatArray,
        varphi: FloatArray,
        phi: FloatArray,
        mode: _Mode,
        extra: tuple[FloatArray, NDArray[np.intp]] | None,
        corners_solved: tuple[FloatArray, FloatArray, FloatArray] | None = None,
    ) -> tuple[_Raw, Candidates]:
        """One batched multi-start solve (``solve_types``) for the given types: the random
        starts and damped sweeps only in mode "full", the corners unless mode is "warm" and
        the archive has entries, the archived optima ``extra`` always."""
        o, t = self.options, self.types
        full = mode == "full"
        raw, cand = solve_types(
            rho0,
            varphi,
            phi,
            t.R,
            t.N,
            t.K,
            starts=self.starts if full else None,
            warm=None,
            sweep_restarts=o.sweep_restarts if full else 0,
            sweep_iters=o.sweep_iters,
            sweep_damping=o.sweep_damping,
            solver=o.solver,
            chunk=1,
            include_corners=mode != "warm" or self.archive.extra is None,
            extra=extra,
            keep_all=True,
            engine=self.engine,
            corners_solved=corners_solved,
            threads=o.threads,
            inclusion=t.inclusion,
        )
        assert cand is not None
        return raw, cand

    def _solve_at_once(self, phi: FloatArray, mode: _Mode) -> tuple[_Raw, Candidates]:
        """All types and starts in one solve. A complete multi-start right after a corner
        check at the same φ reuses that check's corner solutions (not with the reference
        engine; the numbers are the same)."""
        t = self.types
        again = None
        if self.engine != "reference" and mode == "full" and self._corners is not None and np.array_equal(self._corners[0], phi):
            again = self._corners[1]
        raw, cand = self._solve_types(t.rho0, t.varphi, phi, mode, self.archive.extra, again)
        self._corners = None if cand.corners is None else (phi.copy(), cand.corners)
        return raw, cand

    def _solve_type_by_type(self, phi: FloatArray, mode: _Mode) -> tuple[_Raw, Candidates]:
        """The same solve one type at a time (``vectorize=False``, for checks)."""
        t = self.types
        raws, cands = [], []
        for j in range(t.m):
            sel = self.archive.owner == j
            ex = (self.archive.a[:, sel], np.zeros(int(sel.sum()), dtype=np.intp)) if sel.any() else None
            raw_j, c_j = self._solve_types(t.rho0[j : j + 1], t.varphi[j : j + 1], phi, mode, ex)
            raws.append(raw_j)
            cands.append(Candidates(c_j.a, c_j.U, c_j.kkt, np.full(c_j.U.size, j)))
        cand = Candidates(
            np.concatenate([c.a for c in cands], axis=1),
            np.concatenate([c.U for c in cands]),
            np.concatenate([c.kkt for c in cands]),
            np.concatenate([c.owner for c in cands]),
        )
        raw = _Raw(
            np.concatenate([r.a for r in raws], axis=1),
            np.concatenate([r.U for r in raws]),
            np.concatenate([r.kkt for r in raws]),
            raws[0].n_starts,
        )
        return raw, cand

    def _follow_basins(self, raw: _Raw, cand: Candidates) -> _Raw:
        """Compare each type's best response with the candidate that followed its previous
        choice to this φ (:func:`_tracked`): mark the types that jumped to another basin
        (``switched``), and give the pinned types the followed candidate instead."""
        self.switched[:] = False
        if not self.selected:
            return raw
        tr = _tracked(cand, self.selected[-1])
        self.switched[:] = np.abs(raw.a - tr.a).max(axis=0) > 1e-4
        pinned = self.pinned
        if pinned.any():
            a, U, kkt = raw.a.copy(), raw.U.copy(), raw.kkt.copy()
            a[:, pinned], U[pinned], kkt[pinned] = tr.a[:, pinned], tr.U[pinned], tr.kkt[pinned]
            raw = _Raw(a, U, kkt, raw.n_starts)
            self.switched[pinned] = False
        return raw

    def end_iteration(self, raw: _Raw, history: list[float]) -> None:
        """Book-keeping after the iteration's last solve (``history``: the residuals of the
        earlier iterations). A type switching basin a second time once the residual is below
        1e-4 oscillates at a tie: pin it where it is, or it may switch back and forth for
        ever. Remember this iteration's switches and choice."""
        if history and history[-1] < _PIN_BELOW:
            self.late_switches += self.switched
            self.pinned |= self.late_switches >= 2
        self.recent.append(self.switched.copy())
        del self.recent[:-4]
        self.selected.append(raw.a.copy())
        del self.selected[:-2]

    def pin_recent(self) -> None:
        """The iteration stalled (a cycle of the map): the types that switched basin in the
        recent iterations sit at a tie between basins, so hold each in its current basin from
        now on."""
        for sw in self.recent:
            self.pinned |= sw


def _picard_mean(types: _Types, raw: _Raw, phi: FloatArray) -> FloatArray:
    """Φ(t) = mean_i ρ_i^t: the population mean (Eq. 18) of the clients' trajectories of
    Eq. (20), driven by ``phi``, under their best responses ``raw`` — Algorithm 1's
    estimate φ_m^est; the mean field is a fixed point of φ ↦ Φ."""
    rho_u = _trajectory_tm(raw.a, types.rho0, phi)  # evaluate()'s ρ, without P, g and U
    return _linalg.weighted_rows(rho_u, types.weights)


def _consistent_mean(types: _Types, raw: _Raw) -> FloatArray:
    """Mean trajectory of Eq. (15): ρ_i^{t+1} = (1−α_i^t) φ(t) + α_i^t ρ_i^t with φ(t) the
    population mean itself, i.e. the dynamics driven by their own average under the
    best responses ``raw`` (the target of ``update="consistent"``)."""
    out = np.empty(types.T + 1)
    _kernels.consistent_mean(raw.a, types.rho0, types.weights, types.mean0, out)  # compiled: NumPy's sums to the bit
    return out


def _apply_map(responses: _ClientResponses, phi: FloatArray, mode: _Mode) -> tuple[_Raw, FloatArray, float]:
    """One evaluation of the mean-field map at φ_m: the best responses to φ_m (Theorem 1),
    their mean Φ (Eqs. 18, 20) and the residual r_m = max_t |Φ(t) − φ_m(t)| (Algorithm 1's
    ε, taken unsigned and over all rounds)."""
    raw = responses.solve(phi, mode)
    Phi = _picard_mean(responses.types, raw, phi)
    return raw, Phi, float(np.max(np.abs(Phi - phi)))


# --------------------------------------------------------------------------------------------
# Search width, verification and the record of the iterations
# --------------------------------------------------------------------------------------------


def _choose_mode(restarts: Restarts, milestones: list[float], history: list[float], stalled: bool) -> _Mode:
    """The starts of this iteration's best responses: the complete multi-start every time
    with ``restarts="every"``; else the warm starts, widened to the corner starts once the
    residual has passed one of the ``milestones`` (1e-2, 1e-4 above ``tol``; each passed one
    is removed) or the iteration stalled, so that new basins are found early."""
    if restarts == "every":
        return "full"
    mode: _Mode = "warm"
    if milestones and history and history[-1] <= milestones[0]:
        mode = "corners"
        while milestones and history[-1] <= milestones[0]:
            milestones.pop(0)
    if stalled:
        mode = "corners"
    return mode


@dataclass
class _Trace:
    """What the iteration reports besides the answer: the residual and φ of every
    iteration (the convergence plot of the paper's Fig. 3), the number of map evaluations
    and of complete multi-starts, and the φ at which the last complete multi-start ran."""

    history: list[float] = field(default_factory=list)
    phis: list[FloatArray] = field(default_factory=list)
    iterations: int = 0
    full_solves: int = 0
    phi_full: FloatArray | None = None

    def count(self, phi: FloatArray, mode: _Mode) -> None:
        """An iteration's map evaluation at ``phi``, from the starts of ``mode``."""
        self.iterations += 1
        if mode == "full":
            self.full_solves += 1
            self.phi_full = phi.copy()

    def record(self, phi: FloatArray, res: float) -> None:
        """The end of an iteration at φ_m = ``phi`` with residual r_m = ``res``."""
        self.phis.append(phi.copy())
        self.history.append(res)


def _verify(responses: _ClientResponses, phi: FloatArray, options: MeanFieldSolverOptions, trace: _Trace) -> tuple[_Raw, FloatArray, float]:
    """Check a φ whose residual reached ``tol`` with wider searches at the same φ: first the
    cheap corner starts, then the complete multi-start — unless ``restarts="none"`` or it
    already ran at a φ within 1e-2 (max-norm), whose basins the warm starts have followed
    here. A better response found for any client moves Φ, the residual rises above
    ``tol`` and the iteration goes on from it; hence the returned α is a best response to
    the returned φ over every start tried."""
    raw, Phi, res = _apply_map(responses, phi, "corners")
    if res <= options.tol and options.restarts != "none" and (trace.phi_full is None or np.max(np.abs(phi - trace.phi_full)) > _FULL_REUSE):
        raw, Phi, res = _apply_map(responses, phi, "full")
        trace.full_solves += 1
        trace.phi_full = phi.copy()
    return raw, Phi, res


# --------------------------------------------------------------------------------------------
# The damped update
# --------------------------------------------------------------------------------------------


@dataclass
class _Damping:
    """The step size β of φ_{m+1} = (1 − β) φ_m + β Φ and the rules that change it (the
    contraction of Theorem 3 is not guaranteed once α moves with φ, so β is adapted):
    halved, not below ``beta_min``, when the residual grows twice in a row or stalls; reset
    to ``beta0`` when a verification finds new basins. Also decides when to give up on a
    cycle (:meth:`cycling`)."""

    beta0: float
    beta_min: float
    consistent: bool  # update="consistent": a stall is less than a 10 % decrease
    beta: float
    grow: int = 0  # consecutive iterations in which the residual grew
    last_stall: int = 0  # iteration count at the last stall (or restart)
    best_res: float = np.inf
    since_best: int = 0  # iterations since the residual reached best_res
    stalled: bool = False

    @classmethod
    def start(cls, options: MeanFieldSolverOptions) -> _Damping:
        """The damping state before the first iteration."""
        return cls(beta0=options.beta, beta_min=options.beta_min, consistent=options.update == "consistent", beta=options.beta)

    def restart(self, n_done: int) -> None:
        """New basins changed the map: restart the damping afresh (β back to ``beta0``,
        ``n_done`` iterations done, counting this one)."""
        self.beta, self.grow, self.last_stall = self.beta0, 0, n_done
        self.best_res, self.since_best = np.inf, 0

    def cycling(self, res: float) -> bool:
        """Record residual ``res``; True once β = ``beta_min`` and the residual has not
        reached a new best for 20 iterations: fully damped and no progress, clients at a tie
        between two basins flip back and forth, and a pure-strategy fixed point closer than
        this may not exist."""
        self.best_res = min(self.best_res, res)
        if res <= self.best_res:
            self.since_best = 0
        else:
            self.since_best += 1
        return self.beta <= self.beta_min and self.since_best >= _CYCLE_PATIENCE

    def adapt(self, history: list[float]) -> bool:
        """Adjust β after the iteration whose residual is ``history[-1]``: halve it when the
        residual grew twice in a row; and (not in the plain damping rule) when it stalled —
        no 10 % decrease (``update="consistent"``; no decrease with ``"picard"``) over three
        iterations means a cycle of the map: damp it (and look for new basins with the corner
        starts, :func:`_choose_mode`). Returns whether the residual just grew."""
        grew = len(history) >= 2 and history[-1] > history[-2]
        if grew:
            self.grow += 1
            if self.grow >= 2:
                self.beta, self.grow = max(self.beta / 2.0, self.beta_min), 0
        else:
            self.grow = 0
        self.stalled = len(history) - self.last_stall >= 4 and history[-1] > (0.9 if self.consistent else 1.0) * history[-4]
        if self.stalled:
            self.beta, self.grow, self.last_stall = (max(self.beta / 2.0, self.beta_min), 0, len(history))
        return grew


class _Anderson:
    """Anderson mixing (type II) of the damped map over the last ``memory`` iterates
    (``acceleration="anderson"``, not in the paper): the step that solves the secant model
    of Φ(φ) − φ fitted to the recent iterates. The fixed point and the stopping rule are
    unchanged."""

    def __init__(self, memory: int) -> None:
        """An empty memory of at most ``memory`` + 1 (iterate, map value) pairs."""
        self.memory = memory
        self.xs: list[FloatArray] = []  # iterates φ_k
        self.gs: list[FloatArray] = []  # map values at them

    def step(self, phi: FloatArray, target: FloatArray, beta: float, restart: bool, mean0: float) -> FloatArray | None:
        """Add the pair (φ_m, ``target``) and return the mixed next φ (φ(0) = ``mean0``),
        or None while the memory holds one pair or the mixed φ is not finite and positive.
        ``restart``: the map jumped (a client switched basin): forget the older pairs."""
        if restart:
            self.xs, self.gs = [], []
        self.xs.append(phi.copy())
        self.gs.append(target.copy())
        del self.xs[: -(self.memory + 1)], self.gs[: -(self.memory + 1)]
        if len(self.xs) < 2:
            return None
        X = np.array(self.xs)[:, 1:]
        F = np.array(self.gs)[:, 1:] - X
        mixed = _linalg.anderson_mix(X, F, beta)
        if np.all(np.isfinite(mixed)) and np.all(mixed > 0):
            return np.concatenate([[mean0], mixed])
        return None


def _next_phi(phi: FloatArray, target: FloatArray, beta: float, anderson: _Anderson | None, grew: bool, mean0: float) -> FloatArray:
    """φ_{m+1} = (1 − β) φ_m + β·``target`` (β = 1: Algorithm 1's φ = φ_m^est), or the
    Anderson step where that applies; φ(0) stays mean ρ^0 (Eq. 18 at t = 0)."""
    step = (1.0 - beta) * phi + beta * target
    if anderson is not None:
        mixed = anderson.step(phi, target, beta, grew, mean0)
        if mixed is not None:
            step = mixed
    step[0] = mean0
    return step


# --------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------


def _result(
    types: _Types,
    responses: _ClientResponses,
    raw: _Raw,
    phi: FloatArray,
    res: float,
    trace: _Trace,
    beta: float,
    converged: bool,
    kkt_tol: float,
) -> MeanFieldResult:
    """The answer for the N clients from the per-type one: trajectories (Eq. 20) and
    utilities (Eq. 19) of the final best responses under the final φ, each client's KKT
    residual (the projected-gradient first-order condition of its problem on α ∈ [0, 1]),
    α^T = 0 appended, and the regret of pinned clients. ``converged`` also requires every
    KKT residual to be at most ``kkt_tol``."""
    ev = evaluate(raw.a, types.rho0, types.varphi, phi, types.R, types.N, types.K, inclusion=types.inclusion)
    kkt = np.abs(np.clip(raw.a + ev.grad, 0.0, 1.0) - raw.a).max(axis=0)
    alpha_u = np.zeros((types.m, types.T + 1))
    alpha_u[:, : types.T] = raw.a.T
    inverse = types.inverse
    kk = kkt[inverse]
    return MeanFieldResult(
        phi=_ro(phi),
        alpha=_ro(alpha_u[inverse]),
        rho=_ro(ev.rho.T[inverse]),
        utility=_ro(ev.U[inverse]),
        kkt_residual=_ro(kk),
        residual=float(res),
        iterations=trace.iterations,
        full_solves=trace.full_solves,
        history=tuple(trace.history),
        phi_history=_ro(np.array(trace.phis)),
        beta=float(beta),
        converged=bool(converged and np.all(kk <= kkt_tol)),
        regret=_ro(np.maximum(responses.best_U - raw.U, 0.0)[inverse]),
        pinned=np.flatnonzero(responses.pinned[inverse]),
    )
