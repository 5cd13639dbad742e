"""Partitioners: coverage, determinism, the skew each one promises, identity and storage."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
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
    skew = {
        a: np.mean([max_class_fraction(dirichlet(LABELS, 10, a, rng(s), min_size=10), LABELS) for s in range(3)])
        for a in (0.05, 1.0, 100.0)
    }
    assert skew[0.05] > skew[1.0] > skew[100.0]
    assert skew[0.05] > 0.6 and skew[100.0] < 0.2


def test_dirichlet_min_size_and_retries() -> None:
    for seed in range(5):
        parts = dirichlet(LABELS, 10, 0.1, rng(seed), min_size=50)
        assert min(p.size for p in parts) >= 50
        assert covered_once(parts, LABELS.size)
    with pytest.raises(
        ValueError,
        match=r"partition.min_size: no Dirichlet\(alpha=0.01\) draw in max_retries=3 attempts gave all 50 clients >= 39 examples",
    ):
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
    assert (
        max_class_fraction(similarity(RAND_LABELS, 10, 0, rng()), RAND_LABELS)
        > s_mid
        > max_class_fraction(similarity(RAND_LABELS, 10, 100, rng()), RAND_LABELS)
    )


def test_similarity_size_weights() -> None:
    w = np.array([0.5, 1.0, 1.5, 1.0])
    parts = similarity(LABELS, 4, 50, rng(), size_weights=w)
    # A13: |M_k| is the largest-remainder rounding of |S| v_k / Σv, here exact (250, 500, 750, 500);
    # the pre-A13 code cut at rounded cumulative shares and was only pinned to within 2 examples
    np.testing.assert_array_equal([p.size for p in parts], w / w.sum() * LABELS.size)
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
        (
            lambda: partition("shards", LABELS, 10, rng(), shards_per_client=201),
            r"partition.shards_per_client: must be in \[1, 200\], got 201",
        ),
        (lambda: partition("quantity", LABELS, 10, rng(), alpha=0), r"partition.alpha: must be > 0 and finite, got 0"),
        (lambda: partition("quantity", LABELS, 10, rng(), sigma=-1), r"partition.sigma: must be >= 0 and finite, got -1"),
        (lambda: partition("quantity", LABELS, 10, rng(), min_size=0), r"partition.min_size: must be in \[1, 200\], got 0"),
        (lambda: partition("dirichlet", LABELS, 10, rng(), alpha=1, max_retries=0), r"partition.max_retries: must be >= 1, got 0"),
        (lambda: partition("iid", LABELS, 10, rng(), alpha=1), r"partition.alpha: not a parameter of kind 'iid'; allowed: none"),
        (lambda: partition("shards", LABELS, 10, rng(), s=1), r"partition.s: not a parameter of kind 'shards'; allowed: shards_per_client"),
        (
            lambda: partition("pathological", LABELS, 10, rng()),
            r"partition.kind: unknown 'pathological'; known: iid, dirichlet, shards, similarity, quantity",
        ),
        (
            lambda: partition("iid", LABELS.astype(float), 10, rng()),
            r"partition.labels: must be a 1-d integer array, got shape \(2000,\) dtype float64",
        ),
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

    raw = (
        struct.pack("<q", 2)
        + struct.pack("<q", 2)
        + np.array([4, 7], "<i8").tobytes()
        + struct.pack("<q", 1)
        + np.array([1], "<i8").tobytes()
    )
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


# -- PHS A13 (spec check 16) ------------------------------------------------------------------
#: MNIST's training label counts (60,000 labels, 10 classes), in a seeded random order.
MNIST_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_LIKE = np.random.default_rng(60000).permutation(np.repeat(np.arange(10), MNIST_COUNTS))
PHS_SPREAD = (0.5, 1.5)


def hamilton(quotas: list[Fraction], total: int) -> list[int]:
    """Reference largest remainder, one client at a time in exact rationals: floors, then one
    more for the ``total - Σfloor`` largest remainders, ties to the lower index."""
    floors = [q.numerator // q.denominator for q in quotas]
    order = sorted(range(len(quotas)), key=lambda k: (-(quotas[k] - floors[k]), k))
    for k in order[: total - sum(floors)]:
        floors[k] += 1
    return floors


def a13_reference(
    labels: np.ndarray, n_clients: int, s: float, seed: int, weights: np.ndarray | None = None
) -> tuple[list[np.ndarray], list[int], list[int]]:
    """PHS A13 written out step by step from the spec text (loops, Fractions), replaying the
    partition generator: v_k ~ U(0.5, 1.5) first (unless weights are given), then π."""
    g = rng(seed)
    v = g.uniform(*PHS_SPREAD, n_clients) if weights is None else np.asarray(weights, dtype=np.float64)
    n = labels.size
    v_sum = sum(Fraction(float(x)) for x in v)  # exact Σv, not the float sum
    sizes = hamilton([n * Fraction(float(x)) / v_sum for x in v], n)
    exact_total = Fraction(s) * n / 100
    total = int(exact_total + Fraction(1, 2)) if exact_total >= 0 else 0  # round half up
    n_iid = hamilton([Fraction(s) * m / 100 for m in sizes], total)
    perm = g.permutation(n)
    head, tail = list(perm[:total]), list(perm[total:])
    tail = sorted(tail, key=lambda i: labels[i])  # Python's sort is stable: ties stay in π order
    parts, a, b = [], 0, 0
    for m, k in zip(sizes, n_iid):
        parts.append(np.sort(np.array(head[a : a + k] + tail[b : b + m - k], dtype=np.int64)))
        a, b = a + k, b + m - k
    return parts, sizes, n_iid


@pytest.mark.parametrize("s", [0, 30, 70, 100, 12.5])
def test_similarity_is_a13_step_by_step(s: float) -> None:
    """Sizes sum to |S|, every index once, and the whole partition equals the spec's recipe."""
    y = RAND_LABELS
    parts = similarity(y, 17, s, rng(3), size_spread=PHS_SPREAD)
    ref, sizes, n_iid = a13_reference(y, 17, s, seed=3)
    assert sum(sizes) == y.size and [p.size for p in parts] == sizes
    assert covered_once(parts, y.size)
    assert all(np.array_equal(a, b) for a, b in zip(parts, ref, strict=True))
    assert sum(n_iid) == int(Fraction(s) * y.size / 100 + Fraction(1, 2))


