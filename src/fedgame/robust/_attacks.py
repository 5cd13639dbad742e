"""JDP-FL's adversary (Sec. 6.1): exactly one winner, chosen uniformly with the
run's seed, poisons its own training data with dirty labels [9] and otherwise follows the
protocol (same optimiser, honest M3, M5). No boosting or other model manipulation, so the attack
is a pure function on the adversary's labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeVar

import numpy as np
import torch
from numpy.typing import ArrayLike

from fedgame.core.validate import check_int

__all__ = ["AttackMode", "DIRTY_LABEL_TARGETS", "ONE_CLASS_SOURCES", "dirty_label", "choose_adversary"]

#: The target class every poisoned label becomes (Sec. 6.1): MNIST digit 2; CIFAR-10 "cat" (index 3
#: in airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck).
#: Fashion-MNIST (our stand-in for MNIST) uses the same index 2 ("pullover").
DIRTY_LABEL_TARGETS: Final[Mapping[str, int]] = {"mnist": 2, "fashion_mnist": 2, "cifar10": 3}
#: Default source class of the ``one_class`` variant (fedgame's choice; the paper names none):
#: MNIST 7, CIFAR-10 "dog" (5).
ONE_CLASS_SOURCES: Final[Mapping[str, int]] = {"mnist": 7, "fashion_mnist": 7, "cifar10": 5}

#: ``all_to_target`` (default, §6.1 of the paper): every label becomes the target;
#: ``one_class`` (§6.2.2's wording, which contradicts §6.1): only labels of the source class do.
AttackMode = Literal["all_to_target", "one_class"]

L = TypeVar("L", np.ndarray, torch.Tensor)


def dirty_label(
    labels: L,
    *,
    target: int,
    mode: AttackMode = "all_to_target",
    source: int | None = None,
    num_classes: int | None = None,
) -> L:
    """The adversary's poisoned labels (dirty-label poisoning, JDP-FL Sec. 6.1): a new integer
    array or tensor of the same type, dtype and shape as ``labels``. ``all_to_target``: every
    label is ``target``; ``one_class``: labels equal to ``source`` become ``target``, the others
    are kept. With ``num_classes``, ``target``/``source`` must lie in [0, num_classes)."""
    hi = None if num_classes is None else check_int("num_classes", num_classes, 1) - 1
    t = check_int("target", target, 0, hi)
    if mode not in ("all_to_target", "one_class"):
        raise ValueError(f"mode: must be 'all_to_target' or 'one_class', got {mode!r}")
    if mode == "all_to_target" and source is not None:
        raise ValueError(f"source: only for mode 'one_class', got {source!r} with mode 'all_to_target'")
    s: int | None = None
    if mode == "one_class":
        if source is None:
            raise ValueError("source: mode 'one_class' needs the source class to relabel")
        s = check_int("source", source, 0, hi)
        if s == t:
            raise ValueError(f"source: must differ from target ({t}), got {s}")
    if isinstance(labels, torch.Tensor):
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise TypeError(f"labels: must hold integer class indices, got dtype {labels.dtype}")
        full = torch.full_like(labels, t)
        return full if s is None else torch.where(labels == s, full, labels)
    if isinstance(labels, np.ndarray):
        if not np.issubdtype(labels.dtype, np.integer):
            raise TypeError(f"labels: must hold integer class indices, got dtype {labels.dtype}")
        filled = np.full_like(labels, t)
        return filled if s is None else np.where(labels == s, filled, labels)
    raise TypeError(f"labels: must be a numpy array or torch tensor, got {type(labels).__name__}")


def choose_adversary(clients: ArrayLike, rng: np.random.Generator) -> int:
    """The adversarial client: uniform over ``clients`` (the winners W) with a generator that
    only this choice uses (e.g. ``Streams(seed).numpy("adversary")``), so it is a function of
    the seed alone."""
    c = np.asarray(clients)
    if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"clients: must be a non-empty 1-D array of client ids, got {clients!r}")
    if np.unique(c).size != c.size:
        raise ValueError("clients: must not repeat a client id")
    return int(c[rng.integers(c.size)])
