"""The command line: validate, list, run, compare (with a grid, skipping finished cells), report."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedgame.cli import app

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
runner = CliRunner()

TINY = {
    "name": "tiny",
    "seed": 0,
    "data": {"dataset": "fashion_mnist", "max_train": 1000, "max_test": 200, "partition": {"kind": "iid", "n_clients": 5}},
    "model": {"name": "logreg"},
    "train": {"rounds": 2, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
    "selection": {"kind": "uniform"},
}


def _recipe(tmp_path: Path, **over: object) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump({**TINY, **over}))
    return p


def test_validate_ok_and_bad(tmp_path: Path) -> None:
    r = runner.invoke(app, ["validate", str(_recipe(tmp_path))])
    assert r.exit_code == 0 and "ok" in r.stdout
    assert "trains on cpu, 2 worker processes (train.workers), fp32" in r.stdout  # 2 clients a round: at most 2
    r = runner.invoke(app, ["validate", str(_recipe(tmp_path)), "--set", "train.workers=1", "--set", "train.device=cpu"])
    assert "trains on cpu, 1 worker process (train.workers), fp32" in r.stdout
    r = runner.invoke(app, ["validate", str(_recipe(tmp_path)), "--set", "train.local.lr=-1"])
    assert r.exit_code == 2
    assert "train.local.lr: Input should be greater than 0, got -1" in r.stderr


def test_list_groups() -> None:
    r = runner.invoke(app, ["list", "models"])
    assert r.exit_code == 0 and "mcmahan_cnn" in r.stdout and "uniform" not in r.stdout
    r = runner.invoke(app, ["list", "strategies"])
    assert "uniform" in r.stdout and "data_size" in r.stdout
    r = runner.invoke(app, ["list", "bogus"])
    assert r.exit_code == 2 and "unknown group" in r.stderr


def test_list_shows_every_kind_a_recipe_can_name() -> None:
    """Every tag of the recipe schema's unions is listed, with a description (none empty)."""
    from fedgame.cli import _list_groups
    from fedgame.pipeline.config import Privacy, Selection, _tags

    groups = _list_groups(long=False)
    assert {n for n, _ in groups["selection.kind"]} == _tags(Selection) >= {"participants", "screened"}
    assert {n for n, _ in groups["privacy.kind"]} == _tags(Privacy) >= {"jdp"}
    assert {n for n, _ in groups["accountant.kind"]} == {"rdp", "pld", "zcdp"}
    assert {"M1", "M2"} <= {n for n, _ in groups["jdp.auction.mechanism"]}
    assert {"krum", "median", "trimmed_mean"} <= {n for n, _ in groups["jdp.aggregator"]}
    empty = [(g, n) for g, items in groups.items() for n, d in items if not d.strip()]
    assert not empty, empty
    r = runner.invoke(app, ["list", "selection", "--long"])
    assert r.exit_code == 0 and "participants" in r.stdout and "screened" in r.stdout


