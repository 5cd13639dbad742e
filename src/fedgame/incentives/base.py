"""The incentive plug-in interface and its null object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fedgame.core.plugins import PluginConfig
from fedgame.core.registry import Registry
from fedgame.core.types import Selection

if TYPE_CHECKING:
    from pydantic import BaseModel

    from fedgame.core.plugins import BuildContext

__all__ = ["INCENTIVES", "Incentive", "NoIncentive", "PlannedIncentive"]

INCENTIVES: Registry["Incentive"] = Registry("incentive mechanism")


class Incentive:
    """Settles round ``t``: returns the payment to each selected client (aligned with
    ``selection.clients``). The base class pays nothing."""

    name = "none"
    Config: ClassVar[type[BaseModel] | None] = None
    """A plug-in's recipe model (``kind: Literal["<name>"]`` plus its fields); None for the
    built-in mechanisms, whose models live in the recipe schema (``docs/plugins.md``)."""

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> Incentive:
        """Build from the recipe's ``incentive`` section; default: its fields but ``kind`` as
        keyword arguments. Override to use ``ctx`` (the clients' data sizes, the run)."""
        del ctx
        return cls(**cfg.model_dump(exclude={"kind"}))

    def settle(self, t: int, selection: Selection) -> np.ndarray:
        return np.zeros(selection.clients.size)

    def clients_per_round(self, t: int) -> int | None:
        """K_t when the mechanism decides it (FedPCS Algorithm 3), else None (the recipe's K)."""
        del t
        return None

    def metrics(self, t: int, selection: Selection) -> dict[str, float]:
        """Extra per-round columns for the metrics table (rewards, costs, welfare, budgets)."""
        del t, selection
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state

    @classmethod
    def build_plan(cls, cfg: BaseModel, ctx: BuildContext) -> Any:
        """What this incentive solves before training from its recipe section ``cfg`` and the
        run (``ctx``: the recipe, the server's data, the seeded streams, the clients' label
        counts when queried, the model size ``dim``), or None (the default: nothing to solve).
        The pipeline calls it once per run and hands the result to every plug-in as
        ``ctx.plan``."""
        del cfg, ctx
        return None


@INCENTIVES.register("none")
class NoIncentive(Incentive):
    """No payments (plain FL)."""

    class Config(PluginConfig):
        kind: Literal["none"] = "none"


class PlannedIncentive(Incentive):
    """An incentive that pays from a plan the pipeline solved before training (FedPCS's game,
    QI-DPFL's reward game): built from ``ctx.plan``, which must be a ``plan_type``."""

    plan_type: ClassVar[type]

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> Incentive:
        """The incentive of the plan in ``ctx.plan``."""
        del cfg
        if not isinstance(ctx.plan, cls.plan_type):
            raise ValueError(f"incentive.kind: {cls.name!r} needs its plan (the solved game)")
        return cls(ctx.plan)

    @classmethod
    def plan_at_hand(cls, run: Any) -> bool:
        """Whether :meth:`build_plan` is quick for the recipe ``run`` (no long solve: the plan
        is cheap or already cached), so ``fedgame validate`` builds every plug-in from it
        without being asked to solve (its ``--solve``). True by default (QI-DPFL's reward game
        solves in about a second)."""
        del run
        return True
