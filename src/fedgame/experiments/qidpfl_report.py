"""QI-DPFL results (QI-DPFL Secs. IV-B and V-B): the accuracy curve of Fig. 2, and the
six-method comparison of Figs. 3-6 with the paper's claims C1-C4.

``fedgame report RUNS --kind qidpfl --out results/... --budget reduced`` reads every
finished run under RUNS (``summary.json`` + ``config.yaml`` + ``metrics.csv``) of the six recipes
of ``recipes/qidpfl/`` (names ``fedavg``, ``fedavg_select``, ``fedavg_dp``, ``qidpfl``,
``qidpfl_max``, ``qidpfl_random``, before any ``[grid]`` suffix), groups them by (partition kind of
``data.partition.kind``, method) and writes into ``--dest`` (:func:`write_comparison`):

- ``comparison.csv``: one row per cell — final test accuracy (%) mean ± std over seeds, the mean
  accuracy over the first third of the rounds, the total reward Σ_t R_t and the total server cost
  U_T = Σ_t u_t (game methods), the ε of the ledger (``epsilon_max`` of the summaries), each a mean
  over seeds, and the standard deviations over seeds of the accuracies, reward and cost;
- ``comparison.md``: a table per partition and the claims of Sec. V-B. Every claim is decided
  from the runs' per-seed values (:func:`per_seed`: final and early accuracy, total reward and
  cost, the smallest reward step), paired by seed, by the project's one rule
  (:func:`~fedgame.experiments.claims.decide`: one-sided paired t over the common seeds, Welch
  without two; p Holm-adjusted over the page's distinct orderings; holds / fails / not decided,
  "not decided (one seed)"); a statement or claim that needs several orderings is read by
  :func:`~fedgame.experiments.claims.all_hold`; "not decided (a method is missing)" without the
  runs. C1 (panel a: FedAvg-DP lowest, FedAvg-select and QI-DPFL faster and higher than FedAvg,
  QI-DPFL ≈ FedAvg-select: QI-DPFL + 1 > FedAvg-select and FedAvg-select + 1 > QI-DPFL), C2
  (panels b-d: QI-DPFL ≈ Max within 1 point, the lowest total cost and reward of the three
  policies, Random's reward between QI-DPFL's and Max's), C3 (QI-DPFL above FedAvg-DP; each gap
  larger under Non-IID than IID, decided on the per-seed gaps gap_Non-IID[seed] vs
  gap_IID[seed]) and C4 (Theorem 2: QI-DPFL's reward rises at every step until R_max, decided on
  each seed's smallest step R_t − R_{t−1} against 0);
- ``orderings.csv``: every ordering the page decides, once (claim, split, A, B, quantity, the
  statements that use it, and the decision after Holm);
- ``fig_<partition>.png``: the four panels of the paper's Figs. 3-6 (mean over seeds ± std), and
  ``configs/`` (the configs of every run used).

``fedgame report RUNS --kind qidpfl-curve --out ...`` instead reads the runs of
the accuracy sweep (recipe ``qidpfl_sweep`` over a grid of ``privacy.rho``), computes
ρ_glob = n·ρ_i (n = clients per round, from ``metrics.csv`` ``n_selected``; ``privacy.rho`` is the
per-client ρ_i) and fits I(ρ) = I_1 − B e^{−I_3 ρ} per partition kind (:func:`write_curve`):
``curve.json`` and ``fig2_curve.png``.

Both grids are folders written by ``fedgame compare`` (``<out>/<recipe folder>/seed_<k>``); a root
may hold several (e.g. ``runs/`` over ``runs/qidpfl_iid`` and ``runs/qidpfl_dirichlet``, which
C3 needs).
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedgame.experiments.claims import ORDERINGS, Decision, all_hold, decide, holm, rule_note, write_orderings
from fedgame.pipeline.store import atomic_write_text
from fedgame.experiments.table2 import copy_configs, write_rows_csv
from fedgame.incentives.qidpfl.game import fit_accuracy_curve
from fedgame.privacy.plans import ZCDPUpload
from fedgame.pipeline.results import code_note, finished_runs, flatten, mean_std

__all__ = [
    "ClaimCheck",
    "METHODS",
    "QUANTITIES",
    "SWEEP",
    "collect",
    "collect_sweep",
    "evaluate_claims",
    "orderings",
    "per_seed",
    "write_comparison",
    "write_curve",
]

log = logging.getLogger(__name__)

#: recipe name (before any "[grid]" suffix) → method, in the order of the tables
METHODS: dict[str, str] = {
    "fedavg": "FedAvg",
    "fedavg_select": "FedAvg-select",
    "fedavg_dp": "FedAvg-DP",
    "qidpfl": "QI-DPFL",
    "qidpfl_max": "Max",
    "qidpfl_random": "Random",
}
ORDER: tuple[str, ...] = tuple(METHODS.values())
PANEL_A: tuple[str, ...] = ("FedAvg", "FedAvg-select", "FedAvg-DP", "QI-DPFL")
POLICIES: tuple[str, ...] = ("QI-DPFL", "Max", "Random")
COLOURS = {
    "FedAvg": "tab:gray",
    "FedAvg-select": "tab:green",
    "FedAvg-DP": "tab:red",
    "QI-DPFL": "tab:blue",
    "Max": "tab:orange",
    "Random": "tab:purple",
}
PARTITION_LABELS = {"iid": "IID", "dirichlet": "Non-IID"}
#: the recipe name of the accuracy-curve sweep (Fig. 2, Sec. IV-B)
SWEEP = "qidpfl_sweep"
#: gaps (a − b, final accuracy) that C3 expects larger under Non-IID than IID
C3_GAPS: tuple[tuple[str, str], ...] = (("QI-DPFL", "FedAvg-DP"), ("FedAvg-select", "FedAvg"), ("QI-DPFL", "FedAvg"))
#: relative tolerance for "R_t has reached R_max,t" (the applied reward is clipped to R_max,t)
_TOL = 1e-9

Cells = dict[tuple[str, str], list[dict[str, Any]]]


# -- collecting runs -------------------------------------------------------------------------
def _runs(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(recipe name without its grid suffix, run) for every finished run under ``root`` in path
    order; a run is a dict with ``seed``, ``summary``, ``cfg``, ``metrics`` (rows of
    ``metrics.csv``, empty without one) and ``dir``."""
    for run in finished_runs(root):
        yield run.name, {"seed": run.seed, "summary": run.summary, "cfg": run.cfg, "metrics": run.metrics(), "dir": run.dir}


