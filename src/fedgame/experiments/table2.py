"""FedPCS Table II (Fashion-MNIST rows): our accuracies beside the paper's.

``fedgame report RUNS --kind table2 --out results/...`` reads every finished run
under RUNS (``summary.json`` + ``config.yaml``), groups them by (method, τ, split), and writes
``table2.csv`` (one row per cell: ours mean ± std over seeds, the paper's mean ± std, the
difference, the largest aggregation weight of the run) and ``table2.md`` (Table II's shape,
"ours / paper" per cell) into ``--dest``, with the configs and seeds that produced them.

Beside the paper's five methods (baselines with the clients outside the game,
``baseline_rho: initial``; docs/fedpcs.md, 'Baseline budgets and the sampling ablations'), extra
rows: a baseline whose clients play the game against uniform sampling (``game``) or sit at ρ_L
(``low``) is "<method> (game ρ)" / "<method> (ρ_L)", and the sampling ablations
(``recipes/fedpcs/ablation_*.yaml``) have rows of their own, without paper numbers.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fedgame.experiments.claims import COLUMNS, ORDERINGS, Decision, decide, holm, rule_note, write_orderings
from fedgame.incentives.fedpcs.plugin import FedPCSPlan, same_plan
from fedgame.pipeline.store import atomic_write_text
from fedgame.pipeline.results import code_note, finished_runs

__all__ = [
    "CLAIMS",
    "PAPER_TABLE2_FMNIST",
    "claims_markdown",
    "collect",
    "copy_configs",
    "orderings",
    "per_seed",
    "write_rows_csv",
    "write_table2",
]

#: Table II of Yuan & Wang (Sec. VIII-C), Fashion-MNIST: τ → method → (IID, Non-IID),
#: each (mean, std) in %.
PAPER_TABLE2_FMNIST: dict[float, dict[str, tuple[tuple[float, float], tuple[float, float]]]] = {
    0.2: {
        "Random": ((74.69, 0.78), (72.79, 0.43)),
        "AOCS": ((78.62, 0.26), (76.32, 0.31)),
        "Fed-CBS": ((78.87, 0.34), (76.88, 0.25)),
        "DELTA": ((82.71, 0.11), (80.31, 0.07)),
        "FedPCS": ((84.43, 0.18), (83.35, 0.22)),
    },
    0.5: {
        "Random": ((80.51, 0.07), (77.69, 0.08)),
        "AOCS": ((82.25, 0.29), (80.95, 0.19)),
        "Fed-CBS": ((82.63, 0.54), (80.43, 0.49)),
        "DELTA": ((83.76, 0.16), (81.48, 0.23)),
        "FedPCS": ((86.20, 0.34), (85.14, 0.28)),
    },
    0.8: {
        "Random": ((82.20, 0.22), (80.28, 0.09)),
        "AOCS": ((82.23, 0.02), (81.17, 0.06)),
        "Fed-CBS": ((83.72, 0.10), (81.59, 0.04)),
        "DELTA": ((84.14, 0.48), (83.05, 0.37)),
        "FedPCS": ((87.33, 0.16), (85.82, 0.13)),
    },
}

#: recipe name (before any "[grid]" suffix) → Table II column (``random_game``: the Random
#: recipe run with ``incentive.baseline_rho: game`` under its own name, scripts/fedpcs_table2.sh)
METHODS = {
    "fedpcs": "FedPCS",
    "random": "Random",
    "random_game": "Random",
    "aocs": "AOCS",
    "fedcbs": "Fed-CBS",
    "delta": "DELTA",
    "ablation_uniform": "FedPCS incentive + uniform draws",
    "ablation_fedavg_weights": "FedPCS + FedAvg weights",
    "central_dp": "Central DP-FedAvg",
}
#: the paper's columns, in its order; other methods are extra rows after them
PAPER_METHODS = ("Random", "AOCS", "Fed-CBS", "DELTA", "FedPCS")
#: a baseline's ``incentive.baseline_rho`` (docs/fedpcs.md, 'Baseline budgets') → suffix of its row (``initial``: none)
BASELINE_RHO_SUFFIX = {"initial": "", "low": " (ρ_L)", "game": " (game ρ)"}
SPLITS = {"iid": "IID", "dirichlet": "Non-IID"}


def baseline_rho_of(cfg: dict[str, Any]) -> str:
    """The ``incentive.baseline_rho`` a run's resolved config ran with. A FedPCS-game config
    written before the field existed had its baselines play the game against uniform sampling:
    ``game``."""
    inc = cfg.get("incentive") or {}
    return str(inc.get("baseline_rho", "game" if inc.get("kind") == "fedpcs" else "initial"))


def method_of(name: str, cfg: dict[str, Any]) -> tuple[str, str | None] | None:
    """(row label, the paper's column it is compared with) of a run named ``name`` (before any
    "[grid]" suffix) with resolved config ``cfg``; None for recipes that are not Table II's."""
    base = METHODS.get(name)
    if base is None:
        return None
    if base in PAPER_METHODS and base != "FedPCS":
        return base + BASELINE_RHO_SUFFIX.get(baseline_rho_of(cfg), f" ({baseline_rho_of(cfg)})"), base
    return base, base if base in PAPER_METHODS else None


