"""The PHS participation schedule (phs.md §3.6, A5; acceptance checks 12, 13): K slots per
round drawn with replacement before training, counts T_k, chi-square frequencies, and the plain
mean / phs_ic aggregations over fixed client deltas."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from fedgame.core.server_update import RoundContext
from fedgame.core.types import RoundState
from fedgame.selection import PHSSchedule, draw_schedule, planned_counts
from fedgame.sim import AGGREGATORS

P = np.array([0.05, 0.1, 0.15, 0.3, 0.4])


def _state(t: int, k: int = 3) -> RoundState:
    sizes = np.array([100, 200, 300, 400, 500])
    return RoundState(t=t, k=k, sizes=sizes, theta=sizes / sizes.sum())


def test_schedule_shape_counts_and_determinism() -> None:
    s = PHSSchedule(p=P, rounds=40, k=3, rng=np.random.default_rng(7))
    assert s.schedule.shape == (40, 3)
    assert s.counts.sum() == 3 * 40
    np.testing.assert_array_equal(s.counts, np.bincount(s.schedule.ravel(), minlength=5))
    again = PHSSchedule(p=P, rounds=40, k=3, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(s.schedule, again.schedule)
    other = PHSSchedule(p=P, rounds=40, k=3, rng=np.random.default_rng(8))
    assert not np.array_equal(s.schedule, other.schedule)
    sel = s.select(_state(5), np.random.default_rng(0))
    np.testing.assert_array_equal(sel.indices, s.schedule[5])
    assert sel.independent_copies and sel.scheme == "draws"
    np.testing.assert_allclose(sel.probs, P[s.schedule[5]])
    np.testing.assert_array_equal(s.participation_bound(), s.counts)


def test_slot_frequencies_pass_a_chi_square_test() -> None:
    sched = draw_schedule(P, 3, 100_000, np.random.default_rng(0))
    obs = np.bincount(sched.ravel(), minlength=5)
    assert stats.chisquare(obs, P * obs.sum()).pvalue > 1e-3


def test_expected_count_mode_caps_every_client() -> None:
    """A5: counts ⌈p_k K T^g⌉ known before training and never exceeded by the schedule."""
    s = PHSSchedule(p=P, rounds=20, k=3, rng=np.random.default_rng(1), count_mode="expected")
    np.testing.assert_array_equal(s.counts, planned_counts(P, 3, 20))
    np.testing.assert_array_equal(s.counts, [3, 6, 9, 18, 24])
    assert np.all(s.realized_counts <= s.counts) and s.realized_counts.sum() == 60


def test_planned_counts_do_not_round_integers_up() -> None:
    np.testing.assert_array_equal(planned_counts(np.array([0.2, 0.3, 0.5]), 10, 50), [100, 150, 250])
    np.testing.assert_array_equal(planned_counts(np.array([0.201, 0.299, 0.5]), 10, 50), [101, 150, 250])


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="selection.probabilities: must sum to 1"):
        PHSSchedule(p=np.array([0.5, 0.6]), rounds=3, k=1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="selection.count_mode"):
        PHSSchedule(p=P, rounds=3, k=1, rng=np.random.default_rng(0), count_mode="mean")  # type: ignore[arg-type]
    s = PHSSchedule(p=P, rounds=3, k=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"train.clients_per_round: the PHS schedule has K = 2"):
        s.select(_state(0, k=3), np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"train.rounds: the PHS schedule has T\^g = 3 rounds"):
        s.select(_state(3, k=2), np.random.default_rng(0))


def _aggregate(kind: str, sel: object, theta: np.ndarray, deltas: torch.Tensor) -> torch.Tensor:
    upd = AGGREGATORS.get(kind)()
    ctx = RoundContext(t=0, selection=sel, theta=theta, params=torch.zeros(deltas.shape[1]), rng=np.random.default_rng(0))  # type: ignore[arg-type]
    out, _ = upd.update([deltas[int(c)] for c in sel.indices], upd.init(torch.zeros(1)), ctx)  # type: ignore[attr-defined]
    return out[0]


def test_mean_aggregation_is_the_slot_mean_and_targets_p_s() -> None:
    """Check 13: each server update is exactly the mean over slots; over many schedules its mean
    is Σ p^s_k Δ_k (F^b), and phs_ic (importance weights p^u/(K p^s)) gives Σ p^u_k Δ_k."""
    st = _state(0)
    deltas = torch.tensor(np.random.default_rng(2).normal(size=(5, 3)))
    rounds = 20_000
    s = PHSSchedule(p=P, rounds=rounds, k=3, rng=np.random.default_rng(3))
    sel = s.select(st, np.random.default_rng(0))
    torch.testing.assert_close(_aggregate("mean", sel, st.theta, deltas), deltas[sel.indices].mean(0))
    d = deltas.numpy()
    means = d[s.schedule].mean(1)  # (rounds, dim): the plain-mean update of every round, vectorised
    w = st.theta[s.schedule] / (3 * P[s.schedule])
    ic = (w[..., None] * d[s.schedule]).sum(1)
    for got, target in ((means, P @ d), (ic, st.theta @ d)):
        se = got.std(0, ddof=1) / np.sqrt(rounds)
        assert np.all(np.abs(got.mean(0) - target) <= 4 * se)
    torch.testing.assert_close(_aggregate("importance", sel, st.theta, deltas), torch.tensor(ic[0]))
