"""The PHS Table III/IV writer: grouping of run folders into (mechanism, s, dataset) cells,
mean ± std over seeds, the paper's numbers in their cells, the orderings, and the figures; and
the Fig. 5 writer over (mechanism, local batch size B) cells."""

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
from fedgame.experiments.table4 import PAPER_TABLE3_MNIST, PAPER_TABLE4_FMNIST, fig5_ordering, write_fig5, write_table4
from fedgame.privacy.analysis import phs_V
from fedgame.selection.phs_problem import solve_p1

# spec §3.5's golden example: 5 clients
SIZES = np.array([500, 600, 700, 550, 650])
EPS = np.array([0.2, 0.5, 1.0, 5.0, 10.0])
D, ETA, B, DELTA = 26010, 1.0, 64, 1e-5
RECIPES = {"P": "phs_privacy_aware", "U": "phs_unbiased", "B": "phs_biased"}

# (mechanism, s) → final accuracy per seed 0, 1; at s = 30 the biased mechanism beats P
ACC = {
    ("P", 100): (0.60, 0.64), ("U", 100): (0.20, 0.22), ("B", 100): (0.30, 0.36),
    ("P", 30): (0.50, 0.52), ("U", 30): (0.10, 0.14), ("B", 30): (0.55, 0.57),
}
PLD_MEAN, PLD_MAX = (0.80, 0.90), (0.95, 0.99)  # per seed


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _phs_json(mech: str) -> dict[str, Any]:
    V = np.asarray(phs_V(EPS, DELTA, B / SIZES, SIZES))
    p_u = SIZES / SIZES.sum()
    if mech != "P":
        return {"D": D, "eta": None, "eps": EPS.tolist(), "V": V.tolist(), "p_u": p_u.tolist(), "p_s": p_u.tolist(),
                "l1_from_p_u": 0.0, "objective": None, "eta_star": None}
    sol = solve_p1(p_u, D * V, ETA)
    return {"D": D, "eta": ETA, "eps": EPS.tolist(), "V": V.tolist(), "p_u": p_u.tolist(), "p_s": sol.p.tolist(),
            "l1_from_p_u": float(np.abs(sol.p - p_u).sum()), "objective": sol.objective, "eta_star": sol.eta_star}


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
        "name": name, "seed": seed,
        "data": {"dataset": dataset, "partition": {"kind": "similarity", "n_clients": 5, "s": float(s), "size_spread": [0.5, 1.5]}},
        "train": {"rounds": 10, "clients_per_round": 2, "eval_every": 5,
                  "local": {"epochs": None, "steps": 5, "batch_size": B if batch is None else batch, "lr": 0.05}},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (d / "summary.json").write_text(json.dumps({
        "name": name, "seed": seed, "rounds": 10, "final_accuracy": acc, "wall_time": 1.5, "delta": DELTA,
        "eps_pld_over_budget_mean": PLD_MEAN[seed], "eps_pld_over_budget_max": PLD_MAX[seed],
        "eps_rdp_over_budget_mean": PLD_MEAN[seed] + 0.05, "eps_rdp_over_budget_max": 1.0,
        "eps_paper_over_budget_mean": 1.0, "eps_paper_over_budget_max": 1.0,
    }))
    _write_csv(d / "metrics.csv", [
        {"round": t, "test_acc": acc * (t + 1) / 10 if t % 5 == 4 else math.nan, "train_loss": 1.0 / (t + 1)} for t in range(10)
    ])
    _write_csv(d / "privacy.csv", [
        {"client": i, "size": int(SIZES[i]), "selected": 0 if i == 0 else 4, "epsilon": 0.5 * EPS[i], "eps_budget": EPS[i],
         "T_k": 0 if i == 0 else 4, "steps_planned": 20, "steps_done": 0 if i == 0 else 20, "sample_rate": B / SIZES[i],
         "noise_multiplier": 10.0, "sigma": 10.0 / B, "eps_paper": EPS[i], "eps_pld": 0.85 * EPS[i], "eps_rdp": 0.9 * EPS[i]}
        for i in range(5)
    ])
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
    assert "s = 100 (IID): P > U holds, P > B holds; s = 30: P > U holds, P > B fails." in md
    assert "| Privacy-aware | 0.850 / 0.970 | — | 0.850 / 0.970 | — |" in md
    assert "P − U = 41.00 (paper 38.85)" in md
    for f in ("table4.csv", "table4.md", "fig4_accuracy_fashion_mnist.png", "fig3_selection.png", "privacy_spent.png"):
        assert (out / f).stat().st_size > 0
        if f.endswith(".png"):
            assert f"]({f})" in md
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


