"""Claims between run sets: the verdict is computed from per-seed summaries and can fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.claims import gap, read_runs


def _runs(root: Path, accs: dict[int, float]) -> Path:
    for seed, acc in accs.items():
        d = root / f"seed_{seed}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"seed": seed, "final_accuracy": acc}))
    return root


def test_gap_carries_the_rules_verdict_and_both_standard_errors() -> None:
    g = gap({0: 0.80, 1: 0.81, 2: 0.82}, {0: 0.70, 1: 0.71, 2: 0.72})
    assert g.verdict == "holds" and g.diff == pytest.approx(0.10) and g.paired_se == pytest.approx(0.0, abs=1e-12)
    g = gap({0: 0.70, 1: 0.80, 2: 0.75}, {0: 0.74, 1: 0.76, 2: 0.75})
    assert g.verdict == "not decided" and g.se == pytest.approx((0.05**2 / 3 + 0.01**2 / 3) ** 0.5)
    assert gap({0: 0.5, 1: 0.51}, {0: 0.7, 1: 0.71}).verdict == "fails"


def test_cli_claim_reads_summaries_and_writes_its_files(tmp_path: Path) -> None:
    a = _runs(tmp_path / "a", {0: 0.80, 1: 0.82, 2: 0.81})
    b = _runs(tmp_path / "b", {0: 0.70, 1: 0.73, 2: 0.71})
    assert read_runs(a) == {0: 0.80, 1: 0.82, 2: 0.81}
    r = CliRunner().invoke(app, ["claim", str(a), str(b), "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.stdout
    got = json.loads((tmp_path / "c" / "claim.json").read_text())
    assert got["verdict"] == "holds" and "**holds**" in (tmp_path / "c" / "claim.md").read_text()
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(app, ["claim", str(tmp_path / "empty"), str(b)])
    assert r.exit_code == 2 and "no summary.json" in r.stderr
    r = CliRunner().invoke(app, ["claim", str(tmp_path / "missing"), str(b)])
    assert r.exit_code == 2 and "not a folder" in r.stderr


def test_export_copies_finished_runs_only(tmp_path: Path) -> None:
    from fedgame.pipeline.results import export_runs

    src = tmp_path / "runs"
    done, busy = src / "cell" / "seed_0", src / "cell" / "seed_1"
    for d in (done, busy):
        d.mkdir(parents=True)
        (d / "config.yaml").write_text("seed: 0\n")
        (d / "metrics.csv").write_text("round\n0\n")
        (d / "checkpoint.pt").write_bytes(b"x")
    (done / "summary.json").write_text('{"final_accuracy": 0.5}')
    written = export_runs(src, tmp_path / "results")
    assert written == [tmp_path / "results" / "cell" / "seed_0"]
    assert sorted(p.name for p in written[0].iterdir()) == ["config.yaml", "metrics.csv", "summary.json"]
    assert not (tmp_path / "results" / "cell" / "seed_1").exists()
    with pytest.raises(ValueError, match="runs: not a folder"):
        export_runs(tmp_path / "nope", tmp_path / "r")


def test_versions_name_the_commit_and_the_cpu() -> None:
    import subprocess

    from fedgame.pipeline.runner import versions

    v = versions()
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert v["code"].split("+")[0] == head or (not head and v["code"].startswith("fedgame "))
    assert v["cpu"] and v["cpu"] != "unknown"
    # the vector instruction set torch's kernels dispatch to is part of the record: two hosts both
    # named "AMD EPYC" (with and without AVX-512) give different round-off and speeds
    import torch

    assert torch.backends.cpu.get_cpu_capability() in v["cpu"]
    if Path("/proc/cpuinfo").exists():
        assert "family " in v["cpu"] and "model " in v["cpu"]


def test_a_grid_rewriting_its_results_does_not_make_the_code_dirty(tmp_path: Path) -> None:
    """A run's ``+dirty`` is about code: the tables and pages a grid rewrites as cells finish
    (``results/``, ``docs/``) do not count, a changed source file does."""
    import subprocess

    from fedgame.pipeline.runner import code_version

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    for rel in ("src/m.py", "results/x/table.md", "docs/page.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("a\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git("rev-parse", "HEAD")
    (tmp_path / "results" / "x" / "table.md").write_text("b\n")
    (tmp_path / "docs" / "page.md").write_text("b\n")
    (tmp_path / "results" / "x" / "new.csv").write_text("b\n")
    assert code_version.__wrapped__(tmp_path) == head
    (tmp_path / "src" / "m.py").write_text("b\n")
    assert code_version.__wrapped__(tmp_path) == head + "+dirty"


def test_a_table_says_when_its_runs_mix_code_versions(tmp_path: Path) -> None:
    from fedgame.pipeline.results import code_note

    sha_a, sha_b = "a" * 40, "b" * 40
    dirs = []
    for i, code in enumerate([sha_a, sha_a, sha_b + "+dirty"]):
        d = tmp_path / f"seed_{i}"
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"versions": {"code": code, "cpu": "AMD EPYC"}}))
        dirs.append(d)
    assert code_note(dirs[:2]) == "Code: all 2 runs from code aaaaaaaaaaaa; CPU: AMD EPYC (from each run's summary.json)."
    note = code_note(dirs)
    assert "mix 2 code versions: aaaaaaaaaaaa (2 runs), bbbbbbbbbbbb+dirty (1 run)" in note
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text("{}")
    assert "not recorded (1 run)" in code_note([*dirs, tmp_path / "old"])
    # a run stopped and resumed under another code version is named by its sessions
    (tmp_path / "resumed").mkdir()
    sessions = [{"from_round": 0, "code": sha_b, "cpu": "AMD EPYC"}, {"from_round": 7, "code": sha_a, "cpu": "AMD EPYC"}]
    (tmp_path / "resumed" / "summary.json").write_text(json.dumps({"versions": {"code": sha_a, "cpu": "AMD EPYC"}, "sessions": sessions}))
    assert code_note([*dirs[:2], tmp_path / "resumed"]) == (
        "Code: all 3 runs from code aaaaaaaaaaaa (1 run resumed under another code version: see its `sessions`); "
        "CPU: AMD EPYC (from each run's summary.json)."
    )
    # runs trained on a lent GPU beside CPU runs: the line counts the runs per device
    for i, device in enumerate(["cpu", "cuda (NVIDIA H200)"]):
        d = tmp_path / f"dev_{i}"
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"versions": {"code": sha_a, "cpu": "AMD EPYC"}, "ran_on": {"device": device}}))
    assert code_note([tmp_path / "dev_0", tmp_path / "dev_0"]).endswith("CPU: AMD EPYC (from each run's summary.json).")
    assert code_note([tmp_path / "dev_0", tmp_path / "dev_1"]).endswith(
        "CPU: AMD EPYC; trained on: cpu (1 run), cuda (NVIDIA H200) (1 run) (from each run's summary.json)."
    )


def test_table2_orderings_carry_computed_verdicts(tmp_path: Path) -> None:
    """Table II's orderings are decided from per-seed accuracies (paired where seeds are shared),
    Holm-adjusted over the table, printed with interval and p, and written to orderings.csv."""
    from scipy import stats

    from fedgame.experiments.claims import read_orderings, write_orderings
    from fedgame.experiments.table2 import claims_markdown, orderings

    fed_iid, rnd_iid = {0: 90.0, 1: 91.0, 2: 89.5}, {0: 85.0, 1: 86.5, 2: 84.0}
    fed_non, rnd_non = {0: 80.0, 1: 77.0, 2: 83.0}, {0: 79.0, 1: 78.0, 2: 80.0}
    abl = {0: 70.0, 1: 71.0, 2: 69.0}
    values = {
        ("FedPCS", 0.2, "IID"): fed_iid,
        ("Random", 0.2, "IID"): rnd_iid,
        ("FedPCS", 0.2, "Non-IID"): fed_non,
        ("Random", 0.2, "Non-IID"): rnd_non,
        ("FedPCS incentive + uniform draws", 0.2, "Non-IID"): abl,
    }
    decided = orderings(values)
    by = {(lab["split"], lab["a"], lab["b"]): d for lab, d in decided}
    raw = [
        stats.ttest_rel(list(fed_iid.values()), list(rnd_iid.values()), alternative="greater").pvalue,
        stats.ttest_rel(list(fed_non.values()), list(rnd_non.values()), alternative="greater").pvalue,
    ]
    assert len(decided) == 4 and all(d.adjusted and d.test == "paired t" for _, d in decided)
    iid = by[("IID", "FedPCS", "Random")]
    assert iid.verdict == "holds" and raw[0] <= iid.p <= 4 * raw[0] + 1e-15
    assert by[("Non-IID", "FedPCS", "Random")].verdict == "not decided" and by[("Non-IID", "FedPCS", "Random")].p >= raw[1]
    assert by[("Non-IID", "FedPCS incentive + uniform draws", "Random")].verdict == "fails"
    md = "\n".join(claims_markdown(decided))
    assert f"| 0.2 | IID | FedPCS | Random | {iid.diff:+.2f} | [{iid.ci_low:.2f}, {iid.ci_high:.2f}] |" in md
    assert "Holm-adjusted over the 2 orderings of this family (the paper" in md and "two standard errors" not in md
    assert orderings({("FedPCS", 0.2, "IID"): fed_iid}) == [] and claims_markdown([]) == []
    write_orderings(tmp_path / "o.csv", decided)
    back = read_orderings(tmp_path / "o.csv")
    assert [d for _, d in back] == [d for _, d in decided] and back[0][0]["a"] == decided[0][0]["a"]


def test_holm_adjusts_fixed_p_values() -> None:
    """Holm's step-down on p = (0.01, 0.04, 0.03): (0.03, 0.06, 0.06) — only the first holds."""
    from fedgame.experiments.claims import Decision, holm

    def d(p: float) -> Decision:
        return Decision("paired t", 3, 3, 3, 1.0, 0.1, 1.9, 3.0, 2.0, p, 1 - p, "holds")

    adj = holm([d(0.01), d(0.04), d(0.03)])
    assert [a.p for a in adj] == pytest.approx([0.03, 0.06, 0.06])
    assert [a.verdict for a in adj] == ["holds", "not decided", "not decided"]


