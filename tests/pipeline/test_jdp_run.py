"""The JDP-FL protocol end to end on Fashion-MNIST (smoke settings): spec jdp.md §3.10 and
acceptance checks 12 (bad input), 19-22 (M5 in the loop, billboard, ledger, dirty labels),
24 (determinism and resume) and 28 (what each round logs)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedgame.pipeline.build import build_engine, build_jdp
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.pipeline.runner import run_one
from fedgame.incentives.auctions import UnitPriceAuction
from fedgame.privacy.jdp import jdp_local_update, perturb
from fedgame.robust import leave_one_out_aggregate

pytestmark = pytest.mark.slow


def _raw(**jdp: Any) -> dict[str, Any]:
    return {
        "name": "jdp_smoke",
        "seed": 3,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 2400,
            "max_test": 300,
            "validation": 200,
            "partition": {"kind": "iid", "n_clients": 5},
        },
        "model": {"name": "jdp_mnist_cnn"},
        "train": {"rounds": 2, "local": {"epochs": None, "steps": 3, "batch_size": 32, "lr": 0.01, "momentum": 0.9}},
        "selection": {"kind": "full"},
        "privacy": {"kind": "jdp", "epsilon": 2.0, "clip": 20, "sensitivity": "record"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "jdp": {"aggregator": "leave_one_out", **jdp},
    }


def _metrics(folder: Path) -> list[dict[str, str]]:
    with open(folder / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_round_applies_m3_m4_m5_exactly() -> None:
    """One round of the engine equals M3 → M4 → M5 recomputed by hand from the same streams,
    and every client's new model is a function of the public signal and its own data only
    (the billboard structure of check 20)."""
    built = build_jdp(parse_recipe(_raw(attack={"kind": "none"})))
    eng = built.engine
    start = eng.thetas.clone()
    rec = eng.round(0)
    uploads, kept = [], []
    for pos, i in enumerate(eng.winners):
        res = eng.trainer.train(start[pos], eng._parts[pos], eng.streams.torch("train", 0, int(i), 0))
        mech = eng.mechanisms[pos]
        assert mech is not None
        out = perturb(res.params, mech, eng.streams.torch("noise", 0, int(i), 0))
        uploads.append(out.upload)
        kept.append(out.clipped)
    sel = leave_one_out_aggregate(uploads, eng.sizes, eng._score, epsilon=built.eps_exp, rng=eng.streams.numpy("server", 0))
    assert sel.chosen == rec["chosen"]
    assert json.loads(rec["probs"]) == pytest.approx(sel.probs, abs=1e-6)
    for pos in range(eng.winners.size):
        want = jdp_local_update(sel.agg, sel.total, kept[pos], float(eng.sizes[pos]))
        torch.testing.assert_close(eng.thetas[pos], want, rtol=0, atol=1e-6)
    torch.testing.assert_close(eng.params, (sel.agg / sel.total).float(), rtol=0, atol=1e-6)
    # the left-out client k* ends with the exact weighted average of everyone, its own true θ
    k = sel.chosen
    exact = (
        sum(float(eng.sizes[j]) * uploads[j].double() for j in range(len(uploads)) if j != k) + float(eng.sizes[k]) * kept[k].double()
    ) / float(eng.sizes.sum())
    torch.testing.assert_close(eng.thetas[k].double(), exact, rtol=0, atol=1e-5)


def test_fedavg_rule_without_noise_equals_the_fedavg_engine() -> None:
    """The "traditional" rule with no perturbation and no attack is plain FedAvg: the JDP engine
    and the platform's FedAvg engine (full participation, size weights, server lr 1) give the
    same parameters from the same seed (float tolerance: Σ w θ_i / Σ w vs θ + Σ w (θ_i − θ))."""
    raw = _raw(aggregator="fedavg", attack={"kind": "none"})
    raw["privacy"] = {"kind": "none"}
    jdp = build_jdp(parse_recipe(raw)).engine
    plain = {k: v for k, v in raw.items() if k != "jdp"}
    plain["aggregation"] = {"kind": "fedavg"}
    plain["train"] = {**raw["train"], "clients_per_round": 5}
    fedavg = build_engine(parse_recipe(plain)).engine
    np.testing.assert_array_equal(jdp.data.parts[0], fedavg.data.parts[0])
    for t in range(2):
        jdp.round(t)
        fedavg.round(t)
        torch.testing.assert_close(jdp.params, fedavg.params, rtol=0, atol=2e-6)
        for pos in range(5):  # every client restarts from the server model
            assert torch.equal(jdp.thetas[pos], jdp.params)


def test_dirty_label_adversary_is_seeded_and_poisons_only_itself() -> None:
    a = build_jdp(parse_recipe(_raw()))
    b = build_jdp(parse_recipe(_raw()))
    assert a.adversary is not None and a.adversary == b.adversary
    y_clean = torch.as_tensor(a.data.train.y)
    y = a.engine.trainer.y
    adv = torch.as_tensor(a.data.parts[a.adversary])
    assert bool((y[adv] == 2).all())
    others = torch.as_tensor(np.concatenate([p for i, p in enumerate(a.data.parts) if i != a.adversary]))
    assert torch.equal(y[others], y_clean[others])
    assert torch.equal(a.engine._val[1], y_clean[torch.as_tensor(a.data.validation)])  # type: ignore[index]
    seeds = {build_jdp(parse_recipe({**_raw(), "seed": s})).adversary for s in range(6)}
    assert len(seeds) > 1  # the choice depends on the seed


def test_run_ledger_logs_and_resume(tmp_path: Path) -> None:
    """Checks 21, 24, 28: the ledger per winner is (T(ε_L+ε_E), Tδ) in the paper's accounting,
    each round logs probabilities, k*, whether the adversary was used, the clipping fraction and
    ε; a run killed after round 1 resumes to the same metrics as an uninterrupted one."""
    cfg = parse_recipe({**_raw(), "train": {**_raw()["train"], "rounds": 3}})
    full = run_one(cfg, tmp_path / "full")
    rows = _metrics(tmp_path / "full")
    assert len(rows) == 3
    for r in rows:
        probs = json.loads(r["probs"])
        assert len(probs) == 5 and sum(probs) == pytest.approx(1, abs=1e-5)
        k = int(r["chosen"])
        assert 0 <= k < 5
        assert r["adversary_used"] in ("True", "False")
        assert 0 <= float(r["clipped_fraction"]) <= 1
        assert np.isfinite(float(r["eps_max"]))
    info = json.loads((tmp_path / "full" / "jdp.json").read_text())
    adv_pos = info["winners"].index(info["adversary"])
    assert [r["adversary_used"] == "False" for r in rows] == [int(r["chosen"]) == adv_pos for r in rows]
    with open(tmp_path / "full" / "privacy.csv") as f:
        priv = list(csv.DictReader(f))
    for row in priv:
        assert int(row["rounds"]) == 3
        assert float(row["eps_paper"]) == pytest.approx(3 * (2.0 + 2.0))
        assert float(row["delta_paper"]) == pytest.approx(3e-5)
        assert 0 < float(row["epsilon"]) < float(row["eps_paper"])  # RDP of the mechanisms is tighter

    # interrupted after one round (the checkpoint of round 0 stays), then resumed
    part = tmp_path / "part"
    eng = build_jdp(cfg).engine
    from fedgame.pipeline.store import ResultStore

    store = ResultStore(part)
    store.write_text("config.yaml", (tmp_path / "full" / "config.yaml").read_text())
    eng.run(1, sink=store)
    resumed = run_one(cfg, part)
    assert resumed["resumed_from_round"] == 1
    assert resumed["final_accuracy"] == full["final_accuracy"]
    assert [r["chosen"] for r in _metrics(part)] == [r["chosen"] for r in rows]
    assert resumed["epsilon_per_client"] == full["epsilon_per_client"]


def test_auction_decides_who_trains(tmp_path: Path) -> None:
    raw = _raw(auction={"mechanism": "M1", "budget": 1500})
    raw["data"] = {**raw["data"], "partition": {"kind": "iid", "n_clients": 8}}
    built = build_jdp(parse_recipe(raw))
    costs = built.costs
    assert costs is not None and built.auction is not None
    want = UnitPriceAuction().run(costs, budget=1500, data_sizes=np.asarray(built.data.sizes, dtype=float))
    np.testing.assert_array_equal(built.engine.winners, np.sort(want.winners))
    assert 2 <= built.engine.winners.size < 8
    s = built.summary()
    assert s["total_payment"] <= 1500 * (1 + 1e-12) and s["payments_within_budget"]
    assert built.adversary in built.engine.winners
    built.engine.run(1)
    losers = np.setdiff1d(np.arange(8), built.engine.winners)
    assert (built.engine.selected_counts[losers] == 0).all()
    assert (built.engine.accountant.epsilons(1e-5)[losers] == 0).all()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"aggregator": "random_groups", "group_size": 2}, "jdp.group_size"),
        ({"aggregator": "krum", "krum_byzantine": 2}, "jdp.krum_byzantine"),
        ({"auction": {"mechanism": "M1", "budget": 1}}, "jdp.auction.budget"),
    ],
)
def test_bad_protocol_input_is_refused_before_training(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        build_jdp(parse_recipe(_raw(**change)))


@pytest.mark.parametrize(
    ("raw_change", "field"),
    [
        ({"data": {"dataset": "fashion_mnist", "validation": 0}}, "data.validation"),
        ({"selection": {"kind": "uniform"}}, "selection.kind"),
        ({"privacy": {"kind": "jdp", "epsilon": 0}}, "privacy.epsilon"),
        ({"jdp": {"aggregator": "random_groups"}}, "jdp.group_size"),
    ],
)
def test_bad_recipe_names_the_field(raw_change: dict[str, Any], field: str) -> None:
    with pytest.raises(RecipeError, match=field):
        parse_recipe({**_raw(), **raw_change})


def test_divergence_is_a_clear_error() -> None:
    """Too much M3 noise for the data (record sensitivity with a handful of examples per client)
    makes local training diverge: the engine names the cause instead of failing inside M3."""
    raw = _raw(attack={"kind": "none"})
    raw["privacy"] = {"kind": "jdp", "epsilon": 1e-4, "clip": 20}
    eng = build_jdp(parse_recipe(raw)).engine
    with pytest.raises(FloatingPointError, match="privacy.epsilon"):
        for t in range(3):
            eng.round(t)
