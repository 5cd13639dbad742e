"""PHS Tables III (MNIST) and IV (Fashion-MNIST): our accuracies beside the paper's, and Fig. 3.

``fedgame report RUNS --kind table4 --out results/... --budget reduced`` reads every
finished run under RUNS (``summary.json`` + ``config.yaml``; ``metrics.csv``, ``privacy.csv`` and
``phs.json`` for the figures), groups them by (mechanism P/U/B, similarity s, dataset) and
writes into ``--dest``:

- ``table4.csv``: one row per cell — ours mean ± std over seeds (%), the paper's value (Table III
  for MNIST, IV for Fashion-MNIST), the difference, and the tight ε really spent (PLD, RDP) as a
  fraction of the budget ε_k (mean and max over clients, each averaged over seeds);
- ``table4.md``: the paper's layout (rows P/U/B, columns s = 100, 70, 30, 0; "ours / paper" per
  cell), the ε-spent table, and the orderings the paper claims (P > U and P > B at every s),
  each decided from the per-seed accuracies by :func:`~fedgame.experiments.claims.decide`
  (paired by seed), p Holm-adjusted over the page's orderings (:func:`table_orderings`);
- ``orderings.csv``: those orderings, one row each (:data:`~fedgame.experiments.claims.ORDERINGS`),
  which the reproduction page quotes rather than deciding again;
- ``fig4_accuracy_<dataset>.png`` (accuracy vs round, one panel per s), ``fig3_selection.png``
  (Problem 1's p* at two η and p^u, from one privacy-aware run's ``phs.json``),
  ``privacy_spent.png`` (ε spent by PLD and by the paper's forward map vs ε_k, one run per
  mechanism), and ``configs/`` (the configs that produced the cells).

``fedgame report RUNS --kind phs-fig5 --out results/... --budget reduced`` instead
groups the runs by (mechanism, local batch size B) — a grid over ``train.local.batch_size`` at one
s, e.g. ``scripts/phs_fig5.sh`` — and writes Fig. 5 (:func:`write_fig5`): ``fig5_batch.png``
(final test accuracy vs B, mean ± std over seeds), ``fig5.csv``, ``fig5.md`` (the table and the
paper's two claims, P above U and B at every B and accuracy rising with B, each decided ordering
by ordering by the same rule and read with :func:`~fedgame.experiments.claims.all_hold`) and
``orderings.csv`` (:func:`fig5_orderings`).

``fedgame report RUNS --kind phs-tight`` sets the privacy-aware mechanism under the paper's
calibration against the tight one (:func:`write_tight`): ``tight_vs_paper.csv`` / ``.md`` and
``orderings.csv`` (tight above paper, by the same rule).

No page here says "holds" of anything but a verdict of
:func:`~fedgame.experiments.claims.decide`: means alone, or means and standard deviations, decide
nothing.

Runs are recognised by their recipe name (``phs_privacy_aware``, ``phs_unbiased``, ``phs_biased``,
and ``phs_central_dp``, the central DP-FedAvg row beside them, before any ``[grid]`` suffix) on a
``similarity`` partition.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fedgame.experiments.claims import COLUMNS, ORDERINGS, Decision, all_hold, decide, holm, rule_note, write_orderings
from fedgame.pipeline.store import atomic_write_text, read_metrics
from fedgame.experiments.table2 import copy_configs, write_rows_csv
from fedgame.pipeline.results import code_note, finished_runs, mean_std

__all__ = [
    "MECHANISMS",
    "PAPER_TABLE3_MNIST",
    "PAPER_TABLE4_FMNIST",
    "S_COLUMNS",
    "collect",
    "collect_batch",
    "fig5_ordering",
    "fig5_orderings",
    "fig5_rises",
    "paper_value",
    "per_seed",
    "table_orderings",
    "tight_ordering",
    "write_fig5",
    "write_table4",
    "write_tight",
]

log = logging.getLogger(__name__)

#: the paper's columns: similarity s (100 = IID)
S_COLUMNS: tuple[float, ...] = (100.0, 70.0, 30.0, 0.0)

#: Table III of the PHS paper (Sec. VI-C), MNIST test accuracy in %: mechanism → s → value.
PAPER_TABLE3_MNIST: dict[str, dict[float, float]] = {
    "P": {100.0: 68.71, 70.0: 65.12, 30.0: 68.50, 0.0: 67.63},
    "U": {100.0: 28.02, 70.0: 14.69, 30.0: 17.94, 0.0: 14.92},
    "B": {100.0: 32.73, 70.0: 35.42, 30.0: 16.98, 0.0: 18.55},
}

#: Table IV of the PHS paper (Sec. VI-C), Fashion-MNIST test accuracy in %.
PAPER_TABLE4_FMNIST: dict[str, dict[float, float]] = {
    "P": {100.0: 53.53, 70.0: 55.26, 30.0: 54.80, 0.0: 48.94},
    "U": {100.0: 14.68, 70.0: 16.47, 30.0: 16.27, 0.0: 10.69},
    "B": {100.0: 23.63, 70.0: 20.95, 30.0: 15.39, 0.0: 20.37},
}

#: dataset → (paper table number, its values, display name)
PAPER_TABLES: dict[str, tuple[str, dict[str, dict[float, float]], str]] = {
    "mnist": ("III", PAPER_TABLE3_MNIST, "MNIST"),
    "fashion_mnist": ("IV", PAPER_TABLE4_FMNIST, "FashionMNIST"),
}

#: recipe name (before any "[grid]" suffix) → mechanism code
MECHANISMS = {"phs_privacy_aware": "P", "phs_unbiased": "U", "phs_biased": "B", "phs_central_dp": "C"}
LABELS = {"P": "Privacy-aware", "U": "Unbiased", "B": "Biased", "C": "Central DP-FedAvg"}
ORDER = ("P", "U", "B", "C")
#: the paper's three mechanisms; C (central DP-FedAvg, recipes/phs/central_dp.yaml) is the field's
#: standard baseline beside them, not in the paper: a row where it has runs, in no claim
PAPER_MECHANISMS = ("P", "U", "B")
COLOURS = {"P": "tab:blue", "U": "tab:orange", "B": "tab:green", "C": "tab:red"}
SPENT_KEYS = ("eps_pld_over_budget_mean", "eps_pld_over_budget_max", "eps_rdp_over_budget_mean", "eps_rdp_over_budget_max")

Cells = dict[tuple[str, float, str], list[dict[str, Any]]]
BatchCells = dict[tuple[str, int], list[dict[str, Any]]]
#: one ordering a page decided: the labels that name it (columns of orderings.csv) and its decision
Decided = list[tuple[dict[str, Any], Decision]]
K = TypeVar("K", bound=Hashable)

#: the orderings Tables III and IV claim at every s: (A, B) for "A above B"
TABLE_CLAIMS: tuple[tuple[str, str], ...] = (("P", "U"), ("P", "B"))
#: the two claims of the paper's Fig. 5 (the ``claim`` column of its orderings.csv)
FIG5_ABOVE = "P above U and B"
FIG5_RISES = "rises with B"


def paper_value(dataset: str, mechanism: str, s: float) -> float:
    """The paper's accuracy (%) for a cell, NaN if the paper has none."""
    table = PAPER_TABLES.get(dataset)
    return float(table[1].get(mechanism, {}).get(float(s), math.nan)) if table else math.nan