def test_read_runs_refuses_a_missing_folder_and_two_cells_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="runs: not a folder"):
        read_runs(tmp_path / "nope")
    for cell in ("a", "b"):
        (tmp_path / cell / "seed_0").mkdir(parents=True)
        (tmp_path / cell / "seed_0" / "summary.json").write_text('{"seed": 0, "final_accuracy": 0.5}')
    (tmp_path / "other.json").write_text("{}")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text('{"not": "a run"}')  # not a fedgame run: ignored
    assert read_runs(tmp_path / "a") == {0: 0.5}
    with pytest.raises(ValueError, match="two runs with seed 0"):
        read_runs(tmp_path)


# -- the rule: paired t over common seeds, else Welch; one-sided p < 0.05; Holm across a table --
from scipy import stats  # noqa: E402

from fedgame.experiments.claims import decide, holm  # noqa: E402

A = {0: 0.812, 1: 0.797, 2: 0.825, 3: 0.803, 4: 0.818}
B = {0: 0.801, 1: 0.790, 2: 0.809, 3: 0.799, 4: 0.806}


def test_paired_decision_equals_scipys_paired_t() -> None:
    d = decide(A, B)
    ref = stats.ttest_rel(list(A.values()), list(B.values()), alternative="greater")
    assert d.test == "paired t" and d.n_pairs == 5 and d.df == 4
    assert d.t == pytest.approx(ref.statistic, rel=1e-12) and d.p == pytest.approx(ref.pvalue, rel=1e-10)
    ci = stats.ttest_rel(list(A.values()), list(B.values())).confidence_interval(0.95)
    assert (d.ci_low, d.ci_high) == (pytest.approx(ci.low, rel=1e-10), pytest.approx(ci.high, rel=1e-10))
    assert d.verdict == "holds" and d.p < 0.05
    assert decide(B, A).verdict == "fails" and decide(B, A).p_reverse == pytest.approx(d.p, rel=1e-12)


