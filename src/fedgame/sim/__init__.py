"""Simulation: the local-training hot loop, aggregation rules and the round engine."""

from fedgame.sim.client import QUERIES, ClientJob, ClientView, Executor, InProcessExecutor, answer_query, run_client_job
from fedgame.sim.engine import Engine, MissingReplies, RunResult, RunSink
from fedgame.sim.local import LocalResult, LocalSpec, LocalTrainer, evaluate
from fedgame.sim.updates import AGGREGATORS, importance_weighted_mean, server_sgd, size_weighted_mean, uniform_mean

__all__ = [
    "AGGREGATORS",
    "QUERIES",
    "ClientJob",
    "ClientView",
    "Engine",
    "Executor",
    "InProcessExecutor",
    "LocalResult",
    "LocalSpec",
    "LocalTrainer",
    "MissingReplies",
    "RunResult",
    "RunSink",
    "answer_query",
    "evaluate",
    "importance_weighted_mean",
    "run_client_job",
    "server_sgd",
    "size_weighted_mean",
    "uniform_mean",
]
