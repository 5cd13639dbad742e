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
- ``comparison.md``: a table per partition and the claims of Sec. V-B, each decided from those
  numbers (every ordering of means against two standard errors of its difference: holds /
  within two standard errors / fails; undecided when a method is missing): C1 (panel a: FedAvg-DP lowest,
  FedAvg-select and QI-DPFL faster and higher than FedAvg, QI-DPFL ≈ FedAvg-select), C2 (panels
  b-d: QI-DPFL's accuracy on par with Max at the lowest cost and reward, Random in between),
  C3 (QI-DPFL above FedAvg-DP, every gap larger under Non-IID) and C4 (QI-DPFL's reward rises
  with t until R_max, Theorem 2);
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedgame.experiments.claims import ordering, verdict
from fedgame.pipeline.store import atomic_write_text
from fedgame.experiments.table2 import copy_configs, write_rows_csv
from fedgame.incentives.games.qidpfl import fit_accuracy_curve
from fedgame.pipeline.results import code_note, finished_runs, flatten, mean_std

__all__ = [
    "ClaimCheck",
    "METHODS",
    "SWEEP",
    "collect",
    "collect_sweep",
    "evaluate_claims",
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
    "FedAvg": "tab:gray", "FedAvg-select": "tab:green", "FedAvg-DP": "tab:red",
    "QI-DPFL": "tab:blue", "Max": "tab:orange", "Random": "tab:purple",
}
PARTITION_LABELS = {"iid": "IID", "dirichlet": "Non-IID"}
#: the recipe name of the accuracy-curve sweep (Fig. 2, Sec. IV-B)
SWEEP = "qidpfl_sweep"
#: gaps (a − b, final accuracy) that C3 expects larger under Non-IID than IID
C3_GAPS: tuple[tuple[str, str], ...] = (("QI-DPFL", "FedAvg-DP"), ("FedAvg-select", "FedAvg"), ("QI-DPFL", "FedAvg"))
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
            ax.plot(x, 100 * y, color=colour,
                    label=f"{_label(kind)} fit: {c['I1']:.3f} − {c['B']:.3f}·exp(−{c['I3']:.3g} ρ)")
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
    """Write ``comparison.csv``, ``comparison.md`` (tables and claims C1-C4), one
    ``fig_<partition>.png`` per partition kind and ``configs/`` for the six methods' runs under
    ``root``; return the CSV rows (accuracies in %, rounded to 2 decimals; reward, cost and ε to 6
    significant digits; the claims are decided from these rounded numbers)."""
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
            rows.append({
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
                # the spreads behind the orderings of early accuracy, reward and cost (last, so the
                # columns before them keep their places)
                "early_acc_std": round(early[1], 2),
                "total_reward_std": _sig(reward[1]),
                "total_cost_std": _sig(cost[1]),
            })
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "comparison.csv", rows, empty_header=["partition", "method", "n_seeds", "seeds"])
    checks = evaluate_claims(rows, cells)
    kinds = _partitions(k for k, _ in cells)
    figures = [(kind, f"fig_{kind}.png") for kind in kinds if _fig_partition(cells, kind, dest / f"fig_{kind}.png")]
    md = _markdown(rows, checks, figures, budget, cells)
    atomic_write_text(dest / "comparison.md", md + "\n" + code_note(r["dir"] for runs in cells.values() for r in runs) + "\n")
    copy_configs(cells.values(), dest, root=root)
    return rows


@dataclass(frozen=True)
class ClaimCheck:
    """One statement of a claim of the paper's Sec. V-B decided from the numbers: ``holds`` is
    None when a method it needs is missing. ``partition`` is a kind, or ``"<kind> vs iid"`` for
    C3's gaps."""

    claim: str
    partition: str
    statement: str
    holds: bool | None
    numbers: str
    #: for an ordering of means with error bars: its verdict against two standard errors of the
    #: difference (holds / within two standard errors / fails), which then decides the check
    noise: str | None = None

    @property
    def verdict(self) -> str:
        if self.holds is None:
            return "undecided"
        if self.noise is not None:
            return self.noise
        return "holds" if self.holds else "fails"

    def line(self) -> str:
        return f"{self.statement}: {self.verdict} ({self.numbers})"


def _verdict(checks: list[ClaimCheck]) -> str:
    """A claim fails if one of its checks fails, is undecided if one has no numbers, is within
    two standard errors if one ordering is, and holds otherwise."""
    verdicts = [c.verdict for c in checks]
    if any(v.startswith("fails") for v in verdicts):
        return "fails"
    if "undecided" in verdicts:
        return "undecided"
    return "within two standard errors" if "within two standard errors" in verdicts else "holds"


