"""The fedgame ClientApp: one SuperNode is one fedgame client (partition).

Each node learns its partition from its node config (``partition-id``, ``num-partitions``:
set by the simulation engine, or by ``flower-supernode --node-config``), builds the recipe's
dataset, partition, model and trainer once per process (:func:`build_client_side`), and answers:

* ``query.register`` — its partition id, its number of examples and the fingerprint of the
  partition it built, so the server can map Flower node ids to partitions and refuse a node
  that built another partition (other recipe, seed or data files);
* ``train`` — :func:`~fedgame.sim.client.run_client_job` on the job in the message: the very
  function the in-process engine calls, with the noise settings the server's plan chose;
* ``query.losses`` — the global model's mean loss on its data (power-of-choice probes);
* ``query.<name>`` for every client query of :data:`~fedgame.sim.client.QUERIES`
  (``label_counts``, ``bid``) — :func:`~fedgame.sim.client.answer_query` on its own partition:
  the very function the in-process executor calls;
* ``train.jdp`` / ``train.jdp_publish`` — a JDP-FL winner's round
  (:mod:`fedgame.deploy.flower.jdp`): local training from its own model and M3, then M5 on the
  server's publication, its model kept in the node's ``Context.state``.

A node only ever trains its own partition: a job for another one is refused.

**Silo mode** (the run config's ``silo = true``: an app written with ``fedgame flower app
--silo``): the node has no partition id. It loads its *own* files with the recipe's dataset
plug-in from its ``data-dir`` node config (``flower-supernode --node-config
"data-dir='/srv/silo-a'"``; :func:`~fedgame.pipeline.build.load_silo`), and its whole training
split is its client data (:func:`~fedgame.pipeline.build.build_silo_side`). It answers
``query.register`` with its :class:`~fedgame.data.SiloReport` (sizes, label histogram, shapes,
fingerprint: no example), or, when its data cannot be read, with an ``error`` naming the node
and the path; ``train``, ``query.losses``, ``query.<name>`` (``bid`` included) and JDP-FL's
``train.jdp`` / ``train.jdp_publish`` as above for the client index the server gave it (in the
message; the JDP-FL poisoning client dirty-labels its own whole training split); and Flower's
``evaluate`` with its accuracy and loss on its own held-out split (federated evaluation).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fedgame.core.processes import pin_threads_here  # noqa: E402
from fedgame.data import DatasetSplit, silo_report  # noqa: E402
from fedgame.data.partition import fingerprint  # noqa: E402
from fedgame.deploy.flower._messages import (  # noqa: E402
    array_record,
    decode_client,
    decode_job,
    decode_params,
    encode_answer,
    encode_result,
)
from fedgame.deploy.flower.jdp import decode_jdp_job, decode_publish, encode_jdp_reply, load_state, save_state  # noqa: E402
from fedgame.pipeline.build import ClientSide, build_client_side, build_silo_side, check_silo, jdp_poisoned_labels, load_silo  # noqa: E402
from fedgame.pipeline.config import RunConfig, parse_recipe  # noqa: E402
from fedgame.sim.client import QUERIES, ClientView, answer_query, run_client_job  # noqa: E402
from fedgame.sim.jdp import jdp_client_train, jdp_client_update  # noqa: E402
from fedgame.sim.local import LocalTrainer, client_losses, evaluate  # noqa: E402

__all__ = ["DATA_DIR", "RECIPE_KEY", "SILO_KEY", "app", "make_client_app", "recipe_text"]

RECIPE_KEY = "recipe"
"""Run-config key holding the resolved recipe (YAML) when the app is deployed with ``flwr run``."""
SILO_KEY = "silo"
"""Run-config key: true when every node reads its own files (``fedgame flower app --silo``)."""
DATA_DIR = "data-dir"
"""Node-config key of a silo node: the folder its data files are in."""

_SIDES: dict[str, ClientSide] = {}
_SILO_SPLITS: dict[tuple[str, str], DatasetSplit] = {}
_SILO_SIDES: dict[tuple[str, str], ClientSide] = {}
_LOCK = threading.Lock()  # build each client side once
_RUN = threading.Lock()  # one job at a time per process: the trainer's model is shared
_POISONED: dict[tuple[str, str, int], LocalTrainer] = {}


@contextmanager
def _running() -> Iterator[None]:
    """One job at a time (``_RUN``), on the thread count the client side was built with: a
    handler may run on another thread than the one that built it, and torch's count reaches
    MKL only in the thread that set it (:func:`~fedgame.core.processes.pin_threads_here`)."""
    with _RUN:
        pin_threads_here()
        yield


def recipe_text(cfg: RunConfig) -> str:
    """The resolved recipe as YAML: what the server and every node must agree on."""
    text: str = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    return text


def _key(cfg: RunConfig) -> str:
    """The recipe's cache key in this process (its resolved text's hash)."""
    return hashlib.sha256(recipe_text(cfg).encode()).hexdigest()


def _side(cfg: RunConfig) -> ClientSide:
    """This process's client side of ``cfg``, built once (a Ray actor serves many nodes)."""
    key = _key(cfg)
    with _LOCK:
        if key not in _SIDES:
            _SIDES[key] = build_client_side(cfg)
        return _SIDES[key]


