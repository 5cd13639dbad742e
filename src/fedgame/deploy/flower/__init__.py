"""Flower bridge: run a fedgame recipe on Flower's Simulation Engine or on real SuperNodes.

The server side is the fedgame engine itself (selection, privacy plans, accountant, server
update); :class:`FlowerExecutor` carries its jobs as one Flower ``Message`` per chosen node
and brings the results back. The ClientApp (:mod:`fedgame.deploy.flower.client_app`) runs the
same :func:`~fedgame.sim.client.run_client_job` as the in-process engine. For a real federation,
:mod:`~fedgame.deploy.flower.deployment` writes the app folder ``flwr run`` submits (``fedgame
flower app``) and :mod:`~fedgame.deploy.flower.server_app` is its ServerApp;
:mod:`~fedgame.deploy.flower.loopback` starts a SuperLink and SuperNodes on 127.0.0.1 (tests, bench).

Importing this package sets Flower's and Ray's environment (:data:`FLOWER_ENV`: no runtime
dependency installation, no telemetry, no update check) before ``flwr`` is imported.
Needs the ``flower`` extra: ``pip install -e ".[flower]"``.
"""

from fedgame.deploy.flower._env import FLOWER_ENV, configure

configure()

from fedgame.deploy.flower.executor import FlowerExecutor, NodesNotReady  # noqa: E402
from fedgame.deploy.flower.simulation import FlowerSimulation, run_flower_simulation  # noqa: E402

__all__ = ["FLOWER_ENV", "FlowerExecutor", "FlowerSimulation", "NodesNotReady", "configure", "run_flower_simulation"]
