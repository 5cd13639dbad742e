"""FedPCS training plug-ins (FedPCS Algorithms 2 and 3).

Before training, :func:`solve_plan` solves the Stackelberg game once (offline, Algorithm 1)
and returns a :class:`FedPCSPlan`: every client's privacy level ρ_i^t for every round, the
reward rates R_t, the mean field φ(t), and (Algorithm 3) the per-round K_t under a budget B_t.
The platform then plugs the plan in three places:

* selection ``privacy_aware`` draws x_i^t ∝ ρ_i^t (Sec. III-C);
* privacy ``zcdp_upload`` calibrates each upload's noise to ρ_i^t (Eq. 3, Prop. 1);
* incentive :class:`FedPCSIncentive` pays R_t ρ_i^t to each sampled client, fixes K_t, and
  logs the round's game quantities (server cost realised and expected, welfare, budget use).

Baselines (Sec. VIII-A, 'Baselines') run the same pipeline with their own selection. Their
clients' budgets (``incentive.baseline_rho``; docs/fedpcs.md, 'Baseline budgets'): by default
they are not in the game at all (:func:`baseline_plan`: ρ_i^t = ρ_i⁰ every round, or ρ_L for
all, no reward); with ``game`` they play the game against uniform sampling
(``inclusion="uniform"``) and are paid.

Solved plans are cached on disk by the hash of their inputs (``FEDGAME_CACHE``, default
``~/.cache/fedgame``): seeds × partitions of a grid share one solve.
"""

from __future__ import annotations


import hashlib
import json
import logging
import os
import time
import zipfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from fedgame.core.plugins import PluginConfig
from numpy.typing import NDArray

from fedgame.core.types import Selection
from fedgame.incentives.base import INCENTIVES, PlannedIncentive
from fedgame.incentives.fedpcs._best_response import default_engine
from fedgame.incentives.fedpcs._budget import adaptive_schedule, linear_budget
from fedgame.incentives.fedpcs._dynamics import Inclusion
from fedgame.incentives.fedpcs._mean_field import MeanFieldSolverOptions, mean_field
from fedgame.incentives.fedpcs._server import accuracy_weights, affine_response, server_cost, stackelberg
from fedgame.incentives.fedpcs._welfare import social_optimum, social_welfare_per_round

__all__ = [
    "BaselineRho",
    "FedPCSGame",
    "FedPCSPlan",
    "FedPCSIncentive",
    "baseline_plan",
    "cache_dir",
    "reuse_plans",
    "same_plan",
    "solve_plan",
]

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]

#: Bumped whenever a solver change can change a solution: part of the cache key.
#: 4: the server's rewards minimise the true cost (docs/fedpcs.md, 'The accuracy scale κ and the
#: server's solve'), Theorem 7's ρ* within [ρ_L, ρ_H].
#: 5: the true-cost polish screens candidates with warm-started equilibria (same criterion).
#: 6: the clients' problems are solved by compiled per-problem kernels where Numba is installed
#: (the same iteration; its log1p/expm1 round differently, and the server's true-cost descent,
#: a path through a non-convex problem, can end elsewhere). The engine is part of the key too.
#: 7: the compiled kernels compute log1p and expm1 branch-free, in vectors (within two ulp of the
#: C library's, rounding differently).
#: 8: the same plan on every CPU kind: the solve's sums, dot products, least squares and
#: transcendental functions no longer go through BLAS, LAPACK or NumPy's SIMD routines, whose
#: last bits differ between CPU kinds (``_linalg``; docs/speed.md, "The same plan on every
#: CPU kind").
SOLVER_VERSION = 8


