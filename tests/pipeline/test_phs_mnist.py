"""The Table III path on MNIST, which is not on this machine: recipes/phs/mnist.yaml run end to
end, through ``run_one`` and through ``fedgame run``, on small MNIST IDX files written into a
temporary folder that ``data.root`` points at (what a user with the real files does)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.data import clear_cache
from fedgame.pipeline.config import load_recipe
from fedgame.pipeline.runner import run_one
from tests.data._formats import mnist_arrays, write_mnist_dir

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "phs" / "mnist.yaml"
SMOKE = [
    "data.partition.n_clients=6",
    "train.clients_per_round=2",
    "train.rounds=2",
    "train.local.steps=1",
    "train.local.batch_size=32",
    "train.eval_every=1",
]


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 train / 100 test random 28×28 images with balanced labels, gzipped IDX files in a
    ``mnist/`` subfolder (as a torchvision-style download would leave them)."""
    root = tmp_path_factory.mktemp("data")
    write_mnist_dir(root / "mnist", mnist_arrays(np.random.default_rng(0), n_train=600, n_test=100))
    clear_cache()
    return root


def _check_run(out: Path, *, n_clients: int = 6) -> None:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["name"] == "phs_privacy_aware" and summary["rounds"] == 2
    assert 0.0 <= summary["final_accuracy"] <= 1.0
    with (out / "privacy.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n_clients
    for r in rows:
        budget, pld = float(r["eps_budget"]), float(r["eps_pld"])
        assert 0 < budget < 1 and 0 <= pld <= budget  # 0 for a client never selected
    assert any(int(r["steps_done"]) > 0 and float(r["eps_pld"]) > 0 for r in rows)
    phs = json.loads((out / "phs.json").read_text())
    assert len(phs["p_s"]) == n_clients and sum(phs["p_s"]) == pytest.approx(1.0, abs=1e-9)
    assert sum(phs["T_k"]) == 2 * 2  # rounds × clients per round


def test_mnist_recipe_runs_end_to_end(mnist_root: Path, tmp_path: Path) -> None:
    cfg = load_recipe(RECIPE, [f"data.root={mnist_root}", *SMOKE])
    assert cfg.data.dataset == "mnist" and cfg.model.name == "phs_mnist_cnn" and cfg.selection.kind == "phs"
    run_one(cfg, tmp_path / "run")
    _check_run(tmp_path / "run")


def test_the_users_command_works(mnist_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    sets = [a for kv in [f"data.root={mnist_root}", *SMOKE] for a in ("--set", kv)]
    res = CliRunner().invoke(app, ["run", str(RECIPE), *sets, "--out", str(out)])
    assert res.exit_code == 0, res.output
    _check_run(out)


def test_a_missing_mnist_folder_says_where_to_point(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(RECIPE),
            "--set",
            f"data.root={tmp_path / 'nowhere'}",
            *[a for kv in SMOKE for a in ("--set", kv)],
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert res.exit_code == 2
    assert "mnist" in res.output and "train-images-idx3-ubyte" in res.output
