"""JDP-FL recruitment auctions M1 and M2 (spec ``jdp.md`` §3.1-3.3, §4.1; acceptance checks
1-12 of §6 that concern the auctions). "Random instances" are the spec's: c_i, d_i i.i.d.
uniform integers on {1..1000}, n uniform on {2..10}, B = U(0.05, 1.2)·Σc, seeded."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import numpy as np
import pytest

from fedgame.incentives.auctions import (
    BUDGET_RTOL,
    Auction,
    AuctionInputError,
    AuctionOutcome,
    KnapsackAuction,
    UnitPriceAuction,
    critical_bid_bisection,
    critical_bids,
    individual_rationality,
    knapsack_allocation,
    misreport_grid,
    truthfulness_audit,
    unit_price_allocation,
)
from tests.incentives import _auction_reference as ref

Instance = tuple[np.ndarray, np.ndarray, float]

M1 = UnitPriceAuction()
M2 = KnapsackAuction(warn_over_budget=False)
AUCTIONS = [M1, M2]


def random_instance(rng: np.random.Generator, n: int | None = None) -> Instance:
    n = int(rng.integers(2, 11)) if n is None else n
    c = rng.integers(1, 1001, n).astype(np.float64)
    d = rng.integers(1, 1001, n).astype(np.float64)
    return c, d, float(rng.uniform(0.05, 1.2) * c.sum())


#: ≥ 200 random instances (checks 4, 5, 8), seeded
INSTANCES: list[Instance] = [random_instance(np.random.default_rng([7, k])) for k in range(240)]

WORKED = (np.array([10.0, 30.0, 20.0, 60.0]), np.array([10.0, 20.0, 5.0, 30.0]), 50.0)


def run(auction: Auction, inst: Instance) -> AuctionOutcome:
    c, d, B = inst
    return auction.run(c, budget=B, data_sizes=d)


# -- worked examples (checks 1-3) ----------------------------------------------------------------
def test_m1_worked_example() -> None:
    """Check 1 (§3.2): W = {0, 1}, ρ = 5/3, p = (50/3, 100/3, 0, 0), total = B, utilities."""
    out = run(M1, WORKED)
    assert out.winners.tolist() == [0, 1]
    assert out.price == pytest.approx(5 / 3, abs=1e-12)
    np.testing.assert_allclose(out.payment_vector(), [50 / 3, 100 / 3, 0, 0], rtol=0, atol=1e-9)
    assert out.total_payment == pytest.approx(50.0, abs=1e-9)
    np.testing.assert_allclose(out.utilities(WORKED[0]), [20 / 3, 10 / 3, 0, 0], atol=1e-9)
    assert out.payments_within_budget and out.costs_within_budget
    assert out.data_bought == 30 and out.winners_cost == 40 and out.fallback is None
    alloc = unit_price_allocation(*WORKED)
    assert alloc.winners.tolist() == [0, 1] and alloc.m == 2 and alloc.price == out.price


def test_m2_worked_example() -> None:
    """Check 2 (§3.3): T = {0, 1}, p = (20, 50, 0, 0), total 70 > B, winners' cost 40."""
    out = run(M2, WORKED)
    assert out.winners.tolist() == [0, 1]
    np.testing.assert_allclose(out.payment_vector(), [20, 50, 0, 0], rtol=0, atol=1e-9)
    assert out.total_payment == pytest.approx(70.0, abs=1e-9)
    assert out.winners_cost == 40 and out.data_bought == 30
    assert out.payments_within_budget is False and out.costs_within_budget is True
    np.testing.assert_allclose(out.utilities(WORKED[0]), [10, 20, 0, 0], atol=1e-9)
    alloc = knapsack_allocation(*WORKED)
    assert alloc.prefix.tolist() == [0, 1] and alloc.i_star == 1 and alloc.fallback is False
    # the spec's derivation: client 0 loses for z in (20, 40) (T = {1}) and for z > 40 (T = {1, 2});
    # client 1 wins by the fallback for z in (40, 50] and is ineligible above B
    for z, winners in ((19.9, [0, 1]), (20.1, [1]), (39.9, [1]), (40.1, [1, 2])):
        assert knapsack_allocation([z, 30, 20, 60], WORKED[1], 50).winners.tolist() == winners
    assert knapsack_allocation([10, 45, 20, 60], WORKED[1], 50).winners.tolist() == [1]
    assert knapsack_allocation([10, 45, 20, 60], WORKED[1], 50).fallback is True
    assert knapsack_allocation([10, 50.001, 20, 60], WORKED[1], 50).winners.tolist() == [0, 2]
    # losers' thresholds: client 2 would need z ≤ 10; client 3 (ineligible at 60) z ≤ 45
    np.testing.assert_allclose(critical_bids(*WORKED, clients=[2, 3]), [10, 45], atol=1e-12)


