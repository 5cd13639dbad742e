"""The QI-DPFL recipes for the paper's own datasets (EMNIST LeNet-5, CIFAR-10 CNN), which are
not on this machine, run end to end in a smoke setting on small files in their standard
formats that the test writes (what a user with the real files does, via data.root)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedgame.data import clear_cache
from fedgame.pipeline.config import load_recipe
from fedgame.pipeline.runner import run_one
from tests.data._formats import mnist_arrays, write_cifar10, write_mnist_dir

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "qidpfl"
SMOKE = ["data.partition={kind: iid, n_clients: 4}", "train.rounds=2", "train.local.batch_size=16", "train.eval_every=1"]


def _check(out: Path, rounds: int = 2) -> None:
    summary = json.loads((out / "summary.json").read_text())
    plan = json.loads((out / "qidpfl.json").read_text())
    assert summary["rounds"] == rounds and np.isfinite(summary["final_accuracy"])
    assert len(plan["kept"]) == 2 and len(plan["reward"]) == rounds and all(r > 0 for r in plan["reward"])


def test_emnist_lenet_recipe_runs_on_small_idx_files(tmp_path: Path) -> None:
    arr = mnist_arrays(np.random.default_rng(0), n_train=240, n_test=40, classes=62)
    write_mnist_dir(tmp_path / "emnist", arr, prefix="emnist-byclass-", test_word="test")
    clear_cache()
    cfg = load_recipe(RECIPES / "emnist.yaml", [*SMOKE, f"data.root={tmp_path / 'emnist'}"])
    assert cfg.model.name == "lenet5" and cfg.incentive.discount == 0.901
    run_one(cfg, tmp_path / "run")
    _check(tmp_path / "run")


def test_cifar10_cnn_recipe_runs_on_small_pickle_batches(tmp_path: Path) -> None:
    write_cifar10(tmp_path / "cifar" / "cifar-10-batches-py", np.random.default_rng(1), per_batch=24, n_test=20)
    clear_cache()
    cfg = load_recipe(RECIPES / "cifar10.yaml", [*SMOKE, f"data.root={tmp_path / 'cifar'}"])
    assert cfg.model.name == "qidpfl_cifar_cnn" and cfg.incentive.discount == 0.9664
    run_one(cfg, tmp_path / "run")
    _check(tmp_path / "run")


@pytest.mark.parametrize("name", ["emnist.yaml", "cifar10.yaml"])
def test_missing_files_name_what_to_put_where(tmp_path: Path, name: str) -> None:
    clear_cache()
    cfg = load_recipe(RECIPES / name, [*SMOKE, f"data.root={tmp_path}"])
    with pytest.raises(Exception, match=r"emnist-byclass-train-images|cifar-10-batches-py|data_batch"):
        run_one(cfg, tmp_path / "run")
