"""fedgame's two subclasses of dp-accounting types, in a module of their own so that
:mod:`fedgame.privacy.accountants` imports dp-accounting only when a ledger is handed to it.

Importing any part of ``dp_accounting`` runs its package ``__init__``, which imports its PLD
code and with it ``scipy.signal``: about a second of CPU on the 2-core test host. A Flower
ClientApp process (Flower 1.42 starts one per message), a CLI call that only reads a recipe, or a
non-private run never composes a ledger and should not pay it (docs/speed.md, "Fixed costs of a
fresh process").
"""

from __future__ import annotations

from typing import Any

import attr
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

__all__ = ["DpAccountingPLD", "EpsilonDeltaDpEvent"]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):  # type: ignore[misc]  # dp_accounting is untyped: its base class is Any
    """A generic (ε, δ)-DP release as a ``dp_accounting`` event (dp-accounting has none).
    Understood by fedgame's PLD accountant (worst-case PLD of Kairouz, Oh & Viswanath 2015);
    RDP accountants cannot represent δ > 0, fedgame composes it by basic composition there."""

    epsilon: float
    delta: float = 0.0


class DpAccountingPLD(pld_privacy_accountant.PLDAccountant):  # type: ignore[misc]  # dp_accounting is untyped: its base class is Any
    """dp-accounting's PLD accountant, taught :class:`EpsilonDeltaDpEvent` (the worst-case PLD
    of an (ε, δ)-DP mechanism, ``PrivacyLossDistribution.from_privacy_parameters``)."""

    def _maybe_compose(self, event: dp_event.DpEvent, count: int, do_compose: bool) -> Any:
        if isinstance(event, EpsilonDeltaDpEvent):
            if do_compose:
                params = DifferentialPrivacyParameters(epsilon=event.epsilon, delta=event.delta)
                vdi = self._value_discretization_interval
                pld = pld_lib.from_privacy_parameters(params, value_discretization_interval=vdi)
                self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)  # type: ignore[has-type]  # self-referential
            return None
        return super()._maybe_compose(event, count, do_compose)
