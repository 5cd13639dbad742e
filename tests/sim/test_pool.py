"""Parallel clients (``train.workers``): a run with a worker pool gives exactly, bit for bit,
the numbers of the sequential path on one thread, for every paper's recipe; bad settings are
refused before any work; a worker's failure reaches the server with its traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from fedgame.pipeline.build import build_engine, build_jdp
from fedgame.pipeline.config import RecipeError, apply_overrides, parse_recipe
from fedgame.pipeline.runner import run_one
from fedgame.sim.pool import WorkerContext, WorkerPool, check_workers

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")

SMOKE = ["data.max_train=1200", "data.max_test=400", "train.rounds=2", "train.eval_every=1"]
RECIPES: dict[str, list[str]] = {
    "main/fedavg.yaml": ["data.partition.n_clients=12", "train.clients_per_round=4"],
    "main/dp_fedavg.yaml": ["data.partition.n_clients=12", "train.clients_per_round=4"],
    "main/fedpcs.yaml": ["data.partition.n_clients=12", "train.clients_per_round=4"],
    "phs/fmnist.yaml": ["data.partition.n_clients=12", "train.clients_per_round=4"],
    "fedpcs/aocs.yaml": ["data.partition.n_clients=12", "train.clients_per_round=3"],
}


@pytest.fixture(autouse=True)
def _keep_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _cfg(recipe: str, extra: list[str]) -> Any:
    raw = yaml.safe_load((ROOT / "recipes" / recipe).read_text())
    return parse_recipe(apply_overrides(raw, SMOKE + extra))


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    for ra, rb in zip(a, b, strict=True):
        for key in ("selected", "train_loss", "test_acc", "test_loss", "eps_max", "payments", "clipped_fraction"):
            if key in ra:
                va, vb = ra[key], rb[key]
                assert va == vb or (isinstance(va, float) and np.isnan(va) and np.isnan(vb)), (key, va, vb)


@needs_fmnist
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_workers_are_bit_identical_to_one_thread(recipe: str) -> None:
    seq = build_engine(_cfg(recipe, RECIPES[recipe] + ["train.workers=1", "train.threads=1"]))
    a = seq.engine.run(2)
    par = build_engine(_cfg(recipe, RECIPES[recipe] + ["train.workers=2"]), parallel=True)
    try:
        assert par.pool is not None and par.pool.workers == 2
        b = par.engine.run(2)
    finally:
        par.close()
    assert torch.equal(a.params, b.params)
    np.testing.assert_array_equal(a.epsilons, b.epsilons)
    _same(a.records, b.records)


def test_pools_do_not_fork_a_process_that_has_run_a_flower_simulation() -> None:
    """Forking copies one thread of a process whose gRPC/Ray threads hold locks and sockets; a
    pool started after them starts its workers from a fork server instead. Importing them starts nothing and
    keeps fork (checked in fresh interpreters)."""
    import subprocess
    import sys

    def method(prelude: str) -> str:
        script = f"{prelude}\nfrom fedgame.core.processes import safe_start_method\nprint(safe_start_method())"
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()

    assert method("") == "fork"
    assert method("import grpc, flwr.simulation") == "fork"
    marked = "from fedgame.core.processes import mark_fork_unsafe\nmark_fork_unsafe('test')"
    assert method(marked) == "forkserver"  # what a Flower simulation does (tests/deploy/test_flower_sim.py)


def test_pools_do_not_fork_a_process_that_sees_a_cuda_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a CUDA GPU is visible, autograd's engine starts a thread per GPU at the first
    backward, and a child forked after it refuses every backward: pools there start from a fork
    server (on a CPU-only host torch's CUDA check says no, and they keep fork)."""
    from fedgame.core import processes

    monkeypatch.setattr(processes, "_reasons", [])  # a Flower simulation earlier in this process marks it
    if not torch.cuda.is_available():
        assert processes.fork_unsafe_reason() is None  # a CPU-only host keeps fork
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert processes.safe_start_method() == "forkserver"
    assert "CUDA GPU" in str(processes.fork_unsafe_reason())


