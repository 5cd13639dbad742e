"""The ``fedgame`` command line (Typer + Rich): the only code that prints."""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import importlib

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from typer.core import TyperGroup

if TYPE_CHECKING:
    from fedgame.pipeline.config import RunConfig


def _usage_error() -> type[Exception]:
    """Click's ``UsageError`` as Typer raises it: from the ``click`` package (Typer up to 0.2x
    depends on it), or from the copy newer Typer releases carry inside (``typer._click``)."""
    try:
        import typer.core as core

        base = getattr(core, "click", None)
        mod = base.exceptions if base is not None else importlib.import_module("typer._click.exceptions")
    except ImportError:  # pragma: no cover
        mod = importlib.import_module("click.exceptions")
    err_cls: type[Exception] = mod.UsageError
    return err_cls


UsageError = _usage_error()
console = Console()
err = Console(stderr=True, soft_wrap=True)  # an error is one line however narrow the terminal

#: What a user's input can raise that is not already turned into a one-line error where it
#: arises (a file that is not what it should be, a plug-in that does not import or build, a
#: value out of range deep in a solver): the top-level handler turns each into one line.
USER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    ImportError,
    SyntaxError,
    yaml.YAMLError,
    UnicodeError,
    EOFError,
    pickle.UnpicklingError,
    RuntimeError,
    AssertionError,
)


def _one_line(e: BaseException) -> str:
    """:func:`fedgame.pipeline.config.one_line`, cut to 400 characters for the terminal."""
    from fedgame.pipeline.config import one_line

    text = one_line(e)
    return text if len(text) <= 400 else text[:397] + "..."


class _OneLineErrors(TyperGroup):
    """The command group with fedgame's error contract: a usage error (an unknown option, a value
    of the wrong type) and any :data:`USER_ERRORS` escaping a command become one line on stderr,
    ``error: <what> (...)``, exit status 2; ``fedgame --debug`` re-raises to show the traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except UsageError as e:
            if _DEBUG:
                raise
            ctx_ = getattr(e, "ctx", None)
            where = f"{ctx_.command_path}: " if ctx_ is not None else ""
            err.print(f"[bold red]error:[/] {escape(where + _one_line(e))} (--help lists the options)", highlight=False)
            raise typer.Exit(2) from None
        except USER_ERRORS as e:
            if _DEBUG:
                raise
            kind = "" if isinstance(e, (ValueError, OSError)) else f"{type(e).__name__}: "
            err.print(f"[bold red]error:[/] {escape(kind + _one_line(e))} (fedgame --debug shows the traceback)", highlight=False)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_OneLineErrors,
    help="fedgame: differentially private FL with privacy-aware sampling and incentive mechanisms.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a recipe field: key.path=value (YAML value); ~key.path deletes one")
]
LogToOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--log-to",
        help="also track the rounds in tensorboard (<run>/tensorboard) or mlflow (MLFLOW_TRACKING_URI, default sqlite beside the run); repeatable",
    ),
]


_DEBUG = False


def _fail(msg: str) -> None:
    """Print ``error: msg`` as one line (whitespace runs, newlines included, become one space) and exit 2."""
    err.print(f"[bold red]error:[/] {' '.join(msg.split())}", highlight=False)
    raise typer.Exit(2)


def _writable_folder(path: Path, option: str) -> None:
    """Refuse, in one line, a folder argument that cannot be a folder this process writes: a
    file, under a file, or a place it may not create or write."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        _fail(f"{option}: {path} is not a folder ({p} is a file); give a folder path")
    if p.exists() and not os.access(p, os.W_OK | os.X_OK):
        _fail(f"{option}: {path}: no permission to write in {p}; give a folder you can write")


