"""Silo data (``fedgame flower app --silo``): every node reads its own files, the server only what
they report.

In this process, over a grid that calls the real ClientApp (fast):

* a silo run on three nodes equals the in-process run of the same clients' examples bit for
  bit (FedPCS's game, draws, noise, ledgers, metrics on the server's own test set), and the
  client indices follow the Flower node ids, not the order the nodes joined;
* federated evaluation: each node evaluates on its held-out split, the recorded test accuracy
  and loss are their average weighted by those splits' sizes, and the summary says so;
* PHS with per-client budgets and power-of-choice's loss probes, and Fed-CBS's label
  histograms: every answer a silo sent is in ``queries.jsonl`` (sizes and histograms = what
  the test wrote, one loss per probed client and round);
* bad input is one line naming the node: a missing data-dir, a node without one, nodes that
  disagree on the number of classes, no held-out split for federated evaluation, too many
  nodes; and the CLI refuses what a silo app cannot run.

Over loopback, with real ``flower-superlink`` / ``flower-supernode`` processes (slow): FedPCS on
three SuperNodes each started with its own folder of CSV files, the ServerApp run from a folder
that holds none of them and, by an audit hook in every process, never opening a file under
them; its ServerApp process killed after round 0, a SuperNode restarted (a new node id) and the
run resumed to the numbers of a run that never stopped; then PHS with per-client budgets and
loss probes, and JDP-FL's auction on the nodes' bids (tests/deploy/test_flower_silo_jdp.py's
checks), on the same SuperNodes, to the end; and a SuperNode whose data-dir is missing stops
the run with one line naming it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.app import Context, Message, RecordDict  # noqa: E402

from fedgame.cli import app as cli  # noqa: E402
from fedgame.deploy.flower.client_app import make_client_app, recipe_text  # noqa: E402
from fedgame.deploy.flower.deployment import DeploymentConfig, silo_node_config  # noqa: E402
from fedgame.deploy.flower.executor import NodesNotReady  # noqa: E402
from fedgame.deploy.flower.loopback import FLOWER_BINARIES, LoopbackFederation, flower_bin_dir  # noqa: E402
from fedgame.deploy.flower.server_app import SiloDeployment  # noqa: E402
from fedgame.deploy.flower.silo import SiloRefused  # noqa: E402
from fedgame.pipeline.build import load_silo  # noqa: E402
from fedgame.pipeline.config import RunConfig, parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402

CLASSES = 3
FEATURES = ["f0", "f1", "f2", "f3"]


@pytest.fixture(autouse=True)
def task_identity() -> Iterator[None]:
    """Messages are stamped with the process's Flower task identity, which a ServerApp run sets."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


# -- data the test writes: one folder per silo ---------------------------------------------
#: (training rows, held-out rows, label mix) of each silo: different sizes and label skews
SILOS = [(48, 12, (0.7, 0.2, 0.1)), (30, 10, (0.1, 0.3, 0.6)), (72, 16, (0.34, 0.33, 0.33))]


def _labels(n: int, mix: tuple[float, ...], rng: np.random.Generator) -> np.ndarray:
    """``n`` labels, every class at least once, in proportions about ``mix``."""
    y = rng.choice(len(mix), size=n, p=np.asarray(mix) / sum(mix))
    y[: len(mix)] = np.arange(len(mix))
    return rng.permutation(y)