def test_missing_dataset_is_one_clear_error(tmp_path: Path) -> None:
    rec = _recipe(tmp_path, data={"dataset": "cifar10", "root": str(tmp_path / "nowhere"), "partition": {"kind": "iid", "n_clients": 5}})
    r = runner.invoke(app, ["run", str(rec), "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert "cifar" in r.stderr.lower() and "Traceback" not in r.stderr


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_compare_grid_skips_finished_cells_and_reports(tmp_path: Path) -> None:
    rec = _recipe(tmp_path)
    out = tmp_path / "grid"
    args = [
        "compare",
        str(rec),
        "--seeds",
        "2",
        "--out",
        str(out),
        "--grid",
        "selection.kind=uniform,full",
        "--set",
        "train.clients_per_round=2",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stdout + r.stderr
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert [row["label"] for row in rows] == ["tiny[kind=uniform]", "tiny[kind=full]"]
    assert all(row["seeds"] == "2" for row in rows)
    assert all(0.0 < float(row["accuracy_mean"]) <= 100.0 for row in rows)
    assert (out / "report" / "report.md").exists() and (out / "report" / "accuracy.png").exists()
    r2 = runner.invoke(app, args)
    assert r2.exit_code == 0 and r2.stdout.count("(finished)") == 4
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"tiny_kind=uniform", "tiny_kind=full", "report"}
    assert list(csv.DictReader((out / "comparison.csv").open())) == rows


def test_run_backend_is_checked(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", str(_recipe(tmp_path)), "--backend", "grpc", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--backend: must be one of inprocess, flower-sim, got 'grpc'" in " ".join(r.stderr.split())
    r = runner.invoke(app, ["run", str(_recipe(tmp_path)), "--round-timeout", "5", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "only with --backend flower-sim" in " ".join(r.stderr.split())
    r = runner.invoke(app, ["run", str(_recipe(tmp_path)), "--backend", "flower-sim", "--on-missing", "skip", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--on-missing: must be 'continue' or 'fail', got 'skip'" in " ".join(r.stderr.split())


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_compare_jobs_runs_cells_at_once_with_the_numbers_of_one_at_a_time(tmp_path: Path) -> None:
    from fedgame.sim.pool import available_cores

    if available_cores() < 2:
        pytest.skip("needs 2 cores")
    rec = _recipe(tmp_path)
    common = ["--seeds", "2", "--grid", "selection.kind=uniform,full", "--no-report"]
    r1 = runner.invoke(app, ["compare", str(rec), "--out", str(tmp_path / "one"), *common])
    r2 = runner.invoke(app, ["compare", str(rec), "--out", str(tmp_path / "two"), "--jobs", "2", *common])
    assert r1.exit_code == 0 and r2.exit_code == 0, r2.stdout + r2.stderr
    assert r2.stdout.count("done tiny") == 4
    one = {(row["label"], row["accuracy_mean"]) for row in csv.DictReader((tmp_path / "one" / "comparison.csv").open())}
    two = {(row["label"], row["accuracy_mean"]) for row in csv.DictReader((tmp_path / "two" / "comparison.csv").open())}
    assert one == two
    r3 = runner.invoke(app, ["compare", str(rec), "--out", str(tmp_path / "two"), "--jobs", "2", *common])
    assert r3.exit_code == 0 and r3.stdout.count("(finished)") == 4  # resumable: nothing is run again


def test_compare_jobs_out_of_range_is_one_clear_line(tmp_path: Path) -> None:
    from fedgame.sim.pool import available_cores

    rec = _recipe(tmp_path)
    cores = available_cores()
    r = runner.invoke(app, ["compare", str(rec), "--out", str(tmp_path / "g"), "--jobs", str(cores + 1)])
    assert r.exit_code == 2 and f"--jobs: must be an integer in 1..{cores}" in r.stderr and "Traceback" not in r.stderr
    if cores >= 2:
        r = runner.invoke(app, ["compare", str(rec), "--out", str(tmp_path / "g"), "--jobs", "2", "--set", f"train.workers={cores}"])
        assert r.exit_code == 2 and "jobs × workers ≤ cores" in r.stderr


def test_init_copies_the_shipped_recipes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    r = runner.invoke(app, ["init", str(tmp_path)])
    assert r.exit_code == 0, r.output
    shipped = sorted(
        p.relative_to(Path(__file__).resolve().parents[2] / "recipes").as_posix()
        for p in (Path(__file__).resolve().parents[2] / "recipes").rglob("*.yaml")
    )
    copied = sorted(p.relative_to(tmp_path / "recipes").as_posix() for p in (tmp_path / "recipes").rglob("*.yaml"))
    assert copied == shipped and "main/fedpcs.yaml" in copied
    r = runner.invoke(app, ["validate", str(tmp_path / "recipes" / "main" / "fedpcs.yaml")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["init", str(tmp_path)])
    assert r.exit_code == 2 and "exists; pass --force" in r.output
    assert runner.invoke(app, ["init", str(tmp_path), "--force"]).exit_code == 0


def test_version_and_python_dash_m() -> None:
    import subprocess
    import sys

    from fedgame import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and f"fedgame {__version__}" in r.output
    p = subprocess.run([sys.executable, "-m", "fedgame", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == f"fedgame {__version__}"


def test_solve_without_input_says_so() -> None:
    r = runner.invoke(app, ["solve", "phs"], input="")
    assert r.exit_code == 2 and "no input" in r.stderr
    r = runner.invoke(app, ["solve", "--help"])
    assert all(g in r.stdout for g in ("fedpcs", "phs", "qidpfl", "jdp"))


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_run_refuses_to_retrain_over_a_run_and_names_a_changed_field(tmp_path: Path) -> None:
    rec, out = _recipe(tmp_path), tmp_path / "run"
    assert runner.invoke(app, ["run", str(rec), "--out", str(out)]).exit_code == 0
    r = runner.invoke(app, ["run", str(rec), "--out", str(out)])
    said = " ".join(r.stderr.split())  # Rich wraps the line where the path makes it long
    assert r.exit_code == 2 and "holds a finished run" in said and "--force" in said
    r = runner.invoke(app, ["run", str(rec), "--out", str(out), "--resume", "--set", "train.rounds=3"])
    assert r.exit_code == 2 and "train.rounds: 2 there, 3 here" in r.stderr.replace("\n", " ")
    assert runner.invoke(app, ["run", str(rec), "--out", str(out), "--force", "--set", "train.rounds=3"]).exit_code == 0
    assert len(list(csv.DictReader((out / "metrics.csv").open()))) == 3


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_validate_and_run_report_an_infeasible_partition_in_one_line(tmp_path: Path) -> None:
    rec = _recipe(tmp_path, data={**TINY["data"], "partition": {"kind": "dirichlet", "n_clients": 90, "alpha": 0.01}})
    for args in (["validate", str(rec)], ["run", str(rec), "--out", str(tmp_path / "o")]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert "no Dirichlet(alpha=0.01) draw" in r.stderr and "Traceback" not in r.stderr
    r = runner.invoke(app, ["validate", str(_recipe(tmp_path, data={**TINY["data"], "dataset": "fmnist"}))])
    assert r.exit_code == 2 and "unknown dataset 'fmnist'; did you mean 'fashion_mnist'?" in r.stderr.replace("\n", " ")


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_a_batch_job_logs_one_line_per_round(tmp_path: Path) -> None:
    """Without a terminal (a batch job, a pipe) each round is a line as it finishes, not a bar drawn at the end."""
    r = runner.invoke(app, ["run", str(_recipe(tmp_path)), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "tiny seed 0: setting up (data, game solve, noise calibration)"
    assert any(line.startswith("tiny seed 0: round 1/2  train loss ") for line in lines)
    assert any(line.startswith("tiny seed 0: round 2/2  train loss ") and "test acc" in line for line in lines)


def test_report_picks_its_kind_from_the_folder_and_the_old_commands_are_gone(tmp_path: Path) -> None:
    """``fedgame report DIR`` writes Table II for a folder of FedPCS/baseline runs (saying which
    kind it chose), the plain run report for any other runs; the old ``fedgame table2`` (and
    table4, jdp-report, qidpfl-report) are gone: ``report --kind`` is the one command."""
    runs = Path(__file__).resolve().parents[2] / "results" / "fedpcs_table2_paper" / "runs"
    r = runner.invoke(app, ["report", str(runs), "--budget", "paper", "--out", str(tmp_path / "t2")])
    assert r.exit_code == 0, r.output
    assert "report kind table2" in r.stderr and (tmp_path / "t2" / "table2.md").exists()
    for old in ("table2", "table4", "jdp-report", "qidpfl-report"):
        r = runner.invoke(app, [old, str(runs), "--dest", str(tmp_path / "old")])
        assert r.exit_code == 2 and "No such command" in r.output
    r = runner.invoke(app, ["report", str(runs), "--kind", "runs", "--out", str(tmp_path / "plain")])
    assert r.exit_code == 0 and (tmp_path / "plain" / "report.md").exists()
    r = runner.invoke(app, ["report", str(runs), "--kind", "table9"])
    assert r.exit_code == 2 and "--kind: must be one of runs, table2" in r.stderr


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_a_failed_compare_cell_does_not_block_its_corrected_rerun(tmp_path: Path) -> None:
    """A cell that failed before its first round (here an infeasible split) leaves a config.yaml
    but nothing to keep: the corrected rerun into the same grid runs instead of refusing."""
    rec = _recipe(tmp_path, data={**TINY["data"], "partition": {"kind": "dirichlet", "n_clients": 5, "alpha": 0.1, "min_size": 200}})
    out = tmp_path / "grid"
    r = runner.invoke(app, ["compare", str(rec), "--seeds", "1", "--out", str(out), "--no-report"])
    assert r.exit_code != 0
    r = runner.invoke(app, ["compare", str(rec), "--seeds", "1", "--out", str(out), "--no-report", "--set", "data.partition.min_size=10"])
    assert r.exit_code == 0, r.output
    assert list(out.rglob("summary.json"))


def test_report_help_names_every_report_kind() -> None:
    from fedgame.experiments.reports import KINDS

    r = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "300"})
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    missing = [k for k in KINDS if k not in text]
    assert not missing, missing


def test_list_keeps_a_description_whole_across_the_papers_abbreviations() -> None:
    """``fedgame list`` shows each plug-in's first sentence: a citation's "Sec. III-C" or "Eq. 4"
    does not end it (the privacy-aware selection's description used to stop at "Sec.")."""
    from fedgame.cli import _doc

    class Cited:
        """Draws x_i ∝ ρ_i (FedPCS Sec. III-C, Eq. 4; McMahan et al. 2018). Then another sentence."""

    assert _doc(Cited, False) == "Draws x_i ∝ ρ_i (FedPCS Sec. III-C, Eq. 4; McMahan et al. 2018)."
    r = runner.invoke(app, ["list", "strategies"])
    assert r.exit_code == 0 and "Sec.\n" not in r.stdout and not r.stdout.rstrip().endswith("Sec.")
