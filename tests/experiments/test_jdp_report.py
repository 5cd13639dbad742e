"""The JDP-FL Fig. 3 writer: grouping runs by (rule, attack, ε), mean ± std over seeds, the
attack's cost per method both ways, check 26 decided from the means, and the CLI command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.jdp_report import write_fig3

# (aggregator, attacked, eps) -> accuracy per seed 0, 1
ACC = {
    ("leave_one_out", True, 0.5): (0.70, 0.72), ("leave_one_out", True, 1.0): (0.78, 0.80),
    ("leave_one_out", False, 1.0): (0.80, 0.81),
    ("fedavg", True, 0.5): (0.66, 0.68), ("fedavg", True, 1.0): (0.74, 0.76),
    ("fedavg", False, 0.5): (0.73, 0.73), ("fedavg", False, 1.0): (0.80, 0.82),
    ("krum", True, 1.0): (0.60, 0.62),
}


def _run(root: Path, agg: str, attacked: bool, eps: float, seed: int, acc: float) -> None:
    name = f"jdp_fig3_epsilon={eps:g}_kind={'dirty_label' if attacked else 'none'}_aggregator={agg}"
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg = {"name": "jdp_fig3", "seed": seed, "privacy": {"kind": "jdp", "epsilon": eps},
           "jdp": {"aggregator": agg, "attack": {"kind": "dirty_label" if attacked else "none"}},
           "train": {"rounds": 5, "local": {"lr": 0.01}}, "data": {"max_test": 2000}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps({
        "name": name, "seed": seed, "rounds": 10, "final_accuracy": acc, "last5_accuracy": acc - 0.01, "wall_time": 60.0,
        "adversary_used_fraction": (0.4 if agg == "leave_one_out" else 1.0) if attacked else None,
        "eps_paper_max": 10 * 2 * eps, "eps_rdp_max": 5.0,
    }))


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for (agg, attacked, eps), accs in ACC.items():
        for seed, a in enumerate(accs):
            _run(root, agg, attacked, eps, seed, a)
    (root / "stray").mkdir()  # a folder without a finished run is ignored
    return root


def test_fig3_table_costs_and_claims(grid: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    rows = write_fig3(grid, dest, budget="reduced")
    assert len(rows) == len(ACC)
    by = {(r["method"], r["attack"], r["epsilon"]): r for r in rows}
    r = by[("leave_one_out", "dirty_label", 1.0)]
    assert r["accuracy_mean"] == pytest.approx(79.0) and r["accuracy_std"] == pytest.approx(1.41421, abs=1e-3)
    assert r["seeds"] == 2 and r["adversary_used_fraction"] == 0.4
    with open(dest / "fig3.csv") as f:
        assert len(list(csv.DictReader(f))) == len(ACC)
    md = (dest / "fig3.md").read_text()
    assert "| ours (M4 + M5) | yes | 71.00 ± 1.41 (2) | 79.00 ± 1.41 (2) |" in md
    assert ("Budget of these runs: 5 rounds (paper 30); local lr 0.01 (paper 0.001); test accuracy on 2000 test examples "
            "(paper the full test set).") in md
    # ours at eps = 1: own cost 80.5 - 79 = +1.50; paper's reading 81 - 79 = +2.00; FedAvg: 81 - 75 = +6.00
    assert "+1.50 / +2.00" in md and "+6.00 / +6.00" in md
    assert "ε = 1: the attack costs ours ≤ 2 points (vs FedAvg without attack) — **holds** (2.00" in md
    assert "ε = 0.5: ours ≥ traditional − 0.5 — **holds** (71.00 vs 67.00)" in md
    assert "ε = 1: no attack ≥ ours − 0.5 — **holds**" in md
    assert (dest / "fig3.png").stat().st_size > 1000
    assert len(list((dest / "configs").glob("*.yaml"))) == 2 * len(ACC)


def test_fig3_fails_a_claim_that_does_not_hold(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _run(root, "leave_one_out", True, 1.0, 0, 0.70)
    _run(root, "fedavg", True, 1.0, 0, 0.75)
    _run(root, "fedavg", False, 1.0, 0, 0.80)
    write_fig3(root, tmp_path / "out", budget="reduced")
    md = (tmp_path / "out" / "fig3.md").read_text()
    assert "ours ≥ traditional − 0.5 — **fails** (70.00 vs 75.00)" in md
    assert "the attack costs ours ≤ 2 points (vs FedAvg without attack) — **fails** (10.00" in md


def test_cli_jdp_report(grid: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["jdp-report", str(grid), "--dest", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "fig3.md").exists()
    bad = CliRunner().invoke(app, ["jdp-report", str(tmp_path / "empty_nothing"), "--dest", str(tmp_path / "o2")])
    assert bad.exit_code != 0 and "runs" in bad.output


def _group_run(root: Path, s: int | None, seed: int, acc: float) -> None:
    name = f"g{s}" if s is not None else "loo"
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    j = {"aggregator": "random_groups", "group_size": s} if s is not None else {"aggregator": "leave_one_out"}
    (d / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "data": {"partition": {"n_clients": 60}}, "jdp": j}))
    (d / "summary.json").write_text(json.dumps({"seed": seed, "final_accuracy": acc, "m": 60, "adversary_used_fraction": 0.5}))


def test_fig5_group_sizes(tmp_path: Path) -> None:
    from fedgame.experiments.jdp_report import write_fig5

    root = tmp_path / "runs"
    for s, acc in ((5, 0.60), (10, 0.65), (30, 0.70), (None, 0.75)):
        for seed in (0, 1):
            _group_run(root, s, seed, acc + 0.01 * seed)
    rows = write_fig5(root, tmp_path / "out", budget="reduced")
    assert [r["group_size"] for r in rows] == [5, 10, 30, 59]
    assert rows[-1]["rule"] == "leave_one_out" and rows[0]["accuracy_mean"] == pytest.approx(60.5)
    md = (tmp_path / "out" / "fig5.md").read_text()
    assert "rises with s (within 1 point): **holds**" in md
    assert "every group size below leave-one-out: **holds** (best group 70.50 vs leave-one-out 75.50)" in md
    assert "each step: s = 5 → s = 10 holds; s = 10 → s = 30 holds; s = 30 → s = 59 holds" in md
    assert "per s, leave-one-out above: s = 5 holds; s = 10 holds; s = 30 holds" in md
    _group_run(root, 15, 0, 0.90)  # a group size above leave-one-out and out of order
    write_fig5(root, tmp_path / "out2", budget="reduced")
    md = (tmp_path / "out2" / "fig5.md").read_text()
    assert "rises with s (within 1 point): **fails**" in md and "below leave-one-out: **fails**" in md


def test_exclusion_probability_reads_the_logged_draws(tmp_path: Path) -> None:
    from fedgame.experiments.jdp_report import exclusion_probability

    d = tmp_path / "run"
    d.mkdir()
    (d / "jdp.json").write_text(json.dumps({"winners": [3, 7, 9], "adversary": 7, "aggregator": "leave_one_out"}))
    (d / "metrics.csv").write_text('round,probs\n0,"[0.2, 0.5, 0.3]"\n1,"[0.3, 0.3, 0.4]"\n')
    assert exclusion_probability(d) == pytest.approx(0.4)
    (d / "jdp.json").write_text(json.dumps({"winners": [3, 7, 9], "adversary": None, "aggregator": "leave_one_out"}))
    assert exclusion_probability(d) != exclusion_probability(d)  # NaN without an adversary


def _m_run(root: Path, m: int, eps: float, seed: int, acc: float, *, agg: str = "leave_one_out", attacked: bool = True) -> None:
    d = root / f"jdp_fig3_n_clients={m}_epsilon={eps:g}_{agg}_{attacked}" / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg = {"seed": seed, "data": {"partition": {"n_clients": m}}, "privacy": {"kind": "jdp", "epsilon": eps},
           "jdp": {"aggregator": agg, "attack": {"kind": "dirty_label" if attacked else "none"}}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps({"seed": seed, "final_accuracy": acc, "m": m, "adversary_used_fraction": 0.9,
                                                "wall_time": 10.0, "eps_paper_max": 10 * eps}))
    adv = 1
    (d / "jdp.json").write_text(json.dumps({"winners": list(range(m)), "adversary": adv, "aggregator": agg}))
    probs = [0.5 if i == adv else 0.5 / (m - 1) for i in range(m)]
    (d / "metrics.csv").write_text(f'round,probs\n0,"{json.dumps(probs)}"\n')


def test_fig4_by_m_and_eps(tmp_path: Path) -> None:
    from fedgame.experiments.jdp_report import write_fig4

    root = tmp_path / "runs"
    acc = {(5, 1.0): 0.60, (10, 1.0): 0.64, (20, 1.0): 0.66, (40, 1.0): 0.70, (10, 0.5): 0.55, (10, 5.0): 0.70}
    for (m, eps), a in acc.items():
        for seed in (0, 1):
            _m_run(root, m, eps, seed, a + 0.02 * seed)
    _m_run(root, 10, 1.0, 0, 0.10, agg="fedavg")  # other rules and no-attack runs are not Fig. 4's
    _m_run(root, 10, 1.0, 0, 0.10, attacked=False)
    rows = write_fig4(root, tmp_path / "out", budget="reduced")
    assert [(r["m"], r["epsilon"]) for r in rows] == [(5, 1.0), (10, 0.5), (10, 1.0), (10, 5.0), (20, 1.0), (40, 1.0)]
    r10 = rows[2]
    assert r10["seeds"] == 2 and r10["accuracy_mean"] == pytest.approx(65.0) and r10["accuracy_std"] == pytest.approx(1.414, abs=1e-3)
    assert r10["p_exclude_adversary"] == pytest.approx(0.5) and r10["uniform"] == pytest.approx(0.1)
    md = (tmp_path / "out" / "fig4.md").read_text()
    assert "| 10 | 56.00 ± 1.41 (2) | 65.00 ± 1.41 (2) | 71.00 ± 1.41 (2) |" in md
    assert "m = 10: accuracy rises with ε (within 1 point): **holds** (largest drop 0.00); each step: ε = 0.5 → ε = 1 holds; ε = 1 → ε = 5 holds" in md
    assert "ε = 1: accuracy rises with m (paper's MNIST claim, within 1 point): **holds**" in md
    assert (tmp_path / "out" / "fig4.png").stat().st_size > 0
    _m_run(root, 60, 1.0, 0, 0.50)  # accuracy falls at m = 60
    write_fig4(root, tmp_path / "out2", budget="reduced")
    md = (tmp_path / "out2" / "fig4.md").read_text()
    assert "accuracy rises with m (paper's MNIST claim, within 1 point): **fails** (largest drop 21.00)" in md
    # a step within the seeds' spread is not called a rise: m = 20 → 40 at ε = 1 is +4 with SE 1.41 (holds),
    # m = 5 → 10 +4 (holds); with one seed at m = 60 there is no standard error
    assert "m = 20 → m = 40 holds" in md

    r = CliRunner().invoke(app, ["jdp-report", str(root), "--fig4", "--dest", str(tmp_path / "cli")])
    assert r.exit_code == 0 and "fig4: 7 cells" in r.output, r.output
    r = CliRunner().invoke(app, ["jdp-report", str(root), "--fig4", "--fig5", "--dest", str(tmp_path / "cli")])
    assert r.exit_code == 2 and "--fig4, --fig5: choose one" in r.output
