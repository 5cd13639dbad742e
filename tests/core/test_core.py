"""Core vocabulary: selections, importance weights, seeded streams, registries."""

import subprocess
import sys

import numpy as np
import pytest

from fedgame.core import Registry, Selection, Streams


def test_draws_importance_weights_are_theta_over_k_x() -> None:
    sel = Selection(indices=np.array([2, 0, 2]), probs=np.array([0.5, 0.25, 0.5]), k=3)
    theta = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(sel.importance_weights(theta), [0.5 / 1.5, 0.2 / 0.75, 0.5 / 1.5])
    np.testing.assert_array_equal(sel.clients, [0, 2])


def test_inclusion_weights_are_horvitz_thompson() -> None:
    sel = Selection(indices=np.array([1, 3]), probs=np.array([0.5, 0.8]), k=2, scheme="inclusion")
    theta = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(sel.importance_weights(theta), [0.4, 0.5])
    np.testing.assert_allclose(sel.size_weights(theta), [0.2 / 0.6, 0.4 / 0.6])


@pytest.mark.parametrize("probs", [[0.0, 0.5], [0.5, 1.5], [-0.1, 0.2]])
def test_selection_rejects_bad_probabilities(probs: list[float]) -> None:
    with pytest.raises(ValueError, match="selection.probs"):
        Selection(indices=np.array([0, 1]), probs=np.array(probs), k=2)


def test_inclusion_sample_cannot_repeat() -> None:
    with pytest.raises(ValueError, match="cannot repeat"):
        Selection(indices=np.array([1, 1]), probs=np.array([0.5, 0.5]), k=2, scheme="inclusion")


def test_streams_are_keyed_and_independent_of_order() -> None:
    a, b = Streams(seed=7), Streams(seed=7)
    x1 = a.numpy("selection", 3).random(4)
    b.numpy("train", 3, 1).random(100)  # another stream drawing first changes nothing
    np.testing.assert_array_equal(x1, b.numpy("selection", 3).random(4))
    assert not np.array_equal(x1, a.numpy("selection", 4).random(4))
    assert not np.array_equal(x1, Streams(seed=8).numpy("selection", 3).random(4))
    t1 = a.torch("noise", 1, 2).initial_seed()
    assert t1 == b.torch("noise", 1, 2).initial_seed() != a.torch("noise", 1, 3).initial_seed()


def test_streams_same_in_a_fresh_process() -> None:
    code = "from fedgame.core import Streams; print(Streams(seed=3).integer('init'), Streams(seed=3).numpy('x', 1).integers(1 << 30))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    s = Streams(seed=3)
    assert out == [str(s.integer("init")), str(s.numpy("x", 1).integers(1 << 30))]


def test_negative_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="seed: must be >= 0, got -1"):
        Streams(seed=-1)


def test_registry_lists_known_names_on_unknown() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("a")(lambda: 1)
    reg.register("b", doc="the b one")(lambda: 2)
    assert reg.create("b") == 2 and reg.describe()["b"] == "the b one"
    with pytest.raises(ValueError, match="unknown widget 'c'; registered: a, b"):
        reg.get("c")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(lambda: 3)
