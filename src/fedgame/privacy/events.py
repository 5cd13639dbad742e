"""Privacy events: what one release costs, in a form every accountant can read.

A :class:`PrivacyEvent` names the mechanism and its parameters; accountants translate it into
their own currency (ρ for zCDP, an RDP curve, a privacy-loss distribution). Events are frozen,
hashable (so ledgers can merge and cache them) and JSON-serialisable (for checkpoints).

* ``zcdp`` (``rho``): a ρ-zCDP Gaussian release (FedPCS Prop. 1, QI-DPFL Eq. 10: σ = Δ/sqrt(2ρ));
* ``gaussian`` (``noise_multiplier``): N(0, (z·Δ)²I) on a query of L2 sensitivity Δ;
* ``subsampled_gaussian`` (``noise_multiplier``, ``sample_rate``): one Poisson-subsampled DP-SGD
  step (PHS Algorithm 1, Opacus);
* ``wor_subsampled_gaussian`` (``noise_multiplier``, ``sample_size``, ``population_size``): a
  Gaussian release on a uniform sample of exactly ``sample_size`` of ``population_size`` records
  drawn without replacement, under *replace-one* adjacency (dp-accounting's
  ``SampledWithoutReplacementDpEvent``; central DP-FedAvg with fixed-size client sampling);
* ``exponential`` (``epsilon``): an ε-DP exponential mechanism (JDP-FL M4);
* ``approx_dp`` (``epsilon``, ``delta``): any (ε, δ)-DP release.

``zcdp`` and ``gaussian`` describe the same mechanism (ρ = 1/(2z²)); RDP and PLD accountants
evaluate both as that Gaussian, which is exact for Gaussian releases — the only ones fedgame
records as ``zcdp``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["PrivacyEvent", "MECHANISMS"]

#: The mechanisms an event can name, with their parameter names.
MECHANISMS: Final[Mapping[str, tuple[str, ...]]] = {
    "zcdp": ("rho",),
    "gaussian": ("noise_multiplier",),
    "subsampled_gaussian": ("noise_multiplier", "sample_rate"),
    "wor_subsampled_gaussian": ("noise_multiplier", "sample_size", "population_size"),
    "exponential": ("epsilon",),
    "approx_dp": ("epsilon", "delta"),
}


class _Params(Mapping[str, float]):
    """An immutable, hashable, ordered mapping of parameter names to floats."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, float]) -> None:
        self._items: tuple[tuple[str, float], ...] = tuple(sorted((str(k), float(v)) for k, v in items.items()))

    def __getitem__(self, key: str) -> float:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Params):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(dict(self._items))


def _require(name: str, value: float, ok: bool, allowed: str) -> float:
    if not ok:
        raise ValueError(f"{name}: must be {allowed}, got {value}")
    return float(value)


