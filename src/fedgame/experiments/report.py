"""Markdown reports with matplotlib figures for one or more run folders.

``fedgame report DIR...`` writes ``report.md`` beside the figures it draws: accuracy vs round,
test loss vs round, ε spent per client, and how often each client was selected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedgame.experiments.store import atomic_write_text, read_metrics  # noqa: E402

__all__ = ["find_runs", "write_report"]


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders (those with ``metrics.csv``) at or below each path, sorted."""
    runs: list[Path] = []
    for p in paths:
        if (p / "metrics.csv").exists():
            runs.append(p)
        else:
            runs.extend(sorted(q.parent for q in p.rglob("metrics.csv")))
    return list(dict.fromkeys(runs))


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
    if (run / "summary.json").exists():
        out["summary"] = json.loads((run / "summary.json").read_text())
    if (run / "privacy.csv").exists():
        out["privacy"] = read_metrics(run / "privacy.csv")
    return out


def _curve(ax: Any, runs: dict[str, dict[str, Any]], key: str, ylabel: str, scale: float = 1.0) -> None:
    for label, r in runs.items():
        xs = [m["round"] + 1 for m in r["metrics"] if np.isfinite(m.get(key, np.nan))]
        ys = [scale * m[key] for m in r["metrics"] if np.isfinite(m.get(key, np.nan))]
        ax.plot(xs, ys, marker="o", ms=3, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def write_report(paths: list[Path], out: Path, *, title: str = "fedgame report") -> Path:
    """Draw the figures for the runs under ``paths`` into ``out`` and write ``out/report.md``."""
    roots = [Path(p) for p in paths]
    run_dirs = find_runs(roots)
    if not run_dirs:
        raise FileNotFoundError(f"report: no run folders (with metrics.csv) under {', '.join(map(str, roots))}")
    runs = {_label(d, roots): _load(d) for d in run_dirs}
    out.mkdir(parents=True, exist_ok=True)

    figs: list[tuple[str, str]] = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    _curve(axes[0], runs, "test_acc", "test accuracy (%)", 100.0)
    _curve(axes[1], runs, "test_loss", "test loss")
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=110)
    plt.close(fig)
    figs.append(("Accuracy and loss vs round", "accuracy.png"))

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
        fig.savefig(out / "clients.png", dpi=110)
        plt.close(fig)
        figs.append(("Privacy spent and selections per client", "clients.png"))

    lines = [f"# {title}", "", "| run | rounds | final accuracy (%) | wall time (s) | ε max (δ) | ε mean | accounting |", "|---|---|---|---|---|---|---|"]
    for label, r in runs.items():
        s = r.get("summary")
        if s is None:
            lines.append(f"| {label} | {len(r['metrics'])} (unfinished) | | | | | |")
            continue
        lines.append(
            f"| {label} | {s['rounds']} | {100 * s['final_accuracy']:.2f} | {s['wall_time']:.1f} | "
            f"{s['epsilon_max']:.3g} ({s['delta']:g}) | {s['epsilon_mean']:.3g} | {s.get('privacy_accounting', '')} |"
        )
    lines.append("")
    for caption, name in figs:
        lines += [f"## {caption}", "", f"![{caption}]({name})", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
