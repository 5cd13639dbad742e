"""Suite-wide set-up: under pytest-xdist (``scripts/test.sh`` runs ``-n <cores>``) each test process
computes on one thread.

Two test processes on two cores, each with torch's default of one thread per core, would put four
busy threads on two cores, and oversubscribed OpenMP threads spin rather than yield: a training
test runs several times slower than alone. With one thread per process the cores are shared
cleanly. A test that needs a thread count sets it itself (``tests/sim/test_pool.py``,
``tests/sim/test_jdp_pin.py``), and results do not depend on it where the library promises they do
not (the pool's bit-identity tests run the sequential side with ``threads: 1``).

The slowest modules are collected first (:data:`SLOWEST_FIRST`), so that with
``--dist loadscope --no-loadscope-reorder`` (``scripts/test.sh``) the Flower deployment module,
eleven minutes in one process, starts at once and overlaps the rest, rather than running alone at
the end (xdist's default order puts modules with many tests first: it ran last, and the suite took
20 min 49 s on two cores where its work is about 13 min per core). Longest job first: the classic
rule for handing jobs to identical machines.
"""

from __future__ import annotations

import os

import pytest
import torch

#: Modules that take a minute or more, slowest first, with their time in one test process on the
#: 2-core AVX2 host (``pytest --durations``): Flower deployment 670 s, the selection contract
#: about 300 s, the update rules' unbiasedness about 190 s, Flower simulation about 80 s, the
#: engine about 70 s, the baselines about 60 s.
SLOWEST_FIRST: tuple[str, ...] = (
    "tests/deploy/test_flower_deployment.py",
    "tests/contracts/test_selection_contract.py",
    "tests/sim/test_updates.py",
    "tests/deploy/test_flower_sim.py",
    "tests/sim/test_engine.py",
    "tests/selection/test_baselines.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the modules of :data:`SLOWEST_FIRST` first, in its order; the rest keep theirs (a
    stable sort, the same in every xdist process, as xdist requires)."""
    rank = {m: i for i, m in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
