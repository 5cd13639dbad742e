"""Limits before work: refuse a problem whose memory estimate exceeds what this machine has.

A game input of 10⁷ FedPCS clients grew to 15.7 GB before it was killed: the solver holds
N × (T+1) budgets and the JSON output writes each as a Python float. :func:`check_memory`
compares an estimate with the memory available now (``MemAvailable`` of ``/proc/meminfo``;
``$FEDGAME_MEMORY_BYTES`` overrides it, for a container whose limit the kernel does not report)
and refuses in one line naming the field, the estimate and what is available.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["M2_STEPS_PER_SECOND", "available_memory", "check_memory", "check_time", "recipe_estimate", "solve_estimate"]

#: JDP-FL M2's critical-bid payments cost one vectorised step per (candidate, winner) pair: 8.4e7
#: steps (n = 16,000, 5,246 winners) took 4.3 s on the 2-core AVX2 AMD EPYC host with other work
#: beside it, i.e. 2e7 steps per second; the estimate below uses that rate
M2_STEPS_PER_SECOND = 2e7

#: Bytes per unit of each game's size, measured (tracemalloc peak of the solve and its JSON
#: output: FedPCS's mean field 580 bytes per client-round at N = 8,000, T = 30; PHS Problem 1
#: 1.2 kB per client at N = 8,000) and doubled, plus a fixed 256 MB for the libraries' own use.
PER_UNIT = {"fedpcs": 1200, "phs": 2400}
BASE = 256 << 20


def available_memory() -> int:
    """Bytes this process may still allocate: ``$FEDGAME_MEMORY_BYTES`` where set, else the
    kernel's ``MemAvailable``, else physical memory."""
    env = os.environ.get("FEDGAME_MEMORY_BYTES")
    if env:
        return int(float(env))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_memory(need: int, *, field: str, what: str) -> None:
    """Refuse (:class:`ValueError`, one line) when ``need`` bytes exceed :func:`available_memory`."""
    have = available_memory()
    if need > have:
        raise ValueError(
            f"{field}: {what} needs about {_gb(need)} of memory (an estimate), more than the "
            f"{_gb(have)} available here; solve a smaller problem"
        )


def _count(raw: Mapping[str, Any], key: str) -> int:
    v = raw.get(key)
    return len(v) if isinstance(v, list) else 0


def solve_estimate(game: str, raw: Any) -> tuple[int, str, str] | None:
    """(bytes, field, what) for ``fedgame solve <game>``'s input, where the game's memory is
    measured (FedPCS: clients × rounds; PHS: clients); None otherwise."""
    if not isinstance(raw, Mapping) or game not in PER_UNIT:
        return None
    if game == "fedpcs":  # the solver's arrays are per listed client type, not per N
        t = raw.get("T")
        n = _count(raw, "clients")
        if not isinstance(t, int) or isinstance(t, bool) or t < 0 or n == 0:
            return None
        return BASE + PER_UNIT[game] * n * (t + 1), "clients", f"{n:,} clients over {t + 1} rounds"
    n = max(_count(raw, "eps"), _count(raw, "sizes"))
    return BASE + PER_UNIT[game] * n, "eps", f"{n:,} clients"


def recipe_estimate(n_clients: int | None, rounds: int, *, fedpcs_game: bool, phs: bool) -> tuple[int, str, str] | None:
    """(bytes, field, what) of what a recipe solves before training: FedPCS's game over
    ``n_clients`` × ``rounds`` (:data:`PER_UNIT`, as ``fedgame solve fedpcs`` with one type per
    client), PHS's Problem 1 over ``n_clients``; None when it solves neither or the number of
    clients is left to the data (a natural partition: checked when the data gives it)."""
    if n_clients is None:
        return None
    need = 0
    if fedpcs_game:
        need += PER_UNIT["fedpcs"] * n_clients * rounds
    if phs:
        need += PER_UNIT["phs"] * n_clients
    if not need:
        return None
    return BASE + need, "data.partition.n_clients", f"{n_clients:,} clients over {rounds} rounds"


def check_time(seconds: float, limit: float | None, *, field: str, what: str) -> None:
    """Refuse (:class:`ValueError`, one line) a computation whose estimated ``seconds`` exceed
    ``limit`` (None: no limit), naming the field and how to raise the limit."""
    if limit is not None and seconds > limit:
        raise ValueError(
            f"{field}: {what} would take about {seconds / 60:,.0f} min (an estimate), over the "
            f"--time-limit of {limit:g} s; raise --time-limit or solve a smaller instance"
        )
