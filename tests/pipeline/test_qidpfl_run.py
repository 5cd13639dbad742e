"""QI-DPFL end to end in smoke settings (qidpfl.md §3.10; checks 19-20 at the run level): the
screening decides who may train, the game's participation sets are who trains, payments add up
to R_t, the zCDP ledger is Σ ρ_i^t over the rounds a client uploaded, and the Max / Random
policies and FedAvg-select are the same pipeline with another knob."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.pipeline.runner import run_one
from fedgame.incentives.qidpfl.game import screen
from fedgame.privacy.analysis import zcdp_to_eps
from fedgame.privacy.plans import ZCDPUpload

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")

CURVE = {"I1": 0.8, "B": 0.5, "I3": 200.0}


def recipe(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "qidpfl",
        "seed": 0,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 3000,
            "max_test": 300,
            "partition": {"kind": "dirichlet", "n_clients": 8, "alpha": 1.0},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 3, "clients_per_round": 4, "eval_every": 1, "local": {"epochs": 1, "batch_size": 32, "lr": 0.01}},
        "selection": {"kind": "participants"},
        "aggregation": {"kind": "mean"},
        "privacy": {"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "paper_update"},
        "accountant": {"kind": "zcdp", "delta": 1e-5},
        "incentive": {"kind": "qidpfl", "keep_fraction": 0.5},
    }
    raw.update(over)
    return raw


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_qidpfl_run_screens_pays_and_accounts(tmp_path: Path) -> None:
    run_one(parse_recipe(recipe()), tmp_path / "q")
    plan = json.loads((tmp_path / "q" / "qidpfl.json").read_text())
    built = build_engine(parse_recipe(recipe()))
    kept = screen(built.data.label_counts(), keep_fraction=0.5).kept
    assert plan["kept"] == kept.tolist()
    rho = np.load(tmp_path / "q" / "qidpfl.npz")["rho"]
    metrics = _rows(tmp_path / "q" / "metrics.csv")
    for t, m in enumerate(metrics):
        sel = json.loads(m["selected"])
        assert sel == np.flatnonzero(rho[:, t] > 0).tolist() and set(sel) <= set(kept.tolist())
        assert float(m["payments"]) == pytest.approx(float(m["reward"]), rel=1e-12)  # Σ r_i^t = R_t
        assert float(m["rho_global"]) == pytest.approx(rho[:, t].sum(), rel=1e-12)
    ledger = _rows(tmp_path / "q" / "privacy.csv")
    for r in ledger:
        i = int(r["client"])
        total = float(rho[i].sum())
        assert int(r["selected"]) == int((rho[i] > 0).sum())
        assert float(r["epsilon"]) == pytest.approx(zcdp_to_eps(total, 1e-5) if total > 0 else 0.0, rel=1e-9)


def test_max_and_random_policies_stay_in_the_range() -> None:
    """§3.8 with a curve: Max pays R_max,t, Random draws in [R_min,t, R_max,t], QI-DPFL clips R_t*;
    κ_acc calibration puts R_1 = R_min,1 (check 14)."""
    plans = {}
    for policy in ("qidpfl", "max", "random"):
        inc = {"kind": "qidpfl", "keep_fraction": 0.5, "policy": policy, "curve": CURVE, "acc_scale": "calibrate"}
        plans[policy] = build_engine(parse_recipe(recipe(incentive=inc))).plan
    q, mx, rd = plans["qidpfl"], plans["max"], plans["random"]
    np.testing.assert_allclose(mx.reward, mx.R_max, rtol=1e-12)
    assert np.all(rd.reward >= rd.R_min - 1e-12) and np.all(rd.reward <= rd.R_max + 1e-12)
    np.testing.assert_allclose(q.reward, np.clip(q.R_star, q.R_min, q.R_max), rtol=1e-12)
    assert q.reward[0] == pytest.approx(q.R_min[0], rel=1e-9)
    assert np.all(q.cost <= mx.cost + 1e-12) and np.all(q.cost <= rd.cost + 1e-12)  # check 13


def test_fedavg_select_trains_the_screened_clients_every_round(tmp_path: Path) -> None:
    cfg = parse_recipe(
        recipe(
            name="fedavg_select",
            selection={"kind": "screened", "keep_fraction": 0.5},
            aggregation={"kind": "fedavg"},
            privacy={"kind": "none"},
            incentive={"kind": "none"},
        )
    )
    built = build_engine(cfg)
    kept = screen(built.data.label_counts(), keep_fraction=0.5).kept
    res = built.engine.run(2)
    assert all(json.loads(r["selected"]) == kept.tolist() for r in res.records)


def test_fedavg_dp_plays_the_game_over_every_candidate() -> None:
    built = build_engine(parse_recipe(recipe(incentive={"kind": "qidpfl", "screening": "none"})))
    assert built.plan.kept.tolist() == list(range(8)) and np.all(np.isnan(built.plan.emd))


def test_a_client_sitting_out_cannot_upload() -> None:
    plan = ZCDPUpload(rho=np.array([[0.5, 0.0], [0.2, 0.3]]), clip=1.0, sizes=np.array([10, 10]))
    assert plan.upload(0, 0, 10) is not None
    with pytest.raises(ValueError, match="client 0 has rho = 0 in round 1"):
        plan.upload(0, 1, 10)
    with pytest.raises(ValueError, match="privacy.rho: must be > 0"):
        ZCDPUpload(rho=np.array([0.5, 0.0]), clip=1.0, sizes=np.array([10, 10]))


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"incentive": {"kind": "none"}}, "selection.kind: 'participants' needs incentive.kind 'qidpfl'"),
        ({"selection": {"kind": "uniform"}}, "selection.kind: incentive 'qidpfl' decides who trains: use 'participants'"),
        ({"incentive": {"kind": "qidpfl", "acc_scale": "calibrate"}}, "incentive.acc_scale: 'calibrate' needs incentive.curve"),
        ({"incentive": {"kind": "qidpfl", "nu": [2, 1]}}, "incentive.nu: must be [a, b] with 0 < a <= b"),
        ({"incentive": {"kind": "qidpfl", "keep_fraction": 0}}, "incentive.keep_fraction: Input should be greater than 0"),
        (
            {"selection": {"kind": "screened", "keep_fraction": None}, "incentive": {"kind": "none"}, "privacy": {"kind": "none"}},
            "selection.keep_fraction, selection.theta_th: give exactly one",
        ),
    ],
)
def test_bad_qidpfl_recipes_name_the_field(over: dict[str, Any], message: str) -> None:
    with pytest.raises(RecipeError) as e:
        parse_recipe(recipe(**over))
    assert message in str(e.value)
