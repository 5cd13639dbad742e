"""Silo data: each client keeps its own files, and the server holds only what they report.

In a silo federation (``fedgame flower app RECIPE DIR --silo``) every node loads its own files
with the recipe's dataset plug-in, and the whole of its training split is its client data. The
server never sees an example: at registration each node reports a :class:`SiloReport` — its
number of training and held-out examples, its label histogram, the kind and shape of one
example, its number of classes and a fingerprint of its files — and the server builds the run
from those reports alone (:class:`SiloDataset`).

:class:`SiloDataset` is the server's :class:`~fedgame.data.FederatedDataset` of such a run, so
every selection, privacy plan, incentive and accountant that reads client sizes or label
histograms builds unchanged. Its training "examples" are a placeholder: ``train.x`` is one
zero example broadcast (no memory per example, never materialised), ``train.y`` each client's
reported labels sorted by class (so ``label_counts()`` is exactly the reported histograms),
and client ``i`` holds the ``sizes[i]`` consecutive indices after the clients before it. The
server never trains or evaluates on them: training and evaluation go to the nodes. What the
server holds of its own (``server-data``) is real: its test set, and, for JDP-FL's personal
rules, its validation set (:attr:`SiloDataset.server_validation`, drawn from the server's own
training split: no client's example), which :meth:`SiloDataset.validation_tensors` returns.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedgame.data._arrays import ArrayDataset, DatasetSplit, ExampleKind
from fedgame.data.federated import FederatedDataset

if TYPE_CHECKING:
    import torch

__all__ = ["SiloDataset", "SiloReport", "check_agreement", "silo_report"]

_KINDS: tuple[ExampleKind, ...] = ("image", "features", "tokens")


@dataclass(frozen=True)
class SiloReport:
    """What one silo node tells the server at registration: counts and shapes, never an example.

    ``node`` is its Flower node id; ``n_examples``/``n_test`` the sizes of its training and
    held-out splits; ``label_counts`` its training labels' histogram (``(classes,)`` int64;
    empty for a regression, ``classes == 0``); ``kind`` and ``shape`` one example's (``image``
    ``(C, H, W)``, ``features`` ``(F,)``, ``tokens`` ``(L,)``); ``fingerprint`` the SHA-256 of
    its split (:attr:`DatasetSplit.fingerprint`), so a run folder says which files trained it;
    ``name`` the dataset's name on the node."""

    node: int
    n_examples: int
    n_test: int
    label_counts: np.ndarray
    classes: int
    kind: ExampleKind
    shape: tuple[int, ...]
    fingerprint: str
    name: str = "silo"

    def __post_init__(self) -> None:
        counts = np.asarray(self.label_counts, dtype=np.int64)
        object.__setattr__(self, "label_counts", counts)
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        who = f"node {self.node}"
        if self.n_examples < 1:
            raise ValueError(f"{who}: holds no training example (n-examples {self.n_examples}); every silo needs at least one")
        if self.n_test < 0:
            raise ValueError(f"{who}: n-test must be >= 0, got {self.n_test}")
        if self.kind not in _KINDS:
            raise ValueError(f"{who}: kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")
        if self.classes < 0 or counts.shape != (self.classes,):
            raise ValueError(f"{who}: label-counts must hold one count per class ({self.classes}), got shape {counts.shape}")
        if self.classes and (int(counts.min()) < 0 or int(counts.sum()) != self.n_examples):
            raise ValueError(f"{who}: label-counts must be >= 0 and sum to n-examples ({self.n_examples}), got sum {int(counts.sum())}")

    def to_record(self) -> dict[str, int | str | list[int]]:
        """The registration reply's fields (a Flower ConfigRecord: scalars and int lists)."""
        return {
            "n-examples": int(self.n_examples),
            "n-test": int(self.n_test),
            "label-counts": [int(c) for c in self.label_counts],
            "classes": int(self.classes),
            "kind": str(self.kind),
            "shape": [int(d) for d in self.shape],
            "fingerprint": str(self.fingerprint),
            "name": str(self.name),
        }

    @classmethod
    def from_record(cls, node: int, record: Mapping[str, Any]) -> SiloReport:
        """A node's report from its registration reply; a ValueError naming the node and the field."""
        need = ("n-examples", "n-test", "label-counts", "classes", "kind", "shape", "fingerprint")
        missing = [k for k in need if k not in record]
        if missing:
            raise ValueError(f"node {node}: its registration reply lacks {missing} (is it running the same fedgame, in silo mode?)")
        return cls(
            node=int(node),
            n_examples=int(record["n-examples"]),
            n_test=int(record["n-test"]),
            label_counts=np.asarray(list(record["label-counts"]), dtype=np.int64),
            classes=int(record["classes"]),
            kind=record["kind"],
            shape=tuple(int(d) for d in record["shape"]),
            fingerprint=str(record["fingerprint"]),
            name=str(record.get("name", "silo")),
        )

    def public(self) -> dict[str, Any]:
        """The report as plain JSON (what the run folder lists of what left the silo)."""
        return {k.replace("-", "_"): v for k, v in self.to_record().items()}