def _phs_runs(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every finished PHS run under ``root`` as (mechanism P/U/B, run), in path order. A run is
    a dict with ``seed``, ``acc`` (final test accuracy in %), ``summary``, ``cfg`` and ``dir``."""
    out: list[tuple[str, dict[str, Any]]] = []
    for run in finished_runs(root):
        cfg = run.cfg
        mech = MECHANISMS.get(run.name)
        if mech is None or cfg.get("data", {}).get("partition", {}).get("kind") != "similarity":
            continue
        out.append((mech, {"seed": run.seed, "acc": run.acc, "summary": run.summary, "cfg": cfg, "dir": run.dir}))
    return out


def _similarity(run: dict[str, Any]) -> float:
    return float(run["cfg"]["data"]["partition"]["s"])


def _dataset(run: dict[str, Any]) -> str:
    return str(run["cfg"]["data"].get("dataset", "fashion_mnist"))


def collect(root: Path) -> Cells:
    """Finished runs under ``root`` grouped by (mechanism P/U/B, s, dataset), each cell's runs
    sorted by seed. A run is a dict with ``seed``, ``acc`` (final test accuracy in %),
    ``summary``, ``cfg`` and ``dir``."""
    cells: Cells = defaultdict(list)
    for mech, run in _phs_runs(root):
        cells[(mech, _similarity(run), _dataset(run))].append(run)
    for runs in cells.values():
        runs.sort(key=lambda r: r["seed"])
    return dict(cells)


def collect_batch(root: Path) -> BatchCells:
    """Finished runs under ``root`` grouped by (mechanism P/U/B, ``train.local.batch_size``) for
    Fig. 5, each cell's runs sorted by seed (runs as in :func:`collect`).

    Raises ``ValueError`` if the runs mix similarities s or datasets: Fig. 5 is read at one s
    (30 in the paper) on one dataset, and averaging across them would hide that."""
    cells: BatchCells = defaultdict(list)
    settings: set[tuple[str, float | int]] = set()
    for mech, run in _phs_runs(root):
        cells[(mech, int(run["cfg"]["train"]["local"]["batch_size"]))].append(run)
        settings.add((_dataset(run), _num(_similarity(run))))
    if len(settings) > 1:
        shown = ", ".join(f"{d} s={s}" for d, s in sorted(settings))
        raise ValueError(f"fig5: the runs under {root} mix {shown}; give a folder holding one s and one dataset")
    for runs in cells.values():
        runs.sort(key=lambda r: r["seed"])
    return dict(cells)


def per_seed(cells: Mapping[K, list[dict[str, Any]]]) -> dict[K, dict[int, float]]:
    """``{cell: {seed: final accuracy in %}}`` of a writer's cells (runs as :func:`collect` gives
    them): what every ordering on these pages is decided from, paired by seed where two cells
    share seeds (the same seed: the same partition, draws and initial model). A run without a
    finite accuracy is left out and a cell left empty is dropped, so that no ordering is decided
    from a missing number. Two runs of one cell with the same seed are refused, naming both:
    one would silently replace the other in the pairing."""
    out: dict[K, dict[int, float]] = {}
    for key, runs in cells.items():
        values: dict[int, float] = {}
        where: dict[int, Path] = {}
        for r in runs:
            seed, acc = int(r["seed"]), float(r["acc"])
            if not math.isfinite(acc):
                continue
            if seed in values:
                raise ValueError(
                    f"runs: two runs of cell {key} with seed {seed} ({where[seed]} and {r['dir']}); "
                    "give a folder holding one run per cell and seed"
                )
            values[seed], where[seed] = acc, Path(r["dir"])
        if values:
            out[key] = values
    return out


def _columns(s_values: Iterable[float]) -> list[float]:
    """The similarity columns of a table in the paper's order (100, 70, 30, 0), any other s the
    runs have after them, largest first."""
    extra = sorted({float(s) for s in s_values if float(s) not in S_COLUMNS}, reverse=True)
    return [*S_COLUMNS, *extra]


def _holm_page(found: list[dict[str, Any]], decisions: list[Decision]) -> Decided:
    """``found`` labels beside their decisions after Holm's adjustment over all of them: the
    family is every ordering one page decides."""
    return list(zip(found, holm(decisions), strict=True))


def table_orderings(values: dict[tuple[str, float, str], dict[int, float]]) -> Decided:
    """The orderings Tables III/IV claim (:data:`TABLE_CLAIMS`: P above U, P above B) at every s
    where both cells have runs, per dataset, from the cells' per-seed accuracies ``values``
    (``{(mechanism, s, dataset): {seed: accuracy in %}}``, as :func:`per_seed` gives), each
    decided by :func:`~fedgame.experiments.claims.decide` and p Holm-adjusted over every
    ordering of the page: (labels table, dataset, s, a, b; decision), in the page's order."""
    found: list[dict[str, Any]] = []
    decisions: list[Decision] = []
    for dataset in sorted({k[2] for k in values}):
        present = {k[1] for k in values if k[2] == dataset}
        for s in (c for c in _columns(present) if c in present):
            for a, b in TABLE_CLAIMS:
                va, vb = values.get((a, s, dataset)), values.get((b, s, dataset))
                if va is None or vb is None:
                    continue
                found.append({"table": PAPER_TABLES.get(dataset, ("",))[0], "dataset": dataset, "s": _num(s), "a": a, "b": b})
                decisions.append(decide(va, vb))
    return _holm_page(found, decisions)


