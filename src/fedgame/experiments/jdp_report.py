"""JDP-FL Figs. 3, 4 and 5 from grids of runs (JDP-FL Secs. 6.2.2-6.2.5 and 6.3).

``scripts/jdp_fig3.sh`` runs ``recipes/jdp/fig3.yaml`` over ε (= ε_L = ε_E), the server rule
(``jdp.aggregator``) and the attack (``jdp.attack.kind``) × seeds; :func:`write_fig3` reads the
finished runs and writes

* ``fig3.csv`` — one row per (rule, attack, ε): final test accuracy mean ± std over seeds, the
  last-5-round mean, how often the server's model used the adversary's upload, each winner's
  ledger (the paper's T(ε_L+ε_E) and the RDP figure) and the wall time;
* ``fig3.md`` — the table in the paper's layout (rows: methods, columns: ε), the attack's cost
  per method (its no-attack accuracy minus its under-attack accuracy, and the paper's reading:
  FedAvg without attack minus the method under attack) beside the paper's 4-5 % (traditional)
  and 1-2 % (ours), and the paper's orderings (Secs. 6.2.2, 6.3);
* ``orderings.csv`` — every ordering the page decided (:data:`~fedgame.experiments.claims.ORDERINGS`);
* ``fig3.png`` — accuracy against ε per method, under attack and without;
* ``configs/`` — the config of every run behind a cell.

:func:`write_fig4` and :func:`write_fig5` write Figs. 4 and 5 the same way. Every ordering a
page claims (a later point above an earlier one, ours above the traditional method, leave-one-out
above a group size) is decided by the project's one rule,
:func:`~fedgame.experiments.claims.decide`, on the cells' per-seed final accuracies (paired by
seed: the same seed gives the same data split and adversary), Holm-adjusted over the orderings of
the page, and printed with its difference, 95 % interval and p; a claim made of several orderings
(a rise at every step) is read by :func:`~fedgame.experiments.claims.all_hold`. Every sentence
a page states about the runs (dataset, m, ε, attack, M3's settings, rounds, learning rate, test
set, seeds, code and host) is computed from their ``config.yaml`` and ``summary.json``.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedgame.experiments.claims import COLUMNS, ORDERINGS, Decision, all_hold, decide, holm, rule_note, write_orderings
from fedgame.experiments.table2 import copy_configs, write_rows_csv
from fedgame.pipeline.results import code_note, finished_runs, mean_std
from fedgame.pipeline.store import atomic_write_text
from fedgame.robust import DIRTY_LABEL_TARGETS

__all__ = [
    "METHODS",
    "PAPER_ATTACK_COST",
    "PAPER_BUDGET",
    "budget_line",
    "collect_fig3",
    "collect_fig4",
    "collect_fig5",
    "decide_page",
    "fig3_orderings",
    "fig4_orderings",
    "fig5_orderings",
    "orderings_markdown",
    "per_seed",
    "runs_line",
    "write_fig3",
    "write_fig4",
    "write_fig5",
]

#: Server rules in table order, with the label the report uses.
METHODS: dict[str, str] = {
    "leave_one_out": "ours (M4 + M5)",
    "fedavg": "traditional (FedAvg)",
    "krum": "Krum",
    "median": "coordinate median",
    "trimmed_mean": "trimmed mean",
    "random_groups": "random groups",
}
#: The attack's cost the paper reports (Sec. 6.3), in accuracy points: (low, high).
PAPER_ATTACK_COST: dict[str, tuple[float, float]] = {"fedavg": (4.0, 5.0), "leave_one_out": (1.0, 2.0)}

#: How the pages name the datasets of ``data.dataset``.
DATASETS: dict[str, str] = {"fashion_mnist": "Fashion-MNIST", "mnist": "MNIST", "cifar10": "CIFAR-10"}

Key = tuple[str, bool, float]  # (aggregator, attacked, eps)
Values = dict[int, float]  # {seed: final test accuracy in %}
Labels = dict[str, str]  # what names an ordering: claim, A, B
Ordering = tuple[Labels, Decision]
ByCell = dict[tuple[str, str, float], dict[str, Any]]  # fig3.csv's rows by (method, attack, eps)


# -- what every page shares: per-seed values, the orderings, the sentences about the runs ------
def per_seed(runs: Iterable[dict[str, Any]]) -> Values:
    """``{seed: final accuracy in %}`` of one cell's runs (each a dict with ``seed`` and ``acc``,
    as the ``collect_*`` functions give), runs without a finite accuracy left out: what the cell's
    mean ± std and every ordering through it are computed from, once."""
    return {int(r["seed"]): float(r["acc"]) for r in runs if math.isfinite(float(r["acc"]))}


def _cell_text(values: Values | None) -> str:
    """``mean ± std (n)`` of a cell, computed from its per-seed values (one rounding, at print);
    ``—`` for a cell without runs."""
    if not values:
        return "—"
    m, s = mean_std(values.values())
    return f"{m:.2f} ± {s:.2f} ({len(values)})"


def _mean(values: Values | None) -> float:
    return mean_std(values.values())[0] if values else math.nan


def decide_page(claims: list[tuple[Labels, Values, Values]]) -> list[Ordering]:
    """Decide every ordering "A above B" one page claims (``(labels, A's per-seed values, B's)``)
    by :func:`~fedgame.experiments.claims.decide`, then adjust the p-values by Holm over all of
    them: the page is one family, so the more orderings it claims the stronger each must be."""
    decisions = holm([decide(a, b) for _, a, b in claims])
    return [(lab, d) for (lab, _, _), d in zip(claims, decisions, strict=True)]


def _counted(decisions: list[Decision]) -> str:
    counts = Counter(d.verdict for d in decisions)
    said = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return f"{len(decisions)} ordering{'s' * (len(decisions) != 1)}: {said}"


def orderings_markdown(decided: list[Ordering]) -> list[str]:
    """The section of a page that lists its orderings: one line per claim with its verdict
    (:func:`~fedgame.experiments.claims.all_hold` over its orderings: a rise "holds" only where
    every step holds), then every ordering with its difference, 95 % interval, test, p
    (Holm-adjusted over the page) and verdict, then the rule in words. Empty without orderings."""
    if not decided:
        return []
    by_claim: dict[str, list[Decision]] = {}
    for lab, d in decided:
        by_claim.setdefault(lab["claim"], []).append(d)
    out = [f"- {claim}: **{all_hold(ds)}** ({_counted(ds)})" for claim, ds in by_claim.items()]
    out += ["", "| claim | A | B | " + " | ".join(("A − B (points)", *COLUMNS[1:])) + " |", "|---|---|---|" + "---|" * len(COLUMNS)]
    out += [f"| {lab['claim']} | {lab['A']} | {lab['B']} | " + " | ".join(d.cells()) + " |" for lab, d in decided]
    return out + ["", rule_note([d for _, d in decided], where="page")]


def _get(cfg: dict[str, Any], path: str) -> Any:
    """``cfg[a][b][c]`` for ``path`` ``a.b.c``; None where a key is missing."""
    cur: Any = cfg
    for k in path.split("."):
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _distinct(xs: Iterable[Any]) -> str:
    """The distinct values of ``xs`` joined by " / ", numbers by value (floats as ``%g``),
    a missing value as "not recorded"."""
    vals = {("not recorded" if x is None else x) for x in xs}

    def key(x: Any) -> tuple[int, float, str]:
        return (0, float(x), "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0.0, str(x))

    return " / ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in sorted(vals, key=key))


def _dataset(runs: list[dict[str, Any]]) -> str:
    """The runs' dataset(s), named as the papers name them (``data.dataset``)."""
    names = {_get(r["cfg"], "data.dataset") for r in runs}
    return _distinct(DATASETS.get(str(n), str(n)) if n is not None else None for n in names)