def silo_report(split: DatasetSplit, *, node: int) -> SiloReport:
    """Node ``node``'s report of its own ``split`` (computed on the node)."""
    tr = split.train
    counts = np.bincount(tr.y, minlength=tr.classes).astype(np.int64) if tr.classes else np.zeros(0, dtype=np.int64)
    return SiloReport(
        node=int(node),
        n_examples=len(tr),
        n_test=len(split.test),
        label_counts=counts,
        classes=tr.classes,
        kind=tr.kind,
        shape=tr.shape,
        fingerprint=split.fingerprint,
        name=split.name,
    )


def _describe(value: object) -> str:
    return "×".join(map(str, value)) if isinstance(value, tuple) else str(value)


def check_agreement(reports: Sequence[SiloReport], clients: Sequence[int] | None = None) -> None:
    """Refuse reports that cannot train one model: every node must agree on the kind of
    example, its shape and the number of classes. The error is one line naming, for the first
    field they disagree on, which nodes (and client indices) hold which value."""
    clients = list(range(len(reports))) if clients is None else list(clients)
    fields = (("kind of example", "kind"), ("example shape", "shape"), ("number of classes", "classes"))
    for what, attr in fields:
        groups: dict[Any, list[str]] = {}
        for r, c in zip(reports, clients, strict=True):
            groups.setdefault(getattr(r, attr), []).append(f"{r.node} (client {c})")
        if len(groups) > 1:
            said = "; ".join(f"{_describe(v)} at node(s) {', '.join(who)}" for v, who in groups.items())
            hint = (
                " (give the dataset's classes in data.options, e.g. classes: K for csv/npz, when a silo lacks the top labels)"
                if what == "number of classes"
                else ""
            )
            raise ValueError(f"silo nodes disagree on the {what}: {said}; every node's data must have the same{hint}")


def _placeholder(kind: ExampleKind, shape: tuple[int, ...], n: int) -> np.ndarray:
    """``n`` zero examples of ``shape`` that take the memory of one (a read-only broadcast)."""
    dtype = np.int64 if kind == "tokens" else np.float32
    return np.broadcast_to(np.zeros((1, *shape), dtype=dtype), (n, *shape))


