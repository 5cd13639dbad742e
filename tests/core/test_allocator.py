"""fedgame.core.allocator: a training process keeps its large freed blocks in the heap.

Checked by what the setting is for, in fresh processes: a 40 MB tensor allocated, written and
freed again and again costs page faults every time under glibc's defaults (above its largest
dynamic mmap threshold, 32 MiB, each block is a fresh mapping), and none once the heap has
room for it after :func:`keep_freed_memory` has fixed the thresholds. And the user's own allocator settings win."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

_CHILD = """
import json, resource, sys, torch
from fedgame.core.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(10 * 2**20)  # 40 MB of float32
    t.fill_(1.0)
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


def _child(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "LD_PRELOAD")
    }
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], env={**clean, **(env or {})}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_freed_blocks_stay_in_the_heap() -> None:
    pages = 40 * 2**20 // 4096  # 10,240 pages of 4 KiB
    default = _child("default")["faults"]
    kept = _child("keep")
    assert kept["applied"] is True
    assert all(f > pages // 2 for f in default[1:]), default  # glibc's defaults: mapped afresh every time
    # kept: once the heap has room for the block (5-7 rounds here: the small allocations made
    # between two blocks split the freed space until it has coalesced), the same pages again
    assert all(f < pages // 20 for f in kept["faults"][-3:]), kept  # type: ignore[index]


def test_the_users_allocator_settings_win() -> None:
    kept = _child("keep", {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"})
    assert kept["applied"] is False
    assert _child("keep", {"MALLOC_MMAP_THRESHOLD_": "131072"})["applied"] is False
