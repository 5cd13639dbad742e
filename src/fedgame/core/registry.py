"""Name → factory registries, so a recipe can name a plug-in.

Strings are mapped to classes only here and in ``experiments``; library code passes objects.

A plug-in class may carry its own recipe model as a nested ``Config`` (a pydantic model whose
``kind`` field defaults to the registered name) and a ``from_config(cfg, ctx)`` constructor: the
recipe schema then accepts ``kind: <name>`` with that model's fields, and the pipeline builds the
plug-in through ``from_config`` (``docs/plugins.md``). Registration refuses what could not be
built later: an abstract class (a required method left out), or a ``Config`` that is not a
pydantic model, has no ``kind`` field, or names another kind. The registered name is the one
place a plug-in is named: registration sets a class's ``name`` attribute to it. The same class
registered again from the same file (a plug-in file imported twice, under two module names)
replaces the first registration; any other second registration of a name is refused.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


def _defined_in(factory: object) -> tuple[str, str | None, int]:
    """Where ``factory`` was defined: its qualified name, its module's file and (a function's)
    first line."""
    module = sys.modules.get(getattr(factory, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    line = getattr(getattr(factory, "__code__", None), "co_firstlineno", 0)
    return getattr(factory, "__qualname__", repr(factory)), str(Path(path).resolve()) if path else None, line


def _same_definition(old: object, new: object) -> bool:
    """The same class or function from the same file, defined again: a plug-in file imported a
    second time under another module name (``--plugin file.py``, then ``import file``)."""
    if old is new:
        return True
    where = _defined_in(old)
    return where[1] is not None and where == _defined_in(new)


class Registry(Generic[T]):
    """A named collection of factories of one plug-in kind (selection strategies, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}
        self._docs: dict[str, str] = {}

    def register(self, name: str, *, doc: str | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._items and not _same_definition(self._items[name], factory):
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._check(name, factory)
            if inspect.isclass(factory):  # the registered name is the class's name: said once, here
                own = vars(factory).get("name")
                if own is not None and own != name:
                    raise TypeError(
                        f"{self.kind} {name!r}: {factory.__name__}.name is {own!r}; leave it out "
                        "(registration sets it to the registered name)"
                    )
                setattr(factory, "name", name)
            self._items[name] = factory
            first = (doc or factory.__doc__ or "").strip().splitlines()
            self._docs[name] = first[0] if first else ""
            return factory

        return deco

    def _check(self, name: str, factory: Callable[..., T]) -> None:
        """Refuse at registration a plug-in that could not be built from a recipe."""
        if inspect.isclass(factory) and inspect.isabstract(factory):
            missing = ", ".join(sorted(getattr(factory, "__abstractmethods__", ())))
            raise TypeError(f"{self.kind} {name!r}: {factory.__name__} does not implement {missing}; refusing to register it")
        cfg = getattr(factory, "Config", None)
        if cfg is None:
            return
        from pydantic import BaseModel

        if not (inspect.isclass(cfg) and issubclass(cfg, BaseModel)):
            raise TypeError(f"{self.kind} {name!r}: {factory.__name__}.Config must be a pydantic BaseModel")
        field = cfg.model_fields.get("kind")
        if field is None or field.default != name:
            raise TypeError(f"{self.kind} {name!r}: {factory.__name__}.Config needs a field kind: Literal[{name!r}] = {name!r}")
        if not callable(getattr(factory, "from_config", None)):
            raise TypeError(f"{self.kind} {name!r}: {factory.__name__} has a Config but no from_config(cfg, ctx)")
        self._check_default_build(name, factory, cfg)

    def _check_default_build(self, name: str, factory: Any, cfg: Any) -> None:
        """Where ``from_config`` is a fedgame base class's default (the recipe's fields but
        ``kind`` as keyword arguments of the constructor), the constructor must take every field
        and need no other argument: a ``Config.exponent`` beside ``__init__(power=...)`` used to
        pass ``validate`` and fail at ``run``."""
        owner = next((k for k in inspect.getmro(factory) if "from_config" in vars(k)), None)
        if owner is None or not owner.__module__.startswith("fedgame.") or owner is factory:
            return
        try:  # the bases whose default builds from the fields alone (selection, privacy, incentive)
            if 'cls(**cfg.model_dump(exclude={"kind"}))' not in inspect.getsource(vars(owner)["from_config"].__func__):
                return
        except (OSError, TypeError, AttributeError):
            return
        try:
            params = list(inspect.signature(factory.__init__).parameters.values())[1:]
        except (TypeError, ValueError):
            return
        fields = set(cfg.model_fields) - {"kind"}
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            unknown: set[str] = set()
        else:
            unknown = fields - {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        needed = {
            p.name for p in params if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        } - fields
        if unknown or needed:
            what = "; ".join(
                ([f"Config field{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))} not taken by __init__"] if unknown else [])
                + ([f"__init__ needs {', '.join(sorted(needed))}, which Config does not give"] if needed else [])
            )
            raise TypeError(
                f"{self.kind} {name!r}: {factory.__name__} would be built as {factory.__name__}(**Config fields) "
                f"(the default from_config), but {what}: rename to match, or define from_config(cls, cfg, ctx)"
            )

    def configs(self) -> dict[str, Any]:
        """The recipe models of the plug-ins that declare one (``name → Config``)."""
        return {n: f.Config for n, f in sorted(self._items.items()) if getattr(f, "Config", None) is not None}  # type: ignore[attr-defined]  # Config: a plug-in convention

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def create(self, name: str, /, **kwargs: object) -> T:
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._items)

    def describe(self) -> dict[str, str]:
        return {n: self._docs[n] for n in self.names()}

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