def fig5_orderings(values: dict[tuple[str, int], dict[int, float]]) -> Decided:
    """The orderings behind the paper's two Fig. 5 claims, from the per-seed accuracies
    ``values`` (``{(mechanism, B): {seed: accuracy in %}}``, as :func:`per_seed` gives): P above U
    and P above B at every B where both have runs (claim :data:`FIG5_ABOVE`), and, per mechanism,
    the accuracy at each B above that at the next smaller B it has runs at (claim
    :data:`FIG5_RISES`); each decided by :func:`~fedgame.experiments.claims.decide`, p
    Holm-adjusted over every ordering of the page. Labels: claim, a, batch_a, b, batch_b."""
    batches = sorted({b for _, b in values})
    found: list[dict[str, Any]] = []
    decisions: list[Decision] = []
    for b in batches:
        for other in ("U", "B"):
            if ("P", b) in values and (other, b) in values:
                found.append({"claim": FIG5_ABOVE, "a": "P", "batch_a": b, "b": other, "batch_b": b})
                decisions.append(decide(values[("P", b)], values[(other, b)]))
    for m in ORDER:
        pts = [b for b in batches if (m, b) in values]
        for b0, b1 in zip(pts, pts[1:]):
            found.append({"claim": FIG5_RISES, "a": m, "batch_a": b1, "b": m, "batch_b": b0})
            decisions.append(decide(values[(m, b1)], values[(m, b0)]))
    return _holm_page(found, decisions)


def tight_ordering(values: Mapping[str, dict[int, float]], s: float | int) -> Decided:
    """ "Tight calibration above the paper's" from the per-seed accuracies ``values`` (recipe name
    → ``{seed: accuracy in %}``), decided by :func:`~fedgame.experiments.claims.decide` (paired
    by seed: both recipes share partition, budgets, schedule and initialisation per seed); empty
    unless both calibrations have runs. One ordering on the page: no Holm adjustment. Labels: s,
    a, b (the calibrations)."""
    paper, tight = values.get("phs_privacy_aware"), values.get("phs_privacy_aware_pld")
    if paper is None or tight is None:
        return []
    label = {"s": s, "a": CALIBRATIONS["phs_privacy_aware_pld"], "b": CALIBRATIONS["phs_privacy_aware"]}
    return [(label, decide(tight, paper))]


