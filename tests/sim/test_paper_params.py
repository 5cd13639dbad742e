"""``zcdp_upload`` in ``mode: paper_params`` (FedPCS Prop. 1 / Eq. 46 read literally, NbAFL): the
client clips its local model's whole parameter vector to norm W and adds N(0, σ² I) with
σ = √2 W / (|D_i| √ρ); the server receives w̃_i − w(t). Checked through the engine's own jobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import parse_recipe
from fedgame.sim import InProcessExecutor, run_client_job

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def engine(clip: float, rho: float, mode: str = "paper_params"):  # type: ignore[no-untyped-def]
    raw = {
        "name": "params",
        "seed": 5,
        "data": {"dataset": "fashion_mnist", "max_train": 1200, "max_test": 100, "partition": {"kind": "iid", "n_clients": 6}},
        "model": {"name": "mlp"},
        "train": {"rounds": 1, "clients_per_round": 2, "workers": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.05}},
        "privacy": {"kind": "zcdp_upload", "rho": rho, "clip": clip, "mode": mode},
        "accountant": {"kind": "zcdp"},
    }
    return build_engine(parse_recipe(raw)).engine


def _upload(eng, client: int = 0):  # type: ignore[no-untyped-def]
    ex = eng.executor
    assert isinstance(ex, InProcessExecutor)
    job = eng.job(0, client, 0)
    res = run_client_job(job, trainer=ex.trainer, indices=ex.parts[client], streams=ex.streams)
    trained = ex.trainer.train(job.params, ex.parts[client], ex.streams.torch("train", 0, client, 0), job.dpsgd).params
    return job, res.update, trained


def test_the_model_is_clipped_to_w_and_noised_on_its_parameters() -> None:
    # almost no noise (ρ huge): the received model w(t) + update is the trained model scaled to norm W
    eng = engine(clip=1.0, rho=1e6)
    job, update, trained = _upload(eng)
    assert job.upload is not None and job.upload.on == "params" and job.upload.clip == 1.0
    received = job.params + update
    assert float(trained.norm()) > 1.0  # so the clip binds
    expected = trained / float(trained.norm())
    assert torch.allclose(received, expected, atol=1e-4)
    # with noise: w̃ − clip(w) has std σ = √2 W / (|D_i| √ρ) in every coordinate (to 1 %)
    eng = engine(clip=2.0, rho=0.5)
    job, update, trained = _upload(eng)
    n = int(eng.executor.parts[0].numel())
    sigma = math.sqrt(2.0) * 2.0 / (n * math.sqrt(0.5))
    assert job.upload is not None and job.upload.noise_std == pytest.approx(sigma, rel=1e-12)
    noise = (job.params + update - trained * min(1.0, 2.0 / float(trained.norm()))).double()
    assert float(noise.std()) == pytest.approx(sigma, rel=0.01)
    assert abs(float(noise.mean())) < 5 * sigma / math.sqrt(noise.numel())


def test_paper_update_still_clips_the_displacement() -> None:
    eng = engine(clip=1.0, rho=1e6, mode="paper_update")
    job, _, _ = _upload(eng)
    assert job.upload is not None and job.upload.on == "update"
    assert eng.privacy.accounting == "paper accounting" and engine(1.0, 1.0).privacy.accounting == "paper accounting"
