"""Parallel clients in one run: a pool of single-threaded worker processes.

On a CPU, several single-threaded processes train more samples per second than one process
with as many threads (2 × 1,550 vs 2,560 samples/s for the McMahan CNN on this 2-core machine),
and vectorising clients with ``torch.func.vmap`` is slower for conv nets (stacked conv weights
become grouped convolutions). So a round's independent work is spread over processes:

* :class:`WorkerPool` starts ``workers`` processes **once per run**, after the dataset and the
  trainer exist. With the ``fork`` start method (Linux, the default here, unless the process
  has run Ray or gRPC: :func:`fedgame.core.processes.safe_start_method`) each worker inherits
  the training data, the partition and its own copy of the model and trainer: nothing large is
  pickled per job, only a job's flat parameters (one vector) and its reply. With ``forkserver``
  or ``spawn`` the data tensors travel once, through shared memory (``torch.multiprocessing``),
  and each worker first copies the model's parameters into memory of its own.
* Every worker runs on one thread (``torch.set_num_threads(1)``), and so does the server side of
  a pooled run, so every floating-point operation is the same as on the sequential path with
  ``threads: 1``: a run with ``workers: N`` is **bit-identical** to ``workers: 1, threads: 1``.
* Jobs go to whichever worker is free (clients' data sizes differ); replies are put back **in
  job order**, so aggregation sees exactly what the sequential executor would give it.

What runs here: local trainings (:func:`~fedgame.sim.client.run_client_job`, including the
extra trainings of probes such as exact AOCS), the loss probes (power-of-choice), evaluation on
the test set (its batches shared out, summed back in batch order), and any protocol's own task
handed to :meth:`WorkerPool.map` as a module-level function (JDP-FL's per-winner trainings,
:func:`fedgame.sim.jdp.pool_train`): the pool knows no protocol, the task's module is imported
in the worker when the function arrives.

:class:`PoolExecutor` is the :class:`~fedgame.sim.client.Executor` over a pool; the engine cannot
tell it from :class:`~fedgame.sim.client.InProcessExecutor` except by the wall clock.
"""

from __future__ import annotations

import atexit
import os
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import numpy as np
import torch

from fedgame.core.allocator import keep_freed_memory
from fedgame.core.processes import safe_start_method
from fedgame.core.seeding import Streams
from fedgame.core.types import ClientResult
from fedgame.sim.client import ClientJob, ClientView, QueryArgs, answer_query, check_query, run_client_job
from fedgame.sim.local import (
    LocalTrainer,
    batch_starts,
    combine_evaluation,
    combine_losses,
    evaluate_batches,
    example_losses,
    loss_batches,
)

__all__ = ["MAX_WORKERS", "PoolExecutor", "WorkerContext", "WorkerPool", "available_cores", "check_workers"]

