"""Reading results folders back: the one walker over finished runs and the one mean ± std.

Every table, figure, claim and export reads runs through :func:`finished_runs`, so "a finished
run" means one thing everywhere: a folder holding ``summary.json`` (written last, atomically),
with its ``config.yaml`` beside it when ``with_config``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedgame.pipeline.config import RecipeError, RunConfig, load_recipe
from fedgame.pipeline.store import DAMAGED, atomic_write_bytes, atomic_write_text, read_metrics

__all__ = [
    "EXPORTED",
    "PROVENANCE",
    "FinishedRun",
    "code_note",
    "export_runs",
    "finished_runs",
    "flatten",
    "mean_std",
    "played_plans",
    "record_report",
]


@dataclass
class FinishedRun:
    """One finished run: its folder, ``summary.json`` and ``config.yaml`` (empty if absent)."""

    dir: Path
    summary: dict[str, Any]
    cfg: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The recipe name without a grid cell's ``[key=value,...]`` suffix."""
        return str(self.summary.get("name", self.cfg.get("name", ""))).split("[")[0]

    @property
    def seed(self) -> int:
        return int(self.summary.get("seed", self.cfg.get("seed", 0)))

    @property
    def acc(self) -> float:
        """Final test accuracy in %, NaN when the run recorded none."""
        a = self.summary.get("final_accuracy")
        return math.nan if a is None else 100.0 * float(a)

    def metrics(self) -> list[dict[str, Any]]:
        """The rows of ``metrics.csv`` (numbers as numbers), empty without one."""
        p = self.dir / "metrics.csv"
        return read_metrics(p) if p.exists() else []


def finished_runs(root: str | Path, *, with_config: bool = True) -> Iterator[FinishedRun]:
    """Every finished run under ``root`` (``root`` itself included), in path order. With
    ``with_config`` a run without ``config.yaml`` is skipped. A ``summary.json`` or
    ``config.yaml`` that cannot be read is an error naming the file (both are written whole by
    an atomic rename, so a damaged one was damaged after the run, never caught mid-write)."""
    for path in sorted(Path(root).rglob("summary.json")):
        d = path.parent
        if with_config and not (d / "config.yaml").exists():
            continue
        summary = read_json_file(path)
        if not isinstance(summary, dict):
            raise ValueError(f"{path}: must hold a JSON object (a run's summary), got {type(summary).__name__}; {DAMAGED}")
        cfg: Any = {}
        if (d / "config.yaml").exists():
            try:
                cfg = yaml.safe_load((d / "config.yaml").read_text())
            except (yaml.YAMLError, UnicodeDecodeError) as e:
                raise ValueError(f"{d / 'config.yaml'}: not valid YAML ({type(e).__name__}); {DAMAGED}") from None
        yield FinishedRun(dir=d, summary=summary, cfg=cfg if isinstance(cfg, dict) else {})


def read_json_file(path: Path) -> Any:
    """``path``'s JSON, or a one-line :class:`ValueError` naming the file when it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file; {DAMAGED}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}: line {e.lineno}, column {e.colno}); {DAMAGED}") from None


def mean_std(xs: Iterable[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for one value) of the finite values;
    (NaN, NaN) when there are none."""
    a = np.array([x for x in xs if x is not None and np.isfinite(x)], dtype=np.float64)
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


#: the files of a finished run that a results folder keeps (never checkpoints, partition index
#: arrays or datasets): the summary, the per-round log, the resolved recipe, ε per client, the
#: partition's sizes and label counts, a FedPCS run's solved game (the realised-ρ figure is computed
#: from it) and the plans the paper reports read (PHS Problem 1's p*, JDP-FL's auction winners and
#: adversary, QI-DPFL's screened set and rewards, and its per-client, per-round ρ_i^t and payments,
#: from which the comparison's mean ρ_i^tot is computed): kilobytes each
EXPORTED = (
    "summary.json",
    "metrics.csv",
    "config.yaml",
    "privacy.csv",
    "partition.json",
    "game.json",
    "game.npz",
    "phs.json",
    "jdp.json",
    "qidpfl.json",
    "qidpfl.npz",
)