@dataclass(frozen=True)
class FedPCSGame:
    """Inputs of the offline solve (defaults from FedPCS Table IV and Sec. VIII-A,
    'Hyperparameter settings'). ``acc_scale``: the scale κ of the accuracy term
    (docs/fedpcs.md, 'The accuracy scale κ and the server's solve'), ``None`` = (Σ|D|)², i.e.
    v^t = γ/(t+1). ``budget``: (B_start, B_end) of Algorithm 3, or None for a fixed K.
    ``inclusion``: the sampling rule the clients face (privacy-aware or uniform)."""

    n_clients: int
    clients_per_round: int
    rounds: int
    gamma: float = 0.5
    rho_min: float = 0.01
    rho_max: float = 12.0
    varphi_clip: float = 1e-3
    inclusion: Inclusion = "privacy"
    acc_scale: float | None = None
    budget: tuple[float, float] | None = None
    R_max: float = 100.0
    mf_tol: float = 1e-7
    n_starts: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_clients < 1:
            raise ValueError(f"data.partition.n_clients: must be >= 1, got {self.n_clients}")
        if not 1 <= self.clients_per_round:
            raise ValueError(f"train.clients_per_round: must be >= 1, got {self.clients_per_round}")
        if self.rounds < 2:
            raise ValueError(f"train.rounds: the game needs T = rounds - 1 >= 1, got rounds = {self.rounds}")
        if not 0 < self.gamma < 1:
            raise ValueError(f"incentive.gamma: must be in (0, 1), got {self.gamma}")
        if not 0 < self.rho_min < self.rho_max:
            raise ValueError(f"incentive.rho_min, incentive.rho_max: need 0 < rho_min < rho_max, got {self.rho_min}, {self.rho_max}")
        if self.budget is not None and min(self.budget) < self.rho_max:
            raise ValueError(f"incentive.budget: every B_t must be >= rho_max ({self.rho_max}) so one client fits, got {self.budget}")

    def key(self) -> str:
        """The cache key: a hash of the inputs, :data:`SOLVER_VERSION` and the engine that
        solves the clients' problems (the compiled and the NumPy engine round differently)."""
        blob = json.dumps({**asdict(self), "solver": SOLVER_VERSION, "engine": default_engine()}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:20]


@dataclass(frozen=True)
class FedPCSPlan:
    """The offline solution, arrays over rounds t = 0..T (T+1 = ``rounds``)."""

    rho0: FloatArray  # (N,)
    varphi: FloatArray  # (N,)
    rho: FloatArray  # (N, T+1) ρ_i^t
    alpha: FloatArray  # (N, T+1)
    reward: FloatArray  # (T+1,) R_t
    phi: FloatArray  # (T+1,)
    K: NDArray[np.int64]  # (T+1,) clients drawn per round
    v: FloatArray  # (T+1,) accuracy weights
    cost: FloatArray  # (T+1,) expected server cost (Eq. 13, in expectation over the sampler)
    welfare: FloatArray  # (T+1,) social welfare per round (Eq. 30)
    welfare_optimum: FloatArray  # (T+1,) per-round social optimum
    budget: FloatArray  # (T+1,) B_t (inf without a budget)
    phi_history: FloatArray  # (iterations, T+1), Fig. 3
    residual: float
    converged: bool
    solve_seconds: float
    inclusion: str
    gamma: float
    extras: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        arrays = {k: v for k, v in asdict(self).items() if isinstance(v, np.ndarray)}
        meta = {k: v for k, v in asdict(self).items() if not isinstance(v, np.ndarray)}
        # one temporary name per process: two runs (or test processes) solving the same game
        # each write their own file, and the last os.replace wins with a whole plan
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]  # mypy matches **arrays against allow_pickle: bool
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> FedPCSPlan:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {k: z[k] for k in z.files if k != "meta"}
        return cls(**arrays, **meta)

    def summary(self) -> dict[str, Any]:
        return {
            "inclusion": self.inclusion,
            "baseline_rho": self.extras.get("baseline_rho", "game"),
            "reward": self.reward.tolist(),
            "phi": self.phi.tolist(),
            "K": self.K.tolist(),
            "cost": self.cost.tolist(),
            "welfare": self.welfare.tolist(),
            "welfare_optimum": self.welfare_optimum.tolist(),
            "budget": [None if not np.isfinite(b) else float(b) for b in self.budget],
            "residual": self.residual,
            "converged": self.converged,
            "solve_seconds": self.solve_seconds,
        }


