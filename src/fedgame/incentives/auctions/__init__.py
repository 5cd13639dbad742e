"""Recruitment auctions of JDP-FL (Zhang et al., TKDE 2023; Sec. 4.2, Algorithms 1-2):
who trains, and for what payment, decided once before training from sealed cost bids.

===============================  ============================================================
Definitions 1-3, eqs. (1)-(3)     :class:`Auction`, :class:`AuctionOutcome` (flags),
                                  :func:`truthfulness_audit`, :func:`individual_rationality`
Algorithm 1, Theorems 1-3 (M1)    :class:`UnitPriceAuction`, :func:`unit_price_allocation`
Algorithm 2, eq. (9), Thm 4 (M2)  :class:`KnapsackAuction`, :func:`knapsack_allocation`
Lemma 2 (Myerson), critical bid   :func:`critical_bids`, :func:`critical_bid_bisection`
input checks (every field)        :func:`validate_auction_inputs`, :class:`AuctionInputError`
===============================  ============================================================

Pure NumPy, vectorised: allocations sort once (O(n log n)); M2's critical bids cost
O(n log n) per winner; the audits evaluate all misreports of a candidate as one batch.
"""

from fedgame.incentives.auctions._audit import (
    IndividualRationality,
    TruthfulnessAudit,
    individual_rationality,
    misreport_grid,
    truthfulness_audit,
)
from fedgame.incentives.auctions._bids import draw_costs
from fedgame.incentives.auctions._base import (
    BUDGET_RTOL,
    Auction,
    AuctionInputError,
    AuctionOutcome,
    validate_auction_inputs,
)
from fedgame.incentives.auctions._m1 import UnitPriceAllocation, UnitPriceAuction, unit_price_allocation
from fedgame.incentives.auctions._m2 import (
    KnapsackAllocation,
    KnapsackAuction,
    critical_bid_bisection,
    critical_bids,
    knapsack_allocation,
)

__all__ = [
    "BUDGET_RTOL",
    "Auction",
    "AuctionInputError",
    "AuctionOutcome",
    "IndividualRationality",
    "KnapsackAllocation",
    "KnapsackAuction",
    "TruthfulnessAudit",
    "UnitPriceAllocation",
    "UnitPriceAuction",
    "critical_bid_bisection",
    "critical_bids",
    "draw_costs",
    "individual_rationality",
    "knapsack_allocation",
    "misreport_grid",
    "truthfulness_audit",
    "unit_price_allocation",
    "validate_auction_inputs",
]