MAX_WORKERS = 256


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: int) -> int:
    """``workers`` as an int in 1..256, or a ValueError naming the field and the range."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or not 1 <= int(workers) <= MAX_WORKERS:
        raise ValueError(f"train.workers: must be an integer in 1..{MAX_WORKERS}, got {workers!r}")
    return int(workers)


@dataclass
class WorkerContext:
    """What every worker holds for the whole run: the trainer (its model, the training data),
    every client's example indices, the run's streams and named evaluation sets."""

    trainer: LocalTrainer
    parts: list[torch.Tensor]
    streams: Streams
    classes: int
    eval_sets: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


# -- the tasks a worker runs (module-level, so a spawned worker finds them by name) -----------
def _train(ctx: WorkerContext, job: ClientJob) -> ClientResult:
    return run_client_job(job, trainer=ctx.trainer, indices=ctx.parts[job.client], streams=ctx.streams)


def _evaluate(ctx: WorkerContext, payload: tuple[str, torch.Tensor, list[int], int]) -> list[tuple[float, float]]:
    name, params, starts, batch_size = payload
    x, y = ctx.eval_sets[name]
    return evaluate_batches(ctx.trainer.model, params, x, y, starts, batch_size=batch_size, loss=ctx.trainer.loss)


def _losses(ctx: WorkerContext, payload: tuple[torch.Tensor, list[torch.Tensor]]) -> list[torch.Tensor]:
    params, batches = payload
    return example_losses(ctx.trainer.model, params, ctx.trainer.x, ctx.trainer.y, batches, loss=ctx.trainer.loss)


def _query(ctx: WorkerContext, payload: tuple[str, int, QueryArgs | None]) -> np.ndarray:
    name, client, args = payload
    view = ClientView.of(
        client, y=ctx.trainer.y, indices=ctx.parts[client], classes=ctx.classes, n_clients=len(ctx.parts), streams=ctx.streams
    )
    return answer_query(name, view, args)


TASKS: dict[str, Callable[[WorkerContext, Any], Any]] = {
    "train": _train,
    "evaluate": _evaluate,
    "losses": _losses,
    "query": _query,
}

#: a task: a name of :data:`TASKS`, or a module-level function ``(ctx, payload) -> reply``
#: (sent to the worker by reference, so it must be importable there)
Task = str | Callable[[WorkerContext, Any], Any]


def _own_model(ctx: WorkerContext) -> None:
    """Give this worker a private copy of the model's parameters and buffers. A spawned (or
    fork-server) worker receives the context through shared memory, so every worker would
    otherwise train the *same* parameter storage at once (a forked worker has its own
    copy-on-write pages); the read-only data stays shared."""
    with torch.no_grad():
        for t in [*ctx.trainer.model.parameters(), *ctx.trainer.model.buffers()]:
            t.data = t.data.clone(memory_format=torch.preserve_format)


def _worker_main(conn: Connection, ctx: WorkerContext, inherited: Sequence[Connection] = (), shared: bool = False) -> None:
    """A worker's life: one thread, then answer ``(task, payload)`` messages until None, or
    until the server's end of the pipe closes. ``inherited`` are the server's pipe ends a forked
    worker holds copies of (its own and earlier workers'): closed first, so that when the server
    dies, even by SIGKILL, every worker reads end-of-file and exits instead of waiting forever.
    ``shared``: ``ctx`` came through shared memory (spawn, forkserver), so the model is copied
    first."""
    for end in inherited:
        end.close()
    keep_freed_memory()  # inherited from a forked parent; a spawned worker sets its own
    if shared and ctx.trainer is not None:
        _own_model(ctx)
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process (fork of a parent that used it)
        pass
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        task, payload = msg
        try:
            fn = TASKS[task] if isinstance(task, str) else task
            conn.send(("ok", fn(ctx, payload)))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the server
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class WorkerPool:
    """``workers`` single-threaded processes holding ``ctx``; :meth:`map` runs a task on each
    payload and returns the replies in payload order. Close it (or use it as a context
    manager); the processes are daemons, so they also end with this process."""

    def __init__(self, ctx: WorkerContext, workers: int, *, start_method: str | None = None) -> None:
        self.workers = check_workers(workers)
        method = start_method or safe_start_method()
        mpctx = torch.multiprocessing.get_context(method)
        if method == "forkserver":  # the server imports the library once; each worker is a fork of it
            mpctx.set_forkserver_preload(["fedgame.sim.pool"])
        self.start_method = method
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for _ in range(self.workers):
            parent, child = mpctx.Pipe(duplex=True)
            inherited = [*self._conns, parent] if method == "fork" else []
            proc = mpctx.Process(target=_worker_main, args=(child, ctx, inherited, method != "fork"), daemon=True)  # type: ignore[attr-defined]  # typeshed: get_context(str) -> BaseContext, whose concrete subclasses all have Process
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._closed = False
        self._finalizer = weakref.finalize(self, WorkerPool._shutdown, list(self._conns), list(self._procs))
        atexit.register(self._finalizer)

    @staticmethod
    def _shutdown(conns: list[Connection], procs: list[Any]) -> None:
        for conn in conns:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in conns:
            conn.close()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def map(self, task: Task, payloads: Sequence[Any], *, costs: Sequence[float] | None = None) -> list[Any]:
        """``task(ctx, p)`` (a :data:`TASKS` name or a module-level function) for every ``p``, on whichever worker is free; the replies in
        payload order. With ``costs`` (e.g. each client's examples) the payloads are handed out
        longest first (LPT scheduling: a large client last would leave the other workers idle);
        the order of the replies does not change. A task that failed in a worker is raised here
        (after the others have replied, so the pool stays usable) with the worker's traceback."""
        if self._closed:
            raise RuntimeError("worker pool: closed")
        out: list[Any] = [None] * len(payloads)
        order = range(len(payloads)) if costs is None else sorted(range(len(payloads)), key=lambda i: -float(costs[i]))
        todo = deque((i, payloads[i]) for i in order)
        idle = list(range(self.workers))
        busy: dict[Connection, tuple[int, int]] = {}
        errors: list[str] = []
        while todo or busy:
            while idle and todo:
                w = idle.pop()
                i, payload = todo.popleft()
                self._conns[w].send((task, payload))
                busy[self._conns[w]] = (w, i)
            for conn in cast(list[Connection], wait(list(busy))):  # wait returns a subset of busy's connections
                w, i = busy.pop(conn)
                try:
                    status, value = conn.recv()
                except EOFError:
                    self.close()
                    raise RuntimeError(
                        f"worker pool: worker {w} died during task {task!r} (killed, or out of memory?); "
                        "the run's checkpoint is intact: rerun with --resume"
                    ) from None
                if status == "error":
                    errors.append(value)
                    todo.clear()
                else:
                    out[i] = value
                idle.append(w)
        if errors:
            raise RuntimeError(f"worker pool: task {task!r} failed in a worker:\n{errors[0]}")
        return out

    def evaluate(self, name: str, params: torch.Tensor, n: int, *, batch_size: int = 500) -> tuple[float, float]:
        """Accuracy and mean loss of ``params`` on evaluation set ``name`` (``n`` examples):
        its batches shared out in contiguous chunks, summed back in batch order (the same bits
        as :func:`~fedgame.sim.local.evaluate` on one thread)."""
        starts = batch_starts(n, batch_size)
        chunks = _chunks(starts, self.workers)
        replies = self.map("evaluate", [(name, params, c, batch_size) for c in chunks])
        return combine_evaluation([pair for r in replies for pair in r], n)


def _chunks(items: Sequence[Any], workers: int) -> list[list[Any]]:
    """``items`` cut into contiguous chunks, about two per worker (so a slow one is caught up)."""
    if not items:
        return []
    k = min(len(items), 2 * workers)
    bounds = np.linspace(0, len(items), k + 1).round().astype(int)
    return [list(items[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


class PoolExecutor:
    """The :class:`~fedgame.sim.client.Executor` over a :class:`WorkerPool`: a round's jobs,
    loss probes and queries run in the workers, replies in job order."""

    def __init__(self, pool: WorkerPool, *, parts: Sequence[torch.Tensor]) -> None:
        self.pool = pool
        self.parts = list(parts)

    def train(self, jobs: Sequence[ClientJob]) -> list[ClientResult | None]:
        """The jobs in the workers, the largest clients first; results in job order."""
        return list(self.pool.map("train", list(jobs), costs=[int(self.parts[j.client].numel()) for j in jobs]))

    def losses(self, params: torch.Tensor, clients: np.ndarray) -> np.ndarray:
        parts = [self.parts[int(c)] for c in clients]
        batches, owner = loss_batches(parts)
        chunks = _chunks(batches, self.pool.workers)
        replies = self.pool.map("losses", [(params, c) for c in chunks])
        return combine_losses([per for r in replies for per in r], owner, parts)

    def query(self, name: str, clients: Sequence[int] | np.ndarray, args: QueryArgs | None = None) -> list[np.ndarray | None]:
        check_query(name)
        return list(self.pool.map("query", [(name, int(c), args) for c in clients]))

    def close(self) -> None:
        self.pool.close()
