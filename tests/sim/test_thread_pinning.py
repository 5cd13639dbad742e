"""A run computes the same bits whichever thread drives it.

``torch.set_num_threads`` sets OpenMP's and MKL's thread counts for the calling thread only, so
a thread started otherwise (Flower's ServerApp thread in a simulation) ran MKL's float32 GEMMs
on every core while ATen reported one thread: a Flower simulation's round-0 test loss differed
in the last bit from the in-process run's, now and then, on Intel AVX-512 hosts.
:func:`fedgame.core.processes.pin_threads_here` applies the process's count in the calling
thread; the engine calls it where its rounds start (and Flower's strategy where it connects).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import fedgame.sim.engine as engine_module
from fedgame.core.processes import pin_threads_here
from fedgame.pipeline.build import build_engine
from tests.sim.test_pool import _cfg, needs_fmnist


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _in_a_fresh_thread(fn: Callable[[], Any]) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_pinned_thread_computes_a_float32_gemm_as_the_main_thread_does() -> None:
    """A linear layer on 300 × 784 inputs (the logistic regression's evaluation), ten times with
    other weights: a fresh thread that pins gives the main thread's bits every time."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(300, 784, generator=gen)
    weights = [(torch.randn(10, 784, generator=gen) * 0.05, torch.randn(10, generator=gen)) for _ in range(10)]

    def outputs() -> list[torch.Tensor]:
        with torch.inference_mode():
            return [torch.nn.functional.linear(x, w, b) for w, b in weights]

    def pinned() -> list[torch.Tensor]:
        pin_threads_here()
        return outputs()

    here = outputs()
    there = _in_a_fresh_thread(pinned)
    assert torch.get_num_threads() == 1
    assert all(torch.equal(a, b) for a, b in zip(here, there, strict=True))


@needs_fmnist
def test_the_engine_pins_the_thread_that_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds of the FedAvg recipe (logistic regression, one thread, sequential), both
    engines built here: one run from the main thread, the other from a fresh thread (as
    Flower's ServerApp thread runs the engine ``fedgame run --backend flower-sim`` built). The
    fresh thread is pinned before its first round, and every record is the same. (Whether MKL
    would have split this small GEMM unpinned is its own choice, so the pin is checked where
    the engine calls it, and what the pin does by the test above.)"""
    calls: list[tuple[int, int]] = []

    def spy() -> None:
        calls.append((threading.get_ident(), len(second.records)))
        pin_threads_here()

    monkeypatch.setattr(engine_module, "pin_threads_here", spy)
    extra = ["data.partition.n_clients=8", "train.clients_per_round=3", "train.workers=1", "train.threads=1", "model.name=logreg"]
    first, second = (build_engine(_cfg("main/fedavg.yaml", extra), parallel=False).engine for _ in range(2))
    main = first.run(2).records
    other = _in_a_fresh_thread(lambda: (threading.get_ident(), second.run(2).records))
    assert calls[-1] == (other[0], 0)
    assert len(main) == len(other[1]) == 2
    for a, b in zip(main, other[1], strict=True):
        for key in ("selected", "train_loss", "test_acc", "test_loss"):
            va, vb = a[key], b[key]
            assert va == vb or (isinstance(va, float) and np.isnan(va) and np.isnan(vb)), (key, va, vb)
