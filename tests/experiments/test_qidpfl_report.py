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

RECIPES = {
    "FedAvg": "fedavg",
    "FedAvg-select": "fedavg_select",
    "FedAvg-DP": "fedavg_dp",
    "QI-DPFL": "qidpfl",
    "Max": "qidpfl_max",
    "Random": "qidpfl_random",
}
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
    return {
        "name": name,
        "seed": seed,
        "data": {"dataset": "fashion_mnist", "partition": part},
        "train": {"rounds": T, "clients_per_round": 10},
        **extra,
    }


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
                    row: dict[str, Any] = {
                        "round": t,
                        "n_selected": 20 if method == "FedAvg" else 10,
                        "train_loss": 1.0 / (t + 1),
                        "payments": 0.0,
                        "test_acc": acc[t] + OFFSET[seed],
                    }
                    if method in GAME:
                        R = REWARD[kind][method][seed][t]
                        no_range = method == "FedAvg-DP"
                        row.update(
                            payments=R,
                            reward=R,
                            R_star=min(R, 1.0),
                            R_min=0.0 if no_range else 1.0,
                            R_max=math.nan if no_range else 4.0,
                            cost_u_t=COST[kind][method][seed],
                            rho_global=0.01,
                            n_part=10.0,
                        )
                    rows.append(row)
                summary: dict[str, Any] = {
                    "name": RECIPES[method],
                    "seed": seed,
                    "final_accuracy": acc[-1] + OFFSET[seed],
                    "wall_time": 1.0,
                }
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
    _write_run(
        root / "other" / "fedpcs" / "seed_0",
        _cfg("fedpcs", 0, "iid"),
        {"name": "fedpcs", "seed": 0, "final_accuracy": 0.1},
        [{"round": 0, "test_acc": 0.1}],
    )
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
    assert list(csv_rows[0])[:10] == [
        "partition",
        "method",
        "n_seeds",
        "seeds",
        "final_acc_mean",
        "final_acc_std",
        "total_reward_mean",
        "total_cost_mean",
        "epsilon_max_mean",
        "early_acc_mean",
    ]
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


