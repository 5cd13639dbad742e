"""M1, the unit-price ("envy-free") auction: JDP-FL Algorithm 1, Theorems 1-3.

Candidates are ordered by unit price q_i = b_i/d_i (ties: lower index first); the winners are the
longest prefix π(1..m) with q_{π(m)} ≤ B / Σ_{l≤m} d_{π(l)}, and every winner is paid the same
unit price ρ = min(B/D_W, q_{π(m+1)}) per unit of data (q_{π(n+1)} = +∞ when every candidate
wins; the paper leaves it undefined), which is its critical unit price, so M1 is truthful,
individually rational and never pays more than B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedgame.incentives.auctions._base import CHUNK_ELEMENTS, Auction, AuctionOutcome, validate_auction_inputs

__all__ = ["UnitPriceAllocation", "UnitPriceAuction", "unit_price_allocation"]


@dataclass(frozen=True)
class UnitPriceAllocation:
    """Algorithm 1's allocation: ``winners`` (ascending indices), their number ``m`` and the
    unit price ρ (NaN when m = 0)."""

    winners: np.ndarray
    m: int
    price: float


def _m1_rows(bids: np.ndarray, d: np.ndarray, B: float) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 on each row of ``bids`` (R × n): (winner mask R × n, unit price ρ per row,
    NaN where nobody wins). Sorting O(n log n) per row, then one cumulative sum.

    The prefix condition q_(k) ≤ B/D_k is downward closed (q sorted ascending, B/D_k
    non-increasing — also in floating point, rounding being monotone), so m is the number of
    k that satisfy it."""
    R, n = bids.shape
    q = bids / d
    order = np.argsort(q, axis=1, kind="stable")  # ties → lower index (stable on column order)
    qs = np.take_along_axis(q, order, axis=1)
    Dk = np.cumsum(d[order], axis=1)
    m = np.count_nonzero(qs <= B / Dk, axis=1)
    rows = np.arange(R)
    has = m > 0
    D_W = np.where(has, Dk[rows, np.maximum(m - 1, 0)], np.nan)
    q_next = np.where(m < n, qs[rows, np.minimum(m, n - 1)], np.inf)
    with np.errstate(invalid="ignore"):
        rho = np.where(has, np.minimum(B / D_W, q_next), np.nan)
    won_sorted = np.arange(n)[None, :] < m[:, None]
    won = np.empty_like(won_sorted)
    np.put_along_axis(won, order, won_sorted, axis=1)
    return won, rho


def unit_price_allocation(bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> UnitPriceAllocation:
    """Algorithm 1: winners and the unit price ρ; O(n log n). Validates first."""
    b, d, B = validate_auction_inputs(bids, data_sizes, budget)
    won, rho = _m1_rows(b[None, :], d, B)
    w = np.flatnonzero(won[0])
    return UnitPriceAllocation(winners=w, m=int(w.size), price=float(rho[0]))


class UnitPriceAuction(Auction):
    """M1 (JDP-FL Algorithm 1): pay every winner ρ·d_i. Truthful (Thm 2), individually rational
    (Thm 1), Σp = ρ D_W ≤ B (Thm 3), envy-free in the uniform-unit-price sense (every winner has
    q_i ≤ ρ, every loser q_i ≥ ρ; the paper asserts envy-freeness without a definition)."""

    name = "M1"

    def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
        won, rho = _m1_rows(bids[None, :], data_sizes, budget)
        w = np.flatnonzero(won[0])
        price = float(rho[0]) if w.size else None
        pay = data_sizes[w] * (price if price is not None else 0.0)
        return AuctionOutcome(
            mechanism=self.name,
            winners=w,
            payments=pay,
            n=bids.size,
            budget=budget,
            winners_cost=float(bids[w].sum()),
            data_bought=float(data_sizes[w].sum()),
            price=price,
        )

    def client_outcomes(
        self, clients: np.ndarray, bids: np.ndarray, *, budget: float, data_sizes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: Algorithm 1 on every row at once (in chunks), payment ρ_row · d_i."""
        clients = np.asarray(clients, dtype=np.int64)
        bids = np.asarray(bids, dtype=np.float64)
        R, n = bids.shape
        wins = np.zeros(R, dtype=bool)
        pay = np.zeros(R)
        step = max(1, CHUNK_ELEMENTS // max(n, 1))
        for s in range(0, R, step):
            sl = slice(s, min(R, s + step))
            won, rho = _m1_rows(bids[sl], data_sizes, budget)
            c = clients[sl]
            w = won[np.arange(c.size), c]
            wins[sl] = w
            pay[sl] = np.where(w, np.nan_to_num(rho) * data_sizes[c], 0.0)
        return wins, pay
