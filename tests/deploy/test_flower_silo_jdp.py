"""JDP-FL on silo data (``fedgame flower app --silo``): every node trains on its own files, the
auction runs on the bids the nodes answered, the winners' models stay on their nodes, and the
server's validation set (leave-one-out's M4 scores) is drawn from the server's own data folder
(``server-data``'s training split), never from a client's.

In this process, over a grid that calls the real ClientApp (:class:`SiloGrid`, fast):

* a JDP-FL run on three CSV silos (M1 auction on the nodes' bids, a dirty-label adversary among
  the winners, M3, leave-one-out M4 + M5) equals bit for bit the in-process run of the same
  clients' examples with the same validation examples and the same test set (``metrics.csv``
  but its timings, ``privacy.csv``, ``jdp.json``, final accuracy, ε per client); the bids in
  ``queries.jsonl`` are the nodes' answers, and only the winners trained;
* the exact reference: JDP-FL's in-process validation set is drawn from the training examples
  the partition then splits (``data.validation``), and a natural partition takes none; so the
  reference is ``build_jdp`` on an explicit :class:`FederatedDataset` whose training set is
  the three silos' examples followed by the server's, client i = silo i, and whose
  ``validation`` indexes the server examples the silo server drew (the ``validation`` stream);
* bad input, one line each: a personal rule without ``server-data`` (refused before any node is
  asked anything, and by ``fedgame flower app --silo``), server data without a training split,
  fewer server training examples than ``data.validation``, ``data.validation`` for a rule that
  scores nothing; a JDP-FL silo run cannot resume.

Over loopback, with real ``flower-superlink`` / ``flower-supernode`` processes (slow): the
JDP-FL silo app on three SuperNodes each with its own folder, one round, evaluation on
``server-data``'s test split, run by the loopback test of tests/deploy/test_flower_silo.py on
the federation its FedPCS and PHS runs use (one federation started, not two);
:func:`check_jdp_loopback` checks it: the query log has every node's registration and bid, and
the numbers are those of the same clients over :class:`SiloGrid`.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from fedgame.cli import app as cli  # noqa: E402
from fedgame.core.seeding import Streams  # noqa: E402
from fedgame.data import ArrayDataset, FederatedDataset  # noqa: E402
from fedgame.deploy.flower.server_app import SiloDeployment  # noqa: E402
from fedgame.deploy.flower.silo import SiloRefused  # noqa: E402
from fedgame.incentives.auctions import draw_costs  # noqa: E402
from fedgame.pipeline.build import build_jdp, load_silo  # noqa: E402
from fedgame.pipeline.config import parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from tests.deploy.test_flower_silo import (  # noqa: E402
    CSV_DATA,
    SiloGrid,
    _features,
    _labels,
    _queries,
    _rows,
    _untimed,
    _write_csv,
    run_silo,
    task_identity,  # noqa: F401 - the autouse fixture: messages need a task identity
    write_csv_silos,
)

SERVER_TRAIN, SERVER_TEST, VALIDATION = 40, 30, 30


def jdp_silo(rounds: int = 2, validation: int = VALIDATION, **jdp: Any) -> dict[str, Any]:
    """JDP-FL on the three CSV silos, smoke-sized: an M1 auction on the nodes' bids (budget 100
    recruits silos a and b: silo c's bid is too high), one dirty-label adversary among the
    winners, M3 at ε = 2, leave-one-out M4 + M5 scored on ``validation`` server examples."""
    return {
        "name": "silo_jdp",
        "seed": 3,
        "data": {**CSV_DATA, "validation": validation},
        "model": {"name": "mlp"},
        "train": {
            "rounds": rounds,
            "eval_every": 1,
            "threads": 1,
            "workers": 1,
            "local": {"epochs": 1, "batch_size": 16, "lr": 0.1},
        },
        "selection": {"kind": "full"},
        "privacy": {"kind": "jdp", "epsilon": 2.0, "delta": 1e-5, "clip": 1.0, "sensitivity": "record", "calibrator": "analytic"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "jdp": {
            "aggregator": "leave_one_out",
            "attack": {"kind": "dirty_label"},
            "auction": {"mechanism": "M1", "budget": 100, "cost_low": 1, "cost_high": 100},
            **jdp,
        },
    }


def write_server_data(d: Path, *, train: int = SERVER_TRAIN, test: int = SERVER_TEST, seed: int = 9) -> Path:
    """The server's own folder, laid out like a node's: ``train.csv`` (its validation
    examples are drawn from it) and ``test.csv`` (it evaluates on it)."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True)
    y, yt = _labels(train, (1, 1, 1), rng), _labels(test, (1, 1, 1), rng)
    _write_csv(d / "train.csv", _features(y, rng), y)
    if test:
        _write_csv(d / "test.csv", _features(yt, rng), yt)
    return d


