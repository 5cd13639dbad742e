"""Flower bridge: run a fedgame recipe on Flower's Simulation Engine or on real SuperNodes.

The server side is the fedgame engine itself (selection, privacy plans, accountant, server
update); :class:`FlowerExecutor` carries its jobs as one Flower ``Message`` per chosen node
and brings the results back. The ClientApp (:mod:`fedgame.deploy.flower.client_app`) runs the
same :func:`~fedgame.sim.client.run_client_job` as the in-process engine. For a real federation,
:mod:`~fedgame.deploy.flower.deployment` writes the app folder ``flwr run`` submits (``fedgame
flower app``) and :mod:`~fedgame.deploy.flower.server_app` is its ServerApp;
:mod:`~fedgame.deploy.flower.loopback` starts a SuperLink and SuperNodes on 127.0.0.1 (tests, bench).
For a user's own Flower app, :mod:`~fedgame.deploy.flower.wrap` adds fedgame's selection, weights,
payments and per-client privacy by wrapping its strategy and its ClientApp (docs/flower.md).

Importing this package sets Flower's and Ray's environment (:data:`FLOWER_ENV`: no runtime
dependency installation, no telemetry, no update check) before ``flwr`` is imported.
Needs the ``flower`` extra: ``pip install -e ".[flower]"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedgame._lazy import lazy_attributes
from fedgame.deploy.flower._env import FLOWER_ENV, configure

configure()

if TYPE_CHECKING:
    from fedgame.deploy.flower.executor import FlowerExecutor, NodesNotReady
    from fedgame.deploy.flower.simulation import FlowerSimulation, run_flower_simulation
    from fedgame.deploy.flower.wrap import FedgameSampling, privacy_mod

# Attributes are imported on first use (PEP 562): a Flower ClientApp process (Flower 1.42 starts
# one per message) imports ``fedgame.deploy.flower.client_app`` and so this package, and must
# not pay for the server side (the executor, the engine, the simulation) on every message.
_WHERE = {
    "FlowerExecutor": "executor",
    "NodesNotReady": "executor",
    "FlowerSimulation": "simulation",
    "run_flower_simulation": "simulation",
    "FedgameSampling": "wrap",
    "privacy_mod": "wrap",
}

__all__ = [
    "FLOWER_ENV",
    "FedgameSampling",
    "FlowerExecutor",
    "FlowerSimulation",
    "NodesNotReady",
    "configure",
    "privacy_mod",
    "run_flower_simulation",
]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, __all__)
