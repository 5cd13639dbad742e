"""A client whose local training diverges (a non-finite displacement) uploads a zero
displacement, privatised as usual: the run goes on, the round's ``diverged`` column names the
client, its ledger is charged, and what it sends is exactly the upload mechanism's noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgame.core.types import DIVERGED
from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import parse_recipe
from fedgame.sim import InProcessExecutor, run_client_job

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def recipe(lr: float, privacy: dict[str, object] | None = None) -> dict[str, object]:
    """A two-layer MLP: at lr 100 two epochs of plain SGD overflows to NaN; at 0.05 it does not."""
    return {
        "name": "diverge",
        "seed": 3,
        "data": {"dataset": "fashion_mnist", "max_train": 1200, "max_test": 100, "partition": {"kind": "iid", "n_clients": 6}},
        "model": {"name": "mlp"},
        "train": {"rounds": 1, "clients_per_round": 3, "local": {"epochs": 2, "batch_size": 32, "lr": lr}},
        "selection": {"kind": "uniform", "replace": False},
        "privacy": privacy or {"kind": "zcdp_upload", "rho": 1.0},
        "accountant": {"kind": "zcdp"},
        "aggregation": {"kind": "fedavg"},
    }


def test_a_diverged_client_sends_the_mechanisms_noise_and_is_charged() -> None:
    eng = build_engine(parse_recipe(recipe(lr=100.0))).engine
    assert isinstance(eng.executor, InProcessExecutor)
    ex = eng.executor
    job = eng.job(0, 0, 0)
    assert job.upload is not None and job.upload.noise_std > 0
    res = run_client_job(job, trainer=ex.trainer, indices=ex.parts[0], streams=ex.streams)
    assert res.extras[DIVERGED] == 1.0
    u = res.update.double()
    assert torch.isfinite(u).all()
    # a zero displacement plus N(0, σ²) in each of ~2·10⁵ coordinates: mean 0, std σ (to 1 %)
    sd = job.upload.noise_std
    assert abs(float(u.mean())) < 5 * sd / math.sqrt(u.numel())
    assert float(u.std()) == pytest.approx(sd, rel=0.01)

    out = eng.run(1)
    rec = out.records[0]
    selected = sorted(set(json.loads(rec["selected"])))
    assert json.loads(rec["diverged"]) == selected and json.loads(rec["missing"]) == []
    assert torch.isfinite(out.params).all()
    eps = np.asarray(out.epsilons)
    assert (eps[selected] > 0).all()  # the withheld-data reading would leak: the client is charged
    assert math.isnan(rec["train_loss"])  # no finite local loss to report this round


def test_a_run_that_does_not_diverge_lists_no_one() -> None:
    out = build_engine(parse_recipe(recipe(lr=0.05))).engine.run(1)
    assert json.loads(out.records[0]["diverged"]) == []
    assert math.isfinite(out.records[0]["train_loss"])


def test_without_an_upload_mechanism_a_diverged_client_moves_nothing() -> None:
    eng = build_engine(parse_recipe(recipe(lr=100.0, privacy={"kind": "none"}))).engine
    start = eng.params.clone()
    out = eng.run(1)
    assert json.loads(out.records[0]["diverged"])
    assert torch.equal(out.params, start)  # every selected client diverged: zero displacements
