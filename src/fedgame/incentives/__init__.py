"""Incentive mechanisms: who is paid what for taking part in a round.

An incentive settles a round's selection into payments (FedPCS: r_i = R_t ρ_i^t; QI-DPFL's
reward contest; JDP-FL's auction payments). Games and auctions that decide *before* training
who takes part live beside it (``games/``, ``auctions/``) and hand their outcome to a selection
strategy and a privacy plan.
"""

from fedgame.incentives.base import INCENTIVES, Incentive, NoIncentive
from fedgame.incentives.fedpcs import FedPCSGame, FedPCSIncentive, FedPCSPlan, baseline_plan, solve_plan
from fedgame.incentives.qidpfl import QIDPFLIncentive, QIDPFLPlan, plan_qidpfl

__all__ = [
    "INCENTIVES",
    "FedPCSGame",
    "FedPCSIncentive",
    "FedPCSPlan",
    "Incentive",
    "NoIncentive",
    "QIDPFLIncentive",
    "QIDPFLPlan",
    "baseline_plan",
    "plan_qidpfl",
    "solve_plan",
]
