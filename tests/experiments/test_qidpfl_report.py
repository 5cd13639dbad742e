"""The QI-DPFL report: the accuracy-curve fit over a sweep grid (Fig. 2), and the six-method
comparison — CSV numbers, the verdicts of claims C1-C4 (spec qidpfl.md §5.5), the figures and
the configs — on hand-written run folders as ``fedgame compare`` lays them out."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.qidpfl_report import ClaimCheck, write_comparison, write_curve

RECIPES = {"FedAvg": "fedavg", "FedAvg-select": "fedavg_select", "FedAvg-DP": "fedavg_dp",
           "QI-DPFL": "qidpfl", "Max": "qidpfl_max", "Random": "qidpfl_random"}
GAME = ("FedAvg-DP", "QI-DPFL", "Max", "Random")
T = 6  # rounds; the first third is rounds 1-2
SEEDS = (0, 1)
OFFSET = {0: +0.005, 1: -0.005}  # accuracy offset per seed: std over the two seeds = 0.5·√2 points

# partition → method → test accuracy per round (the mean over seeds)
ACC: dict[str, dict[str, list[float]]] = {
    "iid": {
        "FedAvg": [0.40, 0.50, 0.60, 0.65, 0.70, 0.75],
        "FedAvg-select": [0.50, 0.60, 0.70, 0.74, 0.78, 0.80],
        "FedAvg-DP": [0.30, 0.40, 0.50, 0.55, 0.58, 0.60],
        "QI-DPFL": [0.48, 0.58, 0.68, 0.72, 0.76, 0.785],  # 1.5 below FedAvg-select
        "Max": [0.48, 0.58, 0.68, 0.72, 0.77, 0.79],
        "Random": [0.47, 0.57, 0.67, 0.71, 0.75, 0.78],
    },
    "dirichlet": {
        "FedAvg": [0.30, 0.40, 0.50, 0.55, 0.60, 0.65],
        "FedAvg-select": [0.45, 0.55, 0.65, 0.70, 0.74, 0.76],
        "FedAvg-DP": [0.35, 0.45, 0.55, 0.58, 0.62, 0.66],  # above FedAvg at the end
        "QI-DPFL": [0.25, 0.35, 0.60, 0.70, 0.74, 0.755],  # slower than FedAvg early
        "Max": [0.45, 0.55, 0.65, 0.70, 0.75, 0.78],  # 2.5 above QI-DPFL
        "Random": [0.40, 0.50, 0.60, 0.66, 0.72, 0.76],
    },
}
# partition → method → seed → reward R_t per round (FedAvg-DP: the same for both seeds)
REWARD: dict[str, dict[str, dict[int, list[float]]]] = {
    "iid": {
        "QI-DPFL": {s: [1.0, 1.5, 2.0, 3.0, 4.0, 4.0] for s in SEEDS},  # rises to R_max = 4: C4 holds
        "Max": {s: [4.0] * T for s in SEEDS},
        "Random": {0: [2.0, 3.0, 1.0, 4.0, 2.0, 3.0], 1: [3.0, 1.0, 2.0, 2.0, 4.0, 1.0]},  # 15, 13: below QI-DPFL
        "FedAvg-DP": {s: [2.0] * T for s in SEEDS},
    },
    "dirichlet": {
        "QI-DPFL": {0: [1.0, 2.0, 1.5, 3.0, 4.0, 4.0], 1: [1.0, 1.5, 2.0, 3.0, 4.0, 4.0]},  # seed 0 falls at round 3
        "Max": {s: [4.0] * T for s in SEEDS},
        "Random": {0: [3.0] * T, 1: [3.0, 3.0, 3.0, 3.0, 3.0, 4.0]},  # 18, 19
        "FedAvg-DP": {s: [2.0] * T for s in SEEDS},
    },
}
# partition → method → seed → server cost u_t (constant over rounds)
COST: dict[str, dict[str, dict[int, float]]] = {
    "iid": {"QI-DPFL": {0: 0.5, 1: 0.5}, "Max": {0: 2.0, 1: 2.0}, "Random": {0: 1.0, 1: 1.5}, "FedAvg-DP": {0: 1.0, 1: 1.0}},
    "dirichlet": {"QI-DPFL": {0: 2.0, 1: 2.0}, "Max": {0: 1.5, 1: 1.5}, "Random": {0: 2.5, 1: 2.5}, "FedAvg-DP": {0: 1.0, 1: 1.0}},
}
EPS = {0: 2.0, 1: 3.0}  # epsilon_max of the private runs per seed


def _cfg(name: str, seed: int, kind: str, **extra: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"kind": kind, "n_clients": 20}
    if kind == "dirichlet":
        part["alpha"] = 1.0
    return {"name": name, "seed": seed, "data": {"dataset": "fashion_mnist", "partition": part},
            "train": {"rounds": T, "clients_per_round": 10}, **extra}


def _write_run(d: Path, cfg: dict[str, Any], summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (d / "summary.json").write_text(json.dumps(summary))
    with (d / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _comparison_tree(root: Path) -> None:
    """``fedgame compare`` of the six recipes, 2 seeds, into runs/qidpfl_<partition>."""
    for kind, methods in ACC.items():
        for method, acc in methods.items():
            for seed in SEEDS:
                rows: list[dict[str, Any]] = []
                for t in range(T):
                    row: dict[str, Any] = {"round": t, "n_selected": 20 if method == "FedAvg" else 10,
                                           "train_loss": 1.0 / (t + 1), "payments": 0.0,
                                           "test_acc": acc[t] + OFFSET[seed]}
                    if method in GAME:
                        R = REWARD[kind][method][seed][t]
                        no_range = method == "FedAvg-DP"
                        row.update(payments=R, reward=R, R_star=min(R, 1.0), R_min=0.0 if no_range else 1.0,
                                   R_max=math.nan if no_range else 4.0, cost_u_t=COST[kind][method][seed],
                                   rho_global=0.01, n_part=10.0)
                    rows.append(row)
                summary: dict[str, Any] = {"name": RECIPES[method], "seed": seed, "final_accuracy": acc[-1] + OFFSET[seed],
                                           "wall_time": 1.0}
                if method in GAME:
                    summary["epsilon_max"] = EPS[seed]
                elif method == "FedAvg-select":
                    summary["epsilon_max"] = None  # no ledger (ε = ∞ stored as null)
                _write_run(root / f"qidpfl_{kind}" / RECIPES[method] / f"seed_{seed}", _cfg(RECIPES[method], seed, kind), summary, rows)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("qidpfl")
    root = tmp / "runs"
    _comparison_tree(root)
    # a run of another paper under the same root is ignored
    _write_run(root / "other" / "fedpcs" / "seed_0", _cfg("fedpcs", 0, "iid"),
               {"name": "fedpcs", "seed": 0, "final_accuracy": 0.1}, [{"round": 0, "test_acc": 0.1}])
    dest = tmp / "out"
    rows = write_comparison(root, dest, budget="test")
    return root, dest, rows


def _row(rows: list[dict[str, Any]], kind: str, method: str) -> dict[str, Any]:
    (r,) = [r for r in rows if r["partition"] == kind and r["method"] == method]
    return r


def test_comparison_csv_numbers(report: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    _, dest, rows = report
    assert [(r["partition"], r["method"]) for r in rows] == [(k, m) for k in ("iid", "dirichlet") for m in RECIPES]
    with (dest / "comparison.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 12
    assert list(csv_rows[0])[:10] == ["partition", "method", "n_seeds", "seeds", "final_acc_mean", "final_acc_std",
                                      "total_reward_mean", "total_cost_mean", "epsilon_max_mean", "early_acc_mean"]
    by = {(r["partition"], r["method"]): r for r in csv_rows}
    qi = by[("iid", "QI-DPFL")]
    assert qi["n_seeds"] == "2" and qi["seeds"] == "0 1"
    assert float(qi["final_acc_mean"]) == 78.5  # (79.0 + 78.0) / 2
    assert float(qi["final_acc_std"]) == 0.71  # |79 − 78| / √2
    assert float(qi["early_acc_mean"]) == 53.0  # rounds 1-2: (48 + 58) / 2
    assert float(qi["total_reward_mean"]) == 15.5  # 1 + 1.5 + 2 + 3 + 4 + 4
    assert float(qi["total_cost_mean"]) == 3.0  # 6 × 0.5
    assert float(qi["epsilon_max_mean"]) == 2.5  # (2 + 3) / 2
    assert list(csv_rows[0])[-3:] == ["early_acc_std", "total_reward_std", "total_cost_std"]
    assert float(qi["early_acc_std"]) == 0.71 and float(qi["total_reward_std"]) == 0.0
    rnd = by[("iid", "Random")]
    assert float(rnd["total_reward_mean"]) == 14.0  # (15 + 13) / 2
    assert float(rnd["total_reward_std"]) == pytest.approx(math.sqrt(2), rel=1e-5)  # |15 − 13| / √2
    assert float(rnd["total_cost_std"]) == pytest.approx(1.5 * math.sqrt(2), rel=1e-5)  # |6 − 9| / √2
    assert float(rnd["total_cost_mean"]) == 7.5  # (6 + 9) / 2
    assert float(by[("dirichlet", "Random")]["total_reward_mean"]) == 18.5
    assert float(by[("dirichlet", "QI-DPFL")]["total_cost_mean"]) == 12.0
    assert float(by[("dirichlet", "FedAvg")]["final_acc_mean"]) == 65.0
    assert float(by[("dirichlet", "FedAvg")]["early_acc_mean"]) == 35.0
    for method in ("FedAvg", "FedAvg-select"):  # no game, no ledger
        r = by[("iid", method)]
        assert math.isnan(float(r["total_reward_mean"])) and math.isnan(float(r["total_cost_mean"]))
        assert math.isnan(float(r["epsilon_max_mean"]))
    assert rows[0]["budget"] == "test" and rows[0]["rounds"] == T


def _checks(dest: Path) -> str:
    return (dest / "comparison.md").read_text()


@pytest.mark.parametrize(("kind", "line"), [
    # C1
    ("iid", "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL: holds (FedAvg-DP 60.00 %; "
            "FedAvg 75.00, FedAvg-select 80.00, QI-DPFL 78.50)"),
    # FedAvg's mean is 1 point below FedAvg-DP's, inside two standard errors of the difference
    ("dirichlet", "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL: within two standard errors "
                  "(FedAvg-DP 66.00 %; FedAvg 65.00, FedAvg-select 76.00, QI-DPFL 75.50)"),
    ("iid", "FedAvg-select above FedAvg at the end: holds (final 80.00 vs 75.00 %)"),
    ("iid", "QI-DPFL above FedAvg over the first third of rounds (faster convergence): holds (mean 53.00 vs 45.00 %)"),
    ("dirichlet", "QI-DPFL above FedAvg at the end: holds (final 75.50 vs 65.00 %)"),
    ("dirichlet", "QI-DPFL above FedAvg over the first third of rounds (faster convergence): fails (mean 30.00 vs 35.00 %)"),
    ("iid", "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point): fails (78.50 vs 80.00 %, |difference| 1.50)"),
    ("dirichlet", "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point): holds (75.50 vs 76.00 %, |difference| 0.50)"),
    # C2
    ("iid", "QI-DPFL final accuracy within 1 point of Max: holds (78.50 vs 79.00 %, |difference| 0.50)"),
    ("dirichlet", "QI-DPFL final accuracy within 1 point of Max: fails (75.50 vs 78.00 %, |difference| 2.50)"),
    ("iid", "QI-DPFL has the lowest total cost U_T of QI-DPFL, Max, Random: holds (QI-DPFL 3, Max 12, Random 7.5)"),
    ("dirichlet", "QI-DPFL has the lowest total cost U_T of QI-DPFL, Max, Random: fails (QI-DPFL 12, Max 9, Random 15)"),
    # Random's 14 ± 1.41 is 1.5 below QI-DPFL's 15.5 ± 0: inside two standard errors (2 × 1.0)
    ("iid", "QI-DPFL pays the lowest total reward of QI-DPFL, Max, Random: within two standard errors (QI-DPFL 15.5, Max 24, Random 14)"),
    ("dirichlet", "QI-DPFL pays the lowest total reward of QI-DPFL, Max, Random: holds (QI-DPFL 15.5, Max 24, Random 18.5)"),
    ("iid", "Random's total reward lies between QI-DPFL's and Max's (mean over seeds): within two standard errors (QI-DPFL 15.5, Random 14, Max 24)"),
    ("dirichlet", "Random's total reward lies between QI-DPFL's and Max's (mean over seeds): holds (QI-DPFL 15.5, Random 18.5, Max 24)"),
    # C3
    ("iid", "QI-DPFL above FedAvg-DP at the end (effect of screening): holds (78.50 vs 60.00 %)"),
    ("dirichlet vs iid", "gap QI-DPFL − FedAvg-DP larger under Non-IID than IID: fails (9.50 vs 18.50 points)"),
    ("dirichlet vs iid", "gap FedAvg-select − FedAvg larger under Non-IID than IID: holds (11.00 vs 5.00 points)"),
    ("dirichlet vs iid", "gap QI-DPFL − FedAvg larger under Non-IID than IID: holds (10.50 vs 3.50 points)"),
    # C4
    ("iid", "QI-DPFL reward R_t non-decreasing in t until it reaches R_max,t: holds (seed 0: non-decreasing, R_max reached at "
            "round 5; seed 1: non-decreasing, R_max reached at round 5)"),
    ("dirichlet", "QI-DPFL reward R_t non-decreasing in t until it reaches R_max,t: fails (seed 0: falls at round 3 (2 → 1.5), "
                  "R_max reached at round 5; seed 1: non-decreasing, R_max reached at round 5)"),
])
def test_claim_sentences(report: tuple[Path, Path, list[dict[str, Any]]], kind: str, line: str) -> None:
    _, dest, _ = report
    md = _checks(dest)
    assert f"  - {line}\n" in md
    # and under the right heading
    heading = "## Across partitions" if " vs " in kind else ("## IID" if kind == "iid" else "## Non-IID")
    section = md.split(heading, 1)[1].split("\n## ", 1)[0]
    assert line in section


def test_claim_verdicts_per_claim(report: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    _, dest, _ = report
    md = _checks(dest)
    iid, rest = md.split("## IID", 1)[1].split("## Non-IID", 1)
    non, across = rest.split("## Across partitions", 1)
    assert "- **C1: fails.**" in iid and "- **C2: within two standard errors.**" in iid and "- **C3: holds.**" in iid and "- **C4: holds.**" in iid
    assert "- **C1: fails.**" in non and "- **C2: fails.**" in non and "- **C3: holds.**" in non and "- **C4: fails.**" in non
    assert "- **C3 (gaps larger under Non-IID): fails.**" in across
    assert "![QI-DPFL, IID](fig_iid.png)" in iid and "![QI-DPFL, Non-IID](fig_dirichlet.png)" in non
    assert "| QI-DPFL | 2 | 78.50 ± 0.71 | 53.00 | 15.5 | 3 | 10.00 | — | 2.5 |" in iid  # no qidpfl.npz: ρ_tot —
    assert "| FedAvg | 2 | 75.00 ± 0.71 | 45.00 | — | — | 20.00 | — | — |" in iid


def test_early_accuracy_ordering_within_noise(tmp_path: Path) -> None:
    """The first-third ordering carries its noise verdict: QI-DPFL's early accuracy 0.5 points
    above FedAvg's with seeds 2 points apart on either side is inside two standard errors, not
    "holds" on the point estimate alone."""
    root = tmp_path / "runs"
    for method, base in (("FedAvg", 0.50), ("QI-DPFL", 0.505)):
        for seed, off in ((0, 0.02), (1, -0.02)):
            rows = [{"round": t, "n_selected": 10, "test_acc": base + off, "reward": 1.0, "cost_u_t": 1.0} for t in range(T)]
            _write_run(root / "qidpfl_iid" / RECIPES[method] / f"seed_{seed}", _cfg(RECIPES[method], seed, "iid"),
                       {"name": RECIPES[method], "seed": seed, "final_accuracy": base + off}, rows)
    write_comparison(root, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert ("QI-DPFL above FedAvg over the first third of rounds (faster convergence): within two standard errors "
            "(mean 50.50 vs 50.00 %)") in md


def test_figures_and_configs(report: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    root, dest, _ = report
    for kind in ("iid", "dirichlet"):
        png = dest / f"fig_{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < png.stat().st_size < 400_000
    configs = sorted(p.name for p in (dest / "configs").iterdir())
    assert len(configs) == 24  # 6 methods × 2 partitions × 2 seeds, the two grids kept apart
    assert "qidpfl_iid__qidpfl__seed_0.yaml" in configs and "qidpfl_dirichlet__qidpfl__seed_0.yaml" in configs
    assert (dest / "configs" / "qidpfl_dirichlet__qidpfl_max__seed_1.yaml").read_text() == \
        (root / "qidpfl_dirichlet" / "qidpfl_max" / "seed_1" / "config.yaml").read_text()


def test_missing_method_is_undecided(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _comparison_tree(root)
    for seed in SEEDS:
        for f in (root / "qidpfl_iid" / "qidpfl_max" / f"seed_{seed}").iterdir():
            f.unlink()
    rows = write_comparison(root / "qidpfl_iid", tmp_path / "out", budget="test")
    assert {r["method"] for r in rows} == set(RECIPES) - {"Max"}
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "QI-DPFL final accuracy within 1 point of Max: undecided (no number for Max)" in md
    assert "- **C2: undecided.**" in md  # every C2 statement needs Max
    assert "- **C1: fails.**" in md  # C1 does not
    assert "## Across partitions" not in md  # one partition: no C3 gaps


def test_mixed_cell_raises(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _comparison_tree(root)
    path = root / "qidpfl_iid" / "qidpfl" / "seed_1" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["train"]["rounds"] = 7
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"QI-DPFL runs on partition iid .* differ in train\.rounds"):
        write_comparison(root, tmp_path / "out", budget="test")


# -- the accuracy curve ----------------------------------------------------------------------------
TRUTH = {"iid": (0.88, 0.70, 80.0), "dirichlet": (0.80, 0.60, 30.0)}  # (I1, B, I3)
N = 10  # screened clients per round
RHO_I = [float(10.0 ** k) for k in np.arange(-6.0, -0.99, 0.5)]  # the recipe grid of privacy.rho (per client)


def _sweep_tree(root: Path) -> None:
    for kind, (i1, b, i3) in TRUTH.items():
        for rho_i in RHO_I:
            acc = i1 - b * math.exp(-i3 * N * rho_i)
            name = f"qidpfl_sweep[rho={rho_i:g}]"
            cfg = _cfg(name, 0, kind, privacy={"kind": "zcdp_upload", "rho": rho_i, "clip": 1.0})
            rows = [{"round": t, "n_selected": N, "test_acc": acc if t == T - 1 else math.nan} for t in range(T)]
            _write_run(root / f"qidpfl_sweep_{kind}" / f"qidpfl_sweep_rho={rho_i:g}" / "seed_0", cfg,
                       {"name": name, "seed": 0, "final_accuracy": acc}, rows)


def test_curve_recovers_truth(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _sweep_tree(root)
    _comparison_tree(root)  # other recipes under the same root are ignored
    out = write_curve(root, tmp_path / "out")
    assert list(out) == ["iid", "dirichlet"]
    saved = json.loads((tmp_path / "out" / "curve.json").read_text())
    assert saved == out
    for kind, (i1, b, i3) in TRUTH.items():
        c = out[kind]
        assert c["I1"] == pytest.approx(i1, rel=1e-5) and c["B"] == pytest.approx(b, rel=1e-5) and c["I3"] == pytest.approx(i3, rel=1e-5)
        assert c["rmse"] < 1e-6 and set(c["stderr"]) == {"I1", "B", "I3"}
        assert len(c["points"]) == len(RHO_I) and c["n_participants"] == [N]
        rho = [p[0] for p in c["points"]]
        assert rho == pytest.approx([N * r for r in RHO_I], rel=1e-12)  # ρ_glob = n·ρ_i, ascending
        assert c["points"][0][1] == pytest.approx(i1 - b * math.exp(-i3 * N * RHO_I[0]), abs=1e-15)
    png = tmp_path / "out" / "fig2_curve.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size < 300_000
    assert len(list((tmp_path / "out" / "configs").iterdir())) == 2 * len(RHO_I)


def test_curve_too_few_points(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _sweep_tree(root)
    for d in sorted((root / "qidpfl_sweep_iid").iterdir())[3:]:
        for f in (d / "seed_0").iterdir():
            f.unlink()
    out = write_curve(root, tmp_path / "out")
    assert out["iid"]["I1"] is None and "error" in out["iid"] and len(out["iid"]["points"]) == 3
    assert out["dirichlet"]["I1"] == pytest.approx(TRUTH["dirichlet"][0], rel=1e-5)


def test_report_command_both_modes(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _comparison_tree(root)
    _sweep_tree(root / "sweep")
    r = CliRunner().invoke(app, ["report", str(root), "--kind", "qidpfl", "--out", str(tmp_path / "cmp"), "--budget", "full"])
    assert r.exit_code == 0 and "12 cells" in r.stdout, r.output
    r = CliRunner().invoke(app, ["report", str(root / "sweep"), "--kind", "qidpfl-curve", "--out", str(tmp_path / "curve")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "cmp" / "comparison.csv").exists() and (tmp_path / "curve" / "curve.json").exists()
    assert "budget: full" in (tmp_path / "cmp" / "comparison.md").read_text()
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nowhere"), "--kind", "qidpfl"])
    assert r.exit_code == 2 and "not a folder" in r.stderr


def test_claimcheck_line() -> None:
    c = ClaimCheck("C2", "iid", "statement", None, "no number for Max")
    assert c.verdict == "undecided" and c.line() == "statement: undecided (no number for Max)"
