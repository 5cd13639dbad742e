"""A dataset split among clients: the training set, the test set and one index array per client.

Clients never own copies of their examples: client ``i`` is ``train.x[parts[i]]``. The
training loop asks :meth:`FederatedDataset.as_tensors` once for torch tensors that share
memory with the numpy arrays and indexes them with each client's index tensor every round.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedgame.data._arrays import ArrayDataset, DatasetSplit
from fedgame.data.partition import fingerprint as _fingerprint
from fedgame.data.partition import label_counts as _label_counts
from fedgame.data.partition import validate_partition

if TYPE_CHECKING:
    import torch

__all__ = ["FederatedDataset"]


def _tensor(a: np.ndarray) -> torch.Tensor:
    import torch  # imported here so `fedgame.data` (e.g. `fedgame list`) loads without torch

    a = np.ascontiguousarray(a)
    with warnings.catch_warnings():
        # Loaded arrays are read-only (they are shared through the load cache); torch warns that
        # it cannot protect them. Nothing in fedgame writes into data tensors.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


@dataclass(frozen=True, kw_only=True, eq=False)
class FederatedDataset:
    """``train``/``test`` plus ``parts``: client ``i`` holds ``train[parts[i]]``.

    ``parts`` are validated on construction (integer indices into ``train``, each used at most
    once) and stored as int64 arrays. ``validation`` (optional) indexes the server's own
    held-out training examples (JDP-FL's validation set D_val, whose size and provenance the paper
    leaves open; docs/jdp.md, 'The protocol in a run'); no client holds any of them.
    Equality is identity (the fields are arrays).
    """

    train: ArrayDataset
    test: ArrayDataset
    parts: tuple[np.ndarray, ...]
    validation: np.ndarray | None = None

    def __post_init__(self) -> None:
        parts = tuple(np.asarray(p) for p in self.parts)
        validate_partition(parts, len(self.train))
        parts = tuple(p.astype(np.int64, copy=False) for p in parts)
        object.__setattr__(self, "parts", parts)
        if self.validation is not None:
            val = np.asarray(self.validation).astype(np.int64, copy=False)
            validate_partition((*parts, val), len(self.train))
            object.__setattr__(self, "validation", val)
        if self.train.shape != self.test.shape or self.train.classes != self.test.classes:
            raise ValueError(
                f"FederatedDataset: train ({self.train.shape}, {self.train.classes} classes) and test "
                f"({self.test.shape}, {self.test.classes} classes) do not match"
            )

    @classmethod
    def from_split(cls, split: DatasetSplit, parts: list[np.ndarray] | tuple[np.ndarray, ...]) -> FederatedDataset:
        return cls(train=split.train, test=split.test, parts=tuple(parts))

    @property
    def n_clients(self) -> int:
        return len(self.parts)

    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """Examples per client, int64 ``(n_clients,)``."""
        s = np.array([p.size for p in self.parts], dtype=np.int64)
        s.flags.writeable = False
        return s

    @functools.cached_property
    def theta(self) -> np.ndarray:
        """Each client's share of the partitioned examples (sums to 1)."""
        t: np.ndarray = self.sizes / self.sizes.sum()
        t.flags.writeable = False
        return t

    @functools.cached_property
    def fingerprint(self) -> str:
        """:func:`fedgame.data.fingerprint` of ``parts``."""
        return _fingerprint(self.parts)

    def _client(self, i: int) -> np.ndarray:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < self.n_clients:
            raise IndexError(f"client: must be an integer in [0, {self.n_clients - 1}], got {i!r}")
        return self.parts[int(i)]

    def client_x(self, i: int) -> np.ndarray:
        """Client ``i``'s images ``(n_i, C, H, W)`` (gathered with its index array)."""
        x: np.ndarray = self.train.x[self._client(i)]
        return x

    def client_y(self, i: int) -> np.ndarray:
        """Client ``i``'s labels ``(n_i,)``."""
        y: np.ndarray = self.train.y[self._client(i)]
        return y

    def label_counts(self) -> np.ndarray:
        """``(n_clients, classes)`` examples of each class per client."""
        if self.train.classes == 0:  # regression: no classes to count
            return np.zeros((self.n_clients, 0), dtype=np.int64)
        return _label_counts(self.train.y, self.parts, self.train.classes)

    @functools.cached_property
    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return (_tensor(self.train.x), _tensor(self.train.y), _tensor(self.test.x), _tensor(self.test.y))

    def validation_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's validation set ``(x_val, y_val)`` (clean labels: a poisoned client's
        relabelling never touches it); an error if the dataset has none."""
        if self.validation is None or self.validation.size == 0:
            raise ValueError("data.validation: this run needs a server validation set (e.g. 1000 examples), got none")
        x, y, _, _ = self._tensors
        idx = _tensor(self.validation)
        return x[idx], y[idx]

    def as_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x_train, y_train, x_test, y_test)`` as CPU tensors sharing memory with the arrays,
        created once per dataset object (later calls return the same tensors)."""
        return self._tensors