def in_process_reference(raw: dict[str, Any], dirs: list[Path], server: Path, out: Path) -> dict[str, Any]:
    """The in-process JDP-FL run of the silos' examples, client i = ``dirs[i]``, scored on the
    server examples the silo server draws (``data.validation`` of its training split by the
    ``validation`` stream) and evaluated on its test split; each split loaded as the node
    (or the server) loads it, so the numbers are the same ones."""
    cfg = parse_recipe(raw)
    silos = [load_silo(cfg, d) for d in dirs]
    own = load_silo(cfg, server)
    xs = [s.train.x for s in silos] + [own.train.x]
    ys = [s.train.y for s in silos] + [own.train.y]
    offsets = np.cumsum([0, *(len(y) for y in ys)])
    n_own = len(own.train)
    drawn = np.sort(Streams(seed=cfg.seed).numpy("validation").permutation(n_own)[: cfg.data.validation])
    data = FederatedDataset(
        train=ArrayDataset(x=np.concatenate(xs), y=np.concatenate(ys), classes=own.train.classes, name="silos"),
        test=own.test,
        parts=tuple(np.arange(offsets[i], offsets[i + 1]) for i in range(len(silos))),
        validation=offsets[-2] + drawn,
    )
    summary: dict[str, Any] = run_one(cfg, out, build=lambda c: build_jdp(c, data=data))
    return summary


# -- in this process -------------------------------------------------------------------------
def test_a_jdp_silo_run_equals_the_in_process_run_of_the_same_clients(tmp_path: Path) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    dirs = [s["dir"] for s in silos]
    server = write_server_data(tmp_path / "server")
    raw = jdp_silo()
    # nodes join c, a, b with ids that sort a, b, c: client i is silo i
    summary, out, grid, _ = run_silo(tmp_path, raw, [dirs[2], dirs[0], dirs[1]], ids=[314, 300, 307], server_data=server)
    ref = in_process_reference(raw, dirs, server, tmp_path / "inprocess")

    jdp, ref_jdp = (json.loads((d / "jdp.json").read_text()) for d in (out, tmp_path / "inprocess"))
    assert jdp == ref_jdp  # the same auction, winners, adversary and payments
    assert jdp["winners"] == [0, 1] and jdp["adversary"] in jdp["winners"]  # silo c bid too high
    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(tmp_path / "inprocess" / "metrics.csv"))
    assert _rows(out / "privacy.csv") == _rows(tmp_path / "inprocess" / "privacy.csv")
    assert summary["final_accuracy"] == ref["final_accuracy"] and summary["epsilon_per_client"] == ref["epsilon_per_client"]
    rows = _rows(out / "metrics.csv")
    assert [r["aggregator"] for r in rows] == ["leave_one_out"] * 2 and all(r["scores"] for r in rows)  # M4 scored

    entries = _queries(out)
    bids = sorted((e for e in entries if e["query"] == "bid"), key=lambda e: e["client"])
    cfg = parse_recipe(raw)
    truthful = draw_costs(Streams(seed=cfg.seed), 3, low=1, high=100).tolist()
    assert [e["answer"] for e in bids] == jdp["costs"] == truthful  # the auction ran on what the nodes bid
    assert [e["node"] for e in bids] == [300, 307, 314] and all(e["round"] is None for e in bids)
    for t in range(2):  # every winner's upload and acknowledgement, and nobody else's
        for what in ("train.jdp", "train.jdp_publish"):
            assert sorted(e["client"] for e in entries if e["query"] == what and e["round"] == t) == [0, 1]
    uploads = [e["answer"]["upload"] for e in entries if e["query"] == "train.jdp"]
    assert uploads and all(re.fullmatch(r"\d+ floats", u) for u in uploads)  # the size of each upload, not the upload
    assert grid.sent == {"query.register": 3, "query.bid": 3, "train.jdp": 4, "train.jdp_publish": 4}  # evaluated on the server
    kept = sorted(node for node, ctx in grid.contexts.items() if "fedgame-jdp" in ctx.state)
    assert kept == [300, 307]  # each winner's model on its own node; the loser never trained
    info = summary["backend_info"]
    assert info["silo"] is True and info["evaluation"] == "server" and info["errors"] == [] and info["queries"] == {"bid": 3}
    part = json.loads((out / "partition.json").read_text())
    assert part["nodes"] == [300, 307, 314] and part["server_validation"] == VALIDATION