def test_similarity_sizes_and_iid_counts_by_hand() -> None:
    """|S| = 1003, v = (1, 2, 3, 4): |S|v/Σv = 100.3, 200.6, 300.9, 401.2 → floors 1001, the two
    largest remainders (.9, .6) get one more: (100, 201, 301, 401). s = 30: quotas 30, 60.3, 90.3,
    120.3 with total round(300.9) = 301 → one extra, tie .3/.3/.3 to the lowest index:
    n_iid = (30, 61, 90, 120). The IID parts are π's first 301 entries in client order."""
    y = np.random.default_rng(8).integers(0, 10, 1003)
    parts = similarity(y, 4, 30, rng(4), size_weights=[1, 2, 3, 4])
    assert [p.size for p in parts] == [100, 201, 301, 401]
    perm = rng(4).permutation(1003)  # given weights: π is the generator's first draw
    cuts = np.cumsum([0, 30, 61, 90, 120])
    for k, p in enumerate(parts):
        assert np.isin(perm[cuts[k] : cuts[k + 1]], p).all()
        assert np.isin(p, perm[:301]).sum() == cuts[k + 1] - cuts[k]
    # round(s|S|/100) rounds half up: |M| = (3, 3, 3), s = 50 → quotas 1.5 each, total round(4.5) = 5
    parts = similarity(np.arange(9) % 3, 3, 50, rng(4), size_weights=[1, 1, 1])
    perm = rng(4).permutation(9)
    assert [int(np.isin(p, perm[:5]).sum()) for p in parts] == [2, 2, 1]


def test_similarity_iid_counts_match_exact_rationals() -> None:
    """n^iid_k over 300 random (sizes, s): the partitioner's integer arithmetic equals the
    Fraction reference, including non-integer s (taken at its exact binary value)."""
    from fedgame.data.partition import _iid_counts

    g = np.random.default_rng(11)
    for _ in range(300):
        sizes = g.integers(1, 2000, g.integers(1, 40))
        s = float(g.choice([g.integers(0, 101), g.uniform(0, 100), 0.1, 99.9]))
        total = int(Fraction(s) * int(sizes.sum()) / 100 + Fraction(1, 2))
        expect = hamilton([Fraction(s) * int(m) / 100 for m in sizes], total)
        got = _iid_counts(sizes, s)
        assert got.tolist() == expect and np.all(got <= sizes) and got.sum() == total


def test_similarity_s100_histograms_match_the_global_one() -> None:
    """s = 100 on MNIST-like labels, N = 100, v ~ U(0.5, 1.5): the (client × class) table passes
    the chi-square test of homogeneity at level 1e-3, and every client passes its own
    goodness-of-fit test against the global histogram at 1e-3/100 (Bonferroni)."""
    from scipy.stats import chi2

    parts = similarity(MNIST_LIKE, 100, 100, rng(5), size_spread=PHS_SPREAD)
    obs = label_counts(MNIST_LIKE, parts, 10).astype(np.float64)
    expected = obs.sum(axis=1, keepdims=True) * (np.bincount(MNIST_LIKE) / MNIST_LIKE.size)[None, :]
    per_client = ((obs - expected) ** 2 / expected).sum(axis=1)
    assert chi2.sf(per_client.sum(), df=99 * 9) > 1e-3
    assert chi2.sf(per_client, df=9).min() > 1e-3 / 100
    # the test has power: the same statistic rejects s = 70 outright
    skewed = label_counts(MNIST_LIKE, similarity(MNIST_LIKE, 100, 70, rng(5), size_spread=PHS_SPREAD), 10)
    assert chi2.sf((((skewed - expected) ** 2) / expected).sum(), df=99 * 9) < 1e-12


