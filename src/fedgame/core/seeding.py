"""Seeds as data: every random stream of a run is derived from ``(seed, stream, *keys)``.

One :class:`numpy.random.SeedSequence` per run; each component asks for its own stream by a
stable name and integer keys (round, client), so a stream never depends on how many numbers
another component drew. A resumed run therefore needs no RNG state: round ``t`` of client ``i``
always gets the same generator, in any process.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

__all__ = ["Streams"]


def _stream_id(name: str) -> int:
    """A stable 32-bit integer for a stream name (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


class Streams:
    """Named, keyed random streams of one run.

    >>> s = Streams(seed=0)
    >>> s.numpy("selection", 3).integers(10) == Streams(seed=0).numpy("selection", 3).integers(10)
    True
    """

    def __init__(self, *, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed: must be >= 0, got {seed}")
        self.seed = int(seed)

    def sequence(self, name: str, *keys: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=(_stream_id(name), *map(int, keys)))

    def numpy(self, name: str, *keys: int) -> np.random.Generator:
        """A NumPy generator for stream ``name`` at ``keys`` (e.g. round, client)."""
        return np.random.default_rng(self.sequence(name, *keys))

    def torch(self, name: str, *keys: int) -> torch.Generator:
        """A CPU ``torch.Generator`` for stream ``name`` at ``keys``."""
        state = self.sequence(name, *keys).generate_state(2, np.uint32)
        g = torch.Generator()
        g.manual_seed(int(state[0]) << 32 | int(state[1]))
        return g

    def integer(self, name: str, *keys: int) -> int:
        """A 63-bit integer seed for libraries that take one (e.g. model initialisation)."""
        state = self.sequence(name, *keys).generate_state(2, np.uint32)
        return (int(state[0]) << 31) ^ int(state[1])