def _npz(d: Path, n: int, n_test: int, rng: np.random.Generator) -> Path:
    d.mkdir(parents=True)
    y, yt = _labels(n, (1, 1, 1), rng), _labels(n_test, (1, 1, 1), rng) if n_test else np.zeros(0, np.int64)
    np.savez(d / "data.npz", x_train=_features(y, rng), y_train=y, x_test=_features(yt, rng), y_test=yt)
    return d


def test_random_groups_on_silos_scores_on_the_whole_server_training_split(tmp_path: Path) -> None:
    """``random_groups`` (groups of one of the two winners) with ``data.validation`` = the
    server's whole training split, and server data without a test split: the server scores on
    its own examples and evaluation is federated, each node on its own held-out split."""
    rng = np.random.default_rng(2)
    dirs: list[Path | str | None] = [_npz(tmp_path / "silos" / f"silo-{i}", n, 8, rng) for i, n in enumerate((40, 25, 60))]
    server = _npz(tmp_path / "server", SERVER_TRAIN, 0, rng)
    raw = jdp_silo(rounds=1, validation=SERVER_TRAIN, aggregator="random_groups", group_size=1)
    raw["data"] = {**raw["data"], "dataset": "npz", "options": {"path": "data.npz", "classes": 3}}
    summary, out, grid, _ = run_silo(tmp_path, raw, dirs, server_data=server)
    assert summary["backend_info"]["evaluation"] == "federated" and np.isfinite(summary["final_accuracy"])
    assert grid.sent["evaluate"] == 3 and json.loads((out / "partition.json").read_text())["server_validation"] == SERVER_TRAIN
    assert _rows(out / "metrics.csv")[0]["aggregator"] == "random_groups"
    evaluated = sorted((e for e in _queries(out) if e["query"] == "evaluate"), key=lambda e: e["client"])
    n = sum(e["answer"]["num_examples"] for e in evaluated)
    assert n == 24 and summary["final_accuracy"] == sum(e["answer"]["accuracy"] * e["answer"]["num_examples"] for e in evaluated) / n