def _load(recipe: Path, overrides: list[str] | None) -> Any:
    from fedgame.pipeline.config import RecipeError, load_recipe

    try:
        return load_recipe(recipe, overrides or [])
    except RecipeError as e:
        msg = "; ".join(str(e).splitlines())
        _fail(escape(msg if msg.startswith("recipe:") else f"{recipe}: {msg}"))


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("acc {task.fields[acc]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def _run_with_progress(
    cfg: Any, out: Path, *, resume: bool, label: str, execute: Any = None, log_to: list[str] | None = None
) -> dict[str, Any]:
    from fedgame.data import DatasetNotFoundError
    from fedgame.pipeline.runner import RunFolderMismatch, run_one
    from fedgame.pipeline.store import UnsafeCheckpoint
    import sys
    import time

    from fedgame.sim import MissingReplies

    from fedgame.pipeline.tracking import Trackers, TrackingUnavailable, open_trackers

    try:
        trackers = open_trackers(log_to, out, cfg) if log_to else Trackers([])
    except (TrackingUnavailable, ValueError) as e:
        _fail(escape(str(e)))
    plain = not console.is_terminal  # a batch job: one line per round, no bar
    prog = _progress() if not plain else None
    if plain:
        from rich.text import Text

        label = Text.from_markup(label).plain  # "a\\[x]" (escaped for the bar) → "a[x]"
    if prog is not None:
        prog.start()
        task = prog.add_task(f"{label} [dim](setting up: data, game solve, noise calibration)[/]", total=cfg.train.rounds, acc="—")
    else:
        print(f"{label}: setting up (data, game solve, noise calibration)", flush=True)
    t0 = [time.perf_counter()]

    def on_start(total: int) -> None:
        if prog is not None:
            prog.update(task, total=total, description=label)
        else:
            print(f"{label}: training {total} rounds", flush=True)
        t0[0] = time.perf_counter()

    def on_round(rec: dict[str, Any]) -> None:
        trackers.on_round(rec)
        got = rec.get("test_acc")
        acc = float(got) if isinstance(got, (int, float)) else math.nan
        has_acc = acc == acc
        if prog is not None:
            shown = f"{100 * acc:.2f}%" if has_acc else prog.tasks[task].fields["acc"]
            prog.update(task, completed=rec["round"] + 1, acc=shown)
            return
        parts = [f"{label}: round {rec['round'] + 1}/{cfg.train.rounds}"]
        loss = rec.get("train_loss")
        if isinstance(loss, float) and loss == loss:
            parts.append(f"train loss {loss:.4f}")
        if has_acc:
            parts.append(f"test acc {100 * acc:.2f}%")
        parts.append(f"{time.perf_counter() - t0[0]:.0f} s")
        print("  ".join(parts), file=sys.stdout, flush=True)

    summary: dict[str, Any] | None = None
    try:
        try:
            summary = run_one(cfg, out, resume=resume, on_round=on_round, on_start=on_start, execute=execute)
        except (DatasetNotFoundError, RunFolderMismatch, MissingReplies, UnsafeCheckpoint) as e:
            _fail(escape(str(e)))
        except (ValueError, OSError) as e:  # a user's setting the recipe checks could not catch
            if _DEBUG:
                raise
            _fail(f"{escape(str(e))} (fedgame --debug shows the traceback)")
        assert summary is not None
        if prog is not None:
            prog.update(task, completed=cfg.train.rounds, acc=f"{100 * summary['final_accuracy']:.2f}%")
        else:
            print(f"{label}: done, final accuracy {100 * summary['final_accuracy']:.2f}%", flush=True)
    finally:
        trackers.close(summary)
        if prog is not None:
            prog.stop()
    assert summary is not None
    return summary


def _results_table(rows: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title)
    for col in ("run", "seeds", "final accuracy (%)", "wall time (s)", "ε max (δ=1e-5)", "accounting"):
        t.add_column(col)
    for r in rows:
        eps = "—" if not r["epsilon_max_mean"] else f"{r['epsilon_max_mean']:.3g} ± {r['epsilon_max_std']:.2g}"
        t.add_row(
            escape(r["label"]),
            str(r["seeds"]),
            f"{r['accuracy_mean']:.2f} ± {r['accuracy_std']:.2f}",
            f"{r['wall_time_mean']:.1f}",
            eps,
            r.get("accounting", ""),
        )
    return t


def _version(value: bool) -> None:
    if value:
        from fedgame import __version__

        console.print(f"fedgame {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log at INFO level")] = False,
    plugin: Annotated[
        list[str] | None,
        typer.Option("--plugin", help="import a plug-in module (dotted name or .py file) before the recipe is read; repeatable"),
    ] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="show the traceback of an error instead of its one line")] = False,
) -> None:
    del version
    global _DEBUG
    _DEBUG = debug
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # dp-accounting logs every fractional RDP order it drops; the drop is harmless (it only
    # loosens ε slightly) and the flood would bury the progress bars.
    logging.getLogger("absl").setLevel(logging.INFO if verbose else logging.ERROR)
    if plugin:
        from fedgame.core.plugins import load_plugins

        try:
            load_plugins(plugin)
        except ImportError as e:
            _fail(escape(str(e)))
        except (SyntaxError, TypeError, ValueError, NameError, AttributeError) as e:  # the plug-in's own code
            if _DEBUG:
                raise
            _fail(escape(f"--plugin {', '.join(plugin)}: {type(e).__name__}: {_one_line(e)} (fedgame --debug shows the traceback)"))


