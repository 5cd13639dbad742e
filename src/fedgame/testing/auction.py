"""The auction contract (docs/plugins.md): on random bid profiles, the winners' costs (and, for a
budget-feasible mechanism, the payments) stay within the budget, truthful bidders never lose money (winners paid at least their cost, losers nothing),
no misreport on a brute-force grid raises a bidder's utility (truthfulness, JDP-FL eq. (1)),
and the same bids give the same outcome."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedgame.incentives.auctions import Auction
from fedgame.incentives.auctions._audit import individual_rationality, truthfulness_audit

__all__ = ["check_auction"]


def check_auction(make: Callable[[], Auction], *, instances: int = 5, n: int = 8, tol: float = 1e-9, budget_feasible: bool = True) -> None:
    """Check the contract on ``make()`` over ``instances`` seeded profiles of ``n`` bidders.
    ``budget_feasible``: the payments stay within the budget (M1); False for a mechanism that
    only keeps the winners' *costs* within it (JDP-FL's M2 pays critical bids, which may exceed B)."""
    auction = make()
    assert isinstance(auction, Auction), f"make() must return an Auction, got {type(auction).__name__}"
    label = type(auction).__name__
    rng = np.random.default_rng(0)
    for r in range(instances):
        costs = rng.integers(1, 1001, n).astype(np.float64)
        sizes = rng.integers(100, 1000, n).astype(np.float64)
        budget = float(rng.uniform(0.2, 1.0) * costs.sum())
        out = auction.run(costs, budget=budget, data_sizes=sizes)
        if budget_feasible:
            assert out.payments_within_budget, f"{label}: instance {r} pays {out.total_payment:.6g} over the budget {budget:.6g}"
        assert out.costs_within_budget, f"{label}: instance {r}: the winners' costs {out.winners_cost:.6g} exceed the budget {budget:.6g}"
        ir = individual_rationality(out, costs)
        assert ir.holds(tol), f"{label}: instance {r}: a truthful winner loses money or a loser is paid ({ir})"
        audit = truthfulness_audit(auction, costs, sizes, budget, uniform=16, log_spaced=16, seed=r)
        assert audit.truthful(tol * max(1.0, budget)), (
            f"{label}: instance {r}: a misreport gains {audit.worst_gain:.6g} over bidding the cost"
        )
        again = make().run(costs, budget=budget, data_sizes=sizes)
        assert np.array_equal(again.payment_vector(), out.payment_vector()), f"{label}: the same bids must give the same payments"
