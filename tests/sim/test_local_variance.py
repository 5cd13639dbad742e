"""σ_L² (DELTA's local variance, fedpcs.md §5.4-4) as the trainer measures it, checked against
mini-batch gradients computed directly, and reaching DELTA through the engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedgame.core.types import LOCAL_GRAD_VARIANCE
from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import parse_recipe
from fedgame.sim.local import LocalSpec, LocalTrainer

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def _setup(lr: float) -> tuple[LocalTrainer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, y = torch.randn(200, 6), torch.randint(0, 3, (200,))
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    trainer = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=16, lr=lr, epochs=None, steps=7))
    start = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    return trainer, start, torch.arange(200)


def _batch_grads(trainer: LocalTrainer, start: torch.Tensor, batches: list[torch.Tensor]) -> torch.Tensor:
    params = list(trainer.model.parameters())
    out = []
    for b in batches:
        nn.utils.vector_to_parameters(start.clone(), params)
        trainer.model.zero_grad()
        nn.functional.cross_entropy(trainer.model(trainer.x[b]), trainer.y[b]).backward()
        out.append(torch.cat([p.grad.reshape(-1) for p in params]).double())
    return torch.stack(out)


def test_variance_matches_direct_minibatch_gradients_at_a_fixed_model() -> None:
    """lr = 0 keeps w fixed, so the g_b are i.i.d. draws and σ_L² is their sample variance."""
    trainer, start, idx = _setup(lr=0.0)
    res = trainer.train(start, idx, torch.Generator().manual_seed(3), grad_variance=True)
    batches = trainer._batches(idx, torch.Generator().manual_seed(3), 7)
    g = _batch_grads(trainer, start, batches)
    expect = float(((g - g.mean(0)) ** 2).sum(1).sum() / (len(batches) - 1))
    assert res.grad_variance == pytest.approx(expect, rel=1e-9)
    assert res.grad_variance > 0


def test_variance_is_off_by_default_and_needs_two_steps() -> None:
    trainer, start, idx = _setup(lr=0.1)
    assert trainer.train(start, idx, torch.Generator().manual_seed(0)).grad_variance is None
    one = LocalTrainer(model=trainer.model, x=trainer.x, y=trainer.y, spec=LocalSpec(batch_size=16, lr=0.1, epochs=None, steps=1))
    assert one.train(start, idx, torch.Generator().manual_seed(0), grad_variance=True).grad_variance is None


def test_measuring_variance_does_not_change_training() -> None:
    trainer, start, idx = _setup(lr=0.1)
    a = trainer.train(start, idx, torch.Generator().manual_seed(5))
    b = trainer.train(start, idx, torch.Generator().manual_seed(5), grad_variance=True)
    assert torch.equal(a.params, b.params)


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_delta_receives_local_variance_through_the_engine() -> None:
    cfg = parse_recipe(
        {
            "name": "delta-smoke",
            "seed": 0,
            "data": {
                "dataset": "fashion_mnist",
                "max_train": 1000,
                "max_test": 200,
                "partition": {"kind": "dirichlet", "n_clients": 8, "alpha": 0.5, "min_size": 20},
            },
            "model": {"name": "logreg"},
            "train": {"rounds": 2, "clients_per_round": 4, "local": {"epochs": None, "steps": 3, "batch_size": 16, "lr": 0.1}},
            "selection": {"kind": "delta"},
            "aggregation": {"kind": "importance"},
        }
    )
    engine = build_engine(cfg).engine
    engine.run(2)
    sigma2, seen = engine.selection._sigma2, engine.selection._seen
    assert seen.any() and np.all(sigma2[seen] > 0) and np.all(sigma2[~seen] == 0)
    uniform = parse_recipe({**cfg.model_dump(mode="json"), "selection": {"kind": "uniform"}, "aggregation": {"kind": "importance"}})
    assert LOCAL_GRAD_VARIANCE not in build_engine(uniform).engine.selection.needs
