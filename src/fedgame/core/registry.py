"""Name → factory registries, so a recipe can name a plug-in.

Strings are mapped to classes only here and in ``experiments``; library code passes objects.

A plug-in class may carry its own recipe model as a nested ``Config`` (a pydantic model whose
``kind`` field defaults to the registered name) and a ``from_config(cfg, ctx)`` constructor: the
recipe schema then accepts ``kind: <name>`` with that model's fields, and the pipeline builds the
plug-in through ``from_config`` (``docs/plugins.md``). Registration refuses what could not be
built later: an abstract class (a required method left out), or a ``Config`` that is not a
pydantic model, has no ``kind`` field, or names another kind.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of factories of one plug-in kind (selection strategies, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}
        self._docs: dict[str, str] = {}

    def register(self, name: str, *, doc: str | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._check(name, factory)
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
            raise TypeError(
                f"{self.kind} {name!r}: {factory.__name__}.Config needs a field kind: Literal[{name!r}] = {name!r}"
            )
        if not callable(getattr(factory, "from_config", None)):
            raise TypeError(f"{self.kind} {name!r}: {factory.__name__} has a Config but no from_config(cfg, ctx)")

    def configs(self) -> dict[str, Any]:
        """The recipe models of the plug-ins that declare one (``name → Config``)."""
        return {n: f.Config for n, f in sorted(self._items.items()) if getattr(f, "Config", None) is not None}  # type: ignore[attr-defined]

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