def write_table4(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Write table4.csv, table4.md, orderings.csv (P > U and P > B at every s, decided from the
    per-seed accuracies, Holm over the page: :func:`table_orderings`), the figures and configs/
    for the runs under ``root``; return the CSV rows."""
    cells = collect(root)
    rows: list[dict[str, Any]] = []
    for (mech, s, dataset), runs in sorted(cells.items(), key=lambda kv: (kv[0][2], ORDER.index(kv[0][0]), -kv[0][1])):
        acc_mean, acc_std = mean_std([r["acc"] for r in runs])
        paper = paper_value(dataset, mech, s)
        cfg = runs[0]["cfg"]
        phs = [_read_json(r["dir"] / "phs.json") for r in runs]
        row: dict[str, Any] = {
            "dataset": dataset,
            "mechanism": mech,
            "mechanism_name": LABELS[mech],
            "s": _num(s),
            "n_seeds": len(runs),
            "seeds": " ".join(str(r["seed"]) for r in runs),
            "ours_mean": round(acc_mean, 2),
            "ours_std": round(acc_std, 2),
            "paper_table": PAPER_TABLES[dataset][0] if dataset in PAPER_TABLES else "",
            "paper": paper,
            "ours_minus_paper": round(acc_mean - paper, 2),
        }
        for key in SPENT_KEYS:  # mean over seeds of the per-run mean / max over clients
            row[key] = round(mean_std([_float(r["summary"].get(key)) for r in runs])[0], 4)
        row["l1_from_p_u"] = round(mean_std([_float(p.get("l1_from_p_u")) for p in phs if p])[0], 4)
        row["eta"] = _float(phs[0].get("eta")) if phs[0] else math.nan
        row["wall_time_mean"] = round(mean_std([_float(r["summary"].get("wall_time")) for r in runs])[0], 1)
        if mech == "C":  # user-level, every client alike: the run's ε, its δ and the target it was calibrated to
            row["user_level_epsilon"] = round(mean_std([_float(r["summary"].get("epsilon_max")) for r in runs])[0], 4)
            row["delta"] = _float(cfg["accountant"]["delta"])
            row["target_epsilon"] = _float(cfg["privacy"].get("target_epsilon"))
            row["budgets"] = _budgets(cells, dataset)
        row["rounds"] = cfg["train"]["rounds"]
        row["local"] = json.dumps(cfg["train"]["local"])
        row["budget"] = budget
        rows.append(row)
    if any(r["mechanism"] == "C" for r in rows):  # one header: the central row's columns on every row
        for r in rows:
            for key in ("user_level_epsilon", "delta", "target_epsilon"):
                r.setdefault(key, math.nan)
            r.setdefault("budgets", "")
    decided = table_orderings(per_seed(cells))
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "table4.csv", rows, empty_header=["dataset", "mechanism", "s"])
    write_orderings(dest / ORDERINGS, decided)
    figures = _figures(cells, dest)
    atomic_write_text(dest / "table4.md", _markdown(rows, budget, figures, decided) + "\n" + _code(cells) + "\n")
    copy_configs(cells.values(), dest)
    return rows


def write_fig5(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Fig. 5 of PHS for the runs under ``root`` (one s, one dataset; a grid over
    ``train.local.batch_size``): write ``fig5.csv`` (one row per (mechanism, B): final test
    accuracy in %, mean ± sample std over seeds), ``fig5.md`` (the table, and the paper's two
    claims — P above U and B at every B, accuracy rising with B — each ordering decided from the
    per-seed accuracies, Holm over the page: :func:`fig5_orderings`), ``orderings.csv`` and
    ``fig5_batch.png`` (accuracy vs B on a log2 axis, error bars ± std) into ``dest``, with
    ``configs/``; return the CSV rows."""
    cells = collect_batch(root)
    rows: list[dict[str, Any]] = []
    for (mech, batch), runs in sorted(cells.items(), key=lambda kv: (ORDER.index(kv[0][0]), kv[0][1])):
        mean, std = mean_std([r["acc"] for r in runs])
        cfg = runs[0]["cfg"]
        rows.append(
            {
                "mechanism": mech,
                "batch_size": batch,
                "n_seeds": len(runs),
                "seeds": " ".join(str(r["seed"]) for r in runs),
                "mean": round(mean, 2),
                "std": round(std, 2),
                "mechanism_name": LABELS[mech],
                "dataset": _dataset(runs[0]),
                "s": _num(_similarity(runs[0])),
                "rounds": cfg["train"]["rounds"],
                "local_steps": cfg["train"]["local"].get("steps"),
                "budget": budget,
            }
        )
    decided = fig5_orderings(per_seed(cells))
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "fig5.csv", rows, empty_header=["mechanism", "batch_size", "n_seeds", "seeds", "mean", "std"])
    write_orderings(dest / ORDERINGS, decided)
    drawn = _fig5(rows, dest / "fig5_batch.png")
    atomic_write_text(dest / "fig5.md", _fig5_markdown(rows, budget, drawn, decided) + "\n" + _code(cells) + "\n")
    copy_configs(cells.values(), dest)
    return rows


#: recipe name → the calibration it runs (recipes/phs/fmnist.yaml and recipes/phs/tight.yaml)
CALIBRATIONS = {"phs_privacy_aware": "paper calibration (Eq. 6-7)", "phs_privacy_aware_pld": "tight calibration (PLD)"}
TIGHT_KEYS = ("eps_pld_over_budget_mean", "eps_pld_over_budget_max", "eps_paper_over_budget_mean")


def write_tight(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """The privacy-aware mechanism under the paper's noise calibration (Eqs. 6-7) beside the
    tight one (the smallest noise whose PLD ε meets ε_k), same partition, budgets, schedule and
    initialisation per seed: ``tight_vs_paper.csv`` / ``.md`` in ``dest`` with final accuracy
    (mean ± sample std over seeds), the ε each spends as a fraction of ε_k by PLD (mean and max
    over clients that took a step, each averaged over seeds) and by the paper's forward map, and
    the verdict on "tight above paper" decided from the per-seed accuracies, paired by seed
    (:func:`tight_ordering`), also written to ``orderings.csv``."""
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in finished_runs(root):
        if run.name in CALIBRATIONS:
            cells[run.name].append({"seed": run.seed, "acc": run.acc, "summary": run.summary, "cfg": run.cfg, "dir": run.dir})
    if not cells:
        raise ValueError(f"runs: no finished run of {' or '.join(CALIBRATIONS)} under {root}")
    rows: list[dict[str, Any]] = []
    for name, label in CALIBRATIONS.items():
        runs = sorted(cells.get(name, []), key=lambda r: r["seed"])
        if not runs:
            continue
        mean, std = mean_std([r["acc"] for r in runs])
        row: dict[str, Any] = {
            "calibration": label,
            "seeds": " ".join(str(r["seed"]) for r in runs),
            "n_seeds": len(runs),
            "acc_mean": round(mean, 2),
            "acc_std": round(std, 2),
        }
        for key in TIGHT_KEYS:
            row[key] = round(mean_std([_float(r["summary"].get(key)) for r in runs])[0], 3)
        row["s"] = _num(_similarity(runs[0]))
        row["rounds"] = runs[0]["cfg"]["train"]["rounds"]
        row["budget"] = budget
        rows.append(row)
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "tight_vs_paper.csv", rows, empty_header=["calibration", "seeds", "acc_mean", "acc_std"])
    s_text = f"s = {rows[0]['s']}"
    lines = [
        f"# PHS privacy-aware mechanism, {s_text}: the paper's calibration against the tight one ({budget} budget: {rows[0]['rounds']} rounds)",
        "",
        "Same partition, budgets, schedule and model initialisation per seed; only the noise calibration differs "
        "(recipes/phs/fmnist.yaml vs recipes/phs/tight.yaml).",
        "",
        "| calibration | seeds | final accuracy (%) | PLD ε spent / ε_k (mean over clients) | max | paper's forward-map ε / ε_k |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['calibration']} | {r['seeds']} | {r['acc_mean']:.2f} ± {r['acc_std']:.2f} | "
            f"{r['eps_pld_over_budget_mean']:.3f} | {r['eps_pld_over_budget_max']:.3f} | {r['eps_paper_over_budget_mean']:.3f} |"
        )
    decided = tight_ordering(per_seed(cells), rows[0]["s"])
    write_orderings(dest / ORDERINGS, decided)
    for _, d in decided:
        lines += [
            "",
            f"Tight calibration above the paper's (A = tight, B = paper): {d.line(unit=' points', verdict=False)}: **{d.verdict}**.",
            "",
            rule_note([d], where="page"),
        ]
    lines += ["", _code(cells)]
    atomic_write_text(dest / "tight_vs_paper.md", "\n".join(lines) + "\n")
    copy_configs(cells.values(), dest)
    return rows