@app.command()
def init(
    dest: Annotated[Path, typer.Argument(help="folder to create; the recipes go to DEST/recipes")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="overwrite recipes already there")] = False,
) -> None:
    """Copy the shipped recipes (FedPCS, PHS, QI-DPFL, JDP-FL, the main job) out of the installed package."""
    from importlib.resources import files

    _writable_folder(dest / "recipes", "DEST")
    src = files("fedgame") / "recipes"
    out = dest / "recipes"
    written = 0
    for group in sorted(src.iterdir(), key=lambda p: p.name):
        if not group.is_dir():
            continue
        for item in sorted(group.iterdir(), key=lambda p: p.name):
            if not item.name.endswith(".yaml"):
                continue
            target = out / group.name / item.name
            if target.exists() and not force:
                _fail(f"init: {target} exists; pass --force to overwrite, or choose another folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item.read_text())
            written += 1
    console.print(f"[green]ok[/] {written} recipes in {out}; try: fedgame run {out / 'main' / 'fedpcs.yaml'}")


@app.command()
def validate(
    recipe: Path,
    set_: SetOpt = None,
    solve: Annotated[
        bool, typer.Option("--solve", help="solve (and cache) the incentive's game when it is not cached, so every plug-in is built")
    ] = False,
) -> None:
    """Check a recipe without running it: its fields, that its data are found and its
    partition can be drawn, and every plug-in built as ``run`` builds it (nothing is trained)."""
    from fedgame.core.seeding import Streams
    from fedgame.data import DatasetNotFoundError
    from fedgame.pipeline.build import build_data, check_model, load_split
    from fedgame.testing.dataset import check_split

    cfg = _load(recipe, set_)
    try:
        split = load_split(cfg)
        try:
            check_split(cfg.data.dataset, split)  # the dataset contract, on the recipe's own data
        except AssertionError as e:
            raise ValueError(f"data.dataset: {e}") from None
        data = build_data(cfg, Streams(seed=cfg.seed), split)
        check_model(cfg, data)
        built = _build_plugins(cfg, data, solve=solve)
    except (DatasetNotFoundError, ValueError) as e:
        _fail(f"{recipe}: {escape(str(e))}")
    sizes = data.sizes
    console.print(
        f"[green]data ok[/] {cfg.data.dataset}: {len(data.train.y)} training examples over {len(sizes)} clients "
        f"({min(sizes)}–{max(sizes)} each), {len(data.test.y)} test examples"
    )
    console.print(
        f"[green]ok[/] {recipe}: {cfg.name} — {cfg.data.dataset}, {len(sizes)} clients, "
        f"{cfg.train.rounds} rounds, selection {cfg.selection.kind}, privacy {cfg.privacy.kind}"
    )
    console.print(f"trains on {escape(_where(cfg))}")
    console.print(escape(built))


def _build_plugins(cfg: RunConfig, data: Any, *, solve: bool = False) -> str:
    """Build the recipe's selection, privacy plan, incentive, aggregation and accountant (or
    the JDP-FL protocol's auction, mechanisms and rule) as ``run`` builds them, without
    training, so a plug-in that fails to build is one line at ``validate``
    (:func:`fedgame.pipeline.build.plugin_call` names it). An incentive whose plan takes long
    to solve and is not cached yet (:meth:`~fedgame.incentives.PlannedIncentive.plan_at_hand`:
    FedPCS's game at the paper's size) is solved only with ``solve``; the line returned says
    what was built."""
    from fedgame.incentives import INCENTIVES, PlannedIncentive
    from fedgame.pipeline.build import build_engine, build_jdp

    if cfg.jdp is not None:
        jdp = build_jdp(cfg, data=data)
        jdp.close()
        return (
            f"plug-ins ok (built as fedgame run builds them): JDP-FL auction {cfg.jdp.auction.mechanism} "
            f"({len(jdp.engine.winners)} winners), server rule {type(jdp.engine.rule).__name__}, "
            f"accountant {type(jdp.engine.accountant).__name__}"
        )
    factory = INCENTIVES.get(cfg.incentive.kind)
    if not solve and isinstance(factory, type) and issubclass(factory, PlannedIncentive) and not factory.plan_at_hand(cfg):
        return (
            f"plug-ins: not built: incentive.kind {cfg.incentive.kind!r} must solve its game first and it is not cached "
            "(minutes at the papers' sizes); fedgame validate --solve solves and caches it, then builds every plug-in"
        )
    built = build_engine(cfg, data=data)
    built.close()
    e = built.engine
    return (
        f"plug-ins ok (built as fedgame run builds them): selection {type(e.selection).__name__}, "
        f"privacy {type(e.privacy).__name__}, incentive {type(e.incentive).__name__}, "
        f"accountant {type(e.accountant).__name__}, aggregation {cfg.aggregation.kind}"
    )


def _where(cfg: RunConfig) -> str:
    """Where ``fedgame run`` would train ``cfg`` on this machine: the device (with the GPU's
    name), the worker processes, the precision and, on a GPU, whether steps replay CUDA graphs."""
    from fedgame.pipeline.build import workers_for
    from fedgame.sim.local import device_label, resolve_device

    dev = resolve_device(cfg.train.device)
    t = cfg.train
    if dev.type == "cuda":
        graphs = "CUDA graphs" if t.cuda_graphs else "no CUDA graphs"
        return f"{device_label(dev)}, one process, {t.precision}, {graphs}"
    w = workers_for(cfg, t.clients_per_round)
    return f"cpu, {w} worker process{'es' if w > 1 else ''} (train.workers), {t.precision}"


@app.command()
def run(
    recipe: Path,
    set_: SetOpt = None,
    out: Annotated[Path | None, typer.Option(help="run folder (default runs/<name>)")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="run seeds seed..seed+N-1 into out/seed_<s>")] = 1,
    resume: Annotated[bool, typer.Option(help="continue an interrupted run from its checkpoint")] = False,
    force: Annotated[bool, typer.Option("--force", help="run again into a folder that holds a run, deleting it")] = False,
    log_to: LogToOpt = None,
    backend: Annotated[
        str, typer.Option(help="inprocess (this process) | flower-sim (Flower's Simulation Engine on Ray; needs the flower extra)")
    ] = "inprocess",
    ray_address: Annotated[
        str | None, typer.Option(help="flower-sim: join this Ray cluster (e.g. auto, after `ray start --head`) instead of starting one")
    ] = None,
    round_timeout: Annotated[
        float | None, typer.Option(min=0.001, help="flower-sim: seconds to wait for a round's replies (default: all of them)")
    ] = None,
    on_missing: Annotated[
        str | None,
        typer.Option(
            help="flower-sim: continue (aggregate the replies that arrived) | fail, when a client does not reply (default: the recipe's train.on_missing)"
        ),
    ] = None,
) -> None:
    """Run a recipe and write its results folder."""
    from fedgame.pipeline.runner import summarise_grid
    from fedgame.pipeline.store import ResultStore, RunFolderBusy, lock_run_folder

    if resume and force:
        _fail("--resume and --force contradict each other: --resume continues the run in --out, --force deletes it; pass one")
    execute = _backend(backend, ray_address=ray_address, round_timeout=round_timeout, on_missing=on_missing)
    cfg = _load(recipe, [*(set_ or []), *([] if on_missing is None else [f"train.on_missing={on_missing}"])])
    base = out or Path("runs") / cfg.name
    summaries = []
    for s in range(seeds):
        c = cfg.model_copy(update={"seed": cfg.seed + s})
        d = base if seeds == 1 else base / f"seed_{c.seed}"
        _writable_folder(d, "--out")
        try:
            with lock_run_folder(d):  # held from the check and --force's clearing to the run's end
                if not resume:
                    store = ResultStore(d)
                    if not force and (store.finished or store.exists("checkpoint.pt")):
                        what = "a finished run (summary.json)" if store.finished else "an interrupted run (checkpoint.pt)"
                        _fail(f"out: {d} holds {what}; --resume keeps it (and continues it), --force deletes it and runs again")
                    store.clear()
                summary = _run_with_progress(c, d, resume=resume, label=f"{cfg.name} seed {c.seed}", execute=execute, log_to=log_to)
        except RunFolderBusy as e:
            _fail(escape(str(e)))
        summaries.append({"label": cfg.name, **summary})
    console.print(_results_table(summarise_grid(summaries), f"results in {base}"))