def _worst(verdicts: list[str]) -> str:
    """The weakest of several orderings' verdicts (fails < within two standard errors < holds)."""
    for v in ("fails", "within two standard errors"):
        hit = [x for x in verdicts if x.startswith(v)]
        if hit:
            return hit[0]
    return verdicts[0] if verdicts else "holds"


def evaluate_claims(rows: list[dict[str, Any]], cells: Cells) -> list[ClaimCheck]:
    """C1-C4 (Sec. V-B) from the CSV ``rows`` (C1-C3) and the QI-DPFL runs' ``metrics.csv``
    (C4), in the order C1, C2, C3, C4 per partition, then C3's gaps across partitions."""
    by = {(r["partition"], r["method"]): r for r in rows}
    kinds = _partitions(r["partition"] for r in rows)
    out: list[ClaimCheck] = []

    def get(kind: str, method: str, key: str) -> float:
        r = by.get((kind, method))
        return _float(r[key]) if r is not None else math.nan

    # test, numbers and noise are called without arguments; Callable[..., T] rather than
    # Callable[[], T] because mypy cannot match the lambdas that bind loop variables as
    # defaults (lambda m=m: ...) to a callable of no parameters
    def check(claim: str, kind: str, statement: str, needs: dict[str, float], test: Callable[..., bool], numbers: Callable[..., str],
              noise: Callable[..., str] | None = None) -> None:
        missing = [m for m, v in needs.items() if not np.isfinite(v)]
        if missing:
            out.append(ClaimCheck(claim, kind, statement, None, "no number for " + ", ".join(missing)))
        else:
            out.append(ClaimCheck(claim, kind, statement, bool(test()), numbers(), None if noise is None else noise()))

    def above(kind: str, a: str, b: str, key: str = "final_acc") -> str:
        """Verdict on "a's ``key`` (final accuracy, early accuracy, total reward or cost) above
        b's" against two standard errors of the difference of the means over seeds."""
        ra, rb = by[(kind, a)], by[(kind, b)]
        return ordering(_float(ra[f"{key}_mean"]), _float(ra[f"{key}_std"]), int(ra["n_seeds"]),
                        _float(rb[f"{key}_mean"]), _float(rb[f"{key}_std"]), int(rb["n_seeds"]))

    def gap_se(kind: str, a: str, b: str) -> float:
        return math.sqrt(sum(_float(by[(kind, m)]["final_acc_std"]) ** 2 / int(by[(kind, m)]["n_seeds"]) for m in (a, b)))

    for kind in kinds:
        fin = {m: get(kind, m, "final_acc_mean") for m in ORDER}
        early = {m: get(kind, m, "early_acc_mean") for m in ORDER}
        reward = {m: get(kind, m, "total_reward_mean") for m in POLICIES}
        cost = {m: get(kind, m, "total_cost_mean") for m in POLICIES}
        # C1 (panel a)
        others = {m: fin[m] for m in PANEL_A if m != "FedAvg-DP" and np.isfinite(fin[m])}
        check("C1", kind, "FedAvg-DP has the lowest final accuracy of FedAvg, FedAvg-select, FedAvg-DP, QI-DPFL",
              {"FedAvg-DP": fin["FedAvg-DP"], "another method": min(others.values(), default=math.nan)},
              lambda: fin["FedAvg-DP"] < min(others.values()),
              lambda: f"FedAvg-DP {fin['FedAvg-DP']:.2f} %; " + ", ".join(f"{m} {v:.2f}" for m, v in others.items()),
              lambda: _worst([above(kind, m, "FedAvg-DP") for m in others]))
        for m in ("FedAvg-select", "QI-DPFL"):
            check("C1", kind, f"{m} above FedAvg at the end", {m: fin[m], "FedAvg": fin["FedAvg"]},
                  lambda m=m: fin[m] > fin["FedAvg"], lambda m=m: f"final {fin[m]:.2f} vs {fin['FedAvg']:.2f} %",
                  lambda m=m: above(kind, m, "FedAvg"))
            check("C1", kind, f"{m} above FedAvg over the first third of rounds (faster convergence)",
                  {m: early[m], "FedAvg": early["FedAvg"]},
                  lambda m=m: early[m] > early["FedAvg"], lambda m=m: f"mean {early[m]:.2f} vs {early['FedAvg']:.2f} %",
                  lambda m=m: above(kind, m, "FedAvg", "early_acc"))
        check("C1", kind, "QI-DPFL ≈ FedAvg-select (final accuracy within 1 point)",
              {"QI-DPFL": fin["QI-DPFL"], "FedAvg-select": fin["FedAvg-select"]},
              lambda: abs(fin["QI-DPFL"] - fin["FedAvg-select"]) <= 1.0 + _TOL,
              lambda: f"{fin['QI-DPFL']:.2f} vs {fin['FedAvg-select']:.2f} %, |difference| {abs(fin['QI-DPFL'] - fin['FedAvg-select']):.2f}")
        # C2 (panels b-d)
        check("C2", kind, "QI-DPFL final accuracy within 1 point of Max", {"QI-DPFL": fin["QI-DPFL"], "Max": fin["Max"]},
              lambda: abs(fin["QI-DPFL"] - fin["Max"]) <= 1.0 + _TOL,
              lambda: f"{fin['QI-DPFL']:.2f} vs {fin['Max']:.2f} %, |difference| {abs(fin['QI-DPFL'] - fin['Max']):.2f}")
        for what, vals, label, key in (("total cost U_T", cost, "has the lowest", "total_cost"),
                                       ("total reward", reward, "pays the lowest", "total_reward")):
            # "lowest" is each other policy above QI-DPFL, decided against its two standard errors
            check("C2", kind, f"QI-DPFL {label} {what} of QI-DPFL, Max, Random", vals,
                  lambda vals=vals: vals["QI-DPFL"] <= min(vals["Max"], vals["Random"]) * (1 + _TOL),
                  lambda vals=vals: ", ".join(f"{m} {v:.6g}" for m, v in vals.items()),
                  lambda key=key: _worst([above(kind, m, "QI-DPFL", key) for m in ("Max", "Random")]))
        check("C2", kind, "Random's total reward lies between QI-DPFL's and Max's (mean over seeds)", reward,
              lambda: reward["QI-DPFL"] <= reward["Random"] * (1 + _TOL) and reward["Random"] <= reward["Max"] * (1 + _TOL),
              lambda: f"QI-DPFL {reward['QI-DPFL']:.6g}, Random {reward['Random']:.6g}, Max {reward['Max']:.6g}",
              lambda: _worst([above(kind, "Random", "QI-DPFL", "total_reward"), above(kind, "Max", "Random", "total_reward")]))
        # C3 (per partition)
        check("C3", kind, "QI-DPFL above FedAvg-DP at the end (effect of screening)",
              {"QI-DPFL": fin["QI-DPFL"], "FedAvg-DP": fin["FedAvg-DP"]},
              lambda: fin["QI-DPFL"] > fin["FedAvg-DP"], lambda: f"{fin['QI-DPFL']:.2f} vs {fin['FedAvg-DP']:.2f} %",
              lambda: above(kind, "QI-DPFL", "FedAvg-DP"))
        # C4
        out.append(_c4(kind, cells.get((kind, "QI-DPFL"), [])))
    # C3: the gaps, every non-IID partition against IID
    if "iid" in kinds:
        for kind in (k for k in kinds if k != "iid"):
            for a, b in C3_GAPS:
                g_iid = get("iid", a, "final_acc_mean") - get("iid", b, "final_acc_mean")
                g_non = get(kind, a, "final_acc_mean") - get(kind, b, "final_acc_mean")
                check("C3", f"{kind} vs iid", f"gap {a} − {b} larger under {_label(kind)} than IID",
                      {f"{a} − {b} ({_label(kind)})": g_non, f"{a} − {b} (IID)": g_iid},
                      lambda g_non=g_non, g_iid=g_iid: g_non > g_iid,
                      lambda g_non=g_non, g_iid=g_iid: f"{g_non:.2f} vs {g_iid:.2f} points",
                      lambda g_non=g_non, g_iid=g_iid, a=a, b=b, kind=kind: verdict(
                          g_non - g_iid, math.hypot(gap_se(kind, a, b), gap_se("iid", a, b))))
    return out