def _attack(r: dict[str, Any]) -> str:
    """What the adversary of run ``r`` did, from its config (``jdp.attack``; the target class by
    default the paper's, :data:`~fedgame.robust.DIRTY_LABEL_TARGETS`)."""
    a = _get(r["cfg"], "jdp.attack") or {}
    kind = a.get("kind", "dirty_label")
    if kind == "none":
        return "no attack"
    target = a.get("target")
    if target is None:
        target = DIRTY_LABEL_TARGETS.get(str(_get(r["cfg"], "data.dataset")), "not recorded")
    if a.get("mode", "all_to_target") == "one_class":
        return f"one dirty-label adversary (its class {a.get('source', 'not recorded')} labels → class {target})"
    return f"one {kind.replace('_', '-')} adversary (all its labels → class {target})"


def runs_line(runs: list[dict[str, Any]]) -> str:
    """The sentence a page states about its runs, every value read from their ``config.yaml``
    and ``summary.json`` (every distinct value where runs differ): how many runs over which seeds,
    the dataset, m, ε (and whether ε_E = ε_L), the attack (with its number of runs) and M3's
    sensitivity, clip C and δ."""
    seeds = sorted({int(r["seed"]) for r in runs})
    m = _distinct(r["summary"].get("m") or _get(r["cfg"], "data.partition.n_clients") for r in runs)
    eps = _distinct(_get(r["cfg"], "privacy.epsilon") if _get(r["cfg"], "privacy.kind") == "jdp" else "∞" for r in runs)
    same = all((_get(r["cfg"], "jdp.epsilon_exp") or "same") == "same" for r in runs)
    e_exp = "" if same else f", ε_E {_distinct(_get(r['cfg'], 'jdp.epsilon_exp') for r in runs)}"
    attacks = Counter(_attack(r) for r in runs)
    attack = "; ".join(f"{a} in {n} run{'s' * (n != 1)}" for a, n in sorted(attacks.items()))
    sens = {"record": "record-level sensitivity 2C/d_i", "client": "client-level sensitivity 2C"}
    sensitivity = _distinct(
        sens.get(str(s), f"sensitivity {s}") if s is not None else None for s in (_get(r["cfg"], "privacy.sensitivity") for r in runs)
    )
    clip = _distinct(_get(r["cfg"], "privacy.clip") for r in runs)
    delta = _distinct(_get(r["cfg"], "privacy.delta") for r in runs)
    return (
        f"Runs (read from their config.yaml and summary.json): {len(runs)} runs over seeds "
        f"{', '.join(map(str, seeds))}; {_dataset(runs)}; m = {m} participants; "
        f"ε = ε_L{' = ε_E' if same else ''} per round: {eps}{e_exp}; {attack}; M3 with {sensitivity}, "
        f"C = {clip}, δ = {delta} (our settings: the paper states none of them; docs/jdp.md)."
    )