BACKENDS = ("inprocess", "flower-sim")


def _backend(name: str, *, ray_address: str | None, round_timeout: float | None, on_missing: str | None) -> Any:
    """The runner's ``execute`` for ``--backend`` (None: in process)."""
    if name not in BACKENDS:
        _fail(f"--backend: must be one of {', '.join(BACKENDS)}, got {name!r}")
    if on_missing not in (None, "continue", "fail"):
        _fail(f"--on-missing: must be 'continue' or 'fail', got {on_missing!r}")
    if name == "inprocess":
        if ray_address is not None or round_timeout is not None or on_missing is not None:
            _fail("--ray-address, --round-timeout, --on-missing: only with --backend flower-sim")
        return None
    try:
        from fedgame.deploy.flower import FlowerSimulation
        from fedgame.deploy.flower.simulation import default_backend_config
    except ImportError as e:
        _fail(f"--backend flower-sim: needs the flower extra (pip install -e '.[flower]'): {escape(str(e))}")
    config = default_backend_config()
    if ray_address is not None:
        config["init_args"] = {"address": ray_address}
    return FlowerSimulation(backend_config=config, round_timeout=round_timeout)


flower_cli = typer.Typer(
    help="Deploy recipes on a Flower federation (SuperLink + SuperNodes; needs the flower extra).", no_args_is_help=True
)
app.add_typer(flower_cli, name="flower")


