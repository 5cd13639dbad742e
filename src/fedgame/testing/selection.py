"""The selection-strategy contract (docs/plugins.md): a one-draw distribution, declared
inclusion probabilities that match realised frequencies, reproducible draws, exact resume."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedgame.core import ClientResult, RoundOutcome, RoundState, Selection, Streams
from fedgame.core.types import LOCAL_GRAD_VARIANCE
from fedgame.selection.base import SelectionStrategy

__all__ = ["check_selection", "SIZES", "K", "round_state", "past_round"]

K = 3
SIZES = np.array([5, 10, 20, 40, 80, 5, 10, 20, 40, 80])
"""The synthetic federation the suite draws from: 10 clients of unequal sizes, K = 3 per round."""


def round_state(t: int = 0) -> RoundState:
    return RoundState(t=t, k=K, sizes=SIZES, theta=SIZES / SIZES.sum())


def past_round() -> RoundOutcome:
    """A synthetic past round: 7 of 10 clients trained (two tie on loss), updates of varied norm."""
    clients = [0, 2, 3, 5, 7, 8, 9]
    losses = [0.5, 2.0, 1.0, 2.0, 0.3, 1.5, 0.8]
    gen = torch.Generator().manual_seed(0)
    results = [
        ClientResult(c, (1 + c) * torch.randn(4, generator=gen), loss, 1, int(SIZES[c]), {LOCAL_GRAD_VARIANCE: 0.1 * c})
        for c, loss in zip(clients, losses, strict=True)
    ]
    sel = Selection(indices=np.array(clients), probs=np.full(len(clients), 0.5), k=K, scheme="inclusion")
    return RoundOutcome(t=0, selection=sel, results=results)


def _distribution(strat: SelectionStrategy, label: str) -> None:
    x = strat.probabilities(round_state())
    n = SIZES.size
    assert x.shape == (n,), f"{label}: probabilities() must have one entry per client ({n}), got shape {x.shape}"
    assert np.all(np.isfinite(x)) and np.all(x >= 0), f"{label}: probabilities() must be finite and >= 0, got {x}"
    assert abs(x.sum() - 1.0) <= 1e-12, f"{label}: probabilities() must sum to 1, got {x.sum()!r}"


def _varies(strat: SelectionStrategy, reps: int) -> bool:
    """Whether the strategy's declared x moves with the round (a schedule ρ_i^t, FedPCS's
    game): checked at a few rounds, so a stationary strategy keeps the fast path."""
    x0 = strat.probabilities(round_state())
    return any(not np.array_equal(strat.probabilities(round_state(t)), x0) for t in sorted({1, 2, reps // 2, reps - 1}))


def _inclusion(strat: SelectionStrategy, reps: int, label: str) -> None:
    """``reps`` rounds t = 0, 1, ... through the strategy's own ``select``: each client's share
    of rounds in which it is drawn matches its declared inclusion within 4 standard errors —
    1 - (1 - x_i^t)^K for "draws" schemes (``select`` reporting x_i^t per draw; where x moves
    with t, the expected share is the mean over the rounds of the declared inclusion, and its
    variance the mean of the rounds' Bernoulli variances), the π_i ``select`` reports for
    "inclusion" schemes. A client never drawn must have declared inclusion ≈ 0."""
    n = SIZES.size
    rng = np.random.default_rng(123)
    x = strat.probabilities(round_state())
    hits = np.zeros(n)
    reported = np.full(n, np.nan)
    scheme = strat.select(round_state(), np.random.default_rng(0)).scheme
    moving = scheme == "draws" and _varies(strat, reps)
    declared_sum, var_sum = np.zeros(n), np.zeros(n)
    for t in range(reps):
        state = round_state(t)
        sel = strat.select(state, rng)
        hits[np.unique(sel.indices)] += 1
        reported[sel.indices] = sel.probs
        if moving:
            xt = strat.probabilities(state)
            np.testing.assert_allclose(sel.probs, xt[sel.indices], err_msg=f"{label}: select() must report x_i^t for each draw (round {t})")
            d = 1 - (1 - xt) ** K
            declared_sum += d
            var_sum += d * (1 - d)
    drawn = hits > 0
    if moving:
        declared, var = declared_sum / reps, var_sum / reps
    elif scheme == "draws":
        np.testing.assert_allclose(reported[drawn], x[drawn], err_msg=f"{label}: select() must report x_i for each draw")
        declared = 1 - (1 - x) ** K
        var = declared * (1 - declared)
    else:
        declared = np.where(drawn, reported, 0.0)
        var = declared * (1 - declared)
    never = np.maximum(declared, 0.0 if moving else K * x)[~drawn] * reps
    assert np.all(never < 5), f"{label}: clients {np.flatnonzero(~drawn)} never drawn in {reps} rounds but declared {declared[~drawn]}"
    freq = hits / reps
    se = np.sqrt(np.maximum(var, 1e-12) / reps)
    bad = np.abs(freq - declared) > 4 * se + 1e-12
    assert not bad.any(), (
        f"{label}: inclusion frequencies {freq[bad]} of clients {np.flatnonzero(bad)} differ from the declared {declared[bad]} by more than 4 SE"
    )


def _reproducible(make: Callable[[], SelectionStrategy], label: str) -> None:
    a = make().select(round_state(), Streams(seed=5).numpy("selection", 2))
    b = make().select(round_state(), Streams(seed=5).numpy("selection", 2))
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.probs, b.probs), f"{label}: the same seed must give the same draws"


def _resume(make: Callable[[], SelectionStrategy], label: str) -> None:
    a = make()
    a.after_round(round_state(), past_round())
    saved = a.state_dict()
    assert all(v is None or isinstance(v, np.ndarray) for v in saved.values()), (
        f"{label}: state_dict() must hold numpy arrays (or None), got {sorted(type(v).__name__ for v in saved.values())}"
    )
    b = make()
    b.load_state_dict(saved)
    for t in range(3):
        sa = a.select(round_state(), Streams(seed=7).numpy("selection", t))
        sb = b.select(round_state(), Streams(seed=7).numpy("selection", t))
        assert np.array_equal(sa.indices, sb.indices) and np.array_equal(sa.probs, sb.probs), (
            f"{label}: a strategy restored from state_dict() must draw what the original draws"
        )


def check_selection(make: Callable[[], SelectionStrategy], *, reps: int = 100_000, history: bool = True) -> None:
    """Check the selection contract on fresh strategies from ``make()`` (10 clients, K = 3),
    over ``reps`` seeded rounds t = 0 … reps − 1 (about 10 s at the default 10^5 for a simple
    strategy; the 4-standard-error bounds hold at any count, more rounds catch smaller biases).
    A strategy with a schedule fixed up front (PHS) must cover ``reps`` rounds.

    With ``history``, a strategy that keeps state (a non-empty ``state_dict`` after
    ``after_round`` has seen a synthetic round of losses and update norms) is checked again in
    that state, and restored from its ``state_dict``.
    """
    strat = make()
    assert isinstance(strat, SelectionStrategy), f"make() must return a SelectionStrategy, got {type(strat).__name__}"
    label = type(strat).__name__
    _distribution(strat, label)
    _inclusion(strat, reps, label)
    _reproducible(make, label)
    if history:
        learned = make()
        learned.after_round(round_state(), past_round())
        if learned.state_dict():
            _distribution(learned, f"{label} after a round")
            _inclusion(learned, reps, f"{label} after a round")
            _resume(make, label)