#: the paper's training budget for Figs. 3-5 (Sec. VI of JDP-FL) where it states one: local lr and
#: test set; it gives no number of rounds
PAPER_BUDGET = {"lr": 0.001, "test": "the full test set"}


def budget_line(cfgs: list[dict[str, Any]]) -> str:
    """The runs' training budget, stated on the figure page itself beside the paper's where the
    paper gives one: rounds (the paper gives no round count), local learning rate and test-set
    size, from the runs' resolved configs (every distinct value when runs differ)."""
    rounds = _distinct(_get(c, "train.rounds") for c in cfgs)
    lr = _distinct(_get(c, "train.local.lr") for c in cfgs)
    test = _distinct(_get(c, "data.max_test") or "all" for c in cfgs)
    parts = [
        f"{rounds} rounds (the paper gives no round count)",
        f"local lr {lr} (paper {PAPER_BUDGET['lr']})",
        f"test accuracy on {'the full test set' if test == 'all' else test + ' test examples'} (paper {PAPER_BUDGET['test']})",
    ]
    return "Budget of these runs (from their config.yaml): " + "; ".join(parts) + "."


def _page_head(fig: str, runs: list[dict[str, Any]], budget: str, intro: str) -> list[str]:
    """The first lines every figure page shares (Figs. 3, 4 and 5): the title with the runs'
    dataset and ``budget``, the paragraph ``intro``, then :func:`runs_line` and :func:`budget_line`."""
    return [
        f"# JDP-FL {fig} on {_dataset(runs)} ({budget} budget)",
        "",
        intro,
        "",
        runs_line(runs),
        "",
        budget_line([r["cfg"] for r in runs]),
        "",
    ]


def _eps_table_head(lead: str, eps: list[float]) -> list[str]:
    """A table's header with the columns ``lead`` (e.g. ``"method | attack"``) then one column
    per ε, and its separator row."""
    return [f"| {lead} | " + " | ".join(_eps_head(e) for e in eps) + " |", "|" + "---|" * (lead.count("|") + 1 + len(eps))]


def _orderings_section(what: str, decided: list[Ordering]) -> list[str]:
    """The section listing a page's orderings ``decided`` (:func:`orderings_markdown`) under the
    heading "The paper's ``what``, decided from the per-seed accuracies"; empty without any."""
    if not decided:
        return []
    return ["", f"## The paper's {what}, decided from the per-seed accuracies", "", *orderings_markdown(decided)]


def collect_fig3(root: Path) -> dict[Key, list[dict[str, Any]]]:
    """Finished JDP runs under ``root`` grouped by (aggregator, attacked, ε), sorted by seed.
    A run is a dict with ``seed``, ``acc`` (%), ``summary``, ``cfg``, ``dir``."""
    cells: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for run in finished_runs(root):
        cfg, summary = run.cfg, run.summary
        j = cfg.get("jdp")
        if not j:
            continue
        priv = cfg.get("privacy", {})
        eps = float(priv["epsilon"]) if priv.get("kind") == "jdp" else math.inf
        key = (str(j["aggregator"]), j.get("attack", {}).get("kind", "dirty_label") != "none", eps)
        cells[key].append({"seed": run.seed, "acc": run.acc, "summary": summary, "cfg": cfg, "dir": run.dir})
    for runs in cells.values():
        runs.sort(key=lambda r: r["seed"])
    return dict(cells)


def exclusion_probability(run_dir: Path) -> float:
    """Mean over rounds of Pr[k* = adversary] — the probability M4's exponential mechanism gave
    to the one group that leaves the adversary out — read from a leave-one-out run's
    ``metrics.csv`` (``probs``) and ``jdp.json`` (winners, adversary); NaN when not applicable.
    1/m means the scores did not tell the adversary apart at all."""
    info_path, metrics = run_dir / "jdp.json", run_dir / "metrics.csv"
    if not (info_path.exists() and metrics.exists()):
        return math.nan
    info = json.loads(info_path.read_text())
    if info.get("adversary") is None or info.get("aggregator") != "leave_one_out":
        return math.nan
    pos = info["winners"].index(info["adversary"])
    with metrics.open() as f:
        ps = [json.loads(r["probs"])[pos] for r in csv.DictReader(f) if r.get("probs")]
    return float(np.mean(ps)) if ps else math.nan


