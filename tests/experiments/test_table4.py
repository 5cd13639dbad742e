"""The PHS Table III/IV writer: grouping of run folders into (mechanism, s, dataset) cells,
mean ± std over seeds, the paper's numbers in their cells, the orderings, and the figures; the
Fig. 5 writer over (mechanism, local batch size B) cells; and the tight-vs-paper page.

Every ordering these pages print is decided by :func:`fedgame.experiments.claims.decide` from
per-seed accuracies: the tests build per-seed samples that make each verdict (holds, fails, not
decided, not decided (one seed)) come out and check the pages' p against SciPy's own paired and
Welch t-tests on the same samples."""

from __future__ import annotations

import re

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.claims import ORDERINGS, Decision, read_orderings
from fedgame.experiments.table4 import (
    PAPER_TABLE3_MNIST,
    PAPER_TABLE4_FMNIST,
    fig5_ordering,
    fig5_rises,
    write_fig5,
    write_table4,
)
from fedgame.privacy.analysis import phs_V
from fedgame.selection.phs_problem import solve_p1

# spec §3.5's golden example: 5 clients
SIZES = np.array([500, 600, 700, 550, 650])
EPS = np.array([0.2, 0.5, 1.0, 5.0, 10.0])
D, ETA, B, DELTA = 26010, 1.0, 64, 1e-5
RECIPES = {"P": "phs_privacy_aware", "U": "phs_unbiased", "B": "phs_biased"}

# (mechanism, s) → final accuracy per seed 0, 1; at s = 30 the biased mechanism beats P
ACC = {
    ("P", 100): (0.60, 0.64),
    ("U", 100): (0.20, 0.22),
    ("B", 100): (0.30, 0.36),
    ("P", 30): (0.50, 0.52),
    ("U", 30): (0.10, 0.14),
    ("B", 30): (0.55, 0.57),
}
PLD_MEAN, PLD_MAX = (0.80, 0.90), (0.95, 0.99)  # per seed, even / odd


def _pct(accs: Iterable[float]) -> list[float]:
    """Accuracies in % as the writers read them from summary.json (100 × final_accuracy)."""
    return [100.0 * float(a) for a in accs]


def _decided(path: Path) -> list[tuple[dict[str, str], Decision]]:
    """The orderings.csv a page wrote beside it."""
    return read_orderings(path / ORDERINGS)


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _phs_json(mech: str) -> dict[str, Any]:
    V = np.asarray(phs_V(EPS, DELTA, B / SIZES, SIZES))
    p_u = SIZES / SIZES.sum()
    if mech != "P":
        return {
            "D": D,
            "eta": None,
            "eps": EPS.tolist(),
            "V": V.tolist(),
            "p_u": p_u.tolist(),
            "p_s": p_u.tolist(),
            "l1_from_p_u": 0.0,
            "objective": None,
            "eta_star": None,
        }
    sol = solve_p1(p_u, D * V, ETA)
    return {
        "D": D,
        "eta": ETA,
        "eps": EPS.tolist(),
        "V": V.tolist(),
        "p_u": p_u.tolist(),
        "p_s": sol.p.tolist(),
        "l1_from_p_u": float(np.abs(sol.p - p_u).sum()),
        "objective": sol.objective,
        "eta_star": sol.eta_star,
    }


def _run(
    root: Path, mech: str, s: int, seed: int, acc: float, *, dataset: str = "fashion_mnist", phs: bool = True, batch: int | None = None
) -> Path:
    """One finished run folder as ``fedgame compare --grid`` writes it (grid over s, or over the
    local batch size when ``batch`` is given)."""
    grid = f"s={s}" if batch is None else f"batch_size={batch}"
    name = f"{RECIPES[mech]}[{grid}]"
    d = root / f"{RECIPES[mech]}_{grid}" / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg = {
        "name": name,
        "seed": seed,
        "data": {"dataset": dataset, "partition": {"kind": "similarity", "n_clients": 5, "s": float(s), "size_spread": [0.5, 1.5]}},
        "train": {
            "rounds": 10,
            "clients_per_round": 2,
            "eval_every": 5,
            "local": {"epochs": None, "steps": 5, "batch_size": B if batch is None else batch, "lr": 0.05},
        },
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "name": name,
                "seed": seed,
                "rounds": 10,
                "final_accuracy": acc,
                "wall_time": 1.5,
                "delta": DELTA,
                "eps_pld_over_budget_mean": PLD_MEAN[seed % 2],
                "eps_pld_over_budget_max": PLD_MAX[seed % 2],
                "eps_rdp_over_budget_mean": PLD_MEAN[seed % 2] + 0.05,
                "eps_rdp_over_budget_max": 1.0,
                "eps_paper_over_budget_mean": 1.0,
                "eps_paper_over_budget_max": 1.0,
            }
        )
    )
    _write_csv(
        d / "metrics.csv",
        [{"round": t, "test_acc": acc * (t + 1) / 10 if t % 5 == 4 else math.nan, "train_loss": 1.0 / (t + 1)} for t in range(10)],
    )
    _write_csv(
        d / "privacy.csv",
        [
            {
                "client": i,
                "size": int(SIZES[i]),
                "selected": 0 if i == 0 else 4,
                "epsilon": 0.5 * EPS[i],
                "eps_budget": EPS[i],
                "T_k": 0 if i == 0 else 4,
                "steps_planned": 20,
                "steps_done": 0 if i == 0 else 20,
                "sample_rate": B / SIZES[i],
                "noise_multiplier": 10.0,
                "sigma": 10.0 / B,
                "eps_paper": EPS[i],
                "eps_pld": 0.85 * EPS[i],
                "eps_rdp": 0.9 * EPS[i],
            }
            for i in range(5)
        ],
    )
    if phs:
        (d / "phs.json").write_text(json.dumps(_phs_json(mech)))
    return d