# -- numbers ---------------------------------------------------------------------------------
def _code(cells: Any) -> str:
    """:func:`~fedgame.pipeline.results.code_note` over every run behind ``cells``."""
    return code_note(r["dir"] for runs in cells.values() for r in runs)


def _float(v: Any) -> float:
    """A number from JSON (None for a non-finite value) or a CSV cell; NaN if there is none."""
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _num(s: float) -> float | int:
    return int(s) if float(s).is_integer() else float(s)


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _s_head(s: float) -> str:
    return f"s = {_num(s)}" + (" (IID)" if s == 100 else "")


# -- markdown --------------------------------------------------------------------------------
def _markdown(rows: list[dict[str, Any]], budget: str, figures: list[tuple[str, str]], decided: Decided) -> str:
    """table4.md: per dataset, the paper's layout ("ours / paper" per cell), the orderings the
    paper claims as decided in ``decided`` (:func:`table_orderings`), the ε-spent table; then the
    schedule and the figures."""
    out: list[str] = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        by = {(r["mechanism"], float(r["s"])): r for r in rows if r["dataset"] == dataset}
        cols = _columns(s for _, s in by)
        number, _, name = PAPER_TABLES.get(dataset, ("?", {}, dataset))
        head = "| mechanism | " + " | ".join(_s_head(s) for s in cols) + " |"
        rule = "|---|" + "---|" * len(cols)
        out += [f"# PHS Table {number}, {name} — ours / paper (test accuracy %, mean ± std over seeds; budget: {budget})", "", head, rule]
        shown = [m for m in ORDER if m in PAPER_MECHANISMS or any(k[0] == m for k in by)]
        for m in shown:
            cells = []
            for s in cols:
                r = by.get((m, s))
                paper = paper_value(dataset, m, s)
                ours = "—" if r is None or not np.isfinite(r["ours_mean"]) else f"{r['ours_mean']:.2f}±{r['ours_std']:.2f}"
                cells.append(f"{ours} / " + ("—" if math.isnan(paper) else f"{paper:.2f}%"))
            out.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
        out += ["", *_table_claims([(lab, d) for lab, d in decided if lab["dataset"] == dataset], dataset, [d for _, d in decided]), ""]
        out += _central_note([r for r in rows if r["dataset"] == dataset and r["mechanism"] == "C"])
        out += ["## ε really spent (PLD), mean/max over clients as a fraction of ε_k (each averaged over seeds)", "", head, rule]
        for m in PAPER_MECHANISMS:
            cells = []
            for s in cols:
                r = by.get((m, s))
                if r is None or not np.isfinite(r["eps_pld_over_budget_mean"]):
                    cells.append("—")
                else:
                    cells.append(f"{r['eps_pld_over_budget_mean']:.3f} / {r['eps_pld_over_budget_max']:.3f}")
            out.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
        out.append("")
    if rows:
        r0 = rows[0]
        out += [
            f"Each cell: {r0['rounds']} rounds, local training {r0['local']}; seeds per cell, the RDP "
            "fractions and ‖p^s − p^u‖₁ are in table4.csv; the configs are in configs/.",
            "",
        ]
    out += [f"![{title}]({name})\n" for title, name in figures]
    return "\n".join(out).rstrip("\n") + "\n"


def _central_note(rows: list[dict[str, Any]]) -> list[str]:
    """The central-DP row's privacy, read from its runs: its ε is user-level (one client's whole
    data), the same for every client, where the mechanisms' ε_k bound each client's examples."""
    if not rows:
        return []
    eps = ", ".join(f"{e:.3g}" for e in sorted({r["user_level_epsilon"] for r in rows}))
    targets = ", ".join(f"{t:g}" for t in sorted({r["target_epsilon"] for r in rows if math.isfinite(r["target_epsilon"])}))
    budgets = "; ".join(sorted({r["budgets"] for r in rows if r["budgets"]}))
    return [
        f"Central DP-FedAvg (not in the paper; the field's standard baseline): the server clips each update and "
        f"noises their sum, every client charged every round; user-level ε = {eps} at δ = {rows[0]['delta']:g} for "
        "every client (a bound on each client's whole data, stronger than the example-level ε_k the three mechanisms "
        f"give each client)"
        + (f", calibrated to privacy.target_epsilon = {targets}" if targets else "")
        + (f"; the mechanisms' budgets: {budgets}" if budgets else "")
        + ". It is in none of the orderings above.",
        "",
    ]


