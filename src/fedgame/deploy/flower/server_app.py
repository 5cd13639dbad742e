"""The fedgame ServerApp of a deployment: what ``flwr run`` of a ``fedgame flower app`` folder runs.

The SuperLink starts it (in a subprocess, ``--isolation subprocess``) with the app's run config
(:class:`~fedgame.deploy.flower.deployment.DeploymentConfig`). It parses the recipe and calls
:func:`~fedgame.pipeline.runner.run_one` with a :class:`FlowerDeployment` as its ``execute``
hook: ``run_one`` builds the engine exactly as for an in-process run (data, game, selection,
privacy plan, accountant, server update — all here, on the SuperLink's machine), and
:class:`FlowerDeployment` runs it on the SuperNodes as a Flower strategy
(:class:`~fedgame.deploy.flower.strategy.FedgameStrategy`, node discovery first). So the results
folder — ``config.yaml``, ``metrics.csv`` with ``replied``/``missing`` per round,
``privacy.csv``, ``summary.json`` (``backend: flower``) — is the one ``fedgame run`` writes, and
the same seed gives the same numbers.

A silo app (``silo = true``) runs a :class:`SiloDeployment` instead: the engine is built from
what the nodes report at registration (:func:`~fedgame.deploy.flower.silo.build_silo`), so this
process never opens a client's data, and every answer a node sent is listed in
``<out>/queries.jsonl``. A JDP-FL recipe runs so too (its auction on the nodes' bids); its
personal rules score on a validation set drawn from the server's own ``server-data``.

A run that cannot go on (nodes missing at registration, a missing reply with
``on-missing = "fail"``, a bad run config) raises: Flower marks the run failed and shows the
message (``flwr list --run-id <id>``, ``flwr log <id>``, ``flwr run --stream``); the message is
also written to ``<out>/error.txt`` next to the partial results.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import Context  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedgame.data import SiloDataset  # noqa: E402
from fedgame.deploy.flower.deployment import DeploymentConfig  # noqa: E402
from fedgame.deploy.flower.executor import FlowerExecutor  # noqa: E402
from fedgame.deploy.flower.silo import QUERY_LOG, QueryLog, SiloExecutor, SiloRefused, build_silo, server_validation  # noqa: E402
from fedgame.deploy.flower.strategy import attach_flower  # noqa: E402
from fedgame.pipeline.build import Built, BuiltJDP, load_silo, scores_on_validation  # noqa: E402
from fedgame.pipeline.config import RunConfig, parse_recipe  # noqa: E402
from fedgame.pipeline.runner import run_one  # noqa: E402
from fedgame.pipeline.store import ResultStore  # noqa: E402
from fedgame.sim import RunResult  # noqa: E402
from fedgame.sim.engine import MissingReplies  # noqa: E402

__all__ = ["FlowerDeployment", "SiloDeployment", "app", "run_deployment"]

log = logging.getLogger(__name__)


class FlowerDeployment:
    """A :class:`~fedgame.pipeline.runner.Execute` for real SuperNodes behind ``grid``: a
    :class:`FedgameStrategy` connects (waits for every partition's node), then drives the
    engine's rounds through Flower's strategy loop."""

    name = "flower"

    def __init__(
        self,
        grid: Grid,
        *,
        round_timeout: float | None = None,
        register_timeout: float = 300.0,
    ) -> None:
        self.grid = grid
        self.round_timeout = round_timeout
        self.register_timeout = register_timeout
        self.executor: FlowerExecutor | None = None
        self.startup_seconds: float | None = None

    def __call__(self, built: Built | BuiltJDP, cfg: RunConfig, run: Callable[[], RunResult]) -> RunResult:
        tic = time.perf_counter()
        self.executor = attach_flower(self.grid, built, cfg, round_timeout=self.round_timeout, register_timeout=self.register_timeout)
        self.startup_seconds = time.perf_counter() - tic
        return run()

    def describe(self) -> dict[str, Any]:
        ex = self.executor
        return {
            "startup_seconds": self.startup_seconds,
            "round_timeout": self.round_timeout,
            "register_timeout": self.register_timeout,
            **({} if ex is None else ex.describe()),
        }


class SiloDeployment(FlowerDeployment):
    """A :class:`FlowerDeployment` on silo nodes, each with its own files: :meth:`build` is
    ``run_one``'s builder (registration first, then the engine on the nodes' reports; no data
    is opened here), and the rounds run on the executor it connected. Every answer a node sent
    goes to ``out/queries.jsonl``. ``server_data``: the server's own data folder, whose test
    split it evaluates on (None: federated evaluation) and whose training split holds a JDP-FL
    personal rule's validation set (:func:`~fedgame.deploy.flower.silo.server_validation`; such
    a rule needs it; its test split is then optional: without one, federated evaluation).
    ``resume``: the nodes must hold the data the run's ``partition.json`` lists (the same
    fingerprints; each client goes back to the node holding its files, whatever node id that
    node has now); a JDP-FL run cannot resume (its winners' models are on their nodes)."""

    def __init__(
        self,
        grid: Grid,
        *,
        out: str | Path,
        server_data: str | None = None,
        round_timeout: float | None = None,
        register_timeout: float = 300.0,
        resume: bool = False,
    ) -> None:
        super().__init__(grid, round_timeout=round_timeout, register_timeout=register_timeout)
        self.out = Path(out)
        self.server_data = server_data or None
        self.resume = resume
        self.evaluation = "federated"

    def build(self, cfg: RunConfig) -> Built | BuiltJDP:
        """Register the nodes and build the run on their reports (``run_one``'s ``build``)."""
        tic = time.perf_counter()
        test = split = None
        if self.server_data is not None:
            try:
                split = load_silo(cfg, self.server_data)
            except (OSError, ValueError) as e:
                why = "; its training split holds the server's validation set (jdp.aggregator)" if scores_on_validation(cfg) else ""
                raise SiloRefused(f"server-data: {' '.join(str(e).split())}{why}") from None
            test = split.test if len(split.test) else None
            if test is None and not scores_on_validation(cfg):
                raise SiloRefused(f"server-data: {self.server_data!r} has no test split to evaluate on")
        validation = server_validation(cfg, split, self.server_data)
        self.evaluation = "federated" if test is None else "server"
        ex = SiloExecutor(
            self.grid,
            n_clients=cfg.data.n_clients,
            log=QueryLog(self.out / QUERY_LOG),
            round_timeout=self.round_timeout,
            register_timeout=self.register_timeout,
        )
        ex.order = before = self._checkpointed_fingerprints()
        built = build_silo(cfg, ex, server_test=test, server_validation=validation)
        self._check_resume(built, before)
        self.executor = ex
        self.startup_seconds = time.perf_counter() - tic
        return built

    def _checkpointed_fingerprints(self) -> list[str] | None:
        """On resume of a checkpointed run, its clients' data fingerprints in client order (its
        ``partition.json``), else None."""
        path = self.out / "partition.json"
        if not self.resume or not (self.out / "checkpoint.pt").exists() or not path.exists():
            return None
        before = json.loads(path.read_text()).get("data_fingerprints")
        return None if before is None else [str(f) for f in before]

    def _check_resume(self, built: Built | BuiltJDP, before: list[str] | None) -> None:
        """On resume, refuse nodes whose data differ from the checkpointed run's (``before``,
        :meth:`_checkpointed_fingerprints`, read once). A restarted SuperNode has a new Flower
        node id: the executor already gave every client back the node holding its files
        (:attr:`SiloExecutor.order`), so only other data is refused."""
        if before is None:
            return
        now = [r.fingerprint for r in built.data.reports] if isinstance(built.data, SiloDataset) else None
        if before != now:
            raise SiloRefused(
                f"resume: the nodes' data (fingerprints {now}, clients in node-id order) differ from the run's ({before}); "
                "restart the nodes with the same folders, or run afresh (resume = false)"
            )

    def __call__(self, built: Built | BuiltJDP, cfg: RunConfig, run: Callable[[], RunResult]) -> RunResult:
        if self.executor is None:
            raise RuntimeError("SiloDeployment: build the run (its nodes register there) before running it")
        attach_flower(
            self.grid, built, cfg, round_timeout=self.round_timeout, register_timeout=self.register_timeout, executor=self.executor
        )
        return run()

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "silo": True,
            "evaluation": self.evaluation,
            "queries_log": QUERY_LOG,
        }


