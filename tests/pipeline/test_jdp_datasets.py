"""The JDP-FL recipes for the paper's own datasets, which are not on this machine: MNIST (Fig. 3a)
and CIFAR-10 (Fig. 3b, smoke setting) run end to end on small files in their standard formats
that the test writes (what a user with the real files points ``data.root`` at)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgame.data import clear_cache
from fedgame.pipeline.build import build_jdp
from fedgame.pipeline.config import load_recipe
from fedgame.pipeline.runner import run_one
from tests.data._formats import mnist_arrays, write_cifar10, write_mnist_dir

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "jdp"
SMOKE = [
    "data.partition.n_clients=4",
    "data.validation=40",
    "train.rounds=2",
    "train.local.epochs=null",
    "train.local.steps=2",
    "train.local.batch_size=16",
]


def _check(out: Path, eps: float) -> None:
    s = json.loads((out / "summary.json").read_text())
    assert s["rounds"] == 2 and 0 <= s["final_accuracy"] <= 1 and s["m"] == 4
    assert s["adversary"] in s["winners"]
    assert s["eps_paper_max"] == pytest.approx(2 * (eps + eps))


def test_mnist_recipe_on_idx_files(tmp_path: Path) -> None:
    write_mnist_dir(tmp_path / "mnist", mnist_arrays(np.random.default_rng(0), n_train=400, n_test=60))
    clear_cache()
    cfg = load_recipe(RECIPES / "mnist.yaml", [*SMOKE, f"data.root={tmp_path / 'mnist'}"])
    assert cfg.model.name == "jdp_mnist_cnn" and cfg.privacy.clip == 20  # type: ignore[union-attr]
    built = build_jdp(cfg)
    adv = torch.as_tensor(built.data.parts[built.adversary])  # type: ignore[index]
    assert bool((built.engine.trainer.y[adv] == 2).all())  # MNIST target: digit 2
    run_one(cfg, tmp_path / "run")
    _check(tmp_path / "run", 1.0)


def test_cifar10_recipe_on_pickle_batches(tmp_path: Path) -> None:
    write_cifar10(tmp_path / "cifar" / "cifar-10-batches-py", np.random.default_rng(1), per_batch=40, n_test=20)
    clear_cache()
    # 40 examples per client make record-level noise 2C/d_i huge: a loose eps keeps the smoke run finite
    cfg = load_recipe(RECIPES / "cifar10.yaml", [*SMOKE, f"data.root={tmp_path / 'cifar'}", "privacy.epsilon=1000"])
    assert cfg.model.name == "jdp_cifar_cnn" and cfg.privacy.clip == 50  # type: ignore[union-attr]
    built = build_jdp(cfg)
    adv = torch.as_tensor(built.data.parts[built.adversary])  # type: ignore[index]
    assert bool((built.engine.trainer.y[adv] == 3).all())  # CIFAR-10 target: cat
    run_one(cfg, tmp_path / "run")
    _check(tmp_path / "run", 1000.0)
