"""Markdown reports with matplotlib figures for one or more run folders.

``fedgame report DIR...`` writes ``report.md`` beside the figures it draws: test accuracy,
test loss and training loss vs round, the partition's label distribution (clients × classes),
ε spent per client, and how often each client was selected. Rounds are numbered as in
``metrics.csv`` (from 0) in every figure; runs are labelled by their recipe name and seed. Runs with a
FedPCS game (``game.npz``) add the paper's game figures (FedPCS Sec. VIII-B): Fig. 3 (φ over
the fixed-point iterations), Fig. 4 (correlation of the clients' ρ trajectories), Fig. 5
(social welfare per round: equilibrium, social optimum), Figs. 7-8 (budget used / remaining
and τ(t), when the run had a budget).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedgame.pipeline.results import code_note  # noqa: E402
from fedgame.pipeline.runner import markdown_table, summarise_grid  # noqa: E402
from fedgame.pipeline.store import ResultStore, atomic_write_text, read_metrics  # noqa: E402

__all__ = ["find_runs", "write_report"]


def _eps(value: float | None, summary: dict[str, Any]) -> str:
    """ε for a table cell: ``∞`` where no privacy was given (accounting ``none``: ``null`` in a
    run's summary, ``0`` in the summaries of runs written before ε = 0 was no longer reported for
    them), else three significant digits."""
    return "∞" if value is None or summary.get("privacy_accounting") == "none" else f"{value:.3g}"


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders (those with ``metrics.csv``) at or below each path, sorted."""
    runs: list[Path] = []
    for p in paths:
        if (p / "metrics.csv").exists():
            runs.append(p)
        else:
            runs.extend(sorted(q.parent for q in p.rglob("metrics.csv")))
    return list(dict.fromkeys(runs))


def _labels(run_dirs: list[Path], roots: list[Path]) -> dict[Path, str]:
    """Each run's legend label: its recipe name and seed (from summary.json or config.yaml),
    or its folder relative to the roots where two runs would share a label."""
    import yaml

    named: dict[Path, str] = {}
    for d in run_dirs:
        meta: dict[str, Any] = {}
        if (d / "summary.json").exists():
            meta = json.loads((d / "summary.json").read_text())
        elif (d / "config.yaml").exists():
            meta = yaml.safe_load((d / "config.yaml").read_text()) or {}
        named[d] = f"{meta['name']} (seed {meta.get('seed', 0)})" if "name" in meta else _label(d, roots)
    values = list(named.values())
    return {d: (v if values.count(v) == 1 else _label(d, roots)) for d, v in named.items()}


