"""Comparison aggregators (spec jdp.md §3.9 and the robust rules): FedAvg on perturbed
parameters, Krum / Multi-Krum, coordinate-wise median and trimmed mean against direct
implementations on small inputs."""

from __future__ import annotations

from collections.abc import Callable

import itertools
import math

import numpy as np
import pytest
import torch

from fedgame.core import RoundContext, Selection
from fedgame.robust import (
    ROBUST_AGGREGATORS,
    coordinate_median,
    krum,
    krum_scores,
    krum_select,
    robust_step,
    trimmed_mean,
    weighted_average,
)


def _vecs(m: int, p: int, seed: int, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(p, generator=g, dtype=dtype) for _ in range(m)]


def _as_lists(vecs: list[torch.Tensor]) -> list[list[float]]:
    return [v.double().tolist() for v in vecs]


def _krum_direct(vs: list[list[float]], f: int, multi: int) -> list[float]:
    m = len(vs)
    scores = []
    for i in range(m):
        d = sorted(sum((a - b) ** 2 for a, b in zip(vs[i], vs[j], strict=True)) for j in range(m) if j != i)
        scores.append(sum(d[: m - f - 2]))
    order = sorted(range(m), key=lambda i: (scores[i], i))[:multi]
    return [sum(vs[i][c] for i in order) / multi for c in range(len(vs[0]))]


def _median_direct(vs: list[list[float]]) -> list[float]:
    out = []
    for col in zip(*vs, strict=True):
        s = sorted(col)
        n = len(s)
        out.append(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)
    return out


def _trimmed_direct(vs: list[list[float]], b: int) -> list[float]:
    out = []
    for col in zip(*vs, strict=True):
        s = sorted(col)[b : len(col) - b]
        out.append(math.fsum(s) / len(s))
    return out


