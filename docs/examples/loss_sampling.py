"""A client-selection rule as a fedgame plug-in, in one file.

Active-federated-learning-style sampling (Goetz et al., 2019, "Active Federated Learning"): draw
each round's K clients with probability mixing a uniform share with a softmax of the clients'
last reported training losses, so clients whose data the model fits worst train more often. A
client never seen yet keeps the highest loss seen so far (it is explored before it is exploited).

Run it from a recipe (``docs/plugins.md``):

    fedgame --plugin docs/examples/loss_sampling.py run docs/examples/loss_sampling.yaml
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedgame.core import RoundOutcome, RoundState
from fedgame.core.plugins import BuildContext, PluginConfig
from fedgame.selection import SELECTIONS, SelectionStrategy


@SELECTIONS.register("loss_softmax")
class LossSoftmax(SelectionStrategy):
    """x_i = mix/N + (1 - mix) softmax(loss_i / temperature): favours clients with high loss."""

    class Config(PluginConfig):
        kind: Literal["loss_softmax"] = "loss_softmax"
        temperature: float = Field(1.0, gt=0, le=1e6)
        mix: float = Field(0.2, ge=0, le=1)

    def __init__(self, n_clients: int, *, temperature: float = 1.0, mix: float = 0.2) -> None:
        self.temperature, self.mix = temperature, mix
        self.loss = np.full(n_clients, np.nan)

    @classmethod
    def from_config(cls, cfg: Any, ctx: BuildContext) -> LossSoftmax:
        return cls(ctx.run.data.partition.n_clients, temperature=cfg.temperature, mix=cfg.mix)

    def probabilities(self, state: RoundState) -> np.ndarray:
        n = state.n_clients
        seen = ~np.isnan(self.loss)
        if not seen.any():
            return np.full(n, 1.0 / n)
        loss = np.where(seen, self.loss, np.nanmax(self.loss))
        z = np.exp((loss - loss.max()) / self.temperature)
        return self.mix / n + (1 - self.mix) * z / z.sum()

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        for client, loss in outcome.losses().items():
            self.loss[client] = loss

    def state_dict(self) -> dict[str, Any]:
        return {"loss": self.loss.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss = np.asarray(state["loss"], dtype=np.float64).copy()
