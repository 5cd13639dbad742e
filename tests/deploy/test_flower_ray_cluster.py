"""The simulation pointed at a running Ray cluster: ``ray start --head`` on loopback (its own
port and temp folder, in its own process group), then ``fedgame run --backend flower-sim
--ray-address 127.0.0.1:<port>``: the ClientApps run in the cluster's workers (the driver
joins the cluster instead of starting one) and the results equal the in-process run. The head
is stopped by its process group's id at the end, pass or fail; nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")
pytest.importorskip("ray", reason="the flower extra is not installed (pip install -e '.[flower]')")

from fedgame.cli import app  # noqa: E402
from fedgame.pipeline.config import parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from tests.deploy.test_flower_sim import recipe  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = [
    pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed"),
    pytest.mark.slow,
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head() -> Iterator[tuple[str, Path]]:
    """``ray start --head --block`` on 127.0.0.1; yields its address and temp folder; stopped by
    its process group."""
    ray_bin = Path(sys.executable).with_name("ray")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = Path(tmp) / "head.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                str(ray_bin),
                "start",
                "--head",
                "--block",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=2",
                "--num-gpus=0",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--temp-dir={tmp}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", Path(tmp)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # --block: the head stops the processes it started
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return [{k: v for k, v in r.items() if not k.endswith("time")} for r in csv.DictReader(f)]


def test_simulation_on_a_running_ray_head_equals_in_process(ray_head: tuple[str, Path], tmp_path: Path) -> None:
    import ray

    address, head_tmp = ray_head
    raw = recipe(name="ray_head")
    path = tmp_path / "ray_head.yaml"
    path.write_text(yaml.safe_dump(raw))
    a = run_one(parse_recipe(raw), tmp_path / "inprocess")
    r = CliRunner().invoke(app, ["run", str(path), "--backend", "flower-sim", "--ray-address", address, "--out", str(tmp_path / "flower")])
    assert r.exit_code == 0, r.output
    b = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert b["backend_info"]["backend_config"]["init_args"] == {"address": address}
    assert b["final_accuracy"] == a["final_accuracy"] and b["epsilon_per_client"] == a["epsilon_per_client"]
    assert _rows(tmp_path / "inprocess" / "metrics.csv") == _rows(tmp_path / "flower" / "metrics.csv")
    assert not ray.is_initialized()  # the driver left the cluster; the head is still up until the fixture stops it
    # the simulation's ClientApps ran on the head's workers: its session logs list worker processes
    workers = list(head_tmp.glob("session_*/logs/worker-*.out"))
    assert workers, "no Ray worker of the head cluster ran"