def _kind(run: dict[str, Any]) -> str:
    return str(run["cfg"]["data"]["partition"]["kind"])


def _dataset(run: dict[str, Any]) -> str:
    return str(run["cfg"]["data"].get("dataset", "?"))


def _one_dataset(runs: list[dict[str, Any]], root: Path, what: str) -> None:
    found = sorted({_dataset(r) for r in runs})
    if len(found) > 1:
        raise ValueError(f"{what}: the runs under {root} mix datasets {', '.join(found)}; give a folder holding one dataset")


def collect(root: Path) -> Cells:
    """Finished runs of the six methods under ``root`` grouped by (partition kind, method), each
    cell's runs sorted by seed. Raises ``ValueError`` if the runs mix datasets or a cell's runs
    differ in anything but their seed and name (averaging them would hide it)."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for name, run in _runs(root):
        method = METHODS.get(name)
        if method is not None:
            cells[(_kind(run), method)].append(run)
    _one_dataset([r for runs in cells.values() for r in runs], root, "comparison")
    for (kind, method), runs in cells.items():
        runs.sort(key=lambda r: r["seed"])
        ref = flatten({k: v for k, v in runs[0]["cfg"].items() if k not in ("seed", "name")})
        for r in runs[1:]:
            other = flatten({k: v for k, v in r["cfg"].items() if k not in ("seed", "name")})
            diff = sorted(k for k in ref.keys() | other.keys() if ref.get(k) != other.get(k))
            if diff:
                raise ValueError(
                    f"comparison: the {method} runs on partition {kind} under {root} differ in "
                    f"{', '.join(diff[:5])} ({runs[0]['dir']} vs {r['dir']}); give a folder holding one grid"
                )
    return dict(cells)


def collect_sweep(root: Path) -> dict[str, list[dict[str, Any]]]:
    """The finished ``qidpfl_sweep`` runs under ``root`` by partition kind, sorted by ρ_glob; each
    run also has ``rho_i`` (config ``privacy.rho``), ``n`` (mean of ``n_selected`` over the
    rounds), ``rho_glob`` = n·ρ_i and ``acc`` (final test accuracy in [0, 1])."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, run in _runs(root):
        if name != SWEEP:
            continue
        rho_i = _float(run["cfg"].get("privacy", {}).get("rho"))
        has_n = bool(run["metrics"]) and "n_selected" in run["metrics"][0]
        n = _float(np.mean([row["n_selected"] for row in run["metrics"]])) if has_n else math.nan
        acc = _float(run["summary"].get("final_accuracy"))
        if not (np.isfinite(rho_i) and np.isfinite(n) and np.isfinite(acc)):
            log.warning("curve: skipped %s (privacy.rho, n_selected or final_accuracy missing)", run["dir"])
            continue
        out[_kind(run)].append({**run, "rho_i": rho_i, "n": n, "rho_glob": n * rho_i, "acc": acc})
    _one_dataset([r for runs in out.values() for r in runs], root, "curve")
    for runs in out.values():
        runs.sort(key=lambda r: (r["rho_glob"], r["seed"]))
    return dict(out)


# -- numbers ---------------------------------------------------------------------------------
def _float(v: Any) -> float:
    """A number from JSON (None for a non-finite value) or a CSV cell; NaN if there is none."""
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _column(run: dict[str, Any], key: str) -> np.ndarray:
    """``key`` per round of one run, in round order (NaN where missing)."""
    rows = sorted(run["metrics"], key=lambda r: r["round"])
    return np.array([_float(r.get(key)) for r in rows], dtype=np.float64)


def _total(run: dict[str, Any], key: str) -> float:
    """Σ over rounds of ``key`` (NaN if the run has no such column)."""
    if not run["metrics"] or key not in run["metrics"][0]:
        return math.nan
    col = _column(run, key)
    return float(np.sum(col[np.isfinite(col)]))


def _rho_tot(run: dict[str, Any]) -> float:
    """Mean over the clients that ever uploaded of ρ_i^tot = Σ_t ρ_i^t (zCDP budgets add,
    Lemma 1); NaN for runs without a QI-DPFL plan (no noise)."""
    path = run["dir"] / "qidpfl.npz"
    if not path.exists():
        return math.nan
    tot = np.load(path)["rho"].sum(axis=1)
    return float(tot[tot > 0].mean()) if np.any(tot > 0) else math.nan


def _early_acc(run: dict[str, Any]) -> float:
    """Mean test accuracy (%) over the first third of the rounds, t < ⌈T/3⌉ (finite values)."""
    rounds = int(run["cfg"].get("train", {}).get("rounds", len(run["metrics"])))
    head = [_float(r.get("test_acc")) for r in run["metrics"] if r["round"] < math.ceil(rounds / 3)]
    head = [x for x in head if np.isfinite(x)]
    return 100.0 * float(np.mean(head)) if head else math.nan


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}") if np.isfinite(x) else math.nan


def _partitions(keys: Any) -> list[str]:
    """Partition kinds, IID first."""
    return sorted(set(keys), key=lambda k: (k != "iid", k))


def _label(kind: str) -> str:
    return PARTITION_LABELS.get(kind, kind)


