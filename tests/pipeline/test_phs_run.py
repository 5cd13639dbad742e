"""PHS end to end in smoke settings (phs.md §3.7; acceptance checks 15, 19, 20): the three
mechanisms on real Fashion-MNIST, the per-client privacy report, the biased baseline's caps and
loss queries, determinism and resume, and the recipe checks that tie selection to privacy."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.pipeline.runner import run_one

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")

PRIVACY = {"kind": "phs", "budgets": {"kind": "uniform", "low": 0, "high": 1}, "delta": 1e-5}
SELECTIONS = {
    "P": {"kind": "phs", "mechanism": "privacy_aware"},
    "U": {"kind": "phs", "mechanism": "unbiased"},
    "B": {"kind": "power_of_choice", "d": None, "losses": "current", "ties": "id", "cap": "planned"},
}


def recipe(mech: str, model: str = "logreg", **over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": f"phs_{mech}",
        "seed": 0,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 3000,
            "max_test": 300,
            "partition": {"kind": "similarity", "n_clients": 12, "s": 30, "size_spread": [0.5, 1.5]},
        },
        "model": {"name": model},
        "train": {
            "rounds": 4,
            "clients_per_round": 3,
            "eval_every": 2,
            "local": {"epochs": None, "steps": 2, "batch_size": 64, "lr": 0.05},
        },
        "selection": SELECTIONS[mech],
        "aggregation": {"kind": "mean"},
        "privacy": PRIVACY,
        "accountant": {"kind": "rdp", "delta": 1e-5},
    }
    raw.update(over)
    return raw


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_privacy_aware_run_reports_three_accountants_per_client(tmp_path: Path) -> None:
    """The real PHS CNN; every client ran exactly the T_k T^l steps it calibrated for, so the
    paper's forward map returns its budget, and the tight accountants certify less."""
    summary = run_one(parse_recipe(recipe("P", model="phs_mnist_cnn")), tmp_path / "p")
    phs = json.loads((tmp_path / "p" / "phs.json").read_text())
    assert phs["D"] == 26_010 and phs["kkt_residual"] < 1e-6
    assert abs(sum(phs["p_s"]) - 1) < 1e-9 and min(phs["p_s"]) > 0
    rows = _rows(tmp_path / "p" / "privacy.csv")
    assert sum(int(r["T_k"]) for r in rows) == 4 * 3
    for r, t_k in zip(rows, phs["T_k"], strict=True):
        assert int(r["T_k"]) == t_k and int(r["selected"]) <= t_k  # "selected" counts distinct rounds
        assert int(r["steps_done"]) == int(r["steps_planned"]) == 2 * t_k
        budget = float(r["eps_budget"])
        if t_k:
            assert float(r["eps_paper"]) == pytest.approx(budget, rel=1e-9)
            assert 0 < float(r["eps_pld"]) <= budget and 0 < float(r["eps_rdp"]) <= budget
            assert float(r["epsilon"]) == pytest.approx(float(r["eps_rdp"]), rel=1e-6)
    assert 0 < summary["eps_pld_over_budget_max"] <= 1
    assert summary["eps_paper_over_budget_max"] == pytest.approx(1.0, rel=1e-9)


def test_biased_baseline_respects_caps_and_counts_loss_queries(tmp_path: Path) -> None:
    """Check 15: no client beyond T^plan_k = ⌈K T^g p^u_k⌉, ε within budget, queries reported."""
    run_one(parse_recipe(recipe("B")), tmp_path / "b")
    rows = _rows(tmp_path / "b" / "privacy.csv")
    sizes = np.array([int(r["size"]) for r in rows], dtype=float)
    caps = np.ceil(sizes / sizes.sum() * 3 * 4 * (1 - 1e-9) - 1e-9)
    np.testing.assert_array_equal([int(r["T_k"]) for r in rows], caps)
    assert all(int(r["selected"]) <= int(r["T_k"]) for r in rows)
    assert all(float(r["eps_pld"]) <= float(r["eps_budget"]) for r in rows)
    metrics = _rows(tmp_path / "b" / "metrics.csv")
    queries = [int(float(m["probe_loss_queries"])) for m in metrics]
    assert queries[0] == 12 and all(3 <= q <= 12 for q in queries)  # d = N: every eligible client


def test_the_global_top_k_is_a_brute_force_sort_of_current_losses() -> None:
    """Each round of the biased mechanism keeps the K eligible clients whose loss at the round's
    global model is largest (ties by id), recomputed here client by client."""
    built = build_engine(parse_recipe(recipe("B")))
    eng = built.engine
    for t in range(3):
        before = eng.selection.counts(12).copy()
        eligible = np.flatnonzero(before < eng.selection.caps)
        loss = eng.client_losses(np.arange(12))
        expect = sorted(eligible.tolist(), key=lambda i: (-loss[i], i))[:3]
        rec = eng.round(t)
        eng.records.append(rec)
        assert sorted(json.loads(rec["selected"])) == sorted(expect)


@pytest.mark.parametrize("mech", ["P", "U", "B"])
def test_same_seed_same_run_and_resume(mech: str) -> None:
    """Check 20: identical curves, p^s, T_k and σ for the same seed; a run stopped after two
    rounds and resumed from its checkpoint ends with the same parameters."""
    cfg = parse_recipe(recipe(mech))
    a, b = build_engine(cfg), build_engine(cfg)
    ra, rb = a.engine.run(4), b.engine.run(4)
    assert [r["selected"] for r in ra.records] == [r["selected"] for r in rb.records]
    assert torch.equal(ra.params, rb.params)
    np.testing.assert_array_equal(a.engine.privacy.sigma, b.engine.privacy.sigma)  # type: ignore[attr-defined]
    stopped = build_engine(cfg).engine
    stopped.run(2)
    resumed = build_engine(cfg).engine
    resumed.load_state_dict(copy.deepcopy(stopped.state_dict()))
    assert torch.equal(resumed.run(4).params, ra.params)
    other = build_engine(parse_recipe(recipe(mech, seed=1))).engine.run(4)
    assert not torch.equal(other.params, ra.params)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"privacy": {"kind": "none"}}, "selection.kind: 'phs' needs privacy.kind 'phs'"),
        ({"selection": {"kind": "uniform"}}, "privacy.kind: 'phs' calibrates for participation counts fixed before training"),
        (
            {"privacy": {**PRIVACY, "budgets": {"kind": "uniform", "low": 1, "high": 0.5}}},
            "privacy.budgets: high: must be > low (1), got 0.5",
        ),
        ({"privacy": {**PRIVACY, "delta": 0}}, "privacy.delta: Input should be greater than 0"),
        ({"selection": {"kind": "phs", "eta": -1}}, "selection.eta: Input should be greater than 0"),
        ({"accountant": {"kind": "zcdp"}}, "accountant.kind: use 'rdp' or 'pld' with privacy.kind 'phs'"),
    ],
)
def test_bad_phs_recipes_name_the_field(over: dict[str, Any], message: str) -> None:
    with pytest.raises(RecipeError) as e:
        parse_recipe(recipe("P", **over))
    assert message in str(e.value)