def test_m2_two_cheap_clients_overspend() -> None:
    """Check 3: c = (0.1, 0.1), d = (1, 1), B = 1 → both win, p = (0.9, 0.9), Σp = 1.8 > B."""
    out = KnapsackAuction(warn_over_budget=False).run([0.1, 0.1], budget=1.0, data_sizes=[1, 1])
    assert out.winners.tolist() == [0, 1]
    np.testing.assert_allclose(out.payments, [0.9, 0.9], rtol=0, atol=1e-12)
    assert not out.payments_within_budget and out.costs_within_budget


def test_m2_overspend_is_logged_unless_silenced(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fedgame.incentives.auctions._m2"):
        KnapsackAuction().run(*WORKED[:1], budget=WORKED[2], data_sizes=WORKED[1])
        assert "over the budget B = 50" in caplog.text and "M2 pays 70" in caplog.text
        caplog.clear()
        KnapsackAuction(warn_over_budget=False).run(WORKED[0], budget=WORKED[2], data_sizes=WORKED[1])
        out = KnapsackAuction().run([10.0], budget=10.0, data_sizes=[1.0])  # one candidate, paid τ = B
        assert out.payments.tolist() == [10.0] and out.payments_within_budget
        assert caplog.text == ""


# -- truthfulness and IR by brute force (checks 4-5) -------------------------------------------
@pytest.mark.parametrize("auction", AUCTIONS, ids=lambda a: a.name)
def test_truthful_by_brute_force(auction: Auction) -> None:
    """Check 4: every client, every misreport of the §4.1 grid (plus each auction's prefix
    thresholds and the client's critical bid, each ±1e-7 relative): gain ≤ 1e-9·max(1, B)."""
    worst = 0.0
    for c, d, B in INSTANCES:
        audit = truthfulness_audit(auction, c, d, B)
        assert audit.clients.tolist() == list(range(c.size))
        assert (audit.grid_points > 128).all()
        assert audit.truthful(1e-9 * max(1.0, B)), (c, d, B, audit.max_gain, audit.best_misreport)
        worst = max(worst, audit.worst_gain / max(1.0, B))
    assert worst <= 1e-9


@pytest.mark.parametrize("auction", AUCTIONS, ids=lambda a: a.name)
def test_individually_rational(auction: Auction) -> None:
    """Check 5: every winner p_i ≥ c_i − 1e-9; every loser p_i = 0."""
    for inst in INSTANCES:
        out = run(auction, inst)
        ir = individual_rationality(out, inst[0])
        assert ir.holds(1e-9) and ir.paid_losers == 0, inst
        p = out.payment_vector()
        assert (p[out.won] >= inst[0][out.won] - 1e-9).all() and (p[~out.won] == 0).all()
        assert (out.utilities(inst[0]) >= -1e-9).all()


def tie_instance(rng: np.random.Generator) -> Instance:
    """Beyond the spec's instances (where exact ties are rare): costs and data in {1..5} and
    integer budgets, so that equal ratios and running sums equal to B abound."""
    n = int(rng.integers(1, 9))
    c = rng.integers(1, 6, n).astype(np.float64)
    d = rng.integers(1, 6, n).astype(np.float64)
    return c, d, float(rng.integers(1, int(c.sum()) + 3))


def test_m2_payment_does_not_depend_on_the_own_bid_at_exact_ties() -> None:
    """Regression: with S_k = B exactly (3 + 4 = 7), a critical bid computed as "global running
    sum minus the own bid" rounded differently for a non-integer own bid and paid 7 instead of 4
    — a gain of 3 for misreporting 0.0053. The others' sums are now formed without the own bid."""
    c, d, B = np.array([1.0, 3, 4, 3, 4]), np.array([5.0, 3, 2, 4, 5]), 7.0
    assert run(M2, (c, d, B)).payment_vector()[0] == 4.0
    for z in (0.005295745640118274, 0.00717051303427096, 1.0649557961895535, 3.749999625):
        x = c.copy()
        x[0] = z
        assert critical_bids(x, d, B, clients=[0])[0] == 4.0
        assert run(M2, (x, d, B)).payment_vector()[0] == 4.0
    assert truthfulness_audit(M2, c, d, B).worst_gain == 0.0


@pytest.mark.parametrize("auction", AUCTIONS, ids=lambda a: a.name)
def test_truthful_and_matching_the_reference_with_many_ties(auction: Auction) -> None:
    rng = np.random.default_rng(21)
    reference = ref.m1 if auction is M1 else ref.m2
    for _ in range(400):
        c, d, B = tie_instance(rng)
        assert truthfulness_audit(auction, c, d, B).worst_gain <= 1e-9 * max(1.0, B), (c, d, B)
        out = run(auction, (c, d, B))
        w, p = reference(c.tolist(), d.tolist(), B)
        assert out.winners.tolist() == w
        np.testing.assert_allclose(out.payment_vector(), p, rtol=1e-12, atol=0)


def test_audit_catches_a_non_truthful_auction() -> None:
    """The audit is not vacuous: a pay-your-bid auction (first-price, M2's allocation) is
    manipulable by overbidding, and an auction paying winners less than their cost fails IR."""

    class PayYourBid(Auction):
        name = "pay-your-bid"

        def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
            w = knapsack_allocation(bids, data_sizes, budget).winners
            return AuctionOutcome(
                mechanism=self.name,
                winners=w,
                payments=bids[w],
                n=bids.size,
                budget=budget,
                winners_cost=float(bids[w].sum()),
                data_bought=float(data_sizes[w].sum()),
            )

    class Stingy(PayYourBid):
        def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
            o = super()._run(bids, data_sizes, budget)
            return AuctionOutcome(
                mechanism="stingy",
                winners=o.winners,
                payments=0.5 * o.payments,
                n=o.n,
                budget=budget,
                winners_cost=o.winners_cost,
                data_bought=o.data_bought,
            )

    audit = truthfulness_audit(PayYourBid(), *WORKED)
    assert audit.max_gain[0] == pytest.approx(10.0, rel=1e-6)  # bid just under τ_0 = 20 instead of 10
    assert audit.best_misreport[0] == pytest.approx(20.0, rel=1e-6)
    assert audit.max_gain[1] == pytest.approx(20.0, rel=1e-6)  # bid B = 50 instead of 30
    assert not individual_rationality(Stingy().run(WORKED[0], budget=50, data_sizes=WORKED[1]), WORKED[0]).holds()


def test_generic_batch_evaluation_equals_the_vectorised_ones() -> None:
    """Auction.client_outcomes: the base class's per-row loop and M1/M2's vectorised versions
    agree on random profiles (the audit's evaluation path)."""

    class Looped(Auction):
        def __init__(self, inner: Auction) -> None:
            self.inner, self.name = inner, inner.name

        def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
            return self.inner._run(bids, data_sizes, budget)

    rng = np.random.default_rng(3)
    for auction in AUCTIONS:
        for c, d, B in INSTANCES[:30]:
            rows = np.repeat(c[None, :], 12, axis=0) * rng.uniform(0.2, 2.0, (12, c.size))
            who = rng.integers(0, c.size, 12)
            w1, p1 = auction.client_outcomes(who, rows, budget=B, data_sizes=d)
            w2, p2 = Looped(auction).client_outcomes(who, rows, budget=B, data_sizes=d)
            assert (w1 == w2).all()
            np.testing.assert_allclose(p1, p2, rtol=1e-12, atol=0)


# -- budget (checks 6-7) ------------------------------------------------------------------------
def test_m1_budget_envy_free_and_exhausted_budget() -> None:
    """Check 6: Σp ≤ B(1+1e-12); winners q_i ≤ ρ ≤ losers' q_i; Σp = B whenever ρ = B/D_W."""
    exhausted = 0
    for c, d, B in INSTANCES:
        out = M1.run(c, budget=B, data_sizes=d)
        assert out.total_payment <= B * (1 + 1e-12) and out.payments_within_budget
        if not out.winners.size:
            continue
        q, rho = c / d, out.price
        assert rho is not None
        assert (q[out.won] <= rho).all() and (q[~out.won] >= rho).all()
        np.testing.assert_allclose(out.payments, rho * d[out.winners], rtol=1e-15)
        if rho == B / d[out.won].sum():
            exhausted += 1
            assert out.total_payment == pytest.approx(B, rel=1e-12)
    assert exhausted > 50


def test_m1_payments_can_exceed_B_by_ulps_so_the_flag_has_slack() -> None:
    """ρ = B/D_W and Σ ρ d_i in floating point may land a few ulps above B (about 5% of random
    instances): the flag allows BUDGET_RTOL = 1e-12 (check 6's tolerance) rather than call M1
    over budget."""
    c = np.array([374.0, 13, 318, 525, 547, 959, 129])
    d = np.array([412.0, 812, 146, 222, 980, 487, 959])
    out = M1.run(c, budget=3357.0, data_sizes=d)
    assert out.total_payment > 3357.0  # by 4.5e-13
    assert out.total_payment <= 3357.0 * (1 + BUDGET_RTOL) and out.payments_within_budget


def test_m2_costs_within_budget_and_the_flag() -> None:
    """Check 7: winners' total reported cost ≤ B always; the flag equals Σp ≤ B (up to the
    1e-12 relative slack, see the M1 test); M2 overspends on most random instances (§4.1)."""
    over = 0
    for c, d, B in INSTANCES:
        out = M2.run(c, budget=B, data_sizes=d)
        assert c[out.won].sum() <= B and out.costs_within_budget
        assert out.winners_cost == pytest.approx(c[out.won].sum(), rel=1e-15)
        assert out.payments_within_budget == (out.total_payment <= B * (1 + BUDGET_RTOL))
        over += not out.payments_within_budget
    assert 0.5 < over / len(INSTANCES) < 0.95  # the spec's reference: 74 %


# -- approximation (check 8) ---------------------------------------------------------------------
def test_m2_buys_at_least_half_of_the_optimum() -> None:
    """Check 8: Σ_T d ≥ OPT/2 with OPT by exhaustive search over all 2^n subsets (n ≤ 12)."""
    rng = np.random.default_rng(8)
    insts = INSTANCES + [random_instance(rng, n) for n in (11, 12) for _ in range(20)]
    ratios = []
    for c, d, B in insts:
        subsets = np.array(list(itertools.product((0.0, 1.0), repeat=c.size)))
        opt = float(np.max(np.where(subsets @ c <= B, subsets @ d, 0.0)))
        got = run(M2, (c, d, B)).data_bought
        assert got >= opt / 2 - 1e-9, (c, d, B)
        ratios.append(got / opt if opt else 1.0)
    assert len(insts) >= 200 and min(ratios) >= 0.5 and np.mean(ratios) > 0.9


# -- critical bids (check 9) --------------------------------------------------------------------
def test_critical_bids_equal_bisection_and_lie_in_cost_to_budget() -> None:
    """Check 9: exact critical bid = bisection (≥ 100 halvings) to 1e-6·B; τ_i ∈ [c_i, B]."""
    checked = 0
    for c, d, B in INSTANCES[:120]:
        out = run(M2, (c, d, B))
        for i, p in zip(out.winners, out.payments):
            assert c[i] - 1e-12 <= p <= B
            assert abs(p - critical_bid_bisection(c, d, B, int(i), halvings=120)) <= 1e-6 * B
            checked += 1
    assert checked > 300


# -- monotonicity (check 10) --------------------------------------------------------------------
@pytest.mark.parametrize("auction", AUCTIONS, ids=lambda a: a.name)
def test_a_winner_lowering_its_bid_still_wins(auction: Auction) -> None:
    """Check 10: a winner that lowers its bid to any value in (0, c_i) still wins (a grid of 40
    lower bids per winner, evaluated in one batch); under M1 the winner set is unchanged."""
    frac = np.concatenate([np.geomspace(1e-6, 0.5, 20), np.linspace(0.5, 1 - 1e-9, 20)])
    for c, d, B in INSTANCES:
        out = auction.run(c, budget=B, data_sizes=d)
        for i in out.winners:
            rows = np.repeat(c[None, :], frac.size, axis=0)
            rows[:, i] = frac * c[i]
            wins, _ = auction.client_outcomes(np.full(frac.size, i), rows, budget=B, data_sizes=d)
            assert wins.all(), (c, d, B, i)
            if auction is M1:
                for r in rows[::8]:
                    assert M1.run(r, budget=B, data_sizes=d).winners.tolist() == out.winners.tolist()


# -- independent cross-check (check 11) ---------------------------------------------------------
def test_matches_an_independent_reference_implementation() -> None:
    """Check 11: on 110 random instances (including n = 30 and n = 100 with the Fig. 2
    distributions) winners equal the plain reference's exactly, payments agree to 1e-9 relative."""
    rng = np.random.default_rng(11)
    insts = INSTANCES[:100] + [random_instance(rng, 30) for _ in range(6)]
    for B in (10_000.0, 20_000.0, 50_000.0, 100_000.0):
        c, d, _ = random_instance(rng, 100)
        insts.append((c, d, B))
    for c, d, B in insts:
        cl, dl = c.tolist(), d.tolist()
        for auction, reference in ((M1, ref.m1), (M2, ref.m2)):
            out = run(auction, (c, d, B))
            w, p = reference(cl, dl, B)
            assert out.winners.tolist() == w, (auction.name, c, d, B)
            np.testing.assert_allclose(out.payment_vector(), p, rtol=1e-9, atol=0)


# -- bad input (check 12) -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bids", "data", "budget", "message"),
    [
        ([10, -1, 5], [1, 2, 3], 10, "bids[1]: must be > 0 and finite (a reported cost), got -1.0"),
        ([10, 0, 5], [1, 2, 3], 10, "bids[1]: must be > 0 and finite (a reported cost), got 0.0"),
        ([10, float("nan"), 5], [1, 2, 3], 10, "bids[1]: must be > 0 and finite"),
        ([10, 1, 5], [1, 0, 3], 10, "data_sizes[1]: must be > 0 and finite (a data size), got 0.0"),
        ([10, 1, 5], [1, 2, -3], 10, "data_sizes[2]: must be > 0 and finite (a data size), got -3.0"),
        ([10, 1, 5], [1, 2, 3], 0, "budget: must be > 0 and finite, got 0"),
        ([10, 1, 5], [1, 2, 3], -5.5, "budget: must be > 0 and finite, got -5.5"),
        ([10, 1, 5], [1, 2, 3], float("inf"), "budget: must be > 0 and finite, got inf"),
        ([10, 1, 5], [1, 2], 10, "data_sizes: must have one value per candidate (n = 3, as bids), got 2"),
        ([], [], 10, "bids: must list at least 1 candidate (n >= 1), got 0"),
        ([[1, 2]], [1], 10, "bids: must be a 1-D array (one value per candidate), got shape (1, 2)"),
    ],
)
@pytest.mark.parametrize(
    "call",
    [
        lambda b, d, B: M1.run(b, budget=B, data_sizes=d),
        lambda b, d, B: M2.run(b, budget=B, data_sizes=d),
        unit_price_allocation,
        knapsack_allocation,
        critical_bids,
    ],
    ids=["M1", "M2", "m1_alloc", "m2_alloc", "critical_bids"],
)
def test_bad_input_is_refused_naming_the_field(
    call: Callable[..., object], bids: list[float], data: list[float], budget: float, message: str
) -> None:
    with pytest.raises(AuctionInputError) as e:
        call(bids, data, budget)
    assert message in str(e.value)


