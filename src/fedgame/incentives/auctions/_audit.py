"""Brute-force audits of an auction's incentive properties (JDP-FL Definitions 1-2).

Truthfulness (eq. (1)): for an audited candidate i, keep the others' bids at their true costs
and let i report every cost z on a grid; its utility is p_i(z, c_{-i}) − c_i if it wins and 0
otherwise, always with the *true* c_i. The audit reports the largest gain over truthful bidding.
Individual rationality (eq. (2)): every truthful winner gets p_i ≥ c_i, every loser p_i = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedgame.incentives.auctions._base import CHUNK_ELEMENTS, Auction, AuctionOutcome, validate_auction_inputs

__all__ = [
    "IndividualRationality",
    "TruthfulnessAudit",
    "individual_rationality",
    "misreport_grid",
    "truthfulness_audit",
]

#: relative offsets put around every structural point of the grid (±1e-7 relative)
NUDGE = 1e-7


def _prefix_points(i: int, b: np.ndarray, d: np.ndarray, B: float) -> np.ndarray:
    """Where either JDP-FL auction's outcome for i can change besides the pairwise swaps:
    M2's B − S_k (S_k: the first k eligible others' bids in ratio order) and M1's
    d_i·B/(D_k + d_i) (D_k: the first k others' data in unit-price order), k = 0..n−1."""
    others = np.flatnonzero(np.arange(b.size) != i)
    el = others[b[others] <= B]
    el = el[np.lexsort((el, -(d[el] / b[el])))]
    S = np.concatenate([[0.0], np.cumsum(b[el])])
    o1 = others[np.lexsort((others, b[others] / d[others]))]
    D = np.concatenate([[0.0], np.cumsum(d[o1])])
    return np.concatenate([B - S, d[i] * B / (D + d[i])])


def misreport_grid(
    client: int,
    bids: np.ndarray,
    data_sizes: np.ndarray,
    budget: float,
    *,
    uniform: int = 64,
    log_spaced: int = 64,
    extra: Sequence[float] | np.ndarray = (),
    max_structural: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Misreports of ``client`` to try (ascending, positive, unique): the grid —
    ``uniform`` evenly spaced and ``log_spaced`` log-spaced points up to 2·max(c, B), every
    order-swap point d_i c_j/d_j, every c_j, B − c_j and B — plus each auction's prefix
    thresholds (:func:`_prefix_points`) and ``extra`` points (the audit passes the client's
    truthful payment, its critical bid), each structural point also at ±1e-7 relative, and the
    truthful bid itself. With ``max_structural``, a random subset (``rng``) of that many
    structural points is kept (for large n); ``extra`` and the truth are always kept."""
    b, d, B = validate_auction_inputs(bids, data_sizes, budget)
    i = int(client)
    hi = 2.0 * max(float(b.max()), B)
    lo = min(float(b.min()), B) * 1e-3
    base = [np.linspace(hi / uniform, hi, uniform), np.geomspace(lo, hi, log_spaced)]
    j = np.arange(b.size) != i
    structural = np.concatenate([d[i] * b[j] / d[j], b[j], B - b[j], [B], _prefix_points(i, b, d, B)])
    structural = structural[np.isfinite(structural) & (structural > 0)]
    if max_structural is not None and structural.size > max_structural:
        g = rng if rng is not None else np.random.default_rng(0)
        structural = g.choice(structural, size=max_structural, replace=False)
    pts = np.concatenate([structural, np.asarray(extra, dtype=np.float64).reshape(-1)])
    nudged = np.concatenate([pts * (1 - NUDGE), pts, pts * (1 + NUDGE)])
    z = np.concatenate([*base, nudged, [b[i]]])
    return np.unique(z[np.isfinite(z) & (z > 0)])


@dataclass(frozen=True)
class TruthfulnessAudit:
    """Per audited candidate (``clients``): utility under truthful bidding, the largest utility
    over the grid minus it (``max_gain`` ≥ 0, the truthful bid being on the grid), the misreport
    that attains it (the true cost when nothing beats it), and the grid size."""

    mechanism: str
    clients: np.ndarray
    truthful_utility: np.ndarray
    max_gain: np.ndarray
    best_misreport: np.ndarray
    grid_points: np.ndarray

    @property
    def worst_gain(self) -> float:
        return float(self.max_gain.max()) if self.max_gain.size else 0.0

    def truthful(self, tol: float) -> bool:
        """No audited candidate gains more than ``tol`` (the tests use 1e-9·max(1, B))."""
        return self.worst_gain <= tol


def truthfulness_audit(
    auction: Auction,
    costs: np.ndarray,
    data_sizes: np.ndarray,
    budget: float,
    *,
    clients: np.ndarray | list[int] | None = None,
    uniform: int = 64,
    log_spaced: int = 64,
    max_structural: int | None = None,
    seed: int = 0,
) -> TruthfulnessAudit:
    """Brute-force truthfulness audit of ``auction`` (eq. (1)). For each audited
    candidate (default: all), every misreport of :func:`misreport_grid` is evaluated through
    :meth:`Auction.client_outcomes` — the mechanism's own allocation and payment rule on the
    profile (z, c_{-i}), vectorised over all misreports — and compared with truthful bidding
    (:meth:`Auction.run`). Cost: O(Σ_i G_i · n log n) for grids of G_i points."""
    c, d, B = validate_auction_inputs(costs, data_sizes, budget, names=("costs", "data_sizes", "budget"))
    who = np.arange(c.size) if clients is None else np.asarray(clients, dtype=np.int64).reshape(-1)
    if who.size and (who.min() < 0 or who.max() >= c.size):
        raise ValueError(f"clients: every index must be in [0, {c.size - 1}], got {who.tolist()}")
    truth = auction._run(c, d, B)
    u_true = truth.utilities(c)[who]
    pay_true = truth.payment_vector()
    rng = np.random.default_rng(seed)
    grids = [
        misreport_grid(
            int(i),
            c,
            d,
            B,
            uniform=uniform,
            log_spaced=log_spaced,
            max_structural=max_structural,
            extra=[pay_true[i]] if pay_true[i] > 0 else [],
            rng=rng,
        )
        for i in who
    ]
    owner = np.repeat(np.arange(who.size), [g.size for g in grids])
    z = np.concatenate(grids) if grids else np.zeros(0)
    u = np.empty(z.size)
    step = max(1, CHUNK_ELEMENTS // c.size)  # profiles are built chunk by chunk (rows × n)
    for s in range(0, z.size, step):
        sl = slice(s, min(z.size, s + step))
        cl = who[owner[sl]]
        profiles = np.repeat(c[None, :], cl.size, axis=0)
        profiles[np.arange(cl.size), cl] = z[sl]
        wins, pay = auction.client_outcomes(cl, profiles, budget=B, data_sizes=d)
        u[sl] = np.where(wins, pay - c[cl], 0.0)
    gain = np.zeros(who.size)
    best = c[who].copy()
    bounds = np.concatenate([[0], np.cumsum([g.size for g in grids])])
    for k in range(who.size):
        uk = u[bounds[k] : bounds[k + 1]]
        j = int(np.argmax(uk))
        gain[k] = float(uk[j] - u_true[k])
        if gain[k] > 0:  # otherwise the truth is a best report
            best[k] = z[bounds[k] + j]
    return TruthfulnessAudit(
        mechanism=auction.name,
        clients=who,
        truthful_utility=u_true,
        max_gain=gain,
        best_misreport=best,
        grid_points=np.array([g.size for g in grids]),
    )


@dataclass(frozen=True)
class IndividualRationality:
    """Truthful utilities (one per candidate), the smallest winner utility (+inf without
    winners) and the number of losers with a non-zero payment."""

    utilities: np.ndarray
    min_winner_utility: float
    paid_losers: int

    def holds(self, tol: float = 1e-9) -> bool:
        """Every winner p_i ≥ c_i − tol, every loser p_i = 0."""
        return self.min_winner_utility >= -tol and self.paid_losers == 0


def individual_rationality(outcome: AuctionOutcome, costs: np.ndarray) -> IndividualRationality:
    """IR of a truthful outcome (eq. (2)): winners p_i ≥ c_i, losers paid 0."""
    c = np.asarray(costs, dtype=np.float64)
    u = outcome.utilities(c)
    p = outcome.payment_vector()
    won = outcome.won
    return IndividualRationality(
        utilities=u,
        min_winner_utility=float(u[won].min()) if won.any() else float("inf"),
        paid_losers=int(np.count_nonzero(p[~won])),
    )
