"""JDP-FL adversary (spec jdp.md §3.8, A25; check 22): dirty labels and the adversary pick."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from scipy import stats

from fedgame.core import Streams
from fedgame.robust import DIRTY_LABEL_TARGETS, ONE_CLASS_SOURCES, choose_adversary, dirty_label


@pytest.mark.parametrize("dataset", ["mnist", "cifar10"])
def test_every_label_becomes_the_target(dataset: str) -> None:
    rng = np.random.default_rng(0)
    clients = [rng.integers(0, 10, size=2950).astype(np.int64) for _ in range(5)]
    originals = [c.copy() for c in clients]
    adversary = 3
    target = DIRTY_LABEL_TARGETS[dataset]
    poisoned = dirty_label(clients[adversary], target=target, num_classes=10)
    assert poisoned.dtype == np.int64 and poisoned.shape == (2950,)
    assert np.all(poisoned == target)
    for c, o in zip(clients, originals, strict=True):  # nobody's labels were modified in place
        np.testing.assert_array_equal(c, o)
    as_torch = dirty_label(torch.as_tensor(clients[adversary]), target=target)
    assert isinstance(as_torch, torch.Tensor) and as_torch.dtype == torch.int64 and bool((as_torch == target).all())
    assert DIRTY_LABEL_TARGETS == {"mnist": 2, "fashion_mnist": 2, "cifar10": 3}  # Fashion-MNIST: ours, as MNIST


def test_one_class_variant() -> None:
    y = np.array([7, 1, 7, 2, 0, 7], dtype=np.int64)
    out = dirty_label(y, target=2, mode="one_class", source=ONE_CLASS_SOURCES["mnist"])
    np.testing.assert_array_equal(out, [2, 1, 2, 2, 0, 2])
    np.testing.assert_array_equal(y, [7, 1, 7, 2, 0, 7])
    t = dirty_label(torch.tensor([5, 3, 5]), target=3, mode="one_class", source=ONE_CLASS_SOURCES["cifar10"])
    assert t.tolist() == [3, 3, 3]


def test_adversary_is_a_function_of_the_seed_only() -> None:
    winners = np.array([4, 9, 13, 21, 30, 42])
    picks = []
    for seed in range(3000):
        s = Streams(seed=seed)
        a = choose_adversary(winners, s.numpy("adversary"))
        s.numpy("train", 0, 1).random(1000)  # other streams drawing changes nothing
        assert a == choose_adversary(winners, Streams(seed=seed).numpy("adversary"))
        picks.append(a)
    counts = np.array([picks.count(int(w)) for w in winners])
    assert counts.sum() == 3000 and stats.chisquare(counts).pvalue > 1e-3


def test_bad_inputs_name_the_field() -> None:
    y = np.zeros(4, dtype=np.int64)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: dirty_label(y, target=10, num_classes=10), r"target: must be an integer in \[0, 9\], got 10"),
        (lambda: dirty_label(y, target=-1), r"target: must be an integer >= 0"),
        (lambda: dirty_label(y, target=2, mode="one_class"), r"source: mode 'one_class' needs"),
        (lambda: dirty_label(y, target=2, mode="one_class", source=2), r"source: must differ from target"),
        (lambda: dirty_label(y, target=2, source=7), r"source: only for mode 'one_class'"),
        (lambda: dirty_label(y, target=2, mode="flip"), r"mode: must be 'all_to_target' or 'one_class'"),  # type: ignore[arg-type]
        (lambda: dirty_label(y.astype(float), target=2), r"labels: must hold integer class indices"),
        (lambda: dirty_label([0, 1], target=2), r"labels: must be a numpy array or torch tensor"),  # type: ignore[type-var]
        (lambda: choose_adversary(np.array([], dtype=np.int64), np.random.default_rng(0)), r"clients: must be a non-empty"),
        (lambda: choose_adversary(np.array([1, 1]), np.random.default_rng(0)), r"clients: must not repeat"),
    ]
    for call, msg in cases:
        with pytest.raises((ValueError, TypeError), match=f"^{msg}"):
            call()
