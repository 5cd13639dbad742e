"""Splitting a training set among clients: the non-IID partitions of the FL literature.

A partition is a ``list`` of int64 index arrays into the training set, one per client, each
sorted ascending; no example is copied and no index appears twice. Every partitioner takes an
explicit :class:`numpy.random.Generator`, so the same generator state gives the same
partition in any process, and :func:`fingerprint` identifies it in run records.

Kinds (dispatch by name with :func:`partition`):

``iid``
    shuffle, then near-equal shards.
``dirichlet``
    label skew of Hsu et al. (2019): for each class ``c`` draw ``q_c ~ Dir(alpha·1_N)`` and
    give client ``i`` the fraction ``q_{c,i}`` of class ``c``; redraw until every client has
    ``min_size`` examples. Small ``alpha`` → few classes per client.
``shards``
    McMahan et al. (2017): sort by label, cut into ``n_clients·shards_per_client`` shards,
    deal ``shards_per_client`` random shards to each client.
``similarity``
    the similarity-``s`` split of Karimireddy et al. (SCAFFOLD) used by the PHS experiments
    (Sec. VI-A), with the details the paper leaves open fixed as in :func:`similarity`:
    ``s``% of every client's data dealt IID, the rest sorted by label and cut into one
    contiguous chunk per client; relative client sizes given or drawn from ``U(a, b)``.
``quantity``
    quantity skew: label-IID clients whose sizes follow Dirichlet (or log-normal) weights.

Fractions are turned into counts by rounding *cumulative* shares (client ``i`` gets the
indices between ``round(N·(q_1+…+q_{i-1}))`` and ``round(N·(q_1+…+q_i))``): every client
receives its share to within one example, the counts always sum to ``N``, and the last client
takes whatever is left — at most one example off — rather than the sum of everyone's rounding
errors, which with many clients would make it systematically larger. ``similarity`` and
``quantity`` instead round each client's share by largest remainder (Hamilton's method, ties to
the lower client index), as fedgame's reading of the PHS partition prescribes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
import os
import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PARTITION_KINDS",
    "partition",
    "iid",
    "dirichlet",
    "shards",
    "similarity",
    "quantity_skew",
    "natural",
    "fingerprint",
    "save_partition",
    "load_partition",
    "label_counts",
    "validate_partition",
]

log = logging.getLogger(__name__)

_FORMAT_VERSION = 1


# -- validation ------------------------------------------------------------------------------
def _check_labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or y.size == 0):
        raise ValueError(f"partition.labels: must be a 1-d integer array, got shape {y.shape} dtype {y.dtype}")
    if y.size == 0:
        raise ValueError("partition.labels: must hold at least one label, got an empty array")
    if int(y.min()) < 0:
        raise ValueError(f"partition.labels: must be >= 0, got minimum {int(y.min())}")
    return y.astype(np.int64, copy=False)


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        rng_s = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"partition.{name}: must be an integer {rng_s}, got {value!r}") from None
    if v < lo or (hi is not None and v > hi):
        rng_s = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"partition.{name}: must be {rng_s}, got {v}")
    return int(v)


def _check_float(name: str, value: Any, *, lo: float, hi: float | None = None, lo_open: bool = False) -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"partition.{name}: must be a number, got {value!r}") from None
    bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (hi is not None and v > hi)
    if bad:
        if hi is None:
            allowed = f"> {lo:g}" if lo_open else f">= {lo:g}"
            raise ValueError(f"partition.{name}: must be {allowed} and finite, got {value!r}")
        left = "(" if lo_open else "["
        raise ValueError(f"partition.{name}: must be in {left}{lo:g}, {hi:g}], got {value!r}")
    return v


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"partition.rng: must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)), got {type(rng).__name__}")
    return rng


def _check_n_clients(n_clients: Any, n: int) -> int:
    return _check_int("n_clients", n_clients, 1, n)


def _cuts(weights: np.ndarray, total: int) -> np.ndarray:
    """Split points giving each share ``round(cumulative share · total)`` boundaries."""
    c = np.cumsum(weights, dtype=np.float64)
    c /= c[-1]
    return np.rint(c[:-1] * total).astype(np.int64)


def _by_owner(owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Index arrays (sorted) of every client from a per-example owner array."""
    order = np.argsort(owner, kind="stable").astype(np.int64)
    sizes = np.bincount(owner, minlength=n_clients)
    return list(np.split(order, np.cumsum(sizes)[:-1]))


