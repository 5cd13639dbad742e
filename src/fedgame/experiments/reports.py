"""The report kinds ``fedgame report`` writes, and which one a results folder calls for.

One entry point for every table and figure page: ``fedgame report DIR`` looks at the finished
runs under ``DIR`` (their recipe names and configs, read by :func:`~fedgame.pipeline.results.finished_runs`)
and picks the kind; ``--kind`` names it. Each kind's writer returns the one line the CLI prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedgame.pipeline.results import PROVENANCE, finished_runs, record_report

__all__ = ["KINDS", "PROVENANCE", "ReportKind", "detect", "regenerate", "write"]


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


def _table(module: str, writer: str, page: str, label: str, *, empty: str | None = None) -> Callable[[list[Path], Path | None, str], str]:
    """A report kind whose writer ``fedgame.experiments.<module>.<writer>(runs, dest, budget=)``
    returns its rows: written into ``--out`` (default: the runs folder); ``empty``: the error when
    no run fits (None: an empty table is written)."""

    def write(dirs: list[Path], out: Path | None, budget: str) -> str:
        import importlib

        dest = out or dirs[0]
        rows = getattr(importlib.import_module(f"fedgame.experiments.{module}"), writer)(dirs[0], dest, budget=budget)
        if not rows and empty is not None:
            raise ValueError(f"runs: no finished {empty} under {dirs[0]}")
        return f"{label}: {len(rows)} cells → {dest / page}"

    return write


def _kappa_sweep(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.kappa_sweep import write_sweep_runs

    dest = out or dirs[0]
    return f"kappa sweep: chosen acc_scale {write_sweep_runs(dirs[0], dest)} → {dest / 'sweep.md'}"


def _jdp_auction(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.jdp_auction_figs import write_auction_report

    dest = out or dirs[0]
    return f"fig2: {len(write_auction_report(dirs[0], dest)['rows'])} rows → {dest / 'fig2.md'}"


def _qidpfl_curve(dirs: list[Path], out: Path | None, budget: str) -> str:
    from fedgame.experiments.qidpfl_report import write_curve

    dest = out or dirs[0]
    return f"curve: {', '.join(write_curve(dirs[0], dest))} → {dest / 'curve.json'}"


KINDS: dict[str, ReportKind] = {
    k.name: k
    for k in (
        ReportKind("runs", "accuracy, losses, partition, privacy and game figures of any run folders", _runs),
        ReportKind(
            "table2",
            "FedPCS Table II beside the paper's, with ordering verdicts",
            _table("table2", "write_table2", "table2.md", "table2", empty="FedPCS/baseline runs"),
        ),
        ReportKind(
            "table4",
            "PHS Tables III/IV: privacy-aware, unbiased, biased per similarity s",
            _table("table4", "write_table4", "table4.md", "table4"),
        ),
        ReportKind("phs-fig5", "PHS Fig. 5: accuracy against the local batch size", _table("table4", "write_fig5", "fig5.md", "fig5")),
        ReportKind(
            "phs-tight",
            "PHS privacy-aware: the paper's noise calibration against the tight (PLD) one",
            _table("table4", "write_tight", "tight_vs_paper.md", "tight"),
        ),
        ReportKind("kappa-sweep", "FedPCS accuracy scale κ: the game per κ and the default it chooses", _kappa_sweep),
        ReportKind(
            "qidpfl",
            "QI-DPFL against its five baselines: accuracy, reward, cost, claims C1-C4",
            _table("qidpfl_report", "write_comparison", "comparison.md", "qidpfl"),
        ),
        ReportKind("qidpfl-curve", "QI-DPFL's accuracy-vs-ρ sweep: the fitted curve (Fig. 2)", _qidpfl_curve),
        ReportKind("jdp-auction", "JDP-FL Fig. 2 from the auctions alone: clients, data and payments per budget and n", _jdp_auction),
        ReportKind(
            "jdp-fig3",
            "JDP-FL Fig. 3: accuracy against ε per server rule, with and without the attack",
            _table("jdp_report", "write_fig3", "fig3.md", "fig3"),
        ),
        ReportKind(
            "jdp-fig4",
            "JDP-FL Fig. 4: accuracy against ε and the number of participants",
            _table("jdp_report", "write_fig4", "fig4.md", "fig4"),
        ),
        ReportKind(
            "jdp-fig5", "JDP-FL Fig. 5: accuracy against the random-group size", _table("jdp_report", "write_fig5", "fig5.md", "fig5")
        ),
        ReportKind("reproduction", "DIR is results/: docs/reproduction.md, every reproduced cell beside the paper's", _reproduction),
    )
}


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
    line = KINDS[chosen].write(dirs, out, budget)
    if out is not None and chosen != "reproduction":
        record_report(out, chosen, dirs, budget)
    return line


def regenerate(folder: Path, dest: Path) -> list[str]:
    """Remake the reports recorded in ``folder``/:data:`PROVENANCE` into ``dest`` (run folder paths
    are read relative to the working directory, as the scripts that wrote them ran from the
    repository's root); the names of the files written, figures excluded, for comparison with the
    committed ones. Refuses a record whose runs are not inside ``folder``: a committed table must be
    remade from committed per-seed files."""
    record = folder / PROVENANCE
    if not record.exists():
        raise FileNotFoundError(f"{record}: no {PROVENANCE} (tables written before their provenance was kept)")
    inside = folder.resolve()
    for entry in json.loads(record.read_text())["reports"]:
        runs = [Path(r) for r in entry["runs"]]
        outside = [r.as_posix() for r in runs if inside not in r.resolve().parents]
        if outside:
            raise ValueError(f"{record}: runs outside the results folder: {', '.join(outside)}")
        KINDS[entry["kind"]].write(runs, dest, entry["budget"])
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and p.suffix != ".png" and p.name != PROVENANCE)