def _features(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Features that carry the label (a mean shift per class), so a model can learn them."""
    return (rng.normal(size=(y.size, len(FEATURES))) + y[:, None] * np.array([1.0, -0.5, 0.25, 0.0])).astype(np.float32)


def _write_csv(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*FEATURES, "label"])
        for row, label in zip(x, y, strict=True):
            w.writerow([f"{v:.6f}" for v in row] + [int(label)])


def write_csv_silos(root: Path, *, seed: int = 0) -> list[dict[str, Any]]:
    """One folder per silo with ``train.csv`` and ``test.csv``; what each holds (the truth the
    server's record is checked against)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (n, n_test, mix) in enumerate(SILOS):
        d = root / f"silo-{'abc'[i]}"
        d.mkdir(parents=True)
        y, yt = _labels(n, mix, rng), _labels(n_test, mix, rng)
        _write_csv(d / "train.csv", _features(y, rng), y)
        _write_csv(d / "test.csv", _features(yt, rng), yt)
        out.append({"dir": d, "rows": n, "test_rows": n_test, "histogram": np.bincount(y, minlength=CLASSES).tolist()})
    return out


CSV_DATA = {
    "dataset": "csv",
    "options": {"path": "train.csv", "test_path": "test.csv", "label": "label", "classes": CLASSES},
    "partition": {"kind": "iid", "n_clients": 3},
}


def fedpcs(**data: Any) -> dict[str, Any]:
    """FedPCS (the Stackelberg game, privacy-aware draws, ρ-zCDP uploads), smoke-sized."""
    return {
        "name": "silo_fedpcs",
        "seed": 0,
        "data": data or CSV_DATA,
        "model": {"name": "mlp"},
        "train": {
            "rounds": 2,
            "clients_per_round": 2,
            "eval_every": 1,
            "threads": 1,
            "workers": 1,
            "local": {"epochs": 1, "batch_size": 16, "lr": 0.1},
        },
        "selection": {"kind": "privacy_aware", "sampler": "multinomial"},
        "aggregation": {"kind": "importance"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "paper_update"},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "fedpcs", "gamma": 0.5, "acc_scale": 10000, "inclusion": "privacy"},
    }


def phs(rounds: int = 2) -> dict[str, Any]:
    """PHS with per-client budgets ε_k ~ U(0, 1) and power-of-choice on the clients' current
    losses (PHS Table IV's biased mechanism), smoke-sized."""
    return {
        "name": "silo_phs",
        "seed": 1,
        "data": CSV_DATA,
        "model": {"name": "mlp"},
        "train": {
            "rounds": rounds,
            "clients_per_round": 2,
            "threads": 1,
            "workers": 1,
            "local": {"epochs": None, "steps": 2, "batch_size": 8, "lr": 0.05},
        },
        "selection": {"kind": "power_of_choice", "d": None, "losses": "current", "ties": "id", "cap": "planned"},
        "aggregation": {"kind": "mean"},
        "privacy": {
            "kind": "phs",
            "budgets": {"kind": "uniform", "low": 0, "high": 1},
            "delta": 1e-5,
            "max_grad_norm": 1.0,
            "calibration": "paper",
            "batch": "poisson",
        },
        "accountant": {"kind": "rdp", "delta": 1e-5},
    }


# -- a grid in this process whose nodes run the real ClientApp on their own folders -------------
class SiloGrid:
    """Node ``ids[i]`` reads folder ``dirs[i]`` (None: no data-dir in its node config) and runs
    the real ClientApp in this process with the silo run config, each with its own Context kept
    across messages; ``sent`` counts the messages per type."""

    def __init__(self, cfg: RunConfig, dirs: list[Path | str | None], ids: list[int]) -> None:
        self.app = make_client_app()  # the deployed ClientApp: the recipe from the run config
        run_config = {"recipe": recipe_text(cfg), "silo": True}
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={} if d is None else {"data-dir": str(d)},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for node, d in zip(ids, dirs, strict=True)
        }
        self.sent: dict[str, int] = {}

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)  # in the order they joined, not sorted

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        out = []
        for m in messages:
            kind = m.metadata.message_type
            self.sent[kind] = self.sent.get(kind, 0) + 1
            out.append(self.app(m, self.contexts[m.metadata.dst_node_id]))
        return out


def run_silo(
    tmp_path: Path, raw: dict[str, Any], dirs: list[Path | str | None], *, ids: list[int] | None = None, server_data: Path | None = None
) -> tuple[dict[str, Any], Path, SiloGrid, SiloDeployment]:
    """``raw`` as a silo deployment over a :class:`SiloGrid` (Flower's strategy loop, the
    ServerApp's builder): (summary, results folder, grid, deployment)."""
    cfg = parse_recipe(raw)
    grid = SiloGrid(cfg, dirs, ids or [300 + 7 * i for i in range(len(dirs))])
    out = tmp_path / "silo"
    dep = SiloDeployment(grid, out=out, server_data=None if server_data is None else str(server_data), register_timeout=5)  # type: ignore[arg-type]
    summary = run_one(cfg, out, execute=dep, build=dep.build, resume=False)
    return summary, out, grid, dep


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _untimed(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.endswith("time")} for r in rows]