def _poisoned_trainer(cfg: RunConfig, side: ClientSide, part: int, where: str = "") -> LocalTrainer:
    """The JDP-FL poisoning client's trainer: the shared model, the labels of ``side``'s part
    ``part`` dirty (:func:`~fedgame.pipeline.build.jdp_poisoned_labels`, as the server's
    in-process run; a silo node's part 0 is its whole training split, ``where`` its data-dir)."""
    key = (_key(cfg), where, part)
    with _LOCK:
        if key not in _POISONED:
            tr = side.trainer
            y = jdp_poisoned_labels(cfg, side.data, tr.y, part)
            _POISONED[key] = LocalTrainer(model=tr.model, x=tr.x, y=y, spec=tr.spec, per_example=tr.per_example, loss=tr.loss)
        return _POISONED[key]


def _partition(context: Context, n_clients: int) -> int:
    """The node's partition id from its node config, checked against the recipe."""
    nc = context.node_config
    if "partition-id" not in nc:
        raise ValueError(
            "node config: 'partition-id' is missing; start the SuperNode with "
            f'--node-config "partition-id=<0..{n_clients - 1}> num-partitions={n_clients}"'
        )
    pid = int(nc["partition-id"])
    if not 0 <= pid < n_clients:
        raise ValueError(f"node config: partition-id must be in [0, {n_clients - 1}], got {pid}")
    if "num-partitions" in nc and int(nc["num-partitions"]) != n_clients:
        raise ValueError(
            f"node config: num-partitions must equal the recipe's data.partition.n_clients ({n_clients}), got {nc['num-partitions']}"
        )
    return pid


def _is_silo(context: Context) -> bool:
    """Whether the run is a silo deployment (its run config's ``silo``)."""
    return context.run_config.get(SILO_KEY, False) is True


def _data_dir(context: Context) -> str:
    """A silo node's data folder, from its node config."""
    d = context.node_config.get(DATA_DIR)
    if not isinstance(d, str) or not d.strip():
        raise ValueError(
            f"node config: '{DATA_DIR}' is missing; start the SuperNode with --node-config \"{DATA_DIR}='/path/to/its/data'\" "
            "(the app is a silo deployment: each node reads its own files)"
        )
    return d


def _silo_split(cfg: RunConfig, data_dir: str) -> DatasetSplit:
    """This node's own data (loaded once per process)."""
    key = (_key(cfg), data_dir)
    with _LOCK:
        if key not in _SILO_SPLITS:
            check_silo(cfg)
            _SILO_SPLITS[key] = load_silo(cfg, data_dir)
        return _SILO_SPLITS[key]


def _silo_side(cfg: RunConfig, context: Context) -> ClientSide:
    """This node's client side: its whole training split, the recipe's model and trainer."""
    d = _data_dir(context)
    split = _silo_split(cfg, d)
    key = (_key(cfg), d)
    with _LOCK:
        if key not in _SILO_SIDES:
            _SILO_SIDES[key] = build_silo_side(cfg, split)
        return _SILO_SIDES[key]


@functools.lru_cache(maxsize=8)
def _parse(text: str) -> RunConfig:
    return parse_recipe(yaml.safe_load(text))


