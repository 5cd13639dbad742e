"""User plug-ins: modules imported before a recipe is read, so the kinds they register can be named.

A plug-in module registers its classes in the library's registries at import time (for example
``@SELECTIONS.register("my_rule")`` on a :class:`~fedgame.selection.SelectionStrategy` subclass
that carries a ``Config`` model; see ``docs/plugins.md``). Three ways bring one in:

* ``fedgame --plugin MODULE ...`` (repeatable): a dotted module name on ``sys.path`` or a path to a
  ``.py`` file;
* the entry-point group ``fedgame.plugins`` of an installed distribution (each entry point names a
  module, loaded the first time any recipe is parsed);
* :func:`load_plugins` from Python.

Every module loaded by name or path is also written to the environment variable
``FEDGAME_PLUGINS`` (``os.pathsep``-separated), and :func:`load_plugins` reads it: processes the
run starts later (spawned workers, Flower's per-message ClientApp processes, ``compare --jobs``)
import the same plug-ins before they parse the recipe they are handed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, get_args

from pydantic import BaseModel, ConfigDict, model_validator

if TYPE_CHECKING:  # annotations only: fedgame.core.seeding imports torch, which loading plug-ins need not
    import numpy as np
    from numpy.typing import NDArray

    from fedgame.core.seeding import Streams

__all__ = [
    "ENV_VAR",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "BuildContext",
    "FederatedData",
    "ParticipationBound",
    "load_plugins",
    "loaded_plugins",
]

ENV_VAR = "FEDGAME_PLUGINS"
ENTRY_POINT_GROUP = "fedgame.plugins"

_loaded: dict[str, ModuleType] = {}
_entry_points_done = False


class PluginError(ImportError):
    """A plug-in module could not be found or imported (the message names it)."""


class FederatedData(Protocol):
    """What a plug-in may read of the server's federated dataset (``ctx.data``; the pipeline
    hands it a ``fedgame.data.FederatedDataset``, which core cannot import)."""

    @property
    def n_clients(self) -> int: ...
    @property
    def sizes(self) -> NDArray[np.int64]:
        """Examples per client, ``(n_clients,)``."""
        ...

    def label_counts(self) -> NDArray[np.int64]:
        """``(n_clients, classes)`` examples of each class per client."""
        ...


class ParticipationBound(Protocol):
    """What a privacy plan may read of the run's selection strategy (``ctx.selection``; the
    pipeline hands it a ``fedgame.selection.SelectionStrategy``, which core cannot import)."""

    def participation_bound(self) -> NDArray[Any] | None:
        """The most times each client can be selected over the run when the strategy fixes it
        before training, else None."""
        ...


@dataclass(frozen=True)
class BuildContext:
    """What a plug-in's ``from_config(cfg, ctx)`` may use to build itself.

    ``run`` is the whole recipe (a ``RunConfig``); ``data`` the federated dataset the server
    holds (:class:`FederatedData`: number of clients, sizes, label counts), or None where the
    server has no copy; ``rng`` a NumPy generator on the plug-in's own stream (same seed, same
    draws); ``plan`` the incentive's plan when the recipe has one (FedPCS's ρ schedule,
    QI-DPFL's participant sets), else None;
    ``label_counts`` the clients' label histograms when queried, else None (:meth:`counts`
    falls back to the partition's); ``streams`` the run's seeded streams (a built-in that draws
    before training names its own stream, e.g. PHS's ``schedule``); ``phs`` what the privacy
    plan fixed before training (its ``setup``: PHS's client budgets ε_k, V_k, p^u), else None;
    ``selection`` the run's selection strategy, for a privacy plan that calibrates to its
    participation bound (:class:`ParticipationBound`); ``dim`` the model's number of
    parameters (for an incentive's plan that prices it).
    """

    run: Any  # the pipeline's RunConfig (pydantic), read field by field; core cannot import the pipeline
    data: FederatedData | None = None
    rng: np.random.Generator | None = None
    plan: Any = None  # whichever incentive's plan (FedPCSPlan, QIDPFLPlan, a plug-in's): no common type in core
    label_counts: NDArray[np.int64] | None = None
    streams: Streams | None = None
    phs: Any = None  # whichever privacy plan's setup (PHS's ClientBudgets, a plug-in's): no common type in core
    selection: ParticipationBound | None = None
    dim: int | None = None

    def counts(self) -> NDArray[np.int64]:
        """The clients' label histograms: as queried, else the server's copy of the partition."""
        if self.label_counts is not None:
            return self.label_counts
        if self.data is None:
            raise ValueError("the clients' label counts are needed: pass the federated data")
        return self.data.label_counts()


def _import(spec: str) -> ModuleType:
    path = Path(spec)
    if spec.endswith(".py"):
        if not path.is_file():
            raise PluginError(f"--plugin: file not found: {spec}")
        name = path.stem
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path.resolve()):
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path.resolve())
        if module_spec is None or module_spec.loader is None:
            raise PluginError(f"--plugin: cannot import {spec} as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # pickling finds the plug-in's classes by this name
        try:
            module_spec.loader.exec_module(module)
        except Exception:
            del sys.modules[name]
            raise
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name and spec.startswith(e.name):
            raise PluginError(f"--plugin: no module named {spec!r} (a dotted name on sys.path, or a path to a .py file)") from None
        raise


def load_plugins(modules: Iterable[str] = ()) -> list[str]:
    """Import ``modules`` (dotted names or ``.py`` paths), those listed in ``FEDGAME_PLUGINS``
    and the ``fedgame.plugins`` entry points, each once; return every plug-in loaded so far.

    A module that fails to import raises: a recipe naming its kinds could not be honoured."""
    global _entry_points_done
    env = [m for m in os.environ.get(ENV_VAR, "").split(os.pathsep) if m]
    wanted = [*env, *modules]
    for spec in wanted:
        key = str(Path(spec).resolve()) if spec.endswith(".py") else spec
        if key not in _loaded:
            _loaded[key] = _import(spec)
    named = list(dict.fromkeys(wanted))
    if named:
        os.environ[ENV_VAR] = os.pathsep.join(str(Path(m).resolve()) if m.endswith(".py") else m for m in named)
    if not _entry_points_done:
        _entry_points_done = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.module not in _loaded:
                _loaded[ep.module] = importlib.import_module(ep.module)
    return sorted(_loaded)


def loaded_plugins() -> list[str]:
    """The plug-in modules imported so far (their dotted names or file paths)."""
    return sorted(_loaded)


def _admits_bool(annotation: Any) -> bool:
    """Whether a field's type names ``bool`` (or is open: ``Any``, a string annotation)."""
    if annotation is bool or annotation is Any or isinstance(annotation, str):
        return True
    return any(_admits_bool(a) for a in get_args(annotation))


def refuse_bools(model: type[BaseModel], data: Any) -> Any:
    """A recipe's ``true``/``false`` where a number is expected is an error, not 1/0 (pydantic
    reads ``rounds: true`` as one round): the check every recipe model runs before its fields."""
    if isinstance(data, dict):
        for key, value in data.items():
            field = model.model_fields.get(key) if isinstance(key, str) else None
            if isinstance(value, bool) and field is not None and not _admits_bool(field.annotation):
                raise ValueError(f"{key}: must be a number or text, not a boolean, got {value}")
    return data


class PluginConfig(BaseModel):
    """Base for a plug-in's recipe model: frozen, and an unknown key is an error (a typo in a
    recipe is refused, not ignored). Declare ``kind: Literal["<name>"] = "<name>"`` and the
    plug-in's fields with their ranges (``pydantic.Field(ge=..., le=...)``).

    ``requires``: what the plug-in needs from another section of the recipe, e.g.
    ``frozenset({"fedpcs_game"})`` for FedPCS's ρ schedule (then in ``ctx.plan``); the recipe
    is refused, naming the kinds that provide it, when no section does. ``provides``: what
    it supplies to others (``fedgame.pipeline.config.CAPABILITIES`` lists the names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    requires: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bools(cls, data)

    def client_queries(self) -> frozenset[str]:
        """The client queries (``fedgame.core.queries.QUERIES``) whose answers this plug-in's
        ``from_config`` needs before training, asked of every client by the pipeline, e.g.
        ``{"label_counts"}`` for a screening on the clients' label histograms. Default: none."""
        return frozenset()

    def check_run(self, run: Any) -> None:
        """Refuse, with one ValueError line naming the field and what it allows, a recipe in
        which this plug-in cannot run given the rest of it (``run``: the whole recipe, a
        ``RunConfig``, every section already valid on its own and every ``requires`` met),
        e.g. more clients per round than clients. Default: nothing to check."""
        del run


__all__ += ["PluginConfig"]
