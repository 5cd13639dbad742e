"""The report kinds ``fedgame report`` writes, and which one a results folder calls for.

One entry point for every table and figure page: ``fedgame report DIR`` looks at the finished
runs under ``DIR`` (their recipe names and configs, read by :func:`~fedgame.pipeline.results.finished_runs`)
and picks the kind; ``--kind`` names it. Each kind's writer returns the one line the CLI prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedgame.pipeline.results import finished_runs

__all__ = ["KINDS", "ReportKind", "detect", "write"]


@dataclass(frozen=True)
class ReportKind:
    name: str
    help: str
    write: Callable[[list[Path], Path | None, str], str]


def _runs(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.report import write_report

    return f"report: {write_report(dirs, out or dirs[0] / 'report')}"


def _reproduction(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.reproduction import write_reproduction

    return f"reproduction: {write_reproduction(dirs[0], out or Path('docs/reproduction.md'))}"


def _table2(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.table2 import write_table2

    dest = out or dirs[0]
    rows = write_table2(dirs[0], dest, budget=budget)
    if not rows:
        raise ValueError(f"runs: no finished FedPCS/baseline runs under {dirs[0]}")
    return f"table2: {len(rows)} cells → {dest / 'table2.md'}"


def _table4(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.table4 import write_table4

    dest = out or dirs[0]
    return f"table4: {len(write_table4(dirs[0], dest, budget=budget))} cells → {dest / 'table4.md'}"


def _phs_fig5(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.table4 import write_fig5

    dest = out or dirs[0]
    return f"fig5: {len(write_fig5(dirs[0], dest, budget=budget))} cells → {dest / 'fig5.md'}"


def _qidpfl(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.qidpfl_report import write_comparison

    dest = out or dirs[0]
    return f"qidpfl: {len(write_comparison(dirs[0], dest, budget=budget))} cells → {dest / 'comparison.md'}"


def _qidpfl_curve(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.qidpfl_report import write_curve

    dest = out or dirs[0]
    return f"curve: {', '.join(write_curve(dirs[0], dest))} → {dest / 'curve.json'}"


def _jdp(fig: str) -> Callable[[list[Path], Path | None, str], str]:
    def write_fig(dirs: list[Path], out: Path | None, budget: str) -> str:
        from fedgame.experiments import jdp_report

        dest = out or dirs[0]
        rows = getattr(jdp_report, f"write_{fig}")(dirs[0], dest, budget=budget)
        return f"{fig}: {len(rows)} cells → {dest / f'{fig}.md'}"

    return write_fig


KINDS: dict[str, ReportKind] = {k.name: k for k in (
    ReportKind("runs", "accuracy, losses, partition, privacy and game figures of any run folders", _runs),
    ReportKind("table2", "FedPCS Table II beside the paper's, with ordering verdicts", _table2),
    ReportKind("table4", "PHS Tables III/IV: privacy-aware, unbiased, biased per similarity s", _table4),
    ReportKind("phs-fig5", "PHS Fig. 5: accuracy against the local batch size", _phs_fig5),
    ReportKind("qidpfl", "QI-DPFL against its five baselines: accuracy, reward, cost, claims C1-C4", _qidpfl),
    ReportKind("qidpfl-curve", "QI-DPFL's accuracy-vs-ρ sweep: the fitted curve (Fig. 2)", _qidpfl_curve),
    ReportKind("jdp-fig3", "JDP-FL Fig. 3: accuracy against ε per server rule, with and without the attack", _jdp("fig3")),
    ReportKind("jdp-fig4", "JDP-FL Fig. 4: accuracy against ε and the number of participants", _jdp("fig4")),
    ReportKind("jdp-fig5", "JDP-FL Fig. 5: accuracy against the random-group size", _jdp("fig5")),
    ReportKind("reproduction", "DIR is results/: docs/reproduction.md, every reproduced cell beside the paper's", _reproduction),
)}


def detect(root: Path) -> str:
    """The kind the finished runs under ``root`` call for: a paper's table when every run is one
    of its recipes, else the generic run report."""
    from fedgame.experiments.qidpfl_report import METHODS as QIDPFL_METHODS
    from fedgame.experiments.table2 import method_of
    from fedgame.experiments.table4 import MECHANISMS

    runs = list(finished_runs(root))
    if not runs:
        return "runs"
    if all(r.cfg.get("jdp") for r in runs):
        return "jdp-fig3"
    if all(r.name in MECHANISMS and r.cfg.get("data", {}).get("partition", {}).get("kind") == "similarity" for r in runs):
        return "table4"
    if all(method_of(r.name, r.cfg) is not None for r in runs):
        return "table2"
    if all(r.name in QIDPFL_METHODS for r in runs):
        return "qidpfl"
    return "runs"


def write(kind: str | None, dirs: list[Path], out: Path | None = None, *, budget: str = "reduced") -> str:
    """Write the report ``kind`` (None: :func:`detect`'s choice for ``dirs[0]``); the line to print."""
    if not dirs:
        raise ValueError("report: name at least one folder")
    for d in dirs:
        if not d.is_dir():
            raise ValueError(f"runs: not a folder: {d}")
    chosen = kind or detect(dirs[0])
    if chosen not in KINDS:
        raise ValueError(f"--kind: must be one of {', '.join(KINDS)}, got {chosen!r}")
    return KINDS[chosen].write(dirs, out, budget)