def _rows(cells: dict[Key, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    order = {m: i for i, m in enumerate(METHODS)}
    for (agg, attacked, eps), runs in sorted(cells.items(), key=lambda kv: (order.get(kv[0][0], 99), not kv[0][1], kv[0][2])):
        acc = mean_std([r["acc"] for r in runs])
        last5 = mean_std([100.0 * float(r["summary"].get("last5_accuracy", math.nan)) for r in runs])
        used = [r["summary"].get("adversary_used_fraction") for r in runs]
        used_f = [float(u) for u in used if u is not None]
        excl = [exclusion_probability(r["dir"]) for r in runs]
        excl_f = [x for x in excl if np.isfinite(x)]
        rows.append(
            {
                "method": agg,
                "attack": "dirty_label" if attacked else "none",
                "epsilon": eps,
                "seeds": len(runs),
                "accuracy_mean": round(acc[0], 3),
                "accuracy_std": round(acc[1], 3),
                "last5_mean": round(last5[0], 3),
                "adversary_used_fraction": round(float(np.mean(used_f)), 3) if used_f else "",
                "p_exclude_adversary": round(float(np.mean(excl_f)), 4) if excl_f else "",
                "m": runs[0]["summary"].get("m", ""),
                "eps_paper_per_client": round(float(runs[0]["summary"].get("eps_paper_max", math.nan)), 4),
                "eps_rdp_per_client": round(float(runs[0]["summary"].get("eps_rdp_max", math.nan)), 4),
                "rounds": runs[0]["summary"].get("rounds"),
                "wall_time_mean": round(float(np.mean([r["summary"]["wall_time"] for r in runs])), 1),
            }
        )
    return rows


def _eps_head(e: float) -> str:
    return "ε = ∞" if math.isinf(e) else f"ε = {e:g}"


def _who(agg: str, attacked: bool) -> str:
    return f"{METHODS.get(agg, agg)}, {'attack' if attacked else 'no attack'}"


#: the curves of Fig. 3 the paper says rise with ε: ours and FedAvg under attack, FedAvg without
FIG3_CURVES: tuple[tuple[str, bool], ...] = (("leave_one_out", True), ("fedavg", True), ("fedavg", False))


def fig3_orderings(values: dict[Key, Values]) -> list[Ordering]:
    """The orderings of the paper's Fig. 3 (Secs. 6.2.2, 6.3) the runs can decide, from the
    cells' per-seed accuracies ``values`` (``{(rule, attacked, ε): {seed: %}}``): at each ε, no
    attack (FedAvg without attack, the paper's reference curve) above ours under attack, and ours
    above traditional (FedAvg) under attack; along each curve of :data:`FIG3_CURVES`, each ε above
    the one before. Decided and Holm-adjusted by :func:`decide_page`."""
    eps = sorted({e for _, _, e in values})
    claims: list[tuple[Labels, Values, Values]] = []
    for claim, a_key, b_key in (
        ("no attack > ours, at each ε", ("fedavg", False), ("leave_one_out", True)),
        ("ours > traditional, at each ε", ("leave_one_out", True), ("fedavg", True)),
    ):
        for e in eps:
            va, vb = values.get((*a_key, e)), values.get((*b_key, e))
            if va and vb:
                claims.append(({"claim": claim, "A": f"{_who(*a_key)}, {_eps_head(e)}", "B": f"{_who(*b_key)}, {_eps_head(e)}"}, va, vb))
    for agg, attacked in FIG3_CURVES:
        pts = [(e, v) for e in eps if (v := values.get((agg, attacked, e)))]
        for (e0, v0), (e1, v1) in zip(pts, pts[1:]):
            claims.append(({"claim": f"{_who(agg, attacked)}: rises with ε", "A": _eps_head(e1), "B": _eps_head(e0)}, v1, v0))
    return decide_page(claims)


def _fig3_cell(values: dict[Key, Values], m: str, a: str, e: float) -> Values | None:
    """The per-seed accuracies of rule ``m`` under attack ``a`` (``dirty_label`` or ``none``) at ε ``e``."""
    return values.get((m, a == "dirty_label", e))


def _markdown(
    rows: list[dict[str, Any]], budget: str, drawn: bool, runs: list[dict[str, Any]], values: dict[Key, Values], decided: list[Ordering]
) -> str:
    """fig3.md: every accuracy and cost from the per-seed ``values``, every sentence about the
    runs from ``runs``' configs and summaries, the orderings ``decided`` (:func:`fig3_orderings`)."""
    by = {(r["method"], r["attack"], float(r["epsilon"])): r for r in rows}
    eps = sorted({float(r["epsilon"]) for r in rows})
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    intro = (
        "Final test accuracy (%) of the server's model θ^T, mean ± std over seeds (number of seeds), per server rule, "
        "under the attack where the row says so. The paper's Fig. 3a is MNIST and gives no numbers, only the ordering "
        "no attack > ours > traditional and the attack's cost: 4–5 % for the traditional method, 1–2 % for ours."
    )
    lines = [
        *_page_head("Fig. 3", runs, budget, intro),
        *_fig3_accuracy_table(by, eps, methods, values),
        *_fig3_attack_cost(eps, methods, values),
        *_fig3_adversary_used(rows, by, eps, methods),
        *_fig3_exclusion(by, eps),
        *_orderings_section("orderings (Secs. 6.2.2, 6.3)", decided),
        *_fig3_ledger(by, eps),
    ]
    if drawn:
        lines += ["", "![Fig. 3](fig3.png)"]
    return "\n".join(lines) + "\n"


def _fig3_accuracy_table(by: ByCell, eps: list[float], methods: list[str], values: dict[Key, Values]) -> list[str]:
    """Fig. 3 in the paper's layout: final accuracy mean ± std (seeds) per rule and attack (rows)
    and ε (columns), each cell from its per-seed values."""
    lines = _eps_table_head("method | attack", eps)
    for m in methods:
        for a in ("dirty_label", "none"):
            if any((m, a, e) in by for e in eps):
                cells = " | ".join(_cell_text(_fig3_cell(values, m, a, e)) for e in eps)
                lines.append(f"| {METHODS[m]} | {'yes' if a == 'dirty_label' else 'no'} | " + cells + " |")
    return lines


def _fig3_attack_cost(eps: list[float], methods: list[str], values: dict[Key, Values]) -> list[str]:
    """The attack's cost per rule and ε (Sec. 6.3): own (no attack − attack) and the paper's reading
    (FedAvg without attack − attack), beside the paper's 4–5 (traditional) and 1–2 (ours) points."""
    lines = [
        "",
        "## The attack's cost (accuracy points)",
        "",
        "*own*: the method without attack minus the method under attack; *paper's reading*: FedAvg without "
        "attack (the paper's reference curve) minus the method under attack; differences of the means over seeds. "
        "Paper: traditional 4–5, ours 1–2. The paper's reading for ours is the difference of the ordering "
        '"no attack > ours" below, where its 95 % interval is printed.',
        "",
        "| method | " + " | ".join(f"{_eps_head(e)} own / paper's reading" for e in eps) + " | paper |",
        "|---|" + "---|" * len(eps) + "---|",
    ]
    for m in methods:
        cells = []
        for e in eps:
            att = _mean(_fig3_cell(values, m, "dirty_label", e))
            own, ref = _mean(_fig3_cell(values, m, "none", e)), _mean(_fig3_cell(values, "fedavg", "none", e))
            own_s = f"{own - att:+.2f}" if np.isfinite(own) else "—"
            ref_s = f"{ref - att:+.2f}" if np.isfinite(ref) else "—"
            cells.append(f"{own_s} / {ref_s}" if np.isfinite(att) else "—")
        paper = PAPER_ATTACK_COST.get(m)
        lines.append(f"| {METHODS[m]} | " + " | ".join(cells) + f" | {f'{paper[0]:g}–{paper[1]:g}' if paper else '—'} |")
    return lines


def _fig3_adversary_used(rows: list[dict[str, Any]], by: ByCell, eps: list[float], methods: list[str]) -> list[str]:
    """How often the server's model used the adversary's upload under attack, per rule and ε
    (mean over seeds); empty where no row records it."""
    if not any(r["attack"] == "dirty_label" and r["adversary_used_fraction"] != "" for r in rows):
        return []
    lines = [
        "",
        "## How often the server's model used the adversary's upload",
        "",
        "Fraction of rounds (mean over seeds). Leave-one-out always uses m − 1 of m uploads; it leaves the "
        "adversary out when k* is the adversary.",
        "",
        *_eps_table_head("method", eps),
    ]
    for m in methods:
        used = (str(by[(m, "dirty_label", e)]["adversary_used_fraction"]) if (m, "dirty_label", e) in by else "—" for e in eps)
        lines.append(f"| {METHODS[m]} | " + " | ".join(used) + " |")
    return lines


def _loo_attacked(by: ByCell, eps: list[float]) -> list[tuple[float, dict[str, Any]]]:
    """The rows of ours (leave-one-out) under attack, with their ε, in ε order."""
    return [(e, r) for e in eps if (r := by.get(("leave_one_out", "dirty_label", e))) is not None]


def _fig3_exclusion(by: ByCell, eps: list[float]) -> list[str]:
    """Does M4 find the adversary: Pr[k* = adversary] of ours under attack per ε beside the
    uniform 1/m; empty where no leave-one-out run records it."""
    loo = [(e, r) for e, r in _loo_attacked(by, eps) if r["p_exclude_adversary"] != ""]
    if not loo:
        return []
    lines = [
        "",
        "## Does M4 find the adversary?",
        "",
        "Pr[k* = adversary]: the probability the exponential mechanism gave to the one leave-one-out "
        "group without the adversary, mean over rounds and seeds; 1/m (uniform) means the validation "
        "scores, at Δy = 1/(m − 1) and this ε_E, did not tell it apart.",
        "",
        "| ε | Pr[k* = adversary] | uniform 1/m |",
        "|---|---|---|",
    ]
    return lines + [
        f"| {e:g} | {r['p_exclude_adversary']} | {1 / float(r['m']):.3f} |" if r["m"] else f"| {e:g} | {r['p_exclude_adversary']} | — |"
        for e, r in loo
    ]


def _fig3_ledger(by: ByCell, eps: list[float]) -> list[str]:
    """Each winner's privacy after T rounds of ours per ε: the paper's T(ε_L + ε_E) beside the RDP
    account of M3 plus T ε_E; empty without a leave-one-out row under attack."""
    led = _loo_attacked(by, eps)
    if not led:
        return []
    return [
        "",
        "## Each winner's privacy after T rounds (ours)",
        "",
        "| ε | rounds T | paper: T(ε_L + ε_E) at Tδ | RDP of M3 + T ε_E at Tδ |",
        "|---|---|---|---|",
        *(f"| {e:g} | {r['rounds']} | {r['eps_paper_per_client']:g} | {r['eps_rdp_per_client']:g} |" for e, r in led),
    ]


def _plot(rows: list[dict[str, Any]], path: Path, runs: list[dict[str, Any]]) -> bool:
    """fig3.png: accuracy against ε per method, under attack (solid) and without (dashed), the
    title's dataset and m read from ``runs``; False (nothing drawn) without a finite ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = sorted({float(r["epsilon"]) for r in rows if math.isfinite(float(r["epsilon"]))})
    if len(eps) < 1:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, m in enumerate(m for m in METHODS if any(r["method"] == m for r in rows)):
        for a, style in (("dirty_label", "-"), ("none", "--")):
            pts = [
                (float(r["epsilon"]), r["accuracy_mean"], r["accuracy_std"])
                for r in rows
                if r["method"] == m and r["attack"] == a and math.isfinite(float(r["epsilon"]))
            ]
            if not pts:
                continue
            pts.sort()
            x, y, s = (np.array(v, dtype=float) for v in zip(*pts))
            ax.errorbar(
                x, y, yerr=s, fmt=style + "o", color=f"C{i}", ms=3, capsize=2, label=f"{METHODS[m]}{' (no attack)' if a == 'none' else ''}"
            )
    ax.set_xscale("log")
    ax.set_xlabel("ε (= ε_L = ε_E per round)")
    ax.set_ylabel("final test accuracy (%)")
    m = _distinct(r["summary"].get("m") or _get(r["cfg"], "data.partition.n_clients") for r in runs)
    ax.set_title(f"JDP-FL Fig. 3 on {_dataset(runs)}, m = {m}, one dirty-label adversary")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_fig3(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Write fig3.csv, fig3.md, orderings.csv, fig3.png and configs/ for the runs under ``root``;
    return the rows."""
    cells = collect_fig3(root)
    if not cells:
        raise ValueError(f"runs: no finished JDP-FL run (summary.json with a jdp section) under {root}")
    rows = _rows(cells)
    values = {key: per_seed(runs) for key, runs in cells.items()}
    decided = fig3_orderings(values)
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "fig3.csv", rows, empty_header=["method"])
    write_orderings(dest / ORDERINGS, decided)
    runs = [r for rs in cells.values() for r in rs]
    drawn = _plot(rows, dest / "fig3.png", runs)
    md = _markdown(rows, budget, drawn, runs, values, decided)
    atomic_write_text(dest / "fig3.md", md + "\n" + code_note(r["dir"] for r in runs) + "\n")
    copy_configs(cells.values(), dest, root=root)
    return rows


# -- Fig. 5: accuracy against the group size ------------------------------------------------
def collect_fig5(root: Path) -> dict[int, list[dict[str, Any]]]:
    """Finished random-group and leave-one-out runs under ``root`` by group size s
    (leave-one-out: s = m − 1), each cell sorted by seed."""
    cells: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run in finished_runs(root):
        cfg, summary = run.cfg, run.summary
        j = cfg.get("jdp") or {}
        if j.get("aggregator") not in ("random_groups", "leave_one_out"):
            continue
        m = int(summary.get("m", cfg["data"]["partition"]["n_clients"]))
        s = int(j["group_size"]) if j["aggregator"] == "random_groups" else m - 1
        cells[s].append(
            {"seed": run.seed, "acc": run.acc, "summary": summary, "cfg": cfg, "dir": run.dir, "loo": j["aggregator"] == "leave_one_out"}
        )
    for runs in cells.values():
        runs.sort(key=lambda r: r["seed"])
    return dict(cells)


def fig5_orderings(values: dict[int, Values], loo: list[int]) -> list[Ordering]:
    """The paper's Fig. 5 claims (Sec. 6.2.5) from the per-seed accuracies ``values``
    (``{s: {seed: %}}``; ``loo``: the sizes that are leave-one-out cells, the first of which the
    groups are compared with): accuracy rises with the group size s (each random-group size above
    the one before) and stays below leave-one-out (leave-one-out above each group size). Decided
    and Holm-adjusted by :func:`decide_page`."""
    groups = sorted(s for s in values if s not in loo)
    claims: list[tuple[Labels, Values, Values]] = [
        ({"claim": "random groups: rises with s", "A": f"s = {s1}", "B": f"s = {s0}"}, values[s1], values[s0])
        for s0, s1 in zip(groups, groups[1:])
    ]
    if loo:
        top = loo[0]
        claims += [
            (
                {"claim": "leave-one-out above every group size", "A": f"leave-one-out (s = {top})", "B": f"random groups, s = {s}"},
                values[top],
                values[s],
            )
            for s in groups
        ]
    return decide_page(claims)


def _finish(fig: Any, dest: Path, name: str, title: str, lines: list[str], cells: Any, root: Path) -> None:
    """Save ``fig`` as ``<name>.png``, write ``<name>.md`` (``lines`` and the figure) and copy
    the configs of the runs behind ``cells``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(dest / f"{name}.png", dpi=110)
    plt.close(fig)
    note = code_note(r["dir"] for runs in cells for r in runs)
    atomic_write_text(dest / f"{name}.md", "\n".join([*lines, "", note, "", f"![{title}]({name}.png)"]) + "\n")
    copy_configs(cells, dest, root=root)


def _accuracy_curve(ax: Any, pts: Sequence[tuple[float, dict[str, Any]]], label: str) -> None:
    """One curve of final accuracy (mean ± std over seeds) on ``ax`` through ``pts``, each an
    x value and its row (Figs. 4a, 4c and 5)."""
    ax.errorbar(
        [x for x, _ in pts],
        [r["accuracy_mean"] for _, r in pts],
        yerr=[r["accuracy_std"] for _, r in pts],
        fmt="-o",
        ms=3,
        capsize=2,
        label=label,
    )


def write_fig5(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Fig. 5 (Sec. 6.2.5): accuracy against the group size s with one adversary; the paper's
    claims (rises with s, stays below leave-one-out) decided from the per-seed accuracies
    (:func:`fig5_orderings`). Writes fig5.csv, fig5.md, orderings.csv, fig5.png and configs/."""
    cells = collect_fig5(root)
    if not cells:
        raise ValueError(f"runs: no finished random-group or leave-one-out JDP-FL run under {root}")
    values = {s: per_seed(runs) for s, runs in cells.items()}
    rows: list[dict[str, Any]] = []
    for s in sorted(cells):
        runs = cells[s]
        acc = mean_std(values[s].values())
        rows.append(
            {
                "group_size": s,
                "rule": "leave_one_out" if runs[0]["loo"] else "random_groups",
                "seeds": len(runs),
                "accuracy_mean": round(acc[0], 3),
                "accuracy_std": round(acc[1], 3),
                "adversary_used_fraction": round(float(np.mean([r["summary"].get("adversary_used_fraction") or 0.0 for r in runs])), 3),
            }
        )
    decided = fig5_orderings(values, [r["group_size"] for r in rows if r["rule"] == "leave_one_out"])
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "fig5.csv", rows, empty_header=["group_size"])
    write_orderings(dest / ORDERINGS, decided)
    groups = [r for r in rows if r["rule"] == "random_groups"]
    loo = [r for r in rows if r["rule"] == "leave_one_out"]
    runs_all = [r for rs in cells.values() for r in rs]
    intro = (
        "Final test accuracy (%) against the group size s of the random-group strategy (a fresh random "
        "partition into m/s groups each round, g* by the exponential mechanism with Δy = 1/s), beside "
        "leave-one-out (s = m − 1); mean ± std over seeds (number of seeds). Paper: accuracy rises with s "
        "and stays below leave-one-out."
    )
    lines = [
        *_page_head("Fig. 5", runs_all, budget, intro),
        "| rule | s | accuracy | rounds whose model used the adversary |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {METHODS[r['rule']]} | {r['group_size']} | {_cell_text(values[r['group_size']])} | {r['adversary_used_fraction']} |"
        for r in rows
    ]
    lines += _orderings_section("claims (Sec. 6.2.5)", decided)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    if groups:
        _accuracy_curve(ax, [(r["group_size"], r) for r in groups], "random groups")
    for r in loo:
        ax.axhline(r["accuracy_mean"], ls="--", color="C1", label=f"leave-one-out (s = {r['group_size']})")
    ax.set_xlabel("group size s")
    ax.set_ylabel("final test accuracy (%)")
    ax.legend(fontsize=8)
    _finish(fig, dest, "fig5", "Fig. 5", lines, cells.values(), root)
    return rows


