"""Incentive mechanisms: who is paid what for taking part in a round.

An incentive settles a round's selection into payments (FedPCS: r_i = R_t ρ_i^t; QI-DPFL's
reward contest; JDP-FL's auction payments). One folder per mechanism, each holding the game or
auction that decides *before* training who takes part (handed to a selection strategy and a
privacy plan) beside its training plug-in:

* ``fedpcs/``: FedPCS's mean-field Stackelberg game, its solvers and Numba kernels, and the
  ``fedpcs`` incentive (``fedpcs/plugin.py``);
* ``qidpfl/``: QI-DPFL's screening and reward game (``qidpfl/game.py``) and the ``qidpfl``
  incentive (``qidpfl/plugin.py``);
* ``auctions/``: JDP-FL's recruitment auctions M1 and M2.

``base.py`` holds the :class:`Incentive` interface and its registry. The JSON problems of
``fedgame solve`` are in :mod:`fedgame.solve`.
"""

from fedgame.incentives.base import INCENTIVES, Incentive, NoIncentive, PlannedIncentive
from fedgame.incentives.fedpcs import FedPCSGame, FedPCSIncentive, FedPCSPlan, baseline_plan, solve_plan
from fedgame.incentives.qidpfl import QIDPFLIncentive, QIDPFLPlan, plan_qidpfl

__all__ = [
    "INCENTIVES",
    "FedPCSGame",
    "FedPCSIncentive",
    "FedPCSPlan",
    "Incentive",
    "NoIncentive",
    "PlannedIncentive",
    "QIDPFLIncentive",
    "QIDPFLPlan",
    "baseline_plan",
    "plan_qidpfl",
    "solve_plan",
]
