"""Every committed table that has its per-seed files beside it regenerates from them, exactly:
the numbers in `results/` are what the library computes from the runs committed there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedgame.experiments.claims import gap, read_runs
from fedgame.experiments.reports import PROVENANCE, regenerate
from fedgame.experiments.reproduction import REGENERATED, RERUN

RESULTS = Path(__file__).resolve().parents[2] / "results"


REPORTED = sorted(RESULTS.glob(f"*/{PROVENANCE}"))


@pytest.mark.parametrize("record", REPORTED, ids=[p.parent.name for p in REPORTED])
def test_every_committed_report_regenerates_from_its_per_seed_files(record: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report kinds recorded in ``report.json``, run again on the per-seed files committed
    in the same folder, write the committed tables and pages byte for byte (figures aside).
    JSON files are compared as data, their numbers to 1e-7 relative: a fitted curve (SciPy's
    least squares on OpenBLAS, whose kernels are chosen by the CPU) differs in its last digits
    between an AVX2 and an AVX-512 host (QI-DPFL's I_1 by 1e-10), while every table written
    from it is the same text."""
    monkeypatch.chdir(RESULTS.parent)
    folder = record.parent.relative_to(RESULTS.parent)
    names = regenerate(folder, tmp_path)
    assert any(n.endswith(".md") for n in names)
    for name in names:
        got, want = (tmp_path / name).read_text(), (folder / name).read_text()
        if name.endswith(".json"):
            _same(json.loads(got), json.loads(want), name)
        else:
            assert got == want, name