@needs_fmnist
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_spawned_pool_is_bit_identical_to_one_thread(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool used where fork is unsafe: data through shared memory, same numbers (non-DP
    training trains the worker's model itself, which must not be shared between workers)."""
    from fedgame.sim import pool as pool_mod

    recipe = "main/fedavg.yaml"
    seq = build_engine(_cfg(recipe, RECIPES[recipe] + ["train.workers=1", "train.threads=1"]))
    a = seq.engine.run(2)
    monkeypatch.setattr(pool_mod, "safe_start_method", lambda: method)
    par = build_engine(_cfg(recipe, RECIPES[recipe] + ["train.workers=2"]), parallel=True)
    try:
        assert par.pool is not None and par.pool.start_method == method
        b = par.engine.run(2)
    finally:
        par.close()
    assert torch.equal(a.params, b.params)
    _same(a.records, b.records)


@needs_fmnist
def test_jdp_workers_are_bit_identical_to_one_thread() -> None:
    extra = ["data.partition.n_clients=8", "data.validation=200", "jdp.auction.budget=4000", "train.local.batch_size=32"]
    seq = build_jdp(_cfg("jdp/fmnist.yaml", extra + ["train.workers=1", "train.threads=1"]))
    a = seq.engine.run(2)
    par = build_jdp(_cfg("jdp/fmnist.yaml", extra + ["train.workers=2"]), parallel=True)
    try:
        assert par.pool is not None
        b = par.engine.run(2)
        assert torch.equal(seq.engine.thetas, par.engine.thetas)  # every winner's own model
    finally:
        par.close()
    assert torch.equal(a.params, b.params)
    _same(a.records, b.records)


@needs_fmnist
def test_a_pooled_run_resumes_to_the_uninterrupted_numbers(tmp_path: Path) -> None:
    cfg = _cfg("main/dp_fedavg.yaml", RECIPES["main/dp_fedavg.yaml"] + ["train.workers=2", "train.rounds=3"])
    full = run_one(cfg, tmp_path / "full")
    half = _cfg("main/dp_fedavg.yaml", RECIPES["main/dp_fedavg.yaml"] + ["train.workers=2", "train.rounds=3"])
    # stop after round 1 (the checkpoint is written per round), then resume
    built = build_engine(half, parallel=True)
    try:
        from fedgame.pipeline.store import ResultStore

        store = ResultStore(tmp_path / "cut")
        import yaml as _yaml

        store.write_text("config.yaml", _yaml.safe_dump(half.model_dump(mode="json"), sort_keys=False))
        built.engine.run(1, sink=store)
    finally:
        built.close()
    resumed = run_one(half, tmp_path / "cut")
    assert resumed["resumed_from_round"] == 1
    assert resumed["final_accuracy"] == full["final_accuracy"] and resumed["final_loss"] == full["final_loss"]
    assert full["ran_on"]["workers"] == 2


@pytest.mark.parametrize("bad", [0, 257, -1])
def test_workers_out_of_range_is_refused_naming_the_field(bad: int) -> None:
    with pytest.raises(RecipeError, match=r"train\.workers"):
        _cfg("main/fedavg.yaml", [f"train.workers={bad}"])
    with pytest.raises(ValueError, match=r"train\.workers: must be an integer in 1\.\.256"):
        check_workers(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_before_any_work() -> None:
    with pytest.raises(RecipeError, match=r"train\.device: 'cuda' but no CUDA device"):
        _cfg("main/fedavg.yaml", ["train.device=cuda"])


def _boom(ctx: WorkerContext, payload: int) -> int:
    if payload == 3:
        raise ValueError("payload three")
    return payload * 2


def test_a_worker_error_comes_back_with_its_traceback_and_the_pool_stays_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedgame.sim import pool as pool_mod

    monkeypatch.setitem(pool_mod.TASKS, "boom", _boom)  # inherited by the forked workers
    ctx = WorkerContext(trainer=None, parts=[], streams=None, classes=2)  # type: ignore[arg-type]
    with WorkerPool(ctx, 2, start_method="fork") as pool:
        assert pool.map("boom", [1, 2, 4, 5, 6]) == [2, 4, 8, 10, 12]  # in payload order
        with pytest.raises(RuntimeError, match="ValueError: payload three"):
            pool.map("boom", [1, 2, 3, 4])
        assert pool.map("boom", [7]) == [14]


def test_workers_exit_when_the_server_is_killed(tmp_path: Path) -> None:
    """A server killed by SIGKILL (no atexit, no finalizer) leaves no worker behind: each reads
    end-of-file on its pipe, because no process but the server holds the server's ends."""
    import os
    import subprocess
    import sys
    import time

    script = (
        "import os, signal\n"
        "from fedgame.sim.pool import WorkerContext, WorkerPool\n"
        "pool = WorkerPool(WorkerContext(trainer=None, parts=[], streams=None, classes=2), 2)\n"
        "print(' '.join(str(p.pid) for p in pool._procs), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    pids = [int(p) for p in server.stdout.readline().split()]  # not read to EOF: workers share the pipe
    assert server.wait(timeout=120) == -9
    server.stdout.close()
    assert len(pids) == 2

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie (exited, not yet reaped by init) counts as gone
            return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, 9)
    assert not left, f"workers {left} outlived their server"