def _budgets(cells: Cells, dataset: str) -> str:
    """The three mechanisms' client budgets ε_k as their runs' configs give them (``ε_k ~ U(lo, hi),
    mean m``), read from the first run of the first mechanism with runs on ``dataset``."""
    for (mech, _s, ds), runs in sorted(cells.items(), key=lambda kv: (ORDER.index(kv[0][0]), -kv[0][1])):
        if mech in PAPER_MECHANISMS and ds == dataset:
            b = (runs[0]["cfg"].get("privacy") or {}).get("budgets") or {}
            if b.get("kind") == "uniform":
                lo, hi = float(b["low"]), float(b["high"])
                return f"ε_k ~ U({lo:g}, {hi:g}), mean {(lo + hi) / 2:g}"
            return f"ε_k from {b}" if b else ""
    return ""


def _counts(decisions: Iterable[Decision]) -> str:
    """``3 hold, 1 fails, 1 not decided``: how many orderings got each verdict."""
    ds = list(decisions)
    words = {"holds": "hold", "fails": "fail"}
    parts = [
        f"{n} {words.get(v, v) if n != 1 else v}"
        for v in ("holds", "fails", "not decided", "not decided (one seed)")
        if (n := sum(d.verdict == v for d in ds))
    ]
    return ", ".join(parts)


