"""Robust aggregation rules and attacks (imports only :mod:`fedgame.core`).

=====================================================  =========================================
JDP-FL Algorithm 4, eq. (7) (M4)                      :func:`leave_one_out_aggregate`,
                                                       :func:`exponential_probabilities`,
                                                       :func:`draw_group`, :class:`GroupSelection`
JDP-FL Fig. 5, random groups (Sec. 6.2.5)             :func:`random_group_aggregate`,
                                                       :func:`random_groups`, :func:`select_group`
leave-one-out / group sums (by subtraction)           :func:`leave_one_out_sums`, :func:`group_sums`
JDP-FL "traditional" FedAvg on θ̂ (Sec. 6.2.2)          :func:`weighted_average`
Krum / Multi-Krum (Blanchard et al. 2017)              :func:`krum`, :func:`krum_scores`,
                                                       :func:`krum_select`
coordinate-wise median, trimmed mean (Yin et al. 2018) :func:`coordinate_median`, :func:`trimmed_mean`
one-line ServerUpdate wrapper, registry                :func:`robust_step`, :data:`ROBUST_AGGREGATORS`
JDP-FL adversary: dirty labels (Sec. 6.1)             :func:`dirty_label`, :func:`choose_adversary`
=====================================================  =========================================

M4's client-side counterpart (M5) and M3 are in :mod:`fedgame.privacy.jdp`; their ledger in
:mod:`fedgame.privacy.analysis.jdp`.
"""

from fedgame.robust._attacks import DIRTY_LABEL_TARGETS, ONE_CLASS_SOURCES, AttackMode, choose_adversary, dirty_label
from fedgame.robust._groups import (
    GroupSelection,
    ScoreFn,
    ScoreSensitivity,
    draw_group,
    exponential_probabilities,
    group_sums,
    leave_one_out_aggregate,
    leave_one_out_groups,
    leave_one_out_sums,
    random_group_aggregate,
    random_groups,
    score_sensitivity,
    select_group,
)
from fedgame.robust._rules import (
    ROBUST_AGGREGATORS,
    Rule,
    coordinate_median,
    krum,
    krum_scores,
    krum_select,
    robust_step,
    trimmed_mean,
    weighted_average,
)

__all__ = [
    "AttackMode",
    "DIRTY_LABEL_TARGETS",
    "GroupSelection",
    "ONE_CLASS_SOURCES",
    "ROBUST_AGGREGATORS",
    "Rule",
    "ScoreFn",
    "ScoreSensitivity",
    "choose_adversary",
    "coordinate_median",
    "dirty_label",
    "draw_group",
    "exponential_probabilities",
    "group_sums",
    "krum",
    "krum_scores",
    "krum_select",
    "leave_one_out_aggregate",
    "leave_one_out_groups",
    "leave_one_out_sums",
    "random_group_aggregate",
    "random_groups",
    "robust_step",
    "score_sensitivity",
    "select_group",
    "trimmed_mean",
    "weighted_average",
]