# -- the accuracy curve (Fig. 2) ---------------------------------------------------------------
def write_curve(root: Path, dest: Path) -> dict[str, Any]:
    """Fit I(ρ_glob) = I_1 − B e^{−I_3 ρ_glob} (Sec. IV-B, B = I_2 e^{−I_4}) per partition kind
    to the sweep runs under ``root``; write ``curve.json`` — ``{partition: {I1, B, I3, stderr: {I1, B, I3}, rmse,
    points: [[rho_glob, acc], ...], n_participants, dataset}}`` (accuracies in [0, 1]; the fit
    fields null when the fit fails, with ``error``) — and ``fig2_curve.png`` into ``dest``;
    return the dict."""
    sweep = collect_sweep(root)
    out: dict[str, Any] = {}
    for kind in _partitions(sweep):
        runs = sweep[kind]
        rho = np.array([r["rho_glob"] for r in runs])
        acc = np.array([r["acc"] for r in runs])
        entry: dict[str, Any] = {"I1": None, "B": None, "I3": None, "stderr": None, "rmse": None}
        try:
            fit = fit_accuracy_curve(rho, acc)
        except (ValueError, RuntimeError) as e:
            log.warning("curve: no fit for partition %s: %s", kind, e)
            entry["error"] = str(e)
        else:
            c = fit.curve
            se = [v if np.isfinite(v) else None for v in map(float, fit.stderr)]
            entry.update(I1=c.I1, B=c.B, I3=c.I3, stderr=dict(zip(("I1", "B", "I3"), se)), rmse=fit.rmse)
            # the global budgets the recipes' targets need (Eq. 33), ε = I1 − 0.1 B and ε_max = I1 − 0.01 B
            entry["rho_lo_eps"] = c.rho_lo(c.I1 - 0.10 * c.B)
            entry["rho_lo_eps_max"] = c.rho_lo(c.I1 - 0.01 * c.B, "eps_max")
        entry["points"] = [[float(x), float(y)] for x, y in zip(rho, acc)]
        entry["n_participants"] = sorted({_num(r["n"]) for r in runs})
        entry["dataset"] = _dataset(runs[0])
        out[kind] = entry
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dest / "curve.json", json.dumps(out, indent=2) + "\n")
    _fig2(out, dest / "fig2_curve.png")
    copy_configs(sweep.values(), dest, root=root)
    return out


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def _fig2(curves: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for i, (kind, c) in enumerate(curves.items()):
        colour = f"C{i}"
        pts = np.array(c["points"], dtype=np.float64).reshape(-1, 2)
        ax.scatter(pts[:, 0], 100 * pts[:, 1], s=14, color=colour, label=f"{_label(kind)} runs")
        if c["I1"] is not None and pts.size:
            x = np.logspace(np.log10(pts[:, 0].min()), np.log10(pts[:, 0].max()), 200)
            y = c["I1"] - c["B"] * np.exp(-c["I3"] * x)
            ax.plot(x, 100 * y, color=colour, label=f"{_label(kind)} fit: {c['I1']:.3f} − {c['B']:.3f}·exp(−{c['I3']:.3g} ρ)")
    ax.set_xscale("log")
    ax.set_xlabel(r"global per-round budget $\rho_{glob} = n\,\rho_i$")
    ax.set_ylabel("final test accuracy (%)")
    dataset = next((c["dataset"] for c in curves.values()), "")
    ax.set_title(f"QI-DPFL Fig. 2 — accuracy vs ρ ({dataset})", fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- the comparison (Figs. 3-6, claims C1-C4) ------------------------------------------------------
def write_comparison(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    """Write ``comparison.csv``, ``comparison.md`` (tables and claims C1-C4), ``orderings.csv``
    (every ordering the page decides, once, after Holm), one ``fig_<partition>.png`` per partition
    kind and ``configs/`` for the six methods' runs under ``root``; return the CSV rows (accuracies
    in %, rounded to 2 decimals; reward, cost and ε to 6 significant digits). The claims are
    decided from the runs' per-seed values (:func:`per_seed`), never from these rounded means."""
    cells = collect(root)
    rows: list[dict[str, Any]] = []
    for kind in _partitions(k for k, _ in cells):
        for method in ORDER:
            runs = cells.get((kind, method))
            if not runs:
                continue
            acc = mean_std([100.0 * _float(r["summary"].get("final_accuracy")) for r in runs])
            early = mean_std([_early_acc(r) for r in runs])
            reward = mean_std([_total(r, "reward") for r in runs])
            cost = mean_std([_total(r, "cost_u_t") for r in runs])
            rows.append(
                {
                    "partition": kind,
                    "method": method,
                    "n_seeds": len(runs),
                    "seeds": " ".join(str(r["seed"]) for r in runs),
                    "final_acc_mean": round(acc[0], 2),
                    "final_acc_std": round(acc[1], 2),
                    "total_reward_mean": _sig(reward[0]),
                    "total_cost_mean": _sig(cost[0]),
                    "epsilon_max_mean": _sig(mean_std([_float(r["summary"].get("epsilon_max")) for r in runs])[0]),
                    "early_acc_mean": round(early[0], 2),
                    "participants_mean": round(mean_std([float(np.mean(_column(r, "n_selected"))) for r in runs])[0], 2),
                    "rho_tot_mean": _sig(mean_std([_rho_tot(r) for r in runs])[0]),
                    "rounds": runs[0]["cfg"].get("train", {}).get("rounds"),
                    "dataset": _dataset(runs[0]),
                    "budget": budget,
                    # the spreads of early accuracy, reward and cost (last, so the columns before them
                    # keep their places)
                    "early_acc_std": round(early[1], 2),
                    "total_reward_std": _sig(reward[1]),
                    "total_cost_std": _sig(cost[1]),
                }
            )
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "comparison.csv", rows, empty_header=["partition", "method", "n_seeds", "seeds"])
    checks = evaluate_claims(per_seed(cells))
    kinds = _partitions(k for k, _ in cells)
    figures = [(kind, f"fig_{kind}.png") for kind in kinds if _fig_partition(cells, kind, dest / f"fig_{kind}.png")]
    write_orderings(dest / ORDERINGS, orderings(checks))
    md = _markdown(rows, checks, figures, budget, cells)
    atomic_write_text(dest / "comparison.md", md + "\n" + code_note(r["dir"] for runs in cells.values() for r in runs) + "\n")
    copy_configs(cells.values(), dest, root=root)
    return rows


#: what a per-seed value of :func:`per_seed` measures → (its name on the page and in
#: orderings.csv, the format of a difference, the unit of a difference)
QUANTITIES: dict[str, tuple[str, str, str]] = {
    "final_acc": ("final accuracy (%)", ".2f", " points"),
    "early_acc": ("accuracy over the first third of rounds (%)", ".2f", " points"),
    "total_reward": ("total reward Σ R_t", ".4g", ""),
    "total_cost": ("total cost U_T", ".4g", ""),
    "gap": ("gap in final accuracy (points)", ".2f", " points"),
    "min_rise": ("smallest step R_t − R_{t−1} up to R_max,t", ".4g", ""),
}

Values = dict[tuple[str, str, str], dict[int, float]]
#: an ordering to decide: (A's label, A's per-seed values, B's label, B's per-seed values)
Pair = tuple[str, dict[int, float], str, dict[int, float]]


def _min_rise(run: dict[str, Any]) -> float:
    """C4's per-seed value: the smallest step R_t − R_{t−1} of the run's reward over the rounds
    up to the first one where R_t reaches R_max,t (every round where it never does); positive
    exactly when R_t rises at every step until R_max. NaN without a reward column or a step."""
    if not run["metrics"] or "reward" not in run["metrics"][0]:
        return math.nan
    R = _column(run, "reward")
    R_max = _column(run, "R_max") if "R_max" in run["metrics"][0] else np.full(R.size, math.nan)
    reached = np.flatnonzero(np.isfinite(R_max) & (R >= R_max * (1 - _TOL)))
    stop = int(reached[0]) if reached.size else R.size - 1
    steps = np.diff(R[: stop + 1])
    steps = steps[np.isfinite(steps)]
    return float(steps.min()) if steps.size else math.nan


def per_seed(cells: Cells) -> Values:
    """``{(partition, method, quantity): {seed: value}}`` of :func:`collect`'s cells, finite values
    only (a cell without a quantity has no key): what the claims are decided from, paired by seed.
    Quantities (:data:`QUANTITIES`): final and early accuracy (%), total reward Σ R_t and total
    server cost U_T, and for the game runs C4's smallest reward step (:func:`_min_rise`)."""
    get: dict[str, Callable[[dict[str, Any]], float]] = {
        "final_acc": lambda r: 100.0 * _float(r["summary"].get("final_accuracy")),
        "early_acc": _early_acc,
        "total_reward": lambda r: _total(r, "reward"),
        "total_cost": lambda r: _total(r, "cost_u_t"),
        "min_rise": _min_rise,
    }
    out: Values = {}
    for (kind, method), runs in cells.items():
        for quantity, f in get.items():
            vals = {int(r["seed"]): f(r) for r in runs}
            vals = {s: v for s, v in vals.items() if math.isfinite(v)}
            if vals:
                out[(kind, method, quantity)] = vals
    return out


@dataclass(frozen=True)
class ClaimCheck:
    """One statement of a claim of the paper's Sec. V-B and the orderings that decide it: each
    pair (A, B) of ``pairs`` is "A's ``quantity`` above B's", decided by
    :func:`~fedgame.experiments.claims.decide` on per-seed values (``decisions``, Holm-adjusted
    over the page), and the statement's verdict is :func:`~fedgame.experiments.claims.all_hold`
    of them. ``numbers``: the means over seeds it is about; ``missing``: the methods without runs
    (then nothing is decided). ``partition`` is a kind, or ``"<kind> vs iid"`` for C3's gaps."""

    claim: str
    partition: str
    statement: str
    quantity: str
    numbers: str
    pairs: tuple[tuple[str, str], ...] = ()
    decisions: tuple[Decision, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        """all_hold of the orderings; "not decided (a method is missing)" without the runs."""
        return "not decided (a method is missing)" if self.missing else all_hold(self.decisions)

    def line(self) -> str:
        """``statement: verdict (numbers)``; the orderings are :meth:`ordering_lines`."""
        return f"{self.statement}: {self.verdict} ({self.numbers})"

    def ordering_lines(self) -> list[str]:
        """``A > B: difference [95 % interval] (test, n, df, p): verdict``, one per ordering."""
        _, spec, unit = QUANTITIES[self.quantity]
        return [f"{a} > {b}: {d.line(spec=spec, unit=unit)}" for (a, b), d in zip(self.pairs, self.decisions, strict=True)]


def _claim_verdict(checks: list[ClaimCheck]) -> str:
    """A claim needs every ordering of every one of its statements: "fails" where one fails,
    else "not decided (a method is missing)" where a statement lacks runs, else
    :func:`~fedgame.experiments.claims.all_hold` of all its orderings."""
    decisions = [d for c in checks for d in c.decisions]
    if any(d.verdict == "fails" for d in decisions):
        return "fails"
    if any(c.missing for c in checks):
        return "not decided (a method is missing)"
    return all_hold(decisions)


def _mean_of(xs: dict[int, float]) -> float:
    """The mean over seeds of per-seed values; NaN without any."""
    return sum(xs.values()) / len(xs) if xs else math.nan


def _needs(kind: str, quantity: str, *methods: str) -> list[tuple[str, str, str]]:
    """The (partition, method, quantity) keys a statement on ``methods`` needs values for."""
    return [(kind, m, quantity) for m in methods]


class _Claims:
    """What :func:`evaluate_claims` collects: the statements of C1-C4 in page order, and each
    distinct ordering (split, A, B, quantity) decided once, before Holm's adjustment over all."""

    def __init__(self, values: Values) -> None:
        self.values = values
        self.raw: dict[tuple[str, str, str, str], Decision] = {}
        self.out: list[ClaimCheck] = []

    def v(self, kind: str, method: str, quantity: str) -> dict[int, float]:
        """The per-seed ``quantity`` of ``method`` on partition ``kind`` (empty without runs)."""
        return self.values.get((kind, method, quantity), {})

    def fin(self, kind: str, method: str) -> float:
        """The mean final accuracy (%) of ``method`` on ``kind``."""
        return _mean_of(self.v(kind, method, "final_acc"))

    def statement(
        self, claim: str, split: str, text: str, quantity: str, needs: list[tuple[str, str, str]], pairs: list[Pair], numbers: str
    ) -> None:
        """Add the statement ``text``: its orderings ``pairs`` (A, A's values, B, B's values),
        each decided once, when every (partition, method, quantity) of ``needs`` has values;
        ``numbers``: the means it is about."""
        missing = tuple(dict.fromkeys(m for k, m, q in needs if not self.v(k, m, q)))
        if missing:
            no = f"no {QUANTITIES[quantity][0]} of " + ", ".join(missing)
            self.out.append(ClaimCheck(claim, split, text, quantity, no, missing=missing))
            return
        found = []
        for a, va, b, vb in pairs:
            key = (split, a, b, quantity)
            if key not in self.raw:
                self.raw[key] = decide(va, vb)
            found.append((a, b))
        self.out.append(ClaimCheck(claim, split, text, quantity, numbers, tuple(found)))

    def above(self, kind: str, quantity: str, *pairs: tuple[str, str]) -> list[Pair]:
        """ "A's ``quantity`` above B's" for each (A, B) of ``pairs``."""
        return [(a, self.v(kind, a, quantity), b, self.v(kind, b, quantity)) for a, b in pairs]

    def within(self, kind: str, a: str, b: str, margin: float = 1.0) -> list[Pair]:
        """a ≈ b within ``margin`` points of final accuracy: a + margin > b and b + margin > a
        (two one-sided tests)."""
        va, vb = self.v(kind, a, "final_acc"), self.v(kind, b, "final_acc")
        return [
            (f"{a} + {margin:g}", {s: x + margin for s, x in va.items()}, b, vb),
            (f"{b} + {margin:g}", {s: x + margin for s, x in vb.items()}, a, va),
        ]

    def final_acc(self, claim: str, kind: str, text: str, a: str, b: str, *, close: bool = False, prefix: str = "") -> None:
        """A statement on the final accuracies of ``a`` and ``b`` on ``kind``: a above b, or with
        ``close`` a ≈ b within 1 point; its numbers are both means (``prefix`` before them)."""
        pairs = self.within(kind, a, b) if close else self.above(kind, "final_acc", (a, b))
        numbers = f"{prefix}{self.fin(kind, a):.2f} vs {self.fin(kind, b):.2f} %"
        self.statement(claim, kind, text, "final_acc", _needs(kind, "final_acc", a, b), pairs, numbers)

    def adjusted(self) -> list[ClaimCheck]:
        """The statements with their orderings' decisions, p Holm-adjusted over every distinct
        ordering of the page (one family)."""
        adjusted = dict(zip(self.raw, holm(list(self.raw.values())), strict=True))
        return [
            ClaimCheck(
                c.claim,
                c.partition,
                c.statement,
                c.quantity,
                c.numbers,
                c.pairs,
                tuple(adjusted[(c.partition, a, b, c.quantity)] for a, b in c.pairs),
                c.missing,
            )
            for c in self.out
        ]


def evaluate_claims(values: Values) -> list[ClaimCheck]:
    """C1-C4 (Sec. V-B) decided from the per-seed ``values`` (:func:`per_seed`), in the order C1,
    C2, C3, C4 per partition, then C3's gaps across partitions. Each distinct ordering (partition,
    A, B, quantity) is decided once by :func:`~fedgame.experiments.claims.decide` (paired by seed),
    and the p-values of all of them are Holm-adjusted together: the page's family. A statement
    that shares an ordering with another (QI-DPFL above FedAvg-DP in C1 and C3) shows the same
    decision."""
    kinds = _partitions(k for k, _, _ in values)
    claims = _Claims(values)
    for kind in kinds:
        _c1_panel_a(claims, kind)
        _c2_policies(claims, kind)
        _c3_screening(claims, kind)
        _c4_reward_rises(claims, kind)
    if "iid" in kinds:
        _c3_gaps(claims, kinds)
    return claims.adjusted()


def _c1_panel_a(c: _Claims, kind: str) -> None:
    """C1 (panel a) on ``kind``: FedAvg-DP has the lowest final accuracy; FedAvg-select and QI-DPFL
    end above FedAvg and converge faster (first third of rounds); QI-DPFL ≈ FedAvg-select."""
    others = ("FedAvg", "FedAvg-select", "QI-DPFL")
    c.statement(
        "C1",
        kind,
        "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL",
        "final_acc",
        _needs(kind, "final_acc", "FedAvg-DP", *others),
        c.above(kind, "final_acc", *((m, "FedAvg-DP") for m in others)),
        f"FedAvg-DP {c.fin(kind, 'FedAvg-DP'):.2f} %; " + ", ".join(f"{m} {c.fin(kind, m):.2f}" for m in others),
    )
    for m in ("FedAvg-select", "QI-DPFL"):
        c.final_acc("C1", kind, f"{m} above FedAvg at the end", m, "FedAvg", prefix="final ")
        c.statement(
            "C1",
            kind,
            f"{m} above FedAvg over the first third of rounds (faster convergence)",
            "early_acc",
            _needs(kind, "early_acc", m, "FedAvg"),
            c.above(kind, "early_acc", (m, "FedAvg")),
            f"mean {_mean_of(c.v(kind, m, 'early_acc')):.2f} vs {_mean_of(c.v(kind, 'FedAvg', 'early_acc')):.2f} %",
        )
    c.final_acc("C1", kind, "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point)", "QI-DPFL", "FedAvg-select", close=True)


def _c2_policies(c: _Claims, kind: str) -> None:
    """C2 (panels b-d) on ``kind``, QI-DPFL against the Max and Random reward policies: accuracy
    within 1 point of Max, the lowest total cost and reward, Random's reward between the two."""
    c.final_acc("C2", kind, "QI-DPFL final accuracy within 1 point of Max", "QI-DPFL", "Max", close=True)
    for what, label, quantity in (
        ("total cost U_T", "has the lowest", "total_cost"),
        ("total reward", "pays the lowest", "total_reward"),
    ):
        # "lowest" is each other policy above QI-DPFL
        c.statement(
            "C2",
            kind,
            f"QI-DPFL {label} {what} of QI-DPFL, Max, Random",
            quantity,
            _needs(kind, quantity, *POLICIES),
            c.above(kind, quantity, ("Max", "QI-DPFL"), ("Random", "QI-DPFL")),
            ", ".join(f"{m} {_mean_of(c.v(kind, m, quantity)):.6g}" for m in POLICIES),
        )
    c.statement(
        "C2",
        kind,
        "Random's total reward lies between QI-DPFL's and Max's",
        "total_reward",
        _needs(kind, "total_reward", *POLICIES),
        c.above(kind, "total_reward", ("Random", "QI-DPFL"), ("Max", "Random")),
        ", ".join(f"{m} {_mean_of(c.v(kind, m, 'total_reward')):.6g}" for m in ("QI-DPFL", "Random", "Max")),
    )


def _c3_screening(c: _Claims, kind: str) -> None:
    """C3 on ``kind``: QI-DPFL ends above FedAvg-DP, the effect of screening the clients."""
    c.final_acc("C3", kind, "QI-DPFL above FedAvg-DP at the end (effect of screening)", "QI-DPFL", "FedAvg-DP")


def _c4_reward_rises(c: _Claims, kind: str) -> None:
    """C4 (Theorem 2) on ``kind``: QI-DPFL's reward R_t rises at every step until R_max,t, decided
    on every seed's smallest step before R_max against 0."""
    rises = c.v(kind, "QI-DPFL", "min_rise")
    c.statement(
        "C4",
        kind,
        "QI-DPFL reward R_t rises at every step t until it reaches R_max,t",
        "min_rise",
        _needs(kind, "min_rise", "QI-DPFL"),
        [("QI-DPFL smallest step", rises, "0", {s: 0.0 for s in rises})],
        "smallest step R_t − R_{t−1} up to R_max,t per seed: " + ", ".join(f"{s}: {x:.4g}" for s, x in sorted(rises.items())),
    )


def _c3_gaps(c: _Claims, kinds: list[str]) -> None:
    """C3 across partitions: each gap of :data:`C3_GAPS` in final accuracy is larger under every
    non-IID partition than under IID, decided on the per-seed gaps (the seeds pair across partitions)."""

    def gaps(kind: str, a: str, b: str) -> dict[int, float]:
        va, vb = c.v(kind, a, "final_acc"), c.v(kind, b, "final_acc")
        return {s: va[s] - vb[s] for s in sorted(va.keys() & vb.keys())}

    for kind in (k for k in kinds if k != "iid"):
        for a, b in C3_GAPS:
            g_non, g_iid = gaps(kind, a, b), gaps("iid", a, b)
            c.statement(
                "C3",
                f"{kind} vs iid",
                f"gap {a} − {b} larger under {_label(kind)} than IID",
                "gap",
                [(k, m, "final_acc") for k in (kind, "iid") for m in (a, b)],
                [(f"{a} − {b} ({_label(kind)})", g_non, f"{a} − {b} (IID)", g_iid)],
                f"{_mean_of(g_non):.2f} vs {_mean_of(g_iid):.2f} points" if g_non and g_iid else "no seed in both cells",
            )


def orderings(checks: list[ClaimCheck]) -> list[tuple[dict[str, Any], Decision]]:
    """Every distinct ordering of ``checks`` once, in page order, for ``orderings.csv``: labels
    ``claim`` and ``statement`` (those that use it, joined by "; "), ``split`` (partition, or
    "<kind> vs iid"), ``a``, ``b`` and ``quantity``; the Holm-adjusted decision."""
    found: dict[tuple[str, str, str, str], tuple[dict[str, Any], Decision]] = {}
    for c in checks:
        for (a, b), d in zip(c.pairs, c.decisions, strict=True):
            key = (c.partition, a, b, c.quantity)
            if key not in found:
                found[key] = (
                    {
                        "claim": c.claim,
                        "split": c.partition,
                        "a": a,
                        "b": b,
                        "quantity": QUANTITIES[c.quantity][0],
                        "statement": c.statement,
                    },
                    d,
                )
                continue
            lab = found[key][0]
            for field, value in (("claim", c.claim), ("statement", c.statement)):
                if value not in lab[field].split("; "):
                    lab[field] += f"; {value}"
    return list(found.values())


# -- markdown --------------------------------------------------------------------------------
def _fmt(x: Any, spec: str) -> str:
    v = _float(x)
    return "—" if not np.isfinite(v) else format(v, spec)


def _claim_lines(title: str, checks: list[ClaimCheck]) -> list[str]:
    """A claim's verdict, each statement with its verdict and means, each ordering under it."""
    out = [f"- **{title}: {_claim_verdict(checks)}.**"]
    for c in checks:
        out += [f"  - {c.line()}"] + [f"    - {x}" for x in c.ordering_lines()]
    return out


def _runs_sentence(cells: Cells) -> str:
    """What the runs were, read from their configs: the rounds, the clients and
    ``train.clients_per_round`` per method, and the seeds (the same in every cell, or not)."""
    cfgs = [r["cfg"] for runs in cells.values() for r in runs]

    def listed(xs: Iterable[Any]) -> str:
        return ", ".join(map(str, sorted(set(xs), key=str)))

    rounds = listed(c.get("train", {}).get("rounds") for c in cfgs)
    clients = listed(c["data"]["partition"].get("n_clients") for c in cfgs)
    by_k: dict[str, list[str]] = defaultdict(list)
    for method in ORDER:
        ks = listed(r["cfg"].get("train", {}).get("clients_per_round") for (_, m), runs in cells.items() if m == method for r in runs)
        if ks:
            by_k[ks].append(method)
    per_round = "; ".join(f"{k} for {', '.join(ms)}" for k, ms in by_k.items())
    seeds = {tuple(r["seed"] for r in runs) for runs in cells.values()}
    seed_part = (
        f"seeds {' '.join(map(str, next(iter(seeds))))} in each of the {len(cells)} cells"
        if len(seeds) == 1
        else "seeds differ between cells (comparison.csv lists each cell's)"
    )
    return (
        f"Runs (from their configs): {len(cfgs)} runs of {rounds} rounds over {clients} clients; "
        f"`train.clients_per_round` {per_round} (the participants per round the runs had are in the tables); {seed_part}."
        f"{_upload_noise(cells)}"
    )


def _upload_noise(cells: Cells) -> str:
    """How the private methods' uploads were noised, read from their configs: each distinct
    (``privacy.mode``, ``privacy.clip``) of the zCDP-upload runs with the methods that ran it
    ("" when no run noised its upload); a config without them has ``ZCDPUpload.Config``'s defaults."""
    defaults = ZCDPUpload.Config.model_fields
    mode0, clip0 = defaults["mode"].default, defaults["clip"].default
    by: dict[tuple[str, str], list[str]] = defaultdict(list)
    for method in ORDER:
        privacy = [r["cfg"].get("privacy") or {} for (_, m), runs in cells.items() if m == method for r in runs]
        noised = {(str(p.get("mode", mode0)), f"{float(p.get('clip', clip0)):g}") for p in privacy if p.get("kind") == "zcdp_upload"}
        for key in sorted(noised):
            by[key].append(method)
    if not by:
        return ""
    what = {
        "paper_update": "the update clipped to C and noised",
        "paper_params": "the local model's parameters clipped to norm C and noised, Corollary 1 read literally",
    }
    parts = [f"`privacy.mode: {mode}` ({what.get(mode, mode)}), C = {clip} for {', '.join(ms)}" for (mode, clip), ms in by.items()]
    return " Upload noise: " + "; ".join(parts) + "."


def _markdown(rows: list[dict[str, Any]], checks: list[ClaimCheck], figures: list[tuple[str, str]], budget: str, cells: Cells) -> str:
    if not rows:
        return f"# QI-DPFL comparison — no runs of the six methods found (budget: {budget})\n"
    dataset = rows[0]["dataset"]
    out = [f"# QI-DPFL comparison, {dataset} (Sec. V-B; mean ± std over seeds; budget: {budget})", ""]
    pictures = dict(figures)
    for kind in _partitions(r["partition"] for r in rows):
        cfg = next(runs[0]["cfg"] for (k, _), runs in cells.items() if k == kind)
        part = cfg["data"]["partition"]
        extra = ", ".join(f"{k}={v}" for k, v in part.items() if k not in ("kind",))
        out += [
            f"## {_label(kind)} (`{kind}`{', ' + extra if extra else ''})",
            "",
            "| method | seeds | final accuracy (%) | accuracy over first third of rounds (%) | total reward Σ R_t | "
            "total cost U_T | participants per round | mean ρ_i^tot | ε max (δ) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r["partition"] == kind):
            out.append(
                f"| {r['method']} | {r['n_seeds']} | {_fmt(r['final_acc_mean'], '.2f')} ± {_fmt(r['final_acc_std'], '.2f')} | "
                f"{_fmt(r['early_acc_mean'], '.2f')} | {_fmt(r['total_reward_mean'], '.6g')} | "
                f"{_fmt(r['total_cost_mean'], '.6g')} | {_fmt(r['participants_mean'], '.2f')} | "
                f"{_fmt(r['rho_tot_mean'], '.4g')} | {_fmt(r['epsilon_max_mean'], '.4g')} |"
            )
        out += ["", "### Claims (Sec. V-B)", ""]
        for claim in ("C1", "C2", "C3", "C4"):
            mine = [c for c in checks if c.claim == claim and c.partition == kind]
            if mine:
                out += _claim_lines(claim, mine)
        if kind in pictures:
            out += ["", f"![QI-DPFL, {_label(kind)}]({pictures[kind]})"]
        out += _game_report(cells, kind)
        out.append("")
    across = [c for c in checks if " vs " in c.partition]
    if across:
        out += ["## Across partitions", ""] + _claim_lines("C3 (gaps larger under Non-IID)", across) + [""]
    decided = orderings(checks)
    if decided:
        # Holm's family: the orderings with a p (claims.holm leaves out a difference of 0 without
        # spread, whose p is undefined, as it does one-seed cells)
        family = [d for _, d in decided if math.isfinite(d.p)]
        out += [
            rule_note(
                family, where="page", unit="points for accuracies and their gaps, the quantity's own unit for reward, cost and reward steps"
            )
            + " A statement that needs several orderings (lowest of several; between; ≈ within 1 point, i.e. "
            "A + 1 > B and B + 1 > A) holds when every one holds, fails when one fails, and is otherwise not decided; "
            "so does a claim over its statements. C4 compares each seed's smallest step R_t − R_{t−1}, over the rounds up "
            "to the first where R_t reaches R_max,t, with 0. Each ordering is decided once (a statement sharing one shows "
            "the same decision) and listed once in orderings.csv.",
            "",
        ]
    rounds = sorted({int(r["rounds"]) for r in rows if r["rounds"] is not None})
    third = ", ".join(f"rounds 1 to ⌈{t}/3⌉ = {math.ceil(t / 3)}" for t in rounds)
    out += [
        _runs_sentence(cells),
        "",
        f"Final accuracy: the last round's test accuracy; the first third of rounds: {third}. "
        "Total reward and cost are sums over the rounds of each run's `reward` and `cost_u_t` "
        "(server cost u_t, the summand of Eq. 15), then means over seeds; ε max is the summaries' `epsilon_max`. "
        "Seeds per cell are in comparison.csv; the configs are in configs/.",
        "",
    ]
    return "\n".join(out).rstrip("\n") + "\n"


def _game_report(cells: Cells, kind: str) -> list[str]:
    """The screening (θ per candidate, θ_th, kept) and the game per round (|S_t|, R_t*,
    R_min, R_max, applied R_t, the slopes G_i = ρ_i^t/R_t) of the first QI-DPFL seed."""
    runs = cells.get((kind, "QI-DPFL"))
    if not runs or not (runs[0]["dir"] / "qidpfl.json").exists():
        return []
    plan = json.loads((runs[0]["dir"] / "qidpfl.json").read_text())
    emd = [e for e in plan["emd"] if e is not None]
    kept = plan["kept"]
    th = max(plan["emd"][i] for i in kept) if emd else math.nan
    out = [
        "",
        f"#### Screening and game report (seed {runs[0]['seed']})",
        "",
        "θ per candidate (EMD to the pooled label distribution): "
        + ", ".join(f"{i}: {e:.3f}" for i, e in enumerate(plan["emd"]) if e is not None)
        + f". θ_th = {th:.3f}; kept {len(kept)} of {len(plan['emd'])}: {kept}.",
        "",
    ]
    npz = runs[0]["dir"] / "qidpfl.npz"
    if npz.exists():
        arr = np.load(npz)
        g = arr["rho"][:, 0] / arr["reward"][0]
        out += ["Slopes G_i = ρ_i^t / R_t (round 1; constant ν): " + ", ".join(f"{i}: {v:.4g}" for i, v in enumerate(g) if v > 0) + ".", ""]
    out += ["| t | S_t | R_t* | R_min,t | R_max,t | R_t applied | u_t |", "|---|---|---|---|---|---|---|"]
    for t in range(len(plan["reward"])):

        def f(key: str) -> str:
            v = plan[key][t]
            return "∞" if v is None else f"{v:.5g}"

        out.append(f"| {t + 1} | {plan['n_part'][t]} | {f('R_star')} | {f('R_min')} | {f('R_max')} | {f('reward')} | {f('cost')} |")
    return out


# -- figures ---------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(runs: list[dict[str, Any]], key: str, *, cumulative: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(round + 1, mean, std over seeds) of ``key`` (of its running sum when ``cumulative``),
    skipping NaN rounds run by run."""
    per_round: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        if not r["metrics"] or key not in r["metrics"][0]:
            continue
        rounds = [int(row["round"]) for row in sorted(r["metrics"], key=lambda row: row["round"])]
        vals = _column(r, key)
        if cumulative:
            vals = np.cumsum(np.where(np.isfinite(vals), vals, 0.0))
        for t, v in zip(rounds, vals):
            if np.isfinite(v):
                per_round[t].append(float(v))
    xs = sorted(per_round)
    stats = [mean_std(per_round[x]) for x in xs]
    return np.array(xs, dtype=np.float64) + 1, np.array([m for m, _ in stats]), np.array([s for _, s in stats])


def _fig_partition(cells: Cells, kind: str, path: Path) -> bool:
    """The four panels of Figs. 3-6 for one partition kind; False (nothing written) without data."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(9.0, 6.4))
    panels = (
        (axes[0][0], PANEL_A, "test_acc", False, 100.0, "(a) test accuracy (%)"),
        (axes[0][1], POLICIES, "test_acc", False, 100.0, "(b) test accuracy (%)"),
        (axes[1][0], POLICIES, "cost_u_t", True, 1.0, r"(c) server cost $U_t = \sum_{s \leq t} u_s$"),
        (axes[1][1], POLICIES, "reward", False, 1.0, r"(d) reward $R_t$"),
    )
    drawn = False
    for ax, methods, key, cumulative, scale, title in panels:
        for m in methods:
            runs = cells.get((kind, m), [])
            x, mean, std = _series(runs, key, cumulative=cumulative)
            if x.size == 0:
                continue
            ax.plot(x, scale * mean, marker="o", ms=2, color=COLOURS[m], label=f"{m} ({len(runs)} seeds)")
            ax.fill_between(x, scale * (mean - std), scale * (mean + std), color=COLOURS[m], alpha=0.2, lw=0)
            drawn = True
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("round t")
        ax.grid(alpha=0.3)
    # R_min,t / R_max,t of the QI-DPFL runs (the three policies share them), where finite
    ax = axes[1][1]
    runs = cells.get((kind, "QI-DPFL"), [])
    x_max, r_max, _ = _series(runs, "R_max")
    if x_max.size:
        x_min, r_min, _ = _series(runs, "R_min")
        ax.plot(x_min, r_min, ls="--", lw=1, color="k", label=r"$R_{min,t}$, $R_{max,t}$")
        ax.plot(x_max, r_max, ls="--", lw=1, color="k")
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    dataset = next((_dataset(runs[0]) for (k, _), runs in cells.items() if k == kind and runs), "")
    fig.suptitle(f"QI-DPFL, {dataset}, {_label(kind)}: mean ± std over seeds", fontsize=10)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn
