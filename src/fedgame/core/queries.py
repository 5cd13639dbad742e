"""Client queries: what a mechanism needs from clients besides training, answered from the
client's own data only.

A query is a function ``(view, args) -> np.ndarray`` registered by name in :data:`QUERIES`
beside the mechanism that asks it: ``label_counts`` here (QI-DPFL's EMD screening, Fed-CBS),
``bid`` in :mod:`fedgame.incentives.auctions` (JDP-FL's sealed cost bids). A client answers
through :func:`answer_query` from a :class:`ClientView` (its labels, its id, the run's streams),
the one code path in process, in a worker process and on a Flower SuperNode, so all give the
same answers. A user's query is one ``@QUERIES.register("name")`` in their plug-in module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from fedgame.core.registry import Registry
from fedgame.core.seeding import Streams

__all__ = ["QUERIES", "ClientView", "QueryArgs", "answer_query", "check_query"]

QueryArgs = Mapping[str, int | float | str | bool]
"""The server's settings of a query (e.g. the cost range a simulated client draws from)."""


@dataclass(frozen=True)
class ClientView:
    """What a client may answer a query from: its own examples' labels (``labels``, int64,
    in its local order), the number of classes, its id among ``n_clients`` and the run's
    streams. Nothing of any other client."""

    client: int
    n_clients: int
    labels: np.ndarray
    classes: int
    streams: Streams

    @classmethod
    def of(cls, client: int, *, y: torch.Tensor, indices: torch.Tensor, classes: int, n_clients: int, streams: Streams) -> ClientView:
        """The view of ``client`` whose examples are ``indices`` into the training labels ``y``."""
        labels = y[indices].detach().cpu().numpy().astype(np.int64, copy=False)
        return cls(client=int(client), n_clients=int(n_clients), labels=labels, classes=int(classes), streams=streams)


QUERIES: Registry[np.ndarray] = Registry("client query")
"""Named queries a client answers; each maps (its view, the server's args) to a NumPy array."""


@QUERIES.register("label_counts")
def label_counts(view: ClientView, args: QueryArgs) -> np.ndarray:
    """``(classes,)`` int64: how many of the client's examples carry each label (QI-DPFL's
    EMD screening, Eq. 11; the same numbers as a row of ``FederatedDataset.label_counts()``)."""
    del args
    return np.bincount(view.labels, minlength=view.classes).astype(np.int64)


def check_query(name: str) -> None:
    """Raise a ValueError naming ``name`` and the known queries unless it is one of them."""
    if name not in QUERIES:
        raise ValueError(f"query {name!r}: unknown; known queries: {', '.join(repr(k) for k in QUERIES.names())}")


def answer_query(name: str, view: ClientView, args: QueryArgs | None = None) -> np.ndarray:
    """The answer of the client seen through ``view`` to query ``name``."""
    check_query(name)
    query: Callable[[ClientView, QueryArgs], np.ndarray] = QUERIES.get(name)
    return query(view, dict(args or {}))
