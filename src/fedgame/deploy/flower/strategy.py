"""fedgame as a Flower Message-API :class:`~flwr.serverapp.strategy.Strategy`.

:class:`FedgameStrategy` is the server side of every Flower run fedgame starts (simulation and
deployment) and a strategy a user can put in a ServerApp of their own. It wraps a built fedgame
engine, so it carries *any* registered selection strategy, privacy plan, incentive, accountant
and server update of the recipe; Flower's :meth:`Strategy.start` loop calls it each round:

``configure_train(server_round, arrays, config, grid)``
    On the first call, node discovery (:meth:`FlowerExecutor.connect`): wait for one node per
    partition and learn which node holds which *partition id*; a plan that needs the clients'
    answers (QI-DPFL screening) is built from their ``query.*`` replies. Then the engine's
    first half of the round (:meth:`~fedgame.sim.engine.Engine.begin_round`): the seeded
    selection over partition ids (a strategy that probes clients — losses, trial trainings —
    does so over ``grid`` right there) and the payments. It returns one ``Message`` per chosen
    partition's node, each with its own config: the DP-SGD noise multiplier and clip or the
    upload noise its privacy plan set, and the local steps it is expected to take.
``aggregate_train(server_round, replies)``
    Replies are matched to jobs by what they echo (round, partition, copy), not by arrival
    order; the ledger of each client whose reply arrived is charged, no other; the engine
    aggregates them (:meth:`~fedgame.sim.engine.Engine.finish_round`; a missing reply either
    ends the round with what arrived or stops the run, ``on_missing``), evaluates on the
    server's test split, and the round is committed (record appended, checkpoint written).
    Returns the new global parameters and the round's numeric metrics.
``configure_evaluate`` / ``aggregate_evaluate``
    Nothing to send: evaluation is the server's, every ``train.eval_every`` rounds.

So the same recipe and seed give the same selections, noise scales, ledgers and metrics as the
in-process engine: the rounds differ only in who carries the messages.

A JDP-FL recipe (``build_jdp``) is driven by the same strategy: node discovery also holds the
auction on the nodes' bids, ``configure_train`` returns the winners' ``train.jdp`` messages and
``aggregate_train`` runs the server rule (M4) on their uploads, charges the ledgers, sends the
publications (``train.jdp_publish``, M5 on the nodes) and commits the round
(:mod:`fedgame.deploy.flower.jdp`).

Use it in your own ServerApp::

    built = build_engine(cfg)
    strategy = FedgameStrategy(built, cfg, sink=ResultStore("runs/x"))
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=cfg.train.rounds)

or let :func:`~fedgame.pipeline.runner.run_one` write the whole results folder with it
(``fedgame run --backend flower-sim``, the app ``fedgame flower app`` writes): the strategy is
then the engine's round driver (:meth:`drive`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, MetricRecordValues  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import Result, Strategy  # noqa: E402

from fedgame.core.processes import pin_threads_here  # noqa: E402
from fedgame.deploy.flower._messages import encode_params  # noqa: E402
from fedgame.deploy.flower.executor import FlowerExecutor  # noqa: E402
from fedgame.deploy.flower.jdp import connect_jdp  # noqa: E402
from fedgame.pipeline.build import Built, BuiltJDP, attach_executor  # noqa: E402
from fedgame.pipeline.config import RunConfig  # noqa: E402
from fedgame.deploy.flower.jdp import FlowerJDPClients  # noqa: E402
from fedgame.sim import ClientJob  # noqa: E402
from fedgame.sim.engine import Engine, OnMissing, PendingRound, RoundLoop, RunSink  # noqa: E402
from fedgame.sim.jdp import JDPEngine, JDPJob, JDPPending  # noqa: E402

__all__ = ["FedgameStrategy", "attach_flower", "connect_engine", "job_info", "round_metrics"]

log = logging.getLogger(__name__)


def job_info(engine: Engine) -> Callable[[ClientJob], dict[str, int | float | str]]:
    """Read-only fields every train message shows: the client's data size, the local steps
    it is expected to take and the privacy plan that set its noise."""

    def info(job: ClientJob) -> dict[str, int | float | str]:
        n = int(engine.sizes[job.client])
        return {"n-examples": n, "local-steps": int(engine.trainer.spec.n_steps(n)), "privacy": engine.privacy.name}

    return info


def connect_engine(
    grid: Grid, built: Built, cfg: RunConfig, *, round_timeout: float | None, register_timeout: float, on_missing: OnMissing | None = None
) -> FlowerExecutor:
    """Discover the nodes on ``grid``, point the built engine at them (a plan that needs their
    query answers, e.g. QI-DPFL screening, is rebuilt from them) and return the executor; the
    one start-up path of the simulation and the deployed ServerApp."""
    ex = FlowerExecutor(grid, data=built.data, round_timeout=round_timeout, register_timeout=register_timeout, info=job_info(built.engine))
    ex.connect()
    attach_executor(built, cfg, ex)
    ex.info = job_info(built.engine)
    if on_missing is not None:  # else the recipe's train.on_missing
        built.engine.on_missing = on_missing
    return ex


def round_metrics(record: dict[str, Any]) -> MetricRecord:
    """The numeric, finite entries of a round's record as a Flower MetricRecord (the record
    itself, with the selected/replied/missing lists, goes to ``metrics.csv``)."""
    out: dict[str, MetricRecordValues] = {}
    for k, v in record.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            continue
        out[k] = v
    return MetricRecord(out)


class FedgameStrategy(Strategy):
    """A Flower strategy whose selection, mechanisms, accounting and aggregation are a fedgame
    engine's (see the module docstring). ``sink`` receives each round's record and checkpoint
    when the strategy runs the rounds itself (:meth:`start`); ``on_round`` sees each record;
    ``on_missing`` overrides the recipe's ``train.on_missing``."""

    def __init__(
        self,
        built: Built | BuiltJDP,
        cfg: RunConfig,
        *,
        round_timeout: float | None = None,
        register_timeout: float = 300.0,
        on_missing: OnMissing | None = None,
        sink: RunSink | None = None,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if on_missing not in (None, "continue", "fail"):
            raise ValueError(f"on_missing: must be 'continue' or 'fail' (None: the recipe's), got {on_missing!r}")
        if round_timeout is not None and not round_timeout > 0:
            raise ValueError(f"round_timeout: must be > 0 seconds (or None: wait for every reply), got {round_timeout}")
        self.built = built
        self.cfg = cfg
        self.round_timeout = round_timeout
        self.register_timeout = register_timeout
        self.on_missing: OnMissing | None = on_missing
        self.sink = sink
        self.on_round = on_round
        self.executor: FlowerExecutor | None = None
        self.result: Result | None = None
        self._grid: Grid | None = None
        self._pending: tuple[PendingRound, list[ClientJob], list[Message]] | None = None
        self._pending_jdp: tuple[JDPPending, list[JDPJob], list[Message]] | None = None
        self._commit: Callable[[dict[str, Any]], None] | None = None

    @property
    def engine(self) -> Engine | JDPEngine:
        """The engine of either protocol (node discovery may rebuild it from the nodes'
        answers: QI-DPFL's screening, JDP-FL's auction on their bids)."""
        return self.built.engine

    # -- set-up -------------------------------------------------------------------------
    def connect(self, grid: Grid) -> FlowerExecutor:
        """Node discovery on ``grid`` (once per grid): see :func:`connect_engine`. Also pins
        the calling thread (Flower's ServerApp thread) to this process's torch thread count
        (:func:`~fedgame.core.processes.pin_threads_here`), for a ServerApp that calls
        :meth:`start` itself."""
        pin_threads_here()
        if self.executor is None or self.executor.grid is not grid:
            if isinstance(self.built, BuiltJDP):  # every winner must reply: no on_missing
                self.executor = connect_jdp(
                    grid, self.built, self.cfg, round_timeout=self.round_timeout, register_timeout=self.register_timeout
                )
            else:
                self.executor = connect_engine(
                    grid,
                    self.built,
                    self.cfg,
                    round_timeout=self.round_timeout,
                    register_timeout=self.register_timeout,
                    on_missing=self.on_missing,
                )
        return self.executor

    def initial_arrays(self) -> ArrayRecord:
        """The engine's current global parameters (θ⁰, or the resumed round's)."""
        return encode_params(self.engine.params)

    def drive(self, grid: Grid) -> None:
        """Make this strategy the engine's round driver on ``grid``: ``engine.run`` (and so
        ``run_one``, with its results folder and resume) then runs its rounds through
        :meth:`start`. Connects first, so the start-up is paid here."""
        self.connect(grid)
        self._grid = grid
        self.engine.driver = self

    def __call__(self, loop: RoundLoop, todo: range, commit: Callable[[dict[str, Any]], None]) -> None:
        """The :class:`~fedgame.sim.engine.RoundDriver`: rounds ``todo`` through Flower's loop."""
        if loop is not self.engine or self._grid is None:
            raise RuntimeError("FedgameStrategy: call drive(grid) before running the engine")
        if todo.start != self.engine.t_next:
            raise RuntimeError(f"FedgameStrategy: asked to run from round {todo.start}, the engine is at {self.engine.t_next}")
        self._commit = commit
        try:
            self.result = self.start(self._grid, self.initial_arrays(), num_rounds=len(todo), timeout=self.round_timeout)  # type: ignore[arg-type]  # Flower types timeout as float but passes it to Grid.send_and_receive, which takes None
        finally:
            self._commit = None

    # -- the Strategy interface -----------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Select (seeded, over partition ids) and return one train message per chosen node."""
        executor = self.connect(grid)
        for inflight in (self._pending, self._pending_jdp):
            if inflight is not None:
                raise RuntimeError(f"configure_train: round {inflight[0].t} was configured but its replies were never aggregated")
        engine = self.engine
        if isinstance(engine, JDPEngine):  # JDP-FL: the winners' train.jdp messages
            jdp = self._jdp_clients(engine)
            pending_jdp = engine.begin_round(engine.t_next)
            msgs = jdp.train_messages(pending_jdp.jobs)
            self._pending_jdp = (pending_jdp, pending_jdp.jobs, msgs)
            log.info("round %d (Flower round %d): %d train.jdp messages", pending_jdp.t, server_round, len(msgs))
            return msgs
        pending = engine.begin_round(engine.t_next)
        jobs = pending.jobs()
        msgs = executor.messages(jobs)
        self._pending = (pending, jobs, msgs)
        log.info("round %d (Flower round %d): %d train messages", pending.t, server_round, len(msgs))
        return msgs

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Charge the clients that replied, aggregate, evaluate, commit the round. JDP-FL: the
        server rule on the winners' uploads, then the publications (a second exchange with the
        winners' nodes, each applying M5), then evaluate and commit."""
        engine = self.engine
        if isinstance(engine, JDPEngine):
            if self._pending_jdp is None:
                raise RuntimeError("aggregate_train: no round was configured")
            pending_jdp, jdp_jobs, jdp_msgs = self._pending_jdp
            self._pending_jdp = None
            jdp = self._jdp_clients(engine)
            engine.aggregate(pending_jdp, jdp.train_replies(jdp_jobs, jdp_msgs, replies))
            record = engine.finish_round(pending_jdp, jdp.publish(pending_jdp.publications))
        else:
            if self._pending is None or self.executor is None:
                raise RuntimeError("aggregate_train: no round was configured")
            pending, jobs, msgs = self._pending
            self._pending = None
            pending.deliver(jobs, self.executor.collect(jobs, msgs, replies))
            record = engine.finish_round(pending)
        if self._commit is not None:
            self._commit(record)
        else:
            engine.commit(record, sink=self.sink, on_round=self.on_round)
        return encode_params(engine.params), round_metrics(record)

    @staticmethod
    def _jdp_clients(engine: JDPEngine) -> FlowerJDPClients:
        """The JDP engine's link to its winners' nodes (set by node discovery)."""
        if not isinstance(engine.clients, FlowerJDPClients):
            raise RuntimeError("FedgameStrategy: the JDP-FL engine is not connected to Flower nodes; call connect(grid) first")
        return engine.clients

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """No client-side evaluation: the server evaluates on its test split."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        """What Flower logs at the start: the recipe's mechanisms."""
        e = self.engine
        if isinstance(e, JDPEngine):
            log.info("fedgame strategy: recipe %s (JDP-FL), %d winners, server rule %s", self.cfg.name, e.winners.size, e.rule.name)
            return
        log.info(
            "fedgame strategy: recipe %s, %d clients, selection %s, privacy %s, server update %s, on_missing %s",
            self.cfg.name,
            e.sizes.size,
            type(e.selection).__name__,
            e.privacy.name,
            type(e.server_update).__name__,
            e.on_missing,
        )


def attach_flower(
    grid: Grid,
    built: Built | BuiltJDP,
    cfg: RunConfig,
    *,
    round_timeout: float | None,
    register_timeout: float,
    executor: FlowerExecutor | None = None,
) -> FlowerExecutor:
    """Point a built run at the Flower nodes behind ``grid`` — the one start-up of the
    simulation and the deployed ServerApp: the engine of either protocol is driven by a
    :class:`FedgameStrategy` (a JDP-FL run first holds its auction on the nodes' bids,
    :func:`~fedgame.deploy.flower.jdp.connect_jdp`). ``executor``: nodes already discovered
    (a silo deployment registers them before it builds the engine), kept as they are."""
    strategy = FedgameStrategy(built, cfg, round_timeout=round_timeout, register_timeout=register_timeout)
    if executor is not None:
        if executor.grid is not grid or not executor.node_of:
            raise RuntimeError("attach_flower: the executor given must be connected to this grid")
        strategy.executor = executor
    strategy.drive(grid)
    assert strategy.executor is not None
    return strategy.executor