def _queries(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]


# -- in this process -------------------------------------------------------------------------
def test_a_silo_run_equals_the_in_process_run_of_the_same_clients(tmp_path: Path) -> None:
    """npz images (kept as they are, so a node and the server see the same numbers): three
    silos, the nodes joining in the order b, c, a with node ids that sort a, b, c, and a
    server test set of its own. The run equals the in-process run of a natural partition of
    the three silos' examples, client i = silo i: same FedPCS plan, draws, ledgers, metrics."""
    rng = np.random.default_rng(5)
    sizes, tests = [40, 25, 60], 30
    xs = [rng.normal(size=(n, 1, 2, 2)).astype(np.float32) for n in sizes]
    ys = [_labels(n, mix, rng) for n, (_, _, mix) in zip(sizes, SILOS, strict=True)]
    xt, yt = rng.normal(size=(tests, 1, 2, 2)).astype(np.float32), _labels(tests, (1, 1, 1), rng)
    dirs = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        d = tmp_path / "silos" / f"silo-{i}"
        d.mkdir(parents=True)
        np.savez(d / "data.npz", x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])  # its own held-out split (unused here)
        dirs.append(d)
    server = tmp_path / "server"
    server.mkdir()
    np.savez(server / "data.npz", x_train=xt[:3], y_train=yt[:3], x_test=xt, y_test=yt)  # the server's test set
    raw = fedpcs(dataset="npz", options={"path": "data.npz", "classes": CLASSES}, partition={"kind": "iid", "n_clients": 3})

    # nodes join b (id 20), c (id 31), a (id 7): client 0 is the smallest id, silo a
    summary, out, grid, dep = run_silo(tmp_path, raw, [dirs[1], dirs[2], dirs[0]], ids=[20, 31, 7], server_data=server)

    memory = {
        "train": (np.concatenate(xs), np.concatenate(ys)),
        "test": (xt, yt),
        "groups": {"silo": np.repeat(np.arange(3), sizes)},
        "classes": CLASSES,
    }
    ref_raw = {**raw, "data": {"dataset": "npz", "options": {"path": "unused.npz"}, "partition": {"kind": "natural", "column": "silo"}}}
    ref = run_one(parse_recipe(ref_raw), tmp_path / "inprocess", data=memory)

    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(tmp_path / "inprocess" / "metrics.csv"))
    assert _rows(out / "privacy.csv") == _rows(tmp_path / "inprocess" / "privacy.csv")
    assert json.loads((out / "game.json").read_text()) == json.loads((tmp_path / "inprocess" / "game.json").read_text())
    assert summary["final_accuracy"] == ref["final_accuracy"] and summary["epsilon_per_client"] == ref["epsilon_per_client"]
    info = summary["backend_info"]
    assert info["silo"] is True and info["evaluation"] == "server" and info["node_ids"] == [7, 20, 31] and info["errors"] == []
    part = json.loads((out / "partition.json").read_text())
    assert part["silo"] and part["nodes"] == [7, 20, 31] and part["sizes"] == sizes and part["test_sizes"] == [5, 5, 5]
    assert not (out / "partition.npz").exists()  # no partition: the server never indexed a client's examples
    assert grid.sent.get("evaluate", 0) == 0  # the server evaluated on its own test set


class Killed(Exception):
    """The ServerApp's process dying after a round (the checkpoint of that round is written)."""