def _c4(kind: str, runs: list[dict[str, Any]]) -> ClaimCheck:
    """C4 on every QI-DPFL run: R_t ≥ R_{t−1} for every t before the first round with
    R_t ≥ R_max,t (relative tolerance 1e-9); rounds are numbered from 1."""
    statement = "QI-DPFL reward R_t non-decreasing in t until it reaches R_max,t"
    runs = [r for r in runs if r["metrics"] and "reward" in r["metrics"][0]]
    if not runs:
        return ClaimCheck("C4", kind, statement, None, "no QI-DPFL run with a reward column")
    ok, parts = True, []
    for r in runs:
        R, R_max = _column(r, "reward"), _column(r, "R_max")
        reached = np.flatnonzero(np.isfinite(R_max) & (R >= R_max * (1 - _TOL)))
        stop = int(reached[0]) if reached.size else R.size
        falls = [t for t in range(1, min(stop + 1, R.size)) if R[t] < R[t - 1] * (1 - _TOL)]
        where = f"R_max reached at round {stop + 1}" if reached.size else "R_max not reached"
        if falls:
            ok = False
            t = falls[0]
            parts.append(f"seed {r['seed']}: falls at round {t + 1} ({R[t - 1]:.4g} → {R[t]:.4g}), {where}")
        else:
            parts.append(f"seed {r['seed']}: non-decreasing, {where}")
    return ClaimCheck("C4", kind, statement, ok, "; ".join(parts))


