"""Running recipes into result folders, and grids of them into comparison tables.

A run folder with ``summary.json`` is finished and is skipped by :func:`run_grid`; a folder
with only a checkpoint is resumed. So a long grid survives being stopped at any moment.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import yaml

import fedgame
from fedgame.data import DatasetSplit, SiloDataset, save_partition
from fedgame.pipeline.build import Built, BuiltJDP, build_engine, build_jdp, load_split, with_clients
from fedgame.sim.pool import available_cores
from fedgame.sim.local import device_label
from fedgame.pipeline.config import JDPPrivacyCfg, NaturalPartition, RunConfig, parse_recipe
from fedgame.pipeline.store import ResultStore, lock_run_folder, read_metrics
from fedgame.incentives.qidpfl import QIDPFLPlan
from fedgame.sim import RunResult
from fedgame.privacy.analysis.jdp import jdp_totals
from fedgame.privacy.plans import accounting_label
from fedgame.pipeline.results import flatten, mean_std

__all__ = ["RunFolderMismatch", "run_one", "run_grid", "GridCell", "summarise_grid", "versions"]

log = logging.getLogger(__name__)


def versions() -> dict[str, str]:
    import numpy
    import opacus
    import scipy

    return {
        "fedgame": fedgame.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "opacus": opacus.__version__,
        "machine": f"{platform.machine()} {platform.system()} ({torch.get_num_threads()} threads)",
        "cpu": cpu_model(),
        "code": code_version(),
    }


@functools.cache
def cpu_model() -> str:
    """The CPU a result was computed on, so it says which kernels' floating point it carries:
    the model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`), its family and
    model numbers, and the vector instruction set torch's CPU kernels dispatch to
    (:func:`torch.backends.cpu.get_cpu_capability`: ``AVX2``, ``AVX512``, ...). The name alone is
    not enough: a virtual machine may report "AMD EPYC" for generations with and without
    AVX-512, whose convolution kernels differ in speed (about 3× here) and in round-off."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break  # the first processor's block is enough
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown"
    detail = [f"family {fields['cpu family']}, model {fields['model']}"] if "cpu family" in fields and "model" in fields else []
    try:
        detail.append(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):  # torch without the query
        pass
    return f"{name} ({'; '.join(detail)})" if detail else name


@functools.cache
def code_version(root: Path | None = None) -> str:
    """The git commit the package was run from (``+dirty`` with uncommitted changes to tracked
    files other than ``results/`` and ``docs/``, which a grid's own tables and pages rewrite as
    cells finish and no run reads), or the package version outside a git checkout.
    ``$FEDGAME_CODE_VERSION``, when set, is taken instead: a copy of the tree shipped elsewhere
    (a lent GPU machine, ``bench/gpu.sh``) may come without ``.git`` or with a repository at
    another commit, and names the commit it was made from. Cached at the
    first call, which :func:`run_one` makes before training, so a commit made while a run trains
    is not claimed. ``root``: the checkout (default: the one this package is imported from)."""
    import os
    import subprocess

    if os.environ.get("FEDGAME_CODE_VERSION"):
        return os.environ["FEDGAME_CODE_VERSION"]
    root = root if root is not None else Path(fedgame.__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", ":(exclude)docs"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"fedgame {fedgame.__version__}"
    return sha + ("+dirty" if dirty else "")


class Execute(Protocol):
    """Runs a built engine elsewhere than in this process (e.g. on Flower): sets up the
    clients, points the engine's executor at them, calls ``run()`` and returns its result.
    ``name`` goes into ``summary.json`` as ``backend``; ``describe()`` as ``backend_info``."""

    name: str

    def __call__(self, built: Built | BuiltJDP, cfg: RunConfig, run: Callable[[], RunResult]) -> RunResult: ...

    def describe(self) -> dict[str, Any]: ...


def _differences(before: str, after: str, shown: int = 4) -> str:
    """``field: old → new`` for the fields two resolved configs (YAML) disagree on."""
    a, b = flatten(yaml.safe_load(before) or {}), flatten(yaml.safe_load(after) or {})
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "<unset>") != b.get(k, "<unset>")]
    parts = [f"{k}: {a.get(k, '<unset>')!r} there, {b.get(k, '<unset>')!r} here" for k in keys[:shown]]
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return "; ".join(parts) + more if parts else "its config.yaml differs"


class RunFolderMismatch(ValueError):
    """The output folder holds a run of another configuration."""


def run_one(
    cfg: RunConfig,
    out: str | Path,
    *,
    resume: bool = True,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    execute: Execute | None = None,
    cores: int | None = None,
    data: Any = None,
    build: Callable[[RunConfig], Built | BuiltJDP] | None = None,
) -> dict[str, Any]:
    """Run ``cfg`` into folder ``out`` (resuming from its checkpoint if there is one) and
    return the summary. A finished folder is returned as it is. ``execute`` runs the engine
    on another backend (default: in this process, its clients in ``train.workers`` processes
    within ``cores``, default all); the results files are the same.

    ``build``: how the run is built instead of from the recipe's dataset here (a silo
    deployment builds it from what its nodes report, and never opens their data: no dataset
    is loaded in this process then).

    ``data``: examples given in Python instead of the recipe's dataset: a
    :class:`~fedgame.data.DatasetSplit`, or what :func:`fedgame.data.as_split` takes (NumPy
    arrays, torch datasets, Hugging Face datasets). The recipe's
    partition splits them (``natural``: by their group ids). The run folder records the data
    as ``data.dataset: memory`` with its fingerprint (nothing of the data itself), so a resume
    with other data is refused."""
    code_version()  # pinned before training: the code this run imported
    split: DatasetSplit | None = None
    if data is not None:
        from fedgame.data import as_split, in_memory_options

        split = as_split(data)
        cfg = cfg.model_copy(
            update={"data": cfg.data.model_copy(update={"dataset": "memory", "options": in_memory_options(split), "root": None})}
        )
    if isinstance(cfg.data.partition, NaturalPartition) and build is None:
        split = load_split(cfg) if split is None else split
        cfg = with_clients(cfg, split)  # n_clients: the groups the data gives
    with lock_run_folder(out):  # one writer per folder (RunFolderBusy names the other's PID)
        return _run_one_locked(
            cfg, out, resume=resume, on_round=on_round, on_start=on_start, execute=execute, cores=cores, split=split, build=build
        )


def _run_one_locked(
    cfg: RunConfig,
    out: str | Path,
    *,
    resume: bool,
    on_round: Callable[[dict[str, Any]], None] | None,
    on_start: Callable[[int], None] | None,
    execute: Execute | None,
    cores: int | None,
    split: DatasetSplit | None = None,
    build: Callable[[RunConfig], Built | BuiltJDP] | None = None,
) -> dict[str, Any]:
    store = ResultStore(out)
    resolved = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    if resume and store.exists("config.yaml"):
        stored = store.path("config.yaml").read_text()
        before = _resolved_again(stored)
        if before != resolved and not store.finished and not store.exists("checkpoint.pt"):
            store.clear()  # a run that failed before its first round (a cell being corrected): nothing to keep
        elif before != resolved:
            # never resume (or return) a run of another config: a grid would mix results silently
            why = _differences(stored if before is None else before, resolved)
            raise RunFolderMismatch(
                f"out: {out} holds a run of a different config ({why}); "
                "choose another --out, or run without --resume (with --force) to replace it"
            )
    if store.finished and resume:
        summary: dict[str, Any] = store.read_json("summary.json")
        return summary
    store.write_text("config.yaml", resolved)
    _start_session(store, resume)
    built = build(cfg) if build is not None else PROTOCOLS[protocol_of(cfg)](cfg, parallel=execute is None, cores=cores, split=split)
    try:
        return _run_built(cfg, store, built, resume=resume, on_round=on_round, on_start=on_start, execute=execute)
    finally:
        built.close()


#: The run folder's record of who trained which rounds (:func:`_start_session`).
SESSIONS = "sessions.json"


def _start_session(store: ResultStore, resume: bool) -> None:
    """Append this process's code version and CPU to the run folder's ``sessions.json``.

    A run stopped and resumed may have trained its rounds with two versions of the code (or on
    two machines); the summary's ``versions`` names only the last. So every start of a run
    records ``{"from_round", "code", "cpu"}`` — ``from_round`` provisional (the rounds in
    ``metrics.csv``) until the run ends and :func:`_end_session` sets it to the round it
    actually resumed from — and the summary carries the whole list as ``sessions``. A fresh
    run (no checkpoint to resume) starts a new list."""
    ongoing = resume and store.exists("checkpoint.pt")
    if ongoing and store.exists(SESSIONS):
        sessions: list[dict[str, Any]] = store.read_json(SESSIONS)
    elif ongoing:  # a checkpoint from a fedgame that did not keep sessions.json yet
        sessions = [{"from_round": 0, "code": "unknown (before sessions.json)", "cpu": "unknown"}]
    else:
        sessions = []
    done = len(read_metrics(store.path("metrics.csv"))) if ongoing and store.exists("metrics.csv") else 0
    sessions.append({"from_round": done, "code": code_version(), "cpu": cpu_model()})
    store.write_json(SESSIONS, sessions)


def _end_session(store: ResultStore, resumed_from: int) -> list[dict[str, Any]]:
    """The run's sessions, the last one's ``from_round`` set to where it really resumed."""
    sessions: list[dict[str, Any]] = store.read_json(SESSIONS) if store.exists(SESSIONS) else []
    if sessions:
        sessions[-1]["from_round"] = int(resumed_from)
        store.write_json(SESSIONS, sessions)
    return sessions


def _write_partition(store: ResultStore, data: Any) -> None:
    """The partition's index arrays (``partition.npz``) and, for people and plots, its
    fingerprint, client sizes and label counts per client (``partition.json``). Silo data has
    no partition: ``partition.json`` lists what each node reported (no ``partition.npz``)."""
    if isinstance(data, SiloDataset):
        store.write_json("partition.json", data.summary())
        return
    save_partition(store.path("partition.npz"), list(data.parts))
    store.write_json(
        "partition.json",
        {
            "fingerprint": data.fingerprint,
            "n_clients": data.n_clients,
            "sizes": np.asarray(data.sizes).tolist(),
            "label_counts": np.asarray(data.label_counts()).tolist(),
        },
    )


def _run_built(
    cfg: RunConfig,
    store: ResultStore,
    built: Built | BuiltJDP,
    *,
    resume: bool,
    on_round: Callable[[dict[str, Any]], None] | None,
    on_start: Callable[[int], None] | None,
    execute: Execute | None,
) -> dict[str, Any]:
    """The one run of every protocol (FedAvg-style rounds, JDP-FL): the partition files, the
    server's pre-training plan, the rounds (checkpointed into ``store``), ``privacy.csv`` and
    ``summary.json``; what differs between protocols is asked of ``built``
    (:func:`_write_plan`, :func:`_ledger`)."""
    data = built.data
    _write_partition(store, data)
    if on_start is not None:
        on_start(cfg.train.rounds)

    def run() -> RunResult:
        # the plan is written once ``execute`` has reached the clients: a plan built from their
        # answers (QI-DPFL screening on queried histograms, JDP-FL's auction on their bids) is
        # the one saved
        _write_plan(store, built)
        return built.engine.run(cfg.train.rounds, sink=store, resume=resume, on_round=on_round)

    result = run() if execute is None else execute(built, cfg, run)
    rows, fields = _ledger(cfg, result, built)
    store.write_csv("privacy.csv", rows)
    summary = {
        **_base_summary(cfg, result, built),
        **fields,
        "partition_fingerprint": data.fingerprint,
        "resumed_from_round": result.resumed_from,
        "sessions": _end_session(store, result.resumed_from),
        "backend": "inprocess" if execute is None else execute.name,
        **({} if execute is None else {"backend_info": execute.describe()}),
        "versions": versions(),
    }
    store.write_json("summary.json", summary)
    store.path("checkpoint.pt").unlink(missing_ok=True)
    return summary


def _ledger(cfg: RunConfig, result: RunResult, built: Built | BuiltJDP) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``privacy.csv``'s rows (one per client) and the summary's privacy fields."""
    if isinstance(built, BuiltJDP):
        return _jdp_ledger(cfg, result, built)
    data, eps = built.data, result.epsilons
    label = accounting_label(built.engine.privacy)
    given = label != "none"  # no privacy given: ε is ∞ per client (null in JSON), never 0
    extra = built.engine.privacy.report(cfg.accountant.delta) or [{} for _ in range(data.n_clients)]
    rows = [
        {
            "client": i,
            "size": int(data.sizes[i]),
            "selected": int(result.selected_counts[i]),
            "epsilon": float(eps[i]) if given else math.inf,
            **extra[i],
        }
        for i in range(data.n_clients)
    ]
    spent: dict[str, Any] = {}
    for key in ("eps_paper", "eps_pld", "eps_rdp"):
        if key in rows[0]:
            ratio = [r[key] / r["eps_budget"] for r in rows if np.isfinite(r["eps_budget"]) and r.get("steps_done")]
            spent[f"{key}_over_budget_max"] = float(np.max(ratio)) if ratio else 0.0
            spent[f"{key}_over_budget_mean"] = float(np.mean(ratio)) if ratio else 0.0
    return rows, {
        "privacy_accounting": label,
        "epsilon_max": float(eps.max()) if given else None,
        "epsilon_mean": float(eps.mean()) if given else None,
        "epsilon_per_client": eps.tolist() if given else None,
        **spent,
        "game_solve_seconds": getattr(built.plan, "solve_seconds", None),
        # True: the plan was read from the game cache, so this run did not spend game_solve_seconds
        "game_plan_from_cache": bool(getattr(built.plan, "extras", {}).get("from_cache", False)),
    }


def _jdp_ledger(cfg: RunConfig, result: RunResult, built: BuiltJDP) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """JDP-FL's ledger: each winner's ε three ways (:mod:`fedgame.privacy.analysis.jdp`): the
    accountant's, the paper's basic composition (T(ε_L+ε_E), Tδ), and the RDP figure of the
    Gaussian part plus T ε_E; and the run's attack and timing figures."""
    data, engine, eps, p = built.data, built.engine, result.epsilons, cfg.privacy
    won = np.zeros(data.n_clients, dtype=bool)
    won[engine.winners] = True
    mech = {int(i): m for i, m in zip(engine.winners, engine.mechanisms)}
    rows = []
    for i in range(data.n_clients):
        t = int(result.selected_counts[i])
        row: dict[str, Any] = {"client": i, "size": int(data.sizes[i]), "winner": bool(won[i]), "rounds": t, "epsilon": float(eps[i])}
        m = mech.get(i)
        if isinstance(p, JDPPrivacyCfg) and m is not None and t > 0:
            sens = m.sensitivity
            assert sens is not None  # M3 is calibrated (local_perturbation), so it carries its sensitivity
            tot = jdp_totals(
                t,
                eps_local=p.epsilon,
                eps_exp=built.eps_exp if engine.rule.personal else 0.0,
                delta=p.delta,
                noise_multiplier=m.noise_std / float(sens),
            )
            row.update(
                sigma=m.noise_std,
                sensitivity=float(sens),
                eps_paper=tot.paper_epsilon,
                delta_paper=tot.total_delta,
                eps_rdp=tot.rdp_epsilon,
            )
        rows.append(row)
    last5 = [r["test_acc"] for r in result.records[-5:] if np.isfinite(r["test_acc"])]
    adv_used = [r["adversary_used"] for r in result.records if r["adversary_used"] is not None]
    return rows, {
        "last5_accuracy": float(np.mean(last5)) if last5 else float("nan"),
        "privacy_accounting": p.accounting if isinstance(p, JDPPrivacyCfg) else "none",
        "epsilon_max": float(eps.max()),
        "epsilon_mean": float(eps[engine.winners].mean()),
        "epsilon_per_client": eps.tolist(),
        "eps_paper_max": max((r.get("eps_paper", 0.0) for r in rows), default=0.0),
        "eps_rdp_max": max((r.get("eps_rdp", 0.0) for r in rows), default=0.0),
        "adversary_used_fraction": float(np.mean(adv_used)) if adv_used else None,
        "clipped_fraction_mean": float(np.mean([r["clipped_fraction"] for r in result.records])),
        "server_time_mean": float(np.mean([r["server_time"] for r in result.records])),
        "train_time_mean": float(np.mean([r["train_time"] for r in result.records])),
        **built.summary(),
    }


def _resolved_again(text: str) -> str | None:
    """A run folder's ``config.yaml`` resolved by this version's schema (so a field added since,
    at its default, does not make an old run "another config"); None if it no longer parses."""
    try:
        resolved: str = yaml.safe_dump(parse_recipe(yaml.safe_load(text)).model_dump(mode="json"), sort_keys=False)
        return resolved
    except Exception:  # noqa: BLE001 - any file this schema cannot read is another config
        return None


def _write_plan(store: ResultStore, built: Built | BuiltJDP) -> None:
    """The server's pre-training plan: ``phs.json``, ``qidpfl.npz``/``.json``, ``game.npz``/``.json``
    or, for JDP-FL, ``jdp.json`` (winners, adversary, auction and payments)."""
    if isinstance(built, BuiltJDP):
        store.write_json("jdp.json", built.summary())
        return
    if built.phs is not None:
        counts = built.engine.selection.participation_bound()
        store.write_json("phs.json", {**built.phs.summary(), "T_k": None if counts is None else counts.tolist()})
    if isinstance(built.plan, QIDPFLPlan):
        np.savez(store.path("qidpfl.npz"), rho=built.plan.rho, payment=built.plan.payment, reward=built.plan.reward)
        store.write_json("qidpfl.json", built.plan.summary())
    elif built.plan is not None:
        built.plan.save(store.path("game.npz"))
        store.write_json("game.json", built.plan.summary())


def _base_summary(cfg: RunConfig, result: RunResult, built: Built | BuiltJDP) -> dict[str, Any]:
    """The fields every run's ``summary.json`` starts with, and where it ran: the worker
    processes, the training device (with the GPU's name), precision and memory format, and on
    a GPU whether plain local steps replay CUDA graphs."""
    final = result.records[-1]
    trainer = built.engine.trainer
    dev = trainer.device
    where = {
        "workers": built.pool.workers if built.pool is not None else 1,
        "device": device_label(dev),
        "precision": trainer.precision,
        "memory_format": trainer.memory_format,
    }
    if dev.type == "cuda":
        where["cuda_graphs"] = trainer.graphed()
    return {
        "name": cfg.name,
        "seed": cfg.seed,
        "rounds": cfg.train.rounds,
        "final_accuracy": final["test_acc"],
        "final_loss": final["test_loss"],
        "wall_time": result.wall_time,
        "delta": cfg.accountant.delta,
        "accountant": cfg.accountant.kind,
        "ran_on": where,
    }


#: The protocols a recipe can run, each one builder of the same runner: FedAvg-style rounds
#: (selection, privacy plan, incentive, aggregation) or JDP-FL (a ``jdp:`` section).
PROTOCOLS: dict[str, Callable[..., Built | BuiltJDP]] = {"rounds": build_engine, "jdp": build_jdp}


def protocol_of(cfg: RunConfig) -> str:
    """The protocol a recipe runs: ``jdp`` with a ``jdp:`` section, else ``rounds``."""
    return "jdp" if cfg.jdp is not None else "rounds"


@dataclass(frozen=True)
class GridCell:
    """One (recipe, seed) cell of a comparison grid."""

    label: str
    cfg: RunConfig
    out: Path


def run_grid(
    cells: Sequence[GridCell],
    *,
    on_cell: Callable[[GridCell, bool], Any] | None = None,
    run: Callable[[GridCell], dict[str, Any]] | None = None,
    jobs: int = 1,
    on_done: Callable[[GridCell, dict[str, Any]], Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every cell whose folder has no ``summary.json``; skip (and reuse) the others.

    ``jobs`` > 1 runs that many cells at once, each in its own process with ``cores // jobs``
    of this machine's cores (its worker pool and threads within that share; ``run`` is not used
    then). Every cell resumes from its own checkpoint, so a stopped grid loses at most the
    rounds in progress. Summaries come back in cell order."""
    jobs = check_jobs(jobs, cells)
    todo: list[GridCell] = []
    done_before: dict[int, dict[str, Any]] = {}
    for k, cell in enumerate(cells):
        done = (cell.out / "summary.json").exists()
        if on_cell is not None:
            on_cell(cell, done)
        if done:
            done_before[k] = json.loads((cell.out / "summary.json").read_text())
        else:
            todo.append(cell)
    got: dict[int, dict[str, Any]] = dict(done_before)
    index = {id(c): k for k, c in enumerate(cells)}
    if jobs == 1 or len(todo) <= 1:
        for cell in todo:
            summary = (run or (lambda c: run_one(c.cfg, c.out)))(cell)
            got[index[id(cell)]] = summary
            if on_done is not None:
                on_done(cell, summary)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        share = max(1, available_cores() // jobs)
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as ex:
            futures = {ex.submit(_run_cell, cell.cfg, str(cell.out), share): cell for cell in todo}
            for fut in cf.as_completed(futures):
                cell = futures[fut]
                summary = fut.result()
                got[index[id(cell)]] = summary
                if on_done is not None:
                    on_done(cell, summary)
    return [{"label": cell.label, **got[k]} for k, cell in enumerate(cells)]


def _run_cell(cfg: RunConfig, out: str, cores: int) -> dict[str, Any]:
    """One grid cell in a process of its own, within ``cores`` (``run_grid(jobs > 1)``)."""
    return run_one(cfg, out, cores=cores)


def check_jobs(jobs: int, cells: Sequence[GridCell] = ()) -> int:
    """``jobs`` in 1..cores, and jobs × each cell's ``train.workers`` within the machine's cores;
    else a ValueError naming the option and the allowed range."""
    cores = available_cores()
    if isinstance(jobs, bool) or not 1 <= int(jobs) <= cores:
        raise ValueError(f"--jobs: must be an integer in 1..{cores} (this machine's cores), got {jobs}")
    for cell in cells:
        w = cell.cfg.train.workers
        if jobs > 1 and w is not None and jobs * w > cores:
            raise ValueError(
                f"--jobs: {jobs} cells at once × train.workers {w} of {cell.label} = {jobs * w} processes "
                f"exceeds this machine's {cores} cores; lower --jobs or train.workers (jobs × workers ≤ cores)"
            )
    return int(jobs)


def summarise_grid(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per label: accuracy, wall time and ε as mean ± std over seeds."""
    rows = []
    for label in dict.fromkeys(s["label"] for s in summaries):
        group = [s for s in summaries if s["label"] == label]
        acc = mean_std([100 * s["final_accuracy"] for s in group])
        wall = mean_std([s["wall_time"] for s in group])
        eps = mean_std([s["epsilon_max"] for s in group])
        rows.append(
            {
                "label": label,
                "seeds": len(group),
                "accuracy_mean": acc[0],
                "accuracy_std": acc[1],
                "wall_time_mean": wall[0],
                "wall_time_std": wall[1],
                "epsilon_max_mean": eps[0],
                "epsilon_max_std": eps[1],
                "accounting": group[0].get("privacy_accounting", ""),
            }
        )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | seeds | final accuracy (%) | wall time (s) | ε max over clients (δ) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["epsilon_max_mean"]
        eps = (
            "∞ (no privacy)" if r.get("accounting") == "none" else "—" if not math.isfinite(m) else f"{m:.3g} ± {r['epsilon_max_std']:.2g}"
        )
        lines.append(
            f"| {r['label']} | {r['seeds']} | {r['accuracy_mean']:.2f} ± {r['accuracy_std']:.2f} | "
            f"{r['wall_time_mean']:.1f} ± {r['wall_time_std']:.1f} | {eps} |"
        )
    return "\n".join(lines) + "\n"
