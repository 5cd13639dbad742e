"""FedPCS (W. Yuan, X. Wang, "A Game-Theoretic Framework for Privacy-Aware Client Sampling in
Federated Learning"): its game, the solvers and kernels, and its training plug-in.

The game is a two-stage mean-field Stackelberg game. The server (leader) sets the reward rate
R_t; each client (follower) picks correction factors α_i^t that move its zCDP budget ρ_i^t toward
the population mean φ(t) (Eq. 20); clients are drawn K times with probability
x_i^t = ρ_i^t / (N φ(t)). Pure NumPy/SciPy. Equation → function:

===============================  ============================================================
Eq. 14 / Sec. III-C               :func:`inclusion_probability` (+ derivatives)
Eq. 20                            :func:`rho_next`, :func:`trajectory`
Eqs. 14-15, 19                    :func:`stage_payoff`, :func:`client_utility`
Eqs. 49, 53-54 (M corrected*)     :func:`costate`, :func:`client_utility_gradient`
Theorem 1, Eq. 21                 :func:`stationary_alpha`, :func:`best_response`
Def. 2, Eq. 18, Alg. 1            :func:`mean_field` (:class:`MeanFieldSolverOptions`)
Eqs. 12-13                        :func:`accuracy_weights`, :func:`server_cost`
Eq. 13 at the equilibrium ρ*[R]   :func:`equilibrium_cost` (the true server cost†)
Lemma 2, Eqs. 22, 57-62           :func:`affine_response`, :func:`optimal_reward`, ...
Algorithm 1 (outer loop)          :func:`stackelberg_lemma2` (the paper's, on Lemma 2)
Stage I on the true cost          :func:`stackelberg_true_cost`; :func:`stackelberg` (default)
Eqs. 30-37, Prop. 4, Thm. 6       :func:`social_welfare`, :func:`price_of_anarchy`, ...
Theorem 7, Eqs. 38-45, Alg. 3     :func:`theorem7`, :func:`adaptive_k`, :func:`adaptive_schedule`
Theorems 4-5, Prop. 3             :func:`bound_thm4_convex`, ... (reference formulas)
===============================  ============================================================

* Theorem 1's M_i^t (Eq. 21) lacks the factor K/(N φ(t)) that Eqs. 52 and 54 carry and the
derivative of the inclusion probability needs; fedgame restores it.
† What the server minimises by default: docs/fedpcs.md, 'The accuracy scale κ and the server's
solve'.

The training plug-in (Algorithms 2-3; :mod:`.plugin`): :func:`solve_plan` solves the game once
before training into a :class:`FedPCSPlan` (cached on disk), and :class:`FedPCSIncentive` pays
R_t ρ_i^t and sets K_t from it. The modules: ``_dynamics`` (Eqs. 14-20, 49-54), ``_best_response``
and ``_solvers`` (the clients' problems), ``_kernels`` (their Numba kernels), ``_mean_field``,
``_server`` (Stage I), ``_welfare``, ``_budget`` (Theorem 7), ``_bounds``, ``plugin``.
"""

from fedgame.incentives.fedpcs._best_response import BestResponse, Solver, best_response
from fedgame.incentives.fedpcs._bounds import (
    bound_prop3,
    bound_thm4_convex,
    bound_thm4_nonconvex,
    bound_thm5_error,
    bound_thm5_rate,
    noisy_update_bound,
    participation_factor,
)
from fedgame.incentives.fedpcs._budget import (
    AdaptiveSchedule,
    Theorem7Result,
    adaptive_k,
    adaptive_schedule,
    budget_binding_cost,
    linear_budget,
    theorem7,
)
from fedgame.incentives.fedpcs._dynamics import (
    Inclusion,
    client_utility,
    client_utility_gradient,
    client_utility_hessian,
    costate,
    inclusion_probability,
    inclusion_probability_derivative,
    inclusion_probability_second_derivative,
    kkt_residual,
    rho_next,
    stage_payoff,
    stationary_alpha,
    trajectory,
)
from fedgame.incentives.fedpcs._mean_field import (
    PAPER_MF_TOL,
    Acceleration,
    MeanFieldResult,
    MeanFieldSolverOptions,
    Restarts,
    Update,
    mean_field,
)
from fedgame.incentives.fedpcs._server import (
    AffineResponse,
    EquilibriumCost,
    RewardSolution,
    ServerSolver,
    StackelbergResult,
    accuracy_weights,
    affine_response,
    equilibrium_cost,
    optimal_reward,
    reward_fixed_point,
    reward_interval,
    server_cost,
    stackelberg,
    stackelberg_lemma2,
    stackelberg_true_cost,
    surrogate_cost,
    surrogate_cost_derivative,
    surrogate_cost_second_derivative,
)
from fedgame.incentives.fedpcs._welfare import (
    SocialOptimum,
    paper_poa_privacy_aware,
    paper_theorem6_bound,
    paper_theorem6_limit,
    poa_random_lower_bounds,
    price_of_anarchy,
    social_optimum,
    social_welfare,
    social_welfare_per_round,
    welfare_privacy_worst,
    welfare_random_worst,
)
from fedgame.incentives.fedpcs.plugin import (
    BaselineRho,
    FedPCSGame,
    FedPCSIncentive,
    FedPCSPlan,
    baseline_plan,
    cache_dir,
    reuse_plans,
    same_plan,
    solve_plan,
)

__all__ = [
    # the training plug-in (.plugin)
    "BaselineRho",
    "FedPCSGame",
    "FedPCSIncentive",
    "FedPCSPlan",
    "baseline_plan",
    "cache_dir",
    "reuse_plans",
    "same_plan",
    "solve_plan",
    # the game
    "Inclusion",
    "PAPER_MF_TOL",
    "Acceleration",
    "AdaptiveSchedule",
    "AffineResponse",
    "BestResponse",
    "EquilibriumCost",
    "MeanFieldResult",
    "MeanFieldSolverOptions",
    "Restarts",
    "RewardSolution",
    "ServerSolver",
    "SocialOptimum",
    "Solver",
    "StackelbergResult",
    "Theorem7Result",
    "Update",
    "accuracy_weights",
    "adaptive_k",
    "adaptive_schedule",
    "affine_response",
    "best_response",
    "bound_prop3",
    "bound_thm4_convex",
    "bound_thm4_nonconvex",
    "bound_thm5_error",
    "bound_thm5_rate",
    "budget_binding_cost",
    "client_utility",
    "client_utility_gradient",
    "client_utility_hessian",
    "costate",
    "equilibrium_cost",
    "inclusion_probability",
    "inclusion_probability_derivative",
    "inclusion_probability_second_derivative",
    "kkt_residual",
    "linear_budget",
    "mean_field",
    "noisy_update_bound",
    "optimal_reward",
    "paper_poa_privacy_aware",
    "paper_theorem6_bound",
    "paper_theorem6_limit",
    "participation_factor",
    "poa_random_lower_bounds",
    "price_of_anarchy",
    "reward_fixed_point",
    "reward_interval",
    "rho_next",
    "server_cost",
    "social_optimum",
    "social_welfare",
    "social_welfare_per_round",
    "stackelberg",
    "stackelberg_lemma2",
    "stackelberg_true_cost",
    "stage_payoff",
    "stationary_alpha",
    "surrogate_cost",
    "surrogate_cost_derivative",
    "surrogate_cost_second_derivative",
    "theorem7",
    "trajectory",
    "welfare_privacy_worst",
    "welfare_random_worst",
]
