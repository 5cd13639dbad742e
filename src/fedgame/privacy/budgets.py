"""Per-client privacy budgets ε_k drawn from the distributions of the PHS experiments (Sec. VI).

A budget spec is a mapping with a ``kind`` (recipes validate the same shape with
``PrivacyBudgetCfg`` below):

``{"kind": "uniform", "low": 0, "high": 1}``
    ``ε_k ~ U(low, high)`` on the *open* interval: a draw equal to ``low`` (or, by floating-point
    rounding, ``high``) is redrawn, so ``U(0, 1)`` never yields ε = 0 (PHS Tables III-IV).
``{"kind": "mixture", "components": [{"weight": 0.3, "mean": 0.5, "var": 0.04}, ...]}``
    each client picks a component with probability ``weight`` and draws ``N(mean, var)`` —
    ``var`` is the *variance* (the paper's ``N(0.5, 0.04)`` is read as std 0.2). A draw ``≤ 0``
    is discarded and redrawn, component choice included (PHS Figs. 4-6).
``{"kind": "constant", "value": x}``
    every client gets ``x``; ``"inf"`` marks public data (PHS Sec. V-B: ``V_k = 0``, no noise).
``{"kind": "list", "values": [...]}``
    one value per client, in client order; ``"inf"`` marks a public-data client.

:func:`draw_budgets` takes the spec (or its parsed form) and an explicit generator; draws are
vectorised, the only loop runs over the draws still to be redone.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias

import numpy as np
from pydantic import Field, field_validator, model_validator

from fedgame.core.plugins import PluginConfig

__all__ = [
    "BUDGET_KINDS",
    "Budget",
    "ConstantBudget",
    "ListBudget",
    "MixtureBudget",
    "MixtureComponent",
    "UniformBudget",
    "draw_budgets",
    "parse_budget",
]

#: Redraw passes before giving up; validation makes each pass fail with probability < 1/2.
_MAX_PASSES = 10_000


def _number(name: str, value: Any) -> float:
    """``value`` as a float (``"inf"`` allowed); bools, NaN and non-numbers refused."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number, got {value!r}") from None
    if math.isnan(v):
        raise ValueError(f"{name}: must be a number, got nan")
    return v


