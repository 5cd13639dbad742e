"""The auction plug-in interface, its outcome and input validation (JDP-FL Sec. 3.2, Defs. 1-3).

A recruitment auction is a single-parameter *reverse* auction: the server buys data, each
candidate's only private number is its cost ``c_i``, it reports a bid ``b_i`` and the public
``d_i`` (its data size) is known. An auction maps ``(bids, data_sizes, budget)`` to winners and
payments. Both JDP-FL auctions are deterministic; ``rng`` is accepted for the interface only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BUDGET_RTOL",
    "Auction",
    "AuctionInputError",
    "AuctionOutcome",
    "validate_auction_inputs",
]

#: Relative slack of the budget flags: ``Σ ≤ B (1 + BUDGET_RTOL)``. M1 pays ρ·d_i with
#: ρ = B/D_W, whose float sum can exceed B by a few ulps (the tests allow 1e-12 relative).
BUDGET_RTOL = 1e-12

#: Rows × candidates handled at once by the vectorised batch evaluators (bounds memory).
CHUNK_ELEMENTS = 1 << 21


class AuctionInputError(ValueError):
    """Auction inputs outside their allowed range; one line per bad field, naming the field and
    its allowed range."""


def _as_float_vector(name: str, x: Any, bad: list[str]) -> np.ndarray | None:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        bad.append(f"{name}: must be a 1-D array of numbers, got {x!r}")
        return None
    if a.ndim != 1:
        bad.append(f"{name}: must be a 1-D array (one value per candidate), got shape {a.shape}")
        return None
    return a


def validate_auction_inputs(
    bids: Any, data_sizes: Any, budget: Any, *, names: tuple[str, str, str] = ("bids", "data_sizes", "budget")
) -> tuple[np.ndarray, np.ndarray, float]:
    """Check the inputs of an auction before any work and return them as
    float64 arrays and a float. Every bad field is reported on its own line naming the field, the
    allowed range and the value given: ``n ≥ 1`` candidates, every bid ``b_i > 0`` and every data
    size ``d_i > 0`` finite, as many data sizes as bids, and a finite budget ``B > 0``.
    ``names`` renames the fields in messages (the JSON solver calls them costs, data, budget)."""
    nb, nd, nB = names
    bad: list[str] = []
    b = _as_float_vector(nb, bids, bad)
    d = _as_float_vector(nd, data_sizes, bad)
    if b is not None:
        if b.size == 0:
            bad.append(f"{nb}: must list at least 1 candidate (n >= 1), got 0")
        for i in np.flatnonzero(~(np.isfinite(b) & (b > 0)))[:5]:
            bad.append(f"{nb}[{i}]: must be > 0 and finite (a reported cost), got {float(b[i])!r}")
    if d is not None:
        for i in np.flatnonzero(~(np.isfinite(d) & (d > 0)))[:5]:
            bad.append(f"{nd}[{i}]: must be > 0 and finite (a data size), got {float(d[i])!r}")
    if b is not None and d is not None and b.size != d.size:
        bad.append(f"{nd}: must have one value per candidate (n = {b.size}, as {nb}), got {d.size}")
    try:
        B = float(budget)
    except (TypeError, ValueError):
        bad.append(f"{nB}: must be a number > 0, got {budget!r}")
        B = float("nan")
    else:
        if not (np.isfinite(B) and B > 0):
            bad.append(f"{nB}: must be > 0 and finite, got {budget!r}")
    if bad:
        raise AuctionInputError("\n".join(bad))
    assert b is not None and d is not None
    return b, d, B


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class AuctionOutcome:
    """Winners (0-based candidate indices, ascending) and their payments (aligned with
    ``winners``); losers are paid 0. ``winners_cost`` is the winners' total *reported* cost and
    ``data_bought`` their total data Σ_{i∈W} d_i. ``price`` is M1's unit price ρ (``None`` for M2
    and when M1 selects nobody); ``fallback`` says whether M2 output ``{i*}`` instead of its
    greedy prefix (``None`` for M1)."""

    mechanism: str
    winners: np.ndarray
    payments: np.ndarray
    n: int
    budget: float
    winners_cost: float
    data_bought: float
    price: float | None = None
    fallback: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "winners", _frozen(np.asarray(self.winners, dtype=np.int64)))
        object.__setattr__(self, "payments", _frozen(np.asarray(self.payments, dtype=np.float64)))
        if self.winners.shape != self.payments.shape:
            raise ValueError(f"payments: must align with winners ({self.winners.size}), got {self.payments.size}")

    @property
    def total_payment(self) -> float:
        return float(self.payments.sum())

    @property
    def payments_within_budget(self) -> bool:
        """Σ p_i ≤ B (budget feasibility of the *payments*, eq. (3)); false for M2 whenever its
        critical bids overshoot (the paper claims budget balance for both mechanisms but proves
        it only for M1, Theorem 3), within a relative slack of :data:`BUDGET_RTOL`."""
        return self.total_payment <= self.budget * (1.0 + BUDGET_RTOL)

    @property
    def costs_within_budget(self) -> bool:
        """Σ_{i∈W} b_i ≤ B (the knapsack constraint of eq. (9) on reported costs)."""
        return self.winners_cost <= self.budget * (1.0 + BUDGET_RTOL)

    @property
    def won(self) -> np.ndarray:
        """Boolean mask over the n candidates."""
        m = np.zeros(self.n, dtype=bool)
        m[self.winners] = True
        return m

    def payment_vector(self) -> np.ndarray:
        """One payment per candidate (0 for losers)."""
        p = np.zeros(self.n)
        p[self.winners] = self.payments
        return p

    def utilities(self, costs: np.ndarray) -> np.ndarray:
        """u_i = p_i − c_i for winners (JDP-FL eq. (2)), 0 for losers, under true ``costs``."""
        c = np.asarray(costs, dtype=np.float64)
        return np.where(self.won, self.payment_vector() - c, 0.0)


class Auction(ABC):
    """Recruit clients from sealed cost bids under a budget (JDP-FL Sec. 4.2).

    Subclasses implement :meth:`_run` (one bid profile, inputs already validated) and may
    override :meth:`client_outcomes`, the batched evaluation the truthfulness audit uses."""

    name: str = "auction"

    def run(self, bids: Any, *, budget: float, data_sizes: Any, rng: np.random.Generator | None = None) -> AuctionOutcome:
        """Validate, then allocate and pay. ``rng`` is unused (both JDP-FL auctions are
        deterministic; ties go to the lower index)."""
        del rng
        b, d, B = validate_auction_inputs(bids, data_sizes, budget)
        return self._run(b, d, B)

    @abstractmethod
    def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome: ...

    def client_outcomes(
        self, clients: np.ndarray, bids: np.ndarray, *, budget: float, data_sizes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each row r of ``bids`` (R × n bid profiles): does candidate ``clients[r]`` win
        under ``bids[r]``, and what is it paid (0 when it loses)? The generic version runs the
        whole auction per row; M1 and M2 override it with vectorised versions."""
        clients = np.asarray(clients, dtype=np.int64)
        wins = np.zeros(clients.size, dtype=bool)
        pay = np.zeros(clients.size)
        for r, i in enumerate(clients):
            out = self._run(np.asarray(bids[r], dtype=np.float64), data_sizes, budget)
            pv = out.payment_vector()
            wins[r] = bool(out.won[i])
            pay[r] = pv[i]
        return wins, pay
