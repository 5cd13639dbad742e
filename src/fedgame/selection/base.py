"""Client-selection strategies: one interface, one RNG stream each (after optuna's BaseSampler).

A strategy returns the round's clients *and* the probabilities they were chosen with, so that
aggregation can be importance-weighted (unbiased) and the accountant knows sampling rates.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fedgame.core.plugins import PluginConfig
from fedgame.core.registry import Registry
from fedgame.core.types import RoundOutcome, RoundState, Selection

if TYPE_CHECKING:
    from pydantic import BaseModel

    from fedgame.core.plugins import BuildContext

__all__ = ["SelectionStrategy", "SELECTIONS", "multinomial", "check_distribution", "check_k_at_most_n"]

SELECTIONS: Registry["SelectionStrategy"] = Registry("selection strategy")


def check_k_at_most_n(run: Any, what: str) -> None:
    """Refuse ``train.clients_per_round`` above ``data.partition.n_clients`` for a selection
    that draws distinct clients (``what``: which one, for the message)."""
    n, k = run.data.partition.n_clients, run.train.clients_per_round
    if n is None:  # a natural partition: checked again once the data gives its clients
        return
    if k > n:
        raise ValueError(f"train.clients_per_round: must be <= data.partition.n_clients ({n}) with {what}, got {k}")


def check_distribution(x: np.ndarray, *, field: str = "selection.probabilities") -> np.ndarray:
    """Validate a one-draw distribution: finite, non-negative, summing to 1."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{field}: must be a non-empty 1-D array, got shape {x.shape}")
    # scalar tests on the sum and the minimum (one check per round; np.isclose and np.all cost
    # more than the draw itself at small N): a NaN or inf entry makes the sum non-finite
    s, lo = float(x.sum()), float(x.min())
    if not (math.isfinite(s) and lo >= 0):
        raise ValueError(f"{field}: must be finite and >= 0, got min {lo}")
    if not abs(s - 1.0) <= 1e-9:
        raise ValueError(f"{field}: must sum to 1, got {s}")
    return x


def multinomial(rng: np.random.Generator, x: np.ndarray, k: int) -> Selection:
    """``k`` independent draws with replacement from ``x`` (FedPCS Sec. III-C, default sampler)."""
    idx = rng.choice(x.size, size=k, replace=True, p=x)
    return Selection(indices=idx, probs=x[idx], k=k, scheme="draws")


class SelectionStrategy(ABC):
    """Draws the clients of a round.

    Subclasses give :meth:`probabilities` (a one-draw distribution) and inherit multinomial
    sampling, or override :meth:`select` for other schemes (without replacement, Bernoulli,
    sequential). State a strategy needs across rounds lives in the strategy and is saved by
    :meth:`state_dict` with the run's checkpoint.
    """

    name: str = "base"
    needs: frozenset[str] = frozenset()
    """What the strategy asks the trainer to measure beyond the update and loss (e.g.
    :data:`~fedgame.core.types.LOCAL_GRAD_VARIANCE`); the engine measures nothing else."""
    Config: ClassVar[type[BaseModel] | None] = None
    """A plug-in's recipe model (``kind: Literal["<name>"]`` plus its fields); None for the
    built-in strategies, whose models live in the recipe schema (``docs/plugins.md``)."""

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> SelectionStrategy:
        """Build from the recipe's ``selection`` section; default: its fields but ``kind`` as
        keyword arguments. Override to use ``ctx`` (the data's sizes, label counts, a plan)."""
        del ctx
        return cls(**cfg.model_dump(exclude={"kind"}))

    @abstractmethod
    def probabilities(self, state: RoundState) -> np.ndarray:
        """One-draw probabilities over all clients (sum to 1)."""

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        if not 1 <= state.k:
            raise ValueError(f"train.clients_per_round: must be >= 1, got {state.k}")
        return multinomial(rng, check_distribution(self.probabilities(state)), state.k)

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        """Learn from the round (losses, update norms); default: nothing."""

    def participation_bound(self) -> np.ndarray | None:
        """The most times each client can be selected over the run, when the strategy fixes it
        before training (a PHS schedule, capped power-of-choice); None otherwise. Privacy plans
        that calibrate per participation count (PHS Eq. 6) need it."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


@SELECTIONS.register("uniform")
class Uniform(SelectionStrategy):
    """Uniform sampling ("Random", FedAvg): x_i = 1/N, with or without replacement."""

    class Config(PluginConfig):
        kind: Literal["uniform"] = "uniform"

        def check_run(self, run: Any) -> None:
            n, k = run.data.partition.n_clients, run.train.clients_per_round
            if n is not None and not self.replace and k > n:
                raise ValueError(
                    f"train.clients_per_round: must be <= data.partition.n_clients ({n}) when sampling without replacement, got {k}"
                )

        replace: bool = False

    def __init__(self, *, replace: bool = False) -> None:
        self.replace = replace

    def probabilities(self, state: RoundState) -> np.ndarray:
        return np.full(state.n_clients, 1.0 / state.n_clients)

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        n, k = state.n_clients, state.k
        if self.replace:
            return super().select(state, rng)
        if not 1 <= k <= n:
            raise ValueError(f"train.clients_per_round: must be in [1, {n}] (number of clients) when sampling without replacement, got {k}")
        idx = np.sort(rng.choice(n, size=k, replace=False))
        return Selection(indices=idx, probs=np.full(k, k / n), k=k, scheme="inclusion")


@SELECTIONS.register("full")
class FullParticipation(SelectionStrategy):
    """Every client every round: the reference for unbiasedness tests."""

    class Config(PluginConfig):
        kind: Literal["full"] = "full"

    def probabilities(self, state: RoundState) -> np.ndarray:
        return np.full(state.n_clients, 1.0 / state.n_clients)

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        n = state.n_clients
        return Selection(indices=np.arange(n), probs=np.ones(n), k=n, scheme="inclusion")


@SELECTIONS.register("data_size")
class DataSize(SelectionStrategy):
    """x_i ∝ |D_i| ("Unbiased" mechanism of PHS, Sec. VI-B), K draws with replacement."""

    class Config(PluginConfig):
        kind: Literal["data_size"] = "data_size"

    def probabilities(self, state: RoundState) -> np.ndarray:
        s = np.asarray(state.sizes, dtype=np.float64)
        probs: np.ndarray = s / s.sum()
        return probs