@dataclass(frozen=True)
class UniformBudget:
    """``ε_k ~ U(low, high)`` on the open interval ``(low, high)``, ``0 ≤ low < high < ∞``."""

    low: float
    high: float

    def __post_init__(self) -> None:
        low, high = _number("budget.low", self.low), _number("budget.high", self.high)
        if not 0.0 <= low < math.inf:
            raise ValueError(f"budget.low: must be >= 0 and finite, got {self.low!r}")
        if not low < high < math.inf:
            raise ValueError(f"budget.high: must be finite and > budget.low ({low:g}), got {self.high!r}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        out = rng.uniform(self.low, self.high, n)
        bad = np.flatnonzero((out <= self.low) | (out >= self.high))
        for _ in range(_MAX_PASSES):
            if bad.size == 0:
                return out
            out[bad] = rng.uniform(self.low, self.high, bad.size)
            bad = bad[(out[bad] <= self.low) | (out[bad] >= self.high)]
        raise RuntimeError(f"budget: U({self.low:g}, {self.high:g}) kept hitting its end points")  # pragma: no cover


@dataclass(frozen=True)
class MixtureComponent:
    """One Gaussian ``N(mean, var)`` of a mixture, chosen with probability ``weight``."""

    weight: float
    mean: float
    var: float


@dataclass(frozen=True)
class MixtureBudget:
    """``ε_k ~ Σ_j weight_j N(mean_j, var_j)`` conditioned on ``ε_k > 0`` (PHS Figs. 4-6, whose
    negative draws the paper discards).

    Weights must be > 0 and sum to 1 (to 1e-9); means > 0 and finite (so each pass keeps more
    than half of the draws); variances ≥ 0 and finite.
    """

    components: tuple[MixtureComponent, ...]

    def __post_init__(self) -> None:
        comps = self.components
        if isinstance(comps, Mapping | str | bytes) or not isinstance(comps, Sequence) or len(comps) == 0:
            raise ValueError(f"budget.components: must be a non-empty list of {{weight, mean, var}}, got {comps!r}")
        parsed = []
        for j, item in enumerate(comps):
            where = f"budget.components[{j}]"
            c: Any = vars(item) if isinstance(item, MixtureComponent) else item
            if not isinstance(c, Mapping):
                raise ValueError(f"{where}: must be a mapping with keys weight, mean, var, got {c!r}")
            extra = sorted(set(c) - {"weight", "mean", "var"})
            missing = sorted({"weight", "mean", "var"} - set(c))
            if extra or missing:
                raise ValueError(f"{where}: needs exactly the keys weight, mean, var; missing {missing}, unknown {extra}")
            w, m, v = (_number(f"{where}.{k}", c[k]) for k in ("weight", "mean", "var"))
            if not 0.0 < w <= 1.0:
                raise ValueError(f"{where}.weight: must be in (0, 1], got {c['weight']!r}")
            if not 0.0 < m < math.inf:
                raise ValueError(f"{where}.mean: must be > 0 and finite (draws <= 0 are redrawn), got {c['mean']!r}")
            if not 0.0 <= v < math.inf:
                raise ValueError(f"{where}.var: must be >= 0 and finite (it is the variance), got {c['var']!r}")
            parsed.append(MixtureComponent(weight=w, mean=m, var=v))
        total = math.fsum(c.weight for c in parsed)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"budget.components: weights must sum to 1 (to 1e-9), got {total!r}")
        object.__setattr__(self, "components", tuple(parsed))

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        w = np.array([c.weight for c in self.components])
        w /= w.sum()
        mean = np.array([c.mean for c in self.components])
        std = np.sqrt([c.var for c in self.components])
        comp = rng.choice(w.size, size=n, p=w)
        out: np.ndarray = np.asarray(rng.normal(mean[comp], std[comp]), dtype=np.float64)
        bad = np.flatnonzero(out <= 0.0)
        for _ in range(_MAX_PASSES):
            if bad.size == 0:
                return out
            c = rng.choice(w.size, size=bad.size, p=w)
            out[bad] = rng.normal(mean[c], std[c])
            bad = bad[out[bad] <= 0.0]
        raise RuntimeError("budget: the mixture kept drawing values <= 0")  # pragma: no cover


@dataclass(frozen=True)
class ConstantBudget:
    """Every client gets ``value > 0``; ``inf`` marks public data."""

    value: float

    def __post_init__(self) -> None:
        v = _number("budget.value", self.value)
        if not v > 0.0:
            raise ValueError(f"budget.value: must be > 0 (or inf for public data), got {self.value!r}")
        object.__setattr__(self, "value", v)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value)


