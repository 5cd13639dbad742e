"""The mean-field fixed point φ(t) = (1/N) Σ_i ρ_i^t[φ, R] (FedPCS Def. 2, Eq. 18, Theorem 3,
Algorithm 1), solved by a damped fixed-point iteration: the contraction argument of
Theorem 3 treats α as fixed although it depends on φ, so convergence is checked, not assumed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedgame.incentives.games._best_response import (
    Candidates,
    Engine,
    Solver,
    _random_starts,
    _Raw,
    solve_types,
    unique_types,
)
from fedgame.incentives.games._dynamics import Inclusion, evaluate, with_inclusion
from fedgame.incentives.games._validation import (
    as_clients,
    as_rounds,
    check_horizon,
    check_population,
    check_positive,
)

__all__ = ["PAPER_MF_TOL", "Acceleration", "MeanFieldResult", "Restarts", "Update",
           "mean_field"]

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


def _first_distinct(owner: NDArray[np.intp], key: FloatArray) -> NDArray[np.intp]:
    """Sorted positions of the first occurrence of each distinct (owner, key column) pair,
    key (T, P): what ``np.unique(column_stack([owner, key.T]), axis=0, return_index=True)``
    gives, without sorting P rows of T + 1 fields. Rows are grouped by owner and by a fixed
    linear hash of the key (equal keys, equal hash, computed row by row in the same order),
    and a row repeats its predecessor in that order if its whole key is equal; a hash shared
    by different keys (never seen) falls back to ``np.unique``."""
    T, P = key.shape
    if P == 0:
        return np.empty(0, dtype=np.intp)
    w = cast(FloatArray, np.random.default_rng(0).uniform(1.0, 2.0, T))  # T from .shape is Any
    h = np.zeros(P)
    for t in range(T):
        h += key[t] * w[t]
    pos = np.arange(P)
    o = np.lexsort((pos, h, owner))
    ks = key[:, o]
    group = (owner[o][1:] == owner[o][:-1]) & (h[o][1:] == h[o][:-1])
    same = group & np.all(ks[:, 1:] == ks[:, :-1], axis=0)
    if np.any(group & ~same):  # a hash collision: the exact, slow way
        _, first = np.unique(np.column_stack([owner, key.T]), axis=0, return_index=True)
        return np.sort(first)
    return np.sort(o[np.r_[True, ~same]])


class _Archive:
    """Distinct local optima found so far for each client type (at most ``cap`` per type,
    the best first). Each Picard iteration re-solves every entry warm, so a client whose
    best response jumps to another known basin as φ moves is caught at once."""

    def __init__(self, T: int, cap: int = 4, same: float = 1e-6) -> None:
        self.a = np.empty((T, 0))
        self.owner = np.empty(0, dtype=np.intp)
        self.cap, self.same = cap, same

    @property
    def extra(self) -> tuple[FloatArray, NDArray[np.intp]] | None:
        return (self.a, self.owner) if self.owner.size else None

    def replace(self, c: Candidates, keep: FloatArray | None = None) -> None:
        """Archive the candidates; the current choices ``keep`` (T, m) always stay."""
        ok = np.isfinite(c.U) & (c.kkt <= 1e-6)
        a, U, owner = c.a[:, ok], c.U[ok], c.owner[ok]
        prio = np.zeros(owner.size)
        if keep is not None:
            a = np.concatenate([keep, a], axis=1)
            owner = np.concatenate([np.arange(keep.shape[1]), owner])
            U = np.concatenate([np.zeros(keep.shape[1]), U])
            prio = np.concatenate([-np.ones(keep.shape[1]), prio])
        order = np.lexsort((-U, prio, owner))
        a, owner = a[:, order], owner[order]
        first = _first_distinct(owner, np.round(a / self.same))  # keeps (owner, prio, −U) order
        a, owner = a[:, first], owner[first]
        start = np.r_[0, np.flatnonzero(owner[1:] != owner[:-1]) + 1]
        rank = np.arange(owner.size) - np.repeat(start, np.diff(np.r_[start, owner.size]))
        keep_mask = rank < self.cap
        self.a, self.owner = np.ascontiguousarray(a[:, keep_mask]), owner[keep_mask]


def _tracked(cand: Candidates, previous: FloatArray) -> _Raw:
    """For every type the candidate closest to its previous choice: the same basin,
    followed to the new φ by the warm start."""
    own = cand.owner
    dist = np.abs(cand.a - previous[:, own]).max(axis=0)
    order = np.lexsort((dist, own))
    pick = order[np.r_[True, own[order][1:] != own[order][:-1]]]
    return _Raw(cand.a[:, pick], cand.U[pick], cand.kkt[pick], 0)


@with_inclusion
def mean_field(rho0: ArrayLike, varphi: ArrayLike, R: ArrayLike, K: int, T: int, *,
               phi_init: ArrayLike | None = None, alpha_init: ArrayLike | None = None,
               tol: float = 1e-7, max_iter: int = 200,
               beta: float = 1.0, beta_min: float = 0.05, restarts: Restarts = "final",
               update: Update = "consistent", acceleration: Acceleration = None,
               anderson_memory: int = 5,
               vectorize: bool = True, n_starts: int = 8,
               rng: np.random.Generator | int | None = None, solver: Solver = "newton",
               kkt_tol: float = 1e-7, sweep_restarts: int = 3, sweep_iters: int = 500,
               sweep_damping: float = 0.05,
               inclusion: Inclusion | None = None,  # consumed by @with_inclusion
               ) -> MeanFieldResult:
    """Damped fixed-point iteration for the mean field (Algorithm 1 with damping, φ(0) pinned
    to mean ρ^0, and an unsigned stopping rule max_t |Φ(t) − φ(t)| ≤ ``tol``).

    φ_0(t) = mean ρ^0 (or ``phi_init``; φ(0) is always pinned to mean ρ^0; ``alpha_init``
    (n, T) or (n, T+1) warm-starts the first iteration); each iteration solves every
    client's best response to φ_m (Theorem 1; :func:`best_response`) warm-started from the
    previous iteration, Φ(t) = mean_i ρ_i^t, r_m = max_t |Φ(t) − φ_m(t)|; stop when
    r_m ≤ ``tol``, else φ_{m+1} = (1−β)φ_m + βΦ with β halved (not below ``beta_min``)
    whenever r grows twice in a row, and also (an addition to that rule) when r has not
    fallen over three iterations (by 10% with ``update="consistent"``), which breaks the
    cycles a client switching basins back and forth can cause.
    N = len(rho0); ``K`` draws per round; rounds t = 0..T.

    Warm starts: every distinct local optimum found so far for a client (up to 4) is
    re-solved from its previous position, and the best kept — so a client whose best
    response jumps between known basins is followed at once. The first iteration (without
    ``alpha_init``) starts from α ≡ 0, 1, 0.5, and so does the first iteration after the
    residual falls below 1e-2 and below 1e-4 (new basins found early cost fewer iterations).

    ``restarts="every"`` adds the complete multi-start of :func:`best_response` (α ≡ 0, 1,
    0.5, damped sweeps, ``n_starts`` random draws) at every iteration — the most thorough
    and slowest setting. ``restarts="final"`` (default) adds it only once the residual is below
    ``tol`` (after a cheaper check with the corner starts); if it finds a better response
    for any client the iteration continues from it, so the returned α is always a complete
    multi-start best response to the returned φ. ``restarts="none"`` skips it (the corner
    starts still run): for the inner solves of an outer loop that verifies its own answer
    with a final complete solve (:func:`stackelberg`). ``vectorize=False`` solves client by client
    (for checks).

    Every best response of an iteration is solved at once for all clients and starts: no
    loop over clients (the streamed engines of ``_best_response``; the complete multi-start
    that follows the corner check at the same φ reuses that check's corner solutions).
    ``_mean_field_reference`` keeps the path before these engines, for the equality tests.

    The damped sweeps of the complete multi-start are capped at ``sweep_iters`` = 500 here
    (2000 in :func:`best_response`): they only seed the Newton/L-BFGS-B solves, and on
    N = 1000, T = 30 the cap leaves φ and every utility unchanged (to 1e-14) while saving
    ~15 % of the solve.

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

    Ties: a finite population can lack a pure-strategy fixed point at ``tol`` — a client
    whose two best basins tie near the fixed point switches between them, moving the mean by
    about |Δρ|/N each time, so the residual never settles. Hence a client whose best response
    switches basin (rather than following its previous one) a second time once the residual
    is below 1e-4, or in the iterations before the residual stalls, is pinned: it keeps following that basin, the map becomes continuous and
    the iteration converges to a fixed point at which the pinned clients play a local
    optimum whose utility is within ``regret`` of their best (an ε-Nash equilibrium;
    reported in ``pinned``/``regret``). If even that fails, the iteration stops once
    β = ``beta_min`` and the residual has not improved for 20 iterations, with
    ``converged=False``. The complete multi-start is not repeated when φ has moved by less
    than 1e-2 (max-norm) since it last ran: its local optima are followed to the new φ by
    the warm starts. When a verification finds new basins, β is reset to its initial value.

    ``acceleration="anderson"`` (not in the paper) replaces the damped step by Anderson
    mixing over the last ``anderson_memory`` iterates (type II, same β), restarted whenever
    the residual grows; the fixed point and the stopping rule are unchanged."""
    return _solve(
        rho0, varphi, R, K, T, phi_init=phi_init, alpha_init=alpha_init, tol=tol,
        max_iter=max_iter, beta=beta, beta_min=beta_min, restarts=restarts,
        update=update, acceleration=acceleration, anderson_memory=anderson_memory,
        vectorize=vectorize, n_starts=n_starts, rng=rng, solver=solver, kkt_tol=kkt_tol,
        sweep_restarts=sweep_restarts, sweep_iters=sweep_iters,
        sweep_damping=sweep_damping,
        engine="streamed")


@with_inclusion
def _mean_field_reference(rho0: ArrayLike, varphi: ArrayLike, R: ArrayLike, K: int, T: int, *,
                          phi_init: ArrayLike | None = None, alpha_init: ArrayLike | None = None,
                          tol: float = 1e-7, max_iter: int = 200,
                          beta: float = 1.0, beta_min: float = 0.05, restarts: Restarts = "final",
                          update: Update = "consistent", acceleration: Acceleration = None,
                          anderson_memory: int = 5,
                          vectorize: bool = True, n_starts: int = 8,
                          rng: np.random.Generator | int | None = None, solver: Solver = "newton",
                          kkt_tol: float = 1e-7, sweep_restarts: int = 3, sweep_iters: int = 500,
                          sweep_damping: float = 0.05,
                          inclusion: Inclusion | None = None,  # consumed by @with_inclusion
                          ) -> MeanFieldResult:
    """:func:`mean_field` as it was before the streamed engines: the same damped fixed-point
    iteration, with every best response solved by the chunked ``_solvers.newton`` and the
    batched ``_solvers.damped_sweep`` (and, with ``vectorize=False``, client by client), and
    the corner starts of a complete multi-start solved again even when the verification has
    just solved them at the same φ. An independent implementation for the equality tests;
    same arguments and result as :func:`mean_field`."""
    return _solve(
        rho0, varphi, R, K, T, phi_init=phi_init, alpha_init=alpha_init, tol=tol,
        max_iter=max_iter, beta=beta, beta_min=beta_min, restarts=restarts,
        update=update, acceleration=acceleration, anderson_memory=anderson_memory,
        vectorize=vectorize, n_starts=n_starts, rng=rng, solver=solver, kkt_tol=kkt_tol,
        sweep_restarts=sweep_restarts, sweep_iters=sweep_iters,
        sweep_damping=sweep_damping,
        engine="reference")


def _solve(rho0: ArrayLike, varphi: ArrayLike, R: ArrayLike, K: int, T: int, *,
           phi_init: ArrayLike | None, alpha_init: ArrayLike | None, tol: float,
           max_iter: int, beta: float, beta_min: float, restarts: Restarts, update: Update,
           acceleration: Acceleration, anderson_memory: int, vectorize: bool, n_starts: int,
           rng: np.random.Generator | int | None, solver: Solver, kkt_tol: float,
           sweep_restarts: int, sweep_iters: int, sweep_damping: float,
           engine: Engine) -> MeanFieldResult:
    """The iteration behind :func:`mean_field` and :func:`_mean_field_reference`."""
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
    if restarts not in ("final", "every", "none"):
        raise ValueError(f"restarts: must be 'final', 'every' or 'none', got {restarts!r}")
    if update not in ("picard", "consistent"):
        raise ValueError(f"update: must be 'picard' or 'consistent', got {update!r}")
    if acceleration not in (None, "anderson"):
        raise ValueError(f"acceleration: must be None or 'anderson', got {acceleration!r}")
    if isinstance(anderson_memory, bool) or not isinstance(anderson_memory, int) \
            or anderson_memory < 1:
        raise ValueError(f"anderson_memory: must be an integer >= 1, got {anderson_memory!r}")
    mean0 = float(r0.mean())
    if phi_init is None:
        phi = np.full(T + 1, mean0)
    else:
        phi = as_rounds("phi_init", phi_init, T, lower=0.0, strict=True)
    phi[0] = mean0

    u_r0, u_vp, first, inverse = unique_types(r0, vp)
    m = u_r0.size
    weights = np.bincount(inverse, minlength=m) / N
    starts = _random_starts(rng, n_starts, T) if n_starts else None
    archive = _Archive(T)
    if alpha_init is not None:
        w = np.asarray(alpha_init, dtype=float)
        if w.ndim != 2 or w.shape[0] != N or w.shape[1] not in (T, T + 1):
            raise ValueError(f"alpha_init: expected shape ({N}, {T}) or ({N}, {T + 1}), "
                             f"got {w.shape}")
        if not np.all((w >= 0) & (w <= 1)):
            raise ValueError("alpha_init: values must be in [0, 1]")
        archive.a = np.ascontiguousarray(w[first, :T].T)
        archive.owner = np.arange(m)

    pinned = np.zeros(m, dtype=bool)  # clients held in their basin (ties, see docstring)
    best_U = np.full(m, -np.inf)  # best utility found for each type in the last solve
    switched = np.zeros(m, dtype=bool)  # the last solve moved the type to another basin
    late_switches = np.zeros(m, dtype=np.int64)  # switches once the residual is small
    recent: list[NDArray[np.bool_]] = []  # switches of the last iterations
    selected: list[FloatArray] = []  # α chosen at each iteration (for the tie detection)

    corners_at: list[tuple[FloatArray, tuple[FloatArray, FloatArray, FloatArray]]] = []

    def solve(phi_m: FloatArray, mode: str) -> _Raw:
        """mode "warm": the archive (corners if empty); "corners": α ≡ 0, 1, 0.5 and the
        archive; "full": the complete multi-start and the archive."""
        full = mode == "full"
        kw = dict(starts=starts if full else None, warm=None,
                  sweep_restarts=sweep_restarts if full else 0, sweep_iters=sweep_iters,
                  sweep_damping=sweep_damping, solver=solver, chunk=1,
                  include_corners=mode != "warm" or archive.extra is None, keep_all=True,
                  engine=engine)
        if vectorize:
            # the complete multi-start right after the corner check at the same φ: its
            # corner starts were just solved (streamed engine only; same numbers)
            again = (corners_at[0][1] if engine == "streamed" and full and corners_at
                     and np.array_equal(corners_at[0][0], phi_m) else None)
            raw, cand = solve_types(u_r0, u_vp, phi_m, R_arr, N, K, extra=archive.extra,
                                    corners_solved=again, **kw)  # type: ignore[arg-type]
            assert cand is not None
            corners_at.clear()
            if cand.corners is not None:
                corners_at.append((phi_m.copy(), cand.corners))
        else:
            raws, cands = [], []
            for j in range(m):
                sel = archive.owner == j
                ex = (archive.a[:, sel], np.zeros(int(sel.sum()), dtype=np.intp)) \
                    if sel.any() else None
                raw_j, c_j = solve_types(u_r0[j:j + 1], u_vp[j:j + 1], phi_m, R_arr, N, K,
                                         extra=ex, **kw)  # type: ignore[arg-type]
                assert c_j is not None
                raws.append(raw_j)
                cands.append(Candidates(c_j.a, c_j.U, c_j.kkt, np.full(c_j.U.size, j)))
            cand = Candidates(np.concatenate([c.a for c in cands], axis=1),
                              np.concatenate([c.U for c in cands]),
                              np.concatenate([c.kkt for c in cands]),
                              np.concatenate([c.owner for c in cands]))
            raw = _Raw(np.concatenate([r.a for r in raws], axis=1),
                       np.concatenate([r.U for r in raws]),
                       np.concatenate([r.kkt for r in raws]), raws[0].n_starts)
        best_U[:] = raw.U
        switched[:] = False
        if selected:
            tr = _tracked(cand, selected[-1])
            switched[:] = np.abs(raw.a - tr.a).max(axis=0) > 1e-4
            if pinned.any():
                a, U, kkt = raw.a.copy(), raw.U.copy(), raw.kkt.copy()
                a[:, pinned], U[pinned], kkt[pinned] = tr.a[:, pinned], tr.U[pinned], \
                    tr.kkt[pinned]
                raw = _Raw(a, U, kkt, raw.n_starts)
                switched[pinned] = False
        archive.replace(cand, keep=raw.a)
        return raw

    def field(raw: _Raw, phi_m: FloatArray) -> FloatArray:
        rho_u = evaluate(raw.a, u_r0, u_vp, phi_m, R_arr, N, K, need_grad=False).rho
        return rho_u @ weights

    def consistent(raw: _Raw) -> FloatArray:
        """Mean trajectory of Eq. (15): the dynamics driven by their own average."""
        out = np.empty(T + 1)
        rho = u_r0.copy()
        out[0] = mean0
        for t in range(T):
            rho = out[t] + raw.a[t] * (rho - out[t])
            out[t + 1] = rho @ weights
        return out

    history: list[float] = []
    phis: list[FloatArray] = []
    full_solves = 0
    grow = 0
    converged = False
    raw: _Raw | None = None
    res = np.inf
    iterations = 0
    xs: list[FloatArray] = []  # Anderson memory: iterates φ_k and map values Φ(φ_k)
    gs: list[FloatArray] = []
    milestones = [m_ for m_ in _CORNER_CHECKS if m_ > tol]
    stalled, last_stall = False, 0
    best_res, since_best = np.inf, 0
    phi_full: FloatArray | None = None
    beta0 = beta
    for _m in range(max_iter):
        full = restarts == "every"
        mode = "full" if full else "warm"
        if not full and milestones and history and history[-1] <= milestones[0]:
            # the residual passed a milestone: look for new basins with the corner starts
            mode = "corners"
            while milestones and history[-1] <= milestones[0]:
                milestones.pop(0)
        if not full and stalled:
            mode = "corners"
        raw = solve(phi, mode)
        iterations += 1
        full_solves += int(full)
        if full:
            phi_full = phi.copy()
        Phi = field(raw, phi)
        res = float(np.max(np.abs(Phi - phi)))
        if res <= tol and not full:
            # verification at the converged φ: first the cheap corner starts, then the
            # complete multi-start (unless it already ran at a φ this close: its basins have
            # been followed here); any better response found restarts the iteration
            raw = solve(phi, "corners")
            Phi = field(raw, phi)
            res = float(np.max(np.abs(Phi - phi)))
            if res <= tol and restarts != "none" and (phi_full is None
                               or np.max(np.abs(phi - phi_full)) > _FULL_REUSE):
                raw = solve(phi, "full")
                full_solves += 1
                phi_full = phi.copy()
                Phi = field(raw, phi)
                res = float(np.max(np.abs(Phi - phi)))
            if res > tol:  # new basins changed the map: restart the damping afresh
                beta, grow, last_stall = beta0, 0, len(history) + 1
                best_res, since_best = np.inf, 0
        if history and history[-1] < _PIN_BELOW:
            # a client switching basin a second time this late oscillates at a tie: hold it
            # where it is, or it may switch back and forth for ever (see the docstring)
            late_switches += switched
            pinned |= late_switches >= 2
        recent.append(switched.copy())
        del recent[:-4]
        selected.append(raw.a.copy())
        del selected[:-2]
        phis.append(phi.copy())
        history.append(res)
        if res <= tol:
            converged = True
            break
        if _m == max_iter - 1:
            break
        best_res = min(best_res, res)
        if res <= best_res:
            since_best = 0
        else:
            since_best += 1
        if beta <= beta_min and since_best >= _CYCLE_PATIENCE:
            # fully damped and no progress: clients at a tie between two basins flip back
            # and forth; a pure-strategy fixed point closer than this may not exist
            break
        grew = len(history) >= 2 and history[-1] > history[-2]
        if grew:
            grow += 1
            if grow >= 2:
                beta, grow = max(beta / 2.0, beta_min), 0
        else:
            grow = 0
        # stagnation (not in the plain damping rule): no 10% decrease over 3 iterations means a
        # cycle of the map — damp it, and look for new basins with the corner starts
        stalled = (len(history) - last_stall >= 4
                   and history[-1] > (0.9 if update == "consistent" else 1.0) * history[-4])
        if stalled:
            beta, grow, last_stall = max(beta / 2.0, beta_min), 0, len(history)
            # clients that switched basin in the recent iterations sit at a tie between
            # basins: hold each in its current basin from now on
            for sw in recent:
                pinned |= sw
        target = consistent(raw) if update == "consistent" else Phi
        step = (1.0 - beta) * phi + beta * target
        if acceleration == "anderson":
            if grew:  # the map jumped (a client switched basin): restart the memory
                xs, gs = [], []
            xs.append(phi.copy())
            gs.append(target.copy())
            del xs[:-(anderson_memory + 1)], gs[:-(anderson_memory + 1)]
            if len(xs) >= 2:
                X = np.array(xs)[:, 1:]
                F = np.array(gs)[:, 1:] - X
                dX, dF = np.diff(X, axis=0), np.diff(F, axis=0)
                coef = np.linalg.lstsq(dF.T, F[-1], rcond=None)[0]
                mixed = X[-1] + beta * F[-1] - (dX + beta * dF).T @ coef
                if np.all(np.isfinite(mixed)) and np.all(mixed > 0):
                    step = np.concatenate([[mean0], mixed])
        phi = step
        phi[0] = mean0
    assert raw is not None
    ev = evaluate(raw.a, u_r0, u_vp, phi, R_arr, N, K)
    kkt = np.abs(np.clip(raw.a + ev.grad, 0.0, 1.0) - raw.a).max(axis=0)
    alpha_u = np.zeros((m, T + 1))
    alpha_u[:, :T] = raw.a.T
    kk = kkt[inverse]
    return MeanFieldResult(
        phi=_ro(phi), alpha=_ro(alpha_u[inverse]), rho=_ro(ev.rho.T[inverse]),
        utility=_ro(ev.U[inverse]), kkt_residual=_ro(kk), residual=float(res),
        iterations=iterations, full_solves=full_solves, history=tuple(history),
        phi_history=_ro(np.array(phis)), beta=float(beta),
        converged=bool(converged and np.all(kk <= kkt_tol)),
        regret=_ro(np.maximum(best_U - ev.U, 0.0)[inverse]),
        pinned=np.flatnonzero(pinned[inverse]))