@pytest.mark.parametrize(
    ("kind", "line"),
    [
        # C1: every method's seeds move together (OFFSET), so each paired difference has no spread and
        # its sign decides (p = 0 or 1)
        (
            "iid",
            "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL: holds (FedAvg-DP 60.00 %; "
            "FedAvg 75.00, FedAvg-select 80.00, QI-DPFL 78.50)",
        ),
        # FedAvg is 1 point below FedAvg-DP in both seeds: FedAvg > FedAvg-DP fails, and so does the statement
        (
            "dirichlet",
            "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL: fails "
            "(FedAvg-DP 66.00 %; FedAvg 65.00, FedAvg-select 76.00, QI-DPFL 75.50)",
        ),
        ("iid", "FedAvg-select above FedAvg at the end: holds (final 80.00 vs 75.00 %)"),
        ("iid", "QI-DPFL above FedAvg over the first third of rounds (faster convergence): holds (mean 53.00 vs 45.00 %)"),
        ("dirichlet", "QI-DPFL above FedAvg at the end: holds (final 75.50 vs 65.00 %)"),
        ("dirichlet", "QI-DPFL above FedAvg over the first third of rounds (faster convergence): fails (mean 30.00 vs 35.00 %)"),
        # 1.5 points apart: QI-DPFL + 1 > FedAvg-select fails
        ("iid", "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point): fails (78.50 vs 80.00 %)"),
        ("dirichlet", "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point): holds (75.50 vs 76.00 %)"),
        # C2
        ("iid", "QI-DPFL final accuracy within 1 point of Max: holds (78.50 vs 79.00 %)"),
        ("dirichlet", "QI-DPFL final accuracy within 1 point of Max: fails (75.50 vs 78.00 %)"),
        # Random's cost differs between the seeds (6 and 9) while QI-DPFL's does not: paired t on 2 seeds cannot decide
        ("iid", "QI-DPFL has the lowest total cost U_T of QI-DPFL, Max, Random: not decided (QI-DPFL 3, Max 12, Random 7.5)"),
        ("dirichlet", "QI-DPFL has the lowest total cost U_T of QI-DPFL, Max, Random: fails (QI-DPFL 12, Max 9, Random 15)"),
        # Random's reward varies over the two seeds: Random against QI-DPFL is not decided either way
        ("iid", "QI-DPFL pays the lowest total reward of QI-DPFL, Max, Random: not decided (QI-DPFL 15.5, Max 24, Random 14)"),
        ("dirichlet", "QI-DPFL pays the lowest total reward of QI-DPFL, Max, Random: not decided (QI-DPFL 15.5, Max 24, Random 18.5)"),
        ("iid", "Random's total reward lies between QI-DPFL's and Max's: not decided (QI-DPFL 15.5, Random 14, Max 24)"),
        ("dirichlet", "Random's total reward lies between QI-DPFL's and Max's: not decided (QI-DPFL 15.5, Random 18.5, Max 24)"),
        # C3: the gaps are per seed, both seeds alike
        ("iid", "QI-DPFL above FedAvg-DP at the end (effect of screening): holds (78.50 vs 60.00 %)"),
        ("dirichlet vs iid", "gap QI-DPFL − FedAvg-DP larger under Non-IID than IID: fails (9.50 vs 18.50 points)"),
        ("dirichlet vs iid", "gap FedAvg-select − FedAvg larger under Non-IID than IID: holds (11.00 vs 5.00 points)"),
        ("dirichlet vs iid", "gap QI-DPFL − FedAvg larger under Non-IID than IID: holds (10.50 vs 3.50 points)"),
        # C4: each seed's smallest step up to R_max against 0; under Non-IID seed 0 falls by 0.5 at
        # round 3 and seed 1 rises by at least 0.5: the mean step is 0, not decided
        (
            "iid",
            "QI-DPFL reward R_t rises at every step t until it reaches R_max,t: holds (smallest step R_t − R_{t−1} up to "
            "R_max,t per seed: 0: 0.5, 1: 0.5)",
        ),
        (
            "dirichlet",
            "QI-DPFL reward R_t rises at every step t until it reaches R_max,t: not decided (smallest step R_t − R_{t−1} "
            "up to R_max,t per seed: 0: -0.5, 1: 0.5)",
        ),
    ],
)
def test_claim_sentences(report: tuple[Path, Path, list[dict[str, Any]]], kind: str, line: str) -> None:
    _, dest, _ = report
    md = _checks(dest)
    # the statement, its verdict and the means, on a line of its own; its orderings follow
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
    assert "- **C1: fails.**" in iid and "- **C2: not decided.**" in iid and "- **C3: holds.**" in iid and "- **C4: holds.**" in iid
    assert "- **C1: fails.**" in non and "- **C2: fails.**" in non and "- **C3: holds.**" in non and "- **C4: not decided.**" in non
    assert "- **C3 (gaps larger under Non-IID): fails.**" in across
    assert "![QI-DPFL, IID](fig_iid.png)" in iid and "![QI-DPFL, Non-IID](fig_dirichlet.png)" in non
    assert "| QI-DPFL | 2 | 78.50 ± 0.71 | 53.00 | 15.5 | 3 | 10.00 | — | 2.5 |" in iid  # no qidpfl.npz: ρ_tot —
    assert "| FedAvg | 2 | 75.00 ± 0.71 | 45.00 | — | — | 20.00 | — | — |" in iid
    # each ordering under its statement, by the rule (a paired difference without spread: p = 0)
    assert (
        "  - QI-DPFL ≈ FedAvg-select (final accuracy within 1 point): fails (78.50 vs 80.00 %)\n"
        "    - QI-DPFL + 1 > FedAvg-select: -0.50 points [-0.50, -0.50] (paired t, n = 2, df 1, p = 1 Holm-adjusted; "
        "B > A: p = 0): fails\n"
        "    - FedAvg-select + 1 > QI-DPFL: +2.50 points [2.50, 2.50] (paired t, n = 2, df 1, p = 0 Holm-adjusted): holds\n"
    ) in iid
    # no verdict on the page but the rule's (the old two-standard-error reading is gone)
    assert "standard error" not in md and "within two" not in md and "ties count" not in md