def test_a_killed_server_resumes_with_restarted_nodes_to_the_same_numbers(tmp_path: Path) -> None:
    """A silo run stopped after round 1 resumes, in a fresh deployment, on nodes that all
    restarted (new Flower node ids, sorting the silos c, b, a): each client goes back to the
    node holding its files (by fingerprint), and the run ends with the numbers of a run that
    never stopped. A node with other files is refused at resume in one line."""
    silos = write_csv_silos(tmp_path / "silos")
    dirs = [s["dir"] for s in silos]
    raw = fedpcs()
    raw["train"]["rounds"] = 3
    cfg = parse_recipe(raw)
    whole, whole_out, _, _ = run_silo(tmp_path / "whole", raw, dirs)

    out = tmp_path / "stopped"

    def die_after_round_1(record: dict[str, Any]) -> None:
        if record["round"] == 1:
            raise Killed

    first = SiloDeployment(SiloGrid(cfg, dirs, [300, 307, 314]), out=out, register_timeout=5)  # type: ignore[arg-type]
    with pytest.raises(Killed):
        run_one(cfg, out, execute=first, build=first.build, resume=False, on_round=die_after_round_1)
    assert [int(r["round"]) for r in _rows(out / "metrics.csv")] == [0, 1] and (out / "checkpoint.pt").exists()
    stopped = tmp_path / "stopped-copy"
    shutil.copytree(out, stopped)

    restarted = SiloGrid(cfg, dirs, [900, 500, 100])  # silo a is now the largest node id
    second = SiloDeployment(restarted, out=out, register_timeout=5, resume=True)  # type: ignore[arg-type]
    summary = run_one(cfg, out, execute=second, build=second.build, resume=True)
    assert summary["backend_info"]["node_ids"] == [900, 500, 100]  # client i = silo i, by its files
    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(whole_out / "metrics.csv"))
    assert _rows(out / "privacy.csv") == _rows(whole_out / "privacy.csv")
    assert summary["final_accuracy"] == whole["final_accuracy"] and summary["epsilon_per_client"] == whole["epsilon_per_client"]
    reg = [e for e in _queries(out) if e["query"] == "register"]
    assert [(e["client"], e["node"]) for e in reg] == [(0, 300), (1, 307), (2, 314), (0, 900), (1, 500), (2, 100)]

    other = write_csv_silos(tmp_path / "other", seed=1)[2]["dir"]  # silo c replaced by other files
    third = SiloDeployment(SiloGrid(cfg, [dirs[0], dirs[1], other], [1, 2, 3]), out=stopped, register_timeout=5, resume=True)  # type: ignore[arg-type]
    with pytest.raises(SiloRefused, match=r"^resume: the nodes' data \(fingerprints .*\) differ from the run's"):
        run_one(cfg, stopped, execute=third, build=third.build, resume=True)


def test_federated_evaluation_averages_the_nodes_held_out_splits(tmp_path: Path) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    summary, out, grid, _ = run_silo(tmp_path, fedpcs(), [s["dir"] for s in silos])
    assert summary["backend_info"]["evaluation"] == "federated"
    entries = _queries(out)
    reg = sorted((e for e in entries if e["query"] == "register"), key=lambda e: e["client"])
    assert [e["answer"]["n_examples"] for e in reg] == [s["rows"] for s in silos]  # the CSV rows the test wrote
    assert [e["answer"]["n_test"] for e in reg] == [s["test_rows"] for s in silos]
    assert [e["answer"]["label_counts"] for e in reg] == [s["histogram"] for s in silos]  # the test's labels
    assert [e["round"] for e in reg] == [None] * 3
    for row in _rows(out / "metrics.csv"):
        t = int(row["round"])
        ev = [e for e in entries if e["query"] == "evaluate" and e["round"] == t]
        assert sorted(e["client"] for e in ev) == [0, 1, 2]
        n = np.array([e["answer"]["num_examples"] for e in ev], dtype=np.float64)
        assert n.tolist() == [silos[e["client"]]["test_rows"] for e in ev]
        acc = np.array([e["answer"]["accuracy"] for e in ev])
        loss = np.array([e["answer"]["loss"] for e in ev])
        assert float(row["test_acc"]) == pytest.approx(float((acc * n).sum() / n.sum()), rel=1e-12)
        assert float(row["test_loss"]) == pytest.approx(float((loss * n).sum() / n.sum()), rel=1e-12)
        trained = [e for e in entries if e["query"] == "train" and e["round"] == t]
        assert sorted(e["client"] for e in trained) == sorted(set(json.loads(row["replied"])))
        assert all(e["answer"]["n_examples"] == silos[e["client"]]["rows"] for e in trained)
    assert grid.sent["evaluate"] == 3 * 2 and (out / "game.json").exists()