def _rounds_axis(ax: Any, last: int | None = None) -> None:
    """Integer round ticks (rounds from 0, as in metrics.csv); the axis spans every round run."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if last is not None:
        ax.set_xlim(-0.5, max(last, 1) + 0.5)


def _label(run: Path, roots: list[Path]) -> str:
    for r in roots:
        try:
            rel = run.relative_to(r)
            return str(rel) if str(rel) != "." else run.name
        except ValueError:
            continue
    return run.name


def _load(run: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"metrics": read_metrics(run / "metrics.csv")}
    if (run / "partition.json").exists():
        part = json.loads((run / "partition.json").read_text())
        if "label_counts" in part:
            out["label_counts"] = np.asarray(part["label_counts"], dtype=np.int64)
    if (run / "summary.json").exists():
        out["summary"] = json.loads((run / "summary.json").read_text())
    if (run / "privacy.csv").exists():
        out["privacy"] = read_metrics(run / "privacy.csv")
    if (run / "game.npz").exists():
        from fedgame.incentives.fedpcs import FedPCSPlan

        out["game"] = FedPCSPlan.load(run / "game.npz")
    return out


def _save(fig: Any, out: Path, name: str, caption: str, figs: list[tuple[str, str]]) -> None:
    """Write ``fig`` to ``out/name``, close it, and list it under ``caption`` in the report."""
    fig.savefig(out / name, dpi=100)
    plt.close(fig)
    figs.append((caption, name))


def _game_figures(runs: dict[str, dict[str, Any]], out: Path) -> list[tuple[str, str]]:
    """FedPCS Figs. 3, 4, 5 and 7-8 for the runs that carry a game plan (one per label)."""
    games = {k: v["game"] for k, v in runs.items() if "game" in v}
    if not games:
        return []
    figs: list[tuple[str, str]] = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, g in games.items():
        h = np.asarray(g.phi_history)
        if h.ndim == 2 and h.shape[0] > 0:
            axes[0].plot(np.arange(1, h.shape[0] + 1), h[:, min(1, h.shape[1] - 1)], marker="o", ms=3, label=f"{label} φ(1)")
            axes[1].plot(np.arange(h.shape[1]), h[-1], label=label)
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    _rounds_axis(axes[1])
    axes[0].set_xlabel("fixed-point iteration")
    axes[0].set_ylabel("φ(1)")
    axes[0].set_title("Fig. 3: mean-field estimate over iterations", fontsize=9)
    axes[1].set_xlabel("round t")
    axes[1].set_ylabel("φ(t)")
    axes[1].set_title("the mean field at convergence", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, out, "fig3_mean_field.png", "Fig. 3 — mean-field fixed point", figs)

    shown = dict(list(games.items())[:4])
    fig, axes = plt.subplots(1, len(shown), figsize=(3.4 * len(shown) + 0.8, 4.0), squeeze=False, layout="constrained")
    for i, (ax, (label, g)) in enumerate(zip(axes[0], shown.items())):
        rho = np.asarray(g.rho)
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.corrcoef(rho)
        im = ax.imshow(np.nan_to_num(c, nan=0.0), vmin=-1, vmax=1, cmap="coolwarm")
        ax.set_title(textwrap.fill(f"{label} ({g.inclusion} sampling)", 34), fontsize=7)
        ax.set_xlabel("client")
        if i == 0:
            ax.set_ylabel("client")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="Pearson r")
    _save(fig, out, "fig4_rho_correlation.png", "Fig. 4 — Pearson correlation of clients' ρ_i^t trajectories", figs)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, g in games.items():
        t = np.arange(np.asarray(g.welfare).size)
        ax.plot(t, g.welfare, label=f"{label} (equilibrium, {g.inclusion})")
    g0 = next(iter(games.values()))
    ax.plot(np.arange(np.asarray(g0.welfare_optimum).size), g0.welfare_optimum, "k--", label="social optimum")
    _rounds_axis(ax)
    ax.set_xlabel("round t")
    ax.set_ylabel("social welfare SW_t (Eq. 30)")
    ax.set_title("Fig. 5: social welfare per round", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, out, "fig5_welfare.png", "Fig. 5 — social welfare per round", figs)

    budgeted = {k: v for k, v in runs.items() if "game" in v and np.all(np.isfinite(v["game"].budget))}
    if budgeted:
        shown_b = dict(list(budgeted.items())[:2])
        fig, axes = plt.subplots(1, len(shown_b), figsize=(5.5 * len(shown_b), 3.6), squeeze=False)
        for ax, (label, r) in zip(axes[0], shown_b.items()):
            m = [x for x in r["metrics"] if np.isfinite(x.get("budget_used", np.nan))]
            t = np.array([x["round"] for x in m])
            used = np.array([x["budget_used"] for x in m])
            budget = np.array([x["budget"] for x in m])
            ax.bar(t, used, label="budget usage")
            ax.bar(t, np.maximum(budget - used, 0), bottom=used, alpha=0.4, label="budget remain")
            _rounds_axis(ax)
            ax.set_xlabel("round t")
            ax.set_ylabel("Σ ρ over sampled clients")
            ax2 = ax.twinx()
            ax2.plot(t, [x["tau"] for x in m], "k.-", label="τ(t)")
            ax2.set_ylim(0, 1)
            ax2.set_ylabel("τ(t)")
            ax.set_title(f"Figs. 7-8: {label}", fontsize=8)
            ax.legend(fontsize=6, loc="upper right")
        fig.tight_layout()
        _save(fig, out, "fig7_budget.png", "Figs. 7-8 — privacy budget usage and τ(t)", figs)
    return figs


def _curve(ax: Any, runs: dict[str, dict[str, Any]], key: str, ylabel: str, scale: float = 1.0) -> None:
    """``key`` vs round for each run (a single evaluated round is a marker on the full round axis)."""
    last = 0
    for label, r in runs.items():
        last = max([last, *(m["round"] for m in r["metrics"])])
        xs = [m["round"] for m in r["metrics"] if np.isfinite(m.get(key, np.nan))]
        ys = [scale * m[key] for m in r["metrics"] if np.isfinite(m.get(key, np.nan))]
        ax.plot(xs, ys, marker="o", ms=3, label=label)
    _rounds_axis(ax, last)
    ax.set_xlabel("round (from 0, as in metrics.csv)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _label_heatmap(runs: dict[str, dict[str, Any]], out: Path, figs: list[tuple[str, str]]) -> None:
    """Clients × classes example counts of each distinct partition (as flwr-datasets draws it and
    the FedPCS paper's Fig. 2): the data each client holds."""
    seen: dict[bytes, str] = {}
    for label, r in runs.items():
        counts = r.get("label_counts")
        if counts is not None and counts.tobytes() not in seen:
            seen[counts.tobytes()] = label
    shown = [(label, runs[label]["label_counts"]) for label in list(seen.values())[:3]]
    if not shown:
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown) + 0.8, 3.8), squeeze=False, layout="constrained")
    for i, (ax, (label, counts)) in enumerate(zip(axes[0], shown)):
        im = ax.imshow(counts.T, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_title(textwrap.fill(label, 40), fontsize=8)
        ax.set_xlabel("client")
        if i == 0:
            ax.set_ylabel("class")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.colorbar(im, ax=ax, shrink=0.8, label="examples")
    _save(fig, out, "partition.png", "Label distribution of the partition (clients × classes)", figs)


def write_report(paths: list[Path], out: Path, *, title: str = "fedgame report") -> Path:
    """Draw the figures for the runs under ``paths`` into ``out`` and write ``out/report.md``."""
    roots = [Path(p) for p in paths]
    run_dirs = find_runs(roots)
    if not run_dirs:
        raise FileNotFoundError(f"report: no run folders (with metrics.csv) under {', '.join(map(str, roots))}")
    labels = _labels(run_dirs, roots)
    runs = {labels[d]: _load(d) for d in run_dirs}
    out.mkdir(parents=True, exist_ok=True)

    figs: list[tuple[str, str]] = []
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained")
    _curve(axes[0], runs, "test_acc", "test accuracy (%)", 100.0)
    _curve(axes[1], runs, "test_loss", "test loss")
    _curve(axes[2], runs, "train_loss", "training loss (mean over the round's clients)")
    _save(fig, out, "accuracy.png", "Accuracy, test loss and training loss vs round", figs)
    _label_heatmap(runs, out, figs)

    with_priv = {k: v for k, v in runs.items() if "privacy" in v}
    if with_priv:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for label, r in with_priv.items():
            eps = np.array([p["epsilon"] for p in r["privacy"]])
            sel = np.array([p["selected"] for p in r["privacy"]])
            if eps.max() > 0:
                axes[0].plot(np.sort(eps)[::-1], label=label)
            axes[1].plot(np.sort(sel)[::-1], label=label)
        axes[0].set_xlabel("client (sorted)")
        axes[0].set_ylabel("ε spent")
        axes[0].set_title("privacy spent per client", fontsize=9)
        axes[1].set_xlabel("client (sorted)")
        axes[1].set_ylabel("rounds selected")
        axes[1].set_title("how often each client was selected", fontsize=9)
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.tight_layout()
        _save(fig, out, "clients.png", "Privacy spent and selections per client", figs)

    figs += _game_figures(runs, out)

    lines = [
        f"# {title}",
        "",
        "| run | rounds | final accuracy (%) | wall time (s) | ε max (δ) | ε mean | accounting |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in runs.items():
        s = r.get("summary")
        if s is None:
            lines.append(f"| {label} | {len(r['metrics'])} (unfinished) | | | | | |")
            continue
        lines.append(
            f"| {label} | {s['rounds']} | {100 * s['final_accuracy']:.2f} | {s['wall_time']:.1f} | "
            f"{_eps(s['epsilon_max'], s)} ({s['delta']:g}) | {_eps(s['epsilon_mean'], s)} | {s.get('privacy_accounting', '')} |"
        )
    lines.append("")
    for caption, name in figs:
        lines += [f"## {caption}", "", f"![{caption}]({name})", ""]
    finished = [d for d in run_dirs if (d / "summary.json").exists()]
    if finished:
        lines += [code_note(finished), ""]
        summaries = [json.loads((d / "summary.json").read_text()) for d in finished]
        rows = summarise_grid([{**s, "label": s["name"]} for s in summaries])
        ResultStore(out).write_csv("comparison.csv", rows)
        atomic_write_text(out / "comparison.md", markdown_table(rows) + "\n" + code_note(finished) + "\n")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