def _same(got: object, want: object, where: str) -> None:
    """Parsed JSON ``got`` equals ``want``: the same structure and non-float values, floats to
    1e-7 relative (1e-12 absolute)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-7, abs=1e-12), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            _same(got[k], want[k], f"{where}: {k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def test_every_results_folder_is_recomputable_or_listed_for_a_rerun() -> None:
    """A folder with a table regenerates from its committed per-seed runs (``report.json``), is
    regenerated from code by its own test (:data:`REGENERATED`), or is listed with the script that
    reruns it (:data:`RERUN`, said on the reproduction page); a rerun folder leaves that list."""
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        tables = [p for p in folder.iterdir() if p.suffix in (".md", ".csv") and p.name != "README.md"]
        recorded = (folder / PROVENANCE).exists()
        if recorded:
            assert folder.name not in RERUN, f"{folder.name}: rerun already, drop it from RERUN"
        elif tables and not (folder / "claim.json").exists():
            assert folder.name in REGENERATED or folder.name in RERUN, folder.name


CLAIMS = sorted(RESULTS.rglob("claim.json"))


@pytest.mark.parametrize("path", CLAIMS, ids=[str(p.parent.relative_to(RESULTS)) for p in CLAIMS])
def test_every_committed_claim_regenerates(path: Path) -> None:
    committed = json.loads(path.read_text())
    root = RESULTS.parent
    g = gap(read_runs(root / committed["a"], committed["key"]), read_runs(root / committed["b"], committed["key"]))
    for key, value in g.to_dict().items():
        if isinstance(value, float):
            assert committed[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert committed[key] == value, key


def test_the_bf16_claims_are_among_them() -> None:
    assert RESULTS / "bf16_cost" / "claim.json" in CLAIMS
    assert {RESULTS / "bf16_paper_params" / m / "claim.json" for m in ("fedpcs", "random")} <= set(CLAIMS)


def test_jdp_auction_points_recompute_in_full(tmp_path: Path) -> None:
    """JDP-FL Fig. 2 has no training runs: its per-point files are the auctions' outcomes on
    seeded instances (100 per point), recomputed here in full and compared byte for byte (the
    tables are regenerated from the committed files by the test above)."""
    from fedgame.experiments.jdp_auction_figs import BUDGETS, CANDIDATES, FIXED_BUDGET, solve_points

    here = RESULTS / "jdp_auction" / "runs"
    solve_points(tmp_path, 100, 0, BUDGETS, CANDIDATES, FIXED_BUDGET)
    committed = sorted(p.relative_to(here) for p in here.rglob("metrics.csv"))
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("metrics.csv")) and len(committed) == 20
    for rel in committed:
        assert (tmp_path / rel).read_text() == (here / rel).read_text(), rel
        assert (tmp_path / rel.parent / "config.yaml").read_text() == (here / rel.parent / "config.yaml").read_text()


def test_runs_of_one_configuration_agree_across_results_folders() -> None:
    """Two committed runs whose resolved recipes differ only in their name (e.g. JDP-FL Fig. 3's
    ε = 5 leave-one-out cell and Fig. 4's m = 20, ε = 5 cell, or Fig. 4's m = 60 and Fig. 5's
    leave-one-out, or an H200's fp32 FedPCS Table II cell and the bf16 check's fp32 run of it)
    reached the same final accuracy and loss: one configuration on one kind of device, one
    number. The device is part of the key (the summary's ``ran_on.device`` and ``versions.cpu``):
    another device computes with other kernels, e.g. a GPU's run of a CPU cell's configuration."""
    import yaml

    seen: dict[str, tuple[Path, float, float]] = {}
    pairs = 0
    for summary in sorted(RESULTS.glob("**/summary.json")):
        cfg_path = summary.parent / "config.yaml"
        if not cfg_path.exists():
            continue
        cfg = yaml.safe_load(cfg_path.read_text())
        if not isinstance(cfg, dict) or "name" not in cfg:
            continue
        cfg.pop("name")
        s = json.loads(summary.read_text())
        if "final_accuracy" not in s:
            continue
        device = (s.get("ran_on") or {}).get("device", "cpu"), (s.get("versions") or {}).get("cpu")
        key = json.dumps([cfg, device], sort_keys=True, default=str)
        got = (summary.parent, s["final_accuracy"], s.get("final_loss"))
        if key in seen:
            pairs += 1
            assert got[1:] == seen[key][1:], f"{seen[key][0]} and {got[0]}: same configuration, different numbers"
        else:
            seen[key] = got
    assert pairs >= 15  # Fig. 3 ∩ Fig. 4 (9 runs), Fig. 4 ∩ Fig. 5 (3 runs), the H200's Table II cells ∩ the bf16 check (3 runs)


def test_fedpcs_figures_page_regenerates_from_its_numbers() -> None:
    """The FedPCS game figures train nothing: ``figures.json`` holds every plotted number (per
    seed), and the page is written from it byte for byte."""
    from fedgame.experiments.fedpcs_figures import _markdown

    here = RESULTS / "fedpcs_figures"
    data = json.loads((here / "figures.json").read_text())
    numbers = {int(s): n for s, n in data["seeds"].items()}
    md = _markdown(numbers, data["figures"], instance=data["instance"], commit=data["commit"], budget=tuple(data["budget"]))
    assert md == (here / "figures.md").read_text()


def test_qidpfl_comparison_reads_every_game_runs_budgets() -> None:
    """The committed QI-DPFL comparison's mean ρ_i^tot comes from each game run's exported
    ``qidpfl.npz`` (per-client, per-round ρ_i^t): finite for the four private methods, so an
    export that drops the file (it once did, and the column read NaN) fails here."""
    import csv

    with (RESULTS / "qidpfl_fmnist" / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    private = [r for r in rows if r["method"] in ("FedAvg-DP", "QI-DPFL", "Max", "Random")]
    assert len(private) == 8
    for r in private:
        assert 0 < float(r["rho_tot_mean"]) < 1, (r["partition"], r["method"])
    assert len(list((RESULTS / "qidpfl_fmnist" / "runs").rglob("qidpfl.npz"))) == 24


def test_the_reproduction_page_is_what_the_committed_results_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reproduction.md, generated again from the committed results/, is the committed page
    byte for byte: no sentence on it can go stale while the runs change under it."""
    from fedgame.experiments.reproduction import reproduction_text

    monkeypatch.chdir(RESULTS.parent)
    page = Path("docs/reproduction.md")
    assert reproduction_text(Path("results"), page) == page.read_text(), (
        "docs/reproduction.md is stale: run `fedgame report results --reproduction`"
    )