def _nonempty(parts: list[np.ndarray], kind: str) -> list[np.ndarray]:
    empty = [i for i, p in enumerate(parts) if p.size == 0]
    if empty:
        raise ValueError(
            f"partition.n_clients: {kind} left {len(empty)} client(s) without examples (first: client {empty[0]}); "
            "use fewer clients or less skewed sizes"
        )
    return parts


# -- partitioners ----------------------------------------------------------------------------
def iid(labels: np.ndarray, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle all indices and cut them into ``n_clients`` near-equal shards (sizes differ by ≤ 1)."""
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, y.size)
    perm = _check_rng(rng).permutation(y.size).astype(np.int64)
    return [np.sort(p) for p in np.array_split(perm, n_clients)]


def dirichlet(
    labels: np.ndarray,
    n_clients: int,
    alpha: float,
    rng: np.random.Generator,
    *,
    min_size: int = 10,
    max_retries: int = 100,
) -> list[np.ndarray]:
    """Label skew (Hsu et al. 2019): class ``c``'s examples are spread over clients with
    proportions ``q_c ~ Dir(alpha·1_N)``; the whole draw is repeated until every client has at
    least ``min_size`` examples, at most ``max_retries`` times."""
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, y.size)
    alpha = _check_float("alpha", alpha, lo=0.0, lo_open=True)
    min_size = _check_int("min_size", min_size, 1, y.size // n_clients)
    max_retries = _check_int("max_retries", max_retries, 1)
    rng = _check_rng(rng)
    order = np.argsort(y, kind="stable")
    counts = np.bincount(y)
    class_idx = [c for c in np.split(order, np.cumsum(counts)[:-1]) if c.size]
    owner = np.empty(y.size, dtype=np.int64)
    conc = np.full(n_clients, alpha)
    smallest = 0
    for attempt in range(1, max_retries + 1):
        for idx in class_idx:
            q = rng.dirichlet(conc)
            if not np.all(np.isfinite(q)) or q.sum() <= 0:  # underflow for tiny alpha: fall back to one owner
                q = np.zeros(n_clients)
                q[rng.integers(n_clients)] = 1.0
            per = np.diff(np.concatenate(([0], _cuts(q, idx.size), [idx.size])))
            owner[rng.permutation(idx)] = np.repeat(np.arange(n_clients, dtype=np.int64), per)
        sizes = np.bincount(owner, minlength=n_clients)
        smallest = int(sizes.min())
        if smallest >= min_size:
            if attempt > 1:
                log.debug("dirichlet(alpha=%g): min_size=%d reached after %d draws", alpha, min_size, attempt)
            return _by_owner(owner, n_clients)
    raise ValueError(
        f"partition.min_size: no Dirichlet(alpha={alpha:g}) draw in max_retries={max_retries} attempts gave all "
        f"{n_clients} clients >= {min_size} examples (smallest client in the last draw: {smallest}); "
        "raise alpha or max_retries, lower min_size, or use fewer clients"
    )


def shards(
    labels: np.ndarray,
    n_clients: int,
    shards_per_client: int = 2,
    rng: np.random.Generator | None = None,
) -> list[np.ndarray]:
    """McMahan et al. (2017): sort by label (random order within a label), cut into
    ``n_clients·shards_per_client`` near-equal shards and give each client that many random
    shards. ``rng`` is required (it follows ``shards_per_client`` only to keep its default)."""
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, y.size)
    spc = _check_int("shards_per_client", shards_per_client, 1, y.size // n_clients)
    rng = _check_rng(rng)
    perm = rng.permutation(y.size).astype(np.int64)
    sorted_idx = perm[np.argsort(y[perm], kind="stable")]
    pieces = np.array_split(sorted_idx, n_clients * spc)
    deal = rng.permutation(n_clients * spc).reshape(n_clients, spc)
    return [np.sort(np.concatenate([pieces[j] for j in row])) for row in deal]


def _check_weights(size_weights: np.ndarray | Sequence[float] | None, n_clients: int) -> np.ndarray:
    if size_weights is None:
        return np.ones(n_clients)
    w = np.asarray(size_weights, dtype=np.float64)
    if w.shape != (n_clients,):
        raise ValueError(f"partition.size_weights: must have shape ({n_clients},) (one per client), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"partition.size_weights: must be finite and > 0, got min {w.min()!r}")
    return w


def _largest_remainder(p: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total`` proportional to ``p`` (Hamilton's method, ties by index)."""
    exact = p / p.sum() * total
    base: np.ndarray = np.floor(exact).astype(np.int64)
    left = total - int(base.sum())
    if left > 0:
        base[np.argsort(-(exact - base), kind="stable")[:left]] += 1
    return base


def _check_spread(size_spread: Any) -> tuple[float, float]:
    bad = f"partition.size_spread: must be a pair (a, b) of finite numbers with 0 < a < b, got {size_spread!r}"
    try:
        a, b = (float(x) for x in size_spread)
    except (TypeError, ValueError):
        raise ValueError(bad) from None
    if not (math.isfinite(a) and math.isfinite(b) and 0.0 < a < b):
        raise ValueError(bad)
    return a, b


def _iid_counts(sizes: np.ndarray, s: float) -> np.ndarray:
    """``n^iid_k`` of the PHS similarity split: the quotas ``s·|M_k|/100`` rounded by largest
    remainder to integers summing to ``round(s·|S|/100)`` (half up), ``|S| = Σ|M_k|``.

    Exact rational arithmetic (``s`` at its exact binary value, Python integers, no overflow):
    a quota that is an integer on paper is never floored one below by a float rounding error.
    Each count lies in ``[floor(quota), floor(quota) + 1]`` and never exceeds ``|M_k|``.
    """
    num, den = Fraction(s).as_integer_ratio()
    scale = 100 * den  # quota_k = num·|M_k| / scale
    q = sizes.astype(object) * num
    floors, rems = q // scale, q % scale
    total = (2 * num * int(sizes.sum()) + scale) // (2 * scale)
    out = floors.astype(np.int64)
    # 0 <= left <= #(non-zero remainders): Σfloor <= floor(Σquota) <= total <= Σfloor + round(Σfrac)
    left = total - int(out.sum())
    if left > 0:
        out[np.argsort(-rems, kind="stable")[:left]] += 1
    return out


def similarity(
    labels: np.ndarray,
    n_clients: int,
    s: float,
    rng: np.random.Generator,
    *,
    size_weights: np.ndarray | Sequence[float] | None = None,
    size_spread: tuple[float, float] | Sequence[float] | None = None,
) -> list[np.ndarray]:
    """Similarity-``s`` split (SCAFFOLD, Karimireddy et al. 2020) of the PHS experiments
    (Sec. VI-A), with every detail the paper leaves open fixed as follows.

    1. Relative sizes ``v_k``: ``size_weights`` if given; with ``size_spread=(a, b)``, drawn
       ``v_k ~ U(a, b)`` i.i.d. from ``rng`` (PHS: ``(0.5, 1.5)``); otherwise all equal.
       ``|M_k|`` = largest-remainder rounding of ``|S| v_k / Σv`` (sums to ``|S|``).
    2. IID part ``n^iid_k`` = largest-remainder rounding of ``s|M_k|/100`` with total
       ``round(s|S|/100)`` (:func:`_iid_counts`); sorted part ``|M_k| − n^iid_k``.
    3. A permutation ``π`` of all indices from ``rng`` (after the ``v_k`` draw): its first
       ``Σ n^iid_k`` entries go in consecutive blocks of ``n^iid_k`` to clients ``1..N``; the
       rest are stably sorted by label (ties in ``π`` order) and cut into consecutive blocks of
       ``|M_k| − n^iid_k`` for clients ``1..N``.

    ``s = 100`` is IID; ``s = 0`` gives every client a contiguous range of the label-sorted
    order. Largest-remainder ties go to the lower client index. Every index is used once.
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, y.size)
    s = _check_float("s", s, lo=0.0, hi=100.0)
    if size_weights is not None and size_spread is not None:
        raise ValueError(
            "partition.size_weights, partition.size_spread: give at most one (given weights, or "
            f"weights drawn from U(a, b)), got both: size_weights={size_weights!r}, size_spread={size_spread!r}"
        )
    rng = _check_rng(rng)
    if size_spread is not None:
        a, b = _check_spread(size_spread)
        v = rng.uniform(a, b, n_clients)
    else:
        v = _check_weights(size_weights, n_clients)
    sizes = _largest_remainder(v, y.size)
    n_iid = _iid_counts(sizes, s)
    perm = rng.permutation(y.size).astype(np.int64)
    n_iid_total = int(n_iid.sum())
    pool_iid, rest = perm[:n_iid_total], perm[n_iid_total:]
    rest = rest[np.argsort(y[rest], kind="stable")]
    iid_parts = np.split(pool_iid, np.cumsum(n_iid)[:-1])
    sorted_parts = np.split(rest, np.cumsum(sizes - n_iid)[:-1])
    return _nonempty([np.sort(np.concatenate((p, q))) for p, q in zip(iid_parts, sorted_parts)], "similarity")


def quantity_skew(
    labels: np.ndarray,
    n_clients: int,
    rng: np.random.Generator,
    *,
    alpha: float = 1.0,
    sigma: float | None = None,
    min_size: int = 10,
) -> list[np.ndarray]:
    """Quantity skew: an IID shuffle cut into clients of unequal size.

    Each client first gets ``min_size`` examples; the remaining ``N - n_clients·min_size`` are
    shared in proportions drawn from ``Dir(alpha·1)`` or, if ``sigma`` is given, from
    log-normal(0, sigma) weights (``alpha`` is then unused). Smaller ``alpha`` / larger
    ``sigma`` → more unequal sizes.
    """
    y = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, y.size)
    alpha = _check_float("alpha", alpha, lo=0.0, lo_open=True)
    min_size = _check_int("min_size", min_size, 1, y.size // n_clients)
    rng = _check_rng(rng)
    if sigma is not None:
        sigma = _check_float("sigma", sigma, lo=0.0)
        p = rng.lognormal(0.0, sigma, n_clients)
    else:
        p = rng.dirichlet(np.full(n_clients, alpha))
        if not np.all(np.isfinite(p)) or p.sum() <= 0:
            p = np.zeros(n_clients)
            p[rng.integers(n_clients)] = 1.0
    sizes = min_size + _largest_remainder(p, y.size - n_clients * min_size)
    perm = rng.permutation(y.size).astype(np.int64)
    return [np.sort(part) for part in np.split(perm, np.cumsum(sizes)[:-1])]


def natural(groups: np.ndarray, *, n_clients: int | None = None, min_size: int = 1, what: str = "partition") -> list[np.ndarray]:
    """One client per group: client ``g`` holds every example whose group code is ``g`` (codes
    ``0..G-1`` from :func:`fedgame.data.group_codes`: the user, hospital or speaker of each
    record), in the order of the examples. Nothing is drawn, so no generator is taken.

    ``n_clients``, when given, must equal the number of groups; a group with fewer than
    ``min_size`` examples (or a code with none: an empty client) is refused, naming it.

    >>> [p.tolist() for p in natural(np.array([1, 0, 1, 2]))]
    [[1], [0, 2], [3]]
    """
    g = np.asarray(groups)
    if g.ndim != 1 or not np.issubdtype(g.dtype, np.integer) or g.size == 0:
        raise ValueError(f"{what}: natural needs one integer group code per training example, got shape {g.shape} dtype {g.dtype}")
    if int(g.min()) < 0:
        raise ValueError(f"{what}: group codes must be >= 0, got {int(g.min())}")
    n_groups = int(g.max()) + 1
    if n_clients is not None and n_clients != n_groups:
        raise ValueError(
            f"{what}.n_clients: a natural partition has one client per group; the data has {n_groups} groups, got {n_clients} "
            "(leave n_clients out)"
        )
    parts = _by_owner(g.astype(np.int64, copy=False), n_groups)
    sizes = np.array([q.size for q in parts])
    small = np.flatnonzero(sizes < max(min_size, 1))
    if small.size:
        raise ValueError(
            f"{what}.min_size: group {int(small[0])} has {int(sizes[small[0]])} example(s), fewer than {max(min_size, 1)} "
            f"({small.size} such group(s)); a natural client needs examples: lower min_size or drop those records"
        )
    return parts


# -- dispatch --------------------------------------------------------------------------------
_KINDS: dict[str, tuple[Callable[..., list[np.ndarray]], frozenset[str], frozenset[str]]] = {
    "iid": (iid, frozenset(), frozenset()),
    "dirichlet": (dirichlet, frozenset({"alpha", "min_size", "max_retries"}), frozenset({"alpha"})),
    "shards": (shards, frozenset({"shards_per_client"}), frozenset()),
    "similarity": (similarity, frozenset({"s", "size_weights", "size_spread"}), frozenset({"s"})),
    "quantity": (quantity_skew, frozenset({"alpha", "sigma", "min_size"}), frozenset()),
}

#: Names accepted by :func:`partition`.
PARTITION_KINDS: tuple[str, ...] = tuple(_KINDS)


def partition(kind: str, labels: np.ndarray, n_clients: int, rng: np.random.Generator, **params: Any) -> list[np.ndarray]:
    """Partition ``labels``' indices among ``n_clients`` with partitioner ``kind``.

    >>> import numpy as np
    >>> parts = partition("dirichlet", np.arange(100) % 10, 5, np.random.default_rng(0), alpha=0.5, min_size=5)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(100))
    True
    """
    if kind not in _KINDS:
        raise ValueError(f"partition.kind: unknown {kind!r}; known: {', '.join(PARTITION_KINDS)}")
    fn, allowed, required = _KINDS[kind]
    unknown = sorted(set(params) - allowed)
    if unknown:
        allowed_s = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"partition.{unknown[0]}: not a parameter of kind {kind!r}; allowed: {allowed_s}")
    missing = sorted(required - set(params))
    if missing:
        raise ValueError(f"partition.{missing[0]}: required for kind {kind!r}")
    return fn(labels, n_clients, rng=rng, **params)


# -- identity, storage, statistics ------------------------------------------------------------
def validate_partition(parts: Sequence[np.ndarray], n_samples: int, *, complete: bool = False) -> None:
    """Check that ``parts`` are 1-d integer arrays of distinct indices in ``[0, n_samples)``
    (and, with ``complete=True``, that together they cover every index)."""
    if len(parts) == 0:
        raise ValueError("parts: must hold at least one client, got 0")
    for i, p in enumerate(parts):
        if not isinstance(p, np.ndarray) or p.ndim != 1 or not (np.issubdtype(p.dtype, np.integer) or p.size == 0):
            raise ValueError(
                f"parts[{i}]: must be a 1-d integer index array, got {type(p).__name__} "
                f"shape {getattr(p, 'shape', None)} dtype {getattr(p, 'dtype', None)}"
            )
        if p.size and (int(p.min()) < 0 or int(p.max()) >= n_samples):
            raise ValueError(f"parts[{i}]: indices must be in [0, {n_samples - 1}], got range [{int(p.min())}, {int(p.max())}]")
    allidx = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    counts = np.bincount(allidx, minlength=n_samples)
    if counts.size and counts.max() > 1:
        dup = int(np.argmax(counts > 1))
        owners = [i for i, p in enumerate(parts) if np.any(p == dup)]
        raise ValueError(f"parts: index {dup} is used {int(counts[dup])} times (clients {owners}); each may be used at most once")
    if complete and allidx.size != n_samples:
        raise ValueError(f"parts: cover {allidx.size} of {n_samples} indices; expected all of them")


def fingerprint(parts: Sequence[np.ndarray]) -> str:
    """First 16 hex digits of the SHA-256 of the partition's canonical bytes: the client count,
    then for each client its length and its indices, all as little-endian int64."""
    h = hashlib.sha256()
    h.update(struct.pack("<q", len(parts)))
    for p in parts:
        a = np.ascontiguousarray(p, dtype="<i8")
        h.update(struct.pack("<q", a.size))
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def save_partition(path: str | Path, parts: Sequence[np.ndarray]) -> None:
    """Write ``parts`` to ``path`` (``.npz``: concatenated ``indices``, ``offsets``, ``fingerprint``),
    atomically: a temporary file next to it is fsynced and renamed over ``path``."""
    path = Path(path)
    arrays = [np.asarray(p, dtype=np.int64) for p in parts]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([a.size for a in arrays])
    indices = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    tmp = path.with_suffix(".tmp.npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        np.savez(
            f,
            indices=indices,
            offsets=offsets,
            fingerprint=np.array(fingerprint(arrays)),
            format_version=np.array(_FORMAT_VERSION),
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_partition(path: str | Path) -> list[np.ndarray]:
    """Read a partition written by :func:`save_partition`, checking its stored fingerprint."""
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: not a readable .npz partition file ({e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not a fedgame partition file (a single .npy array, not an .npz archive)")
    with z:
        missing = {"indices", "offsets", "fingerprint"} - set(z.files)
        if missing:
            raise ValueError(f"{path}: not a fedgame partition file (missing {', '.join(sorted(missing))})")
        indices, offsets, stored = z["indices"], z["offsets"], str(z["fingerprint"])
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != indices.size or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{path}: corrupt partition: offsets do not describe {indices.size} indices")
    parts = [indices[offsets[i] : offsets[i + 1]].astype(np.int64, copy=False) for i in range(offsets.size - 1)]
    got = fingerprint(parts)
    if got != stored:
        raise ValueError(f"{path}: corrupt partition: fingerprint {got} does not match the stored {stored}")
    return parts


def label_counts(labels: np.ndarray, parts: Sequence[np.ndarray], classes: int) -> np.ndarray:
    """``(n_clients, classes)`` int64 matrix: how many examples of each class each client holds."""
    y = np.asarray(labels)
    classes = _check_int("classes", classes, 1)
    if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise ValueError(f"labels: must be in [0, {classes - 1}], got range [{int(y.min())}, {int(y.max())}]")
    out = np.zeros((len(parts), classes), dtype=np.int64)
    for i, p in enumerate(parts):
        out[i] = np.bincount(y[p], minlength=classes)
    return out
