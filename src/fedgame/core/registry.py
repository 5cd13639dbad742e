"""Name → factory registries, so a recipe can name a plug-in.

Strings are mapped to classes only here and in ``experiments``; library code passes objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

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
            self._items[name] = factory
            first = (doc or factory.__doc__ or "").strip().splitlines()
            self._docs[name] = first[0] if first else ""
            return factory

        return deco

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
