"""Suite-wide set-up: under pytest-xdist (``scripts/test.sh`` runs ``-n <cores>``) each test process
computes on one thread.

Two test processes on two cores, each with torch's default of one thread per core, would put four
busy threads on two cores, and oversubscribed OpenMP threads spin rather than yield: a training
test runs several times slower than alone. With one thread per process the cores are shared
cleanly. A test that needs a thread count sets it itself (``tests/sim/test_pool.py``,
``tests/sim/test_jdp_pin.py``), and results do not depend on it where the library promises they do
not (the pool's bit-identity tests run the sequential side with ``threads: 1``).
"""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