def _npz_without_training_split(d: Path) -> Path:
    d.mkdir(parents=True)
    np.savez(
        d / "data.npz",
        x_train=np.zeros((0, 4), np.float32),
        y_train=np.zeros(0, np.int64),
        x_test=np.ones((3, 4), np.float32),
        y_test=np.arange(3),
    )
    return d


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "no_server_data",
            r"^server-data: jdp\.aggregator 'leave_one_out' scores the groups on a server validation set \(data\.validation = 30 "
            r"examples\), and a silo server holds no client example to draw it from: give the server a data folder of its own "
            r"with a training split \(fedgame flower app --silo --server-data DIR\)$",
        ),
        (
            "no_train_csv",
            r"^server-data: data\.options\.path: no such file '[^']*/server/train\.csv'; its training split holds the server's validation set",
        ),
        ("empty_train", r"^server-data: \S+: needs at least one training example; its training split holds the server's validation set"),
        (
            "too_few",
            r"^data\.validation: the silo server draws its validation set from the training split of server-data '[^']*', which has 40 examples; must be <= 40, got 41$",
        ),
        (
            "fedavg",
            r"^data\.validation: a silo server holds no client example to set aside, got 30; allowed: 0 \(only JDP-FL's leave_one_out and random_groups",
        ),
    ],
)
def test_bad_jdp_silo_input_is_one_line(tmp_path: Path, case: str, message: str) -> None:
    silos = write_csv_silos(tmp_path / "silos")
    raw, server = jdp_silo(), None
    if case == "no_train_csv":
        server = write_server_data(tmp_path / "server")
        (server / "train.csv").unlink()
    elif case == "empty_train":
        server = _npz_without_training_split(tmp_path / "server")
        raw["data"] = {**raw["data"], "dataset": "npz", "options": {"path": "data.npz", "classes": 3}}
    elif case == "too_few":
        server = write_server_data(tmp_path / "server")
        raw = jdp_silo(validation=SERVER_TRAIN + 1)
    elif case == "fedavg":
        server = write_server_data(tmp_path / "server")
        raw = jdp_silo(aggregator="fedavg")
    cfg = parse_recipe(raw)
    grid = SiloGrid(cfg, [s["dir"] for s in silos], [300, 307, 314])
    dep = SiloDeployment(grid, out=tmp_path / "out", server_data=None if server is None else str(server), register_timeout=5)
    with pytest.raises(SiloRefused) as e:
        dep.build(cfg)
    assert "\n" not in str(e.value)
    assert re.search(message, str(e.value)), str(e.value)
    assert grid.sent == {}  # refused before any node was asked anything


def test_the_cli_writes_a_jdp_silo_app_only_with_server_data(tmp_path: Path) -> None:
    recipe = tmp_path / "jdp.yaml"
    recipe.write_text(yaml.safe_dump(jdp_silo()))
    r = CliRunner().invoke(cli, ["flower", "app", str(recipe), str(tmp_path / "app"), "--silo"])
    assert r.exit_code != 0 and "server-data: jdp.aggregator 'leave_one_out' scores the groups" in " ".join(r.output.split())
    r = CliRunner().invoke(cli, ["flower", "app", str(recipe), str(tmp_path / "app"), "--silo", "--server-data", str(tmp_path / "srv")])
    assert r.exit_code == 0, r.output
    toml = (tmp_path / "app" / "pyproject.toml").read_text()
    assert "silo = true" in toml and f'server-data = "{tmp_path / "srv"}"' in toml
    fmnist = Path(__file__).resolve().parents[2] / "recipes" / "jdp" / "fmnist.yaml"  # the paper's recipe deploys on silos too
    r = CliRunner().invoke(cli, ["flower", "app", str(fmnist), str(tmp_path / "app2"), "--silo", "--server-data", str(tmp_path / "srv")])
    assert r.exit_code == 0 and "40 clients" in r.output, r.output