#: what reading a damaged or foreign ``.npz`` as a :class:`FedPCSPlan` raises
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile)


def cache_dir() -> Path:
    return Path(os.environ.get("FEDGAME_CACHE", Path.home() / ".cache" / "fedgame")) / "games"


def _types(game: FedPCSGame) -> tuple[FloatArray, FloatArray]:
    """ρ_i^0 ~ U[ρ_L, ρ_H] (the paper does not give ρ_i^0) and ϕ_i ~ U(0, 1) (Sec. VIII-A)
    clipped to [c, 1−c] to keep 1/ϕ and 1/(1−ϕ) finite, seeded."""
    rng = np.random.default_rng([game.seed, 0xFED9C5])
    rho0 = rng.uniform(game.rho_min, game.rho_max, game.n_clients)
    varphi = np.clip(rng.uniform(0.0, 1.0, game.n_clients), game.varphi_clip, 1.0 - game.varphi_clip)
    return rho0, varphi


def _solve(game: FedPCSGame) -> FedPCSPlan:
    tic = time.perf_counter()
    N, T = game.n_clients, game.rounds - 1
    K = game.clients_per_round
    rho0, varphi = _types(game)
    v = accuracy_weights(T, gamma=game.gamma, acc_scale=1.0 if game.acc_scale is None else game.acc_scale)
    # the server's rewards minimise the true expected cost at the clients' equilibrium
    # (server_solver="true_cost"; docs/fedpcs.md, 'The accuracy scale κ and the server's solve'),
    # not the paper's Lemma-2 outer loop
    st = stackelberg(
        rho0,
        varphi,
        K,
        T,
        v=v,
        gamma=game.gamma,
        rho_min=game.rho_min,
        rho_max=game.rho_max,
        R_max=game.R_max,
        mf_tol=game.mf_tol,
        n_starts=game.n_starts,
        rng=game.seed,
        inclusion=game.inclusion,
    )
    mf, R = st.mean_field, np.asarray(st.reward)
    Ks = np.full(T + 1, K, dtype=np.int64)
    budget = np.full(T + 1, np.inf)
    extras: dict[str, Any] = {
        "server_solver": st.solver,
        "outer_iterations": st.outer_iterations,
        "reward_residual": st.reward_residual,
        "evaluations": st.evaluations,
    }
    if game.budget is not None:
        # Algorithm 3: Theorem 7 per round on the Lemma-2 coefficients averaged at the
        # true-cost equilibrium, ρ_t* kept in [ρ_L, ρ_H], then the clients' equilibrium under
        # the new rewards (K enters P through the nominal K).
        budget = linear_budget(T, *game.budget)
        aff = affine_response(mf.alpha, mf.rho, mf.phi, R, varphi, N, K, inclusion=game.inclusion)
        sched = adaptive_schedule(aff.G, aff.H, aff.P, v, game.gamma, budget, R_max=game.R_max, rho_max=game.rho_max, rho_min=game.rho_min)
        R = np.asarray(sched.reward)
        Ks = np.asarray(sched.K, dtype=np.int64)
        mf = mean_field(
            rho0,
            varphi,
            R,
            K,
            T,
            options=MeanFieldSolverOptions(tol=game.mf_tol, n_starts=game.n_starts),
            rng=game.seed,
            phi_init=mf.phi,
            alpha_init=mf.alpha,
            inclusion=game.inclusion,
        )
        extras.update(
            tau=np.asarray(sched.tau).tolist(), corner=np.asarray(sched.corner).tolist(), rho_star=np.asarray(sched.rho_star).tolist()
        )
    cost = server_cost(mf.rho, R, N, K, v, gamma=game.gamma, phi=mf.phi, inclusion=game.inclusion)
    welfare = social_welfare_per_round(mf.rho, R, varphi)
    opt = social_optimum(R, varphi, bounded=True, rho_min=game.rho_min, rho_max=game.rho_max)
    optimum = social_welfare_per_round(np.asarray(opt.rho), R, varphi)
    return FedPCSPlan(
        rho0=rho0,
        varphi=varphi,
        rho=np.asarray(mf.rho),
        alpha=np.asarray(mf.alpha),
        reward=R,
        phi=np.asarray(mf.phi),
        K=Ks,
        v=np.asarray(v),
        cost=np.asarray(cost),
        welfare=np.asarray(welfare),
        welfare_optimum=np.asarray(optimum),
        budget=budget,
        phi_history=np.asarray(mf.phi_history),
        residual=float(mf.residual),
        converged=bool(st.converged and mf.converged),
        solve_seconds=time.perf_counter() - tic,
        inclusion=game.inclusion,
        gamma=game.gamma,
        extras=extras,
    )


