"""The incentive plug-in interface and its null object."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedgame.core.registry import Registry
from fedgame.core.types import Selection

__all__ = ["INCENTIVES", "Incentive", "NoIncentive"]

INCENTIVES: Registry["Incentive"] = Registry("incentive mechanism")


class Incentive:
    """Settles round ``t``: returns the payment to each selected client (aligned with
    ``selection.clients``). The base class pays nothing."""

    name = "none"

    def settle(self, t: int, selection: Selection) -> np.ndarray:
        return np.zeros(selection.clients.size)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


@INCENTIVES.register("none")
class NoIncentive(Incentive):
    """No payments (plain FL)."""