# -- Fig. 4: accuracy against the number of participants m and eps ---------------------------
def collect_fig4(root: Path) -> dict[tuple[int, float], list[dict[str, Any]]]:
    """Finished leave-one-out runs under attack under ``root`` by (m, ε), sorted by seed."""
    cells: dict[tuple[int, float], list[dict[str, Any]]] = defaultdict(list)
    for (agg, attacked, eps), runs in collect_fig3(root).items():
        if agg != "leave_one_out" or not attacked:
            continue
        for r in runs:
            m = int(r["summary"].get("m") or r["cfg"]["data"]["partition"]["n_clients"])
            cells[(m, eps)].append(r)
    for runs in cells.values():
        runs.sort(key=lambda r: r["seed"])
    return dict(cells)


def fig4_orderings(values: dict[tuple[int, float], Values]) -> list[Ordering]:
    """The paper's Fig. 4 claims (Secs. 6.2.3-6.2.4) from the per-seed accuracies ``values``
    (``{(m, ε): {seed: %}}``): for each m with two or more ε, accuracy rises with ε (each ε above
    the one before, 4a); for each ε with three or more m, it rises with m (each m above the one
    before, 4c, the paper's MNIST claim). Decided and Holm-adjusted by :func:`decide_page`."""
    ms = sorted({m for m, _ in values})
    epss = sorted({e for _, e in values})
    claims: list[tuple[Labels, Values, Values]] = []
    for m in ms:
        pts = [(e, values[(m, e)]) for e in epss if (m, e) in values]
        if len(pts) >= 2:
            claims += [
                ({"claim": f"m = {m}: rises with ε", "A": _eps_head(e1), "B": _eps_head(e0)}, v1, v0)
                for (e0, v0), (e1, v1) in zip(pts, pts[1:])
            ]
    for e in epss:
        pts_m = [(m, values[(m, e)]) for m in ms if (m, e) in values]
        if len(pts_m) >= 3:
            claims += [
                ({"claim": f"{_eps_head(e)}: rises with m (the paper's MNIST claim)", "A": f"m = {m1}", "B": f"m = {m0}"}, v1, v0)
                for (m0, v0), (m1, v1) in zip(pts_m, pts_m[1:])
            ]
    return decide_page(claims)