def plan_path(game: FedPCSGame, cache: Path | None = None) -> Path:
    """Where :func:`solve_plan` caches the plan of ``game`` (keyed by every input of the game)."""
    return (cache_dir() if cache is None else cache) / f"fedpcs-{game.key()}.npz"


def solve_plan(game: FedPCSGame, *, cache: Path | None | Literal[False] = None) -> FedPCSPlan:
    """The plan for ``game``, from the cache when this exact game was solved before."""
    if cache is False:
        return _solve(game)
    path = plan_path(game, cache)
    root = path.parent
    if path.exists():
        try:
            plan = FedPCSPlan.load(path)
            # solve_seconds stays the solve's own time; a run that read the plan did not pay it
            return replace(plan, extras={**plan.extras, "from_cache": True})
        except _UNREADABLE:
            log.warning("ignoring unreadable cached game %s", path)
    log.info(
        "solving the FedPCS game (N=%d, K=%d, T=%d, %s inclusion)", game.n_clients, game.clients_per_round, game.rounds - 1, game.inclusion
    )
    plan = _solve(game)
    log.info("game solved in %.1f s (residual %.1e)", plan.solve_seconds, plan.residual)
    root.mkdir(parents=True, exist_ok=True)
    plan.save(path)
    return plan


def same_plan(a: FedPCSPlan, b: FedPCSPlan) -> bool:
    """Whether two plans pay and sample alike: every array equal bit for bit (ρ_i^t, α, R_t, φ,
    K_t, ...). The solve's time and its bookkeeping may differ (a plan read again, a file's own
    zip timestamps)."""
    arrays = [(getattr(a, f.name), getattr(b, f.name)) for f in fields(a)]
    return a.inclusion == b.inclusion and all(
        np.array_equal(x, y, equal_nan=np.issubdtype(x.dtype, np.floating)) for x, y in arrays if isinstance(x, np.ndarray)
    )


