"""Keep a training step's large blocks in the C library's heap between steps.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a request above its
*mmap threshold* with a fresh ``mmap`` and unmaps it on ``free``; the threshold starts at
128 KiB and rises (to at most 32 MiB) only as mapped blocks are freed, and free memory at the
top of the heap above the *trim threshold* is handed back to the kernel. A training step
allocates and frees the same megabyte-sized activations, gradients and casts every step, so
whenever a block lands outside the reused heap the next step touches pages the kernel must map
and zero again: measured on a one-thread McMahan CNN step (batch 32), the ReLU backward over
conv1's 3.2 MB output took 1.4 ms instead of 0.8 and ``fill_`` 0.8 ms instead of 0.3, and in
fresh processes bf16 local training's median pass ran at 1,282-1,423 samples/s instead of
1,922-2,006 (fp32: up to 1.1× slower), depending on the order in which earlier allocations had
moved the thresholds (``docs/speed.md``, "The allocator"; pool workers forked from a settled
process were not affected).

:func:`keep_freed_memory` fixes both thresholds (``mallopt``; fixing the mmap threshold also
turns its dynamic adjustment off): blocks up to 64 MiB come from the heap and stay there when
freed, up to 256 MiB of free memory at its top. A process's resident memory then stays near
its peak use instead of shrinking between steps; nothing computed changes. PyTorch has no CPU
caching allocator to ask for this, and jemalloc or tcmalloc (Intel's PyTorch tuning guides
preload one) are system libraries a pip install cannot bring, so this calls glibc's own knob,
through ``ctypes``. It does nothing off glibc, and nothing where the user has chosen the
allocator's settings already (``GLIBC_TUNABLES`` with a malloc tunable, ``MALLOC_MMAP_THRESHOLD_``
or ``MALLOC_TRIM_THRESHOLD_``, or a preloaded allocator in ``LD_PRELOAD``).
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

#: Blocks up to this size come from the heap (glibc's ``M_MMAP_THRESHOLD``).
MMAP_THRESHOLD = 64 << 20
#: Free memory at the top of the heap up to this size stays there (``M_TRIM_THRESHOLD``).
TRIM_THRESHOLD = 256 << 20

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_applied: bool | None = None


def _user_chose() -> str | None:
    """Why the allocator's settings are the user's (None where they are not)."""
    if "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets malloc tunables"
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        if name in os.environ:
            return f"{name} is set"
    preload = os.environ.get("LD_PRELOAD", "")
    if any(lib in preload for lib in ("jemalloc", "tcmalloc", "mimalloc")):
        return "another allocator is preloaded"
    return None


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once; forked children inherit
    them). True where they are set, False off glibc or where the user chose the allocator's
    settings (module docstring)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or _user_chose() is not None:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied
