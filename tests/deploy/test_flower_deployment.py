"""A real Flower deployment on loopback: ``flower-superlink --insecure``, three
``flower-supernode --insecure --node-config "partition-id=i num-partitions=3"`` processes and
``flwr run`` of an app written by ``fedgame flower app`` — the README's commands.

* the deployed run writes the results folder of ``run_one`` in process, with the same
  selections, ledgers and metrics bit for bit (the metrics include the final test loss and
  accuracy, functions of the final parameters). JDP-FL on real SuperNodes (its auction on the
  nodes' bids, each winner's model kept in its node's context across two rounds) runs on the
  silo federation of tests/deploy/test_flower_silo.py beside FedPCS and PHS, and in process on
  the in-memory grid of tests/deploy/test_flower_jdp.py; QI-DPFL's histogram queries are checked
  on Flower's Simulation Engine with the server's copy of the data taken away
  (tests/deploy/test_flower_queries.py): one loopback federation per path keeps the minutes down;
* a SuperNode killed (SIGKILL) after round 0's record: round 1 ends with the replies that
  arrived (``on-missing = "continue"``), ``metrics.csv`` records the client as ``missing``
  and its ledger holds round 0 only; with ``on-missing = "fail"`` the run fails saying which
  client did not reply;
* no SuperLink at the connection's address: ``flwr run`` fails at once with a clear message;
  a SuperLink without SuperNodes: the ServerApp gives up after ``register-timeout``.

Every process is started in a session of its own and stopped by its PID in a ``finally``
(:class:`~fedgame.deploy.flower.loopback.LoopbackFederation`), each test has its own
``FLWR_HOME`` under ``tmp_path``, and everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import csv
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from fedgame.deploy.flower.loopback import FLOWER_BINARIES, LoopbackFederation, flower_bin_dir, free_port  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = [
    pytest.mark.skipif(
        flower_bin_dir() is None,
        reason=f"Flower's commands ({', '.join(FLOWER_BINARIES)}) are not installed next to this Python: pip install -e '.[flower]'",
    ),
    pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed"),
    pytest.mark.slow,
]

from fedgame.cli import app as cli  # noqa: E402
from fedgame.pipeline.build import build_engine  # noqa: E402
from fedgame.pipeline.config import load_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "main" / "dp_fedavg.yaml"
# DP-FedAvg on three tiny partitions: per-client DP-SGD noise calibrated to ε = 8, so the
# ledgers and the noise differ per client and are worth comparing
SMOKE = [
    "data.max_train=600",
    "data.max_test=200",
    "data.partition.n_clients=3",
    "data.partition.min_size=30",
    "train.rounds=2",
    "train.eval_every=1",
    "train.threads=1",
    "train.clients_per_round=2",
]
RUN_TIMEOUT = 600.0  # seconds: a whole flwr run on a loaded two-core machine


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _untimed(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.endswith("time")} for r in rows]


def _write_app(tmp_path: Path, overrides: list[str], *extra: str, recipe: Path = RECIPE) -> tuple[Path, Path]:
    """`fedgame flower app` into tmp_path/app, results to tmp_path/flower; (app dir, out dir)."""
    app_dir, out = tmp_path / "app", tmp_path / "flower"
    sets = [a for o in overrides for a in ("--set", o)]
    r = CliRunner().invoke(cli, ["flower", "app", str(recipe), str(app_dir), *sets, "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return app_dir, out


def _explain(fed: LoopbackFederation, run: subprocess.CompletedProcess[str] | None) -> str:
    """What to read when a deployment test fails: flwr's output and the SuperLink's log tail."""
    return f"flwr run:\n{run.stdout if run else '(none)'}\nsuperlink log (tail):\n{fed.log_text('superlink')[-4000:]}"


def _deploy_beside_in_process(
    tmp_path: Path, recipe: Path, over: list[str], nodes: int
) -> tuple[dict[str, Any], dict[str, Any], Path, subprocess.CompletedProcess[str]]:
    """The recipe in process and deployed on ``nodes`` loopback SuperNodes; (in-process summary,
    deployed summary, deployed results folder, flwr run), after checking what every deployed
    run must equal: the same files, metrics (apart from timings) and ``privacy.csv``."""
    app_dir, out = _write_app(tmp_path, over, recipe=recipe)
    ref = run_one(load_recipe(recipe, over), tmp_path / "inprocess")
    run = None
    with LoopbackFederation(tmp_path / "flwr-home", nodes=nodes) as fed:
        run = fed.run(app_dir, timeout=RUN_TIMEOUT)
        assert run.returncode == 0 and (out / "summary.json").exists(), _explain(fed, run)
    got = json.loads((out / "summary.json").read_text())
    assert got["backend"] == "flower" and ref["backend"] == "inprocess"
    assert got["backend_info"]["nodes"] == nodes and got["backend_info"]["errors"] == []
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "inprocess").iterdir())
    assert (out / "config.yaml").read_text() == (tmp_path / "inprocess" / "config.yaml").read_text()
    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(tmp_path / "inprocess" / "metrics.csv"))  # same strings
    assert _rows(out / "privacy.csv") == _rows(tmp_path / "inprocess" / "privacy.csv")
    for key in ("final_accuracy", "epsilon_per_client", "partition_fingerprint"):
        assert got[key] == ref[key], key
    return ref, got, out, run


def test_deployed_run_writes_the_in_process_results(tmp_path: Path) -> None:
    ref, got, out, run = _deploy_beside_in_process(tmp_path, RECIPE, SMOKE, 3)
    assert got["final_loss"] == ref["final_loss"] and float(got["epsilon_max"]) > 0
    assert all(json.loads(r["missing"]) == [] and len(json.loads(r["selected"])) == 2 for r in _rows(out / "metrics.csv"))
    assert "round 1: replied [" in run.stdout, run.stdout  # the ServerApp's progress, streamed


def _run_and_kill(fed: LoopbackFederation, app_dir: Path, out: Path, node: int) -> subprocess.CompletedProcess[str]:
    """Submit the app; as soon as round 0's record is in ``metrics.csv`` — round 1's jobs are
    on their way, a ClientApp takes seconds to start — crash SuperNode ``node``."""
    box: dict[str, Any] = {}

    def submit() -> None:
        try:
            box["run"] = fed.run(app_dir, timeout=RUN_TIMEOUT)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = e

    t = threading.Thread(target=submit, daemon=True)
    t.start()
    deadline = time.monotonic() + RUN_TIMEOUT
    metrics = out / "metrics.csv"
    while not (metrics.exists() and len(_rows(metrics)) >= 1):
        assert t.is_alive(), f"the run ended before round 0's record: {box}\n{fed.log_text('superlink')[-4000:]}"
        assert time.monotonic() < deadline, "round 0 did not finish in time"
        time.sleep(0.1)
    fed.kill_node(node)
    t.join(RUN_TIMEOUT)
    if "error" in box:
        raise box["error"]
    run: subprocess.CompletedProcess[str] = box["run"]
    return run


def _one_round_ledger(cfg: Any) -> np.ndarray:
    """Every client's ε after round 0 alone (the plan calibrated for the whole run, as deployed)."""
    return build_engine(cfg).engine.run(1).epsilons


def test_a_supernode_killed_mid_run_is_missing_and_not_charged(tmp_path: Path) -> None:
    over = [*SMOKE, "train.clients_per_round=3"]  # the last override wins: everyone selected: the dead node is in round 1
    app_dir, out = _write_app(tmp_path, over)
    cfg = load_recipe(RECIPE, over)
    full = run_one(cfg, tmp_path / "inprocess")["epsilon_per_client"]
    first = _one_round_ledger(cfg)

    run = None
    with LoopbackFederation(tmp_path / "flwr-home", nodes=3) as fed:
        run = _run_and_kill(fed, app_dir, out, 2)
        assert run.returncode == 0 and (out / "summary.json").exists(), _explain(fed, run)

    rows = _rows(out / "metrics.csv")
    assert [json.loads(r["replied"]) for r in rows] == [[0, 1, 2], [0, 1]]
    assert [json.loads(r["missing"]) for r in rows] == [[], [2]]
    assert [json.loads(r["selected"]) for r in rows] == [[0, 1, 2], [0, 1, 2]]
    eps = {int(r["client"]): float(r["epsilon"]) for r in _rows(out / "privacy.csv")}
    assert eps[2] == first[2] < full[2]  # charged for round 0 only
    assert [eps[0], eps[1]] == full[:2]  # the live clients: both rounds, as in process
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend_info"]["errors"] and "partition 2" in summary["backend_info"]["errors"][0]
    assert np.isfinite(summary["final_accuracy"])


def test_on_missing_fail_stops_the_run_with_a_clear_message(tmp_path: Path) -> None:
    over = [*SMOKE, "train.clients_per_round=3"]
    app_dir, out = _write_app(tmp_path, over, "--on-missing", "fail")

    run = None
    with LoopbackFederation(tmp_path / "flwr-home", nodes=3) as fed:
        run = _run_and_kill(fed, app_dir, out, 1)
        assert not (out / "summary.json").exists(), _explain(fed, run)

    error = (out / "error.txt").read_text()
    assert "round 1: no reply from selected client(s) [1]" in error and "on_missing='fail'" in error, error
    assert "no reply from selected client(s) [1]" in run.stdout, run.stdout  # streamed to the user
    assert len(_rows(out / "metrics.csv")) == 1  # round 0 kept; resumable with --run-config resume=true


def test_flwr_run_against_no_superlink_fails_fast(tmp_path: Path) -> None:
    """Nothing listens at the connection's address: a clear error in seconds, not a hang."""
    app_dir, _ = _write_app(tmp_path, SMOKE)
    fed = LoopbackFederation(tmp_path / "flwr-home", nodes=1)  # not started: only its config and env
    fed.home.mkdir(parents=True)
    from fedgame.deploy.flower.deployment import connection_toml

    (fed.home / "config.toml").write_text(connection_toml("fedgame-loopback", f"127.0.0.1:{free_port()}"))
    tic = time.monotonic()
    run = fed.run(app_dir, timeout=120)
    took = time.monotonic() - tic
    assert run.returncode != 0, run.stdout
    assert "Connection to the SuperLink is unavailable" in run.stdout, run.stdout
    assert took < 60, f"flwr run took {took:.0f} s to give up"


def test_missing_supernodes_fail_after_the_register_timeout(tmp_path: Path) -> None:
    """A SuperLink with one of three SuperNodes: the ServerApp stops after `register-timeout`,
    naming how many nodes came and how to start the others."""
    app_dir, out = _write_app(tmp_path, SMOKE, "--register-timeout", "5")
    run = None
    with LoopbackFederation(tmp_path / "flwr-home", nodes=1) as fed:
        run = fed.run(app_dir, timeout=RUN_TIMEOUT)
        assert (out / "error.txt").exists(), _explain(fed, run)
    error = (out / "error.txt").read_text()
    assert "NodesNotReady: only 1 of 3 SuperNodes connected after 5 s" in error, error
    assert "partition-id=<0..2> num-partitions=3" in error
    assert "only 1 of 3 SuperNodes connected" in run.stdout, run.stdout
