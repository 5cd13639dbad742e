"""Package attributes imported on first use (PEP 562), for packages whose import must stay
light: :mod:`fedgame.privacy` (``fedgame.privacy.analysis`` stays free of torch) and
:mod:`fedgame.deploy.flower` (a Flower ClientApp process, one per message, must not import the
server side)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, where: Mapping[str, str], names: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: attribute ``n`` in ``where`` is
    imported from ``package.<where[n]>`` when first asked for; ``names`` are the package's
    public names (its ``__all__``)."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(list(vars(sys.modules[package])) + list(names))

    return __getattr__, __dir__