@dataclass(frozen=True)
class ListBudget:
    """Given budgets, one per client in client order, each ``> 0`` or ``inf`` (public data)."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        vals = self.values
        if isinstance(vals, str | bytes | Mapping) or not isinstance(vals, Sequence | np.ndarray) or len(vals) == 0:
            raise ValueError(f"budget.values: must be a non-empty list of numbers > 0 (or 'inf'), got {vals!r}")
        parsed = tuple(_number(f"budget.values[{i}]", v) for i, v in enumerate(vals))
        for i, v in enumerate(parsed):
            if not v > 0.0:
                raise ValueError(f"budget.values[{i}]: must be > 0 (or inf for public data), got {vals[i]!r}")
        object.__setattr__(self, "values", parsed)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if len(self.values) != n:
            raise ValueError(f"budget.values: must hold one value per client ({n}), got {len(self.values)}")
        return np.array(self.values, dtype=np.float64)


Budget: TypeAlias = UniformBudget | MixtureBudget | ConstantBudget | ListBudget

_KINDS: dict[str, tuple[type, tuple[str, ...]]] = {
    "uniform": (UniformBudget, ("low", "high")),
    "mixture": (MixtureBudget, ("components",)),
    "constant": (ConstantBudget, ("value",)),
    "list": (ListBudget, ("values",)),
}

#: The ``kind`` names a budget spec may use.
BUDGET_KINDS: tuple[str, ...] = tuple(_KINDS)


def parse_budget(spec: Mapping[str, Any] | Budget) -> Budget:
    """A validated budget distribution from its spec mapping (an already parsed one is returned)."""
    if isinstance(spec, UniformBudget | MixtureBudget | ConstantBudget | ListBudget):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(f"budget: must be a mapping with a 'kind' ({', '.join(BUDGET_KINDS)}), got {spec!r}")
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"budget.kind: must be one of {', '.join(BUDGET_KINDS)}, got {kind!r}")
    cls, fields = _KINDS[kind]
    given = set(spec) - {"kind"}
    unknown, missing = sorted(given - set(fields)), sorted(set(fields) - given)
    if unknown:
        raise ValueError(f"budget.{unknown[0]}: not a field of kind {kind!r}; allowed: {', '.join(fields)}")
    if missing:
        raise ValueError(f"budget.{missing[0]}: required for kind {kind!r}")
    budget: Budget = cls(**{f: spec[f] for f in fields})
    return budget


def draw_budgets(spec: Mapping[str, Any] | Budget, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` clients' budgets ε_k (float64, all ``> 0``, ``inf`` = public data) from ``spec``.

    >>> eps = draw_budgets({"kind": "uniform", "low": 0, "high": 1}, 5, np.random.default_rng(0))
    >>> bool(np.all((eps > 0) & (eps < 1)))
    True
    """
    budget = parse_budget(spec)
    try:
        if isinstance(n, bool):
            raise TypeError
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n: must be an integer >= 1, got {n!r}") from None
    if n < 1:
        raise ValueError(f"n: must be an integer >= 1, got {n}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: must be a numpy.random.Generator, got {type(rng).__name__}")
    return budget.draw(n, rng)


# -- the recipe models of the budget distributions (privacy.budgets of a PHS recipe) -----------
class UniformBudgetCfg(PluginConfig):
    """ε_k ~ U(low, high) on the open interval (PHS: U(0, 1), a draw of 0 is redrawn)."""

    kind: Literal["uniform"] = "uniform"
    low: float = Field(0.0, ge=0, allow_inf_nan=False)
    high: float = Field(1.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _order(self) -> Any:
        if not self.low < self.high:
            raise ValueError(f"high: must be > low ({self.low:g}), got {self.high:g}")
        return self


class MixtureComponentCfg(PluginConfig):
    """One component N(mean, var) — ``var`` is the variance, not the std — picked with
    probability ``weight``."""

    weight: float = Field(gt=0, le=1)
    mean: float = Field(gt=0, allow_inf_nan=False)
    var: float = Field(ge=0, allow_inf_nan=False)


class MixtureBudgetCfg(PluginConfig):
    """ε_k ~ Σ weight_j N(mean_j, var_j), a draw ≤ 0 redrawn with its component (PHS Figs. 4-6)."""

    kind: Literal["mixture"] = "mixture"
    components: tuple[MixtureComponentCfg, ...] = Field(min_length=1, max_length=100)

    @field_validator("components")
    @classmethod
    def _weights(cls, v: tuple[MixtureComponentCfg, ...]) -> tuple[MixtureComponentCfg, ...]:
        total = math.fsum(c.weight for c in v)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"weights must sum to 1 (to 1e-9); they sum to {total:.12g}")
        return v


class ConstantBudgetCfg(PluginConfig):
    """Every client gets ``value``; ``inf`` (YAML ``.inf`` or ``"inf"``) = public data, no noise."""

    kind: Literal["constant"] = "constant"
    value: float = Field(gt=0)


class ListBudgetCfg(PluginConfig):
    """One ε per client in client order, each > 0; ``inf`` = public data (no noise)."""

    kind: Literal["list"] = "list"
    values: tuple[Annotated[float, Field(gt=0)], ...] = Field(min_length=1, max_length=100_000)


#: Per-client privacy budgets ε_k (PHS Sec. VI). Not named ``BudgetCfg``: that is FedPCS's B_t.
#: ``fedgame.privacy.budgets.draw_budgets`` takes its ``model_dump()``.
PrivacyBudgetCfg = Annotated[UniformBudgetCfg | MixtureBudgetCfg | ConstantBudgetCfg | ListBudgetCfg, Field(discriminator="kind")]