def write_fig4(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Fig. 4 (Secs. 6.2.3-6.2.4): ours under attack, final accuracy against ε for several m
    (4a) and against m at each ε with three or more m (4c), with Pr[k* = adversary] beside the
    uniform 1/m; the paper's claims (accuracy rises with ε; on MNIST it rises with m) decided
    from the per-seed accuracies (:func:`fig4_orderings`). Writes fig4.csv, fig4.md,
    orderings.csv, fig4.png and configs/."""
    cells = collect_fig4(root)
    if not cells:
        raise ValueError(f"runs: no finished leave-one-out JDP-FL run under attack under {root}")
    values = {key: per_seed(runs) for key, runs in cells.items()}
    rows, excl_by = _fig4_rows(cells, values)
    decided = fig4_orderings(values)
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "fig4.csv", rows, empty_header=["m"])
    write_orderings(dest / ORDERINGS, decided)
    lines = _fig4_lines(rows, values, excl_by, [r for rs in cells.values() for r in rs], budget, decided)
    _finish(_fig4_plot(rows), dest, "fig4", "Fig. 4", lines, cells.values(), root)
    return rows


def _fig4_rows(
    cells: dict[tuple[int, float], list[dict[str, Any]]], values: dict[tuple[int, float], Values]
) -> tuple[list[dict[str, Any]], dict[tuple[int, float], float]]:
    """fig4.csv's rows, one per (m, ε) in order: accuracy mean ± std over seeds, Pr[k* = adversary]
    beside 1/m, how often the adversary's upload was used, the paper's ε per client and the wall
    time; and Pr[k* = adversary] by (m, ε) unrounded (NaN where no run records it), for the page."""
    excl_by: dict[tuple[int, float], float] = {}
    rows: list[dict[str, Any]] = []
    for m, eps in sorted(cells):
        runs = cells[(m, eps)]
        acc = mean_std(values[(m, eps)].values())
        excl = [x for x in (exclusion_probability(r["dir"]) for r in runs) if np.isfinite(x)]
        excl_by[(m, eps)] = float(np.mean(excl)) if excl else math.nan
        rows.append(
            {
                "m": m,
                "epsilon": eps,
                "seeds": len(runs),
                "accuracy_mean": round(acc[0], 3),
                "accuracy_std": round(acc[1], 3),
                "p_exclude_adversary": round(excl_by[(m, eps)], 4) if excl else "",
                "uniform": round(1.0 / m, 4),
                "adversary_used_fraction": round(float(np.mean([r["summary"].get("adversary_used_fraction") or 0.0 for r in runs])), 3),
                "eps_paper_per_client": round(float(runs[0]["summary"].get("eps_paper_max", math.nan)), 4),
                "wall_time_mean": round(float(np.mean([r["summary"]["wall_time"] for r in runs])), 1),
            }
        )
    return rows, excl_by


def _fig4_lines(
    rows: list[dict[str, Any]],
    values: dict[tuple[int, float], Values],
    excl_by: dict[tuple[int, float], float],
    runs: list[dict[str, Any]],
    budget: str,
    decided: list[Ordering],
) -> list[str]:
    """fig4.md's lines (the figure and the code note are added by :func:`_finish`): accuracy by m
    and ε (Fig. 4a/4c), Pr[k* = adversary] beside 1/m, and the paper's claims decided."""
    ms = sorted({r["m"] for r in rows})
    epss = sorted({r["epsilon"] for r in rows})
    intro = (
        "Ours (leave-one-out M4 + M5) under attack: final test accuracy (%), mean ± std over "
        "seeds (number of seeds), by the number of participants m (rows) and ε = ε_L = ε_E (columns). "
        "Paper (Fig. 4a/4c, MNIST): accuracy rises with ε, and with m."
    )
    return [
        *_page_head("Fig. 4", runs, budget, intro),
        *_eps_table_head("m", epss),
        *(f"| {m} | " + " | ".join(_cell_text(values.get((m, e))) for e in epss) + " |" for m in ms),
        "",
        "Pr[k* = the group without the adversary] (mean over rounds and seeds) beside uniform 1/m:",
        "",
        *_eps_table_head("m", epss),
        *(f"| {m} | " + " | ".join(_exclusion_text(excl_by.get((m, e), math.nan), m) for e in epss) + " |" for m in ms),
        *_orderings_section("claims (Secs. 6.2.3-6.2.4)", decided),
    ]


def _exclusion_text(p: float, m: int) -> str:
    """A cell of Fig. 4's Pr[k* = adversary] table: ``p`` beside the uniform 1/m, ``—`` if not finite."""
    return "—" if not math.isfinite(p) else f"{p:.3f} (1/m = {1 / m:.3f})"


def _fig4_plot(rows: list[dict[str, Any]]) -> Any:
    """fig4.png's figure: (a) accuracy against ε, one curve per m with two or more ε; (c) accuracy
    against m, one curve per ε with three or more m."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = sorted({r["m"] for r in rows})
    epss = sorted({r["epsilon"] for r in rows})
    by = {(r["m"], r["epsilon"]): r for r in rows}
    fig, (ax_e, ax_m) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    for m in ms:
        pts = [(e, by[(m, e)]) for e in epss if (m, e) in by]
        if len(pts) >= 2:
            _accuracy_curve(ax_e, pts, f"m = {m}")
    ax_e.set_xscale("log")
    ax_e.set_xlabel("ε")
    ax_e.set_ylabel("final test accuracy (%)")
    ax_e.set_title("(a) accuracy vs ε", fontsize=9)
    if ax_e.has_data():
        ax_e.legend(fontsize=8)
    for e in epss:
        pts = [(m, by[(m, e)]) for m in ms if (m, e) in by]
        if len(pts) >= 3:
            _accuracy_curve(ax_m, pts, _eps_head(e))
    ax_m.set_xlabel("number of participants m")
    ax_m.set_title("(c) accuracy vs m", fontsize=9)
    if ax_m.has_data():
        ax_m.legend(fontsize=8)
    return fig
