"""A recipe through Flower's Simulation Engine (Ray backend), with the results of an in-process run.

:class:`FlowerSimulation` is a :class:`~fedgame.pipeline.runner.Execute`: ``run_one``
builds the engine as for an in-process run (data, game, selection, privacy plan, accountant,
server update — all server side) and hands it here. A ServerApp, running in a thread of this
process, runs it as a Flower strategy (:class:`~fedgame.deploy.flower.strategy.FedgameStrategy`:
node discovery first, a plan that needs the clients' answers rebuilt from their query replies,
then Flower's round loop calling the engine's selection and aggregation); the ClientApp of :mod:`fedgame.deploy.flower.client_app` runs on
``n_clients`` simulated SuperNodes, each holding the partition its node config names. So the
same seed gives the same selections, noise scales and ledgers as in process, and
``run_one`` writes the same results files.

``backend_config`` is Flower's: ``client_resources`` (CPUs per ClientApp actor; default one),
``init_args`` (passed to ``ray.init``: ``{"address": "auto"}`` joins a running Ray cluster
started with ``ray start --head``; ``num_cpus`` caps the local one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedgame.core.processes import mark_fork_unsafe
from fedgame.deploy.flower._env import configure

configure()

from flwr.app import Context  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedgame.deploy.flower.client_app import make_client_app  # noqa: E402
from fedgame.deploy.flower.executor import FlowerExecutor  # noqa: E402
from fedgame.deploy.flower.strategy import attach_flower  # noqa: E402
from fedgame.pipeline.build import Built, BuiltJDP  # noqa: E402
from fedgame.pipeline.config import RunConfig  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from fedgame.sim import RunResult  # noqa: E402

__all__ = ["FlowerSimulation", "run_flower_simulation"]

log = logging.getLogger(__name__)


def default_backend_config() -> dict[str, Any]:
    """One single-CPU ClientApp actor per core, no GPU."""
    return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


class FlowerSimulation:
    """Run a built engine on Flower's Simulation Engine (see module docstring)."""

    name = "flower-sim"

    def __init__(
        self,
        *,
        backend_config: dict[str, Any] | None = None,
        round_timeout: float | None = None,
        register_timeout: float = 300.0,
        verbose: bool = False,
    ) -> None:
        self.backend_config = backend_config if backend_config is not None else default_backend_config()
        self.round_timeout = round_timeout
        self.register_timeout = register_timeout
        self.verbose = verbose
        self.executor: FlowerExecutor | None = None
        self.startup_seconds: float | None = None

    def server_app(self, built: Built | BuiltJDP, cfg: RunConfig, run: Callable[[], RunResult], box: dict[str, Any]) -> ServerApp:
        """The ServerApp: a :class:`FedgameStrategy` on the grid (node discovery first) drives
        the engine's rounds."""
        app = ServerApp()
        tic = time.perf_counter()

        @app.main()
        def main(grid: Grid, context: Context) -> None:
            self.executor = attach_flower(grid, built, cfg, round_timeout=self.round_timeout, register_timeout=self.register_timeout)
            self.startup_seconds = time.perf_counter() - tic
            box["result"] = run()

        return app

    def __call__(self, built: Built | BuiltJDP, cfg: RunConfig, run: Callable[[], RunResult]) -> RunResult:
        from flwr.simulation import run_simulation

        mark_fork_unsafe("a Flower simulation (Ray, gRPC) ran in this process")
        box: dict[str, Any] = {}
        run_simulation(
            server_app=self.server_app(built, cfg, run, box),
            client_app=make_client_app(cfg),
            num_supernodes=cfg.data.n_clients,
            backend_config=dict(self.backend_config),
            verbose_logging=self.verbose,
        )
        if "result" not in box:
            raise RuntimeError("backend flower-sim: the simulation ended without finishing the run (see Flower's log above)")
        result: RunResult = box["result"]
        return result

    def describe(self) -> dict[str, Any]:
        ex = self.executor
        return {
            "startup_seconds": self.startup_seconds,
            "backend_config": self.backend_config,
            "round_timeout": self.round_timeout,
            **({} if ex is None else ex.describe()),
        }


def run_flower_simulation(
    cfg: RunConfig,
    out: str | Path,
    *,
    resume: bool = True,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """:func:`~fedgame.pipeline.runner.run_one` on Flower's Simulation Engine;
    ``options`` go to :class:`FlowerSimulation` (``backend_config``, ``round_timeout``...)."""
    return run_one(cfg, out, resume=resume, on_round=on_round, on_start=on_start, execute=FlowerSimulation(**options))