def _table_claims(decided: Decided, dataset: str, family: list[Decision]) -> list[str]:
    """The orderings section of one dataset's table: the paper's claim (P above U and B at every
    s, read with :func:`~fedgame.experiments.claims.all_hold`, and per s), the table of orderings
    (:data:`~fedgame.experiments.claims.COLUMNS` and the paper's own difference) and the rule
    (:func:`~fedgame.experiments.claims.rule_note`, Holm's family being ``family``, the page's)."""
    head = "**P above U and B at every s (the paper's claim)"
    if not decided:
        return [head + ":** not decided (no s with P and U or B beside it)."]
    per_s = {lab["s"]: [d for lab2, d in decided if lab2["s"] == lab["s"]] for lab, _ in decided}
    parts = ", ".join(f"{_s_head(float(s))}: {all_hold(ds)}" for s, ds in per_s.items())
    paper = " (the paper has both at every s)" if dataset in PAPER_TABLES else ""
    out = [
        f"{head}: {all_hold(d for _, d in decided)}**{paper}; per s: {parts}. Of its {len(decided)} orderings: "
        f"{_counts(d for _, d in decided)}.",
        "",
        "| s | A | B | " + " | ".join(("A − B (points)", *COLUMNS[1:])) + " | paper's A − B |",
        "|---|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    for lab, d in decided:
        s = float(lab["s"])
        paper_gap = paper_value(dataset, lab["a"], s) - paper_value(dataset, lab["b"], s)
        out.append(
            f"| {_num(s)} | {LABELS[lab['a']]} | {LABELS[lab['b']]} | "
            + " | ".join(d.cells())
            + " | "
            + ("—" if math.isnan(paper_gap) else f"{paper_gap:+.2f}")
            + " |"
        )
    return out + ["", rule_note(family, where="page")]


def _ordering_name(lab: dict[str, Any]) -> str:
    """How the Fig. 5 page names one ordering: ``P > U at B = 32`` or ``P: B = 64 > B = 32``."""
    if lab["claim"] == FIG5_ABOVE:
        return f"{lab['a']} > {lab['b']} at B = {lab['batch_a']}"
    return f"{lab['a']}: B = {lab['batch_a']} > B = {lab['batch_b']}"


def fig5_ordering(decided: Decided) -> str:
    """The paper's Fig. 5 claim "P above U and above B at every B", read from the orderings
    :func:`fig5_orderings` decided (after Holm) with :func:`~fedgame.experiments.claims.all_hold`,
    overall and per B: ``P above U and B at every B: **fails**; per B: B = 32: holds, ...``.
    Not decided where no B has P and U or B beside it."""
    return _fig5_claim(decided, FIG5_ABOVE, "P above U and B at every B", "batch_a", "B", "B = ", "no B with P and U or B beside it")


def fig5_rises(decided: Decided) -> str:
    """The paper's Fig. 5 claim "accuracy rises with B", read from the step orderings
    :func:`fig5_orderings` decided (after Holm) with :func:`~fedgame.experiments.claims.all_hold`,
    over every mechanism's steps and per mechanism."""
    return _fig5_claim(decided, FIG5_RISES, "Accuracy rises with B", "a", "mechanism", "", "no mechanism at two B")


def _fig5_claim(decided: Decided, claim: str, head: str, key: str, per: str, prefix: str, none: str) -> str:
    """One Fig. 5 claim's line: :func:`~fedgame.experiments.claims.all_hold` over its orderings,
    overall and per value of the label ``key`` (named ``per``, each printed after ``prefix``)."""
    mine = [(lab, d) for lab, d in decided if lab["claim"] == claim]
    if not mine:
        return f"{head}: **not decided** ({none})."
    groups: dict[Any, list[Decision]] = {}
    for lab, d in mine:
        groups.setdefault(lab[key], []).append(d)
    parts = ", ".join(f"{prefix}{v}: {all_hold(ds)}" for v, ds in groups.items())
    return f"{head}: **{all_hold(d for _, d in mine)}**; per {per}: {parts} (of its {len(mine)} orderings: {_counts(d for _, d in mine)})."


def _fig5_markdown(rows: list[dict[str, Any]], budget: str, drawn: bool, decided: Decided) -> str:
    """fig5.md: the accuracy table, the paper's two claims read from ``decided``
    (:func:`fig5_orderings`), the table of orderings and the rule, the schedule and the figure."""
    if not rows:
        return f"# PHS Fig. 5 — no privacy-aware, unbiased or biased runs found (budget: {budget})\n"
    r0 = rows[0]
    name = PAPER_TABLES.get(r0["dataset"], ("", {}, r0["dataset"]))[2]
    batches = sorted({r["batch_size"] for r in rows})
    by = {(r["mechanism"], r["batch_size"]): r for r in rows}
    out = [
        f"# PHS Fig. 5, {name}, s = {r0['s']} — test accuracy (%) vs local batch size B (mean ± std over seeds; budget: {budget})",
        "",
        "| mechanism | " + " | ".join(f"B = {b}" for b in batches) + " |",
        "|---|" + "---|" * len(batches),
    ]
    for m in ORDER:
        if not any(k[0] == m for k in by):
            continue
        cells = []
        for b in batches:
            r = by.get((m, b))
            cells.append("—" if r is None or not np.isfinite(r["mean"]) else f"{r['mean']:.2f}±{r['std']:.2f} ({r['n_seeds']})")
        out.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    out += ["", fig5_ordering(decided), "", fig5_rises(decided), ""]
    if decided:
        out += [
            "## Orderings, decided from the per-seed accuracies (A above B)",
            "",
            "P: privacy-aware, U: unbiased, B: biased; B = the local batch size.",
            "",
            "| claim | ordering (A > B) | " + " | ".join(("A − B (points)", *COLUMNS[1:])) + " |",
            "|---|---|" + "---|" * len(COLUMNS),
        ]
        out += [f"| {lab['claim']} | {_ordering_name(lab)} | " + " | ".join(d.cells()) + " |" for lab, d in decided]
        out += ["", rule_note([d for _, d in decided], where="page"), ""]
    out += [
        f"Each cell: final test accuracy, mean ± std over the seeds in brackets (list in fig5.csv); "
        f"{r0['rounds']} rounds, {r0['local_steps']} local steps. The paper's Fig. 5 (Sec. VI-D) is CIFAR-10 by "
        "our reading (its text does not name the dataset) and claims accuracy rises with B and P is above U and B "
        "at every B; "
        "the configs are in configs/.",
        "",
    ]
    if drawn:
        out.append("![Fig. 5](fig5_batch.png)")
    return "\n".join(out).rstrip("\n") + "\n"


# -- figures ---------------------------------------------------------------------------------
def _figures(cells: Cells, dest: Path) -> list[tuple[str, str]]:
    """Draw the figures the runs allow; return (title, file name) of each one written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[tuple[str, str]] = []
    for dataset in sorted({k[2] for k in cells}):
        name = f"fig4_accuracy_{dataset}.png"
        if _fig4(plt, {k: v for k, v in cells.items() if k[2] == dataset}, dest / name, dataset):
            written.append((f"Fig. 4 ({dataset})", name))
    if _fig3(plt, cells, dest / "fig3_selection.png"):
        written.append(("Fig. 3", "fig3_selection.png"))
    if _privacy_spent(plt, cells, dest / "privacy_spent.png"):
        written.append(("ε spent vs ε_k", "privacy_spent.png"))
    return written


def _curve(runs: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(round + 1, mean, std over seeds) of ``key``, skipping NaN rounds run by run."""
    per_round: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        path = r["dir"] / "metrics.csv"
        if not path.exists():
            continue
        for row in read_metrics(path):
            v = row.get(key)
            if isinstance(v, float) and np.isfinite(v):
                per_round[int(row["round"])].append(v)
    xs = sorted(per_round)
    stats = [mean_std(per_round[x]) for x in xs]
    return np.array(xs, dtype=np.float64) + 1, np.array([m for m, _ in stats]), np.array([s for _, s in stats])


def _fig4(plt: Any, cells: Cells, path: Path, dataset: str) -> bool:
    """Test accuracy vs round, one panel per s, P/U/B as mean over seeds ± std (shaded)."""
    s_values = sorted({k[1] for k in cells}, reverse=True)
    fig, axes = plt.subplots(1, len(s_values), figsize=(3.6 * len(s_values), 3.0), squeeze=False, sharey=True)
    drawn = False
    for ax, s in zip(axes[0], s_values):
        for m in ORDER:
            runs = cells.get((m, s, dataset))
            if not runs:
                continue
            x, mean, std = _curve(runs, "test_acc")
            if x.size == 0:
                continue
            ax.plot(x, 100 * mean, marker="o", ms=2.5, color=COLOURS[m], label=f"{LABELS[m]} ({len(runs)} seeds)")
            ax.fill_between(x, 100 * (mean - std), 100 * (mean + std), color=COLOURS[m], alpha=0.2, lw=0)
            drawn = True
        ax.set_title(_s_head(s), fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.suptitle(f"PHS, {PAPER_TABLES.get(dataset, ('', {}, dataset))[2]}: test accuracy vs round", fontsize=10)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def _pick(cells: Cells, mech: str, need: str, dataset: str | None = None) -> dict[str, Any] | None:
    """One run of ``mech`` having file ``need``: s = 30 (the similarity of the paper's Sec. VI-D)
    if there is one, else the largest s; the lowest seed."""
    keys = [k for k in cells if k[0] == mech and (dataset is None or k[2] == dataset)]
    for k in sorted(keys, key=lambda k: (k[2], k[1] != 30.0, -k[1])):
        for r in cells[k]:
            if (r["dir"] / need).exists():
                return r
    return None


def _sizes(run: dict[str, Any], n: int) -> tuple[np.ndarray, str] | None:
    d = run["dir"]
    if (d / "privacy.csv").exists():
        sizes = np.array([row["size"] for row in read_metrics(d / "privacy.csv")], dtype=np.float64)
        if sizes.size == n:
            return sizes, r"$|M_k|$ (local examples)"
    if (d / "partition.json").exists():
        sizes = np.asarray(json.loads((d / "partition.json").read_text()).get("sizes", []), dtype=np.float64)
        if sizes.size == n:
            return sizes, r"$|M_k|$ (local examples)"
    return None


def _fig3(plt: Any, cells: Cells, path: Path) -> bool:
    """Fig. 3: clients as (|M_k|, ε_k) coloured by selection probability, for p* at the run's η,
    p* at 100 η (Problem 1 solved again) and p^u."""
    from fedgame.selection.phs_problem import eta_star, solve_p1

    run = _pick(cells, "P", "phs.json")
    if run is None:
        log.info("fig3: no privacy-aware run with phs.json; skipped")
        return False
    phs = json.loads((run["dir"] / "phs.json").read_text())
    if phs.get("eta") is None:
        return False
    p_u, p_s = np.asarray(phs["p_u"], dtype=np.float64), np.asarray(phs["p_s"], dtype=np.float64)
    w = float(phs["D"]) * np.asarray(phs["V"], dtype=np.float64)
    eps = np.array([math.inf if e is None else e for e in phs["eps"]], dtype=np.float64)
    eta = float(phs["eta"])
    big = solve_p1(p_u, w, 100.0 * eta, method="auto")
    e_star = eta_star(p_u, w)
    xs = _sizes(run, p_u.size)
    x, xlabel = xs if xs is not None else (p_u, r"$p^u_k = |M_k| / \sum_i |M_i|$")
    finite = np.isfinite(eps)  # public-data clients (ε = ∞) have no place on the y axis
    panels = [(p_s, f"$p^*$ at $\\eta$ = {eta:.3g} (the run's)"), (big.p, f"$p^*$ at $\\eta$ = {100 * eta:.3g} (100×)"), (p_u, "$p^u$")]
    lo = min(float(p[finite].min()) for p, _ in panels)
    hi = max(float(p[finite].max()) for p, _ in panels)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharey=True, layout="constrained")
    sc = None
    for ax, (p, title) in zip(axes, panels):
        sc = ax.scatter(x[finite], eps[finite], c=p[finite], cmap="viridis", vmin=lo, vmax=hi, s=14)
        ax.set_title(f"{title}\n$\\eta^*$ = {e_star:.3g}, $\\|p - p^u\\|_1$ = {np.abs(p - p_u).sum():.3g}", fontsize=8)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(r"budget $\epsilon_k$")
    fig.colorbar(sc, ax=list(axes), label="selection probability", shrink=0.9)
    fig.suptitle(f"Fig. 3 — Problem 1, {run['dir'].parent.name} seed {run['seed']}", fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _privacy_spent(plt: Any, cells: Cells, path: Path) -> bool:
    """Per client: budget ε_k vs ε spent by PLD and by the paper's forward map, one run per
    mechanism (clients that took at least one step)."""
    dataset = next((k[2] for k in sorted(cells) if k[0] == "P"), None)
    found = [(m, _pick(cells, m, "privacy.csv", dataset)) for m in PAPER_MECHANISMS]
    picks = [(m, r) for m, r in found if r is not None]
    if not picks:
        return False
    fig, axes = plt.subplots(1, len(picks), figsize=(3.6 * len(picks), 3.3), squeeze=False)
    drawn = False
    for ax, (m, run) in zip(axes[0], picks):
        rows = read_metrics(run["dir"] / "privacy.csv")
        budget = np.array([_float(r.get("eps_budget")) for r in rows])
        done = np.array([_float(r.get("steps_done", 1.0)) for r in rows]) > 0
        for key, marker, label in (("eps_pld", "o", "PLD"), ("eps_paper", "x", "paper's map")):
            y = np.array([_float(r.get(key)) for r in rows])
            ok = done & np.isfinite(budget) & np.isfinite(y)
            if ok.any():
                ax.scatter(budget[ok], y[ok], marker=marker, s=12, label=label, alpha=0.8)
                drawn = True
        top = float(np.nanmax(np.where(np.isfinite(budget), budget, np.nan))) if np.isfinite(budget).any() else 1.0
        ax.plot([0, top], [0, top], "k--", lw=0.8, label="y = x")
        s = _num(float(run["cfg"]["data"]["partition"]["s"]))
        ax.set_title(f"{LABELS[m]} (s = {s}, seed {run['seed']})", fontsize=9)
        ax.set_xlabel(r"budget $\epsilon_k$")
        ax.set_ylabel(f"ε spent (δ = {run['summary'].get('delta', 1e-5):g})" if m == picks[0][0] else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def _fig5(rows: list[dict[str, Any]], path: Path) -> bool:
    """Fig. 5: final test accuracy vs local batch size B (log2 axis), P/U/B as mean ± std over
    seeds (error bars; the three lines nudged apart along x so the bars do not overlap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch_size"] for r in rows})
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    drawn = False
    for i, m in enumerate(ORDER):
        pts = [r for r in sorted(rows, key=lambda r: r["batch_size"]) if r["mechanism"] == m and np.isfinite(r["mean"])]
        if not pts:
            continue
        x = np.array([r["batch_size"] for r in pts], dtype=np.float64) * 2.0 ** (0.04 * (i - 1))
        seeds = sorted({r["n_seeds"] for r in pts})
        ax.errorbar(
            x,
            [r["mean"] for r in pts],
            yerr=[r["std"] for r in pts],
            marker="o",
            ms=4,
            capsize=3,
            color=COLOURS[m],
            label=f"{LABELS[m]} ({'/'.join(map(str, seeds))} seeds)",
        )
        drawn = True
    if drawn:
        r0 = rows[0]
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("local batch size B")
        ax.set_ylabel("test accuracy (%)")
        name = PAPER_TABLES.get(r0["dataset"], ("", {}, r0["dataset"]))[2]
        ax.set_title(f"PHS Fig. 5 — {name}, s = {r0['s']}, {r0['rounds']} rounds", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn
