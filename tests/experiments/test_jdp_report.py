"""The JDP-FL figure pages (Figs. 3, 4, 5): grouping runs into cells, mean ± std over seeds
computed once from the per-seed values, the attack's cost both ways, every ordering the pages
claim decided by the project's rule (claims.decide on per-seed accuracies, paired by seed, Holm
over the page) and written to orderings.csv, the sentences about the runs read from their
configs, and the CLI command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from scipy import stats
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.claims import ORDERINGS, decide, holm, read_orderings, rule_note
from fedgame.experiments.jdp_report import write_fig3, write_fig4, write_fig5

# (aggregator, attacked, eps) -> accuracy per seed 0, 1
ACC = {
    ("leave_one_out", True, 0.5): (0.70, 0.72),
    ("leave_one_out", True, 1.0): (0.78, 0.80),
    ("leave_one_out", False, 1.0): (0.80, 0.81),
    ("fedavg", True, 0.5): (0.66, 0.68),
    ("fedavg", True, 1.0): (0.74, 0.76),
    ("fedavg", False, 0.5): (0.73, 0.73),
    ("fedavg", False, 1.0): (0.80, 0.82),
    ("krum", True, 1.0): (0.60, 0.62),
}


def _run(root: Path, agg: str, attacked: bool, eps: float, seed: int, acc: float, *, rounds: int = 5) -> None:
    name = f"jdp_fig3_epsilon={eps:g}_kind={'dirty_label' if attacked else 'none'}_aggregator={agg}"
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    cfg = {
        "name": "jdp_fig3",
        "seed": seed,
        "privacy": {"kind": "jdp", "epsilon": eps, "clip": 20.0, "delta": 1e-5, "sensitivity": "record"},
        "jdp": {"aggregator": agg, "epsilon_exp": "same", "attack": {"kind": "dirty_label" if attacked else "none"}},
        "train": {"rounds": rounds, "local": {"lr": 0.01}},
        "data": {"dataset": "fashion_mnist", "max_test": 2000, "partition": {"n_clients": 20}},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "name": name,
                "seed": seed,
                "rounds": rounds,
                "final_accuracy": acc,
                "last5_accuracy": acc - 0.01,
                "wall_time": 60.0,
                "adversary_used_fraction": (0.4 if agg == "leave_one_out" else 1.0) if attacked else None,
                "eps_paper_max": 10 * 2 * eps,
                "eps_rdp_max": 5.0,
                "m": 20,
            }
        )
    )


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for (agg, attacked, eps), accs in ACC.items():
        for seed, a in enumerate(accs):
            _run(root, agg, attacked, eps, seed, a)
    (root / "stray").mkdir()  # a folder without a finished run is ignored
    return root


def _pct(xs: tuple[float, ...]) -> list[float]:
    """Accuracies in % as the pages compute them from ``final_accuracy``."""
    return [100.0 * x for x in xs]


def test_fig3_table_costs_and_orderings(grid: Path, tmp_path: Path) -> None:
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
    assert md.startswith("# JDP-FL Fig. 3 on Fashion-MNIST (reduced budget)")
    assert "| ours (M4 + M5) | yes | 71.00 ± 1.41 (2) | 79.00 ± 1.41 (2) |" in md
    assert (
        "Budget of these runs (from their config.yaml): 5 rounds (the paper gives no round count); local lr 0.01 "
        "(paper 0.001); test accuracy on 2000 test examples (paper the full test set)."
    ) in md
    assert (
        "Runs (read from their config.yaml and summary.json): 16 runs over seeds 0, 1; Fashion-MNIST; m = 20 "
        "participants; ε = ε_L = ε_E per round: 0.5 / 1; no attack in 6 runs; one dirty-label adversary "
        "(all its labels → class 2) in 10 runs; M3 with record-level sensitivity 2C/d_i, C = 20, δ = 1e-05"
    ) in md
    # ours at eps = 1: own cost 80.5 - 79 = +1.50; paper's reading 81 - 79 = +2.00; FedAvg: 81 - 75 = +6.00
    assert "+1.50 / +2.00" in md and "+6.00 / +6.00" in md
    # no other rule than the one: no tolerance, no threshold verdicts, no typed paper round count
    assert "− 0.5" not in md and "within 1 point" not in md and "≤ 2 points" not in md and "paper 30" not in md
    assert "Holm-adjusted over the 7 orderings of this page" in md
    decided = read_orderings(dest / ORDERINGS)
    claims = [lab["claim"] for lab, _ in decided]
    assert claims == ["no attack > ours, at each ε"] * 2 + ["ours > traditional, at each ε"] * 2 + [
        "ours (M4 + M5), attack: rises with ε",
        "traditional (FedAvg), attack: rises with ε",
        "traditional (FedAvg), no attack: rises with ε",
    ]
    # every pair of cells differs by the same amount on both seeds: zero spread, decided by the sign
    verdicts = {(lab["claim"], lab["A"], lab["B"]): d.verdict for lab, d in decided}
    assert (
        verdicts[("ours > traditional, at each ε", "ours (M4 + M5), attack, ε = 0.5", "traditional (FedAvg), attack, ε = 0.5")] == "holds"
    )
    assert all(d.adjusted and d.test == "paired t" and d.n_pairs == 2 for _, d in decided)
    assert "| ours > traditional, at each ε | ours (M4 + M5), attack, ε = 1 | traditional (FedAvg), attack, ε = 1 | +4.00 |" in md
    assert (dest / "fig3.png").stat().st_size > 1000
    assert len(list((dest / "configs").glob("*.yaml"))) == 2 * len(ACC)


def test_fig3_sentences_about_the_runs_come_from_their_configs(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _run(root, "leave_one_out", True, 1.0, 0, 0.70, rounds=7)
    _run(root, "fedavg", True, 1.0, 3, 0.75, rounds=9)
    write_fig3(root, tmp_path / "out", budget="paper")
    md = (tmp_path / "out" / "fig3.md").read_text()
    assert "# JDP-FL Fig. 3 on Fashion-MNIST (paper budget)" in md
    assert "Budget of these runs (from their config.yaml): 7 / 9 rounds (the paper gives no round count)" in md
    assert "2 runs over seeds 0, 3;" in md and "one dirty-label adversary (all its labels → class 2) in 2 runs" in md
    assert "| 1 | 7 |" in md  # the ledger's T is the run's own round count (summary.json)


# Fixed per-seed final accuracies of ours and FedAvg under attack at ε = 1 (one ordering on the
# page, "ours > traditional", so Holm leaves p as it is) and the verdict each must come out with.
VERDICTS = {
    "holds": ({0: 0.80, 1: 0.82, 2: 0.81}, {0: 0.70, 1: 0.715, 2: 0.705}, "paired"),
    "fails": ({0: 0.70, 1: 0.715, 2: 0.705}, {0: 0.80, 1: 0.82, 2: 0.81}, "paired"),
    "not decided": ({0: 0.70, 1: 0.72, 2: 0.71}, {0: 0.71, 1: 0.70, 2: 0.715}, "paired"),
    "holds (Welch)": ({0: 0.80, 1: 0.82, 2: 0.81}, {3: 0.70, 4: 0.72, 5: 0.71}, "welch"),
    "not decided (one seed)": ({0: 0.80}, {0: 0.70, 1: 0.72}, "none"),
}


@pytest.mark.parametrize("case", list(VERDICTS))
def test_fig3_verdicts_are_the_rules_on_the_per_seed_values(case: str, tmp_path: Path) -> None:
    ours, trad, test = VERDICTS[case]
    root = tmp_path / "runs"
    for seed, x in ours.items():
        _run(root, "leave_one_out", True, 1.0, seed, x)
    for seed, x in trad.items():
        _run(root, "fedavg", True, 1.0, seed, x)
    write_fig3(root, tmp_path / "out", budget="reduced")
    [(lab, d)] = read_orderings(tmp_path / "out" / ORDERINGS)
    assert lab == {
        "claim": "ours > traditional, at each ε",
        "A": "ours (M4 + M5), attack, ε = 1",
        "B": "traditional (FedAvg), attack, ε = 1",
    }
    want = case.split(" (Welch)")[0]
    assert d.verdict == want
    a, b = _pct(tuple(ours.values())), _pct(tuple(trad.values()))
    if test == "paired":
        p = stats.ttest_rel(a, b, alternative="greater").pvalue
        p_rev = stats.ttest_rel(b, a, alternative="greater").pvalue
        assert d.test == "paired t" and d.n_pairs == 3
    elif test == "welch":
        p = stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
        p_rev = stats.ttest_ind(b, a, equal_var=False, alternative="greater").pvalue
        assert d.test == "Welch t" and d.n_pairs == 0
    else:
        assert d.test == "none" and d.p != d.p  # one seed: no test, no p
        p = p_rev = None
    if p is not None:
        assert d.p == pytest.approx(p, rel=1e-9) and d.p_reverse == pytest.approx(p_rev, rel=1e-9)
        assert (d.p < 0.05) == (want == "holds") and (d.p_reverse < 0.05) == (want == "fails")
    assert d.diff == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    md = (tmp_path / "out" / "fig3.md").read_text()
    assert f"- ours > traditional, at each ε: **{want}** (1 ordering: 1 {want})" in md
    assert f"| {' | '.join(d.cells())} |" in md and md.count(f"| {want} |") == 1
    assert rule_note([d], where="page") in md  # the rule in words, for a family of one ordering


def _group_run(root: Path, s: int | None, seed: int, acc: float) -> None:
    name = f"g{s}" if s is not None else "loo"
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    j = {"aggregator": "random_groups", "group_size": s} if s is not None else {"aggregator": "leave_one_out"}
    (d / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": seed,
                "data": {"partition": {"n_clients": 60}},
                "jdp": j,
                "train": {"rounds": 5},
                "privacy": {"kind": "jdp", "epsilon": 1.0},
            }
        )
    )
    (d / "summary.json").write_text(json.dumps({"seed": seed, "final_accuracy": acc, "m": 60, "adversary_used_fraction": 0.5}))


# group size s (None: leave-one-out) -> accuracy per seed 0, 1, 2
FIG5 = {5: (0.60, 0.62, 0.61), 10: (0.65, 0.66, 0.66), 30: (0.70, 0.7012, 0.7021), None: (0.80, 0.83, 0.81)}


def test_fig5_group_sizes(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for s, accs in FIG5.items():
        for seed, acc in enumerate(accs):
            _group_run(root, s, seed, acc)
    rows = write_fig5(root, tmp_path / "out", budget="reduced")
    assert [r["group_size"] for r in rows] == [5, 10, 30, 59]
    assert rows[-1]["rule"] == "leave_one_out" and rows[0]["accuracy_mean"] == pytest.approx(61.0)
    md = (tmp_path / "out" / "fig5.md").read_text()
    assert "within 1 point" not in md and "two standard errors" not in md and "paper 30" not in md
    assert "5 rounds (the paper gives no round count)" in md and "m = 60 participants" in md
    # the std of s = 30 printed from the raw values once: 0.10536 -> 0.11 (rounded first to 0.105 it
    # would print 0.10)
    assert "| random groups | 30 | 70.11 ± 0.11 (3) |" in md
    decided = read_orderings(tmp_path / "out" / ORDERINGS)
    pct = {s: dict(enumerate(_pct(a))) for s, a in FIG5.items()}
    expect = [
        ("random groups: rises with s", "s = 10", "s = 5", pct[10], pct[5]),
        ("random groups: rises with s", "s = 30", "s = 10", pct[30], pct[10]),
        *(
            ("leave-one-out above every group size", "leave-one-out (s = 59)", f"random groups, s = {s}", pct[None], pct[s])
            for s in (5, 10, 30)
        ),
    ]
    assert [(lab["claim"], lab["A"], lab["B"]) for lab, _ in decided] == [e[:3] for e in expect]
    # Holm over the page's five orderings: the rule's own adjustment of the rule's own decisions
    assert [d for _, d in decided] == holm([decide(a, b) for *_, a, b in expect])
    assert all(
        d.p >= stats.ttest_rel(list(a.values()), list(b.values()), alternative="greater").pvalue - 1e-12
        for (_, d), (*_, a, b) in zip(decided, expect)
    )
    assert "Holm-adjusted over the 5 orderings of this page" in md
    for lab, d in decided:
        assert f"| {lab['claim']} | {lab['A']} | {lab['B']} | {' | '.join(d.cells())} |" in md
    v = {(lab["A"], lab["B"]): d.verdict for lab, d in decided}
    assert v[("leave-one-out (s = 59)", "random groups, s = 5")] == "holds"
    assert "- leave-one-out above every group size: **" in md

    # a group size above leave-one-out on every seed, out of order: its step down and leave-one-out
    # above it fail, so both claims fail
    for seed, acc in enumerate((0.90, 0.91, 0.905)):
        _group_run(root, 15, seed, acc)
    write_fig5(root, tmp_path / "out2", budget="reduced")
    md = (tmp_path / "out2" / "fig5.md").read_text()
    by_pair = {(lab["A"], lab["B"]): d for lab, d in read_orderings(tmp_path / "out2" / ORDERINGS)}
    assert (
        by_pair[("s = 30", "s = 15")].verdict == "fails" and by_pair[("leave-one-out (s = 59)", "random groups, s = 15")].verdict == "fails"
    )
    assert "- random groups: rises with s: **fails**" in md and "- leave-one-out above every group size: **fails**" in md


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
    cfg = {
        "seed": seed,
        "data": {"partition": {"n_clients": m}},
        "privacy": {"kind": "jdp", "epsilon": eps},
        "jdp": {"aggregator": agg, "attack": {"kind": "dirty_label" if attacked else "none"}},
        "train": {"rounds": 5},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(
        json.dumps(
            {"seed": seed, "final_accuracy": acc, "m": m, "adversary_used_fraction": 0.9, "wall_time": 10.0, "eps_paper_max": 10 * eps}
        )
    )
    adv = 1
    (d / "jdp.json").write_text(json.dumps({"winners": list(range(m)), "adversary": adv, "aggregator": agg}))
    probs = [0.5 if i == adv else 0.5 / (m - 1) for i in range(m)]
    (d / "metrics.csv").write_text(f'round,probs\n0,"{json.dumps(probs)}"\n')


def test_fig4_by_m_and_eps(tmp_path: Path) -> None:
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
    assert "within 1 point" not in md and "two standard errors" not in md and "paper 30" not in md
    decided = read_orderings(tmp_path / "out" / ORDERINGS)
    assert [(lab["claim"], lab["A"], lab["B"]) for lab, _ in decided] == [
        ("m = 10: rises with ε", "ε = 1", "ε = 0.5"),
        ("m = 10: rises with ε", "ε = 5", "ε = 1"),
        *((("ε = 1: rises with m (the paper's MNIST claim)", f"m = {b}", f"m = {a}")) for a, b in ((5, 10), (10, 20), (20, 40))),
    ]
    # both seeds move together at every step: zero spread, every rise holds
    assert all(d.verdict == "holds" and d.test == "paired t" for _, d in decided)
    assert "- m = 10: rises with ε: **holds** (2 orderings: 2 holds)" in md
    assert "- ε = 1: rises with m (the paper's MNIST claim): **holds** (3 orderings: 3 holds)" in md
    assert (tmp_path / "out" / "fig4.png").stat().st_size > 0

    _m_run(root, 60, 1.0, 0, 0.50)  # accuracy falls at m = 60, on both seeds
    _m_run(root, 60, 1.0, 1, 0.52)
    _m_run(root, 30, 1.0, 0, 0.69)  # one seed at m = 30 decides nothing
    write_fig4(root, tmp_path / "out2", budget="reduced")
    md = (tmp_path / "out2" / "fig4.md").read_text()
    decided2 = {(lab["A"], lab["B"]): d for lab, d in read_orderings(tmp_path / "out2" / ORDERINGS) if "rises with m" in lab["claim"]}
    assert decided2[("m = 60", "m = 40")].verdict == "fails" and decided2[("m = 60", "m = 40")].diff == pytest.approx(-20.0)
    assert decided2[("m = 30", "m = 20")].verdict == "not decided (one seed)"
    assert "- ε = 1: rises with m (the paper's MNIST claim): **fails**" in md

    r = CliRunner().invoke(app, ["report", str(root), "--kind", "jdp-fig4", "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0 and "fig4: 8 cells" in r.output, r.output
    assert (tmp_path / "cli" / ORDERINGS).exists()


def test_cli_jdp_report(grid: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(grid), "--kind", "jdp-fig3", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "fig3.md").exists() and (tmp_path / "o" / ORDERINGS).exists()
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "empty_nothing"), "--kind", "jdp-fig3", "--out", str(tmp_path / "o2")])
    assert bad.exit_code != 0 and "runs" in bad.output