def test_page_states_the_rule_and_the_runs(report: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    """The rule sentence names Holm's family as the number of orderings in orderings.csv, every
    ordering decided once (one row per (split, A, B, quantity)); the sentence on the runs is
    read from their configs."""
    from fedgame.experiments.claims import read_orderings

    _, dest, _ = report
    md = _checks(dest)
    rows = read_orderings(dest / "orderings.csv")
    keys = [(lab["split"], lab["a"], lab["b"], lab["quantity"]) for lab, _ in rows]
    assert len(keys) == len(set(keys)) == 37
    assert f"p Holm-adjusted over the {len(rows)} orderings of this page" in md
    assert list(rows[0][0]) == ["claim", "split", "a", "b", "quantity", "statement"]
    assert all(d.adjusted for _, d in rows)
    # QI-DPFL above FedAvg-DP serves C1 (lowest) and C3 (screening): one row, both claims
    (shared,) = [lab for lab, _ in rows if (lab["split"], lab["a"], lab["b"]) == ("iid", "QI-DPFL", "FedAvg-DP")]
    assert shared["claim"] == "C1; C3" and shared["quantity"] == "final accuracy (%)"
    gap = [lab for lab, _ in rows if lab["split"] == "dirichlet vs iid"]
    assert [lab["a"] for lab in gap] == ["QI-DPFL − FedAvg-DP (Non-IID)", "FedAvg-select − FedAvg (Non-IID)", "QI-DPFL − FedAvg (Non-IID)"]
    assert (
        "Runs (from their configs): 24 runs of 6 rounds over 20 clients; `train.clients_per_round` 10 for FedAvg, "
        "FedAvg-select, FedAvg-DP, QI-DPFL, Max, Random"
    ) in md
    assert "seeds 0 1 in each of the 12 cells." in md and "rounds 1 to ⌈6/3⌉ = 2" in md


# fixed per-seed final accuracies (%) of QI-DPFL and FedAvg-DP; only C3's "QI-DPFL above FedAvg-DP"
# can be decided from them (C1's "lowest" needs FedAvg and FedAvg-select), so Holm's family is one
# ordering and p is the test's own
DECIDED = [
    # seeds 0-2 in both: paired t
    ({0: 80.0, 1: 81.0, 2: 82.5}, {0: 70.0, 1: 72.0, 2: 71.0}, "paired t", "holds"),
    ({0: 70.0, 1: 72.0, 2: 71.0}, {0: 80.0, 1: 81.0, 2: 82.5}, "paired t", "fails"),
    ({0: 80.0, 1: 75.0, 2: 78.0}, {0: 77.0, 1: 79.0, 2: 76.0}, "paired t", "not decided"),
    # no seed in common: Welch
    ({0: 80.0, 1: 81.0, 2: 82.0}, {3: 70.0, 4: 71.5, 5: 73.0}, "Welch t", "holds"),
    ({0: 80.0, 1: 70.0, 2: 75.0}, {3: 76.0, 4: 72.0, 5: 74.0}, "Welch t", "not decided"),
]


def _c3(values: dict[tuple[str, str, str], dict[int, float]], split: str = "iid") -> Any:
    from fedgame.experiments.qidpfl_report import evaluate_claims

    checks = evaluate_claims(values)
    (c,) = [c for c in checks if c.claim == "C3" and c.partition == split and not c.missing]
    return checks, c


@pytest.mark.parametrize(("qi", "dp", "test", "verdict"), DECIDED)
def test_verdict_and_p_are_scipys(qi: dict[int, float], dp: dict[int, float], test: str, verdict: str) -> None:
    from scipy import stats

    checks, c = _c3({("iid", "QI-DPFL", "final_acc"): qi, ("iid", "FedAvg-DP", "final_acc"): dp})
    (d,) = c.decisions
    a, b = list(qi.values()), list(dp.values())
    if test == "paired t":
        greater, less = stats.ttest_rel(a, b, alternative="greater"), stats.ttest_rel(a, b, alternative="less")
        ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    else:
        greater = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
        less = stats.ttest_ind(a, b, equal_var=False, alternative="less")
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d.test == test and d.verdict == verdict and c.verdict == verdict
    assert d.p == pytest.approx(greater.pvalue, rel=1e-9) and d.p_reverse == pytest.approx(less.pvalue, rel=1e-9)
    assert (d.ci_low, d.ci_high) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))
    assert d.diff == pytest.approx(float(np.mean(a) - np.mean(b)))
    # the other statements lack runs and decide nothing
    others = [x for x in checks if x is not c]
    assert others and all(x.verdict == "not decided (a method is missing)" and not x.decisions for x in others)
    assert c.ordering_lines() == [f"QI-DPFL > FedAvg-DP: {d.line(spec='.2f', unit=' points')}"]


