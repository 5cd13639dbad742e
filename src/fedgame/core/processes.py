"""Which start method a pool of worker processes can use safely in this process.

``fork`` is the cheap one on Linux: a worker inherits the dataset, the model and the solver's
state without pickling anything. But ``fork`` copies only the calling thread, and a process
that has *run* Ray or gRPC (Flower's simulation backend and transport) keeps their background
threads, locks and sockets, which a forked child then finds half-held: a pool forked after a
Flower simulation in the same process (a notebook, a test process) had a worker die in its
first training. Importing those libraries starts nothing, so it does not count; running them
does:

* fedgame's own Flower simulation calls :func:`mark_fork_unsafe` before it starts Ray,
* a Ray driver that is up (``ray.is_initialized()``) counts too, and
* so does a visible CUDA GPU: PyTorch's autograd engine starts a thread per GPU at the first
  backward pass in the process (even one computed on the CPU), and a child forked after that
  refuses every backward ("Unable to handle autograd's threading in combination with fork-based
  multiprocessing"). Seen on a lent H200 machine: a CPU pool forked after the parent had
  measured a model's FLOPs with one backward failed in its first training. Whether a backward
  has run cannot be asked, so a process that sees a GPU never forks its pools.

There the pools use ``forkserver`` instead (``spawn`` where there is none): a clean server
process, started once with the library imported, forks the workers; the data reaches them once
through shared memory. The answer is the same either way; only the start-up cost differs. gRPC
used directly by other code cannot be seen from here: call :func:`mark_fork_unsafe` after it.
"""

from __future__ import annotations

import multiprocessing as mp
import sys

__all__ = ["fork_is_safe", "fork_unsafe_reason", "mark_fork_unsafe", "pin_threads_here", "safe_start_method"]

_reasons: list[str] = []


def mark_fork_unsafe(reason: str) -> None:
    """Record that this process has started threads that ``fork`` cannot copy (``reason``
    says which, for :func:`fork_unsafe_reason`); from now on pools start their workers
    without forking this process (:func:`safe_start_method`)."""
    if reason not in _reasons:
        _reasons.append(reason)


def fork_unsafe_reason() -> str | None:
    """Why ``fork`` is not safe here (None where it is)."""
    if "fork" not in mp.get_all_start_methods():
        return "this platform has no fork"
    if _reasons:
        return ", ".join(_reasons)
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return "a Ray driver is running in this process"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return "a CUDA GPU is visible (autograd's per-GPU threads, started at the first backward, do not survive a fork)"
    return None


def fork_is_safe() -> bool:
    """True where ``fork`` exists, this process has not run Ray or gRPC and sees no CUDA GPU (above)."""
    return fork_unsafe_reason() is None


def safe_start_method() -> str:
    """``"fork"`` where :func:`fork_is_safe`, else ``"forkserver"`` (``"spawn"`` where the
    platform has no fork server)."""
    if fork_is_safe():
        return "fork"
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def pin_threads_here() -> None:
    """Make the calling thread compute with this process's torch thread count
    (``torch.get_num_threads()``), as the thread that set it does.

    Why: ``torch.set_num_threads`` stores the count process-wide for ATen's own loops, but sets
    OpenMP's and MKL's counts for the *calling thread only*. A thread started otherwise (Flower's
    ServerApp thread in a simulation, a user's own) still runs MKL's float32 GEMMs on every core,
    with MKL free to choose how many: a linear layer's output there differed in the last bit
    from the same call on the main thread, now and then (a Flower simulation's round-0 test loss
    1.622535196940104 against the in-process 1.6225350952148438, on Intel AVX-512 hosts; ATen
    still reported one thread). The engine calls this where its rounds start, so a run computes
    the same bits whichever thread drives it."""
    import torch

    torch.set_num_threads(torch.get_num_threads())