# Fig. 5: (mechanism, B) → final accuracy per seed 0, 1 at s = 30. B beats P at B = 64 and 256;
# U drops from B = 128 to 256 and B from 64 to 128.
FIG5_ACC = {
    ("P", 32): (0.40, 0.44), ("P", 64): (0.50, 0.52), ("P", 128): (0.55, 0.61), ("P", 256): (0.60, 0.60),
    ("U", 32): (0.10, 0.12), ("U", 64): (0.15, 0.15), ("U", 128): (0.20, 0.22), ("U", 256): (0.18, 0.20),
    ("B", 32): (0.30, 0.34), ("B", 64): (0.53, 0.57), ("B", 128): (0.40, 0.42), ("B", 256): (0.62, 0.66),
}


def _fig5_tree(root: Path, acc: dict[tuple[str, int], tuple[float, float]], s: int = 30) -> None:
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
    assert by[("P", 32)]["mean"] == pytest.approx(42.0) and by[("P", 32)]["std"] == pytest.approx(2.83)  # sqrt(8)
    assert by[("P", 128)]["mean"] == pytest.approx(58.0) and by[("P", 128)]["std"] == pytest.approx(4.24)  # sqrt(18)
    assert by[("P", 256)]["std"] == 0.0 and by[("U", 64)]["mean"] == pytest.approx(15.0)
    assert by[("B", 128)]["n_seeds"] == 1 and by[("B", 128)]["seeds"] == "0" and by[("B", 128)]["std"] == 0.0
    assert by[("B", 128)]["mean"] == pytest.approx(40.0)
    assert by[("U", 256)]["n_seeds"] == 2 and by[("U", 256)]["seeds"] == "0 1"
    assert by[("P", 32)]["s"] == 30 and by[("P", 32)]["dataset"] == "fashion_mnist" and by[("P", 32)]["budget"] == "test"

    with (out / "fig5.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert list(csv_rows[0])[:6] == ["mechanism", "batch_size", "n_seeds", "seeds", "mean", "std"]
    assert len(csv_rows) == 12 and csv_rows[1]["batch_size"] == "64" and float(csv_rows[1]["mean"]) == pytest.approx(51.0)

    md = (out / "fig5.md").read_text()
    assert "PHS Fig. 5, FashionMNIST, s = 30" in md
    assert "| mechanism | B = 32 | B = 64 | B = 128 | B = 256 |" in md
    assert "| Privacy-aware | 42.00±2.83 (2) | 51.00±1.41 (2) | 58.00±4.24 (2) | 60.00±0.00 (2) |" in md
    assert "| Biased | 32.00±2.83 (2) | 55.00±2.83 (2) | 40.00±0.00 (1) | 64.00±2.83 (2) |" in md
    # every ordering with its verdict from the two cells' standard errors, √(s_a²/n_a + s_b²/n_b)
    assert ("P above U and B at every B: B=32: P > U holds, P > B holds; B=64: P > U holds, P > B within two "
            "standard errors; B=128: P > U holds, P > B holds (one seed, no error bar); B=256: P > U holds, "
            "P > B within two standard errors.") in md  # −4 points at a standard error of 2.0: on the edge
    assert ("Accuracy rises with B: P: 32 → 64 holds, 64 → 128 holds, 128 → 256 within two standard errors; "
            "U: 32 → 64 holds, 64 → 128 holds, 128 → 256 within two standard errors; B: 32 → 64 holds, "
            "64 → 128 fails (one seed, no error bar), 128 → 256 holds (one seed, no error bar).") in md
    assert (out / "fig5_batch.png").stat().st_size > 0 and "](fig5_batch.png)" in md
    assert len(list((out / "configs").glob("*.yaml"))) == 23


def test_fig5_ordering_holds_and_the_report_command(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    _fig5_tree(runs, {k: (v if k[0] != "B" else (v[0] / 2, v[1] / 2)) for k, v in FIG5_ACC.items()})
    r = CliRunner().invoke(app, ["report", str(runs), "--kind", "phs-fig5", "--out", str(out), "--budget", "reduced"])
    assert r.exit_code == 0, r.output
    md = (out / "fig5.md").read_text()
    assert "P above U and B at every B: B=32: P > U holds, P > B holds; B=64: P > U holds, P > B holds;" in md
    assert "budget: reduced" in md
    assert (out / "fig5_batch.png").exists() and (out / "fig5.csv").exists()
    assert fig5_ordering([]) == "P above U and B at every B: undecided (no B with P and U or B beside it)."
    only_p = [{"mechanism": "P", "batch_size": 32, "mean": 50.0, "std": 1.0, "n_seeds": 2}]
    assert fig5_ordering(only_p).endswith("undecided (no B with P and U or B beside it).")
    r = CliRunner().invoke(app, ["report", str(runs), "--kind", "fig5", "--out", str(out)])
    assert r.exit_code == 2 and "--kind: must be one of" in r.stderr


def test_fig5_refuses_runs_at_several_s(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _run(runs / "a", "P", 30, 0, 0.5, batch=64)
    _run(runs / "b", "P", 70, 0, 0.6, batch=64)
    with pytest.raises(ValueError, match="mix fashion_mnist s=30, fashion_mnist s=70"):
        write_fig5(runs, tmp_path / "out", budget="test")


def _tight_tree(root: Path, accs: dict[str, tuple[float, ...]]) -> None:
    """Finished runs of the paper-calibrated (fmnist.yaml) and tight (tight.yaml) recipes at s = 30."""
    for name, per_seed in accs.items():
        for seed, acc in enumerate(per_seed):
            d = root / name / f"seed_{seed}"
            d.mkdir(parents=True)
            cfg = {"name": name, "seed": seed, "data": {"dataset": "fashion_mnist", "partition": {"kind": "similarity", "n_clients": 5, "s": 30.0}},
                   "train": {"rounds": 30, "clients_per_round": 2, "local": {"steps": 5, "batch_size": 128}}}
            (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            pld = 1.0 if name.endswith("pld") else 0.2 + 0.01 * seed
            (d / "summary.json").write_text(json.dumps({
                "name": name, "seed": seed, "rounds": 30, "final_accuracy": acc,
                "eps_pld_over_budget_mean": pld, "eps_pld_over_budget_max": pld + 0.05 * (pld < 1),
                "eps_paper_over_budget_mean": 9.0 if name.endswith("pld") else 1.0}))


def test_tight_vs_paper_cells_spent_and_verdict(tmp_path: Path) -> None:
    from fedgame.experiments.table4 import write_tight

    _tight_tree(tmp_path / "runs", {"phs_privacy_aware": (0.20, 0.22, 0.21), "phs_privacy_aware_pld": (0.30, 0.31, 0.32)})
    rows = write_tight(tmp_path / "runs", tmp_path / "out", budget="reduced")
    paper, tight = rows
    assert paper["calibration"].startswith("paper") and tight["calibration"].startswith("tight")
    assert paper["acc_mean"] == pytest.approx(21.0) and paper["acc_std"] == pytest.approx(1.0)
    assert paper["eps_pld_over_budget_mean"] == pytest.approx(0.21) and paper["eps_pld_over_budget_max"] == pytest.approx(0.26)
    assert tight["eps_pld_over_budget_mean"] == 1.0 and tight["eps_paper_over_budget_mean"] == 9.0
    md = (tmp_path / "out" / "tight_vs_paper.md").read_text()
    assert "+10.00 points, holds" in md and "s = 30" in md and "30 rounds" in md
    # the other way round the verdict is computed, not typed
    _tight_tree(tmp_path / "runs2", {"phs_privacy_aware": (0.30, 0.10, 0.20), "phs_privacy_aware_pld": (0.21, 0.19, 0.23)})
    write_tight(tmp_path / "runs2", tmp_path / "out2", budget="reduced")
    assert "within two standard errors" in (tmp_path / "out2" / "tight_vs_paper.md").read_text()
    with pytest.raises(ValueError, match="no finished run"):
        write_tight(tmp_path / "out", tmp_path / "out3", budget="reduced")


def test_a_report_records_its_runs_and_regenerates_from_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedgame.experiments.reports import PROVENANCE, regenerate, write

    monkeypatch.chdir(tmp_path)
    folder = Path("results/tight")
    _tight_tree(folder / "runs", {"phs_privacy_aware": (0.20, 0.22, 0.21), "phs_privacy_aware_pld": (0.30, 0.31, 0.32)})
    write("phs-tight", [folder / "runs"], folder, budget="reduced")
    assert json.loads((folder / PROVENANCE).read_text()) == {
        "reports": [{"kind": "phs-tight", "runs": ["results/tight/runs"], "budget": "reduced"}]}
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
