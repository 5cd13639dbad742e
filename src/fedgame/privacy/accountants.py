"""Per-client privacy accountants.

Selection is not uniform (FedPCS, PHS, QI-DPFL and JDP-FL all pick clients with different
probabilities or budgets), so every client has its own :class:`Ledger` — a list of
``(event, count)`` pairs that merges consecutive identical events, like the ``history`` of
Opacus' ``RDPAccountant``. An :class:`Accountant` turns a ledger into ε at a given δ:

* ``"zcdp"`` — :class:`ZCDPAccountant`: ρ adds up (Bun & Steinke 2016, Lemma 2.3), converted by
  ε = ρ + 2 sqrt(ρ ln(1/δ)) (Prop. 1.3). For FedPCS and QI-DPFL (QI-DPFL Lemma 1, per client).
* ``"rdp"`` — :class:`RDPAccountant`: Rényi DP curves from ``dp_accounting.rdp``
  (Mironov 2017; Mironov, Talwar & Zhang 2019), conversion of Balle et al. 2020.
* ``"pld"`` — :class:`PLDAccountant`: privacy-loss distributions from ``dp_accounting.pld``
  (Koskela et al. 2020; Doroshenko et al. 2022), numerically tight.

How each accountant charges each event (see :mod:`fedgame.privacy.events`):

====================  =====================  ==========================  =========================
event                 zcdp                   rdp                         pld
====================  =====================  ==========================  =========================
zcdp(ρ)               ρ                      Gaussian, z = 1/sqrt(2ρ)    Gaussian, z = 1/sqrt(2ρ)
gaussian(z)           1/(2z²)                Gaussian(z)                 Gaussian(z)
subsampled(z, q<1)    error: use rdp/pld     Poisson-sampled Gaussian    Poisson-sampled Gaussian
subsampled(z, q=1)    1/(2z²)                Gaussian(z)                 Gaussian(z)
wor_subsampled(z,m,N) error: use rdp         sampled w/o replacement     error: use rdp
exponential(ε)        ε²/8 (bounded range)   ρ = ε²/8 curve              generic ε-DP PLD
approx_dp(ε, δ)       basic composition      basic composition           generic (ε, δ)-DP PLD
====================  =====================  ==========================  =========================

"Basic composition" (Dwork & Roth 2014, Thm 3.16): the (ε_j, δ_j) events cost Σε_j and use up
Σδ_j of the target δ; the rest of the ledger is converted at δ − Σδ_j (ε = ∞ if nothing is left).
The PLD of a generic (ε, δ)-DP release is the worst case of Kairouz, Oh & Viswanath 2015
(``PrivacyLossDistribution.from_privacy_parameters``), composed optimally; for the exponential
mechanism it ignores the bounded-range structure, so with many exponential events ``"rdp"`` can
report a smaller ε than ``"pld"``.

``wor_subsampled`` (central DP-FedAvg with a fixed number of clients per round) is stated under
replace-one adjacency, every other event under add/remove-one: a ledger holding both is refused
when it is recorded (the two relations' RDP curves do not add up to a guarantee of either).

Gaussian-family events (everything charged as an unsubsampled Gaussian) compose into a single
Gaussian with 1/z² = Σ count/z_j² = 2ρ_total — exact for RDP and PLD alike — and subsampled
steps are grouped by (z, q): composition is commutative, so ε depends only on the multiset of
events. ε is cached per client by ledger version and per ledger content.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fedgame.core.registry import Registry
from fedgame.privacy.analysis.subsampled import (
    DEFAULT_PLD_DISCRETIZATION,
    DEFAULT_RDP_ORDERS,
    rdp_curve,
    rdp_curve_wor,
    rdp_to_epsilon,
)
from fedgame.privacy.analysis.zcdp import zcdp_to_eps
from fedgame.privacy.events import PrivacyEvent

if TYPE_CHECKING:
    from dp_accounting import dp_event

    from fedgame.privacy._dp_accounting import EpsilonDeltaDpEvent

__all__ = [
    "Ledger",
    "Accountant",
    "ZCDPAccountant",
    "RDPAccountant",
    "PLDAccountant",
    "ACCOUNTANTS",
    "make_accountant",
    "EpsilonDeltaDpEvent",
    "ledger_to_dp_event",
    "event_rho",
]

Entry = tuple[PrivacyEvent, int]


# -- ledger ------------------------------------------------------------------------------
class Ledger:
    """One client's privacy history: ``(event, count)`` pairs in recording order, consecutive
    identical events merged (like Opacus ``RDPAccountant.history``). ``version`` increases on
    every change, so accountants can cache ε per version."""

    __slots__ = ("_entries", "version")

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self.version = 0
        for event, count in entries:
            self.append(event, count)

    def append(self, event: PrivacyEvent, count: int = 1) -> None:
        """Record ``count`` applications of ``event``; ``count = 0`` records nothing."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"event: must be a PrivacyEvent, got {type(event).__name__}")
        count = _check_count(count)
        if count == 0:
            return
        if self._entries and self._entries[-1][0] == event:
            self._entries[-1] = (event, self._entries[-1][1] + count)
        else:
            self._entries.append((event, count))
        self.version += 1

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The ``(event, count)`` pairs, in recording order."""
        return tuple(self._entries)

    def composition(self) -> tuple[Entry, ...]:
        """The ledger as a multiset — total count per distinct event, in a canonical order.
        ε depends only on this (composition is commutative)."""
        totals: dict[PrivacyEvent, int] = {}
        for event, count in self._entries:
            totals[event] = totals.get(event, 0) + count
        return tuple(sorted(totals.items(), key=lambda ec: (ec[0].mechanism, tuple(ec[0].params.items()))))

    def total_count(self) -> int:
        """Number of releases recorded."""
        return sum(c for _, c in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ledger) and self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Ledger({self._entries!r})"

    def to_list(self) -> list[list[Any]]:
        """JSON-able form: ``[[event_dict, count], ...]``."""
        return [[e.to_dict(), c] for e, c in self._entries]

    @classmethod
    def from_list(cls, data: Sequence[Sequence[Any]]) -> Ledger:
        """Inverse of :meth:`to_list`."""
        try:
            return cls([(PrivacyEvent.from_dict(e), int(c)) for e, c in data])
        except (TypeError, ValueError) as err:
            raise ValueError(f"ledger: malformed entry list ({err})") from None


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count: must be an integer >= 0, got {count!r}")
    return int(count)


def _check_delta(delta: float) -> float:
    if not 0 < delta < 1:
        raise ValueError(f"delta: must be in (0, 1), got {delta}")
    return float(delta)


# -- event translation -------------------------------------------------------------------
def event_rho(event: PrivacyEvent) -> float:
    """The zCDP ρ charged for one application of ``event``: zcdp → ρ; gaussian(z) and
    subsampled_gaussian(z, q = 1) → 1/(2z²) (Bun & Steinke Prop. 1.6); exponential(ε) → ε²/8
    (bounded range, Cesar & Rogers 2021). Raises ``ValueError`` for events with no tight zCDP
    form (Poisson-subsampled steps with q < 1, approx-DP)."""
    m, p = event.mechanism, event.params
    if m == "zcdp":
        return p["rho"]
    if m == "gaussian" or (m == "subsampled_gaussian" and p["sample_rate"] == 1.0):
        z = p["noise_multiplier"]
        return math.inf if z == 0.0 else 1.0 / (2.0 * z * z)
    if m == "exponential":
        return p["epsilon"] ** 2 / 8.0
    if m == "wor_subsampled_gaussian":
        raise ValueError(
            f"accountant 'zcdp': {event!r} is a Gaussian release on a sample drawn without replacement, which has "
            "no tight zCDP expression; use accountant 'rdp'"
        )
    if m == "subsampled_gaussian":
        raise ValueError(
            f"accountant 'zcdp': {event!r} is a Poisson-subsampled Gaussian step, which has no tight "
            "zCDP expression (amplification by subsampling is not captured by zCDP); "
            "use accountant 'rdp' or 'pld' for DP-SGD ledgers"
        )
    raise ValueError(f"accountant 'zcdp': {event!r} has no zCDP expression; it is composed by basic composition")


def _split(
    composition: Sequence[Entry], target: Literal["rdp", "pld"]
) -> tuple[float, dict[tuple[float, float], int], list[Entry], dict[tuple[float, int, int], int]]:
    """(ρ of the Gaussian family, subsampled counts by (z, q), generic (ε, δ) entries, counts of
    releases on samples without replacement by (z, m, N))."""
    rho = 0.0
    sub: dict[tuple[float, float], int] = {}
    generic: list[Entry] = []
    wor: dict[tuple[float, int, int], int] = {}
    for event, count in composition:
        m, p = event.mechanism, event.params
        if m == "wor_subsampled_gaussian":
            if target == "pld":
                raise ValueError(
                    f"accountant 'pld': {event!r} (sampling without replacement) has no privacy-loss distribution "
                    "in dp-accounting; use accountant 'rdp'"
                )
            wkey = (p["noise_multiplier"], int(p["sample_size"]), int(p["population_size"]))
            wor[wkey] = wor.get(wkey, 0) + count
        elif m == "subsampled_gaussian" and p["sample_rate"] < 1.0:
            key = (p["noise_multiplier"], p["sample_rate"])
            sub[key] = sub.get(key, 0) + count
        elif m == "approx_dp" or (m == "exponential" and target == "pld"):
            generic.append((event, count))
        else:
            rho += count * event_rho(event)
    return rho, sub, generic, wor


def _generic_params(event: PrivacyEvent) -> tuple[float, float]:
    p = event.params
    return p["epsilon"], p.get("delta", 0.0)


def ledger_to_dp_event(entries: Sequence[Entry] | Ledger, *, target: Literal["rdp", "pld"] = "rdp") -> dp_event.DpEvent:
    """Translate a ledger into one ``dp_accounting`` event, as the ``target`` accountant charges
    it (table in the module docstring):

    * the Gaussian family becomes one ``GaussianDpEvent`` with z = 1/sqrt(2 ρ_total) (exact:
      Gaussians compose into a Gaussian; its RDP curve is ρ_total·α);
    * Poisson-subsampled steps become ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
      GaussianDpEvent(z)), count)`` per distinct (z, q);
    * generic (ε, δ) releases become ``SelfComposedDpEvent(EpsilonDeltaDpEvent(ε, δ), count)``
      (for ``target="rdp"`` only approx-DP events; the exponential is in the Gaussian family);
    * releases on samples without replacement (``target="rdp"`` only) become
      ``SelfComposedDpEvent(SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z)), count)``,
      to be composed by an RDP accountant with ``REPLACE_ONE`` adjacency.

    The result is a ``ComposedDpEvent`` (``NoOpDpEvent`` for an empty ledger).
    """
    from dp_accounting import dp_event

    from fedgame.privacy._dp_accounting import EpsilonDeltaDpEvent

    comp = entries.composition() if isinstance(entries, Ledger) else Ledger(entries).composition()
    rho, sub, generic, wor = _split(comp, target)
    events: list[dp_event.DpEvent] = []
    if rho > 0.0:
        events.append(dp_event.GaussianDpEvent(0.0 if math.isinf(rho) else 1.0 / math.sqrt(2.0 * rho)))
    for (z, q), count in sorted(sub.items()):
        events.append(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), count))
    for (z, m, n), count in sorted(wor.items()):
        events.append(dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(n, m, dp_event.GaussianDpEvent(z)), count))
    for event, count in generic:
        eps, delta = _generic_params(event)
        events.append(dp_event.SelfComposedDpEvent(EpsilonDeltaDpEvent(eps, delta), count))
    if not events:
        return dp_event.NoOpDpEvent()
    return dp_event.ComposedDpEvent(events)


# -- accountants -------------------------------------------------------------------------
class Accountant(ABC):
    """One ledger per client; ε per client at a given δ.

    ``record(clients, event, count)`` appends ``count`` applications of ``event`` to the ledger
    of every client listed (a client listed twice is charged twice — deduplicate first if a
    repeated draw uploads once, as in FedPCS: a client drawn twice in a round uploads once).
    """

    name: ClassVar[str] = "base"

    def __init__(self, *, n_clients: int) -> None:
        if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or n_clients < 1:
            raise ValueError(f"n_clients: must be an integer >= 1, got {n_clients!r}")
        self._n = int(n_clients)
        self._ledgers: list[Ledger] = [Ledger() for _ in range(self._n)]

    @property
    def n_clients(self) -> int:
        """Number of clients (ledgers)."""
        return self._n

    def ledger(self, client: int) -> Ledger:
        """Client ``client``'s ledger (read it; record through :meth:`record`)."""
        return self._ledgers[self._check_client(client)]

    def _check_client(self, client: int) -> int:
        if isinstance(client, bool) or not isinstance(client, (int, np.integer)) or not 0 <= client < self._n:
            raise ValueError(f"client: must be an integer in [0, {self._n}), got {client!r}")
        return int(client)

    def check_event(self, event: PrivacyEvent) -> None:
        """Raise ``ValueError`` if this accountant cannot charge ``event``."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"event: must be a PrivacyEvent, got {type(event).__name__}")

    def record(self, clients: Sequence[int] | np.ndarray | int, event: PrivacyEvent, count: int = 1) -> None:
        """Charge ``count`` applications of ``event`` to each client in ``clients``
        (all arguments are validated before anything is recorded)."""
        self.check_event(event)
        count = _check_count(count)
        ids = [int(clients)] if isinstance(clients, (int, np.integer)) else list(np.asarray(clients).ravel().tolist())
        for c in ids:
            self._check_client(c)
            led = self._ledgers[c]
            if led and next(iter(led))[0].replace_one != event.replace_one:
                said = "replace-one" if event.replace_one else "add/remove-one"
                raise ValueError(
                    f"client {c}: {event!r} is stated under {said} adjacency and the client's ledger holds events under "
                    "the other relation; one ledger composes events of one adjacency relation only"
                )
        for c in ids:
            self._ledgers[c].append(event, count)

    @abstractmethod
    def epsilon(self, client: int, delta: float) -> float:
        """ε spent by ``client`` at ``delta`` (0 if nothing was recorded)."""

    def epsilons(self, delta: float) -> np.ndarray:
        """ε at ``delta`` for every client (0 for clients never recorded)."""
        _check_delta(delta)
        return np.array([self.epsilon(i, delta) for i in range(self._n)], dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state for resuming: the ledgers (accountant-independent)."""
        return {"name": self.name, "n_clients": self._n, "ledgers": [led.to_list() for led in self._ledgers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the ledgers saved by :meth:`state_dict` (of any accountant kind with the same
        number of clients; events this accountant cannot charge raise ``ValueError``)."""
        try:
            n = state["n_clients"]
            raw = state["ledgers"]
        except (KeyError, TypeError):
            raise ValueError("state: expected a dict with 'n_clients' and 'ledgers'") from None
        if n != self._n or len(raw) != self._n:
            raise ValueError(f"state.n_clients: must be {self._n} (this accountant's), got {n}")
        ledgers = [Ledger.from_list(x) for x in raw]
        for led in ledgers:
            for event, _ in led:
                self.check_event(event)
        self._ledgers = ledgers
        self._clear_cache()

    def _clear_cache(self) -> None:  # noqa: B027  (optional hook, not abstract)
        """Hook for caching subclasses: called when the ledgers are replaced."""

    def __repr__(self) -> str:
        used = sum(1 for led in self._ledgers if led)
        return f"{type(self).__name__}(n_clients={self._n}, clients_recorded={used})"


class _CachedAccountant(Accountant):
    """ε cached per (client, ledger version, δ), and per (ledger content, δ) across clients."""

    _MAX_CONTENT_CACHE: ClassVar[int] = 100_000

    def __init__(self, *, n_clients: int) -> None:
        super().__init__(n_clients=n_clients)
        self._clear_cache()

    def _clear_cache(self) -> None:
        self._by_client: dict[int, tuple[int, dict[float, float]]] = {}
        self._by_content: dict[tuple[Hashable, float], float] = {}

    def epsilon(self, client: int, delta: float) -> float:
        c = self._check_client(client)
        d = _check_delta(delta)
        led = self._ledgers[c]
        if not led:
            return 0.0
        version, per_delta = self._by_client.get(c, (-1, {}))
        if version != led.version:
            per_delta = {}
            self._by_client[c] = (led.version, per_delta)
        if d not in per_delta:
            comp = led.composition()
            key = (comp, d)
            if key not in self._by_content:
                if len(self._by_content) >= self._MAX_CONTENT_CACHE:
                    self._by_content.clear()
                self._by_content[key] = self._epsilon_of(comp, d)
            per_delta[d] = self._by_content[key]
        return per_delta[d]

    @abstractmethod
    def _epsilon_of(self, composition: tuple[Entry, ...], delta: float) -> float:
        """ε at δ of a non-empty ledger given as :meth:`Ledger.composition`."""


def _basic_split(generic: Sequence[Entry], delta: float) -> tuple[float, float]:
    """(Σ count·ε_j, δ left for the rest) under basic composition; δ left <= 0 means ε = ∞."""
    eps = sum(c * _generic_params(e)[0] for e, c in generic)
    used = sum(c * _generic_params(e)[1] for e, c in generic)
    return eps, delta - used


class ZCDPAccountant(_CachedAccountant):
    """Sums ρ (Bun & Steinke 2016, Lemma 2.3) and converts with ε = ρ + 2 sqrt(ρ ln(1/δ))
    (Prop. 1.3) — for FedPCS and QI-DPFL. Approx-DP events are added by basic composition.
    Poisson-subsampled steps (q < 1) are refused: use ``"rdp"`` or ``"pld"``."""

    name: ClassVar[str] = "zcdp"

    def check_event(self, event: PrivacyEvent) -> None:
        super().check_event(event)
        if event.mechanism != "approx_dp":
            event_rho(event)  # raises for subsampled steps

    def rho(self, client: int) -> float:
        """Total ρ of ``client``'s zCDP-expressible events (approx-DP events excluded)."""
        led = self.ledger(client)
        return math.fsum(c * event_rho(e) for e, c in led if e.mechanism != "approx_dp")

    def rhos(self) -> np.ndarray:
        """Total ρ of every client."""
        return np.array([self.rho(i) for i in range(self._n)], dtype=np.float64)

    def _epsilon_of(self, composition: tuple[Entry, ...], delta: float) -> float:
        generic = [(e, c) for e, c in composition if e.mechanism == "approx_dp"]
        rho = math.fsum(c * event_rho(e) for e, c in composition if e.mechanism != "approx_dp")
        eps_generic, delta_left = _basic_split(generic, delta)
        if rho == 0.0:
            return eps_generic if delta_left >= 0 else math.inf
        if delta_left <= 0:
            return math.inf
        return float(zcdp_to_eps(rho, delta_left)) + eps_generic


class RDPAccountant(_CachedAccountant):
    """Rényi-DP accounting with ``dp_accounting.rdp`` curves on :data:`DEFAULT_RDP_ORDERS`:
    the Gaussian family contributes ρ_total·α, each Poisson-subsampled step its dp-accounting
    curve (Mironov, Talwar & Zhang 2019), each release on a sample without replacement its
    replace-one curve (Wang, Balle & Kasiviswanathan 2019); ε by dp-accounting's
    ``compute_epsilon``. Equal to
    ``dp_accounting.rdp.RdpAccountant().compose(ledger_to_dp_event(ledger))`` (without approx-DP
    events, which are added by basic composition; with ``REPLACE_ONE`` adjacency for a ledger of
    releases without replacement)."""

    name: ClassVar[str] = "rdp"

    def rdp(self, client: int) -> np.ndarray:
        """The client's RDP curve on :data:`DEFAULT_RDP_ORDERS` (approx-DP events excluded)."""
        return self._curve(self.ledger(client).composition())

    def _curve(self, composition: Sequence[Entry]) -> np.ndarray:
        rho, sub, _, wor = _split(composition, "rdp")
        curve = rho * np.array(DEFAULT_RDP_ORDERS) if rho > 0 else np.zeros(len(DEFAULT_RDP_ORDERS))
        for (z, q), count in sub.items():
            curve = curve + count * rdp_curve(z, q)
        for (z, m, n), count in wor.items():
            curve = curve + count * rdp_curve_wor(z, m, n)
        return curve

    def _epsilon_of(self, composition: tuple[Entry, ...], delta: float) -> float:
        _, _, generic, _ = _split(composition, "rdp")
        eps_generic, delta_left = _basic_split(generic, delta)
        curve = self._curve(composition)
        if np.all(curve == 0.0):
            return eps_generic if delta_left >= 0 else math.inf
        if delta_left <= 0:
            return math.inf
        return rdp_to_epsilon(curve, delta_left) + eps_generic


class PLDAccountant(_CachedAccountant):
    """Privacy-loss-distribution accounting with ``dp_accounting.pld`` (add/remove adjacency,
    pessimistic discretisation with interval ``value_discretization_interval``): the ledger is
    translated by :func:`ledger_to_dp_event` and composed numerically. Numerically tight for
    Gaussian and subsampled-Gaussian events."""

    name: ClassVar[str] = "pld"

    def check_event(self, event: PrivacyEvent) -> None:
        super().check_event(event)
        if event.replace_one:
            raise ValueError(
                f"accountant 'pld': {event!r} (sampling without replacement) has no privacy-loss distribution "
                "in dp-accounting; use accountant 'rdp'"
            )

    def __init__(self, *, n_clients: int, value_discretization_interval: float = DEFAULT_PLD_DISCRETIZATION) -> None:
        if not value_discretization_interval > 0:
            raise ValueError(f"value_discretization_interval: must be > 0, got {value_discretization_interval}")
        self.value_discretization_interval = float(value_discretization_interval)
        super().__init__(n_clients=n_clients)

    def _epsilon_of(self, composition: tuple[Entry, ...], delta: float) -> float:
        from fedgame.privacy._dp_accounting import DpAccountingPLD

        acc = DpAccountingPLD(value_discretization_interval=self.value_discretization_interval)
        acc.compose(ledger_to_dp_event(composition, target="pld"))
        return float(acc.get_epsilon(delta))


#: The accountants a recipe can name (``accountant.kind``), a :class:`~fedgame.core.registry.Registry`
#: like every other plug-in kind: a user's accountant registers with
#: ``@ACCOUNTANTS.register("name")`` on an :class:`Accountant` subclass taking ``n_clients``.
ACCOUNTANTS: Registry[Accountant] = Registry("accountant")
ACCOUNTANTS.register("zcdp")(ZCDPAccountant)
ACCOUNTANTS.register("rdp")(RDPAccountant)
ACCOUNTANTS.register("pld")(PLDAccountant)


def make_accountant(name: str, *, n_clients: int, **options: Any) -> Accountant:
    """The accountant registered as ``name`` (``"zcdp"``, ``"rdp"``, ``"pld"``) for
    ``n_clients`` clients; ``options`` go to its constructor."""
    if not isinstance(name, str) or name not in ACCOUNTANTS:
        known = ", ".join(ACCOUNTANTS.names())
        raise ValueError(f"accountant: unknown name {name!r}; registered: {known}")
    return ACCOUNTANTS.create(name, n_clients=n_clients, **options)


def __getattr__(name: str) -> Any:
    """``EpsilonDeltaDpEvent`` on first use (it subclasses a dp-accounting type; see
    :mod:`fedgame.privacy._dp_accounting` for why dp-accounting is imported late)."""
    if name == "EpsilonDeltaDpEvent":
        from fedgame.privacy._dp_accounting import EpsilonDeltaDpEvent

        return EpsilonDeltaDpEvent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
