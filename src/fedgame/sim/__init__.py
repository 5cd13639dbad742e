"""Simulation: the local-training hot loop, aggregation rules and the round engine."""

from fedgame.sim.engine import Engine, RunResult, RunSink
from fedgame.sim.local import LocalResult, LocalSpec, LocalTrainer, evaluate
from fedgame.sim.updates import AGGREGATORS, importance_weighted_mean, server_sgd, size_weighted_mean, uniform_mean

__all__ = [
    "AGGREGATORS",
    "Engine",
    "LocalResult",
    "LocalSpec",
    "LocalTrainer",
    "RunResult",
    "RunSink",
    "evaluate",
    "importance_weighted_mean",
    "server_sgd",
    "size_weighted_mean",
    "uniform_mean",
]