def _max_agg_weight(run_dir: Path) -> float:
    """The largest aggregation weight any upload got in the run (``max_agg_weight`` of
    metrics.csv; docs/fedpcs.md, 'Baseline budgets and the sampling ablations'); NaN when the
    run did not log it."""
    from fedgame.pipeline.store import read_metrics

    path = run_dir / "metrics.csv"
    w = [float(r["max_agg_weight"]) for r in read_metrics(path) if r.get("max_agg_weight", "") != ""] if path.exists() else []
    w = [v for v in w if np.isfinite(v)]
    return max(w) if w else float("nan")


def collect(root: Path) -> dict[tuple[str, float, str], list[dict[str, Any]]]:
    """Finished runs under ``root`` grouped by (method, τ, split)."""
    cells: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    for run in finished_runs(root):
        cfg = run.cfg
        found = method_of(run.name, cfg)
        split = SPLITS.get(cfg["data"]["partition"]["kind"])
        if found is None or split is None:
            continue
        method, paper = found
        tau = round(cfg["train"]["clients_per_round"] / cfg["data"]["partition"]["n_clients"], 3)
        cells[(method, tau, split)].append(
            {
                "seed": run.seed,
                "acc": run.acc,
                "cfg": cfg,
                "dir": run.dir,
                "paper": paper,
                "max_agg_weight": _max_agg_weight(run.dir),
            }
        )
    return cells


def per_seed(cells: dict[tuple[str, float, str], list[dict[str, Any]]]) -> dict[tuple[str, float, str], dict[int, float]]:
    """``{cell: {seed: final accuracy in %}}`` of :func:`collect`'s cells: what the orderings
    are decided from (paired by seed where two cells share seeds)."""
    return {key: {int(r["seed"]): float(r["acc"]) for r in runs} for key, runs in cells.items()}


