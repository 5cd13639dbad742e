"""Monte Carlo of the server's aggregate through the library itself: each round the strategy's
own ``select`` draws, and the aggregation rule's own ``update`` combines the drawn clients'
fixed updates g_i. Used by the unbiasedness checks (FedPCS check 13) of every sampler."""

from __future__ import annotations

import numpy as np
import torch

from fedgame.core import RoundContext, RoundState, Selection
from fedgame.selection import SelectionStrategy
from fedgame.sim import importance_weighted_mean


def aggregate_draws(
    strat: SelectionStrategy, state: RoundState, g: np.ndarray, reps: int, rng: np.random.Generator, rule: object | None = None
) -> np.ndarray:
    """``reps`` aggregates (reps × dim) of the updates ``g`` (one row per client), each from one
    ``strat.select`` and one ``rule.update`` (default: importance weighting, Eq. 4).

    Every round draws through ``select``. The rule is a deterministic function of the round's
    selection (its indices, their probabilities, the updates), so its aggregate is computed
    once per distinct selection and reused; the first rounds recompute it to check that."""
    rule = importance_weighted_mean() if rule is None else rule
    gt = torch.as_tensor(g, dtype=torch.float64)
    params = torch.zeros(g.shape[1], dtype=torch.float64)
    state0 = rule.init(params)  # type: ignore[attr-defined]
    out = np.empty((reps, g.shape[1]))
    seen: dict[tuple[bytes, bytes, str, bool, int], np.ndarray] = {}

    def aggregate(sel: Selection) -> np.ndarray:
        ctx = RoundContext(t=state.t, selection=sel, theta=state.theta, params=params, rng=rng)
        agg, _ = rule.update([gt[i] for i in sel.indices], state0, ctx)  # type: ignore[attr-defined]
        return np.asarray(agg[0].numpy())

    for r in range(reps):
        sel = strat.select(state, rng)
        key = (sel.indices.tobytes(), sel.probs.tobytes(), sel.scheme, sel.independent_copies, sel.k)
        cached = seen.get(key)
        if cached is None:
            cached = seen[key] = aggregate(sel)
        elif r < 1000:
            np.testing.assert_array_equal(aggregate(sel), cached)  # deterministic in the selection
        out[r] = cached
    return out


def assert_unbiased(agg: np.ndarray, target: np.ndarray, label: str = "") -> None:
    """The mean aggregate within 4 standard errors of Σ_i θ_i g_i, per coordinate."""
    se = agg.std(axis=0) / np.sqrt(len(agg))
    assert np.all(np.abs(agg.mean(axis=0) - target) < 4 * se), (label, agg.mean(axis=0), target, se)