@flower_cli.command("app")
def flower_app_cmd(
    recipe: Path,
    dir_: Annotated[Path, typer.Argument(metavar="DIR", help="folder to write the Flower app into (pyproject.toml, README.md)")],
    set_: SetOpt = None,
    nodes: Annotated[
        int | None, typer.Option(min=1, help="number of SuperNodes, one per partition (sets data.partition.n_clients)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="results folder on the SuperLink's machine (default runs/<name>, made absolute)")] = None,
    on_missing: Annotated[
        str | None,
        typer.Option(
            help="continue (aggregate the replies that arrived) | fail, when a selected client does not reply (default: the recipe's train.on_missing)"
        ),
    ] = None,
    round_timeout: Annotated[
        float, typer.Option(min=0.0, help="seconds to wait for a round's replies; 0: until every reply or node error")
    ] = 0.0,
    register_timeout: Annotated[float, typer.Option(min=0.001, help="seconds to wait for every SuperNode to connect and register")] = 300.0,
    resume: Annotated[bool, typer.Option(help="continue the results folder's checkpoint instead of starting afresh")] = False,
    superlink: Annotated[str, typer.Option(help="the SuperLink's host:port, for the commands in DIR/README.md")] = "127.0.0.1:8000",
    silo: Annotated[
        bool,
        typer.Option(help="each SuperNode reads its own files (--node-config \"data-dir='/its/folder'\"); the server never opens them"),
    ] = False,
    server_data: Annotated[
        Path | None,
        typer.Option(
            help="--silo: a data folder on the SuperLink's machine, laid out like a node's, whose test split the server evaluates on (default: federated evaluation on the nodes' held-out splits) and whose training split holds a JDP-FL personal rule's validation set (data.validation examples; such a recipe needs it)"
        ),
    ] = None,
) -> None:
    """Write a Flower app for RECIPE into DIR, to run with `flwr run DIR <connection>` on a SuperLink."""
    if on_missing not in (None, "continue", "fail"):
        _fail(f"--on-missing: must be 'continue' or 'fail', got {on_missing!r}")
    overrides = [*(set_ or []), *([] if on_missing is None else [f"train.on_missing={on_missing}"])]
    if nodes is not None:
        for o in overrides:
            key, _, value = o.partition("=")
            if key.strip() == "data.partition.n_clients" and value.strip() != str(nodes):
                _fail(f"--nodes {nodes} contradicts --set {escape(o)} (both set data.partition.n_clients)")
        overrides.append(f"data.partition.n_clients={nodes}")
    cfg = _load(recipe, overrides)
    try:
        from fedgame.deploy.flower.deployment import supernode_commands, write_app
    except ImportError as e:
        _fail(f"flower app: needs the flower extra (pip install -e '.[flower]'): {escape(str(e))}")
    try:
        path = write_app(
            cfg,
            dir_,
            out=out or Path("runs") / cfg.name,
            round_timeout=round_timeout,
            register_timeout=register_timeout,
            resume=resume,
            superlink=superlink,
            silo=silo,
            server_data=server_data,
        )
    except ValueError as e:
        _fail(escape(str(e)))
    n = cfg.data.n_clients
    console.print(f"[green]wrote[/] {escape(str(path))}: {escape(cfg.name)}, {n} clients, {cfg.train.rounds} rounds")
    each = "one per silo, each with its own data-dir" if silo else "one per partition"
    console.print(f"start {n} SuperNode(s), {each} (all commands: {escape(str(dir_ / 'README.md'))}):")
    cmds = supernode_commands(n, superlink, silo=silo)
    for c in cmds[:3] + (["..."] if n > 4 else []) + (cmds[3:] if n <= 4 else cmds[-1:]):
        console.print(f"  {escape(c)}", soft_wrap=True)
    console.print(f"then: flwr run {escape(str(dir_))} <connection> --stream", soft_wrap=True)


@app.command()
def compare(
    recipes: list[Path],
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option(help="grid folder")] = Path("runs/compare"),
    seeds: Annotated[int, typer.Option(min=1, help="seeds per recipe")] = 3,
    report: Annotated[bool, typer.Option(help="write report.md with plots into the grid folder")] = True,
    grid: Annotated[
        list[str] | None,
        typer.Option("--grid", help="sweep a field over values: key.path=v1,v2 (e.g. selection.kind=uniform,data_size); repeat to cross"),
    ] = None,
    jobs: Annotated[
        int, typer.Option(help="cells run at once, each in its own process with cores/jobs cores (jobs × workers ≤ cores)")
    ] = 1,
    log_to: LogToOpt = None,
    plans: Annotated[
        Path | None,
        typer.Option(
            help="a folder of finished runs whose FedPCS game plans the cells play instead of solving their games again "
            "(a grid resumed on another host stays paired with its committed cells)"
        ),
    ] = None,
) -> None:
    """Run recipes (× --grid values) × seeds, skipping finished cells, into one mean ± std table."""
    from fedgame.experiments.report import write_report
    from fedgame.incentives.fedpcs.plugin import reuse_plans
    from fedgame.pipeline.results import played_plans
    from fedgame.pipeline.runner import GridCell, markdown_table, run_grid, summarise_grid
    from fedgame.pipeline.store import ResultStore

    _writable_folder(out, "--out")
    if log_to and jobs > 1:
        _fail("--log-to: tracks cells run one at a time (--jobs 1); the results folders hold every cell's rounds either way")
    cfgs = [c for r in recipes for c in _expand(r, set_, grid or [])]
    cells = [
        GridCell(label=c.name, cfg=c.model_copy(update={"seed": c.seed + s}), out=out / _folder(c.name) / f"seed_{c.seed + s}")
        for c in cfgs
        for s in range(seeds)
    ]

    if plans is not None:
        try:
            todo = [c.cfg for c in cells if not (c.out / "summary.json").exists()]  # run_grid's "finished"
            for line in reuse_plans(played_plans(plans), todo):
                console.print(escape(line))
        except ValueError as e:
            _fail(escape(str(e)))

    def on_cell(cell: GridCell, done: bool) -> None:
        if done:
            console.print(f"[dim]skip {escape(str(cell.out))} (finished)[/]")

    def on_done(cell: GridCell, summary: dict[str, Any]) -> None:
        if jobs > 1:
            console.print(
                f"done {escape(cell.label)} seed {cell.cfg.seed}: {100 * summary['final_accuracy']:.2f} % ({summary['wall_time']:.0f} s)"
            )

    try:
        summaries = run_grid(
            cells,
            on_cell=on_cell,
            run=lambda c: _run_with_progress(c.cfg, c.out, resume=True, label=escape(f"{c.label} seed {c.cfg.seed}"), log_to=log_to),
            jobs=jobs,
            on_done=on_done,
        )
    except ValueError as e:
        if str(e).startswith("--jobs"):
            _fail(escape(str(e)))
        raise
    rows = summarise_grid(summaries)
    store = ResultStore(out)
    store.write_csv("comparison.csv", rows)
    store.write_text("comparison.md", markdown_table(rows))
    console.print(_results_table(rows, escape(f"comparison ({seeds} seeds) — {out}/comparison.csv")))
    if report:
        path = write_report([out], out / "report", title=f"fedgame comparison: {', '.join(c.name for c in cfgs)}")
        console.print(f"report: {path}")


def _folder(name: str) -> str:
    """A shell-friendly folder name for a run label (``a[kind=x]`` → ``a_kind=x``)."""
    import re

    return re.sub(r"[^\w.=+-]+", "_", name).strip("_")


def _expand(recipe: Path, overrides: list[str] | None, grid: list[str]) -> list[Any]:
    """One config per combination of ``--grid`` values, named ``<name>[key=value,...]``."""
    import itertools

    axes: list[list[tuple[str, str]]] = []
    for g in grid:
        if "=" not in g:
            _fail(f"--grid {g!r}: expected key.path=v1,v2,...")
        key, vals = g.split("=", 1)
        axes.append([(key.strip(), v.strip()) for v in vals.split(",") if v.strip()])
    out = []
    for combo in itertools.product(*axes) if axes else [()]:
        cfg = _load(recipe, [*(overrides or []), *(f"{k}={v}" for k, v in combo)])
        if combo:
            cfg = cfg.model_copy(update={"name": f"{cfg.name}[{','.join(f'{k.split(chr(46))[-1]}={v}' for k, v in combo)}]"})
        out.append(cfg)
    return out


@app.command("claim")
def claim(
    a: Annotated[Path, typer.Argument(help="folder of runs A (every summary.json under it)")],
    b: Annotated[Path, typer.Argument(help="folder of runs B")],
    key: Annotated[str, typer.Option(help="summary.json field to compare")] = "final_accuracy",
    out: Annotated[Path | None, typer.Option(help="write claim.json and claim.md into this folder")] = None,
) -> None:
    """Is A above B? mean ± std of each and the verdict of one rule: a one-sided paired t-test over
    the common seeds (Welch's t without two), with the difference, its 95 % interval and p; holds /
    fails / not decided at p < 0.05 (docs/reproduction.md)."""
    from fedgame.experiments.claims import gap, read_runs

    try:
        g = gap(read_runs(a, key), read_runs(b, key))
    except ValueError as e:
        _fail(escape(str(e)))
    scale, unit = (100.0, " points") if "acc" in key else (1.0, "")
    md = g.markdown(a.name, b.name, scale=scale, unit=unit)
    console.print(md)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "claim.json").write_text(json.dumps({"a": str(a), "b": str(b), "key": key, **g.to_dict()}, indent=2) + "\n")
        (out / "claim.md").write_text(md + "\n")