def test_phs_budgets_loss_probes_and_histograms_are_asked_of_the_silos(tmp_path: Path) -> None:
    """PHS with per-client budgets and power-of-choice on the clients' current losses (PHS
    Table IV's biased mechanism), then Fed-CBS on their label histograms: each loss and
    histogram the server used came from a silo's answer, listed in queries.jsonl."""
    silos = write_csv_silos(tmp_path / "silos")
    summary, out, _, _ = run_silo(tmp_path, phs(), [s["dir"] for s in silos])
    entries = _queries(out)
    assert (out / "phs.json").exists() and len(json.loads((out / "phs.json").read_text())["eps"]) == 3
    for t in range(2):
        probed = [e for e in entries if e["query"] == "losses" and e["round"] == t]
        assert sorted(e["client"] for e in probed) == [0, 1, 2] and all(np.isfinite(e["answer"]["loss"]) for e in probed)
    assert summary["backend_info"]["queries"].get("label_counts") is None

    cbs = {
        **fedpcs(),
        "name": "silo_fedcbs",
        "selection": {"kind": "fedcbs"},
        "aggregation": {"kind": "mean"},
        "privacy": {"kind": "none"},
        "incentive": {"kind": "none"},
    }
    summary, out, _, _ = run_silo(tmp_path / "cbs", cbs, [s["dir"] for s in silos])
    asked = sorted((e for e in _queries(out) if e["query"] == "label_counts"), key=lambda e: e["client"])
    assert [e["answer"] for e in asked] == [s["histogram"] for s in silos] and summary["backend_info"]["queries"]["label_counts"] == 3


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", r"^silo nodes: node 307: data-dir '[^']*/nowhere' does not exist$"),
        ("no_dir", r"^silo nodes: node 307: node config: 'data-dir' is missing; start the SuperNode with --node-config"),
        (
            "classes",
            r"^silo nodes disagree on the number of classes: 3 at node\(s\) 300 \(client 0\), 314 \(client 2\); "
            r"2 at node\(s\) 307 \(client 1\)",
        ),
        ("held_out", r"^evaluation: federated \(the server has no test set\), but no node has a held-out split"),
    ],
)
def test_bad_silos_stop_the_run_in_one_line_naming_the_node(tmp_path: Path, case: str, message: str) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    dirs: list[Path | str | None] = [s["dir"] for s in silos]
    raw = fedpcs()
    if case == "missing":
        dirs[1] = tmp_path / "nowhere"
    elif case == "no_dir":
        dirs[1] = None
    elif case == "classes":  # silo b has no label 2, and the recipe does not say there are 3 classes
        opts = {k: v for k, v in CSV_DATA["options"].items() if k != "classes"}  # type: ignore[attr-defined]
        raw = fedpcs(**{**CSV_DATA, "options": opts})
        d = Path(str(dirs[1]))
        for name in ("train.csv", "test.csv"):
            rows = [r for r in _rows(d / name) if r["label"] != "2"]
            _write_csv(d / name, np.array([[float(r[f]) for f in FEATURES] for r in rows]), np.array([int(r["label"]) for r in rows]))
    elif case == "held_out":  # npz silos without a test split
        dirs = []
        for i in range(3):
            d = tmp_path / "npz" / str(i)
            d.mkdir(parents=True)
            np.savez(
                d / "data.npz",
                x_train=np.ones((6, 2), np.float32) * i,
                y_train=np.arange(6) % 3,
                x_test=np.zeros((0, 2), np.float32),
                y_test=np.zeros(0, np.int64),
            )
            dirs.append(d)
        raw = fedpcs(dataset="npz", options={"path": "data.npz", "classes": 3}, partition={"kind": "iid", "n_clients": 3})
    with pytest.raises(SiloRefused) as e:
        run_silo(tmp_path, raw, dirs)
    assert "\n" not in str(e.value)
    assert re.search(message, str(e.value)), str(e.value)


