"""``check_plugin(cls)``: a plug-in checked the way a run uses it, in one call.

The kind's own contract (:func:`check_selection`, :func:`check_privacy_plan`, ...) checks an
object the author built by hand; a run builds it from a recipe, through the class's ``Config``
and ``from_config``, beside the other sections. :func:`check_plugin` does that first: it finds
the registry and name ``cls`` is registered under, parses a minimal recipe naming it (the
``Config``'s defaults; ``recipe`` adds or overrides sections, e.g. the incentive a selection
``requires``), builds the run's pieces with the pipeline's own builders
(:func:`fedgame.pipeline.build.build_engine`) on a small federation, and then runs the kind's
contract on what was built. A recipe the plug-in cannot be named in, a ``from_config`` that
fails, or a broken contract raises :class:`AssertionError` with one line naming the plug-in.

The federation is synthetic unless ``data`` is given (what :func:`fedgame.data.as_split` takes):
seeded Gaussian features, one cluster per class, enough for the pieces to be built and the model
to be checked on; the contracts themselves draw on their own synthetic federations
(``fedgame.testing.selection.SIZES``: 10 clients, K = 3; incentives 8 clients), so the recipe
has as many clients as the contract draws from.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["check_plugin", "registered_as"]


def _registries() -> dict[str, Any]:
    """Every plug-in kind's registry, by the recipe field that names its plug-ins (the recipe
    schema imported first: it registers every built-in, central DP's plan among them)."""
    import fedgame.pipeline.config  # noqa: F401
    from fedgame.data import DATASETS
    from fedgame.incentives import INCENTIVES
    from fedgame.models import MODELS
    from fedgame.privacy.accountants import ACCOUNTANTS
    from fedgame.privacy.plans import PRIVACY_PLANS
    from fedgame.selection import SELECTIONS
    from fedgame.sim.losses import LOSSES
    from fedgame.sim.updates import AGGREGATORS

    return {
        "selection.kind": SELECTIONS,
        "privacy.kind": PRIVACY_PLANS,
        "incentive.kind": INCENTIVES,
        "aggregation.kind": AGGREGATORS,
        "accountant.kind": ACCOUNTANTS,
        "data.dataset": DATASETS,
        "model.name": MODELS,
        "train.loss": LOSSES,
    }


def registered_as(plugin: Any) -> tuple[str, str]:
    """``(recipe field, name)`` under which ``plugin`` (a class or factory) is registered."""
    for field, registry in _registries().items():
        for name in registry.names():
            if registry.get(name) is plugin:
                return field, name
    what = getattr(plugin, "__qualname__", repr(plugin))
    raise AssertionError(f"{what} is not registered in any fedgame registry: decorate it with <REGISTRY>.register('name')")


def synthetic_split(*, n_train: int = 400, n_test: int = 100, features: int = 16, classes: int = 4, seed: int = 0) -> Any:
    """Seeded Gaussian features, one cluster per class: the default federation of
    :func:`check_plugin` (a contract check, not a dataset anyone trains for its own sake)."""
    from fedgame.data import as_split

    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(classes, features))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(n) % classes
        return (centres[y] + rng.normal(size=(n, features))).astype(np.float32), y.astype(np.int64)

    return as_split({"train": draw(n_train), "test": draw(n_test)}, name="check_plugin")


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def check_plugin(
    plugin: Any,
    *,
    recipe: Mapping[str, Any] | None = None,
    data: Any = None,
    reps: int = 20_000,
) -> None:
    """Check ``plugin`` (a registered class or factory of any kind) as a run builds it: parse a
    minimal recipe naming it, build the run's pieces through the pipeline, run its kind's
    contract on the built object. ``recipe``: sections to add or override (nested mappings
    merge); ``data``: the examples to partition (what :func:`fedgame.data.as_split` takes;
    default :func:`synthetic_split`); ``reps``: the selection contract's seeded rounds (its
    4-standard-error bounds hold at any count; more rounds catch smaller biases; a strategy
    whose schedule is fixed for the run's rounds up front, as PHS's, needs ``train.rounds``
    at least ``reps`` in ``recipe``)."""
    from fedgame.core.seeding import Streams
    from fedgame.data import as_split, in_memory_options
    from fedgame.pipeline.build import build_data, build_engine, check_model
    from fedgame.pipeline.config import RecipeError, _set_path, parse_recipe

    field, name = registered_as(plugin)
    label = f"{field} {name!r} ({getattr(plugin, '__qualname__', plugin)})"
    if field in ("selection.kind", "privacy.kind", "incentive.kind") and getattr(plugin, "Config", None) is None:
        raise AssertionError(
            f"{label}: has no Config, so no recipe can name it; give it one (docs/plugins.md), "
            "or check objects built in Python with its kind's check_* function"
        )
    n_clients = 8 if field == "incentive.kind" else 10
    raw: dict[str, Any] = {
        "name": "check_plugin",
        "seed": 0,
        "data": {"dataset": "memory", "partition": {"kind": "iid", "n_clients": n_clients}},
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 16}},
    }
    if field == "data.dataset":
        raw["data"].pop("dataset")
    _set_path(raw, field, name)
    raw = _merge(raw, recipe or {})
    split = None
    if field != "data.dataset":
        split = as_split(data if data is not None else synthetic_split())
        raw["data"]["options"] = in_memory_options(split)
    try:
        cfg = parse_recipe(raw)
    except RecipeError as err:
        raise AssertionError(f"{label}: a recipe naming it is refused: {err}") from None

    if field == "data.dataset":
        from fedgame.testing.dataset import check_dataset

        check_dataset(name, dict(cfg.data.options), root=cfg.data.root)
        return
    if field == "accountant.kind":
        from fedgame.privacy.accountants import make_accountant
        from fedgame.testing.accountant import check_accountant

        check_accountant(lambda n: make_accountant(cfg.accountant.kind, n_clients=n))
        return
    if field == "aggregation.kind":
        from fedgame.sim.updates import AGGREGATORS
        from fedgame.testing.aggregator import check_aggregator

        check_aggregator(lambda: AGGREGATORS.get(cfg.aggregation.kind)())
        return
    if field in ("model.name", "train.loss"):
        try:
            check_model(cfg, build_data(cfg, Streams(seed=cfg.seed), split))
        except ValueError as err:
            raise AssertionError(f"{label}: {err}") from None
        return

    try:
        built = build_engine(cfg, split=split)
    except Exception as err:  # what a run would meet at its start, as one line naming the plug-in
        raise AssertionError(f"{label}: building it from the recipe failed: {type(err).__name__}: {err}") from err
    built.close()
    engine = built.engine
    piece = {"selection.kind": engine.selection, "privacy.kind": engine.privacy, "incentive.kind": engine.incentive}[field]
    assert type(piece) is plugin or not isinstance(plugin, type), (
        f"{label}: the recipe built a {type(piece).__name__}, not the plug-in's class"
    )

    def fresh() -> Any:  # an unused copy of what the pipeline built: what a fresh build gives
        return copy.deepcopy(piece)

    if field == "selection.kind":
        from fedgame.testing.selection import check_selection

        check_selection(fresh, reps=reps)
    elif field == "privacy.kind":
        from fedgame.testing.privacy import check_privacy_plan

        check_privacy_plan(fresh)
    else:
        from fedgame.testing.incentive import check_incentive

        check_incentive(fresh, n_clients=n_clients, k=3)
