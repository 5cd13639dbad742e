"""M2, the greedy-knapsack auction with largest-d fallback: JDP-FL Algorithm 2, eq. (9),
Theorem 4, Remark 1, Myerson's lemma (Lemma 2), with the following readings where Algorithm 2
is garbled or ambiguous.

Allocation: among the eligible candidates E = {i : b_i ≤ B} (the paper ranges over all clients,
which can output a client whose cost alone exceeds B), take the greedy *prefix* Q in decreasing
r_i = d_i/b_i (ties: lower index) while the running sum of bids stays ≤ B, stopping at the first
misfit (the prefixes of Theorem 4's proof); let i* = argmax_{i∈E} d_i (lowest index on ties).
Output T = Q if Σ_Q d ≥ d_{i*}, else {i*} (line 11's garbled comparison read as one with
max_i d_i, as line 14 and Theorem 4's proof use it). It is monotone (Thm 4) and
Σ_T d ≥ OPT/2 (Remark 1).

Payments: every member of T (the fallback winner i* included) is paid its critical bid
τ_i(b_{-i}) = sup{z : i wins with bid z against b_{-i}} ∈ [b_i, B] — the reverse-auction Myerson
payment; eq. (10) as printed is the forward-auction formula — and losers get 0. Σp may exceed B
(the paper's budget balance holds for M2's winners' costs, not its payments) —
:attr:`AuctionOutcome.payments_within_budget` says so and :class:`KnapsackAuction` logs a
warning; payments are never rescaled (that would break truthfulness).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedgame.incentives.auctions._base import CHUNK_ELEMENTS, Auction, AuctionOutcome, validate_auction_inputs

__all__ = [
    "KnapsackAllocation",
    "KnapsackAuction",
    "critical_bid_bisection",
    "critical_bids",
    "knapsack_allocation",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnapsackAllocation:
    """Algorithm 2's allocation: ``winners`` T (ascending), the greedy prefix ``prefix`` Q
    (in ratio order), ``i_star`` (−1 when nobody is eligible) and ``fallback`` (T = {i*} ≠ Q)."""

    winners: np.ndarray
    prefix: np.ndarray
    i_star: int
    fallback: bool


def _m2_rows(bids: np.ndarray, d: np.ndarray, B: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 2's allocation on each row of ``bids`` (R × n): (winner mask R × n, prefix
    mask R × n, i* per row (−1: nobody eligible), fallback flag per row). O(n log n) per row.

    The running sum of bids in ratio order is ``np.cumsum`` (sequential, like ``paid += b_i``);
    bids are positive, so ``cum ≤ B`` holds on a prefix (stop at the first misfit)."""
    R, n = bids.shape
    elig = bids <= B
    with np.errstate(divide="ignore"):
        key = np.where(elig, -(d / bids), np.inf)
    order = np.argsort(key, axis=1, kind="stable")  # r_i decreasing, ties → lower index
    sb = np.take_along_axis(np.where(elig, bids, np.inf), order, axis=1)
    q_sorted = np.cumsum(sb, axis=1) <= B
    in_q = np.empty_like(q_sorted)
    np.put_along_axis(in_q, order, q_sorted, axis=1)
    d_q = np.where(in_q, d, 0.0).sum(axis=1)
    dm = np.where(elig, d, -np.inf)
    i_star = np.argmax(dm, axis=1)  # first maximum → lowest index on ties
    any_elig = elig.any(axis=1)
    d_star = dm[np.arange(R), i_star]
    use_q = d_q >= d_star
    won = in_q.copy()
    fb_rows = np.flatnonzero(~use_q & any_elig)
    won[fb_rows] = False
    won[fb_rows, i_star[fb_rows]] = True
    return won, in_q, np.where(any_elig, i_star, -1), ~use_q & any_elig


