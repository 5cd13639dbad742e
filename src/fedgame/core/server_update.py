"""Server updates as ``init``/``update`` pairs with explicit state (after optax's
``GradientTransformation``), composed with :func:`chain`.

An update maps the round's per-slot client updates to new per-slot updates; an aggregator
maps them to a single vector (a list of length one). The engine adds the final vector to the
global parameters. State is a value the engine checkpoints, never hidden in closures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from fedgame.core.types import Params, Selection

__all__ = ["RoundContext", "ServerUpdate", "chain"]


@dataclass(frozen=True)
class RoundContext:
    """What a server update may read in round ``t``: the selection, aggregation weights θ and
    the global parameters before the update.

    ``metrics`` is the one thing a server update may write: numbers about the round it
    computed anyway (e.g. ``max_agg_weight``, the largest aggregation weight; docs/fedpcs.md,
    'Baseline budgets'), which the engine copies into the round's record as they are — so a
    rule can report what it applied without the engine knowing which rule ran."""

    t: int
    selection: Selection
    theta: np.ndarray
    params: Params
    rng: np.random.Generator
    metrics: dict[str, float] = field(default_factory=dict, compare=False)


Updates = list[Params]


class ServerUpdate(NamedTuple):
    init: Callable[[Params], Any]
    update: Callable[[Sequence[Params], Any, RoundContext], tuple[Updates, Any]]


def chain(*parts: ServerUpdate) -> ServerUpdate:
    """Apply ``parts`` in order; the state is the tuple of the parts' states."""

    def init(params: Params) -> tuple[Any, ...]:
        return tuple(p.init(params) for p in parts)

    def update(updates: Sequence[Params], state: Any, ctx: RoundContext) -> tuple[Updates, Any]:
        out: Updates = list(updates)
        new_state = []
        for part, s in zip(parts, state, strict=True):
            out, s = part.update(out, s, ctx)
            new_state.append(s)
        return out, tuple(new_state)

    return ServerUpdate(init, update)
