"""The clients' side of JDP-FL's auctions: truthful sealed cost bids, drawn once per run.

In simulation each client's private cost c_i ~ U{low, ..., high} comes from the run's
``auction_costs`` stream (:func:`draw_costs`); the server's in-process set-up and the ``bid``
client query (:data:`fedgame.core.queries.QUERIES`, answered on the client, e.g. a Flower
SuperNode) read the same draw, so a client's bid equals the cost the in-process run gives it.
"""

from __future__ import annotations

import numpy as np

from fedgame.core.queries import QUERIES, ClientView, QueryArgs
from fedgame.core.seeding import Streams

__all__ = ["draw_costs"]


def draw_costs(streams: Streams, n_clients: int, *, low: int, high: int) -> np.ndarray:
    """Every client's truthful cost c_i ~ U{low, ..., high} (float64), from the run's
    ``auction_costs`` stream."""
    if not 0 <= low <= high:
        raise ValueError(f"bid: cost range must satisfy 0 <= low <= high, got low={low}, high={high}")
    return streams.numpy("auction_costs").integers(low, high + 1, size=int(n_clients)).astype(np.float64)


@QUERIES.register("bid")
def bid(view: ClientView, args: QueryArgs) -> np.ndarray:
    """The client's sealed cost bid (a 0-d float64 array): its truthful cost c_i of
    :func:`draw_costs` with the recipe's ``low``/``high`` (JDP-FL auctions are truthful)."""
    missing = [k for k in ("low", "high") if k not in args]
    if missing:
        raise ValueError(f"query 'bid': needs args 'low' and 'high' (the cost range), missing {missing}")
    costs = draw_costs(view.streams, view.n_clients, low=int(args["low"]), high=int(args["high"]))
    return np.asarray(costs[view.client], dtype=np.float64)