def test_every_bad_field_is_reported_and_checked_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedgame.incentives.auctions import _m2

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("allocation ran on bad input")

    monkeypatch.setattr(_m2, "_m2_rows", boom)
    with pytest.raises(AuctionInputError) as e:
        M2.run([1, -2, 0], budget=0, data_sizes=[1, 1])
    lines = str(e.value).splitlines()
    assert lines == [
        "bids[1]: must be > 0 and finite (a reported cost), got -2.0",
        "bids[2]: must be > 0 and finite (a reported cost), got 0.0",
        "data_sizes: must have one value per candidate (n = 3, as bids), got 2",
        "budget: must be > 0 and finite, got 0",
    ]
    assert issubclass(AuctionInputError, ValueError)


# -- edge cases ----------------------------------------------------------------------------------
def test_nobody_affordable() -> None:
    c, d = np.array([5.0, 7.0]), np.array([1.0, 3.0])
    o1, o2 = M1.run(c, budget=1.0, data_sizes=d), M2.run(c, budget=1.0, data_sizes=d)
    for o in (o1, o2):
        assert o.winners.size == 0 and o.total_payment == 0 and o.data_bought == 0
        assert o.payments_within_budget and o.costs_within_budget
    assert o1.price is None and knapsack_allocation(c, d, 1.0).i_star == -1
    assert np.isnan(unit_price_allocation(c, d, 1.0).price)