@app.command("export")
def export_cmd(
    runs: Annotated[Path, typer.Argument(help="a folder of runs written by `fedgame run`/`compare`")],
    dest: Annotated[Path, typer.Argument(help="the results folder the per-seed files go to")],
) -> None:
    """Copy summary.json, metrics.csv, config.yaml (and privacy.csv, a FedPCS run's game) of every
    finished run under RUNS to the same <cell>/seed_<k>/ under DEST (no checkpoints, partitions or
    datasets): what a committed table is built from."""
    from fedgame.pipeline.results import export_runs

    _writable_folder(dest, "DEST")
    try:
        done = export_runs(runs, dest)
    except ValueError as e:
        _fail(escape(str(e)))
    typer.echo(f"{len(done)} finished runs exported to {dest}")


@app.command("report")
def report_cmd(
    dirs: list[Path],
    kind: Annotated[
        str | None,
        typer.Option(
            help="runs | table2 | table4 | phs-fig5 | phs-tight | kappa-sweep | qidpfl | qidpfl-curve | jdp-auction | jdp-fig3 | jdp-fig4 | jdp-fig5 | reproduction (default: chosen from what DIR holds)"
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "--dest", help="where the report goes (default: DIR/report for runs, DIR for the tables, docs/reproduction.md)"
        ),
    ] = None,
    budget: Annotated[str, typer.Option(help="label for the training budget the grid used (tables)")] = "reduced",
    reproduction: Annotated[bool, typer.Option("--reproduction", help="same as --kind reproduction")] = False,
) -> None:
    """Write a report for results folders: a paper's table and figures when every run under DIR is
    one of its recipes, else accuracy, losses, partition, privacy and game figures (--kind chooses)."""
    from fedgame.experiments.reports import KINDS, detect, write

    if out is not None:
        _writable_folder(out if out.suffix != ".md" else out.parent, "--out")
    chosen = "reproduction" if reproduction else kind
    if chosen is None and dirs and dirs[0].is_dir():
        chosen = detect(dirs[0])
        if chosen != "runs":
            err.print(f"[dim]report kind {chosen} (from the runs' recipes; --kind runs for the plain run report)[/]")
    if chosen is not None and chosen not in KINDS:
        _fail(f"--kind: must be one of {', '.join(KINDS)}, got {chosen!r}")
    try:
        line = write(chosen, dirs, out, budget=budget)
    except (ValueError, FileNotFoundError) as e:
        _fail(escape(str(e)))
    console.print(escape(line))


