"""Aggregation rules: exact values, and unbiasedness of importance weighting over 4·10^4 samplings."""

import numpy as np
import pytest
import torch

from fedgame.core import RoundContext, RoundState, Selection, chain
from fedgame.selection import SELECTIONS
from fedgame.sim import importance_weighted_mean, server_sgd, size_weighted_mean, uniform_mean
from fedgame.sim.updates import upload_weights
from tests.contracts.unbiased import aggregate_draws, assert_unbiased


def _ctx(sel: Selection, theta: np.ndarray) -> RoundContext:
    return RoundContext(t=0, selection=sel, theta=theta, params=torch.zeros(2), rng=np.random.default_rng(0))


def test_rules_on_exact_values() -> None:
    sel = Selection(indices=np.array([0, 2, 2]), probs=np.array([0.2, 0.5, 0.5]), k=3)
    theta = np.array([0.5, 0.25, 0.25])
    ups = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.0, 2.0])]
    out, _ = size_weighted_mean().update(ups, (), _ctx(sel, theta))
    torch.testing.assert_close(out[0], torch.tensor([0.5, 1.0]))
    out, _ = uniform_mean().update(ups, (), _ctx(sel, theta))
    torch.testing.assert_close(out[0], torch.tensor([1 / 3, 4 / 3]))
    out, _ = importance_weighted_mean().update(ups, (), _ctx(sel, theta))
    # 0.5/(3·0.2)·[1,0] + 2 · 0.25/(3·0.5)·[0,2]
    torch.testing.assert_close(out[0], torch.tensor([0.5 / 0.6, 2 * 0.25 / 1.5 * 2]))
    upd = chain(uniform_mean(), server_sgd(lr=0.5))
    out, state = upd.update(ups, upd.init(torch.zeros(2)), _ctx(sel, theta))
    torch.testing.assert_close(out[0], torch.tensor([1 / 6, 2 / 3]))
    assert state == ((), ())


def test_upload_weights_sum_a_clients_slots_in_client_order() -> None:
    """A client drawn m times uploads once with its m slot weights summed, uploads ordered like
    ``selection.clients``; independent copies keep one weight per slot; the rules report the
    largest as ``max_agg_weight``."""
    sel = Selection(indices=np.array([7, 2, 7, 0]), probs=np.array([0.1, 0.2, 0.1, 0.3]), k=4)
    np.testing.assert_array_equal(upload_weights(sel, np.array([1.0, 2.0, 3.0, 4.0])), [4.0, 2.0, 4.0])
    copies = Selection(indices=np.array([7, 2, 7]), probs=np.array([0.1, 0.2, 0.1]), k=3, independent_copies=True)
    np.testing.assert_array_equal(upload_weights(copies, np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0])
    ctx = _ctx(sel, np.full(8, 1 / 8))
    ups = [torch.zeros(2)] * 4
    importance_weighted_mean().update(ups, (), ctx)
    assert ctx.metrics["max_agg_weight"] == 2 * (1 / 8) / (4 * 0.1)  # client 7: two slots of θ/(K x)


def test_importance_weighting_is_unbiased() -> None:
    """Mean aggregate over 4·10^4 rounds, each drawn by the strategy's ``select`` and combined by
    the library's importance weighting (Eq. 4), equals Σ_i θ_i g_i within 4 SE (FedPCS check 13)."""
    rng = np.random.default_rng(0)
    n, k, reps = 12, 4, 40_000
    g = rng.normal(size=(n, 3))
    sizes = rng.integers(10, 100, size=n)
    theta = sizes / sizes.sum()
    for name, kw in [("data_size", {}), ("uniform", {"replace": True}), ("uniform", {"replace": False})]:
        strat = SELECTIONS.create(name, **kw)
        state = RoundState(t=0, k=k, sizes=sizes, theta=theta)
        assert_unbiased(aggregate_draws(strat, state, g, reps, rng), theta @ g, name)


@pytest.mark.parametrize("sampler", ["multinomial", "pips"])
def test_privacy_aware_importance_aggregate_is_unbiased(sampler: str) -> None:
    """FedPCS check 13 with x ∝ ρ (multinomial, θ/(K x)) and PIPS (systematic, θ/π, one client
    capped at π = 1): 4·10^4 rounds through ``select`` and the importance-weighted aggregation."""
    from fedgame.selection.privacy_aware import pips_inclusion

    rng = np.random.default_rng(1)
    n, k, reps = 15, 5, 40_000
    g = rng.normal(size=(n, 3))
    sizes = rng.integers(10, 100, size=n)
    theta = sizes / sizes.sum()
    rho = rng.uniform(0.01, 12.0, n)
    rho[0] = 60.0  # large enough that PIPS must cap it at π = 1
    if sampler == "pips":
        pi = pips_inclusion(rho, k)
        assert pi[0] == 1.0 and abs(pi.sum() - k) < 1e-12
    strat = SELECTIONS.create("privacy_aware", rho=rho, sampler=sampler)
    state = RoundState(t=0, k=k, sizes=sizes, theta=theta)
    assert_unbiased(aggregate_draws(strat, state, g, reps, rng), theta @ g, sampler)


def test_fedavg_weights_under_privacy_aware_draws_are_biased() -> None:
    """The same Monte Carlo can fail: θ_i/Σ_S θ (FedAvg) under x ∝ ρ is biased toward high-ρ
    clients (the FedPCS ablation's weights), and the check sees it."""
    rng = np.random.default_rng(2)
    n, k = 10, 3
    g = np.zeros((n, 1))
    g[0] = 1.0  # only the highest-ρ client's update is non-zero
    sizes = np.full(n, 50)
    theta = sizes / sizes.sum()
    rho = np.array([12.0] + [0.5] * (n - 1))
    strat = SELECTIONS.create("privacy_aware", rho=rho)
    agg = aggregate_draws(strat, RoundState(t=0, k=k, sizes=sizes, theta=theta), g, 20_000, rng, size_weighted_mean())
    with pytest.raises(AssertionError):
        assert_unbiased(agg, theta @ g)
    assert agg.mean() > 3 * (theta @ g)[0]