def test_one_seed_decides_nothing() -> None:
    _, c = _c3({("iid", "QI-DPFL", "final_acc"): {0: 80.0}, ("iid", "FedAvg-DP", "final_acc"): {0: 70.0}})
    (d,) = c.decisions
    assert d.test == "none" and d.verdict == c.verdict == "not decided (one seed)" and math.isnan(d.p)
    assert d.diff == 10.0 and c.ordering_lines() == ["QI-DPFL > FedAvg-DP: +10.00 points: not decided (one seed)"]


def test_gap_larger_under_non_iid_is_decided_on_the_per_seed_gaps() -> None:
    """C3's "gap larger under Non-IID" is "A − B under Non-IID above A − B under IID", seed by
    seed: the paired t-test on the per-seed gaps; Holm over the page's three orderings."""
    from scipy import stats

    from fedgame.experiments.claims import decide, holm

    qi = {"iid": {0: 80.0, 1: 81.0, 2: 79.0}, "dirichlet": {0: 78.0, 1: 79.5, 2: 77.0}}
    dp = {"iid": {0: 75.0, 1: 75.5, 2: 74.5}, "dirichlet": {0: 65.0, 1: 68.0, 2: 66.5}}
    values = {(k, m, "final_acc"): v[k] for m, v in (("QI-DPFL", qi), ("FedAvg-DP", dp)) for k in ("iid", "dirichlet")}
    checks, gap = _c3(values, "dirichlet vs iid")
    g_non = [qi["dirichlet"][s] - dp["dirichlet"][s] for s in range(3)]
    g_iid = [qi["iid"][s] - dp["iid"][s] for s in range(3)]
    raw = stats.ttest_rel(g_non, g_iid, alternative="greater").pvalue
    assert decide(dict(enumerate(g_non)), dict(enumerate(g_iid))).p == pytest.approx(raw, rel=1e-9)
    family = holm([decide(qi[k], dp[k]) for k in ("iid", "dirichlet")] + [decide(dict(enumerate(g_non)), dict(enumerate(g_iid)))])
    (d,) = gap.decisions
    assert d == family[2] and d.p >= raw and d.verdict == "holds" and d.diff == pytest.approx(np.mean(g_non) - np.mean(g_iid))
    assert gap.pairs == (("QI-DPFL − FedAvg-DP (Non-IID)", "QI-DPFL − FedAvg-DP (IID)"),)
    per_partition = [c.decisions[0] for c in checks if c.claim == "C3" and " vs " not in c.partition]
    assert per_partition == family[:2]


