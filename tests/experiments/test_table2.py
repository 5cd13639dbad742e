"""The Table II writer: grouping of run folders into (method, τ, split) cells, mean ± std over
seeds, the paper's numbers beside ours, and the figures."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from fedgame.experiments.table2 import PAPER_TABLE2_FMNIST, write_table2


def _run(root: Path, name: str, k: int, kind: str, seed: int, acc: float) -> None:
    d = root / f"{name}_k={k}_{kind}" / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg = {"data": {"partition": {"kind": kind, "n_clients": 100}}, "train": {"rounds": 3, "clients_per_round": k, "local": {"steps": 3}}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps({"name": f"{name}[clients_per_round={k},kind={kind}]", "seed": seed, "final_accuracy": acc}))
    rows = [{"round": t, "test_acc": acc * (t + 1) / 3, "train_loss": 1.0 / (t + 1)} for t in range(3)]
    with (d / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_cells_means_and_paper_numbers(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed, acc in enumerate([0.70, 0.72, 0.74]):
        _run(runs, "fedpcs", 20, "iid", seed, acc)
        _run(runs, "random", 20, "dirichlet", seed, acc - 0.1)
    _run(runs, "unknown_method", 20, "iid", 0, 0.5)  # ignored
    rows = write_table2(runs, tmp_path / "out", budget="test")
    assert [(r["method"], r["tau"], r["split"]) for r in rows] == [("FedPCS", 0.2, "IID"), ("Random", 0.2, "Non-IID")]
    fed = rows[0]
    assert fed["ours_mean"] == pytest.approx(72.0) and fed["ours_std"] == pytest.approx(2.0)
    assert (fed["paper_mean"], fed["paper_std"]) == PAPER_TABLE2_FMNIST[0.2]["FedPCS"][0]
    assert rows[1]["paper_mean"] == PAPER_TABLE2_FMNIST[0.2]["Random"][1][0]
    assert fed["seeds"] == "0 1 2"
    md = (tmp_path / "out" / "table2.md").read_text()
    assert "72.00±2.00 / 84.43±0.18" in md
    for f in ("table2.csv", "fig6_server_cost.png", "fig9_accuracy.png", "fig9_loss.png"):
        assert (tmp_path / "out" / f).stat().st_size > 0
    assert len(list((tmp_path / "out" / "configs").glob("*.yaml"))) == 6  # the unknown method is left out


def _run_with(
    root: Path, name: str, incentive: dict[str, object] | None, seed: int, acc: float, weights: list[float] | None = None
) -> None:
    """A finished run folder of recipe ``name`` at τ = 0.2 (IID) whose resolved config has
    ``incentive`` (None: no incentive section) and, if given, a ``max_agg_weight`` column."""
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg: dict[str, object] = {
        "data": {"partition": {"kind": "iid", "n_clients": 100}},
        "train": {"rounds": 2, "clients_per_round": 20, "local": {"steps": 3}},
    }
    if incentive is not None:
        cfg["incentive"] = incentive
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps({"name": f"{name}[clients_per_round=20,kind=iid]", "seed": seed, "final_accuracy": acc}))
    rows = [{"round": t, "test_acc": acc, "train_loss": 1.0, **({"max_agg_weight": weights[t]} if weights else {})} for t in range(2)]
    with (d / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_baseline_rho_variants_and_r4_ablations_are_extra_rows(tmp_path: Path) -> None:
    """Spec §7 R3/R4: a baseline's row says where its clients' ρ came from (``initial``: the
    paper's column; ``game``, also runs written before the field existed, which ran A15; ``low``),
    the ablations get rows without paper numbers, and table2.csv carries max_agg_weight."""
    runs = tmp_path / "runs"
    game = {"kind": "fedpcs", "inclusion": "uniform"}
    _run_with(runs, "random", {**game, "baseline_rho": "initial"}, 0, 0.70, [0.5, 0.9])
    _run_with(runs / "extras", "random_game", {**game, "baseline_rho": "game"}, 0, 0.71)
    _run_with(runs, "aocs", game, 0, 0.72)  # written before baseline_rho existed: A15
    _run_with(runs, "delta", {**game, "baseline_rho": "low"}, 0, 0.73)
    _run_with(runs, "fedpcs", {"kind": "fedpcs", "inclusion": "privacy", "baseline_rho": "initial"}, 0, 0.80, [8.0, 3.0])
    _run_with(runs, "ablation_uniform", {"kind": "fedpcs", "inclusion": "privacy", "baseline_rho": "game"}, 0, 0.78, [1.0, 2.0])
    _run_with(runs, "ablation_fedavg_weights", {"kind": "fedpcs", "inclusion": "privacy"}, 0, 0.79, [0.2, 0.3])
    rows = {r["method"]: r for r in write_table2(runs, tmp_path / "out", budget="test")}
    assert set(rows) == {
        "Random",
        "Random (game ρ)",
        "AOCS (game ρ)",
        "DELTA (ρ_L)",
        "FedPCS",
        "FedPCS incentive + uniform draws",
        "FedPCS + FedAvg weights",
    }
    paper = PAPER_TABLE2_FMNIST[0.2]
    assert rows["Random"]["paper_mean"] == rows["Random (game ρ)"]["paper_mean"] == paper["Random"][0][0]
    assert rows["AOCS (game ρ)"]["paper_mean"] == paper["AOCS"][0][0]
    for extra in ("FedPCS incentive + uniform draws", "FedPCS + FedAvg weights"):
        assert math.isnan(rows[extra]["paper_mean"])
    assert rows["FedPCS"]["max_agg_weight"] == 8.0 and rows["Random"]["max_agg_weight"] == 0.9
    assert math.isnan(rows["AOCS (game ρ)"]["max_agg_weight"])  # not logged
    md = (tmp_path / "out" / "table2.md").read_text()
    header = md.splitlines()[2]
    assert header.index("Random IID") < header.index("FedPCS IID") < header.index("FedPCS + FedAvg weights IID")
    assert "78.00 (1 seed)" in md and "78.00 (1 seed) / " not in md  # an extra row: ours only
    with (tmp_path / "out" / "table2.csv").open() as f:
        assert {r["method"] for r in csv.DictReader(f)} == set(rows)


def test_a_one_seed_cell_shows_no_spread(tmp_path: Path) -> None:
    """A cell with one finished seed (a grid stopped part-way) prints "(1 seed)", not a ±0.00
    that would pass for a measured spread; its ordering says it has no error bar."""
    runs = tmp_path / "runs"
    for seed, acc in enumerate([0.70, 0.72, 0.74]):
        _run(runs, "fedpcs", 20, "iid", seed, acc)
    _run(runs, "random", 20, "iid", 0, 0.60)
    write_table2(runs, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "table2.md").read_text()
    assert "60.00 (1 seed) / 74.69±0.78" in md and "60.00±0.00" not in md
    assert "72.00±2.00 / 84.43±0.18" in md
    assert "| not decided (one seed) |" in md


def test_the_page_says_which_cells_played_which_plan(tmp_path: Path) -> None:
    """Cells of one seed that played different game plans (another host's local optimum) are
    named on the page with their R_1; cells that share one plan are said to, and a baseline's fixed
    budgets (no game played) are not counted as a plan."""
    from fedgame.incentives.fedpcs.plugin import FedPCSGame, baseline_plan, solve_plan

    game = FedPCSGame(n_clients=6, clients_per_round=2, rounds=3, seed=0)
    plan = solve_plan(game, cache=False)
    runs = tmp_path / "runs"
    for name, kind in (("fedpcs", "iid"), ("ablation_uniform", "iid"), ("fedpcs", "dirichlet"), ("random", "iid")):
        _run(runs, name, 20, kind, 0, 0.8)
    folder = {p.parent.name: p for p in runs.glob("*/seed_0")}
    for d in folder.values():  # the clients drawn each round (what the realised-ρ figure reads)
        rows = [{"round": t, "test_acc": 0.8, "train_loss": 1.0, "selected": "[0, 1]"} for t in range(3)]
        with (d / "metrics.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    plan.save(folder["fedpcs_k=20_iid"] / "game.npz")
    plan.save(folder["ablation_uniform_k=20_iid"] / "game.npz")
    baseline_plan(game, "initial").save(folder["random_k=20_iid"] / "game.npz")
    other = dataclasses.replace(plan, reward=plan.reward + 1.0)
    other.save(folder["fedpcs_k=20_dirichlet"] / "game.npz")
    write_table2(runs, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "table2.md").read_text()
    assert "Game plans (the 3 runs whose clients play the game" in md, md
    assert (
        f"seed 0, privacy sampling: 2 plans — FedPCS IID, FedPCS incentive + uniform draws IID (R_1 = {plan.reward[1]:.2f}); "
        f"FedPCS Non-IID (R_1 = {plan.reward[1] + 1.0:.2f}); every other seed's cells share one plan." in md
    )
    plan.save(folder["fedpcs_k=20_dirichlet"] / "game.npz")
    write_table2(runs, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "table2.md").read_text()
    assert "Game plans: the 3 runs whose clients play the game share one plan per seed" in md