@dataclass(frozen=True)
class PrivacyEvent:
    """One release, as the accountants see it (see the module docstring for the mechanisms).

    Build events with the classmethods (:meth:`zcdp`, :meth:`gaussian`,
    :meth:`subsampled_gaussian`, :meth:`exponential`, :meth:`approx_dp`), which validate.
    """

    mechanism: str
    params: Mapping[str, float]

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            known = ", ".join(MECHANISMS)
            raise ValueError(f"mechanism: must be one of {known}, got {self.mechanism!r}")
        expected = set(MECHANISMS[self.mechanism])
        if set(self.params) != expected:
            raise ValueError(f"params: {self.mechanism!r} takes {sorted(expected)}, got {sorted(self.params)}")
        object.__setattr__(self, "params", _Params(self.params))
        _validate(self.mechanism, self.params)

    def __getitem__(self, key: str) -> float:
        return self.params[key]

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def zcdp(cls, rho: float) -> PrivacyEvent:
        """A ρ-zCDP Gaussian release (FedPCS Prop. 1 / QI-DPFL Eq. 10: σ = Δ/sqrt(2ρ))."""
        return cls("zcdp", {"rho": rho})

    @classmethod
    def gaussian(cls, noise_multiplier: float) -> PrivacyEvent:
        """N(0, (z·Δ)² I) added once to a query of L2 sensitivity Δ (no subsampling);
        it is 1/(2z²)-zCDP (Bun & Steinke 2016, Prop. 1.6). ``z = 0`` is a non-private release."""
        return cls("gaussian", {"noise_multiplier": noise_multiplier})

    @classmethod
    def subsampled_gaussian(cls, noise_multiplier: float, sample_rate: float) -> PrivacyEvent:
        """One DP-SGD step: Poisson sampling at rate q, noise std z·C on the clipped sum
        (Abadi et al. 2016; PHS Algorithm 1 lines 13–17)."""
        return cls("subsampled_gaussian", {"noise_multiplier": noise_multiplier, "sample_rate": sample_rate})

    @classmethod
    def wor_subsampled_gaussian(cls, noise_multiplier: float, sample_size: int, population_size: int) -> PrivacyEvent:
        """A Gaussian release on a uniform sample of exactly ``sample_size`` of the
        ``population_size`` records, drawn without replacement (dp-accounting's
        ``SampledWithoutReplacementDpEvent(population_size, sample_size, GaussianDpEvent(z))``;
        Wang, Balle & Kasiviswanathan 2019). Adjacency is *replace-one* (the population size is
        public), so ``z`` is the noise std over the replace-one sensitivity: for a sum of records
        clipped to norm C that sensitivity is 2C, and noise of std σ gives z = σ / (2C).
        Only the RDP accountant charges it; a ledger cannot mix it with add/remove events."""
        return cls(
            "wor_subsampled_gaussian",
            {"noise_multiplier": noise_multiplier, "sample_size": sample_size, "population_size": population_size},
        )

    @property
    def replace_one(self) -> bool:
        """True for events stated under replace-one adjacency (``wor_subsampled_gaussian``);
        every other event is add/remove-one (or adjacency-free: approx-DP, exponential)."""
        return self.mechanism == "wor_subsampled_gaussian"

    @classmethod
    def exponential(cls, epsilon: float) -> PrivacyEvent:
        """An ε-DP exponential mechanism (JDP-FL M4, Eq. 7). Being ε-bounded-range it is
        ε²/8-zCDP (Cesar & Rogers 2021, "Bounding, Concentrating, and Truncating"; bounded range:
        Durfee & Rogers 2019), which is what the zCDP
        and RDP accountants charge (tighter than the generic ε²/2 of Bun & Steinke Prop. 1.4)."""
        return cls("exponential", {"epsilon": epsilon})

    @classmethod
    def approx_dp(cls, epsilon: float, delta: float = 0.0) -> PrivacyEvent:
        """A generic (ε, δ)-DP release (e.g. JDP-FL's "paper" ledger). zCDP and RDP accountants
        add it by basic composition (Dwork & Roth Thm 3.16); PLD composes it optimally."""
        return cls("approx_dp", {"epsilon": epsilon, "delta": delta})

    # -- derived quantities -------------------------------------------------------------
    @property
    def is_subsampled(self) -> bool:
        """True for a Poisson-subsampled step with q < 1 (no tight zCDP expression)."""
        return self.mechanism == "subsampled_gaussian" and self.params["sample_rate"] < 1.0

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-able dict ``{"mechanism": ..., "params": {...}}``."""
        return {"mechanism": self.mechanism, "params": {k: _json_float(v) for k, v in self.params.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyEvent:
        """Inverse of :meth:`to_dict`."""
        try:
            mechanism = data["mechanism"]
            params = {k: _from_json_float(v) for k, v in data["params"].items()}
        except (KeyError, TypeError, AttributeError):
            raise ValueError(f"event: expected {{'mechanism': str, 'params': dict}}, got {data!r}") from None
        return cls(mechanism, params)

    def to_json(self) -> str:
        """The event as a JSON string (``inf`` is written as the string ``"inf"``)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PrivacyEvent:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"PrivacyEvent.{self.mechanism}({args})"


def _json_float(v: float) -> float | str:
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def _from_json_float(v: Any) -> float:
    return float(v)


def _validate(mechanism: str, p: Mapping[str, float]) -> None:
    for k, v in p.items():
        if math.isnan(v):
            raise ValueError(f"{k}: must be a number, got nan")
    if mechanism == "zcdp":
        _require("rho", p["rho"], p["rho"] > 0, "> 0 (inf for a non-private release)")
    elif mechanism == "gaussian":
        z = p["noise_multiplier"]
        _require("noise_multiplier", z, 0 <= z < math.inf, ">= 0 and finite")
    elif mechanism == "subsampled_gaussian":
        z = p["noise_multiplier"]
        _require("noise_multiplier", z, 0 <= z < math.inf, ">= 0 and finite")
        q = p["sample_rate"]
        _require("sample_rate", q, 0 < q <= 1, "in (0, 1]")
    elif mechanism == "wor_subsampled_gaussian":
        z = p["noise_multiplier"]
        _require("noise_multiplier", z, 0 <= z < math.inf, ">= 0 and finite")
        n = p["population_size"]
        _require("population_size", n, n >= 1 and n < math.inf and n == int(n), "an integer >= 1")
        m = p["sample_size"]
        _require("sample_size", m, 1 <= m <= n and m == int(m), f"an integer in [1, population_size = {n:g}]")
    elif mechanism == "exponential":
        e = p["epsilon"]
        _require("epsilon", e, 0 < e < math.inf, "> 0 and finite")
    elif mechanism == "approx_dp":
        e = p["epsilon"]
        _require("epsilon", e, 0 <= e < math.inf, ">= 0 and finite")
        d = p["delta"]
        _require("delta", d, 0 <= d < 1, "in [0, 1)")
