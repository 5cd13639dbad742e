"""Classic and analytic Gaussian calibration (Dwork & Roth Thm A.1; Balle & Wang 2018)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from fedgame.privacy.analysis import analytic_gaussian_std, classic_gaussian_std, gaussian_delta


def test_classic_reference_values(caplog: pytest.LogCaptureFixture) -> None:
    """JDP-FL eq. 6 / acceptance 13: σ(1, 1e-5, 1) = 4.844805; record and client modes."""
    with caplog.at_level(logging.WARNING):
        assert classic_gaussian_std(1.0, 1e-5, 1.0) == pytest.approx(4.844805, abs=1e-6)
        assert classic_gaussian_std(1.0, 1e-5, 2 * 20 / 2950) == pytest.approx(0.065692, abs=1e-6)
        assert classic_gaussian_std(1.0, 1e-5, 2 * 20) == pytest.approx(193.792, abs=1e-3)
    assert "proven only for eps < 1" in caplog.text


def test_classic_no_warning_below_one(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        classic_gaussian_std(np.array([0.1, 0.9]), 1e-5, 1.0)
    assert caplog.text == ""


EPS = [0.01, 0.1, 0.5, 0.99, 2.0, 10.0, 50.0]
DELTAS = [1e-12, 1e-8, 1e-5, 1e-2, 0.5]


@pytest.mark.parametrize("delta", DELTAS)
def test_analytic_condition_holds_with_equality(delta: float) -> None:
    sigma = analytic_gaussian_std(np.array(EPS), delta, 1.0)
    for e, s in zip(EPS, sigma, strict=True):
        assert gaussian_delta(e, s, 1.0) == pytest.approx(delta, rel=1e-9)
        assert gaussian_delta(e, s, 1.0) <= delta * (1 + 1e-12)
        # minimal: slightly less noise violates the condition
        assert gaussian_delta(e, s * (1 - 1e-6), 1.0) > delta


def test_analytic_below_classic_and_scales_with_sensitivity() -> None:
    eps = np.array([0.01, 0.1, 0.5, 0.9])
    for delta in [1e-8, 1e-5, 1e-3]:
        assert np.all(analytic_gaussian_std(eps, delta, 1.0) < classic_gaussian_std(eps, delta, 1.0))
    assert analytic_gaussian_std(1.0, 1e-5, 3.0) == pytest.approx(3 * analytic_gaussian_std(1.0, 1e-5, 1.0), rel=1e-14)
    # Balle & Wang 2018 Fig. 1 region: ε = 1, δ = 1e-5 needs σ ≈ 3.73 (classic: 4.84)
    assert analytic_gaussian_std(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=1e-4)
    assert analytic_gaussian_std(math.inf, 1e-5, 1.0) == 0.0


def test_gaussian_delta_limits_and_errors() -> None:
    assert gaussian_delta(1.0, 0.0, 1.0) == 1.0
    d = gaussian_delta(np.array([0.5, 1.0, 2.0]), 3.0, 1.0)
    assert np.all(np.diff(d) < 0)
    with pytest.raises(ValueError, match=r"eps: must be > 0, got -1"):
        analytic_gaussian_std(-1.0, 1e-5, 1.0)
    with pytest.raises(ValueError, match=r"delta: must be in \(0, 1\), got 0"):
        classic_gaussian_std(0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"std: must be >= 0, got -1"):
        gaussian_delta(1.0, -1.0, 1.0)


def test_analytic_calibration_is_dp_accountings_and_certified() -> None:
    """σ agrees with dp-accounting's exact Gaussian calibration to 1e-12 (relative) over a grid of
    (ε, δ), and always satisfies Balle & Wang's condition δ(σ) ≤ δ exactly (the library's root
    alone sometimes sits a hair below it)."""
    from dp_accounting.gaussian_mechanism import get_sigma_gaussian

    from fedgame.privacy.analysis.gaussian import analytic_gaussian_std, gaussian_delta

    eps = np.array([0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 50.0])
    delta = np.array([1e-3, 1e-5, 1e-9])
    e, d = np.meshgrid(eps, delta)
    ours = analytic_gaussian_std(e, d, 1.0)
    lib = np.vectorize(get_sigma_gaussian)(e, d)
    np.testing.assert_allclose(ours, lib, rtol=1e-12)
    assert np.all(gaussian_delta(e, ours, 1.0) <= d)
    np.testing.assert_allclose(analytic_gaussian_std(e, d, 2.5), 2.5 * ours, rtol=1e-15)