class _Handlers:
    """The ClientApp's message handlers. A module-level class holding only the recipe text, so
    Ray pickles it by reference (the caches and locks above stay per process)."""

    def __init__(self, recipe: str | None) -> None:
        self.recipe = recipe

    def cfg(self, context: Context) -> RunConfig:
        text = self.recipe if self.recipe is not None else context.run_config.get(RECIPE_KEY)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"run config: '{RECIPE_KEY}' must hold the resolved recipe (YAML); write the app with `fedgame flower app`")
        return _parse(text)

    def register(self, msg: Message, context: Context) -> Message:
        cfg = self.cfg(context)
        if _is_silo(context):
            return self._register_silo(msg, context, cfg)
        n = cfg.data.n_clients
        pid = _partition(context, n)
        side = _side(cfg)
        reply: dict[str, Any] = {
            "partition-id": pid,
            "num-partitions": n,
            "n-examples": int(side.parts[pid].numel()),
            "fingerprint": side.data.fingerprint,
            "part-fingerprint": fingerprint([side.data.parts[pid]]),
        }
        return Message(RecordDict({"node": ConfigRecord(reply)}), reply_to=msg)

    def _register_silo(self, msg: Message, context: Context, cfg: RunConfig) -> Message:
        """A silo node's registration: its report (sizes, histogram, shapes, fingerprint), or an
        ``error`` naming the node and its data folder when its data cannot be read, so the
        server fails the run in one line instead of waiting or dropping the node."""
        d: str | None = None
        reply: dict[str, Any]
        try:
            d = _data_dir(context)
            reply = dict(silo_report(_silo_split(cfg, d), node=context.node_id).to_record())
        except (OSError, ValueError) as e:
            text = " ".join(str(e).split())
            where = f"node {context.node_id}" if d is None or d in text else f"node {context.node_id}, data-dir {d!r}"
            reply = {"error": f"{where}: {text}"}
        return Message(RecordDict({"node": ConfigRecord(reply)}), reply_to=msg)

    def train(self, msg: Message, context: Context) -> Message:
        cfg = self.cfg(context)
        if _is_silo(context):  # the server's client index is in the job; the node trains its own data
            job = decode_job(msg.content)
            side = _silo_side(cfg, context)
            with _running():
                result = run_client_job(job, trainer=side.trainer, indices=side.parts[0], streams=side.streams)
            return Message(encode_result(job, result), reply_to=msg)
        pid = _partition(context, cfg.data.n_clients)
        job = decode_job(msg.content)
        if job.client != pid:
            raise ValueError(f"train: this node holds partition {pid}, got a job for partition {job.client}")
        side = _side(cfg)
        with _running():
            result = run_client_job(job, trainer=side.trainer, indices=side.parts[pid], streams=side.streams)
        return Message(encode_result(job, result), reply_to=msg)

    def losses(self, msg: Message, context: Context) -> Message:
        cfg = self.cfg(context)
        if _is_silo(context):
            pid, _ = decode_client(msg.content)
            side, part = _silo_side(cfg, context), 0
        else:
            pid = _partition(context, cfg.data.n_clients)
            side, part = _side(cfg), pid
        params = decode_params(array_record(msg.content, "params"))
        tr = side.trainer
        with _running():
            loss = float(client_losses(tr.model, params, tr.x, tr.y, [side.parts[part]], loss=tr.loss)[0])
        return Message(RecordDict({"loss": MetricRecord({"loss": loss, "partition-id": pid})}), reply_to=msg)

    def _jdp_side(self, what: str, msg: Message, context: Context, cfg: RunConfig, client: int) -> tuple[ClientSide, int, str]:
        """(client side, part, cache key) a JDP-FL message to ``client`` runs on: a silo node's
        own whole training split (part 0; the client index is the server's, in the message),
        else the node's partition (which must be ``client``)."""
        if cfg.jdp is None:
            raise ValueError(f"{what}: the recipe has no jdp section")
        if _is_silo(context):
            pid, _ = decode_client(msg.content)
            if pid != client:
                raise ValueError(f"{what}: the message is for client {pid}, its job for client {client}")
            return _silo_side(cfg, context), 0, _data_dir(context)
        pid = _partition(context, cfg.data.n_clients)
        if client != pid:
            raise ValueError(f"{what}: this node holds partition {pid}, got one for partition {client}")
        return _side(cfg), pid, ""

    def jdp_train(self, msg: Message, context: Context) -> Message:
        """A JDP-FL winner's local training and M3, from the model its node keeps."""
        cfg = self.cfg(context)
        job, adversary = decode_jdp_job(msg.content)
        side, part, where = self._jdp_side("train.jdp", msg, context, cfg, job.client)
        trainer = _poisoned_trainer(cfg, side, part, where) if adversary else side.trainer
        state = load_state(context)
        with _running():
            reply = jdp_client_train(state, job, trainer=trainer, indices=side.parts[part], streams=side.streams)
        save_state(context, state)
        return Message(encode_jdp_reply(job, reply), reply_to=msg)

    def jdp_publish(self, msg: Message, context: Context) -> Message:
        """M5 on the server's publication (or the restart model); the new model stays here."""
        cfg = self.cfg(context)
        pub = decode_publish(msg.content)
        side, part, _ = self._jdp_side("train.jdp_publish", msg, context, cfg, pub.client)
        assert cfg.jdp is not None
        state = load_state(context)
        jdp_client_update(state, pub, n_examples=float(side.parts[part].numel()), self_weighting=cfg.jdp.self_weighting)
        save_state(context, state)
        return Message(RecordDict({"ack": ConfigRecord({"round": pub.t, "partition-id": pub.client})}), reply_to=msg)

    def query(self, msg: Message, context: Context) -> Message:
        """Answer ``query.<name>`` from this node's own partition, with the registry function."""
        cfg = self.cfg(context)
        if _is_silo(context):  # the client index and the number of clients are the server's
            pid, n = decode_client(msg.content)
            side, part = _silo_side(cfg, context), 0
        else:
            n = cfg.data.n_clients
            pid = _partition(context, n)
            side, part = _side(cfg), pid
        name = msg.metadata.message_type.split(".", 1)[1]
        args = dict(msg.content["args"]) if "args" in msg.content else {}
        view = ClientView.of(
            pid, y=side.trainer.y, indices=side.parts[part], classes=side.data.train.classes, n_clients=n, streams=side.streams
        )
        answer = answer_query(name, view, args)  # type: ignore[arg-type]  # query args are scalars by the message protocol
        return Message(encode_answer(name, pid, answer), reply_to=msg)

    def evaluate(self, msg: Message, context: Context) -> Message:
        """Federated evaluation (silo mode): the global model's accuracy and mean loss on this
        node's own held-out split, with its size (0: no held-out split; nothing evaluated)."""
        cfg = self.cfg(context)
        if not _is_silo(context):
            raise ValueError("evaluate: only a silo deployment's nodes evaluate (the server evaluates on its test split)")
        pid, _ = decode_client(msg.content)
        side = _silo_side(cfg, context)
        params = decode_params(array_record(msg.content, "params"))
        _, _, x_test, y_test = side.data.as_tensors()
        n = int(y_test.shape[0])
        acc, loss = 0.0, 0.0
        if n:
            with _running():
                acc, loss = evaluate(side.trainer.model, params, x_test, y_test, loss=side.trainer.loss)
        metrics = MetricRecord({"accuracy": float(acc), "loss": float(loss), "num-examples": n, "partition-id": pid})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def make_client_app(recipe: RunConfig | None = None) -> ClientApp:
    """A ClientApp for ``recipe`` (simulation: the server's own config), or, with None, for
    the recipe in the run config's ``recipe`` key (``flwr run`` of a generated app)."""
    h = _Handlers(None if recipe is None else recipe_text(recipe))
    app = ClientApp()
    app.query("register")(h.register)
    app.train()(h.train)
    app.query("losses")(h.losses)
    app.train("jdp")(h.jdp_train)
    app.train("jdp_publish")(h.jdp_publish)
    app.evaluate()(h.evaluate)
    for name in QUERIES:
        app.query(name)(h.query)
    return app


app = make_client_app()
"""The ClientApp ``flwr run`` loads (``fedgame.deploy.flower.client_app:app``)."""
