"""Suite-wide set-up: under pytest-xdist (``scripts/test.sh`` runs ``-n <cores + 2>``) each test
process computes on one thread.

Two test processes on two cores, each with torch's default of one thread per core, would put four
busy threads on two cores, and oversubscribed OpenMP threads spin rather than yield: a training
test runs several times slower than alone. With one thread per process the cores are shared
cleanly. A test that needs a thread count sets it itself (``tests/sim/test_pool.py``,
``tests/sim/test_jdp_pin.py``), and results do not depend on it where the library promises they do
not (the pool's bit-identity tests run the sequential side with ``threads: 1``).

``scripts/test.sh`` runs two test processes more than the machine has cores, and hands out the
slowest modules first (:data:`SLOWEST_FIRST`, kept in that order by ``--no-loadscope-reorder``):
the Flower deployment module (about eleven minutes in one process, much of it waiting for
SuperNodes, ClientApp processes and the timeouts it tests) starts at once in its own process and
the other processes keep both cores busy meanwhile. Measured on the 2-core AVX2 host on
2026-11-27 (docs/speed.md): pytest 19 min 52 s with two processes in xdist's default order,
20 min 05 s with three in that order, 18 min 33 s with three and this order. On 2026-11-29, the
same host: 997 s with three processes in this order, 960 s with four. A process here may
run Flower simulations before other modules' pooled runs: the library then starts those pools from
a fork server instead of forking (``fedgame.core.processes``), which is what made this set-up pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

# The suite compares runs with each other and with figures computed on the CPU (``train.device:
# auto`` would put them on a GPU, whose random streams differ, and refuse ``workers: 2`` there),
# so on a machine with a GPU it runs on the CPU too, in this process and in every process it
# starts: CUDA is hidden before anything initialises it. ``FEDGAME_TEST_CUDA=1`` leaves it
# visible, for the GPU's own tests (tests/sim/test_cuda.py, tests/sim/test_precision.py; what
# bench/gpu.sh runs), which skip without CUDA.
if not os.environ.get("FEDGAME_TEST_CUDA"):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest  # noqa: E402
import torch  # noqa: E402

#: Modules that take a minute or more, slowest first, with their time in one test process on the
#: 2-core AVX2 host (``pytest --durations``, 2026-11-27): Flower deployment about 670 s, the
#: selection contract about 350 s, the update rules' unbiasedness about 230 s, Flower simulation
#: about 125 s, the engine about 110 s.
SLOWEST_FIRST: tuple[str, ...] = (
    "tests/deploy/test_flower_deployment.py",
    "tests/deploy/test_flower_silo.py",  # loopback SuperNodes (a kill, a resume, PHS): mostly waiting, about 3-4 min
    "tests/contracts/test_selection_contract.py",
    "tests/docs/test_your_data.py",  # three worked examples trained, seven validate processes
    "tests/sim/test_updates.py",
    "tests/deploy/test_flower_queries.py",
    "tests/sim/test_engine.py",
    "tests/deploy/test_flower_sim.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the modules of :data:`SLOWEST_FIRST` first, in its order; the rest keep theirs (a
    stable sort, the same in every xdist process, as xdist requires)."""
    rank = {m: i for i, m in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _plugin_env_restored() -> Iterator[None]:
    """``load_plugins`` exports the plug-ins it loaded in ``FEDGAME_PLUGINS`` so the processes a
    run starts load them too; a test that loads one in this process must not hand it to the
    ``fedgame`` subprocesses of the tests after it (a later test's own copy of the same plug-in
    would then be "registered twice")."""
    saved = os.environ.get("FEDGAME_PLUGINS")
    yield
    if saved is None:
        os.environ.pop("FEDGAME_PLUGINS", None)
    else:
        os.environ["FEDGAME_PLUGINS"] = saved