def reuse_plans(played: list[tuple[Path, Any]], wanted: list[Any]) -> list[str]:
    """Put into the plan cache (:func:`plan_path`) the plans that finished runs played, for the
    games that the recipes ``wanted`` play, so those recipes read them instead of solving the game
    again. ``played``: (a run's ``game.npz``, its recipe) pairs; only runs whose clients played the
    game count (:func:`rho_source` ``"game"``: a baseline's ``game.npz`` holds fixed budgets, not
    a solution). Returns one line per plan put in the cache.

    Why: the solve is deterministic on one host, but its search through a non-convex problem can
    end at another local optimum on another kind of CPU (the kernels' last bits differ), so a grid
    resumed on another host would pair its new cells with a plan its committed cells never played.
    A cached plan that differs from the played one is replaced (the runs are the record). Two runs
    under ``played`` that played different plans of one wanted game are an error naming both: there
    is no telling which one the new cells should share."""
    need = {g.key(): g for g in (fedpcs_game(r) for r in wanted if rho_source(r) == "game") if g is not None}
    found: dict[str, tuple[Path, FedPCSPlan]] = {}
    for path, run in played:
        game = fedpcs_game(run)
        if game is None or rho_source(run) != "game" or game.key() not in need:
            continue
        try:
            plan = FedPCSPlan.load(path)
        except _UNREADABLE as e:
            raise ValueError(f"--plans: {path}: not a readable plan ({type(e).__name__})") from None
        first = found.setdefault(game.key(), (path, plan))
        if not same_plan(first[1], plan):
            raise ValueError(
                f"--plans: {first[0].parent} and {path.parent} played different plans of one game "
                f"(seed {game.seed}, N={game.n_clients}, K={game.clients_per_round}); give a folder of runs that agree"
            )
    lines = []
    for key, (path, plan) in sorted(found.items()):
        target = plan_path(need[key])
        if target.exists():
            try:
                if same_plan(FedPCSPlan.load(target), plan):
                    continue
            except _UNREADABLE:
                pass  # an unreadable cached plan is replaced like a different one
            lines.append(f"plan of game seed {need[key].seed} replaced in the cache by {path.parent}'s")
        else:
            lines.append(f"plan of game seed {need[key].seed} taken from {path.parent}")
        target.parent.mkdir(parents=True, exist_ok=True)
        plan.save(target)
    return lines


BaselineRho = Literal["initial", "low"]


def baseline_plan(game: FedPCSGame, rho: BaselineRho) -> FedPCSPlan:
    """The plan of a baseline whose clients are outside the game (docs/fedpcs.md, 'Baseline
    budgets'): no game is solved, every client keeps ρ_i^t = ρ_i⁰ (``"initial"``) or sits at ρ_L
    (``"low"``) in every round (α ≡ 1 in Eq. 20), R_t = 0 (no payments), K_t = K.

    ρ⁰ and ϕ are the game's own seeded draws, so a baseline's clients are FedPCS's clients
    before any incentive. The round log's game columns stay meaningful: the expected server
    cost (Eq. 13) with the inclusion of a sampler that ignores ρ (uniform, as for ``game``), the
    welfare (Eq. 30) at these budgets and the social optimum at R = 0 (Eqs. 31-32, bounded)."""
    if rho not in ("initial", "low"):
        raise ValueError(f"incentive.baseline_rho: must be 'initial' or 'low' without a game, got {rho!r}")
    if game.budget is not None:
        raise ValueError("incentive.baseline_rho: incentive.budget sets K_t from the game (Algorithm 3); use 'game'")
    tic = time.perf_counter()
    N, T, K = game.n_clients, game.rounds - 1, game.clients_per_round
    rho0, varphi = _types(game)
    level = rho0 if rho == "initial" else np.full(N, game.rho_min)
    budgets = np.repeat(level[:, None], T + 1, axis=1)
    R = np.zeros(T + 1)
    phi = budgets.mean(axis=0)
    v = accuracy_weights(T, gamma=game.gamma, acc_scale=1.0 if game.acc_scale is None else game.acc_scale)
    cost = server_cost(budgets, R, N, K, v, gamma=game.gamma, phi=phi, inclusion="uniform")
    opt = social_optimum(R, varphi, bounded=True, rho_min=game.rho_min, rho_max=game.rho_max)
    return FedPCSPlan(
        rho0=rho0,
        varphi=varphi,
        rho=budgets,
        alpha=np.ones((N, T + 1)),
        reward=R,
        phi=phi,
        K=np.full(T + 1, K, dtype=np.int64),
        v=np.asarray(v),
        cost=np.asarray(cost),
        welfare=np.asarray(social_welfare_per_round(budgets, R, varphi)),
        welfare_optimum=np.asarray(social_welfare_per_round(np.asarray(opt.rho), R, varphi)),
        budget=np.full(T + 1, np.inf),
        phi_history=phi[None, :].copy(),
        residual=0.0,
        converged=True,
        solve_seconds=time.perf_counter() - tic,
        inclusion="uniform",
        gamma=game.gamma,
        extras={"baseline_rho": rho},
    )