def test_a_jdp_silo_run_cannot_resume(tmp_path: Path) -> None:
    """The winners' models are on their nodes, not in the server's checkpoint: a resumed JDP-FL
    silo run stops with the one-line refusal of every JDP-FL run on Flower."""
    silos = write_csv_silos(tmp_path / "silos")
    server = write_server_data(tmp_path / "server")
    cfg = parse_recipe(jdp_silo())
    dirs = [s["dir"] for s in silos]
    out = tmp_path / "run"

    class Killed(Exception):
        pass

    def die_after_round_0(record: dict[str, Any]) -> None:
        raise Killed

    first = SiloDeployment(SiloGrid(cfg, dirs, [300, 307, 314]), out=out, server_data=str(server), register_timeout=5)
    with pytest.raises(Killed):
        run_one(cfg, out, execute=first, build=first.build, resume=False, on_round=die_after_round_0)
    assert (out / "checkpoint.pt").exists()
    second = SiloDeployment(SiloGrid(cfg, dirs, [300, 307, 314]), out=out, server_data=str(server), register_timeout=5, resume=True)
    with pytest.raises(RuntimeError, match=r"^resume: a JDP-FL run on Flower keeps every winner's model on its node.*cannot resume"):
        run_one(cfg, out, execute=second, build=second.build, resume=True)


def check_jdp_loopback(
    tmp_path: Path, run: subprocess.CompletedProcess[str], out: Path, log: str, silos: list[dict[str, Any]], server: Path
) -> None:
    """What the JDP-FL silo app (``jdp_silo(rounds=2)``, ``--server-data server``) must show
    after running on three real SuperNodes, one per silo (run by the loopback test of
    tests/deploy/test_flower_silo.py, on the federation its FedPCS and PHS runs use): it ran to
    the end; ``queries.jsonl`` has every node's registration and bid; the bids are the auction's
    costs and in each round only the winners trained; and the numbers of both rounds are those
    of the same clients over the in-process grid, so each winner's model lived in its SuperNode's
    context between rounds although Flower starts a fresh ClientApp process per message. (The
    audit of who opened a silo file covers every run of that federation.)"""
    raw = jdp_silo(rounds=2)
    assert run.returncode == 0 and (out / "summary.json").exists(), f"{run.stdout}\n{log[-4000:]}"
    summary = json.loads((out / "summary.json").read_text())
    info = summary["backend_info"]
    assert summary["backend"] == "flower" and info["silo"] and info["evaluation"] == "server" and info["errors"] == []
    assert info["queries"] == {"bid": 3} and np.isfinite(summary["final_accuracy"])
    entries = _queries(out)
    nodes = info["node_ids"]
    for what in ("register", "bid"):  # bids are listed as they arrive
        got = sorted((e for e in entries if e["query"] == what), key=lambda e: e["client"])
        assert [e["node"] for e in got] == nodes and [e["client"] for e in got] == [0, 1, 2], got
    jdp = json.loads((out / "jdp.json").read_text())
    assert [e["answer"] for e in sorted((e for e in entries if e["query"] == "bid"), key=lambda e: e["client"])] == jdp["costs"]
    for t in (0, 1):  # each round: the winners train from the model their node keeps, then publish
        trained = sorted(e["client"] for e in entries if e["query"] == "train.jdp" and e["round"] == t)
        published = sorted(e["client"] for e in entries if e["query"] == "train.jdp_publish" and e["round"] == t)
        assert trained == jdp["winners"] and published == trained, (t, trained, published)
    # the same clients (by their files' fingerprints) over the in-process grid: the same numbers
    cfg = parse_recipe(raw)
    folder = {load_silo(cfg, s["dir"]).fingerprint: s["dir"] for s in silos}
    order = [folder[e["answer"]["fingerprint"]] for e in entries if e["query"] == "register"]
    ref, ref_out, _, _ = run_silo(tmp_path / "here", raw, order, server_data=server)
    assert _untimed(_rows(out / "metrics.csv")) == _untimed(_rows(ref_out / "metrics.csv"))
    assert summary["final_accuracy"] == ref["final_accuracy"] and summary["epsilon_per_client"] == ref["epsilon_per_client"]