def test_weighted_average_is_fedavg_on_parameters() -> None:
    vecs = _vecs(5, 11, 0)
    d = np.array([10.0, 20.0, 5.0, 30.0, 35.0])
    expect = [sum(d[j] * vecs[j][c].item() for j in range(5)) / d.sum() for c in range(11)]
    np.testing.assert_allclose(weighted_average(vecs, d).numpy(), expect, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(weighted_average(vecs).numpy(), torch.stack(vecs).mean(0).numpy(), rtol=1e-12)
    assert weighted_average(_vecs(3, 4, 1, torch.float32)).dtype == torch.float32


def test_krum_against_direct_implementation() -> None:
    rng = np.random.default_rng(0)
    for trial in range(60):
        m = int(rng.integers(3, 12))
        f = int(rng.integers(0, (m - 3) // 2 + 1))
        multi = int(rng.integers(1, m + 1))
        vecs = _vecs(m, int(rng.integers(1, 6)), trial)
        if trial % 5 == 0:
            vecs[1] = vecs[0].clone()  # exact ties in the scores
        got = krum(vecs, n_byzantine=f, multi=multi)
        np.testing.assert_allclose(got.numpy(), _krum_direct(_as_lists(vecs), f, multi), rtol=1e-10, atol=1e-12)


def test_krum_scores_ties_and_outliers() -> None:
    vecs = [
        torch.tensor([0.0, 0.0]),
        torch.tensor([1.0, 0.0]),
        torch.tensor([0.0, 1.0]),
        torch.tensor([1.0, 1.0]),
        torch.tensor([50.0, 50.0]),
    ]
    # f = 1: each score sums the 5 − 1 − 2 = 2 nearest squared distances
    np.testing.assert_allclose(krum_scores(vecs, n_byzantine=1), [2.0, 2.0, 2.0, 2.0, 4802.0 + 4901.0])
    np.testing.assert_array_equal(krum_select(vecs, n_byzantine=1, multi=4), [0, 1, 2, 3])  # ties: lower first
    assert torch.equal(krum(vecs, n_byzantine=1), vecs[0])
    torch.testing.assert_close(krum(vecs, n_byzantine=1, multi=4), torch.tensor([0.5, 0.5]))


def test_median_and_trimmed_mean_against_direct() -> None:
    rng = np.random.default_rng(1)
    for trial in range(60):
        m = int(rng.integers(1, 10))
        vecs = _vecs(m, int(rng.integers(1, 7)), 100 + trial)
        if trial % 4 == 0 and m > 2:
            vecs[2] = vecs[0].clone()  # repeated values
        lists = _as_lists(vecs)
        np.testing.assert_allclose(coordinate_median(vecs).numpy(), _median_direct(lists), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(coordinate_median(vecs).numpy(), np.median(np.array(lists), axis=0), rtol=1e-12, atol=1e-15)
        for b in range((m - 1) // 2 + 1):
            np.testing.assert_allclose(trimmed_mean(vecs, n_trim=b).numpy(), _trimmed_direct(lists, b), rtol=1e-12, atol=1e-14)
        beta = float(rng.uniform(0, 0.5))
        b = math.floor(beta * m)
        if 2 * b < m:
            np.testing.assert_allclose(trimmed_mean(vecs, beta=beta).numpy(), _trimmed_direct(lists, b), rtol=1e-12, atol=1e-14)


def test_rules_are_translation_equivariant_and_keep_dtype() -> None:
    vecs = _vecs(7, 9, 3, torch.float32)
    c = torch.linspace(-5, 5, 9)
    shifted = [v + c for v in vecs]
    for rule in (lambda u: krum(u, n_byzantine=2), coordinate_median, lambda u: trimmed_mean(u, beta=0.2)):
        out = rule(vecs)
        assert out.dtype == torch.float32
        torch.testing.assert_close(rule(shifted), out + c, rtol=1e-5, atol=1e-5)
    even = [torch.tensor([1.0]), torch.tensor([4.0]), torch.tensor([2.0]), torch.tensor([10.0])]
    assert coordinate_median(even).item() == 3.0  # the mean of the middle two, not torch's lower median
    assert trimmed_mean(even, n_trim=1).item() == 3.0 and trimmed_mean(even, beta=0.0).item() == 4.25


def test_registry_and_step_wrapper() -> None:
    assert ROBUST_AGGREGATORS.names() == ["krum", "median", "trimmed_mean"]
    vecs = _vecs(6, 5, 4)
    sel = Selection(indices=np.arange(6), probs=np.full(6, 1.0), k=6, scheme="inclusion")
    ctx = RoundContext(t=0, selection=sel, theta=np.full(6, 1 / 6), params=torch.zeros(5), rng=np.random.default_rng(0))
    steps: list[tuple[str, dict[str, float], Callable[[list[torch.Tensor]], torch.Tensor]]] = [
        ("median", {}, coordinate_median),
        ("trimmed_mean", {"beta": 0.2}, lambda u: trimmed_mean(u, beta=0.2)),
        ("krum", {"n_byzantine": 1, "multi": 2}, lambda u: krum(u, n_byzantine=1, multi=2)),
    ]
    for name, kw, rule in steps:
        step = ROBUST_AGGREGATORS.create(name, **kw)
        state = step.init(torch.zeros(5))
        out, new_state = step.update(vecs, state, ctx)
        assert len(out) == 1 and new_state == state
        torch.testing.assert_close(out[0], rule(vecs))
    out, _ = robust_step(weighted_average).update(vecs, (), ctx)
    torch.testing.assert_close(out[0], torch.stack(vecs).mean(0))


def test_bad_inputs_name_the_field() -> None:
    vecs = _vecs(4, 3, 0)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: krum(vecs, n_byzantine=1), r"n_byzantine: Krum needs m >= 2f \+ 3 \(m = 4 clients allow f <= 0\), got f = 1"),
        (lambda: krum(vecs, n_byzantine=-1), r"n_byzantine: must be an integer >= 0"),
        (lambda: krum(vecs, n_byzantine=0, multi=5), r"multi: must be an integer in \[1, 4\]"),
        (lambda: trimmed_mean(vecs, beta=0.5), r"beta: must be in \[0, 0.5\)"),
        (lambda: trimmed_mean(vecs, n_trim=2), r"n_trim: must leave at least one value per coordinate"),
        (lambda: trimmed_mean(vecs), r"trimmed_mean: give exactly one of beta"),
        (lambda: trimmed_mean(vecs, beta=0.1, n_trim=1), r"trimmed_mean: give exactly one of beta"),
        (lambda: weighted_average(vecs, [1.0, 2.0, 0.0, 1.0]), r"weights\[2\]: must be > 0"),
        (lambda: weighted_average(vecs, [1.0, 2.0]), r"weights: must hold one value per client"),
        (lambda: coordinate_median([]), r"updates: need at least 1 flat vectors, got 0"),
        (lambda: coordinate_median([torch.zeros(2, 2)]), r"updates\[0\]: must be a flat \(1-D\) vector"),
        (lambda: coordinate_median([torch.zeros(2), torch.zeros(3)]), r"updates\[1\]: every vector must match"),
        (lambda: coordinate_median([torch.zeros(2, dtype=torch.int64)]), r"updates\[0\]: must be floating point"),
        (lambda: ROBUST_AGGREGATORS.create("trimmed_mean", beta=0.7), r"beta: must be in \[0, 0.5\)"),
        (lambda: ROBUST_AGGREGATORS.create("krum", n_byzantine=-2), r"n_byzantine: must be an integer >= 0"),
        (lambda: ROBUST_AGGREGATORS.create("bulyan"), r"unknown robust aggregator 'bulyan'"),
    ]
    for call, msg in cases:
        with pytest.raises((ValueError, TypeError), match=f"^{msg}"):
            call()


@pytest.mark.parametrize("m", [5, 6])
def test_krum_exhaustive_small_permutation_invariance(m: int) -> None:
    """Krum's choice does not depend on the order of the inputs (up to ties)."""
    vecs = _vecs(m, 3, 7)
    ref = krum(vecs, n_byzantine=1)
    for perm in itertools.islice(itertools.permutations(range(m)), 50):
        torch.testing.assert_close(krum([vecs[i] for i in perm], n_byzantine=1), ref)
