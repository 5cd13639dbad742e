"""Per-client budget distributions of PHS A12 (spec check 17): ranges, shares, moments, errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fedgame.privacy.budgets import (
    BUDGET_KINDS,
    ConstantBudget,
    ListBudget,
    MixtureBudget,
    UniformBudget,
    draw_budgets,
    parse_budget,
)

N = 100_000
LEVEL = 1e-3
#: Figs. 4-6 case 1: 0.3 N(0.5, 0.04) + 0.7 N(10, 1), the second number a variance (A12).
CASE1 = {"kind": "mixture", "components": [{"weight": 0.3, "mean": 0.5, "var": 0.04}, {"weight": 0.7, "mean": 10, "var": 1}]}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_kinds() -> None:
    assert BUDGET_KINDS == ("uniform", "mixture", "constant", "list")


def test_uniform_draws_are_in_the_open_interval() -> None:
    """U(0, 1) (Tables III-IV): 1e5 draws in (0, 1), passing a KS test at 1e-3."""
    eps = draw_budgets({"kind": "uniform", "low": 0, "high": 1}, N, rng(1))
    assert eps.shape == (N,) and eps.dtype == np.float64
    assert np.all((eps > 0) & (eps < 1))
    assert stats.kstest(eps, "uniform").pvalue > LEVEL
    shifted = draw_budgets({"kind": "uniform", "low": 2, "high": 5}, N, rng(1))
    assert np.all((shifted > 2) & (shifted < 5))


class _ZerosFirst(np.random.Generator):
    """A generator whose first ``uniform`` call returns ``low`` for every even index."""

    def __init__(self) -> None:
        super().__init__(np.random.PCG64(0))
        self.calls = 0

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        self.calls += 1
        out = super().uniform(low, high, size)
        if self.calls == 1:
            out[::2] = low
        return out


def test_uniform_redraws_exact_zeros() -> None:
    g = _ZerosFirst()
    eps = draw_budgets({"kind": "uniform", "low": 0, "high": 1}, 10, g)
    assert g.calls == 2 and np.all(eps > 0)  # one redraw pass, for the five zeros only


def test_mixture_share_and_component_moments() -> None:
    """Case-1 mixture, 1e5 draws: all > 0; the share of the low component (values < 4) passes a
    two-sided binomial test at 1e-3; each component's mean and std are ≈ (0.5, 0.2), (10, 1).

    The references are those of N(m, v) *truncated at 0*, because draws ≤ 0 are redrawn with
    their component: P(N(0.5, 0.2²) ≤ 0) = Φ(-2.5) = 0.62%, so the low share is
    0.3(1 - Φ(-2.5)) / (1 - 0.3 Φ(-2.5)) = 0.2981 and the low mean 0.5035, std 0.1966.
    """
    eps = draw_budgets(CASE1, N, rng(2))
    assert np.all(eps > 0) and np.all(np.isfinite(eps))
    low = eps < 4.0  # 6 standard deviations from both components
    cut = stats.norm.cdf(-2.5)
    share = 0.3 * (1 - cut) / (1 - 0.3 * cut)
    assert stats.binomtest(int(low.sum()), N, share).pvalue > LEVEL
    assert abs(low.mean() - 0.3) < 0.01
    tn = stats.truncnorm(a=(0 - 0.5) / 0.2, b=np.inf, loc=0.5, scale=0.2)
    for values, mean, std in ((eps[low], tn.mean(), tn.std()), (eps[~low], 10.0, 1.0)):
        se = std / math.sqrt(values.size)
        assert abs(values.mean() - mean) < 4 * se
        assert abs(values.std(ddof=1) - std) < 4 * std / math.sqrt(2 * (values.size - 1))
    assert eps[low].mean() == pytest.approx(0.5, abs=0.01) and eps[low].std() == pytest.approx(0.2, abs=0.01)
    assert eps[~low].mean() == pytest.approx(10, abs=0.02) and eps[~low].std() == pytest.approx(1, abs=0.02)


def test_mixture_redraw_includes_the_component_choice() -> None:
    """0.5 N(0.1, 1) + 0.5 N(10, 1): half of the first component is rejected. Redrawing the
    component too gives it the share 0.5 Φ(0.1) / (0.5 Φ(0.1) + 0.5) ≈ 0.3513 of the accepted
    draws; keeping the component would give 0.5. Its values follow N(0.1, 1) truncated at 0."""
    spec = {"kind": "mixture", "components": [{"weight": 0.5, "mean": 0.1, "var": 1}, {"weight": 0.5, "mean": 10, "var": 1}]}
    eps = draw_budgets(spec, N, rng(3))
    assert np.all(eps > 0)
    first = eps < 5.0  # P(N(10,1) < 5) ≈ 3e-7; P(N(0.1,1) ≥ 5) ≈ 5e-7
    keep = stats.norm.cdf(0.1)
    assert stats.binomtest(int(first.sum()), N, 0.5 * keep / (0.5 * keep + 0.5)).pvalue > LEVEL
    tn = stats.truncnorm(a=-0.1, b=np.inf, loc=0.1, scale=1.0)
    assert stats.kstest(eps[first], tn.cdf).pvalue > LEVEL


def test_mixture_case2_and_zero_variance() -> None:
    """Fig. 6 case 2, 0.3 N(2, 0.04) + 0.7 N(8, 1); a zero variance is a point mass."""
    spec = {"kind": "mixture", "components": [{"weight": 0.3, "mean": 2, "var": 0.04}, {"weight": 0.7, "mean": 8, "var": 1}]}
    eps = draw_budgets(spec, N, rng(4))
    low = eps < 3.0
    assert stats.binomtest(int(low.sum()), N, 0.3).pvalue > LEVEL
    assert eps[low].mean() == pytest.approx(2, abs=0.01) and eps[low].std() == pytest.approx(0.2, abs=0.01)
    point = draw_budgets({"kind": "mixture", "components": [{"weight": 1, "mean": 3, "var": 0}]}, 5, rng())
    np.testing.assert_array_equal(point, 3.0)


def test_same_seed_same_budgets() -> None:
    for spec in (CASE1, {"kind": "uniform", "low": 0, "high": 1}):
        np.testing.assert_array_equal(draw_budgets(spec, 1000, rng(9)), draw_budgets(spec, 1000, rng(9)))
        assert not np.array_equal(draw_budgets(spec, 1000, rng(9)), draw_budgets(spec, 1000, rng(10)))


def test_constant_and_list_with_public_data() -> None:
    np.testing.assert_array_equal(draw_budgets({"kind": "constant", "value": 0.5}, 3, rng()), [0.5] * 3)
    assert np.all(np.isinf(draw_budgets({"kind": "constant", "value": "inf"}, 2, rng())))
    eps = draw_budgets({"kind": "list", "values": [0.5, "inf", 2, float("inf")]}, 4, rng())
    np.testing.assert_array_equal(eps, [0.5, np.inf, 2.0, np.inf])
    with pytest.raises(ValueError, match=r"budget.values: must hold one value per client \(5\), got 4"):
        draw_budgets({"kind": "list", "values": [0.5, "inf", 2, 1]}, 5, rng())


def test_parsed_forms() -> None:
    b = parse_budget(CASE1)
    assert isinstance(b, MixtureBudget) and b.components[1].var == 1.0 and parse_budget(b) is b
    assert isinstance(parse_budget({"kind": "uniform", "low": 0, "high": 1}), UniformBudget)
    assert isinstance(parse_budget({"kind": "constant", "value": 1}), ConstantBudget)
    assert isinstance(parse_budget({"kind": "list", "values": (1, 2)}), ListBudget)
    np.testing.assert_array_equal(draw_budgets(b, 50, rng(1)), draw_budgets(CASE1, 50, rng(1)))


def _mix(**first: Any) -> dict[str, Any]:
    comp = {"weight": 0.3, "mean": 0.5, "var": 0.04, **first}
    return {"kind": "mixture", "components": [comp, {"weight": 0.7, "mean": 10, "var": 1}]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "uniform", "low": -1, "high": 1}, r"budget.low: must be >= 0 and finite, got -1"),
        ({"kind": "uniform", "low": 1, "high": 1}, r"budget.high: must be finite and > budget.low \(1\), got 1"),
        ({"kind": "uniform", "low": 0, "high": float("inf")}, r"budget.high: must be finite and > budget.low \(0\), got inf"),
        ({"kind": "uniform", "low": 0, "high": "x"}, r"budget.high: must be a number, got 'x'"),
        ({"kind": "uniform", "low": 0}, r"budget.high: required for kind 'uniform'"),
        ({"kind": "uniform", "low": 0, "high": 1, "mean": 2}, r"budget.mean: not a field of kind 'uniform'; allowed: low, high"),
        ({"kind": "normal"}, r"budget.kind: must be one of uniform, mixture, constant, list, got 'normal'"),
        ([0.5, 1.0], r"budget: must be a mapping with a 'kind'"),
        (_mix(var=-0.04), r"budget.components\[0\].var: must be >= 0 and finite \(it is the variance\), got -0.04"),
        (_mix(mean=0), r"budget.components\[0\].mean: must be > 0 and finite \(draws <= 0 are redrawn\), got 0"),
        (_mix(weight=0), r"budget.components\[0\].weight: must be in \(0, 1\], got 0"),
        (_mix(weight=0.4), r"budget.components: weights must sum to 1 \(to 1e-9\), got 1.1"),
        (_mix(weight=float("nan")), r"budget.components\[0\].weight: must be a number, got nan"),
        (_mix(std=0.2), r"budget.components\[0\]: needs exactly the keys weight, mean, var; missing \[\], unknown \['std'\]"),
        ({"kind": "mixture", "components": []}, r"budget.components: must be a non-empty list"),
        ({"kind": "constant", "value": 0}, r"budget.value: must be > 0 \(or inf for public data\), got 0"),
        ({"kind": "constant", "value": True}, r"budget.value: must be a number, got True"),
        ({"kind": "list", "values": [1, -2]}, r"budget.values\[1\]: must be > 0 \(or inf for public data\), got -2"),
        ({"kind": "list", "values": [1, "public"]}, r"budget.values\[1\]: must be a number, got 'public'"),
        ({"kind": "list", "values": []}, r"budget.values: must be a non-empty list"),
    ],
)
def test_bad_specs_name_the_field(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        draw_budgets(spec, 4, rng())


def test_bad_count_and_generator() -> None:
    with pytest.raises(ValueError, match=r"n: must be an integer >= 1, got 0"):
        draw_budgets(CASE1, 0, rng())
    with pytest.raises(ValueError, match=r"n: must be an integer >= 1, got 2.0"):
        draw_budgets(CASE1, 2.0, rng())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"rng: must be a numpy.random.Generator, got int"):
        draw_budgets(CASE1, 2, 0)  # type: ignore[arg-type]