def test_ties_go_to_the_lower_index() -> None:
    """§3.1: equal unit prices / ratios and equal d in argmax are broken by the lower index."""
    c, d = np.array([2.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0])
    assert M1.run(c, budget=2.0, data_sizes=d).winners.tolist() == [0]  # q = 2 ≤ 2/1; 2 > 2/2
    assert M2.run(c, budget=4.0, data_sizes=d).winners.tolist() == [0, 1]
    alloc = knapsack_allocation([3.0, 3.0], [5.0, 5.0], 4.0)  # only one fits; i* = 0
    assert alloc.winners.tolist() == [0] and alloc.i_star == 0


def test_outcome_arrays_are_read_only_and_aligned() -> None:
    out = run(M2, WORKED)
    with pytest.raises(ValueError):
        out.payments[0] = 0.0
    with pytest.raises(ValueError):
        AuctionOutcome(
            mechanism="x", winners=np.array([0, 1]), payments=np.array([1.0]), n=2, budget=1.0, winners_cost=0.0, data_bought=0.0
        )


def test_misreport_grid_has_the_spec_points() -> None:
    c, d, B = WORKED
    z = misreport_grid(0, c, d, B)
    for point in (10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 2 * 60.0, 20.0 * (1 + 1e-7), 20.0 * (1 - 1e-7)):
        assert np.isclose(z, point, rtol=1e-15, atol=0).any(), point
    assert (np.diff(z) > 0).all() and (z > 0).all()
    small = misreport_grid(0, c, d, B, max_structural=5, extra=[33.0])
    assert np.isclose(small, 33.0).any() and small.size < z.size