def _tree(root: Path, **kw: Any) -> None:
    for (mech, s), accs in ACC.items():
        for seed, acc in enumerate(accs):
            _run(root, mech, s, seed, acc, **kw)


def test_cells_paper_values_orderings_and_figures(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    _tree(runs)
    (runs / "phs_unbiased_s=30" / "seed_1" / "phs.json").unlink()  # an older run without phs.json
    other = runs / "fedpcs" / "seed_0"  # not a PHS recipe: ignored
    other.mkdir(parents=True)
    (other / "config.yaml").write_text(yaml.safe_dump({"data": {"partition": {"kind": "iid"}}}))
    (other / "summary.json").write_text(json.dumps({"name": "fedpcs", "seed": 0, "final_accuracy": 0.9}))

    rows = write_table4(runs, out, budget="test")

    assert [(r["mechanism"], r["s"]) for r in rows] == [("P", 100), ("P", 30), ("U", 100), ("U", 30), ("B", 100), ("B", 30)]
    by = {(r["mechanism"], r["s"]): r for r in rows}
    p100 = by[("P", 100)]
    assert p100["ours_mean"] == pytest.approx(62.0) and p100["ours_std"] == pytest.approx(2.83)  # sqrt(8)
    assert by[("B", 100)]["ours_std"] == pytest.approx(4.24)  # sqrt(18)
    assert by[("U", 30)]["ours_mean"] == pytest.approx(12.0)
    assert p100["n_seeds"] == 2 and p100["seeds"] == "0 1" and p100["paper_table"] == "IV"
    assert p100["paper"] == 53.53 and by[("U", 30)]["paper"] == 16.27 and by[("B", 30)]["paper"] == 15.39
    assert p100["ours_minus_paper"] == pytest.approx(62.0 - 53.53)
    assert p100["eps_pld_over_budget_mean"] == pytest.approx(0.85) and p100["eps_pld_over_budget_max"] == pytest.approx(0.97)
    assert p100["eps_rdp_over_budget_mean"] == pytest.approx(0.90) and p100["eps_rdp_over_budget_max"] == pytest.approx(1.0)
    assert p100["eta"] == ETA and p100["l1_from_p_u"] > 0 and by[("U", 30)]["l1_from_p_u"] == 0.0

    with (out / "table4.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 6 and float(csv_rows[0]["ours_mean"]) == pytest.approx(62.0)

    md = (out / "table4.md").read_text()
    assert "PHS Table IV, FashionMNIST" in md
    assert "| Privacy-aware | 62.00±2.83 / 53.53% | — / 55.26% | 51.00±1.41 / 54.80% | — / 48.94% |" in md
    assert "| Unbiased | 21.00±1.41 / 14.68% | — / 16.47% | 12.00±2.83 / 16.27% | — / 10.69% |" in md
    assert "| Biased | 33.00±4.24 / 23.63% |" in md
    # P − B at s = 30 is −5 points on both seeds: a zero-spread paired difference, decided (fails)
    assert (
        "**P above U and B at every s (the paper's claim): fails** (the paper has both at every s); "
        "per s: s = 100 (IID): holds, s = 30: fails. Of its 4 orderings: 3 hold, 1 fails."
    ) in md
    # a fail prints the reverse ordering's p, which decides it (here ~0: both seeds 5 points below)
    assert re.search(
        r"\| 30 \| Privacy-aware \| Biased \| -5\.00 \| \[-5\.00, -5\.00\] \| paired t, n = 2, df 1 \| 1 \(B > A: "
        r"[0-9.e-]+\) \| fails \| \+39\.41 \|",
        md,
    )
    assert "| 100 | Privacy-aware | Unbiased | +41.00 |" in md and "| +38.85 |" in md  # ours and the paper's gap
    assert "Holm-adjusted over the 4 orderings of this page" in md and "two standard errors" not in md
    assert "| Privacy-aware | 0.850 / 0.970 | — | 0.850 / 0.970 | — |" in md
    decided = _decided(out)
    assert [(lab["s"], lab["a"], lab["b"], d.verdict) for lab, d in decided] == [
        ("100", "P", "U", "holds"),
        ("100", "P", "B", "holds"),
        ("30", "P", "U", "holds"),
        ("30", "P", "B", "fails"),
    ]
    assert all(lab["table"] == "IV" and lab["dataset"] == "fashion_mnist" and d.adjusted for lab, d in decided)
    for name in ("table4.csv", "table4.md", ORDERINGS, "fig4_accuracy_fashion_mnist.png", "fig3_selection.png", "privacy_spent.png"):
        assert (out / name).stat().st_size > 0
        if name.endswith(".png"):
            assert f"]({name})" in md
    assert len(list((out / "configs").glob("*.yaml"))) == 12  # the non-PHS run is left out


def test_mnist_uses_table_iii_and_older_runs_without_phs_json(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    _tree(runs, dataset="mnist", phs=False)
    rows = write_table4(runs, out, budget="test")
    by = {(r["mechanism"], r["s"]): r for r in rows}
    assert by[("P", 100)]["paper"] == PAPER_TABLE3_MNIST["P"][100] == 68.71
    assert by[("B", 30)]["paper"] == PAPER_TABLE3_MNIST["B"][30] == 16.98
    assert by[("P", 100)]["paper_table"] == "III" and math.isnan(by[("P", 100)]["l1_from_p_u"])
    assert PAPER_TABLE4_FMNIST["P"][0] == 48.94
    md = (out / "table4.md").read_text()
    assert "PHS Table III, MNIST" in md and "62.00±2.83 / 68.71%" in md
    assert (out / "fig4_accuracy_mnist.png").exists() and not (out / "fig3_selection.png").exists()


# Table IV orderings: (mechanism, s) → final accuracy per seed 0, 1, 2; a common seed effect
# (0, +3, −2 points) so that the paired differences are tight where the gap is steady.
# s = 100: P above U and B by 40 and 30 points (holds, holds); s = 70: P − B = +5, −3, +1 (not
# decided); s = 30: B 5 points above P on every seed (fails); s = 0: U run at seeds 3, 4, 5 only
# (no common seed: Welch's test, holds) and B at one seed (not decided (one seed)).
T4_ACC: dict[tuple[str, int], tuple[float, ...]] = {
    ("P", 100): (0.60, 0.63, 0.58),
    ("U", 100): (0.20, 0.235, 0.175),
    ("B", 100): (0.305, 0.33, 0.275),
    ("P", 70): (0.55, 0.58, 0.53),
    ("U", 70): (0.155, 0.18, 0.13),
    ("B", 70): (0.50, 0.61, 0.52),
    ("P", 30): (0.50, 0.53, 0.48),
    ("U", 30): (0.10, 0.135, 0.075),
    ("B", 30): (0.55, 0.585, 0.525),
    ("P", 0): (0.45, 0.48, 0.43),
    ("B", 0): (0.40,),
}
T4_U0 = {3: 0.05, 4: 0.06, 5: 0.04}  # U at s = 0: seeds 3, 4, 5


def test_table4_orderings_are_decided_from_per_seed_accuracies(tmp_path: Path) -> None:
    """P > U and P > B at every s by the project's rule: paired t over common seeds, Welch where
    none are common, one seed decides nothing; p Holm-adjusted over the page's 7 live orderings;
    the page and orderings.csv say the same."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    for (mech, s), accs in T4_ACC.items():
        for seed, acc in enumerate(accs):
            _run(runs, mech, s, seed, acc)
    for seed, acc in T4_U0.items():
        _run(runs, "U", 0, seed, acc)
    write_table4(runs, out, budget="test")

    decided = _decided(out)
    by = {(int(lab["s"]), lab["b"]): d for lab, d in decided}
    assert {k: d.verdict for k, d in by.items()} == {
        (100, "U"): "holds",
        (100, "B"): "holds",
        (70, "U"): "holds",
        (70, "B"): "not decided",
        (30, "U"): "holds",
        (30, "B"): "fails",
        (0, "U"): "holds",
        (0, "B"): "not decided (one seed)",
    }

    raw: dict[tuple[int, str], float] = {}
    for (s, other), d in by.items():
        p, o = _pct(T4_ACC[("P", s)]), _pct(T4_U0.values()) if (s, other) == (0, "U") else _pct(T4_ACC[(other, s)])
        if (s, other) == (0, "B"):  # one seed: no test
            assert d.test == "none" and math.isnan(d.p) and not d.adjusted
            assert d.diff == pytest.approx(np.mean(p) - o[0])
            continue
        if (s, other) == (0, "U"):  # no common seed: Welch
            ref = stats.ttest_ind(p, o, equal_var=False, alternative="greater")
            ci = stats.ttest_ind(p, o, equal_var=False).confidence_interval(0.95)
            assert d.test == "Welch t" and d.n_pairs == 0 and d.df == pytest.approx(ref.df)
        else:
            ref = stats.ttest_rel(p, o, alternative="greater")
            ci = stats.ttest_rel(p, o).confidence_interval(0.95)
            assert d.test == "paired t" and d.n_pairs == 3 and d.df == 2
        raw[(s, other)] = float(ref.pvalue)
        assert d.diff == pytest.approx(np.mean(p) - np.mean(o))
        assert d.ci_low == pytest.approx(ci.low) and d.ci_high == pytest.approx(ci.high)
        assert d.adjusted and d.p >= raw[(s, other)] * (1 - 1e-12)  # Holm only raises p
    assert len(raw) == 7
    # Holm's first step: the smallest p times the number of live orderings
    assert min(d.p for k, d in by.items() if k in raw) == pytest.approx(7 * min(raw.values()))
    assert by[(70, "B")].p > 0.05 and by[(70, "B")].p_reverse > 0.05
    # "fails": B above P has the smallest reverse p, times 7, below 0.05
    rev = stats.ttest_rel(_pct(T4_ACC[("B", 30)]), _pct(T4_ACC[("P", 30)]), alternative="greater").pvalue
    assert by[(30, "B")].p_reverse == pytest.approx(7 * rev) and by[(30, "B")].p_reverse < 0.05

    md = (out / "table4.md").read_text()
    assert (
        "**P above U and B at every s (the paper's claim): fails** (the paper has both at every s); per s: "
        "s = 100 (IID): holds, s = 70: not decided, s = 30: fails, s = 0: not decided (one seed). "
        "Of its 8 orderings: 5 hold, 1 fails, 1 not decided, 1 not decided (one seed)."
    ) in md
    names = {"U": "Unbiased", "B": "Biased"}
    for (s, other), d in by.items():  # every ordering of orderings.csv on the page, the same cells
        assert f"| {s} | Privacy-aware | {names[other]} | " + " | ".join(d.cells()) + " |" in md
    assert "Holm-adjusted over the 7 orderings of this page" in md
    assert "two standard errors" not in md and "mean over seeds; the paper has" not in md


# Fig. 5: (mechanism, B) → final accuracy per seed at s = 30, with the same seed effect as above.
# P above U by 30 points at every B (holds); P above B at B = 32 (holds), below it at 64 (fails),
# B has one finished seed at 128 (seed 1's summary is removed: not decided (one seed)), and
# P − B = +6, −4, −1 at 256 (not decided). P and U rise by 10 points from 32 to 64 and 64 to 128
# (holds) and are flat from 128 to 256 (not decided); B rises by 35 from 32 to 64 (holds).
FIG5_ACC: dict[tuple[str, int], tuple[float, ...]] = {
    ("P", 32): (0.400, 0.434, 0.376),
    ("P", 64): (0.504, 0.526, 0.480),
    ("P", 128): (0.596, 0.630, 0.584),
    ("P", 256): (0.630, 0.610, 0.580),
    ("U", 32): (0.105, 0.134, 0.071),
    ("U", 64): (0.204, 0.221, 0.185),
    ("U", 128): (0.291, 0.335, 0.284),
    ("U", 256): (0.335, 0.305, 0.280),
    ("B", 32): (0.203, 0.231, 0.176),
    ("B", 64): (0.554, 0.579, 0.527),
    ("B", 128): (0.40, 0.42),
    ("B", 256): (0.570, 0.650, 0.590),
}


def _fig5_tree(root: Path, acc: dict[tuple[str, int], tuple[float, ...]], s: int = 30) -> None:
    for (mech, batch), accs in acc.items():
        for seed, a in enumerate(accs):
            _run(root, mech, s, seed, a, batch=batch)


def test_fig5_cells_by_mechanism_and_batch_size(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    _fig5_tree(runs, FIG5_ACC)
    (runs / "phs_biased_batch_size=128" / "seed_1" / "summary.json").unlink()  # an unfinished run: left out

    rows = write_fig5(runs, out, budget="test")

    assert [(r["mechanism"], r["batch_size"]) for r in rows] == [(m, b) for m in "PUB" for b in (32, 64, 128, 256)]
    by = {(r["mechanism"], r["batch_size"]): r for r in rows}
    assert by[("P", 32)]["mean"] == pytest.approx(40.33) and by[("P", 32)]["std"] == pytest.approx(2.91)
    assert by[("P", 128)]["mean"] == pytest.approx(60.33) and by[("U", 64)]["std"] == pytest.approx(1.80)
    assert by[("B", 128)]["n_seeds"] == 1 and by[("B", 128)]["seeds"] == "0" and by[("B", 128)]["std"] == 0.0
    assert by[("B", 128)]["mean"] == pytest.approx(40.0)
    assert by[("U", 256)]["n_seeds"] == 3 and by[("U", 256)]["seeds"] == "0 1 2"
    assert by[("P", 32)]["s"] == 30 and by[("P", 32)]["dataset"] == "fashion_mnist" and by[("P", 32)]["budget"] == "test"

    with (out / "fig5.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert list(csv_rows[0])[:6] == ["mechanism", "batch_size", "n_seeds", "seeds", "mean", "std"]
    assert len(csv_rows) == 12 and csv_rows[1]["batch_size"] == "64" and float(csv_rows[1]["mean"]) == pytest.approx(50.33)

    md = (out / "fig5.md").read_text()
    assert "PHS Fig. 5, FashionMNIST, s = 30" in md
    assert "| mechanism | B = 32 | B = 64 | B = 128 | B = 256 |" in md
    assert "| Privacy-aware | 40.33±2.91 (3) | 50.33±2.30 (3) | 60.33±2.39 (3) | 60.67±2.52 (3) |" in md
    assert "| Biased | 20.33±2.75 (3) | 55.33±2.60 (3) | 40.00±0.00 (1) | 60.33±4.16 (3) |" in md

    decided = _decided(out)
    verdicts = {(lab["claim"], lab["a"], int(lab["batch_a"]), lab["b"], int(lab["batch_b"])): d for lab, d in decided}
    above = {(k[3], k[2]): d for k, d in verdicts.items() if k[0] == "P above U and B"}
    rises = {(k[1], k[4], k[2]): d for k, d in verdicts.items() if k[0] == "rises with B"}
    assert {k: d.verdict for k, d in above.items()} == {
        ("U", 32): "holds",
        ("B", 32): "holds",
        ("U", 64): "holds",
        ("B", 64): "fails",
        ("U", 128): "holds",
        ("B", 128): "not decided (one seed)",
        ("U", 256): "holds",
        ("B", 256): "not decided",
    }
    assert {k: d.verdict for k, d in rises.items()} == {
        ("P", 32, 64): "holds",
        ("P", 64, 128): "holds",
        ("P", 128, 256): "not decided",
        ("U", 32, 64): "holds",
        ("U", 64, 128): "holds",
        ("U", 128, 256): "not decided",
        ("B", 32, 64): "holds",
        ("B", 64, 128): "not decided (one seed)",
        ("B", 128, 256): "not decided (one seed)",
    }
    # p of every paired ordering against SciPy on the same per-seed values; Holm over 14 live orderings
    raw = []
    for (claim, a, ba, b, bb), d in verdicts.items():
        va, vb = _pct(FIG5_ACC[(a, ba)]), _pct(FIG5_ACC[(b, bb)])
        if (b, bb) == ("B", 128) or (a, ba) == ("B", 128):
            assert d.test == "none" and d.verdict == "not decided (one seed)"
            continue
        ref = stats.ttest_rel(va, vb, alternative="greater").pvalue
        raw.append(ref)
        assert d.test == "paired t" and d.diff == pytest.approx(np.mean(va) - np.mean(vb))
        assert d.adjusted and d.p >= ref * (1 - 1e-12)
    assert len(raw) == 14
    assert min(d.p for d in verdicts.values() if d.test != "none") == pytest.approx(14 * min(raw))
    rev = stats.ttest_rel(_pct(FIG5_ACC[("B", 64)]), _pct(FIG5_ACC[("P", 64)]), alternative="greater").pvalue
    assert above[("B", 64)].p_reverse == pytest.approx(14 * rev) and above[("B", 64)].p_reverse < 0.05

    assert (
        "P above U and B at every B: **fails**; per B: B = 32: holds, B = 64: fails, "
        "B = 128: not decided (one seed), B = 256: not decided "
        "(of its 8 orderings: 5 hold, 1 fails, 1 not decided, 1 not decided (one seed))."
    ) in md
    assert (
        "Accuracy rises with B: **not decided (one seed)**; per mechanism: P: not decided, U: not decided, "
        "B: not decided (one seed) (of its 9 orderings: 5 hold, 2 not decided, 2 not decided (one seed))."
    ) in md
    assert "| P above U and B | P > B at B = 64 | " + " | ".join(above[("B", 64)].cells()) + " |" in md
    assert "| rises with B | P: B = 64 > B = 32 | " + " | ".join(rises[("P", 32, 64)].cells()) + " |" in md
    assert "Holm-adjusted over the 14 orderings of this page" in md and "two standard errors" not in md
    assert (out / "fig5_batch.png").stat().st_size > 0 and "](fig5_batch.png)" in md
    assert len(list((out / "configs").glob("*.yaml"))) == 34


def test_fig5_ordering_holds_and_the_report_command(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    # B 20 points under P at every B, steady over seeds: every "P above" ordering holds
    _fig5_tree(
        runs,
        {
            k: (v if k[0] != "B" else tuple(a - 0.20 + 0.003 * (i % 2) for i, a in enumerate(FIG5_ACC[("P", k[1])])))
            for k, v in FIG5_ACC.items()
        },
    )
    r = CliRunner().invoke(app, ["report", str(runs), "--kind", "phs-fig5", "--out", str(out), "--budget", "reduced"])
    assert r.exit_code == 0, r.output
    md = (out / "fig5.md").read_text()
    assert (
        "P above U and B at every B: **holds**; per B: B = 32: holds, B = 64: holds, B = 128: holds, "
        "B = 256: holds (of its 8 orderings: 8 hold)."
    ) in md
    assert "budget: reduced" in md
    assert (out / "fig5_batch.png").exists() and (out / "fig5.csv").exists() and (out / ORDERINGS).exists()
    assert fig5_ordering([]) == "P above U and B at every B: **not decided** (no B with P and U or B beside it)."
    assert fig5_rises([]) == "Accuracy rises with B: **not decided** (no mechanism at two B)."
    r = CliRunner().invoke(app, ["report", str(runs), "--kind", "fig5", "--out", str(out)])
    assert r.exit_code == 2 and "--kind: must be one of" in r.stderr


def test_fig5_refuses_runs_at_several_s(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _run(runs / "a", "P", 30, 0, 0.5, batch=64)
    _run(runs / "b", "P", 70, 0, 0.6, batch=64)
    with pytest.raises(ValueError, match="mix fashion_mnist s=30, fashion_mnist s=70"):
        write_fig5(runs, tmp_path / "out", budget="test")


def test_two_runs_of_one_cell_with_one_seed_are_refused(tmp_path: Path) -> None:
    """Pairing by seed needs one run per cell and seed: a second is refused, not dropped."""
    runs = tmp_path / "runs"
    _run(runs / "a", "P", 30, 0, 0.5)
    _run(runs / "a", "U", 30, 0, 0.1)
    _run(runs / "b", "P", 30, 0, 0.6)
    with pytest.raises(ValueError, match="two runs of cell .* with seed 0"):
        write_table4(runs, tmp_path / "out", budget="test")


def _tight_tree(root: Path, accs: dict[str, tuple[float, ...]], *, first_seed: dict[str, int] | None = None) -> None:
    """Finished runs of the paper-calibrated (fmnist.yaml) and tight (tight.yaml) recipes at s = 30,
    seeds from ``first_seed[name]`` (0 by default) upwards."""
    for name, per_seed in accs.items():
        for i, acc in enumerate(per_seed):
            seed = (first_seed or {}).get(name, 0) + i
            d = root / name / f"seed_{seed}"
            d.mkdir(parents=True)
            cfg = {
                "name": name,
                "seed": seed,
                "data": {"dataset": "fashion_mnist", "partition": {"kind": "similarity", "n_clients": 5, "s": 30.0}},
                "train": {"rounds": 30, "clients_per_round": 2, "local": {"steps": 5, "batch_size": 128}},
            }
            (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            pld = 1.0 if name.endswith("pld") else 0.2 + 0.01 * seed
            (d / "summary.json").write_text(
                json.dumps(
                    {
                        "name": name,
                        "seed": seed,
                        "rounds": 30,
                        "final_accuracy": acc,
                        "eps_pld_over_budget_mean": pld,
                        "eps_pld_over_budget_max": pld + 0.05 * (pld < 1),
                        "eps_paper_over_budget_mean": 9.0 if name.endswith("pld") else 1.0,
                    }
                )
            )


def test_tight_vs_paper_cells_spent_and_verdict(tmp_path: Path) -> None:
    from fedgame.experiments.table4 import write_tight

    paper_acc, tight_acc = (0.20, 0.22, 0.21), (0.30, 0.31, 0.32)
    _tight_tree(tmp_path / "runs", {"phs_privacy_aware": paper_acc, "phs_privacy_aware_pld": tight_acc})
    rows = write_tight(tmp_path / "runs", tmp_path / "out", budget="reduced")
    paper, tight = rows
    assert paper["calibration"].startswith("paper") and tight["calibration"].startswith("tight")
    assert paper["acc_mean"] == pytest.approx(21.0) and paper["acc_std"] == pytest.approx(1.0)
    assert paper["eps_pld_over_budget_mean"] == pytest.approx(0.21) and paper["eps_pld_over_budget_max"] == pytest.approx(0.26)
    assert tight["eps_pld_over_budget_mean"] == 1.0 and tight["eps_paper_over_budget_mean"] == 9.0
    md = (tmp_path / "out" / "tight_vs_paper.md").read_text()
    [(lab, d)] = _decided(tmp_path / "out")
    ref = stats.ttest_rel(_pct(tight_acc), _pct(paper_acc), alternative="greater")
    ci = stats.ttest_rel(_pct(tight_acc), _pct(paper_acc)).confidence_interval(0.95)
    assert lab == {"s": "30", "a": "tight calibration (PLD)", "b": "paper calibration (Eq. 6-7)"}
    assert d.test == "paired t" and d.p == pytest.approx(ref.pvalue) and not d.adjusted and d.verdict == "holds"
    assert d.ci_low == pytest.approx(ci.low) and d.ci_high == pytest.approx(ci.high)
    assert f"+10.00 points [{ci.low:.2f}, {ci.high:.2f}] (paired t, n = 3, df 2, p = {ref.pvalue:.3g}): **holds**" in md
    assert "unadjusted (one ordering in this page)" in md and "s = 30" in md and "30 rounds" in md
    assert "two standard errors" not in md

    def verdict(name: str, paper_acc: tuple[float, ...], tight_acc: tuple[float, ...], **kw: Any) -> Decision:
        _tight_tree(tmp_path / name, {"phs_privacy_aware": paper_acc, "phs_privacy_aware_pld": tight_acc}, **kw)
        write_tight(tmp_path / name, tmp_path / f"{name}_out", budget="reduced")
        [(_, dec)] = _decided(tmp_path / f"{name}_out")
        assert f"**{dec.verdict}**" in (tmp_path / f"{name}_out" / "tight_vs_paper.md").read_text()
        return dec

    # the other way round the verdict is computed, not typed: differences −9, +9, +3 decide nothing
    d = verdict("noisy", (0.30, 0.10, 0.20), (0.21, 0.19, 0.23))
    ref = stats.ttest_rel(_pct((0.21, 0.19, 0.23)), _pct((0.30, 0.10, 0.20)), alternative="greater")
    assert d.verdict == "not decided" and d.p == pytest.approx(ref.pvalue) and d.p_reverse == pytest.approx(1 - ref.pvalue)
    # tight below paper on every seed: fails
    d = verdict("below", (0.30, 0.32, 0.31), (0.20, 0.21, 0.215))
    rev = stats.ttest_rel(_pct((0.30, 0.32, 0.31)), _pct((0.20, 0.21, 0.215)), alternative="greater")
    assert d.verdict == "fails" and d.p_reverse == pytest.approx(rev.pvalue) and d.p_reverse < 0.05
    # no common seed: Welch's test
    d = verdict("welch", (0.20, 0.22, 0.21), (0.30, 0.31, 0.33), first_seed={"phs_privacy_aware_pld": 10})
    ref = stats.ttest_ind(_pct((0.30, 0.31, 0.33)), _pct((0.20, 0.22, 0.21)), equal_var=False, alternative="greater")
    assert d.test == "Welch t" and d.verdict == "holds" and d.p == pytest.approx(ref.pvalue) and d.df == pytest.approx(ref.df)
    # one seed of the tight calibration: nothing decided
    d = verdict("one", (0.20, 0.22, 0.21), (0.40,))
    assert d.test == "none" and d.verdict == "not decided (one seed)" and math.isnan(d.p)
    # one calibration alone: no ordering, an orderings.csv with no rows
    _tight_tree(tmp_path / "alone", {"phs_privacy_aware": (0.2, 0.3)})
    write_tight(tmp_path / "alone", tmp_path / "alone_out", budget="reduced")
    assert _decided(tmp_path / "alone_out") == [] and "above the paper's" not in (tmp_path / "alone_out" / "tight_vs_paper.md").read_text()
    with pytest.raises(ValueError, match="no finished run"):
        write_tight(tmp_path / "out", tmp_path / "out3", budget="reduced")


def test_a_report_records_its_runs_and_regenerates_from_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedgame.experiments.reports import PROVENANCE, regenerate, write

    monkeypatch.chdir(tmp_path)
    folder = Path("results/tight")
    _tight_tree(folder / "runs", {"phs_privacy_aware": (0.20, 0.22, 0.21), "phs_privacy_aware_pld": (0.30, 0.31, 0.32)})
    write("phs-tight", [folder / "runs"], folder, budget="reduced")
    assert json.loads((folder / PROVENANCE).read_text()) == {
        "reports": [{"kind": "phs-tight", "runs": ["results/tight/runs"], "budget": "reduced"}]
    }
    names = regenerate(folder, tmp_path / "again")
    assert "tight_vs_paper.md" in names and "tight_vs_paper.csv" in names
    for name in names:
        assert (tmp_path / "again" / name).read_text() == (folder / name).read_text(), name
    # a table recorded from runs outside its folder cannot count as recomputable from it
    _tight_tree(Path("elsewhere"), {"phs_privacy_aware": (0.2, 0.3)})
    write("phs-tight", [Path("elsewhere")], folder, budget="reduced")
    with pytest.raises(ValueError, match="runs outside the results folder: elsewhere"):
        regenerate(folder, tmp_path / "third")
    with pytest.raises(FileNotFoundError, match="no report.json"):
        regenerate(Path("elsewhere"), tmp_path / "fourth")


def test_a_central_dp_row_is_shown_with_its_epsilon_and_enters_no_ordering(tmp_path: Path) -> None:
    """Central DP-FedAvg's runs (``phs_central_dp``) make one more row where they exist, with the
    user-level ε, δ and target read from their files, and change none of the paper's orderings."""
    runs, out, bare = tmp_path / "runs", tmp_path / "out", tmp_path / "bare"
    _tree(runs)
    _tree(tmp_path / "runs_bare")
    for s in (100, 30):
        for seed, acc in enumerate((0.10, 0.11)):
            d = runs / f"phs_central_dp_s={s}" / f"seed_{seed}"
            d.mkdir(parents=True)
            cfg = {
                "name": f"phs_central_dp[s={s}]",
                "seed": seed,
                "data": {"dataset": "fashion_mnist", "partition": {"kind": "similarity", "n_clients": 5, "s": float(s)}},
                "train": {"rounds": 10, "clients_per_round": 2, "local": {"epochs": None, "steps": 5, "batch_size": B, "lr": 0.05}},
                "privacy": {"kind": "central_dp", "target_epsilon": 0.5, "clip": 1.0},
                "accountant": {"kind": "rdp", "delta": 1e-5},
            }
            (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            (d / "summary.json").write_text(
                json.dumps(
                    {"name": cfg["name"], "seed": seed, "rounds": 10, "final_accuracy": acc, "wall_time": 1.0, "epsilon_max": 0.4999}
                )
            )
            _write_csv(d / "metrics.csv", [{"round": t, "test_acc": acc, "train_loss": 2.3} for t in range(10)])
    rows = write_table4(runs, out, budget="test")
    write_table4(tmp_path / "runs_bare", bare, budget="test")
    central = [r for r in rows if r["mechanism"] == "C"]
    assert [(r["s"], r["ours_mean"], r["user_level_epsilon"], r["target_epsilon"]) for r in central] == [
        (100, 10.5, 0.4999, 0.5),
        (30, 10.5, 0.4999, 0.5),
    ]
    md = (out / "table4.md").read_text()
    assert "| Central DP-FedAvg | 10.50±0.71 / — | — / — | 10.50±0.71 / — | — / — |" in md
    assert "user-level ε = 0.5 at δ = 1e-05 for every client" in md and "privacy.target_epsilon = 0.5" in md
    assert (out / ORDERINGS).read_text() == (bare / ORDERINGS).read_text()  # the paper's orderings alone
    assert "Central" not in (bare / "table4.md").read_text()  # no row without its runs