class BudgetCfg(PluginConfig):
    """B_t decreasing linearly from ``start`` to ``end`` over the run (FedPCS Alg. 3, Figs. 7-8)."""

    start: float = Field(700.0, gt=0, le=1e9)
    end: float = Field(300.0, gt=0, le=1e9)


def fedpcs_game(run: Any) -> FedPCSGame | None:
    """The FedPCS game a recipe (a ``RunConfig``) asks for (``incentive.kind: fedpcs``), or
    None: N, K, the rounds and the seed from the recipe, the rest from its incentive section."""
    ic = run.incentive
    if getattr(ic, "kind", None) != "fedpcs":
        return None
    return FedPCSGame(
        n_clients=run.data.partition.n_clients,
        clients_per_round=run.train.clients_per_round,
        rounds=run.train.rounds,
        gamma=ic.gamma,
        rho_min=ic.rho_min,
        rho_max=ic.rho_max,
        varphi_clip=ic.varphi_clip,
        inclusion=ic.inclusion,
        acc_scale=None if ic.acc_scale == "data" else float(ic.acc_scale),
        budget=None if ic.budget is None else (ic.budget.start, ic.budget.end),
        R_max=ic.R_max,
        mf_tol=ic.mf_tol,
        n_starts=ic.n_starts,
        seed=run.seed,
    )


def rho_source(run: Any) -> Literal["initial", "low", "game"] | None:
    """Where the clients' ρ_i^t come from (docs/fedpcs.md, 'Baseline budgets'): ``"game"`` for
    FedPCS itself (``selection.kind: privacy_aware``) and for baselines with
    ``incentive.baseline_rho: game``; ``"initial"``/``"low"`` for baselines outside the game;
    None without a FedPCS game."""
    ic = run.incentive
    if getattr(ic, "kind", None) != "fedpcs":
        return None
    source: Literal["initial", "low", "game"] = "game" if getattr(run.selection, "kind", None) == "privacy_aware" else ic.baseline_rho
    return source