@app.command("solve")
def solve_cmd(
    game: Annotated[str, typer.Argument(help="the game to solve: fedpcs | phs | qidpfl | jdp")],
    input_: Annotated[str, typer.Option("--input", "-i", help="problem JSON file, or - for stdin")] = "-",
    time_limit: Annotated[
        float, typer.Option("--time-limit", min=1, help="refuse an instance estimated to take longer (seconds; jdp's M2 payments)")
    ] = 600,
) -> None:
    """Solve a game on its own (no training) and print the solution as JSON.

    The four games: fedpcs (FedPCS's mean-field Stackelberg reward game; a "stackelberg" block
    solves the server's true cost), phs (PHS Problem 1: per-client sampling probabilities under
    DP budgets), qidpfl (QI-DPFL's screening and reward game), jdp (JDP-FL's auctions M1/M2).
    The problem is a JSON object read from --input FILE or piped on stdin (docs/api.md, tests/cli)."""
    import json
    import sys

    from fedgame.solve import ProblemError, solve_fedpcs, solve_jdp, solve_phs, solve_qidpfl

    solvers = {"fedpcs": solve_fedpcs, "phs": solve_phs, "qidpfl": solve_qidpfl, "jdp": solve_jdp}
    if game not in solvers:
        _fail(f"solve: unknown game {game!r}; choose from {', '.join(solvers)}")
    if input_ == "-" and sys.stdin.isatty():
        _fail(f"solve {game}: no input: pipe the problem JSON on stdin or give --input FILE (fedgame solve --help)")
    try:
        text = sys.stdin.read() if input_ == "-" else Path(input_).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        _fail(f"--input: {input_} is not a text (UTF-8) file; give the problem as JSON")
    except OSError as e:
        _fail(f"--input: cannot read {input_}: {e.strerror}")
    if not text.strip():
        _fail(f"solve {game}: no input: the problem JSON is empty")

    def finite_only(name: str) -> float:
        raise ValueError(f"--input: {name} is not a number JSON allows; every number must be finite")

    try:
        raw = json.loads(text, parse_constant=finite_only)
    except json.JSONDecodeError as e:
        _fail(f"--input: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})")
    except ValueError as e:
        _fail(escape(str(e)))
    from fedgame.core.limits import check_memory, solve_estimate

    est = solve_estimate(game, raw)
    if est is not None:
        try:
            check_memory(est[0], field=est[1], what=f"solve {game} with {est[2]}")
        except ValueError as e:
            _fail(escape(str(e)))
    try:
        with _solving(f"solve {game}" + (f" ({est[2]})" if est is not None else "")):
            result = solve_jdp(raw, time_limit=time_limit) if game == "jdp" else solvers[game](raw)
    except ProblemError as e:
        _fail(f"{game} problem: {escape('; '.join(str(e).splitlines()))}")
    sys.stdout.write(json.dumps(finite_json(result), indent=2, allow_nan=False) + "\n")


def _solving(what: str) -> Any:
    """A live line on stderr while a solve runs (spinner and elapsed time; a FedPCS game at the
    papers' size takes minutes), where stderr is a terminal; elsewhere nothing, so piped JSON and
    one-line errors stay as they are. Erased when the solve ends."""
    from contextlib import nullcontext

    if not err.is_terminal:
        return nullcontext()
    bar = Progress(SpinnerColumn(), TextColumn(f"{escape(what)}: solving"), TimeElapsedColumn(), console=err, transient=True)
    bar.add_task(what, total=None)
    return bar


def finite_json(obj: Any, path: str = "", bad: list[str] | None = None) -> Any:
    """``obj`` with every non-finite float replaced by null, and, where there were any, a
    top-level ``"non_finite"`` list naming where (JSON has no NaN or infinity: a solver's NaN
    written as-is made the output unreadable to a JSON parser)."""
    top = bad is None
    found: list[str] = [] if bad is None else bad
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(f"{path or '.'}: {obj}")
        out: Any = None
    elif isinstance(obj, dict):
        out = {k: finite_json(v, f"{path}.{k}", found) for k, v in obj.items()}
    elif isinstance(obj, (list, tuple)):
        out = [finite_json(v, f"{path}[{i}]", found) for i, v in enumerate(obj)]
    else:
        out = obj
    if top and found and isinstance(out, dict):
        out["non_finite"] = found
    return out