def export_runs(src: Path, dest: Path, files: tuple[str, ...] = EXPORTED) -> list[Path]:
    """Copy ``files`` of every finished run under ``src`` (a folder holding a ``summary.json``)
    to the same relative folder under ``dest``, e.g. ``<cell>/seed_<k>/``: the per-seed files a
    committed table is generated from. Unfinished runs are skipped, so calling it again as a
    grid goes on adds the cells that finished since. Returns the run folders written."""
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise ValueError(f"runs: not a folder: {src}")
    written = []
    for found in finished_runs(src, with_config=False):
        run = found.dir
        target = dest / run.relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            if (run / name).is_file():
                atomic_write_bytes(target / name, (run / name).read_bytes())
        written.append(target)
    return written


def played_plans(root: Path) -> list[tuple[Path, RunConfig]]:
    """(``game.npz``, recipe) of every finished run under ``root`` that kept its FedPCS plan:
    what :func:`fedgame.incentives.fedpcs.plugin.reuse_plans` reads (``fedgame compare
    --plans``). A run whose ``config.yaml`` this version's schema no longer reads is left out (its
    game cannot be matched to a recipe's)."""
    if not Path(root).is_dir():
        raise ValueError(f"--plans: not a folder: {root}")
    out = []
    for run in finished_runs(root):
        if (run.dir / "game.npz").is_file():
            try:
                out.append((run.dir / "game.npz", load_recipe(run.dir / "config.yaml")))
            except RecipeError:
                continue
    return out


def code_note(run_dirs: Iterable[Path]) -> str:
    """The line a table page carries about where its runs came from: the code version each
    ``summary.json`` records (``versions.code``: the git commit, ``+dirty`` with uncommitted
    changes) and the CPU model, counted over the runs, so that a table mixing code versions says so;
    a run that was stopped and resumed under another code version (two codes in its ``sessions``,
    written by :func:`~fedgame.pipeline.runner.run_one`) is counted by the code it ended with and
    the line says how many such runs there are. Where any run trained on another device than
    the CPU (``ran_on.device``, e.g. a lent GPU), the line also counts the runs per device."""
    codes: Counter[str] = Counter()
    cpus: Counter[str] = Counter()
    devices: Counter[str] = Counter()
    mixed = 0  # runs stopped and resumed under another code version (their ``sessions``)
    for d in run_dirs:
        path = Path(d) / "summary.json"
        summary = json.loads(path.read_text()) if path.exists() else {}
        versions = summary.get("versions", {})
        mixed += len({str(s.get("code")) for s in summary.get("sessions", [])}) > 1
        code = str(versions.get("code", "not recorded"))
        codes[code[:12] + code[40:] if len(code) >= 40 else code] += 1
        cpus[str(versions.get("cpu", "not recorded"))] += 1
        devices[str(summary.get("ran_on", {}).get("device", "not recorded"))] += 1

    def listed(c: Counter[str]) -> str:
        return ", ".join(f"{k} ({n} run{'s' if n > 1 else ''})" for k, n in sorted(c.items()))

    n = sum(codes.values())
    if len(codes) == 1:
        code_part = f"all {n} runs from code {next(iter(codes))}"
    else:
        code_part = f"the runs mix {len(codes)} code versions: {listed(codes)}"
    if mixed:
        code_part += f" ({mixed} run{'s' if mixed > 1 else ''} resumed under another code version: see its `sessions`)"
    cpu_part = next(iter(cpus)) if len(cpus) == 1 else listed(cpus)
    device_part = f"; trained on: {listed(devices)}" if set(devices) - {"cpu", "not recorded"} else ""
    return f"Code: {code_part}; CPU: {cpu_part}{device_part} (from each run's summary.json)."


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping (a resolved recipe) as ``{"a.b.c": value}``: how MLflow params, config
    differences and report rows name a recipe's fields."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


#: written beside a report's tables: which kind made them, from which run folders, at which budget
#: label, so that :func:`fedgame.experiments.reports.regenerate` can remake every committed table
#: from its per-seed files
PROVENANCE = "report.json"


def record_report(out: Path, kind: str, dirs: list[Path], budget: str) -> None:
    """Add (or replace) report ``kind``'s entry in ``out``/:data:`PROVENANCE`: the run folders
    and the budget label its tables were written from."""
    path = Path(out) / PROVENANCE
    entries = json.loads(path.read_text())["reports"] if path.exists() else []
    entries = [e for e in entries if e["kind"] != kind]
    entries.append({"kind": kind, "runs": [Path(d).as_posix() for d in dirs], "budget": budget})
    atomic_write_text(path, json.dumps({"reports": sorted(entries, key=lambda e: e["kind"])}, indent=2) + "\n")
