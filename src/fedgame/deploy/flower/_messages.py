"""fedgame jobs and results as Flower records, and back.

A train message carries one :class:`~fedgame.sim.client.ClientJob`:

* ``content["params"]`` — :class:`ArrayRecord` with one array ``"params"``: the flat float32
  global parameters (bytes round-trip exactly);
* ``content["job"]`` — :class:`ConfigRecord`: ``round``, ``partition-id``, ``copy``,
  ``grad-variance``; the DP-SGD settings (``dpsgd``, ``dpsgd.noise-multiplier``,
  ``dpsgd.max-grad-norm``, ``dpsgd.sampling``); the upload mechanism (``upload``,
  ``upload.clip``, ``upload.noise-std``, ``upload.on``); and, for the user to see, what the server expects
  (``local-steps``, ``n-examples`` and the plan's name). Floats travel as doubles, so the
  client applies exactly the noise scale the server's privacy plan chose.

The reply carries ``content["update"]`` (ArrayRecord ``"update"``: the privatised
displacement), ``content["result"]`` (MetricRecord: ``train-loss``, ``steps``, ``n-examples``
and the trainer's extras) and ``content["job"]`` (the job's ``round``, ``partition-id`` and
``copy`` echoed back, so replies are matched to jobs by what they say, not by arrival order).

Query messages: ``query.register`` (node → its partition id, the partition fingerprint it
built, its number of examples), ``query.losses`` (params in, one loss out) and one
``query.<name>`` per registered client query (:data:`fedgame.sim.client.QUERIES`:
``query.label_counts``, ``query.bid``): ``content["args"]`` (ConfigRecord: the server's
settings of the query) in; ``content["answer"]`` (ArrayRecord ``"answer"``: the array the
registry function returned, exact bytes and dtype) and ``content["query"]`` (``name``,
``partition-id``) out.

Silo deployments (``--silo``: each node its own files, :mod:`fedgame.deploy.flower.silo`): a node
does not know its client index, so the server's queries, loss probes and evaluations carry it
in ``content["client"]`` (ConfigRecord ``index``, ``n-clients``; :func:`client_record`) and the
node echoes it as ``partition-id``. ``query.register`` is answered with the node's
:class:`~fedgame.data.SiloReport` (or an ``error``), and federated evaluation is Flower's
``evaluate`` message: ``params`` in, ``metrics`` (MetricRecord ``accuracy``, ``loss``,
``num-examples``: the node's held-out examples, ``partition-id``) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, MetricRecordValues, MetricScalar, RecordDict

from fedgame.core.types import ClientResult
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.privacy.plans import DPSGD
from fedgame.sim.client import ClientJob

__all__ = [
    "TRAIN",
    "REGISTER",
    "LOSSES",
    "EVALUATE",
    "CLIENT",
    "client_record",
    "decode_client",
    "JobKey",
    "Scalar",
    "array_record",
    "config_record",
    "metric_record",
    "decode_job",
    "decode_params",
    "decode_answer",
    "decode_result",
    "encode_answer",
    "encode_job",
    "encode_params",
    "encode_result",
    "job_key",
    "query_type",
]

TRAIN = "train"
REGISTER = "query.register"
LOSSES = "query.losses"
EVALUATE = "evaluate"
CLIENT = "client"
"""The record naming the client index a silo node answers as (:func:`client_record`)."""


def client_record(index: int, n_clients: int) -> ConfigRecord:
    """``content["client"]`` of a message to a silo node: the client index the server gave it
    (nodes ordered by Flower node id) and the number of clients."""
    return ConfigRecord({"index": int(index), "n-clients": int(n_clients)})


def decode_client(content: RecordDict) -> tuple[int, int]:
    """(client index, number of clients) of a message to a silo node."""
    if CLIENT not in content:
        raise ValueError(f"silo message: needs record {CLIENT!r} (the client index the server gave this node), got {sorted(content)}")
    c = config_record(content, CLIENT)
    return int(c["index"]), int(c["n-clients"])


def query_type(name: str) -> str:
    """The Flower message type of client query ``name``: ``query.<name>``."""
    return f"query.{name}"


Scalar = int | float | str
"""The values of the config records this bridge sends (bools are ints): never bytes or lists."""


# Typed views of a message's records. A RecordDict holds array, metric and config records under
# any name, and a record's values may be lists (or bytes); the messages of this bridge put each
# name's kind of record and only scalar values, so the views cast (no check: the records are
# returned as they are).
def array_record(content: RecordDict, name: str) -> ArrayRecord:
    """``content[name]``, an :class:`ArrayRecord` by the message protocol."""
    return cast(ArrayRecord, content[name])


def config_record(content: RecordDict, name: str) -> Mapping[str, Scalar]:
    """``content[name]``, a :class:`ConfigRecord` of scalars by the message protocol."""
    return cast("Mapping[str, Scalar]", content[name])


def metric_record(content: RecordDict, name: str) -> Mapping[str, MetricScalar]:
    """``content[name]``, a :class:`MetricRecord` of scalars by the message protocol."""
    return cast("Mapping[str, MetricScalar]", content[name])


def encode_answer(name: str, client: int, answer: np.ndarray) -> RecordDict:
    """The reply content of client ``client`` to query ``name``."""
    arr = np.array(answer, order="C", copy=True)  # not ascontiguousarray: it turns a 0-d bid into shape (1,)
    return RecordDict({"answer": ArrayRecord({"answer": Array(arr)}), "query": ConfigRecord({"name": name, "partition-id": int(client)})})


def decode_answer(content: RecordDict) -> tuple[str, int, np.ndarray]:
    """(query name, partition id, answer) of a query reply."""
    if "answer" not in content or "query" not in content:
        raise ValueError(f"query reply: needs records 'answer' and 'query', got {sorted(content)}")
    q = config_record(content, "query")
    return str(q["name"]), int(q["partition-id"]), np.array(array_record(content, "answer")["answer"].numpy(), copy=True)


JobKey = tuple[int, int, int]
"""(round, partition id, copy): what a reply is matched to."""


def encode_params(params: torch.Tensor, name: str = "params") -> ArrayRecord:
    """A flat float tensor as an ArrayRecord with one array ``name`` (exact bytes)."""
    arr = np.ascontiguousarray(params.detach().cpu().numpy())
    return ArrayRecord({name: Array(arr)})


def decode_params(record: ArrayRecord, name: str = "params") -> torch.Tensor:
    """The flat tensor of :func:`encode_params`."""
    if name not in record:
        raise ValueError(f"message: array record has no {name!r} (keys: {sorted(record)})")
    return torch.from_numpy(np.array(record[name].numpy(), copy=True))


def job_key(cfg: Mapping[str, Any]) -> JobKey:
    return int(cfg["round"]), int(cfg["partition-id"]), int(cfg["copy"])


def encode_job(job: ClientJob, *, info: Mapping[str, int | float | str] | None = None) -> RecordDict:
    """The train message content of ``job``; ``info`` adds read-only fields (local steps...)."""
    cfg: dict[str, Any] = {
        "round": int(job.t),
        "partition-id": int(job.client),
        "copy": int(job.copy),
        "grad-variance": bool(job.grad_variance),
        "dpsgd": job.dpsgd is not None,
        "upload": job.upload is not None,
    }
    if job.dpsgd is not None:
        cfg["dpsgd.noise-multiplier"] = float(job.dpsgd.noise_multiplier)
        cfg["dpsgd.max-grad-norm"] = float(job.dpsgd.max_grad_norm)
        cfg["dpsgd.sampling"] = str(job.dpsgd.sampling)
    if job.upload is not None:
        cfg["upload.clip"] = float(job.upload.clip)
        cfg["upload.noise-std"] = float(job.upload.noise_std)
        cfg["upload.on"] = job.upload.on
    for k, v in (info or {}).items():
        cfg[k] = v.item() if isinstance(v, np.generic) else v
    return RecordDict({"params": encode_params(job.params), "job": ConfigRecord(cfg)})


def decode_job(content: RecordDict) -> ClientJob:
    """The :class:`ClientJob` a train message carries (its mechanisms rebuilt from the config)."""
    if "job" not in content or "params" not in content:
        raise ValueError(f"train message: needs records 'job' and 'params', got {sorted(content)}")
    cfg = config_record(content, "job")
    dp = None
    if cfg["dpsgd"]:
        dp = DPSGD(
            max_grad_norm=float(cfg["dpsgd.max-grad-norm"]),
            noise_multiplier=float(cfg["dpsgd.noise-multiplier"]),
            sampling=str(cfg["dpsgd.sampling"]),  # type: ignore[arg-type]  # a str in the record; encode_job wrote a DPSGD Literal
        )
    upload = None
    if cfg["upload"]:
        on = str(cfg["upload.on"]) if "upload.on" in cfg else "update"
        upload = GaussianMechanism(clip=float(cfg["upload.clip"]), noise_std=float(cfg["upload.noise-std"]), on=on)  # type: ignore[arg-type]  # a str from the record; GaussianMechanism checks on at runtime
    t, client, copy = job_key(cfg)
    return ClientJob(
        t=t,
        client=client,
        copy=copy,
        params=decode_params(array_record(content, "params")),
        dpsgd=dp,
        upload=upload,
        grad_variance=bool(cfg["grad-variance"]),
    )


def encode_result(job: ClientJob, result: ClientResult) -> RecordDict:
    """The reply content for ``job``'s ``result``."""
    metrics: dict[str, MetricRecordValues] = {
        "train-loss": float(result.train_loss),
        "steps": int(result.steps),
        "n-examples": int(result.n_examples),
    }
    for k, v in result.extras.items():
        metrics[k] = float(v)
    echo = ConfigRecord({"round": int(job.t), "partition-id": int(job.client), "copy": int(job.copy)})
    return RecordDict({"update": encode_params(result.update, "update"), "result": MetricRecord(metrics), "job": echo})


def decode_result(content: RecordDict) -> tuple[JobKey, ClientResult]:
    """The job key a reply answers and the :class:`ClientResult` it carries."""
    for rec in ("update", "result", "job"):
        if rec not in content:
            raise ValueError(f"train reply: needs records 'update', 'result' and 'job', got {sorted(content)}")
    key = job_key(config_record(content, "job"))
    m = dict(metric_record(content, "result"))
    extras = {k: float(v) for k, v in m.items() if k not in ("train-loss", "steps", "n-examples")}
    res = ClientResult(
        client=key[1],
        update=decode_params(array_record(content, "update"), "update"),
        train_loss=float(m["train-loss"]),
        steps=int(m["steps"]),
        n_examples=int(m["n-examples"]),
        extras=extras,
    )
    return key, res