def test_without_common_seeds_it_is_welchs_t() -> None:
    b = {s + 10: v for s, v in B.items()}
    b[99] = 0.70
    d = decide(A, b)
    ref = stats.ttest_ind(list(A.values()), list(b.values()), equal_var=False, alternative="greater")
    assert d.test == "Welch t" and d.t == pytest.approx(ref.statistic, rel=1e-12) and d.p == pytest.approx(ref.pvalue, rel=1e-10)
    assert d.df == pytest.approx(ref.df, rel=1e-10)
    ci = stats.ttest_ind(list(A.values()), list(b.values()), equal_var=False).confidence_interval(0.95)
    assert d.ci_low == pytest.approx(ci.low, rel=1e-10) and d.ci_high == pytest.approx(ci.high, rel=1e-10)


def test_pairing_decides_where_the_unpaired_test_cannot() -> None:
    """Shared seeds move both sides together (a PHS s = 70 P > B case: unpaired SE 9.48, paired
    0.77): the same numbers are undecided unpaired, decided paired."""
    a = {0: 0.60, 1: 0.75, 2: 0.90}
    b = {0: 0.58, 1: 0.74, 2: 0.87}
    assert decide(a, b).verdict == "holds"
    assert decide(a, {s + 3: v for s, v in b.items()}).verdict == "not decided"


def test_one_seed_decides_nothing_and_holm_adjusts_a_tables_orderings() -> None:
    assert decide({0: 0.9}, {1: 0.1}).verdict == "not decided (one seed)"
    ds = [decide(A, B), decide({0: 0.7, 1: 0.71, 2: 0.69}, {0: 0.68, 1: 0.70, 2: 0.69}), decide({0: 0.5}, {0: 0.4})]
    adj = holm(ds)
    ps = [ds[0].p, ds[1].p]
    m, order = 2, sorted(range(2), key=lambda k: ps[k])
    expect = [0.0, 0.0]
    run = 0.0
    for rank, k in enumerate(order):
        run = max(run, min(1.0, (m - rank) * ps[k]))
        expect[k] = run
    assert [adj[0].p, adj[1].p] == pytest.approx(expect, rel=1e-12) and adj[0].adjusted
    assert adj[2] == ds[2]  # one seed: not counted, left as it is
    assert all(a.p >= d.p for a, d in zip(adj[:2], ds[:2], strict=True))