# -- large n (vectorised paths, speed) ------------------------------------------------------------
def test_large_n_allocations_match_the_reference_and_payments_match_bisection() -> None:
    """n = 10^4: both allocations equal the plain reference; a sample of M2's critical bids
    equals bisection; the audit of a few clients at n = 10^4 finds no gain."""
    rng = np.random.default_rng(12)
    c, d = (rng.integers(1, 1001, 10_000).astype(np.float64) for _ in range(2))
    B = 0.3 * c.sum()
    cl, dl = c.tolist(), d.tolist()
    assert unit_price_allocation(c, d, B).winners.tolist() == ref.m1(cl, dl, B)[0]
    out = run(M2, (c, d, B))
    assert out.winners.tolist() == ref.m2_alloc(cl, dl, B)
    assert out.winners.size > 4000
    pick = rng.choice(out.winners, 4, replace=False)
    tau = critical_bids(c, d, B, clients=pick)
    for i, t in zip(pick, tau):
        assert abs(t - critical_bid_bisection(c, d, B, int(i), halvings=80)) <= 1e-6 * B
    np.testing.assert_allclose(out.payment_vector()[pick], np.maximum(tau, c[pick]), rtol=1e-15)
    who = [int(out.winners[0]), int(np.flatnonzero(~out.won)[0])]
    for auction in AUCTIONS:
        audit = truthfulness_audit(auction, c, d, B, clients=who, uniform=16, log_spaced=16, max_structural=64)
        assert audit.truthful(1e-9 * B), (auction.name, audit.max_gain)


def test_speed_of_allocations_and_payments() -> None:
    """M1 and M2 allocations for n = 10^5 each < 1 s; all M2 payments for n = 10^3 (every
    candidate winning: the worst case) < 1 s. Best of 3 (the machine may be busy)."""
    rng = np.random.default_rng(13)
    c, d = (rng.integers(1, 1001, 100_000).astype(np.float64) for _ in range(2))

    def best(fn: Callable[[], object]) -> float:
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    assert best(lambda: M1.run(c, budget=0.3 * c.sum(), data_sizes=d)) < 1.0
    assert best(lambda: knapsack_allocation(c, d, 0.3 * c.sum())) < 1.0
    c3, d3 = c[:1000], d[:1000]
    out = M2.run(c3, budget=c3.sum(), data_sizes=d3)
    assert out.winners.size == 1000
    assert best(lambda: M2.run(c3, budget=c3.sum(), data_sizes=d3)) < 1.0
