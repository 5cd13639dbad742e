"""Shared vocabulary of fedgame: types, server-update algebra, seeding, registries."""

from fedgame.core.registry import Registry
from fedgame.core.seeding import Streams
from fedgame.core.server_update import RoundContext, ServerUpdate, chain
from fedgame.core.types import ClientId, ClientResult, Params, RoundOutcome, RoundState, Selection

__all__ = [
    "ClientId",
    "ClientResult",
    "Params",
    "Registry",
    "RoundContext",
    "RoundOutcome",
    "RoundState",
    "Selection",
    "ServerUpdate",
    "Streams",
    "chain",
]