@dataclass(frozen=True, kw_only=True, eq=False)
class SiloDataset(FederatedDataset):
    """The server's federated dataset of a silo federation (module docstring): client ``i`` is
    the node ``reports[i]`` describes; no example of any client is here. ``test`` is the
    server's own test set when it has one, else an empty split of the nodes' shape (evaluation
    is then federated: each node on its held-out split). ``server_validation``: the server's
    own validation examples (JDP-FL's personal rules score groups on them), or None."""

    reports: tuple[SiloReport, ...]
    server_validation: ArrayDataset | None = None

    @classmethod
    def from_reports(
        cls, reports: Sequence[SiloReport], *, test: ArrayDataset | None = None, validation: ArrayDataset | None = None
    ) -> SiloDataset:
        """The dataset of ``reports`` in client order (the caller orders them: by Flower node
        id), after :func:`check_agreement`; ``test``: the server's own test set, ``validation``:
        its own validation set (the shape and classes of each must be the nodes')."""
        reports = tuple(reports)
        if not reports:
            raise ValueError("silo: no node reported its data")
        check_agreement(reports)
        first = reports[0]
        sizes = [r.n_examples for r in reports]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        parts = tuple(np.arange(offsets[i], offsets[i + 1], dtype=np.int64) for i in range(len(reports)))
        if first.classes:
            y = np.concatenate([np.repeat(np.arange(first.classes, dtype=np.int64), r.label_counts) for r in reports])
        else:
            y = np.zeros(int(offsets[-1]), dtype=np.float32)
        name = first.name
        train = ArrayDataset(x=_placeholder(first.kind, first.shape, int(offsets[-1])), y=y, classes=first.classes, name=name)
        if test is None:
            test = ArrayDataset(x=_placeholder(first.kind, first.shape, 0), y=y[:0].copy(), classes=first.classes, name=name)
        for what, own in (("test", test), ("validation", validation)):
            if own is not None and (own.shape != first.shape or own.classes != first.classes or own.kind != first.kind):
                raise ValueError(
                    f"server {what} set: {own.kind} {_describe(own.shape)} with {own.classes} classes, the nodes' data "
                    f"{first.kind} {_describe(first.shape)} with {first.classes} classes; they must match"
                )
        return cls(train=train, test=test, parts=parts, reports=reports, server_validation=validation)

    @property
    def nodes(self) -> list[int]:
        """Flower node id of each client, in client order."""
        return [r.node for r in self.reports]

    @property
    def test_sizes(self) -> np.ndarray:
        """Held-out examples per client (its node's test split), int64 ``(n_clients,)``."""
        return np.array([r.n_test for r in self.reports], dtype=np.int64)

    @functools.cached_property
    def fingerprint(self) -> str:
        """First 16 hex digits of the SHA-256 of the nodes' data fingerprints in client order:
        the same files in the same order give the same fingerprint."""
        h = hashlib.sha256(b"silo")
        for r in self.reports:
            h.update(f"{r.n_examples}:{r.fingerprint};".encode())
        return h.hexdigest()[:16]

    def label_counts(self) -> np.ndarray:
        """``(n_clients, classes)``: the histograms the nodes reported."""
        if not self.train.classes:
            return np.zeros((self.n_clients, 0), dtype=np.int64)
        return np.stack([r.label_counts for r in self.reports])

    @functools.cached_property
    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The placeholder as tensors without materialising it (zero strides kept): the server
        builds its model and trainer from the shapes, and never trains on these."""
        import warnings

        import torch

        def view(a: np.ndarray) -> torch.Tensor:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                return torch.from_numpy(a)

        return (
            view(self.train.x),
            view(np.ascontiguousarray(self.train.y)),
            view(np.ascontiguousarray(self.test.x)),
            view(np.ascontiguousarray(self.test.y)),
        )

    def validation_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's own validation set ``(x_val, y_val)`` (:attr:`server_validation`); an
        error naming ``server-data`` if it has none (a silo server holds no client example)."""
        v = self.server_validation
        if v is None or not len(v):
            raise ValueError(
                "server-data: this run scores on a server validation set, and a silo server holds no client example: "
                "give it a data folder of its own with a training split (fedgame flower app --silo --server-data DIR)"
            )
        return self._validation

    @functools.cached_property
    def _validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        from fedgame.data.federated import _tensor

        assert self.server_validation is not None
        return _tensor(self.server_validation.x), _tensor(self.server_validation.y)

    def summary(self) -> dict[str, Any]:
        """What the run folder records of the silos (``partition.json``): per client its node,
        sizes, histogram and data fingerprint; no example. With a server validation set, its
        size (``server_validation``)."""
        out: dict[str, Any] = {
            "silo": True,
            "fingerprint": self.fingerprint,
            "n_clients": self.n_clients,
            "nodes": self.nodes,
            "sizes": np.asarray(self.sizes).tolist(),
            "test_sizes": self.test_sizes.tolist(),
            "label_counts": self.label_counts().tolist(),
            "data_fingerprints": [r.fingerprint for r in self.reports],
        }
        if self.server_validation is not None:
            out["server_validation"] = len(self.server_validation)
        return out
