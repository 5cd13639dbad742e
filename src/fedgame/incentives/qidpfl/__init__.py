"""QI-DPFL (W. Yuan, X. Wang, "QI-DPFL: Quality-Aware and Incentive-Boosted Federated Learning
with Differential Privacy"): its screening and reward game, and its training plug-in.

:mod:`.game` is the pure maths (label-EMD screening, the clients' contest, the server's reward;
its docstring maps each equation to a function); :mod:`.plugin` turns the game into a
:class:`QIDPFLPlan` before training and pays from it (:class:`QIDPFLIncentive`).
"""

from fedgame.incentives.qidpfl import game
from fedgame.incentives.qidpfl.game import *  # noqa: F403  (the names of game.__all__, listed once there)
from fedgame.incentives.qidpfl.plugin import POLICIES, QIDPFLIncentive, QIDPFLPlan, plan_qidpfl

__all__ = ["POLICIES", "QIDPFLIncentive", "QIDPFLPlan", "plan_qidpfl"]
__all__ += game.__all__