@INCENTIVES.register("fedpcs")
class FedPCSIncentive(PlannedIncentive):
    """Pays R_t ρ_i^t to each distinct sampled client (Algorithm 2), sets K_t (Algorithm 3)
    and reports the round's game quantities (accuracy, cost, welfare, payments, budget use)."""

    plan_type = FedPCSPlan
    plan: FedPCSPlan

    @classmethod
    def build_plan(cls, cfg: Any, ctx: Any) -> FedPCSPlan | None:
        """The recipe's FedPCS plan: the game solved (or read from the cache), or for a
        baseline outside the game (:func:`rho_source`) the fixed budgets of
        :func:`baseline_plan`."""
        del cfg
        game = fedpcs_game(ctx.run)
        if game is None:
            return None
        source = rho_source(ctx.run)
        return solve_plan(game) if source == "game" else baseline_plan(game, "low" if source == "low" else "initial")

    @classmethod
    def plan_at_hand(cls, run: Any) -> bool:
        """True unless the recipe's clients play the game and it is not in the cache yet (a
        baseline's fixed budgets cost nothing; the paper's game takes minutes to solve)."""
        game = fedpcs_game(run)
        return game is None or rho_source(run) != "game" or plan_path(game).exists()

    class Config(PluginConfig):
        """The FedPCS Stackelberg game solved before training (Eqs. 14-45; defaults from Table IV
        and Sec. VIII-A). ``inclusion: uniform`` is the Random baseline's game. ``acc_scale``: the
        scale κ of the accuracy term (docs/fedpcs.md, 'The accuracy scale κ and the server's
        solve'), ``data`` = (Σ|D|)².

        ``baseline_rho`` (docs/fedpcs.md, 'Baseline budgets'): the client budgets of a baseline, i.e.
        of any selection other than ``privacy_aware``: ``initial`` (each client keeps ρ_i⁰ every
        round, no reward, no game; the Table II default), ``low`` (every client at ``rho_min``, no
        reward) or ``game`` (the clients play the game against ``inclusion`` and are paid).
        FedPCS's own ``privacy_aware`` selection always uses the game, whatever this says."""

        kind: Literal["fedpcs"] = "fedpcs"
        provides: ClassVar[frozenset[str]] = frozenset({"fedpcs_game", "rho_schedule"})

        def check_run(self, run: Any) -> None:
            if run.train.rounds < 2:
                raise ValueError(f"train.rounds: the FedPCS game needs >= 2 rounds (T >= 1), got {run.train.rounds}")
            if self.budget is not None and run.selection.kind != "privacy_aware" and self.baseline_rho != "game":
                raise ValueError(
                    f"incentive.baseline_rho: incentive.budget sets K_t from the game (Algorithm 3), which a baseline "
                    f"plays only with baseline_rho 'game' (allowed: 'initial', 'low', 'game'), got '{self.baseline_rho}'"
                )

        gamma: float = Field(0.5, gt=0, lt=1)
        rho_min: float = Field(0.01, gt=0, le=1e6)
        rho_max: float = Field(12.0, gt=0, le=1e6)
        varphi_clip: float = Field(1e-3, gt=0, lt=0.5)
        inclusion: Literal["privacy", "uniform"] = "privacy"
        acc_scale: float | Literal["data"] = Field("data", description="kappa > 0, or data")

        @field_validator("acc_scale")
        @classmethod
        def _acc_scale_positive(cls, v: float | str) -> float | str:
            if not isinstance(v, str) and not (0 < v <= 1e30):
                raise ValueError(f"must be in (0, 1e30] or 'data', got {v}")
            return v

        budget: BudgetCfg | None = None
        R_max: float = Field(100.0, gt=0, le=1e9)
        mf_tol: float = Field(1e-7, gt=0, le=1)
        n_starts: int = Field(8, ge=0, le=1000)
        baseline_rho: Literal["initial", "low", "game"] = "initial"

        @model_validator(mode="after")
        def _ranges(self) -> Any:
            if not self.rho_min < self.rho_max:
                raise ValueError(f"incentive.rho_min must be < incentive.rho_max, got {self.rho_min} >= {self.rho_max}")
            if self.budget is not None and min(self.budget.start, self.budget.end) < self.rho_max:
                raise ValueError(
                    f"incentive.budget: B_t must be >= rho_max ({self.rho_max}) so that one client fits, "
                    f"got start {self.budget.start}, end {self.budget.end}"
                )
            return self

    def _t(self, t: int) -> int:
        return min(t, self.plan.reward.size - 1)

    def clients_per_round(self, t: int) -> int | None:
        return int(self.plan.K[self._t(t)])

    def settle(self, t: int, selection: Selection) -> np.ndarray:
        s = self._t(t)
        paid: np.ndarray = self.plan.reward[s] * self.plan.rho[selection.clients, s]
        return paid

    def metrics(self, t: int, selection: Selection) -> dict[str, float]:
        p, s = self.plan, self._t(t)
        rho = p.rho[selection.clients, s]
        used = float(rho.sum())
        realised = float(np.sum(p.v[s] / rho + (1.0 - p.gamma) * p.reward[s] * rho))
        return {
            "reward": float(p.reward[s]),
            "phi": float(p.phi[s]),
            "rho_mean_selected": float(rho.mean()),
            "cost_expected": float(p.cost[s]),
            "cost_realised": realised,
            "welfare": float(p.welfare[s]),
            "welfare_optimum": float(p.welfare_optimum[s]),
            "budget": float(p.budget[s]) if np.isfinite(p.budget[s]) else float("nan"),
            "budget_used": used,
            "tau": float(p.K[s]) / p.rho.shape[0],
        }
