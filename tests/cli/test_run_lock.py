"""One run per folder: a second writer is refused with the PID of the first, a dead writer's
lock is taken over. Two real processes: a holder started with ``subprocess`` and ``fedgame``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedgame.pipeline.store import LOCK_FILE, RunFolderBusy, lock_run_folder

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
HOLD = """
import sys, time
from fedgame.pipeline.store import lock_run_folder
with lock_run_folder(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(folder: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _fedgame(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fedgame", *args], capture_output=True, text=True, timeout=600)


def test_a_second_process_is_refused_naming_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = _holder(folder)
    try:
        with pytest.raises(RunFolderBusy, match=rf"out: .* is being written by another run \(PID {holder.pid}\)"):
            with lock_run_folder(folder):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with lock_run_folder(folder):  # the kernel dropped the dead process's lock
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
        with lock_run_folder(folder):  # re-entrant in one process
            pass
    assert (folder / LOCK_FILE).read_text() == ""


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fedgame_run_force_and_resume_are_refused_while_another_process_writes(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "locked",
                "data": {"dataset": "fashion_mnist", "max_train": 400, "max_test": 100, "partition": {"kind": "iid", "n_clients": 4}},
                "model": {"name": "logreg"},
                "train": {"rounds": 1, "clients_per_round": 2, "workers": 1},
            }
        )
    )
    out = tmp_path / "out"
    holder = _holder(out)
    try:
        for extra in ([], ["--force"], ["--resume"]):
            r = _fedgame("run", str(recipe), "--out", str(out), *extra)
            assert r.returncode == 2, r.stderr
            assert r.stderr.strip().splitlines() == [
                f"error: out: {out} is being written by another run (PID {holder.pid}); wait for it to finish, or choose another --out"
            ]
        assert not (out / "config.yaml").exists()  # nothing written under the holder
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    r = _fedgame("run", str(recipe), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "summary.json").exists()
