"""Partitioners: coverage, determinism, the skew each one promises, identity and storage."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedgame.data import (
    PARTITION_KINDS,
    dirichlet,
    fingerprint,
    iid,
    label_counts,
    load_partition,
    partition,
    quantity_skew,
    save_partition,
    shards,
    similarity,
    validate_partition,
)

# balanced and sorted: 10 classes × 200 examples
LABELS = np.repeat(np.arange(10), 200)
# shuffled, unbalanced labels
RAND_LABELS = np.random.default_rng(99).integers(0, 10, 3000)

KIND_PARAMS: dict[str, dict[str, object]] = {
    "iid": {},
    "dirichlet": {"alpha": 0.3, "min_size": 10},
    "shards": {"shards_per_client": 2},
    "similarity": {"s": 30},
    "quantity": {"alpha": 0.5, "min_size": 10},
}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def covered_once(parts: list[np.ndarray], n: int) -> bool:
    allidx = np.concatenate(parts)
    return allidx.size == n and np.array_equal(np.sort(allidx), np.arange(n))


def test_kinds_are_the_recipe_kinds() -> None:
    assert PARTITION_KINDS == ("iid", "dirichlet", "shards", "similarity", "quantity")


@pytest.mark.parametrize("kind", PARTITION_KINDS)
@pytest.mark.parametrize("labels", [LABELS, RAND_LABELS], ids=["sorted", "random"])
def test_every_index_exactly_once_and_seeded(kind: str, labels: np.ndarray) -> None:
    parts = partition(kind, labels, 20, rng(0), **KIND_PARAMS[kind])
    assert len(parts) == 20
    assert all(p.dtype == np.int64 and p.ndim == 1 and p.size > 0 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats within a client
    assert covered_once(parts, labels.size)
    validate_partition(parts, labels.size, complete=True)
    again = partition(kind, labels, 20, rng(0), **KIND_PARAMS[kind])
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition(kind, labels, 20, rng(1), **KIND_PARAMS[kind])
    assert fingerprint(other) != fingerprint(parts)


def test_iid_sizes_and_labels() -> None:
    parts = iid(LABELS, 7, rng())
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == LABELS.size
    counts = label_counts(LABELS, iid(LABELS, 10, rng()), 10)
    assert counts.min() > 5 and counts.max() < 40  # 20 expected per cell


def max_class_fraction(parts: list[np.ndarray], labels: np.ndarray) -> float:
    c = label_counts(labels, parts, 10)
    return float(np.mean(c.max(axis=1) / c.sum(axis=1)))


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    skew = {a: np.mean([max_class_fraction(dirichlet(LABELS, 10, a, rng(s), min_size=10), LABELS) for s in range(3)]) for a in (0.05, 1.0, 100.0)}
    assert skew[0.05] > skew[1.0] > skew[100.0]
    assert skew[0.05] > 0.6 and skew[100.0] < 0.2


def test_dirichlet_min_size_and_retries() -> None:
    for seed in range(5):
        parts = dirichlet(LABELS, 10, 0.1, rng(seed), min_size=50)
        assert min(p.size for p in parts) >= 50
        assert covered_once(parts, LABELS.size)
    with pytest.raises(ValueError, match=r"partition.min_size: no Dirichlet\(alpha=0.01\) draw in max_retries=3 attempts gave all 50 clients >= 39 examples"):
        dirichlet(LABELS, 50, 0.01, rng(), min_size=39, max_retries=3)
    with pytest.raises(ValueError, match=r"partition.min_size: must be in \[1, 100\], got 101"):
        dirichlet(LABELS, 20, 0.5, rng(), min_size=101)


def test_dirichlet_proportions_are_followed() -> None:
    """With one class, client i gets round(cumulative q) boundaries: within 1 example of q_i·n."""
    y = np.zeros(1000, dtype=np.int64)
    parts = dirichlet(y, 4, 1.0, rng(3), min_size=1)
    q = rng(3).dirichlet(np.ones(4))  # the same first draw
    np.testing.assert_allclose([p.size for p in parts], q * 1000, atol=1.0)


def test_shards_classes_per_client() -> None:
    for spc in (1, 2, 3):
        parts = shards(LABELS, 10, spc, rng(spc))
        c = label_counts(LABELS, parts, 10)
        assert np.all((c > 0).sum(axis=1) <= 2 * spc)
        sizes = [p.size for p in parts]
        assert sum(sizes) == LABELS.size and max(sizes) - min(sizes) <= spc
    # McMahan's setting: 2 shards of one class each when shards align with classes
    parts = shards(LABELS, 5, 2, rng=rng())
    assert np.all((label_counts(LABELS, parts, 10) > 0).sum(axis=1) <= 2)
    with pytest.raises(TypeError, match="partition.rng: must be a numpy.random.Generator"):
        shards(LABELS, 5, 2)


def test_similarity_extremes() -> None:
    c0 = label_counts(LABELS, similarity(LABELS, 10, 0, rng()), 10)
    assert np.all((c0 > 0).sum(axis=1) == 1)  # sorted chunks: one class per client
    c0 = label_counts(LABELS, similarity(LABELS, 20, 0.0, rng()), 10)
    assert np.all((c0 > 0).sum(axis=1) <= 2)
    c100 = label_counts(LABELS, similarity(LABELS, 10, 100, rng()), 10)
    frac = c100 / c100.sum(axis=1, keepdims=True)
    assert np.all((c100 > 0).sum(axis=1) == 10) and np.abs(frac - 0.1).max() < 0.06
    # in between, the IID share is exactly s% of the data
    parts = similarity(RAND_LABELS, 10, 40, rng())
    assert covered_once(parts, RAND_LABELS.size)
    s_mid = max_class_fraction(parts, RAND_LABELS)
    assert max_class_fraction(similarity(RAND_LABELS, 10, 0, rng()), RAND_LABELS) > s_mid > max_class_fraction(similarity(RAND_LABELS, 10, 100, rng()), RAND_LABELS)


def test_similarity_size_weights() -> None:
    w = np.array([0.5, 1.0, 1.5, 1.0])
    parts = similarity(LABELS, 4, 50, rng(), size_weights=w)
    np.testing.assert_allclose([p.size for p in parts], w / w.sum() * LABELS.size, atol=2)
    assert covered_once(parts, LABELS.size)
    with pytest.raises(ValueError, match=r"partition.size_weights: must have shape \(4,\) \(one per client\), got \(3,\)"):
        similarity(LABELS, 4, 50, rng(), size_weights=[1, 1, 1])
    with pytest.raises(ValueError, match=r"partition.size_weights: must be finite and > 0"):
        similarity(LABELS, 4, 50, rng(), size_weights=[1, 0, 1, 1])


def test_quantity_skew_sizes() -> None:
    small = quantity_skew(LABELS, 20, rng(), alpha=0.1, min_size=15)
    big = quantity_skew(LABELS, 20, rng(), alpha=100.0, min_size=15)
    assert min(p.size for p in small) >= 15 and covered_once(small, LABELS.size)
    assert np.std([p.size for p in small]) > 3 * np.std([p.size for p in big])
    logn = quantity_skew(LABELS, 20, rng(), sigma=1.5, min_size=5)
    assert min(p.size for p in logn) >= 5 and covered_once(logn, LABELS.size)
    # label-IID: every sizeable client sees most classes
    c = label_counts(LABELS, big, 10)
    assert np.all((c > 0).sum(axis=1) >= 8)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: partition("dirichlet", LABELS, 10, rng(), alpha=-1.0), r"partition.alpha: must be > 0 and finite, got -1.0"),
        (lambda: partition("dirichlet", LABELS, 10, rng(), alpha=float("nan")), r"partition.alpha: must be > 0 and finite, got nan"),
        (lambda: partition("dirichlet", LABELS, 10, rng()), r"partition.alpha: required for kind 'dirichlet'"),
        (lambda: partition("iid", LABELS, 0, rng()), r"partition.n_clients: must be in \[1, 2000\], got 0"),
        (lambda: partition("iid", LABELS, 2001, rng()), r"partition.n_clients: must be in \[1, 2000\], got 2001"),
        (lambda: partition("iid", LABELS, 2.5, rng()), r"partition.n_clients: must be an integer \[1, 2000\], got 2.5"),  # type: ignore[arg-type]
        (lambda: partition("similarity", LABELS, 10, rng(), s=101), r"partition.s: must be in \[0, 100\], got 101"),
        (lambda: partition("similarity", LABELS, 10, rng(), s=-0.5), r"partition.s: must be in \[0, 100\], got -0.5"),
        (lambda: partition("shards", LABELS, 10, rng(), shards_per_client=0), r"partition.shards_per_client: must be in \[1, 200\], got 0"),
        (lambda: partition("shards", LABELS, 10, rng(), shards_per_client=201), r"partition.shards_per_client: must be in \[1, 200\], got 201"),
        (lambda: partition("quantity", LABELS, 10, rng(), alpha=0), r"partition.alpha: must be > 0 and finite, got 0"),
        (lambda: partition("quantity", LABELS, 10, rng(), sigma=-1), r"partition.sigma: must be >= 0 and finite, got -1"),
        (lambda: partition("quantity", LABELS, 10, rng(), min_size=0), r"partition.min_size: must be in \[1, 200\], got 0"),
        (lambda: partition("dirichlet", LABELS, 10, rng(), alpha=1, max_retries=0), r"partition.max_retries: must be >= 1, got 0"),
        (lambda: partition("iid", LABELS, 10, rng(), alpha=1), r"partition.alpha: not a parameter of kind 'iid'; allowed: none"),
        (lambda: partition("shards", LABELS, 10, rng(), s=1), r"partition.s: not a parameter of kind 'shards'; allowed: shards_per_client"),
        (lambda: partition("pathological", LABELS, 10, rng()), r"partition.kind: unknown 'pathological'; known: iid, dirichlet, shards, similarity, quantity"),
        (lambda: partition("iid", LABELS.astype(float), 10, rng()), r"partition.labels: must be a 1-d integer array, got shape \(2000,\) dtype float64"),
        (lambda: partition("iid", LABELS - 1, 10, rng()), r"partition.labels: must be >= 0, got minimum -1"),
    ],
)
def test_bad_params_are_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_rng_must_be_a_generator() -> None:
    with pytest.raises(TypeError, match="partition.rng: must be a numpy.random.Generator .* got int"):
        iid(LABELS, 10, 0)  # type: ignore[arg-type,unused-ignore]


def test_fingerprint_is_canonical_and_sensitive() -> None:
    parts = iid(LABELS, 10, rng())
    fp = fingerprint(parts)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fingerprint([p.astype(np.int32) for p in parts]) == fp  # dtype does not matter, values do
    swapped = [p.copy() for p in parts]
    swapped[0][0], swapped[1][0] = parts[1][0], parts[0][0]
    assert fingerprint(swapped) != fp
    # the boundary between clients is part of the identity
    assert fingerprint([np.arange(3), np.arange(3, 5)]) != fingerprint([np.arange(2), np.arange(2, 5)])
    assert fingerprint([np.arange(5)]) != fingerprint([np.arange(5), np.arange(0)])
    # the canonical bytes are documented: count, then (length, indices) as little-endian int64
    import hashlib
    import struct

    raw = struct.pack("<q", 2) + struct.pack("<q", 2) + np.array([4, 7], "<i8").tobytes() + struct.pack("<q", 1) + np.array([1], "<i8").tobytes()
    assert fingerprint([np.array([4, 7]), np.array([1])]) == hashlib.sha256(raw).hexdigest()[:16]


def test_fingerprint_is_the_same_in_another_process() -> None:
    code = "import numpy as np; from fedgame.data import partition, fingerprint; print(fingerprint(partition('dirichlet', np.repeat(np.arange(10), 200), 10, np.random.default_rng(5), alpha=0.5)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == fingerprint(partition("dirichlet", LABELS, 10, rng(5), alpha=0.5))


def test_save_load_roundtrip(tmp_path: Path) -> None:
    parts = dirichlet(RAND_LABELS, 30, 0.2, rng(), min_size=5)
    path = tmp_path / "run" / "partition.npz"
    save_partition(path, parts)
    assert path.exists() and not path.with_suffix(".tmp.npz").exists()
    back = load_partition(path)
    assert len(back) == 30 and all(np.array_equal(a, b) and b.dtype == np.int64 for a, b in zip(parts, back))
    assert fingerprint(back) == fingerprint(parts)
    save_partition(path, parts[:3])  # overwrite in place
    assert len(load_partition(path)) == 3


def test_load_rejects_corrupt_files(tmp_path: Path) -> None:
    path = tmp_path / "p.npz"
    save_partition(path, [np.array([0, 1]), np.array([2])])
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    d["indices"] = np.array([0, 1, 3])
    np.savez(path, **d)
    with pytest.raises(ValueError, match=r"p.npz: corrupt partition: fingerprint .* does not match the stored"):
        load_partition(path)
    np.savez(path, something=np.zeros(2))
    with pytest.raises(ValueError, match=r"p.npz: not a fedgame partition file \(missing fingerprint, indices, offsets\)"):
        load_partition(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"p.npz: not a readable .npz partition file"):
        load_partition(path)
    with pytest.raises(FileNotFoundError):
        load_partition(tmp_path / "absent.npz")


def test_label_counts_and_validation() -> None:
    parts = [np.array([0, 1, 2]), np.array([5])]
    y = np.array([0, 0, 1, 2, 2, 1])
    np.testing.assert_array_equal(label_counts(y, parts, 3), [[2, 1, 0], [0, 1, 0]])
    with pytest.raises(ValueError, match=r"parts: index 2 is used 2 times \(clients \[0, 1\]\)"):
        validate_partition([np.array([0, 2]), np.array([2])], 6)
    with pytest.raises(ValueError, match=r"parts\[1\]: indices must be in \[0, 5\], got range \[6, 6\]"):
        validate_partition([np.array([0]), np.array([6])], 6)
    with pytest.raises(ValueError, match=r"parts: cover 2 of 6 indices"):
        validate_partition([np.array([0]), np.array([3])], 6, complete=True)
