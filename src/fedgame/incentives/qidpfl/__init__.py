"""QI-DPFL (W. Yuan, X. Wang, "QI-DPFL: Quality-Aware and Incentive-Boosted Federated Learning
with Differential Privacy"): its screening and reward game, and its training plug-in.

:mod:`.game` is the pure maths (label-EMD screening, the clients' contest, the server's reward;
its docstring maps each equation to a function); :mod:`.plugin` turns the game into a
:class:`QIDPFLPlan` before training and pays from it (:class:`QIDPFLIncentive`).
"""

from fedgame.incentives.qidpfl.game import (
    AccuracyCurve,
    ClientEquilibrium,
    CurveFit,
    QIDPFLOutcome,
    RewardPolicy,
    RewardSchedule,
    ScreeningResult,
    ServerParams,
    StackelbergCheck,
    best_response,
    calibrate_acc_scale,
    client_equilibrium,
    client_utility,
    deviation_gains,
    equilibrium_slopes,
    fit_accuracy_curve,
    label_emd,
    max_reward,
    optimal_reward,
    participants,
    participation_loop,
    qidpfl_reward,
    random_reward,
    reference_distribution,
    reward_cost,
    reward_range,
    reward_schedule,
    screen,
    server_round_cost,
    solve_qidpfl_game,
    stackelberg_check,
    theorem2_constant,
)
from fedgame.incentives.qidpfl.plugin import (
    POLICIES,
    QIDPFLIncentive,
    QIDPFLPlan,
    plan_qidpfl,
)

__all__ = [
    # the training plug-in (.plugin)
    "POLICIES",
    "QIDPFLIncentive",
    "QIDPFLPlan",
    "plan_qidpfl",
    # the game (.game)
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
