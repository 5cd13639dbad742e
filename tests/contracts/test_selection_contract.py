"""One contract every registered selection strategy must pass (style guide §4, issue 6).

Probabilities are non-negative and sum to 1 (one-draw distribution); declared per-entry
probabilities match realised inclusion frequencies over 5·10^4 seeded rounds (2·10^4 for the four
cases whose ``select`` solves or enumerates every round: AOCS, Fed-CBS, power-of-choice; a bias of
1.3 points on an inclusion of 0.3 is 4 standard errors there) within 4 standard
errors; the same seed gives the same draws. Stateful strategies are checked both fresh and after
a synthetic round has been fed through ``after_round`` (losses, update norms, extras).
"""

from collections.abc import Callable

import numpy as np
import pytest

from fedgame.core import RoundOutcome, RoundState, Selection
from fedgame.selection import SELECTIONS, SelectionStrategy
from fedgame.testing import check_selection
from fedgame.testing.selection import K, SIZES

N, REPS = 10, 50_000
SLOW_SELECT = {"aocs", "fedcbs", "power_of_choice"}  # select() solves or enumerates each round: 2·10^4 rounds
RHO = np.array([0.5, 1.0, 2.0, 12.0, 0.01, 3.0, 3.0, 0.2, 7.0, 1.5])
LABEL_COUNTS = np.array(
    [[5, 0, 0], [0, 10, 0], [10, 5, 5], [40, 0, 0], [20, 30, 30], [0, 0, 5], [5, 5, 0], [0, 0, 20], [10, 20, 10], [0, 40, 40]]
)  # rows sum to SIZES
CASES = [
    ("uniform", {"replace": True}),
    ("uniform", {"replace": False}),
    ("full", {}),
    ("data_size", {}),
    ("privacy_aware", {"rho": RHO}),
    ("privacy_aware", {"rho": RHO, "sampler": "pips"}),
    ("power_of_choice", {"d": 5}),  # 30 240 candidate sequences: exact inclusion by enumeration
    ("power_of_choice", {}),  # d = N: global top-K
    ("aocs", {}),
    ("fedcbs", {"label_counts": LABEL_COUNTS}),  # 720 sequences: exact inclusion
    ("delta", {}),
    ("phs", {"p": SIZES / SIZES.sum(), "rounds": REPS, "k": K, "rng": 0}),  # schedule drawn up front, a round each
    ("fixed_sets", {"members": np.array([True, False, True, True, False, False, True, False, True, False])}),
    ("participants", {"members": np.array([[True, False, True, True, False, False, True, False, True, False]] * 2).T}),
    ("screened", {"members": np.array([False, True, True, False, True, True, False, True, True, True])}),
]
IDS = [n + "".join(f"-{k}={v if np.isscalar(v) else 'array'}" for k, v in kw.items()) for n, kw in CASES]


def _state(t: int = 0) -> RoundState:
    return RoundState(t=t, k=K, sizes=SIZES, theta=SIZES / SIZES.sum())


def test_every_registered_strategy_is_covered() -> None:
    assert {name for name, _ in CASES} == set(SELECTIONS.names())


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
def test_strategy_keeps_the_contract(name: str, kw: dict[str, object]) -> None:
    """:func:`fedgame.testing.check_selection`: a one-draw distribution; over 5·10^4 rounds (2·10^4 for SLOW_SELECT) through
    the strategy's own ``select`` each client's inclusion frequency matches the declared one
    within 4 SE; same seed, same draws; stateful strategies again after a round, and resumed."""
    check_selection(lambda: SELECTIONS.create(name, **kw), reps=REPS if name not in SLOW_SELECT else 20_000)


class _Biased(SelectionStrategy):
    """Declares uniform probabilities but draws in proportion to data size."""

    def probabilities(self, state: RoundState) -> np.ndarray:
        return np.full(state.n_clients, 1.0 / state.n_clients)

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        idx = rng.choice(state.n_clients, size=state.k, p=state.sizes / state.sizes.sum())
        return Selection(indices=idx, probs=np.full(state.k, 1.0 / state.n_clients), k=state.k, scheme="draws")


class _Forgetful(SelectionStrategy):
    """Learns from losses but does not save what it learned."""

    def __init__(self) -> None:
        self.w = np.ones(10)

    def probabilities(self, state: RoundState) -> np.ndarray:
        return self.w / self.w.sum()

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        for c, loss in outcome.losses().items():
            self.w[c] = 1 + loss

    def state_dict(self) -> dict[str, object]:
        return {"w": np.ones(10)}


class _Alternating(SelectionStrategy):
    """A schedule that moves with every round (like FedPCS's ρ_i^t): even rounds favour the
    large clients, odd rounds the small ones; ``stale`` draws from round 0's x every round
    while reporting round t's."""

    def __init__(self, stale: bool = False) -> None:
        self.stale = stale

    def probabilities(self, state: RoundState) -> np.ndarray:
        w = state.sizes if state.t % 2 == 0 else 1.0 / state.sizes
        return np.asarray(w / w.sum(), dtype=np.float64)

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        x = self.probabilities(state)
        draw = self.probabilities(RoundState(t=0, k=state.k, sizes=state.sizes, theta=state.theta)) if self.stale else x
        idx = rng.choice(state.n_clients, size=state.k, p=draw)
        return Selection(indices=idx, probs=x[idx], k=state.k, scheme="draws")


def test_contract_follows_a_schedule_that_moves_with_the_round() -> None:
    """The frequency check compares with the mean over rounds of each round's declared
    inclusion (it used to compare with round 0's alone, failing every honest schedule)."""
    check_selection(_Alternating, reps=20_000)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (_Biased, "differ from the declared"),
        (_Forgetful, "restored from state_dict"),
        (lambda: _Alternating(stale=True), "differ from the declared"),
    ],
)
def test_contract_catches_broken_strategies(make: Callable[[], SelectionStrategy], match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check_selection(make, reps=2_000)


def test_without_replacement_refuses_k_above_n() -> None:
    st = RoundState(t=0, k=N + 1, sizes=SIZES, theta=SIZES / SIZES.sum())
    with pytest.raises(ValueError, match=r"train.clients_per_round: must be in \[1, 10\].*got 11"):
        SELECTIONS.create("uniform", replace=False).select(st, np.random.default_rng(0))


def test_pips_caps_and_sums_to_k() -> None:
    """FedPCS §6 check 12: π ∈ [0,1], Σ π = K to 1e-12, exactly K distinct clients per draw."""
    from fedgame.selection import pips_inclusion, systematic_sample

    pi = pips_inclusion(RHO, 4)
    assert np.all((pi >= 0) & (pi <= 1)) and abs(pi.sum() - 4) < 1e-12
    assert pi[3] == 1.0  # ρ = 12 alone would get 4·12/30.21 > 1: capped
    free = pi < 1
    np.testing.assert_allclose(pi[free] / RHO[free], (pi[free] / RHO[free])[0])  # proportional below the cap
    rng = np.random.default_rng(0)
    for _ in range(200):
        s = systematic_sample(pi, rng)
        assert s.size == 4 and np.unique(s).size == 4


def test_privacy_aware_follows_rho_schedule() -> None:
    sched = np.stack([RHO, RHO[::-1]], axis=1)
    strat = SELECTIONS.create("privacy_aware", rho=sched)
    for t, col in enumerate([RHO, RHO[::-1]]):
        x = strat.probabilities(RoundState(t=t, k=K, sizes=SIZES, theta=SIZES / SIZES.sum()))
        np.testing.assert_allclose(x, col / col.sum())