def test_c4_fails_when_every_seed_falls() -> None:
    from scipy import stats

    from fedgame.experiments.qidpfl_report import evaluate_claims

    rises = {0: -0.5, 1: -0.4, 2: -0.6}
    (c,) = [c for c in evaluate_claims({("iid", "QI-DPFL", "min_rise"): rises}) if c.claim == "C4"]
    (d,) = c.decisions
    assert c.pairs == (("QI-DPFL smallest step", "0"),) and d.verdict == c.verdict == "fails"
    want = stats.ttest_rel(list(rises.values()), [0.0] * 3, alternative="less").pvalue
    assert d.p_reverse == pytest.approx(want, rel=1e-9)


def test_orderings_are_decided_per_seed_against_scipy(tmp_path: Path) -> None:
    """From run folders: the first-third and final orderings are scipy's paired t-tests on the
    per-seed accuracies, Holm-adjusted over the page's two orderings (QI-DPFL's constant reward
    has no step that rises or falls: its C4 ordering has no p and is outside the family);
    orderings.csv carries the same decisions as the page."""
    from scipy import stats

    from fedgame.experiments.claims import decide, holm, read_orderings

    root = tmp_path / "runs"
    offs = {"FedAvg": (0.02, -0.02, 0.0), "QI-DPFL": (-0.01, 0.03, 0.005)}
    for method, base in (("FedAvg", 0.50), ("QI-DPFL", 0.505)):
        for seed, off in enumerate(offs[method]):
            rows = [{"round": t, "n_selected": 10, "test_acc": base + off, "reward": 1.0, "cost_u_t": 1.0} for t in range(T)]
            _write_run(
                root / "qidpfl_iid" / RECIPES[method] / f"seed_{seed}",
                _cfg(RECIPES[method], seed, "iid"),
                {"name": RECIPES[method], "seed": seed, "final_accuracy": base + off},
                rows,
            )
    write_comparison(root, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "comparison.md").read_text()
    got = {lab["quantity"]: d for lab, d in read_orderings(tmp_path / "out" / "orderings.csv")}
    assert set(got) == {"final accuracy (%)", "accuracy over the first third of rounds (%)", "smallest step R_t − R_{t−1} up to R_max,t"}
    q = {s: 100 * (0.505 + o) for s, o in enumerate(offs["QI-DPFL"])}
    f = {s: 100 * (0.50 + o) for s, o in enumerate(offs["FedAvg"])}
    raw = stats.ttest_rel(list(q.values()), list(f.values()), alternative="greater").pvalue
    assert decide(q, f).p == pytest.approx(raw, rel=1e-9)
    final, _ = holm([decide(q, f), decide(q, f)])  # every round at the final accuracy: the same samples twice
    for d in (got["final accuracy (%)"], got["accuracy over the first third of rounds (%)"]):
        assert d.test == "paired t" and d.verdict == "not decided" and d.p == pytest.approx(final.p, rel=1e-9) and d.p > raw
    c4 = got["smallest step R_t − R_{t−1} up to R_max,t"]
    assert c4.diff == 0.0 and math.isnan(c4.p) and c4.verdict == "not decided" and not c4.adjusted
    assert "p Holm-adjusted over the 2 orderings of this page" in md
    assert "QI-DPFL above FedAvg over the first third of rounds (faster convergence): not decided (mean 51.33 vs 50.00 %)" in md