def test_too_many_nodes_and_the_cli_refuse_what_a_silo_cannot_run(tmp_path: Path) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    with pytest.raises(NodesNotReady, match=r"4 SuperNodes connected, the recipe has 3 clients"):
        run_silo(tmp_path, fedpcs(), [*(s["dir"] for s in silos), silos[0]["dir"]])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(fedpcs()))
    r = CliRunner().invoke(cli, ["flower", "app", str(recipe), str(tmp_path / "app"), "--silo", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    toml = (tmp_path / "app" / "pyproject.toml").read_text()
    assert "silo = true" in toml and 'server-data = ""' in toml
    assert "data-dir='/srv/silo-2'" in (tmp_path / "app" / "README.md").read_text() and "data-dir='/srv/silo-0'" in r.output
    r = CliRunner().invoke(cli, ["flower", "app", str(recipe), str(tmp_path / "app2"), "--server-data", str(tmp_path)])
    assert r.exit_code != 0 and "server-data: only with --silo" in r.output
    dep = DeploymentConfig.from_run_config({"recipe": "name: x\n", "out": "/tmp/x", "silo": True, "server-data": "/srv/test"})
    assert (dep.silo, dep.server_data) == (True, "/srv/test")
    for bad, message in (
        ({"silo": "yes"}, "'silo' must be true or false"),
        ({"silo": True, "server-data": "rel"}, "'server-data' must be an absolute path"),
        ({"server-data": "/srv/test"}, "'server-data' is for silo deployments"),
    ):
        with pytest.raises(ValueError, match=message):
            DeploymentConfig.from_run_config({"recipe": "name: x\n", "out": "/tmp/x", **bad})
    jdp = Path(__file__).resolve().parents[2] / "recipes" / "jdp" / "fmnist.yaml"
    r = CliRunner().invoke(cli, ["flower", "app", str(jdp), str(tmp_path / "app3"), "--silo"])
    assert r.exit_code != 0 and "server-data: jdp.aggregator 'leave_one_out' scores the groups" in " ".join(r.output.split())


# -- over loopback, real Flower processes ----------------------------------------------------
needs_flower = pytest.mark.skipif(
    flower_bin_dir() is None,
    reason=f"Flower's commands ({', '.join(FLOWER_BINARIES)}) are not installed next to this Python: pip install -e '.[flower]'",
)
RUN_TIMEOUT = 600.0

AUDIT = '''
"""Test plug-in (loaded by every fedgame process of the federation through FEDGAME_PLUGINS):
an audit hook that records which process opened or listed a path under the silos' root."""
import os, sys
_ROOT = os.environ["SILO_AUDIT_ROOT"]
_OUT = os.environ["SILO_AUDIT_OUT"]
_ROLE = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
_busy = False

def _hook(event, args):
    global _busy
    if _busy or event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    path = args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(path)
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    if os.path.abspath(path).startswith(_ROOT):
        _busy = True
        try:
            with open(os.path.join(_OUT, f"{_ROLE}-{os.getpid()}.txt"), "a") as f:
                f.write(event + " " + path + "\\n")
        finally:
            _busy = False

with open(os.path.join(_OUT, f"loaded-{_ROLE}-{os.getpid()}.txt"), "w") as f:
    f.write("audit hook active\\n")
sys.addaudithook(_hook)
'''


def _silo_app(tmp_path: Path, raw: dict[str, Any], *extra: str) -> tuple[Path, Path]:
    """``fedgame flower app RECIPE --silo`` for ``raw`` under ``tmp_path/<name>``: (app, results)."""
    recipe = tmp_path / f"{raw['name']}.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    app_dir, out = tmp_path / raw["name"] / "app", tmp_path / raw["name"] / "results"
    r = CliRunner().invoke(
        cli, ["flower", "app", str(recipe), str(app_dir), "--silo", "--out", str(out), "--register-timeout", "120", *extra]
    )
    assert r.exit_code == 0, r.output
    return app_dir, out


def _loopback(
    tmp_path: Path,
    raw: dict[str, Any],
    dirs: list[Path],
    *extra: str,
    interrupt: bool = False,
    then: Sequence[tuple[dict[str, Any], Sequence[str]]] = (),
) -> tuple[subprocess.CompletedProcess[str], Path, Path, str, list[tuple[subprocess.CompletedProcess[str], Path]]]:
    """Write the silo app, start a SuperLink and one SuperNode per folder (``data-dir``) from
    a working folder outside the silos, every process auditing opens under the silos' root;
    ``flwr run``. With ``interrupt``: once round 0's checkpoint is written, SIGKILL the
    ServerApp's process (and ``flwr run``), restart SuperNode 0 (a new Flower node id), and
    ``flwr run`` again with ``resume=true``. Then the apps of ``then`` ((recipe, ``fedgame flower
    app`` arguments) pairs), one after the other, on the same federation. (last flwr run, results folder, audit folder, superlink
    log, [(flwr run, results folder) of each of ``then``])."""
    app_dir, out = _silo_app(tmp_path, raw, *extra)
    apps = [_silo_app(tmp_path, r, *more_args) for r, more_args in then]
    audit = tmp_path / "audit"
    audit.mkdir()
    plugin = tmp_path / "silo_audit.py"
    plugin.write_text(textwrap.dedent(AUDIT))
    work = tmp_path / "server-cwd"
    work.mkdir()
    env = {"FEDGAME_PLUGINS": str(plugin), "SILO_AUDIT_ROOT": str((tmp_path / "silos").resolve()), "SILO_AUDIT_OUT": str(audit)}
    with LoopbackFederation(
        tmp_path / "flwr-home", nodes=len(dirs), env=env, cwd=work, node_configs=[silo_node_config(d) for d in dirs]
    ) as fed:
        if interrupt:
            first = fed.submit(app_dir)
            deadline = time.monotonic() + RUN_TIMEOUT
            while not (out / "checkpoint.pt").exists():
                assert first.poll() is None and time.monotonic() < deadline, fed.log_text("superlink")[-4000:]
                time.sleep(0.2)
            assert fed.kill_serverapps(), "no ServerApp process to kill"
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            fed.kill_node(0, signal.SIGTERM)
            fed.start_node(0)
            extra_run: tuple[str, ...] = ("--run-config", "resume=true")
        else:
            extra_run = ()
        run = fed.run(app_dir, timeout=RUN_TIMEOUT, extra=extra_run)
        more = [(fed.run(a, timeout=RUN_TIMEOUT), o) for a, o in apps]
        log = fed.log_text("superlink")
    return run, out, audit, log, more


@needs_flower
@pytest.mark.slow
def test_fedpcs_on_three_silo_supernodes_over_loopback(tmp_path: Path) -> None:
    """FedPCS on three real SuperNodes with their own files; its ServerApp killed after round 0,
    SuperNode 0 restarted (a new node id), the run resumed: it ends with the numbers of the same
    run in this process that never stopped, client i on silo i's files throughout."""
    silos = write_csv_silos(tmp_path / "silos")
    from tests.deploy.test_flower_silo_jdp import check_jdp_loopback, jdp_silo, write_server_data

    server = write_server_data(tmp_path / "server")
    then = [(phs(1), ()), (jdp_silo(rounds=2), ("--server-data", str(server)))]
    run, out, audit, log, [(phs_run, phs_out), (jdp_run, jdp_out)] = _loopback(
        tmp_path, fedpcs(), [s["dir"] for s in silos], interrupt=True, then=then
    )
    assert run.returncode == 0 and (out / "summary.json").exists(), f"{run.stdout}\n{log[-4000:]}"
    sessions = json.loads((out / "sessions.json").read_text())
    assert [s["from_round"] for s in sessions] == [0, 1]  # killed after round 0, resumed at round 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "flower" and summary["backend_info"]["silo"] and summary["backend_info"]["errors"] == []
    assert summary["backend_info"]["evaluation"] == "federated" and np.isfinite(summary["final_accuracy"])
    rows = _rows(out / "metrics.csv")
    assert [int(r["round"]) for r in rows] == [0, 1] and all(json.loads(r["missing"]) == [] for r in rows)
    assert (out / "game.json").exists() and float(summary["epsilon_max"]) > 0  # FedPCS's game, run to the end
    entries = _queries(out)
    registers = [e for e in entries if e["query"] == "register"]
    before, reg = registers[:3], registers[3:]  # the first ServerApp's registration, the resumed one's
    nodes = summary["backend_info"]["node_ids"]
    assert [e["node"] for e in before] == sorted(e["node"] for e in before)  # clients in Flower node-id order
    assert [e["node"] for e in reg] == nodes and [e["client"] for e in reg] == [0, 1, 2]
    assert [e["answer"]["fingerprint"] for e in reg] == [e["answer"]["fingerprint"] for e in before]  # each client's files
    assert len(set(nodes) - {e["node"] for e in before}) == 1  # the restarted node's new id
    # which node holds which folder: Flower draws node ids, so match each report to a folder by
    # the fingerprint of the files (computed here, in the test, which may read them)
    cfg = parse_recipe(fedpcs())
    folder = {load_silo(cfg, s["dir"]).fingerprint: s for s in silos}
    # the same clients in this process, never stopped: the same numbers
    whole, whole_out, _, _ = run_silo(tmp_path / "whole", fedpcs(), [folder[e["answer"]["fingerprint"]]["dir"] for e in before])
    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(whole_out / "metrics.csv"))
    assert summary["final_accuracy"] == whole["final_accuracy"] and summary["epsilon_per_client"] == whole["epsilon_per_client"]
    assert sorted(folder) == sorted(e["answer"]["fingerprint"] for e in reg)
    for e in reg:
        s = folder[e["answer"]["fingerprint"]]
        assert e["answer"]["n_examples"] == s["rows"] and e["answer"]["n_test"] == s["test_rows"]  # the CSV rows it holds
        assert e["answer"]["label_counts"] == s["histogram"]  # the labels the test wrote
    part = json.loads((out / "partition.json").read_text())
    assert part["sizes"] == [e["answer"]["n_examples"] for e in reg] and part["nodes"] == nodes
    assert {e["query"] for e in entries} == {"register", "train", "evaluate"}
    # the audit hook ran in the ServerApp and in the ClientApps; only the ClientApps opened silo files
    loaded = sorted(p.name for p in audit.glob("loaded-*"))
    assert any("flwr-serverapp" in n for n in loaded) and any("flwr-clientapp" in n for n in loaded), loaded
    opened = {p.name.rsplit("-", 1)[0]: p.read_text() for p in audit.glob("*.txt") if not p.name.startswith("loaded-")}
    assert opened and set(opened) == {"flwr-clientapp"}, opened
    assert "train.csv" in opened["flwr-clientapp"]

    # then PHS on the same SuperNodes: per-client budgets, loss probes of every silo, to the end,
    # with the numbers of the same clients' run in this process
    assert phs_run.returncode == 0 and (phs_out / "summary.json").exists(), f"{phs_run.stdout}\n{log[-4000:]}"
    phs_entries = _queries(phs_out)
    order = [folder[e["answer"]["fingerprint"]]["dir"] for e in phs_entries if e["query"] == "register"]
    assert len(json.loads((phs_out / "phs.json").read_text())["eps"]) == 3 and len(order) == 3
    assert sorted(e["client"] for e in phs_entries if e["query"] == "losses") == [0, 1, 2]
    ref, ref_out, _, _ = run_silo(tmp_path / "phs-here", phs(1), order)
    assert _untimed(_rows(phs_out / "metrics.csv")) == _untimed(_rows(ref_out / "metrics.csv"))
    assert json.loads((phs_out / "summary.json").read_text())["epsilon_per_client"] == ref["epsilon_per_client"]

    # then JDP-FL on the same SuperNodes: bids as queries, the validation set from the server's
    # own folder, to the end, with the numbers of the same clients in this process
    check_jdp_loopback(tmp_path, jdp_run, jdp_out, log, silos, server)


@needs_flower
@pytest.mark.slow
def test_a_supernode_without_its_data_dir_stops_the_run_in_one_line(tmp_path: Path) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    dirs = [s["dir"] for s in silos]
    dirs[2] = tmp_path / "silos" / "silo-gone"
    run, out, _, log, _ = _loopback(tmp_path, fedpcs(), dirs)
    error = (out / "error.txt").read_text()
    assert error.count("\n") == 1 and error.startswith("SiloRefused: silo nodes: node "), error
    assert f"data-dir '{dirs[2]}' does not exist" in error
    assert not (out / "summary.json").exists()
    assert f"data-dir '{dirs[2]}' does not exist" in run.stdout, run.stdout  # streamed to the user
    assert "Traceback" not in run.stdout, run.stdout