def knapsack_allocation(bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> KnapsackAllocation:
    """Algorithm 2's allocation; O(n log n). Validates first."""
    b, d, B = validate_auction_inputs(bids, data_sizes, budget)
    won, in_q, i_star, fb = _m2_rows(b[None, :], d, B)
    q = np.flatnonzero(in_q[0])
    q = q[np.lexsort((q, -(d[q] / b[q])))]
    return KnapsackAllocation(winners=np.flatnonzero(won[0]), prefix=q, i_star=int(i_star[0]), fallback=bool(fb[0]))


def _last_true(pred: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row, the largest p in [lo, hi] with ``pred(p)``, for a predicate that is true at lo
    and true-then-false in p (vectorised bisection, ⌈log2(hi − lo + 1)⌉ rounds)."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = np.where(open_, (lo + hi + 1) // 2, lo)
        t = pred(mid) & open_
        lo = np.where(t, mid, lo)
        hi = np.where(open_ & ~t, mid - 1, hi)


def _critical(clients: np.ndarray, prof: np.ndarray, bids: np.ndarray, d: np.ndarray, B: float) -> np.ndarray:
    """τ of candidate ``clients[r]`` against the other bids of profile ``bids[prof[r]]``
    (P × n profiles; the candidate's own bid is ignored). 0 for a candidate that cannot win with
    any bid > 0. See :func:`critical_bids` for the algorithm."""
    P, n = bids.shape
    rows = np.arange(P)
    elig = bids <= B
    with np.errstate(divide="ignore"):
        key = np.where(elig, -(d / bids), np.inf)
    order = np.argsort(key, axis=1, kind="stable")  # eligible first, r decreasing, ties → index
    M = np.count_nonzero(elig, axis=1)
    live = np.arange(n)[None, :] < M[:, None]
    sb = np.where(live, np.take_along_axis(bids, order, axis=1), np.inf)
    sd = np.where(live, d[order], 0.0)
    ratio = sd / sb  # d/b in sorted order (0 past M)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.broadcast_to(np.arange(n), (P, n)), axis=1)
    # largest d among the eligible, and the runner-up (for when the largest is the client itself)
    dm = np.where(elig, d, -np.inf)
    j1 = np.argmax(dm, axis=1)
    v1 = dm[rows, j1]
    dm[rows, j1] = -np.inf
    j2 = np.argmax(dm, axis=1)
    v2 = dm[rows, j2]

    out = np.zeros(clients.size)
    step = max(1, CHUNK_ELEMENTS // (n + 1))
    for s in range(0, clients.size, step):
        c = slice(s, s + step)
        out[c] = _critical_given_order(clients[c], prof[c], bids, d, B, elig, pos, sb, sd, ratio, M, (j1, v1, j2, v2))
    return out


def _critical_given_order(
    i: np.ndarray,
    pr: np.ndarray,
    bids: np.ndarray,
    d: np.ndarray,
    B: float,
    elig: np.ndarray,
    pos: np.ndarray,
    sb: np.ndarray,
    sd: np.ndarray,
    ratio: np.ndarray,
    M: np.ndarray,
    top2: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    n = bids.shape[1]
    R = i.size
    rr = np.arange(R)
    j1, v1, j2, v2 = top2
    d_i = d[i]
    e_i = elig[pr, i]
    pi = np.where(e_i, pos[pr, i], n + 1)  # the client's 0-based rank; others skip over it
    L = M[pr] - e_i  # eligible others
    md = np.where(j1[pr] == i, v2[pr], v1[pr])
    jm = np.where(j1[pr] == i, j2[pr], j1[pr])
    i_is_star = (d_i > md) | ((d_i == md) & (i < jm))
    # The others' prefix sums, as sequential sums of the others alone: the sorted row with the
    # client's own entry set to 0 (adding 0 is exact). Subtracting b_i from a running sum that
    # contains it would round differently for different own bids, and at exact ties
    # (S_k = B, common with integer costs) make the payment depend on the client's own bid.
    ob, od = sb[pr], sd[pr]
    own = e_i.nonzero()[0]
    ob[own, pi[own]] = 0.0
    od[own, pi[own]] = 0.0
    zero = np.zeros((R, 1))
    Gx = np.concatenate([zero, np.cumsum(ob, axis=1)], axis=1)
    Hx = np.concatenate([zero, np.cumsum(od, axis=1)], axis=1)

    def col(k: np.ndarray) -> np.ndarray:  # prefix of k others = this many sorted entries
        return np.minimum(np.where(k <= pi, k, k + 1), n)

    def S(k: np.ndarray) -> np.ndarray:  # bids of the first k eligible others, k = 0..L
        out: np.ndarray = Gx[rr, col(k)]
        return out

    def D(k: np.ndarray) -> np.ndarray:  # their data
        out: np.ndarray = Hx[rr, col(k)]
        return out

    def w(k: np.ndarray) -> np.ndarray:  # i falls behind the k-th other once z > w_k (w_0 = 0)
        c = np.where(k - 1 < pi, k - 1, k)
        r = ratio[pr, np.clip(c, 0, n - 1)]
        with np.errstate(divide="ignore"):
            wk = d_i / r
        return np.where(k == 0, 0.0, np.where(k <= L, wk, np.inf))

    zero_k = np.zeros_like(L)
    K = _last_true(lambda k: S(k) <= B, zero_k, L)
    need = np.where(i_is_star, 0.0, md - d_i)
    q_min = np.where(need > 0, _last_true(lambda k: D(k) < need, zero_k, L) + 1, 0)

    def f(p: np.ndarray) -> np.ndarray:
        return B - S(np.maximum(p, q_min))

    f0 = f(zero_k)
    p1 = _last_true(lambda p: (w(p) < f(p)) | (p == 0), zero_k, L)
    via_q = np.where(f0 > 0, np.minimum(np.minimum(w(p1 + 1), f(p1)), B), -np.inf)
    p2 = _last_true(lambda p: D(np.minimum(p, K)) < d_i, zero_k, L)
    via_fallback = np.where(i_is_star, np.minimum(w(p2 + 1), B), -np.inf)
    tau = np.maximum(via_q, via_fallback)
    return np.where(tau > 0, tau, 0.0)


def critical_bids(bids: np.ndarray, data_sizes: np.ndarray, budget: float, clients: np.ndarray | None = None) -> np.ndarray:
    """Critical bids τ_i(b_{-i}) of M2 (Lemma 2) for ``clients`` (default: the winners).

    Algorithm (exact). Sort the eligible candidates once by ratio; client i's others are that
    order with i removed. Let S_k and D_k be the sums of the first k others' bids and data (k =
    0..L, L eligible others), K the others' own greedy prefix length (largest k with S_k ≤ B),
    d* = max(d_i, d of the eligible others) and w_k = d_i·b_{o_k}/d_{o_k} the bid above which i
    falls behind the k-th other (w_0 = 0, w_{L+1} = ∞). For a bid z ≤ B in (w_p, w_{p+1}), i sits
    after exactly p others and

    - i is in the greedy prefix Q iff z ≤ B − S_p, and then Q = {o_1..o_q, i} with q the largest
      k ≥ p with S_k ≤ B − z, so T = Q ∋ i iff z ≤ f(p) := B − S_max(p, q_min), where q_min is the
      fewest leading others with D_k ≥ d* − d_i;
    - otherwise Q = {o_1..o_min(p,K)} and i wins iff it is i* (d_i = d*, lower index on ties)
      and D_min(p,K) < d_i.

    w_p is non-decreasing and f(p) non-increasing in p, so the bids winning through Q end at
    min(w_{p1+1}, f(p1), B) with p1 = max{p : w_p < f(p)} (none if f(0) ≤ 0); D_min(p,K) is
    non-decreasing, so the bids winning through the fallback end at min(w_{p2+1}, B) with
    p2 = max{p : D_min(p,K) < d_i}. τ_i is the larger of the two: the supremum of i's winning
    bids (open intervals suffice — tie points w_k do not move a supremum). K, q_min, p1 and p2
    are found by vectorised bisection over all clients at once.

    S_k and D_k are the running sums of the others alone (one masked cumulative sum per client),
    not the global running sum minus b_i: the latter rounds differently for different own bids,
    and at exact ties S_k = B (frequent with integer costs) would make i's payment depend on its
    own bid. τ_i is therefore a function of b_{-i} only, bit for bit.

    Complexity: one O(n log n) sort, then O(n) per client (its masked cumulative sum; the
    bisections are O(log n)) — O(n log n + |clients|·n) time in vectorised chunks of about
    2·10^6 entries, O(chunk) memory; all payments of n = 10^3 take milliseconds. (A scan over
    every breakpoint with one allocation each is O(n² log n) *per winner*.)
    :func:`critical_bid_bisection` and the plain reference of the tests cross-check it."""
    b, d, B = validate_auction_inputs(bids, data_sizes, budget)
    if clients is None:
        won, _, _, _ = _m2_rows(b[None, :], d, B)
        clients = np.flatnonzero(won[0])
    clients = np.asarray(clients, dtype=np.int64).reshape(-1)
    if clients.size and (clients.min() < 0 or clients.max() >= b.size):
        raise ValueError(f"clients: every index must be in [0, {b.size - 1}], got {clients.tolist()}")
    return _critical(clients, np.zeros(clients.size, dtype=np.int64), b[None, :], d, B)


def critical_bid_bisection(bids: np.ndarray, data_sizes: np.ndarray, budget: float, client: int, *, halvings: int = 200) -> float:
    """τ_i by bisection on [b_i, B] with Algorithm 2's allocation (a cross-check of the exact
    computation of :func:`critical_bids`). ``client`` must win with its bid ``b_i``; returns B
    if it still wins at B. Relies on monotonicity (Thm 4)."""
    b, d, B = validate_auction_inputs(bids, data_sizes, budget)

    def wins(z: float) -> bool:
        x = b.copy()
        x[client] = z
        return bool(_m2_rows(x[None, :], d, B)[0][0, client])

    if not wins(b[client]):
        raise ValueError(f"client: candidate {client} does not win with its bid {b[client]!r}")
    if wins(B):
        return B
    lo, hi = float(b[client]), B
    for _ in range(halvings):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if wins(mid) else (lo, mid)
    return lo


class KnapsackAuction(Auction):
    """M2 (JDP-FL Algorithm 2): greedy knapsack allocation, critical-bid payments. Truthful
    (Thm 4 + Myerson), individually rational, winners' reported costs ≤ B, Σ_T d ≥ OPT/2 — but
    *not* budget feasible in payments (the paper claims it is): an overspend is flagged on the
    outcome and logged at WARNING level unless ``warn_over_budget=False``."""

    name = "M2"

    def __init__(self, *, warn_over_budget: bool = True) -> None:
        self.warn_over_budget = warn_over_budget

    def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
        won, _, _, fb = _m2_rows(bids[None, :], data_sizes, budget)
        w = np.flatnonzero(won[0])
        tau = _critical(w, np.zeros(w.size, dtype=np.int64), bids[None, :], data_sizes, budget)
        pay = np.maximum(tau, bids[w])
        out = AuctionOutcome(
            mechanism=self.name,
            winners=w,
            payments=pay,
            n=bids.size,
            budget=budget,
            winners_cost=float(bids[w].sum()),
            data_bought=float(data_sizes[w].sum()),
            fallback=bool(fb[0]),
        )
        if self.warn_over_budget and not out.payments_within_budget:
            log.warning(
                "M2 pays %.6g in critical bids, over the budget B = %.6g (winners' costs %.6g ≤ B); "
                "payments are not rescaled (docs/jdp.md, Auctions)",
                out.total_payment,
                budget,
                out.winners_cost,
            )
        return out

    def client_outcomes(
        self, clients: np.ndarray, bids: np.ndarray, *, budget: float, data_sizes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: Algorithm 2 on every row, and the critical bid of ``clients[r]`` against
        row r's other bids wherever it wins (clamped to ≥ its bid, as in :meth:`run`)."""
        clients = np.asarray(clients, dtype=np.int64)
        bids = np.asarray(bids, dtype=np.float64)
        R, n = bids.shape
        wins = np.zeros(R, dtype=bool)
        step = max(1, CHUNK_ELEMENTS // max(n, 1))
        for s in range(0, R, step):
            sl = slice(s, min(R, s + step))
            won = _m2_rows(bids[sl], data_sizes, budget)[0]
            wins[sl] = won[np.arange(won.shape[0]), clients[sl]]
        pay = np.zeros(R)
        r = np.flatnonzero(wins)
        for s in range(0, r.size, step):
            rs = r[s : s + step]
            tau = _critical(clients[rs], np.arange(rs.size), bids[rs], data_sizes, budget)
            pay[rs] = np.maximum(tau, bids[rs, clients[rs]])
        return wins, pay
