"""train.loss (fedgame.sim.losses): the binary log-loss on one logit through the local trainer's
paths (book-keeping DP-SGD against vmap per-example gradients), evaluation's accuracy and loss
against their closed form, the recipe's refusals, and a run on records of the tests' own."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer, evaluate, flat_params
from fedgame.sim.losses import LOSSES, make_loss


def _binary(n: int = 64, f: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    y = (x[:, 0] + 0.5 * torch.randn(n, generator=g) > 0).long()
    return x, y


def _model(f: int = 5) -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(f, 8), nn.ReLU(), nn.Linear(8, 1))


@pytest.mark.parametrize("name", ["cross_entropy", "bce_with_logits"])
def test_losses_are_registered(name: str) -> None:
    assert name in LOSSES.names()


def test_bce_book_keeping_dp_sgd_equals_per_example_gradients_from_vmap() -> None:
    x, y = _binary()
    spec = LocalSpec(batch_size=16, lr=0.1, epochs=1)
    dp = DPSGD(max_grad_norm=0.5, noise_multiplier=0.0, sampling="shuffle")
    results = {}
    for how in ("bk", "functorch"):
        model = _model()
        tr = LocalTrainer(model=model, x=x, y=y, spec=spec, per_example=how, loss=make_loss("bce_with_logits"))
        start = flat_params(model).clone()
        res = tr.train(start, torch.arange(64), torch.Generator().manual_seed(3), dp)
        results[how] = (res.params, res.train_loss, res.clipped_fraction)
    torch.testing.assert_close(results["bk"][0], results["functorch"][0], rtol=1e-5, atol=1e-6)
    assert results["bk"][1] == pytest.approx(results["functorch"][1], rel=1e-5)
    assert 0.0 < results["bk"][2] <= 1.0  # the clip bound bites for some examples


def test_bce_evaluation_is_the_closed_form() -> None:
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(0.0)
    x = torch.tensor([[1.0], [-1.0], [2.0]])
    y = torch.tensor([1, 1, 0])
    acc, loss = evaluate(model, flat_params(model), x, y, loss=make_loss("bce_with_logits"))
    # logits 1, -1, 2: right, wrong, wrong; log-loss softplus(-z) for y = 1, softplus(z) for y = 0
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0)) + math.log1p(math.exp(2.0))) / 3
    assert acc == pytest.approx(1 / 3) and loss == pytest.approx(expected, rel=1e-6)


def test_cross_entropy_is_unchanged_by_naming_it() -> None:
    x, y = _binary()
    out = []
    for loss in (None, make_loss("cross_entropy")):
        torch.manual_seed(4)
        model = nn.Sequential(nn.Linear(5, 2))
        kw = {} if loss is None else {"loss": loss}
        tr = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=8, lr=0.1, epochs=1), **kw)  # type: ignore[arg-type]
        out.append(tr.train(flat_params(model).clone(), torch.arange(64), torch.Generator().manual_seed(5)).params)
    assert torch.equal(out[0], out[1])


def test_recipe_refuses_an_unknown_loss_in_one_line() -> None:
    with pytest.raises(RecipeError, match=r"train.loss: unknown loss 'hinge'; choose from bce_with_logits, cross_entropy"):
        parse_recipe({"data": {"dataset": "fashion_mnist"}, "model": {"name": "logreg"}, "train": {"loss": "hinge"}})


def test_binary_records_train_with_bce_and_a_three_class_set_is_refused(tmp_path: Path) -> None:
    from fedgame.pipeline.build import build_data, check_model
    from fedgame.core.seeding import Streams
    from fedgame.pipeline.runner import run_one

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    y = (x[:, 1] > 0).astype(int)
    data = {"train": (x[:240], y[:240]), "test": (x[240:], y[240:]), "groups": {"site": rng.choice(["a", "b", "c"], 240)}}
    raw = {
        "data": {"dataset": "fashion_mnist", "partition": {"kind": "natural"}},
        "model": {"name": "mlp"},
        "train": {"loss": "bce_with_logits", "rounds": 2, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 16, "lr": 0.1}},
        "selection": {"kind": "uniform"},
        "aggregation": {"kind": "mean"},
    }
    summary = run_one(parse_recipe(raw), tmp_path / "run", data=data)
    assert 0.5 < summary["final_accuracy"] <= 1.0  # a separable task: better than a coin

    y3 = rng.integers(0, 3, 300)
    from fedgame.data import as_split

    split = as_split({"train": (x[:240], y3[:240]), "test": (x[240:], y3[240:]), "groups": {"site": rng.choice(["a", "b"], 240)}})
    cfg = parse_recipe(raw)
    fd = build_data(cfg, Streams(seed=0), split)
    with pytest.raises(ValueError, match=r"train.loss: 'bce_with_logits' fits binary labels \(2 classes\), the data has 3"):
        check_model(cfg, fd)


def test_regression_records_train_with_mse_and_report_the_test_mse(tmp_path: Path) -> None:
    """A CSV of numeric targets (task: regression) through a recipe: the MSE is test_loss, test_acc is NaN;
    a partition by class label, a classification loss and MSE on class labels are each refused in one line."""
    import csv as _csv

    from fedgame.core.seeding import Streams
    from fedgame.pipeline.build import build_data, check_model
    from fedgame.pipeline.runner import run_one

    rng = np.random.default_rng(3)
    with open(tmp_path / "houses.csv", "w", newline="") as f:
        w = _csv.writer(f)
        w.writerow(["rooms", "area", "age", "price"])
        for _ in range(400):
            rooms, area, age = rng.integers(1, 6), rng.uniform(30, 200), rng.uniform(0, 80)
            w.writerow([rooms, f"{area:.1f}", f"{age:.1f}", f"{0.5 * rooms + 0.02 * area - 0.01 * age + rng.normal(0, 0.1):.3f}"])
    raw = {
        "data": {
            "dataset": "csv",
            "root": str(tmp_path),
            "options": {"path": "houses.csv", "label": "price", "task": "regression"},
            "partition": {"kind": "iid", "n_clients": 4},
        },
        "model": {"name": "mlp"},
        "train": {
            "loss": "mse",
            "rounds": 4,
            "clients_per_round": 4,
            "eval_every": 1,
            "local": {"epochs": 2, "batch_size": 16, "lr": 0.01},
        },
        "selection": {"kind": "uniform"},
        "aggregation": {"kind": "mean"},
    }
    run_one(parse_recipe(raw), tmp_path / "run")
    import csv as c2

    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(c2.DictReader(f))
    first, last = float(rows[0]["test_loss"]), float(rows[-1]["test_loss"])
    assert math.isnan(float(rows[-1]["test_acc"])) and math.isfinite(last) and last < first  # the MSE falls
    for change, message in (
        (
            {"train": {**raw["train"], "loss": "cross_entropy"}},
            r"train.loss: 'cross_entropy' fits class labels, and this dataset is a regression \(float targets\); allowed: mse",
        ),
        (
            {"data": {**raw["data"], "partition": {"kind": "dirichlet", "n_clients": 4}}},
            r"data.partition.kind: 'dirichlet' splits by class label",
        ),
    ):
        cfg = parse_recipe({**raw, **change})
        with pytest.raises(ValueError, match=message):
            check_model(cfg, build_data(cfg, Streams(seed=0)))
    cls = parse_recipe({**raw, "data": {**raw["data"], "options": {"path": "houses.csv", "label": "rooms"}}})
    with pytest.raises(ValueError, match=r"train.loss: 'mse' fits regression targets \(float labels\), the data has 6 classes"):
        check_model(cls, build_data(cls, Streams(seed=0)))