def write_table2(root: Path, dest: Path, *, budget: str) -> list[dict[str, Any]]:
    cells = collect(root)
    rows: list[dict[str, Any]] = []
    for (method, tau, split), runs in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        acc = np.array([r["acc"] for r in runs])
        column = runs[0]["paper"]
        paper = PAPER_TABLE2_FMNIST.get(tau, {}).get(column) if column is not None else None
        pm, ps = (paper[0] if split == "IID" else paper[1]) if paper else (float("nan"), float("nan"))
        cfg = runs[0]["cfg"]
        rows.append(
            {
                "dataset": "Fashion-MNIST",
                "tau": tau,
                "method": method,
                "split": split,
                "ours_mean": round(float(acc.mean()), 2),
                "ours_std": round(float(acc.std(ddof=1)) if acc.size > 1 else 0.0, 2),
                "seeds": " ".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"])),
                "paper_mean": pm,
                "paper_std": ps,
                "ours_minus_paper": round(float(acc.mean()) - pm, 2),
                "rounds": cfg["train"]["rounds"],
                "local": json.dumps(cfg["train"]["local"]),
                "budget": budget,
                "max_agg_weight": round(float(np.mean([r["max_agg_weight"] for r in runs])), 4),
            }
        )
    dest.mkdir(parents=True, exist_ok=True)
    write_rows_csv(dest / "table2.csv", rows, empty_header=["dataset"])
    write_orderings(dest / ORDERINGS, orderings(per_seed(cells)))
    plans = _plan_sentence(cells)
    atomic_write_text(
        dest / "table2.md",
        _markdown(rows, budget, per_seed(cells), [r["cfg"] for runs in cells.values() for r in runs])
        + "\n"
        + (f"{plans}\n\n" if plans else "")
        + code_note(r["dir"] for runs in cells.values() for r in runs)
        + "\n",
    )
    _figures(cells, dest)
    copy_configs(cells.values(), dest)
    return rows


def copy_configs(cells: Iterable[Iterable[dict[str, Any]]], dest: Path, *, root: Path | None = None) -> None:
    """Copy the ``config.yaml`` of every run (a dict with its folder under ``"dir"``) that
    produced a table cell into ``dest/configs/<cell folder>__<seed folder>.yaml``; with ``root``,
    into ``dest/configs/<run folder relative to root, parts joined by __>.yaml`` instead, so runs
    of several grids under one root (``grid_a/x/seed_0``, ``grid_b/x/seed_0``) keep apart."""
    for runs in cells:
        for r in runs:
            parts = Path(r["dir"]).relative_to(root).parts if root is not None else ()
            name = "__".join(parts) if parts else f"{r['dir'].parent.name}__{r['dir'].name}"
            (dest / "configs").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(r["dir"] / "config.yaml", dest / "configs" / f"{name}.yaml")


