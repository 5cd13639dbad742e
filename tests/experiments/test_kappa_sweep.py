"""The κ sweep (spec §7 R1) on a tiny instance: one row per κ, the R1 criteria, the files."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from fedgame.experiments.kappa_sweep import choose_default, kappa_row, load_rows, save_row, write_sweep, write_sweep_runs


def test_a_row_matches_the_plan_and_the_files_hold_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    row = kappa_row(1000.0, n_clients=4, clients_per_round=2, rounds=3, budget=(40.0, 20.0), n_starts=2)
    assert len(row.tau) == 3 and all(0 < x <= 1 for x in row.tau)
    assert row.R_min == pytest.approx(min(row.R[1:])) and len(row.R) == 3
    assert row.cost <= row.cost_lemma2 * (1 + 1e-6)  # the true-cost rewards are no dearer
    assert row.live == (row.R_min > 0 and row.tau_max < 1 and row.tau_nonincreasing and row.welfare > 0)
    dead = replace(row, kappa=1.0, live=False, R_min=0.0, welfare=-1.0)
    full = replace(row, kappa=1e4, live=True, R_min=1.0, welfare=1.0)
    paying = replace(row, kappa=1e3, live=False, R_min=1.0, welfare=1.0, tau_nonincreasing=False)
    assert choose_default([dead, paying, full]) == (1e4, "(a)-(c)")
    assert choose_default([dead, full, paying])[0] == 1e4
    assert choose_default([dead, paying]) == (1e3, "(a) and (c); (b) fails at every κ of the grid")
    assert choose_default([dead]) == (None, "none")
    chosen = write_sweep([dead, row], tmp_path, instance="tiny")
    with (tmp_path / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [float(r["kappa"]) for r in rows] == [1.0, 1000.0]
    assert {
        "R_min",
        "R_mean",
        "phi_0",
        "phi_T",
        "welfare",
        "poa",
        "tau_first",
        "tau_last",
        "tau_nonincreasing",
        "cost",
        "cost_lemma2",
    } <= set(rows[0])
    md = (tmp_path / "sweep.md").read_text()
    assert "| 1000 |" in md and "tiny" in md
    assert json.loads((tmp_path / "sweep.json").read_text())["chosen_acc_scale"] == chosen == choose_default([dead, row])[0]
    assert len(list((tmp_path / "cache").rglob("fedpcs-*.npz"))) == 1  # the runs of that recipe reuse the solve
    # per-κ run folders hold every number of the rows, to the last bit, and the sweep is written from them
    for r in (row, dead):
        save_row(r, tmp_path / "runs" / f"kappa={r.kappa:g}" / "seed_0", {"instance": "tiny", "kappa": r.kappa}, {"code": "abc"})
    assert load_rows(tmp_path / "runs") == ([dead, row], "tiny")
    assert write_sweep_runs(tmp_path / "runs", tmp_path / "again") == chosen
    for name in ("sweep.csv", "sweep.json"):
        assert (tmp_path / "again" / name).read_text() == (tmp_path / name).read_text(), name
    assert "all 2 runs from code abc" in (tmp_path / "again" / "sweep.md").read_text()
    save_row(row, tmp_path / "runs" / "other" / "seed_0", {"instance": "another"}, {"code": "abc"})
    with pytest.raises(ValueError, match="different instances"):
        load_rows(tmp_path / "runs")


def test_kappa_must_be_positive() -> None:
    with pytest.raises(ValueError, match="kappa: must be > 0 and finite, got 0"):
        kappa_row(0.0)
