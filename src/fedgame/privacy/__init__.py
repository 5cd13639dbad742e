"""Differential privacy for fedgame: mechanisms (clip + noise), privacy events, per-client
accountants, per-client budget distributions (:mod:`fedgame.privacy.budgets`), and the pure
maths in :mod:`fedgame.privacy.analysis`.

Client privacy *plans* (which mechanism a client applies in a round) live in
:mod:`fedgame.privacy.plans`; central DP-FedAvg (server-side noise) in :mod:`fedgame.privacy.central`; JDP-FL's client-side M3/M5 in :mod:`fedgame.privacy.jdp`. Attributes are imported lazily, so ``import
fedgame.privacy.analysis`` stays free of torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedgame._lazy import lazy_attributes

if TYPE_CHECKING:
    from fedgame.privacy.accountants import (
        ACCOUNTANTS,
        Accountant,
        Ledger,
        PLDAccountant,
        RDPAccountant,
        ZCDPAccountant,
        make_accountant,
    )
    from fedgame.privacy.budgets import draw_budgets
    from fedgame.privacy.central import AdaptiveClip, CentralDP, CentralGaussian, central_dp_epsilon
    from fedgame.privacy.events import PrivacyEvent
    from fedgame.privacy.jdp import Perturbed, jdp_events, jdp_local_update, local_perturbation, perturb
    from fedgame.privacy.mechanisms import GaussianMechanism, NoPrivacy, clip_by_l2, per_example_clip_factors

_WHERE = {
    "PrivacyEvent": "events",
    "Ledger": "accountants",
    "Accountant": "accountants",
    "ZCDPAccountant": "accountants",
    "RDPAccountant": "accountants",
    "PLDAccountant": "accountants",
    "ACCOUNTANTS": "accountants",
    "make_accountant": "accountants",
    "GaussianMechanism": "mechanisms",
    "NoPrivacy": "mechanisms",
    "clip_by_l2": "mechanisms",
    "per_example_clip_factors": "mechanisms",
    "draw_budgets": "budgets",
    "AdaptiveClip": "central",
    "CentralDP": "central",
    "CentralGaussian": "central",
    "central_dp_epsilon": "central",
    "Perturbed": "jdp",
    "local_perturbation": "jdp",
    "perturb": "jdp",
    "jdp_local_update": "jdp",
    "jdp_events": "jdp",
}

__all__ = [
    "PrivacyEvent",
    "Ledger",
    "Accountant",
    "ZCDPAccountant",
    "RDPAccountant",
    "PLDAccountant",
    "ACCOUNTANTS",
    "make_accountant",
    "GaussianMechanism",
    "NoPrivacy",
    "clip_by_l2",
    "per_example_clip_factors",
    "draw_budgets",
    "AdaptiveClip",
    "CentralDP",
    "CentralGaussian",
    "central_dp_epsilon",
    "Perturbed",
    "local_perturbation",
    "perturb",
    "jdp_local_update",
    "jdp_events",
]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, __all__)