# -- markdown --------------------------------------------------------------------------------
def _fmt(x: Any, spec: str) -> str:
    v = _float(x)
    return "—" if not np.isfinite(v) else format(v, spec)


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
        out += [f"## {_label(kind)} (`{kind}`{', ' + extra if extra else ''})", "",
                "| method | seeds | final accuracy (%) | accuracy over first third of rounds (%) | total reward Σ R_t | "
                "total cost U_T | participants per round | mean ρ_i^tot | ε max (δ) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["partition"] == kind):
            out.append(f"| {r['method']} | {r['n_seeds']} | {_fmt(r['final_acc_mean'], '.2f')} ± {_fmt(r['final_acc_std'], '.2f')} | "
                       f"{_fmt(r['early_acc_mean'], '.2f')} | {_fmt(r['total_reward_mean'], '.6g')} | "
                       f"{_fmt(r['total_cost_mean'], '.6g')} | {_fmt(r['participants_mean'], '.2f')} | "
                       f"{_fmt(r['rho_tot_mean'], '.4g')} | {_fmt(r['epsilon_max_mean'], '.4g')} |")
        out += ["", "### Claims (Sec. V-B)", ""]
        for claim in ("C1", "C2", "C3", "C4"):
            mine = [c for c in checks if c.claim == claim and c.partition == kind]
            if mine:
                out.append(f"- **{claim}: {_verdict(mine)}.**")
                out += [f"  - {c.line()}" for c in mine]
        if kind in pictures:
            out += ["", f"![QI-DPFL, {_label(kind)}]({pictures[kind]})"]
        out += _game_report(cells, kind)
        out.append("")
    across = [c for c in checks if " vs " in c.partition]
    if across:
        out += ["## Across partitions", "", f"- **C3 (gaps larger under Non-IID): {_verdict(across)}.**"]
        out += [f"  - {c.line()}" for c in across]
        out.append("")
    r0 = rows[0]
    out += [f"Final accuracy: the last round's test accuracy; the first third of rounds: rounds 1 to ⌈{r0['rounds']}/3⌉ "
            f"= {math.ceil(int(r0['rounds']) / 3)}. "
            "Total reward and cost are sums over the rounds of each run's `reward` and `cost_u_t` "
            "(server cost u_t, the summand of Eq. 15), then means over seeds; ε max is the summaries' `epsilon_max`. "
            "Accuracies compare at 2 decimals as in comparison.csv; ties count as lowest. Seeds per cell "
            "are in comparison.csv; the configs are in configs/.", ""]
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
    out = ["", f"#### Screening and game report (seed {runs[0]['seed']})", "",
           "θ per candidate (EMD to the pooled label distribution): "
           + ", ".join(f"{i}: {e:.3f}" for i, e in enumerate(plan["emd"]) if e is not None)
           + f". θ_th = {th:.3f}; kept {len(kept)} of {len(plan['emd'])}: {kept}.", ""]
    npz = runs[0]["dir"] / "qidpfl.npz"
    if npz.exists():
        arr = np.load(npz)
        g = arr["rho"][:, 0] / arr["reward"][0]
        out += ["Slopes G_i = ρ_i^t / R_t (round 1; constant ν): "
                + ", ".join(f"{i}: {v:.4g}" for i, v in enumerate(g) if v > 0) + ".", ""]
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