def test_similarity_s0_gives_contiguous_label_ranges() -> None:
    """s = 0: client k holds positions [Σ_{j<k}|M_j|, Σ_{j≤k}|M_j|) of the label-sorted order
    (ties in π order), so its labels are a contiguous range; on MNIST-like labels with N = 100,
    at most 3 distinct labels per client (at most 2 here: |M_k| < 1000 < every class count)."""
    parts = similarity(MNIST_LIKE, 100, 0, rng(6), size_spread=PHS_SPREAD)
    sizes = np.array([p.size for p in parts])
    owner = np.empty(MNIST_LIKE.size, dtype=np.int64)
    owner[np.concatenate(parts)] = np.repeat(np.arange(100), sizes)
    g = rng(6)
    g.uniform(0.5, 1.5, 100)  # replay: the v_k draw comes before π
    perm = g.permutation(MNIST_LIKE.size)
    sorted_order = perm[np.argsort(MNIST_LIKE[perm], kind="stable")]
    np.testing.assert_array_equal(owner[sorted_order], np.repeat(np.arange(100), sizes))
    # replay-free: label ranges are ordered and touch only at their ends
    lo = np.array([MNIST_LIKE[p].min() for p in parts])
    hi = np.array([MNIST_LIKE[p].max() for p in parts])
    assert np.all(hi[:-1] <= lo[1:])
    distinct = (label_counts(MNIST_LIKE, parts, 10) > 0).sum(axis=1)
    assert distinct.max() <= 3 and sizes.max() < min(MNIST_COUNTS)


def test_similarity_size_spread_is_seeded_and_pinned() -> None:
    """Deterministic given the seed (also in another process); the fingerprint of the PHS MNIST
    setting (N = 100, s = 30, U(0.5, 1.5), seed 2024) is pinned. NumPy's Generator streams are
    stable across versions in practice; a change in uniform() or permutation() would show here."""
    a = similarity(MNIST_LIKE, 100, 30, rng(2024), size_spread=PHS_SPREAD)
    b = similarity(MNIST_LIKE, 100, 30, rng(2024), size_spread=[0.5, 1.5])
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert fingerprint(a) == "ebd3067fbc9d179e"
    assert fingerprint(similarity(MNIST_LIKE, 100, 0, rng(2024), size_spread=PHS_SPREAD)) == "be9cb1a80b29210b"
    assert fingerprint(similarity(MNIST_LIKE, 100, 30, rng(2025), size_spread=PHS_SPREAD)) != fingerprint(a)
    code = (
        "import numpy as np; from fedgame.data import similarity, fingerprint; "
        "y = np.random.default_rng(60000).permutation(np.repeat(np.arange(10), "
        f"{MNIST_COUNTS})); print(fingerprint(similarity(y, 100, 30, np.random.default_rng(2024), size_spread=(0.5, 1.5))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "ebd3067fbc9d179e"
    # sizes follow the drawn v_k: within one example of |S| v_k / Σv, sizes vary by ~3x at most
    v = rng(2024).uniform(0.5, 1.5, 100)
    np.testing.assert_allclose([p.size for p in a], MNIST_LIKE.size * v / v.sum(), atol=1.0)
    # through the dispatcher too
    c = partition("similarity", MNIST_LIKE, 100, rng(2024), s=30, size_spread=PHS_SPREAD)
    assert fingerprint(c) == fingerprint(a)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size_weights": [1, 1, 1, 1], "size_spread": (0.5, 1.5)}, r"partition.size_weights, partition.size_spread: give at most one"),
        ({"size_spread": (1.5, 0.5)}, r"partition.size_spread: must be a pair \(a, b\) of finite numbers with 0 < a < b, got \(1.5, 0.5\)"),
        ({"size_spread": (1.0, 1.0)}, r"partition.size_spread: must be a pair .* got \(1.0, 1.0\)"),
        ({"size_spread": (0.0, 1.0)}, r"partition.size_spread: must be a pair .* got \(0.0, 1.0\)"),
        ({"size_spread": (0.5, float("inf"))}, r"partition.size_spread: must be a pair .* got \(0.5, inf\)"),
        ({"size_spread": (0.5, 1.0, 1.5)}, r"partition.size_spread: must be a pair .* got \(0.5, 1.0, 1.5\)"),
        ({"size_spread": 1.0}, r"partition.size_spread: must be a pair .* got 1.0"),
    ],
)
def test_similarity_size_options_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        similarity(LABELS, 4, 30, rng(), **kwargs)  # type: ignore[arg-type]
