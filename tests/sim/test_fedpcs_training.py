"""FedPCS training end to end on real Fashion-MNIST in smoke settings (spec §3.12 and §6
checks 9-11, 14): the game's ρ_i^t drive sampling, noise, ledger and payments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


@pytest.fixture(autouse=True)
def _game_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))


def fedpcs(**over: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "name": "fedpcs-smoke",
        "seed": 0,
        "data": {"dataset": "fashion_mnist", "max_train": 1500, "max_test": 300, "partition": {"kind": "iid", "n_clients": 10}},
        "model": {"name": "logreg"},
        "train": {"rounds": 3, "clients_per_round": 4, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        "selection": {"kind": "privacy_aware"},
        "aggregation": {"kind": "importance"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "fedpcs", "n_starts": 2},
    }
    raw.update(over)
    return raw


def test_same_seed_same_samples_noise_and_model_different_seed_differs() -> None:
    runs = [build_engine(parse_recipe({**fedpcs(), "seed": s})).engine.run(3) for s in (0, 0, 1)]
    assert torch.equal(runs[0].params, runs[1].params)
    assert [r["selected"] for r in runs[0].records] == [r["selected"] for r in runs[1].records]
    assert not torch.equal(runs[0].params, runs[2].params)
    assert [r["selected"] for r in runs[0].records] != [r["selected"] for r in runs[2].records]


def test_ledger_payments_and_draws_follow_the_game() -> None:
    built = build_engine(parse_recipe(fedpcs()))
    plan = built.plan
    assert plan is not None and plan.converged
    res = built.engine.run(3)
    total = np.zeros(10)
    for t, rec in enumerate(res.records):
        drawn = np.array(json.loads(rec["selected"]))
        assert drawn.size == 4  # K draws with replacement
        distinct = np.unique(drawn)
        total[distinct] += plan.rho[distinct, t]  # a client drawn twice uploads once (spec §3.2)
        assert rec["payments"] == pytest.approx(plan.reward[t] * plan.rho[distinct, t].sum(), rel=1e-12)
        assert rec["budget_used"] == pytest.approx(plan.rho[distinct, t].sum(), rel=1e-12)
    np.testing.assert_allclose(built.engine.accountant.rhos(), total, rtol=1e-12)


def test_sampling_probabilities_are_the_normalised_game_budgets() -> None:
    from fedgame.core.types import RoundState

    built = build_engine(parse_recipe(fedpcs()))
    eng, plan = built.engine, built.plan
    assert plan is not None
    for t in range(3):
        x = eng.selection.probabilities(RoundState(t=t, k=4, sizes=eng.sizes, theta=eng.theta))
        np.testing.assert_allclose(x, plan.rho[:, t] / plan.rho[:, t].sum(), rtol=1e-12)


def test_paper_update_noise_is_sigma_in_pseudo_gradient_units() -> None:
    """Check 9 in parameter space: the displacement's noise is η_eff σ_i(t),
    σ_i(t) = sqrt(2) W / (|D_i| sqrt(ρ_i^t)), η_eff = lr × local steps."""
    built = build_engine(parse_recipe(fedpcs()))
    plan, priv = built.plan, built.engine.privacy
    assert plan is not None
    n = int(built.data.sizes[3])
    eta_eff = 0.1 * int(np.ceil(n / 32))
    mech = priv.upload(3, 1, n)
    sigma = np.sqrt(2) * 1.0 / (n * np.sqrt(plan.rho[3, 1]))
    assert mech.noise_std == pytest.approx(eta_eff * sigma, rel=1e-12)
    out = mech.privatize(torch.zeros(1_000_000, dtype=torch.float64), torch.Generator().manual_seed(0))
    assert abs(out.std().item() / (eta_eff * sigma) - 1) < 0.005
    assert abs(out.mean().item()) < 4 * eta_eff * sigma / 1000


def test_exact_mode_sensitivity_is_2w_over_n() -> None:
    """Check 11: one full-batch step of per-example-clipped gradients; replacing one example
    moves the pre-noise displacement by at most lr · 2W/|D|."""
    from fedgame.models import build_model

    gen = torch.Generator().manual_seed(0)
    x = 5 * torch.randn(64, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)
    model = build_model("mlp", in_shape=(1, 28, 28), num_classes=10, seed=0)
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    lr, W = 0.3, 0.5
    dp = DPSGD(max_grad_norm=W, noise_multiplier=0.0, sampling="shuffle")
    worst = 0.0
    for j in range(5):
        x2, y2 = x.clone(), y.clone()
        x2[j], y2[j] = -5 * torch.randn(1, 28, 28, generator=gen), (y[j] + 1 + j) % 10
        outs = []
        for xs, ys in ((x, y), (x2, y2)):
            tr = LocalTrainer(model=model, x=xs, y=ys, spec=LocalSpec(batch_size=64, lr=lr, steps=1))
            outs.append(tr.train(start, torch.arange(64), torch.Generator().manual_seed(1), dp).params)
        worst = max(worst, float((outs[0] - outs[1]).norm()))
    bound = lr * 2 * W / 64
    assert 0.2 * bound < worst <= bound * (1 + 1e-5)


def test_exact_mode_runs_and_is_a_formal_guarantee() -> None:
    raw = fedpcs(
        privacy={"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "exact"},
        train={"rounds": 2, "clients_per_round": 3, "local": {"epochs": None, "steps": 1, "batch_size": 1000, "lr": 0.5}},
    )
    built = build_engine(parse_recipe(raw))
    assert built.engine.privacy.accounting == "formal"
    res = built.engine.run(2)
    assert np.isfinite(res.records[-1]["test_acc"])


def test_adaptive_budget_sets_k_per_round() -> None:
    raw = fedpcs(incentive={"kind": "fedpcs", "n_starts": 2, "budget": {"start": 60, "end": 20}})
    built = build_engine(parse_recipe(raw))
    plan = built.plan
    assert plan is not None
    res = built.engine.run(3)
    for t, rec in enumerate(res.records):
        assert len(json.loads(rec["selected"])) == plan.K[t]
        assert rec["budget"] == pytest.approx(60 - 40 * t / 2)
    # Theorem 7's integer rule (spec §3.10): K_t = clip(floor(B_t/ρ*_t), 1, N), K_t ρ*_t <= B_t.
    # (τ(t) need not fall with B_t: ρ*_t falls with the mean field too.)
    rho_star = np.asarray(plan.extras["rho_star"])
    np.testing.assert_array_equal(plan.K, np.clip(np.floor(plan.budget / rho_star), 1, 10))
    assert np.all(plan.K * rho_star <= plan.budget + 1e-9)


def test_random_baseline_draws_uniformly_under_its_own_game() -> None:
    raw = fedpcs(selection={"kind": "uniform", "replace": True}, incentive={"kind": "fedpcs", "inclusion": "uniform", "n_starts": 2})
    built = build_engine(parse_recipe(raw))
    assert built.plan is not None and built.plan.inclusion == "uniform"
    res = built.engine.run(2)
    assert all(len(json.loads(r["selected"])) == 4 for r in res.records)


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"incentive": {"kind": "none"}}, "selection.kind"),
        ({"privacy": {"kind": "zcdp_upload", "rho": -1.0}}, "privacy.rho"),
        ({"incentive": {"kind": "fedpcs", "gamma": 1.5}}, "incentive.gamma"),
        ({"incentive": {"kind": "fedpcs", "budget": {"start": 5, "end": 3}}}, "incentive.budget"),
        ({"incentive": {"kind": "fedpcs", "rho_min": 5, "rho_max": 1}}, "incentive.rho_min"),
        ({"train": {"rounds": 1, "clients_per_round": 4}}, "train.rounds"),
        (
            {"selection": {"kind": "privacy_aware", "sampler": "pips"}, "train": {"rounds": 3, "clients_per_round": 11}},
            "train.clients_per_round",
        ),
    ],
)
def test_bad_fedpcs_recipes_name_the_field(over: dict[str, object], field: str) -> None:
    with pytest.raises(RecipeError, match=field.replace(".", r"\.")):
        parse_recipe(fedpcs(**over))


def test_report_draws_the_game_figures(tmp_path: Path) -> None:
    from fedgame.experiments.report import write_report
    from fedgame.pipeline.runner import run_one

    raw = fedpcs(incentive={"kind": "fedpcs", "n_starts": 2, "budget": {"start": 60, "end": 20}})
    run_one(parse_recipe(raw), tmp_path / "run", resume=True)
    assert json.loads((tmp_path / "run" / "game.json").read_text())["K"]
    path = write_report([tmp_path / "run"], tmp_path / "report")
    text = path.read_text()
    for fig in ("fig3_mean_field.png", "fig4_rho_correlation.png", "fig5_welfare.png", "fig7_budget.png"):
        assert (tmp_path / "report" / fig).stat().st_size > 1000
        assert fig in text


def test_pips_sampler_draws_k_distinct_clients_with_horvitz_thompson_weights() -> None:
    from fedgame.selection.privacy_aware import pips_inclusion

    built = build_engine(parse_recipe(fedpcs(selection={"kind": "privacy_aware", "sampler": "pips"})))
    plan = built.plan
    assert plan is not None
    res = built.engine.run(2)
    for t, rec in enumerate(res.records):
        drawn = json.loads(rec["selected"])
        assert len(drawn) == len(set(drawn)) == 4
    from fedgame.core.types import RoundState

    eng = built.engine
    sel = eng.selection.select(RoundState(t=1, k=4, sizes=eng.sizes, theta=eng.theta), np.random.default_rng(0))
    pi = pips_inclusion(plan.rho[:, 1], 4)
    np.testing.assert_allclose(sel.importance_weights(eng.theta), eng.theta[sel.indices] / pi[sel.indices], rtol=1e-12)