def _figures(cells: dict[tuple[str, float, str], list[dict[str, Any]]], dest: Path) -> None:
    """Fig. 6 (expected server cost per round, per method and τ, from the solved games) and
    Figs. 9-10 style accuracy / loss curves (one panel per τ; mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedgame.pipeline.store import read_metrics
    from fedgame.incentives.fedpcs import FedPCSPlan

    taus = sorted({k[1] for k in cells})
    if not taus:
        return
    fig, axes = plt.subplots(1, len(taus), figsize=(4 * len(taus), 3.2), squeeze=False)
    for ax, tau in zip(axes[0], taus):
        for (method, t, split), runs in sorted(cells.items()):
            if t != tau or split != "IID":
                continue  # the game does not depend on the split (κ = (Σ|D|)²)
            game = runs[0]["dir"] / "game.npz"
            if game.exists():
                plan = FedPCSPlan.load(game)
                ax.plot(np.arange(plan.cost.size), plan.cost, label=method)
        ax.set_title(f"τ = {tau}", fontsize=9)
        ax.set_xlabel("round t")
        ax.set_ylabel("expected server cost (Eq. 13)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dest / "fig6_server_cost.png", dpi=90)
    plt.close(fig)

    _fig4(cells, dest, plt)

    for key, ylabel, name in (("test_acc", "test accuracy (%)", "fig9_accuracy.png"), ("train_loss", "training loss", "fig9_loss.png")):
        fig, axes = plt.subplots(1, len(taus), figsize=(4 * len(taus), 3.2), squeeze=False)
        for ax, tau in zip(axes[0], taus):
            for (method, t, split), runs in sorted(cells.items()):
                if t != tau:
                    continue
                curves = []
                for r in runs:
                    m = read_metrics(r["dir"] / "metrics.csv")
                    pts = [(x["round"] + 1, x[key]) for x in m if np.isfinite(x.get(key, np.nan))]
                    curves.append(pts)
                xs = [p[0] for p in curves[0]]
                ys = np.mean([[p[1] for p in c] for c in curves if len(c) == len(xs)], axis=0)
                ax.plot(
                    xs,
                    ys * (100.0 if key == "test_acc" else 1.0),
                    marker="o",
                    ms=3,
                    ls="-" if split == "IID" else "--",
                    label=f"{method} {split}",
                )
            ax.set_title(f"τ = {tau}", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(dest / name, dpi=90)
        plt.close(fig)


def spent_rho(run_dir: Path) -> np.ndarray | None:
    """(N, T) matrix of the zCDP level each client actually spent per round: ρ_i^t of the run's
    game when client i uploaded in round t, else 0 (None without a game or metrics)."""
    import json as _json

    from fedgame.pipeline.store import read_metrics
    from fedgame.incentives.fedpcs import FedPCSPlan

    game, metrics = run_dir / "game.npz", run_dir / "metrics.csv"
    if not (game.exists() and metrics.exists()):
        return None
    rho = np.asarray(FedPCSPlan.load(game).rho, dtype=np.float64)
    rows = read_metrics(metrics)
    out = np.zeros((rho.shape[0], len(rows)))
    for j, r in enumerate(rows):
        t = int(r["round"])
        sel = np.unique(np.asarray(_json.loads(r["selected"]), dtype=np.int64))
        out[sel, j] = rho[sel, min(t, rho.shape[1] - 1)]
    return out


def _fig4(cells: dict[tuple[str, float, str], list[dict[str, Any]]], dest: Path, plt: Any) -> None:
    """Fig. 4: N×N Pearson correlation of the clients' realised ρ trajectories over rounds
    (ρ_i^t when client i uploads in round t, else 0), Non-IID, the smallest τ, first seed, for
    Random, Fed-CBS, DELTA and FedPCS. The game fixes ρ_i^t for everyone; which of those levels
    are *spent* is decided by the sampler, so this is where the methods differ."""
    if not cells:
        return
    tau = min(k[1] for k in cells)
    shown = [m for m in ("Random", "Fed-CBS", "DELTA", "FedPCS") if (m, tau, "Non-IID") in cells]
    spent = {m: spent_rho(min(cells[(m, tau, "Non-IID")], key=lambda r: r["seed"])["dir"]) for m in shown}
    mats = {m: v for m, v in spent.items() if v is not None}
    if not mats:
        return
    fig, axes = plt.subplots(1, len(mats), figsize=(3.2 * len(mats), 3.0), squeeze=False)
    im = None
    for ax, (m, v) in zip(axes[0], mats.items()):
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.nan_to_num(np.corrcoef(v), nan=0.0)
        off = c[~np.eye(c.shape[0], dtype=bool)]
        im = ax.imshow(c, vmin=-1, vmax=1, cmap="coolwarm")
        ax.set_title(f"{m} (τ = {tau}, Non-IID)\nmean off-diagonal r = {off.mean():.2f}", fontsize=7)
        ax.set_xlabel("client")
        ax.set_ylabel("client")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    fig.savefig(dest / "fig4_rho_correlation.png", dpi=90)
    plt.close(fig)


def write_rows_csv(path: Path, rows: list[dict[str, Any]], *, empty_header: list[str]) -> None:
    """Write ``rows`` (dicts sharing the first row's keys) as CSV, atomically; a header of
    ``empty_header`` alone when there are no rows."""
    header = list(rows[0]) if rows else empty_header
    lines = [",".join(header)] + [",".join(_csv(r[h]) for h in header) for r in rows]
    atomic_write_text(path, "\n".join(lines) + "\n")


def _csv(v: Any) -> str:
    s = str(v)
    return f'"{s.replace(chr(34), chr(34) * 2)}"' if ("," in s or '"' in s) else s


def _privacy_sentence(cfgs: list[dict[str, Any]]) -> str:
    """What the runs' upload noise was, read from their configs: the reading of FedPCS's
    Prop. 1 (``privacy.mode``) and the clip W, each with how many runs used it."""
    seen: Counter[tuple[str, str, float]] = Counter()
    for cfg in cfgs:
        p = cfg.get("privacy") or {}
        seen[(str(p.get("kind")), str(p.get("mode", "")), float(p.get("clip", float("nan"))))] += 1
    what = {
        "paper_params": "the local model's parameters clipped to norm W and noised (Prop. 1 / Eq. 46 read literally)",
        "paper_update": "the local update clipped to norm W and noised",
    }
    parts = [
        f"{kind} (the server clips each update to C = {clip:g} and noises their sum; user-level ε, every client alike) "
        f"({n} run{'s' * (n != 1)})"
        if kind == "central_dp"
        else f"{kind} with {what.get(mode, f'mode {mode}')}, W = {clip:g} ({n} run{'s' * (n != 1)})"
        for (kind, mode, clip), n in sorted(seen.items())
    ]
    return "Upload noise: " + "; ".join(parts) + " (docs/fedpcs.md, 'The paper's regime')."


def _baseline_sentence(present: set[str]) -> str:
    """Where the baselines' clients stand, from the rows present (each row's suffix is its
    runs' ``incentive.baseline_rho``)."""
    base = [m for m in present if m.split(" (")[0] in PAPER_METHODS and m.split(" (")[0] != "FedPCS"]
    out = []
    if any(" (" not in m for m in base):
        out.append("rows without a suffix keep their clients' initial budgets ρ_i⁰, unpaid (`baseline_rho: initial`)")
    if any(m.endswith("(game ρ)") for m in base):
        out.append('"(game ρ)" rows have their clients play the game against uniform sampling (`baseline_rho: game`)')
    if any(m.endswith("(ρ_L)") for m in base):
        out.append('"(ρ_L)" rows sit at ρ_L (`baseline_rho: low`)')
    return "Baselines: " + "; ".join(out) + " (docs/fedpcs.md, 'Baseline budgets and the sampling ablations')." if out else ""


#: what each extra row (a method the paper does not have) is, for the sentence under the table
EXTRA_ROWS = {
    "FedPCS incentive + uniform draws": "FedPCS's incentive with uniform draws (a sampling ablation)",
    "FedPCS + FedAvg weights": "x ∝ ρ with FedAvg weights θ_i/Σ_S θ instead of Eq. (4) (a sampling ablation)",
    "Central DP-FedAvg": "the field's standard baseline: the server clips each update and noises their sum, "
    "user-level ε alike for every client (recipes/fedpcs/central_dp.yaml)",
}


def _plan_sentence(cells: dict[tuple[str, float, str], list[dict[str, Any]]]) -> str:
    """Which game plan each cell whose clients play the game played, from the runs' ``game.npz``
    (a baseline's fixed budgets are not a played game): whether every seed's cells of one τ and
    sampling rule share one plan, and where they do not, which cells played which. The solve can
    end at another local optimum on another CPU kind, and a pairwise ordering is a comparison of
    one plan only where both sides played it (docs/fedpcs.md, 'The paper's regime')."""
    groups: dict[tuple[float, int, str], list[tuple[str, FedPCSPlan]]] = defaultdict(list)
    for (method, tau, split), runs in sorted(cells.items()):
        for r in runs:
            path = r["dir"] / "game.npz"
            if path.exists():
                plan = FedPCSPlan.load(path)
                if plan.extras.get("baseline_rho", "game") == "game":
                    groups[(tau, int(r["seed"]), plan.inclusion)].append((f"{method} {split}", plan))
    if not groups:
        return ""
    split_up = []
    for (tau, seed, inclusion), played in sorted(groups.items()):
        distinct: list[tuple[FedPCSPlan, list[str]]] = []
        for cell, plan in played:
            same = next((names for p, names in distinct if same_plan(p, plan)), None)
            if same is None:
                distinct.append((plan, [cell]))
            else:
                same.append(cell)
        if len(distinct) > 1:
            parts = "; ".join(f"{', '.join(names)} (R_1 = {p.reward[1]:.2f})" for p, names in distinct)
            split_up.append(f"τ = {tau}, seed {seed}, {inclusion} sampling: {len(distinct)} plans — {parts}")
    n = sum(len(v) for v in groups.values())
    if not split_up:
        return f"Game plans: the {n} runs whose clients play the game share one plan per seed (per τ and sampling rule)."
    return (
        f"Game plans (the {n} runs whose clients play the game; solved on different CPUs, a seed's game can end at "
        "different local optima): " + " | ".join(split_up) + "; every other seed's cells share one plan."
    )


def _extra_sentence(extras: list[str]) -> str:
    """What the extra rows present are (none: no sentence)."""
    if not extras:
        return ""
    what = "; ".join(f"{m}: {EXTRA_ROWS.get(m, 'not in the paper')}" for m in extras)
    ablation = any(m in extras for m in ("FedPCS incentive + uniform draws", "FedPCS + FedAvg weights"))
    tail = "; table2.csv's max_agg_weight is the largest aggregation weight an upload got (mean over seeds)" if ablation else ""
    return f"Extra rows (no paper numbers): {what}{tail}."


def _markdown(
    rows: list[dict[str, Any]], budget: str, values: dict[tuple[str, float, str], dict[int, float]], cfgs: list[dict[str, Any]]
) -> str:
    present = {r["method"] for r in rows}
    methods = [m for m in PAPER_METHODS if m in present] + sorted(present - set(PAPER_METHODS))
    taus = sorted({r["tau"] for r in rows})
    by = {(r["method"], r["tau"], r["split"]): r for r in rows}
    cols = [f"{m} {s}" for m in methods for s in ("IID", "Non-IID")]
    out = [
        f"# FedPCS Table II, Fashion-MNIST — ours / paper (test accuracy %, mean ± std over seeds; budget: {budget})",
        "",
        "| τ | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for tau in taus:
        cells = []
        for m in methods:
            for s in ("IID", "Non-IID"):
                r = by.get((m, tau, s))
                if r is None:
                    cells.append("—")
                else:
                    # one seed has no spread: say so instead of printing ±0.00
                    one = len(str(r["seeds"]).split()) == 1
                    ours = f"{r['ours_mean']:.2f} (1 seed)" if one else f"{r['ours_mean']:.2f}±{r['ours_std']:.2f}"
                    if np.isnan(r["paper_mean"]):
                        cells.append(ours)  # an extra row: no paper number
                    else:
                        cells.append(f"{ours} / {r['paper_mean']:.2f}±{r['paper_std']:.2f}")
        out.append(f"| {tau} | " + " | ".join(cells) + " |")
    if rows:
        r0 = rows[0]
        out += [
            "",
            f"Each cell: {r0['rounds']} rounds, local training {r0['local']}; seeds per cell listed in table2.csv; "
            "the configs are in configs/.",
            "",
            _privacy_sentence(cfgs),
            "",
            *[b for b in (_baseline_sentence(present),) if b],
            *[e for e in (_extra_sentence([m for m in methods if m.split(" (")[0] not in PAPER_METHODS]),) if e],
            "",
            "![Fig. 4](fig4_rho_correlation.png)",
            "",
            "![Fig. 6](fig6_server_cost.png)",
            "",
            "![Fig. 9, test accuracy](fig9_accuracy.png)",
            "",
            "![Fig. 9, training loss](fig9_loss.png)",
        ]
        out += [""] + claims_markdown(orderings(values))
    return "\n".join(out) + "\n"


#: (A, B, what "A above B" measures): the paper's claims, then the ablations' decomposition
CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("FedPCS", "Random", "the paper's headline"),
    ("FedPCS", "AOCS", "Table II"),
    ("FedPCS", "Fed-CBS", "Table II"),
    ("FedPCS", "DELTA", "Table II"),
    ("FedPCS", "Random (game ρ)", "against Random whose clients play the game"),
    ("FedPCS incentive + uniform draws", "Random", "the incentive alone (same uniform draws, the game's ρ instead of ρ⁰)"),
    ("FedPCS", "FedPCS incentive + uniform draws", "the sampling rule x ∝ ρ with Eq. 4's weights, given the incentive"),
    ("FedPCS + FedAvg weights", "FedPCS", "FedAvg weights θ/Σ_S θ instead of Eq. 4 under x ∝ ρ"),
)


#: the paper's claims (FedPCS above each baseline of Table II); the other rows of :data:`CLAIMS`
#: decompose FedPCS into its parts and form their own Holm family, so that adding a diagnostic
#: ordering does not dilute the test of what the paper claims
PAPER_CLAIMS = frozenset({("FedPCS", "Random"), ("FedPCS", "AOCS"), ("FedPCS", "Fed-CBS"), ("FedPCS", "DELTA")})


def orderings(values: dict[tuple[str, float, str], dict[int, float]]) -> list[tuple[dict[str, Any], Decision]]:
    """Every ordering of :data:`CLAIMS` the table can decide, per (τ, split), from the cells'
    per-seed accuracies ``values`` (``{(method, τ, split): {seed: accuracy in %}}``, as
    :func:`per_seed` gives), decided by :func:`~fedgame.experiments.claims.decide`, p
    Holm-adjusted within its family (``family``: the paper's claims, :data:`PAPER_CLAIMS`, or
    the decomposition): (labels τ, split, A, B, family, what; decision)."""
    found: list[dict[str, Any]] = []
    decisions: list[Decision] = []
    for tau in sorted({t for _, t, _ in values}):
        for split in ("IID", "Non-IID"):
            for a, b, what in CLAIMS:
                va, vb = values.get((a, tau, split)), values.get((b, tau, split))
                if va is None or vb is None:
                    continue
                family = "paper" if (a, b) in PAPER_CLAIMS else "decomposition"
                found.append({"tau": tau, "split": split, "a": a, "b": b, "family": family, "what": what})
                decisions.append(decide(va, vb))
    out = list(decisions)
    for family in ("paper", "decomposition"):
        idx = [i for i, lab in enumerate(found) if lab["family"] == family]
        for i, d in zip(idx, holm([decisions[i] for i in idx]), strict=True):
            out[i] = d
    return list(zip(found, out, strict=True))


def claims_markdown(decided: list[tuple[dict[str, Any], Decision]]) -> list[str]:
    """The section of table2.md listing :func:`orderings`' rows, the paper's claims first: the
    difference, its 95 % interval, the test, p (Holm-adjusted within the family) and the verdict,
    then the rule in words for each family."""
    if not decided:
        return []
    head = [
        "| τ | split | A | B | " + " | ".join(("A − B (points)", *COLUMNS[1:])) + " | what it measures |",
        "|---|---|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    out = ["## Orderings, decided from the per-seed accuracies (A above B)"]
    for family, title, where in (
        ("paper", "The paper's claims", "family (the paper's claims)"),
        ("decomposition", "What FedPCS's parts add (ours, not the paper's)", "family (the decomposition)"),
    ):
        rows = [(lab, d) for lab, d in decided if lab["family"] == family]
        if not rows:
            continue
        out += ["", f"### {title}", "", *head]
        out += [
            f"| {lab['tau']} | {lab['split']} | {lab['a']} | {lab['b']} | " + " | ".join(d.cells()) + f" | {lab['what']} |"
            for lab, d in rows
        ]
        out += ["", rule_note([d for _, d in rows], where=where)]
    return out