def run_deployment(grid: Grid, run_config: dict[str, Any]) -> dict[str, Any]:
    """Run the app's recipe on the SuperNodes behind ``grid`` into its ``out`` folder; return
    the summary. Errors (bad run config, missing nodes or replies) are written to
    ``<out>/error.txt`` (when ``out`` is known) and raised."""
    dep = DeploymentConfig.from_run_config(run_config)
    store = ResultStore(dep.out)
    store.path("error.txt").unlink(missing_ok=True)
    try:
        raw = yaml.safe_load(dep.recipe)
        if dep.on_missing is not None:  # the run config's override of the recipe's train.on_missing
            raw.setdefault("train", {})["on_missing"] = dep.on_missing
        cfg = parse_recipe(raw)
        if not dep.resume:
            store.clear()
        log.info("running %s (%d clients, %d rounds) into %s", cfg.name, cfg.data.n_clients, cfg.train.rounds, dep.out)
        if dep.silo:
            silo = SiloDeployment(
                grid,
                out=dep.out,
                server_data=dep.server_data or None,
                round_timeout=dep.timeout,
                register_timeout=dep.register_timeout,
                resume=dep.resume,
            )
            summary = run_one(cfg, Path(dep.out), resume=dep.resume, execute=silo, on_round=_log_round, build=silo.build)
        else:
            execute = FlowerDeployment(grid, round_timeout=dep.timeout, register_timeout=dep.register_timeout)
            summary = run_one(cfg, Path(dep.out), resume=dep.resume, execute=execute, on_round=_log_round)
    except Exception as e:
        store.write_text("error.txt", f"{type(e).__name__}: {e}\n")
        if isinstance(e, MissingReplies):  # a fedgame one-liner: the line is the report, no traceback
            log.error("%s: %s", type(e).__name__, e)
        raise
    log.info("finished %s: accuracy %.4f, epsilon max %s", cfg.name, summary["final_accuracy"], summary["epsilon_max"])
    return summary