def _doc(obj: Any, long: bool, fallback: str = "") -> str:
    """An object's own docstring (not one it inherits): its first sentence, or all of it with ``long``."""
    import re

    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    text = " ".join((own or fallback).split())
    if long or not text:
        return text
    for cut in re.finditer(r"\.\s+(?=[A-Z`])", text):
        word = text[: cut.start()].rsplit(None, 1)[-1] if text[: cut.start()].strip() else ""
        if word.lower() not in _ABBREVIATIONS:  # "Sec. III-C", "Eq. 4", "et al. 2018" end no sentence
            return text[: cut.start() + 1]
    return text


#: words before a full stop that do not end a sentence in the papers' citations
_ABBREVIATIONS = frozenset({"sec", "secs", "eq", "eqs", "fig", "figs", "alg", "thm", "def", "app", "prop", "al", "e.g", "i.e", "cf", "vs"})


_JDP_RULES = {
    "leave_one_out": "JDP-FL's exponential-mechanism aggregation, each model scored by leaving it out (Algorithm 3)",
    "random_groups": "JDP-FL's exponential mechanism over random groups of uploads",
    "fedavg": "plain FedAvg of the uploads (no robustness)",
    "krum": "Krum (Blanchard et al. 2017): the upload closest to its n - f - 2 nearest neighbours",
    "median": "coordinate-wise median (Yin et al. 2018)",
    "trimmed_mean": "coordinate-wise trimmed mean (Yin et al. 2018)",
}
_AUCTIONS = {
    "none": "every client of the partition trains (JDP-FL Figs. 3-5)",
    "M1": "JDP-FL's M1: truthful unit-price auction for data under a budget",
    "M2": "JDP-FL's M2: truthful knapsack auction under a budget",
}
_PROTOCOLS = {
    "rounds (default)": "select, train, privatise, aggregate every round (FedAvg and the FedPCS, PHS, QI-DPFL pipelines)",
    "jdp (a jdp: section)": "JDP-FL: auction once, jointly private local training, server rule over the uploads",
}


def _list_groups(long: bool) -> dict[str, list[tuple[str, str]]]:
    """Everything a recipe can name, by recipe field, from the recipe schema itself."""
    from fedgame.data import DATASETS
    from fedgame.pipeline.config import DataCfg, _models, schema
    from fedgame.incentives import INCENTIVES
    from fedgame.models import MODELS
    from fedgame.privacy.accountants import ACCOUNTANTS
    from fedgame.privacy.plans import PRIVACY_PLANS
    from fedgame.selection import SELECTIONS
    from fedgame.sim import AGGREGATORS

    run = schema()

    def members(models: list[Any], described: dict[str, str] | None = None) -> list[tuple[str, str]]:
        out = []
        for m in models:
            kind = m.model_fields["kind"].default
            out.append((kind, _doc(m, long, (described or {}).get(kind, ""))))
        return out

    aggs = AGGREGATORS.describe()
    return {
        "data.dataset": [(n, DATASETS.get(n).summary()) for n in DATASETS.names()],  # type: ignore[attr-defined]  # a Dataset classmethod
        "data.partition.kind": members(_models(DataCfg.model_fields["partition"].annotation)),
        "model.name": list(MODELS.describe().items()),
        "selection.kind": members(_models(run.model_fields["selection"].annotation), SELECTIONS.describe()),
        "aggregation.kind": list(aggs.items()),
        "privacy.kind": members(_models(run.model_fields["privacy"].annotation), PRIVACY_PLANS.describe()),
        "accountant.kind": [(k, _doc(ACCOUNTANTS.get(k), long)) for k in ACCOUNTANTS.names()],
        "incentive.kind": members(_models(run.model_fields["incentive"].annotation), INCENTIVES.describe()),
        "protocol": list(_PROTOCOLS.items()),
        "jdp.auction.mechanism": list(_AUCTIONS.items()),
        "jdp.aggregator": list(_JDP_RULES.items()),
    }


@app.command("list")
def list_cmd(
    what: Annotated[str, typer.Argument(help="a recipe field (e.g. selection.kind, or selection), or all")] = "all",
    long: Annotated[bool, typer.Option("--long", "-l", help="whole descriptions, not their first sentence")] = False,
) -> None:
    """List everything a recipe can name (built-ins and loaded plug-ins), by recipe field."""
    groups = _list_groups(long)
    aliases = {
        "datasets": "data.dataset",
        "models": "model.name",
        "strategies": "selection.kind",
        "accountants": "accountant.kind",
        "aggregators": "aggregation.kind",
        "partitions": "data.partition.kind",
        "incentives": "incentive.kind",
        "auctions": "jdp.auction.mechanism",
        "robust": "jdp.aggregator",
        "protocols": "protocol",
    }
    chosen = [g for g in groups if what in ("all", g, g.split(".")[0]) or aliases.get(what) == g]
    if not chosen:
        _fail(f"list: unknown group {what!r}; choose from {', '.join(groups)}, {', '.join(aliases)} or all")
    for name in chosen:
        t = Table(title=name, show_header=False, expand=False)
        t.add_column("name", style="bold", no_wrap=True)
        t.add_column("what", overflow="fold")
        for n, d in groups[name]:
            t.add_row(escape(str(n)), escape(d))
        console.print(t)


if __name__ == "__main__":
    app()
