"""One contract every registered selection strategy must pass (style guide §4, issue 6).

Probabilities are non-negative and sum to 1 (one-draw distribution); declared per-entry
probabilities match realised inclusion frequencies over 10^5 seeded rounds within 4 standard
errors; the same seed gives the same draws. Stateful strategies are checked both fresh and after
a synthetic round has been fed through ``after_round`` (losses, update norms, extras).
"""

import numpy as np
import pytest
import torch

from fedgame.core import ClientResult, RoundOutcome, RoundState, Selection, Streams
from fedgame.selection import SELECTIONS, SelectionStrategy
from fedgame.core.types import LOCAL_GRAD_VARIANCE

N, K, REPS = 10, 3, 100_000
SIZES = np.array([5, 10, 20, 40, 80, 5, 10, 20, 40, 80])
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
]
IDS = [n + "".join(f"-{k}={v if np.isscalar(v) else 'array'}" for k, v in kw.items()) for n, kw in CASES]


def _state(t: int = 0) -> RoundState:
    return RoundState(t=t, k=K, sizes=SIZES, theta=SIZES / SIZES.sum())


def _outcome() -> RoundOutcome:
    """A synthetic past round: 7 of 10 clients trained (two tie on loss), updates of varied norm."""
    clients = [0, 2, 3, 5, 7, 8, 9]
    losses = [0.5, 2.0, 1.0, 2.0, 0.3, 1.5, 0.8]
    gen = torch.Generator().manual_seed(0)
    results = [
        ClientResult(c, (1 + c) * torch.randn(4, generator=gen), loss, 1, int(SIZES[c]), {LOCAL_GRAD_VARIANCE: 0.1 * c})
        for c, loss in zip(clients, losses)
    ]
    sel = Selection(indices=np.array(clients), probs=np.full(len(clients), 0.5), k=K, scheme="inclusion")
    return RoundOutcome(t=0, selection=sel, results=results)


def _make(name: str, kw: dict[str, object], history: bool) -> SelectionStrategy:
    strat = SELECTIONS.create(name, **kw)
    if history:
        strat.after_round(_state(), _outcome())
    return strat


# every case fresh, and the stateful ones (a non-empty state_dict after a round) with history too
_STATEFUL = [bool(_make(n, kw, True).state_dict()) for n, kw in CASES]
RUNS = [
    pytest.param(n, kw, h, id=f"{i}-{'after_round' if h else 'fresh'}")
    for (n, kw), i, st in zip(CASES, IDS, _STATEFUL)
    for h in (False, True)
    if st or not h
]
STATEFUL = [pytest.param(n, kw, id=i) for (n, kw), i, st in zip(CASES, IDS, _STATEFUL) if st]


def test_every_registered_strategy_is_covered() -> None:
    assert {name for name, _ in CASES} == set(SELECTIONS.names())


@pytest.mark.parametrize(("name", "kw", "history"), RUNS)
def test_probabilities_are_a_distribution(name: str, kw: dict[str, object], history: bool) -> None:
    x = _make(name, kw, history).probabilities(_state())
    assert x.shape == (N,) and np.all(x >= 0)
    assert x.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("name", "kw", "history"), RUNS)
def test_declared_inclusion_matches_frequency(name: str, kw: dict[str, object], history: bool) -> None:
    """10^5 rounds t = 0, 1, ..., every one through the strategy's own ``select``: each client's share of
    rounds in which it is drawn matches its declared inclusion probability within 4 standard
    errors — for "draws" schemes 1 − (1 − x_i)^K from ``probabilities``, with ``select``
    reporting x_i for each draw; for "inclusion" schemes the π_i that ``select`` reports. A
    client never drawn must be one whose declared inclusion is ≈ 0 (expected count below 5)."""
    strat = _make(name, kw, history)
    st = _state()
    rng = np.random.default_rng(123)
    x = strat.probabilities(st)
    hits = np.zeros(N)
    reported = np.full(N, np.nan)
    scheme = strat.select(st, np.random.default_rng(0)).scheme
    for t in range(REPS):  # round t of the run (PHS draws its schedule up front: one draw per round)
        sel = strat.select(_state(t), rng)
        hits[np.unique(sel.indices)] += 1
        reported[sel.indices] = sel.probs
    drawn = hits > 0
    if scheme == "draws":
        np.testing.assert_allclose(reported[drawn], x[drawn])  # select reports x_i for each draw
        declared = 1 - (1 - x) ** K
    else:
        declared = np.where(drawn, reported, 0.0)
    # never drawn in 10^5 rounds: its declared inclusion (or its one-draw probability) is ≈ 0
    assert np.all(np.maximum(declared, K * x)[~drawn] * REPS < 5), (np.flatnonzero(~drawn), declared, x)
    freq = hits / REPS
    se = np.sqrt(np.maximum(declared * (1 - declared), 1e-12) / REPS)
    assert np.all(np.abs(freq - declared) <= 4 * se + 1e-12), (freq, declared)


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
def test_same_seed_same_draws(name: str, kw: dict[str, object]) -> None:
    a = SELECTIONS.create(name, **kw).select(_state(), Streams(seed=5).numpy("selection", 2))
    b = SELECTIONS.create(name, **kw).select(_state(), Streams(seed=5).numpy("selection", 2))
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.probs, b.probs)


@pytest.mark.parametrize(("name", "kw"), STATEFUL)
def test_state_dict_resumes_identically(name: str, kw: dict[str, object]) -> None:
    """A strategy rebuilt from a checkpoint (``state_dict`` of numpy arrays) draws what the
    original draws: the kill-and-resume guarantee of the engine."""
    a = _make(name, kw, history=True)
    b = SELECTIONS.create(name, **kw)
    saved = a.state_dict()
    assert all(v is None or isinstance(v, np.ndarray) for v in saved.values())
    b.load_state_dict(saved)
    for t in range(3):
        sa = a.select(_state(), Streams(seed=7).numpy("selection", t))
        sb = b.select(_state(), Streams(seed=7).numpy("selection", t))
        np.testing.assert_array_equal(sa.indices, sb.indices)
        np.testing.assert_array_equal(sa.probs, sb.probs)


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
