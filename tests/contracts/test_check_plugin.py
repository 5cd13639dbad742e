"""``fedgame.testing.check_plugin``: every built-in plug-in passes it as a run builds it (a recipe
naming it, its ``from_config`` in the pipeline, its kind's contract), and a broken one is refused
with one line naming it."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

from fedgame.data import as_split
from fedgame.selection import SELECTIONS, SelectionStrategy
from fedgame.testing import check_plugin
from fedgame.testing.plugin import _registries, synthetic_split

#: the sections a built-in needs beside its own (what its ``requires`` names), from the shipped recipes
PHS = {
    "selection": {"kind": "phs", "mechanism": "privacy_aware", "count_mode": "realized"},
    "privacy": {"kind": "phs", "budgets": {"kind": "uniform", "low": 0, "high": 1}, "delta": 1e-5},
    "aggregation": {"kind": "mean"},
}
GAME_PRIVACY = {"kind": "zcdp_upload", "rho": "game", "clip": 1.0, "mode": "paper_update"}
FEDPCS = {
    "incentive": {"kind": "fedpcs", "gamma": 0.5, "acc_scale": 10000, "inclusion": "privacy"},
    "privacy": GAME_PRIVACY,
    "accountant": {"kind": "zcdp"},
}
QIDPFL = {
    "incentive": {"kind": "qidpfl", "policy": "qidpfl", "screening": "keep_fraction"},
    "privacy": GAME_PRIVACY,
    "accountant": {"kind": "zcdp"},
    "selection": {"kind": "participants"},
}


def _images(channels: int, side: int, n: int = 64, classes: int = 10) -> Any:
    rng = np.random.default_rng(0)
    y = np.arange(n) % classes
    x = rng.random((n, channels, side, side), dtype=np.float32)
    return as_split({"train": (x, y), "test": (x[:16], y[:16])})


def _tokens(n: int = 64, length: int = 12, vocab: int = 50) -> Any:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    x = rng.integers(1, vocab, size=(n, length))
    return as_split({"train": (x, y), "test": (x[:16], y[:16])})


def _regression(n: int = 64) -> Any:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = (x @ rng.normal(size=8)).astype(np.float32)
    return as_split({"train": (x, y), "test": (x[:16], y[:16]), "classes": 0})


MNIST, CIFAR = (1, 28), (3, 32)
#: per built-in: (recipe sections to add, data); absent: the minimal recipe on the synthetic features
SETUP: dict[tuple[str, str], tuple[dict[str, Any], Any]] = {
    ("selection.kind", "phs"): ({**PHS, "train": {"rounds": 5_000}}, None),  # its schedule covers the contract's rounds
    ("privacy.kind", "phs"): (PHS, None),
    ("selection.kind", "privacy_aware"): (FEDPCS, None),
    ("incentive.kind", "fedpcs"): (FEDPCS, None),
    ("selection.kind", "participants"): (QIDPFL, None),
    ("privacy.kind", "dpsgd"): ({"privacy": {"noise_multiplier": 1.0}}, None),
    ("incentive.kind", "qidpfl"): (QIDPFL, None),
    **{("model.name", m): ({}, MNIST) for m in ("jdp_mnist_cnn", "lenet5", "mcmahan_cnn", "phs_mnist_cnn", "simple_cnn")},
    **{
        ("model.name", m): ({}, CIFAR)
        for m in ("jdp_cifar_cnn", "mcmahan_cifar_cnn", "phs_cifar_cnn", "qidpfl_cifar_cnn", "resnet18", "vgg11", "vgg16")
    },
    ("model.name", "embedding_bag"): ({}, "tokens"),
    ("train.loss", "bce_with_logits"): ({}, "binary"),
    ("train.loss", "mse"): ({"model": {"name": "mlp"}}, "regression"),
}
#: fixed_sets has no Config (its members mask is given in Python; tests/contracts/test_selection_contract.py);
#: datasets read from files this machine does not have (cifar, emnist, mnist, svhn), or given only in
#: Python (memory); csv, npz and image_folder are checked on files the tests write
#: (tests/data/test_readers.py), fashion_mnist here from Debian's dataset-fashion-mnist
NOT_HERE = {("selection.kind", "fixed_sets")} | {
    ("data.dataset", d) for d in ("cifar10", "cifar100", "csv", "emnist", "image_folder", "memory", "mnist", "npz", "svhn")
}
CASES = sorted((f, n) for f, reg in _registries().items() for n in reg.names() if (f, n) not in NOT_HERE)


def _data(spec: Any) -> Any:
    if spec is None:
        return None
    if spec == "tokens":
        return _tokens()
    if spec == "regression":
        return _regression()
    if spec == "binary":
        split = synthetic_split(classes=2)
        return split
    return _images(*spec)


@pytest.mark.parametrize(("field", "name"), CASES, ids=[f"{f}={n}" for f, n in CASES])
def test_every_built_in_passes_check_plugin(field: str, name: str) -> None:
    recipe, data = SETUP.get((field, name), ({}, None))
    check_plugin(_registries()[field].get(name), recipe=recipe, data=_data(data), reps=5_000)


def test_a_plugin_that_is_not_registered_is_named() -> None:
    class Loose(SelectionStrategy):
        def probabilities(self, state: Any) -> np.ndarray:
            return np.full(10, 0.1)

    with pytest.raises(AssertionError, match=r"Loose is not registered in any fedgame registry"):
        check_plugin(Loose)


def test_a_plugin_that_needs_another_section_is_refused_in_one_line_naming_it() -> None:
    """``privacy_aware`` draws from FedPCS's ρ schedule; without the incentive the recipe naming
    it is refused, and check_plugin says which plug-in and why."""
    with pytest.raises(AssertionError) as err:
        check_plugin(SELECTIONS.get("privacy_aware"))
    line = str(err.value)
    assert "\n" not in line and line.startswith("selection.kind 'privacy_aware' (PrivacyAware")
    assert "a recipe naming it is refused" in line and "fedpcs" in line


def test_a_plugin_whose_contract_breaks_fails_check_plugin() -> None:
    """A registered strategy that declares uniform probabilities but draws the first K clients
    every round builds fine, and check_plugin fails it on the selection contract."""
    from fedgame.core import Selection
    from fedgame.core.plugins import PluginConfig

    @SELECTIONS.register("first_k_liar")
    class FirstK(SelectionStrategy):
        class Config(PluginConfig):
            kind: Literal["first_k_liar"] = "first_k_liar"

        def probabilities(self, state: Any) -> np.ndarray:
            return np.full(state.sizes.size, 1.0 / state.sizes.size)

        def select(self, state: Any, rng: np.random.Generator) -> Selection:
            p = self.probabilities(state)
            return Selection(indices=np.arange(state.k), probs=p[: state.k], k=state.k, scheme="draws")

    try:
        with pytest.raises(AssertionError, match="inclusion|frequency|4 standard errors|declared"):
            check_plugin(FirstK, reps=2_000)
    finally:
        SELECTIONS._items.pop("first_k_liar")
        SELECTIONS._docs.pop("first_k_liar")


def test_a_strategy_without_config_is_refused_in_one_line() -> None:
    with pytest.raises(AssertionError, match=r"^selection.kind 'fixed_sets' \(FixedSets\): has no Config, so no recipe can name it"):
        check_plugin(SELECTIONS.get("fixed_sets"))