def _log_round(record: dict[str, Any]) -> None:
    """One line per round: who replied and who is missing (a JDP-FL round: whose uploads the
    server's model used), the test accuracy when evaluated."""
    acc = record.get("test_acc", float("nan"))
    who = f"replied {record['replied']}, missing {record['missing']}" if "replied" in record else f"used {record.get('used')}"
    log.info("round %d: %s%s (%.1f s)", record["round"], who, "" if acc != acc else f", test accuracy {acc:.4f}", record["round_time"])


def _log_to_run() -> None:
    """fedgame's INFO lines to stderr, which the ServerApp process (ours alone) mirrors into
    the run's log (``flwr run --stream``, ``flwr log``); once, whatever the root logger does."""
    lg = logging.getLogger("fedgame")
    if not lg.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s fedgame: %(message)s"))
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False


class _OneLine(logging.Filter):
    """Drops the traceback Flower logs with a ServerApp's exception when it is one of fedgame's
    one-line errors (:class:`MissingReplies`: nodes missing or refused, replies missing with
    ``on-missing = "fail"``): the line fedgame logged, and ``error.txt``, say it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], MissingReplies):
            record.exc_info = None
            record.exc_text = None
        return True


app = ServerApp()
"""The ServerApp ``flwr run`` loads (``fedgame.deploy.flower.server_app:app``)."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    _log_to_run()
    flwr_log = logging.getLogger("flwr")
    if not any(isinstance(f, _OneLine) for f in flwr_log.filters):
        flwr_log.addFilter(_OneLine())
    run_deployment(grid, dict(context.run_config))