def test_figures_and_configs(report: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    root, dest, _ = report
    for kind in ("iid", "dirichlet"):
        png = dest / f"fig_{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < png.stat().st_size < 400_000
    configs = sorted(p.name for p in (dest / "configs").iterdir())
    assert len(configs) == 24  # 6 methods × 2 partitions × 2 seeds, the two grids kept apart
    assert "qidpfl_iid__qidpfl__seed_0.yaml" in configs and "qidpfl_dirichlet__qidpfl__seed_0.yaml" in configs
    assert (dest / "configs" / "qidpfl_dirichlet__qidpfl_max__seed_1.yaml").read_text() == (
        root / "qidpfl_dirichlet" / "qidpfl_max" / "seed_1" / "config.yaml"
    ).read_text()


def test_missing_method_is_undecided(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _comparison_tree(root)
    for seed in SEEDS:
        for f in (root / "qidpfl_iid" / "qidpfl_max" / f"seed_{seed}").iterdir():
            f.unlink()
    rows = write_comparison(root / "qidpfl_iid", tmp_path / "out", budget="test")
    assert {r["method"] for r in rows} == set(RECIPES) - {"Max"}
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "QI-DPFL final accuracy within 1 point of Max: not decided (a method is missing) (no final accuracy (%) of Max)\n" in md
    assert "- **C2: not decided (a method is missing).**" in md  # every C2 statement needs Max
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
RHO_I = [float(10.0**k) for k in np.arange(-6.0, -0.99, 0.5)]  # the recipe grid of privacy.rho (per client)


def _sweep_tree(root: Path) -> None:
    for kind, (i1, b, i3) in TRUTH.items():
        for rho_i in RHO_I:
            acc = i1 - b * math.exp(-i3 * N * rho_i)
            name = f"qidpfl_sweep[rho={rho_i:g}]"
            cfg = _cfg(name, 0, kind, privacy={"kind": "zcdp_upload", "rho": rho_i, "clip": 1.0})
            rows = [{"round": t, "n_selected": N, "test_acc": acc if t == T - 1 else math.nan} for t in range(T)]
            _write_run(
                root / f"qidpfl_sweep_{kind}" / f"qidpfl_sweep_rho={rho_i:g}" / "seed_0",
                cfg,
                {"name": name, "seed": 0, "final_accuracy": acc},
                rows,
            )


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
    from fedgame.experiments.claims import decide

    c = ClaimCheck("C2", "iid", "statement", "final_acc", "no final accuracy (%) of Max", missing=("Max",))
    assert c.verdict == "not decided (a method is missing)" and c.ordering_lines() == []
    assert c.line() == "statement: not decided (a method is missing) (no final accuracy (%) of Max)"
    # several orderings: all_hold (one holds, one has a single seed)
    held, one = decide({0: 2.0, 1: 3.0, 2: 4.0}, {0: 1.0, 1: 1.5, 2: 2.5}), decide({0: 2.0}, {0: 1.0})
    c = ClaimCheck("C2", "iid", "statement", "total_cost", "QI-DPFL 1", (("Max", "QI-DPFL"), ("Random", "QI-DPFL")), (held, one))
    assert held.verdict == "holds" and c.verdict == "not decided (one seed)"
    assert c.ordering_lines() == [f"Max > QI-DPFL: {held.line(spec='.4g')}", "Random > QI-DPFL: +1: not decided (one seed)"]


def test_page_states_each_methods_upload_noise_from_its_config(tmp_path: Path) -> None:
    """The upload noise (``privacy.mode`` and C) is read from the private runs' configs, per
    method: a page of paper_params runs says so, and a method that ran another C is named
    apart; the non-private methods are not listed."""
    root = tmp_path / "runs"
    _comparison_tree(root)
    for cfg_path in root.rglob("config.yaml"):
        cfg = yaml.safe_load(cfg_path.read_text())
        if cfg["name"] in {RECIPES[m] for m in GAME}:
            clip = 1.0 if cfg["name"] == RECIPES["Max"] else 3.3
            cfg["privacy"] = {"kind": "zcdp_upload", "rho": "game", "clip": clip, "mode": "paper_params"}
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    write_comparison(root, tmp_path / "out", budget="test")
    md = (tmp_path / "out" / "comparison.md").read_text()
    noise = md.split("Upload noise: ", 1)[1].split("\n", 1)[0]
    assert noise == (
        "`privacy.mode: paper_params` (the local model's parameters clipped to norm C and noised, Corollary 1 read "
        "literally), C = 3.3 for FedAvg-DP, QI-DPFL, Random; `privacy.mode: paper_params` (the local model's parameters "
        "clipped to norm C and noised, Corollary 1 read literally), C = 1 for Max."
    )
