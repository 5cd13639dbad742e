"""Environment Flower and Ray must see before they are imported.

Flower would otherwise install an app's dependencies at run time, send telemetry and check for
updates over the network; Ray would report usage statistics. A fedgame run does none of these:
the packages are pinned by fedgame's ``flower`` extra, and a run must not depend on the network
beyond its own SuperLink. :func:`configure` is called by :mod:`fedgame.deploy.flower` before any
``flwr`` import, and the scripts export the same variables.
"""

from __future__ import annotations

import os

__all__ = ["FLOWER_ENV", "configure"]

FLOWER_ENV: dict[str, str] = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def configure() -> dict[str, str]:
    """Set the variables of :data:`FLOWER_ENV` in this process (and so in every process it
    starts, Ray actors included); return them."""
    os.environ.update(FLOWER_ENV)
    return dict(FLOWER_ENV)
