"""zCDP maths: Bun & Steinke conversion, inverse, FedPCS/QI-DPFL calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fedgame.privacy.analysis import (
    eps_to_zcdp,
    fedpcs_noise_std,
    fedpcs_sensitivity,
    gaussian_std_for_zcdp,
    zcdp_of_gaussian,
    zcdp_to_eps,
)

RHOS = [1e-4, 1e-2, 0.1, 0.5, 1.0, 5.0, 12.0, 100.0]
DELTAS = [1e-10, 1e-5, 1e-3, 0.1]


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_to_eps_is_min_over_orders(rho: float, delta: float) -> None:
    """FedPCS acceptance 10: ε(ρ,δ) = min_{a>1} [ρa + ln(1/δ)/(a−1)] to 1e-9 relative."""
    L = math.log(1 / delta)
    a_star = 1 + math.sqrt(L / rho)
    res = minimize_scalar(
        lambda a: rho * a + L / (a - 1),
        bracket=(1 + 0.5 * (a_star - 1), a_star * 1.0001, 2 * a_star),
        tol=1e-12,
    )
    assert zcdp_to_eps(rho, delta) == pytest.approx(res.fun, rel=1e-9)
    assert res.x == pytest.approx(a_star, rel=1e-4)


def test_eps_to_zcdp_roundtrip_and_vectorised() -> None:
    rho = np.array(RHOS)[:, None]
    delta = np.array(DELTAS)[None, :]
    eps = zcdp_to_eps(rho, delta)
    assert isinstance(eps, np.ndarray) and eps.shape == (len(RHOS), len(DELTAS))
    np.testing.assert_allclose(eps_to_zcdp(eps, delta), np.broadcast_to(rho, eps.shape), rtol=1e-12)
    assert eps_to_zcdp(zcdp_to_eps(1e-12, 1e-5), 1e-5) == pytest.approx(1e-12, rel=1e-9)
    assert eps_to_zcdp(0.0, 1e-5) == 0.0
    assert zcdp_to_eps(0.0, 1e-5) == 0.0
    assert zcdp_to_eps(math.inf, 1e-5) == math.inf
    assert isinstance(zcdp_to_eps(1.0, 1e-5), float)


def test_gaussian_zcdp_pair() -> None:
    rho = np.array([0.01, 0.3, 12.0])
    std = gaussian_std_for_zcdp(rho, 0.5)
    np.testing.assert_allclose(std, 0.5 / np.sqrt(2 * rho), rtol=1e-15)
    np.testing.assert_allclose(zcdp_of_gaussian(std, 0.5), rho, rtol=1e-14)
    assert gaussian_std_for_zcdp(0.0, 1.0) == math.inf
    assert zcdp_of_gaussian(0.0, 1.0) == math.inf


def test_fedpcs_noise_std_matches_gaussian_calibration() -> None:
    """FedPCS Prop. 1 / Eq. 46: σ_i = sqrt(2)·W/(|D_i| sqrt(ρ)) = Δ_i/sqrt(2ρ), Δ_i = 2W/|D_i|."""
    rho = np.array([0.01, 0.5, 1.0, 12.0])
    sizes = np.array([600, 800, 1000, 500])
    W = 1.5
    sigma = fedpcs_noise_std(rho, W, sizes)
    np.testing.assert_allclose(sigma, gaussian_std_for_zcdp(rho, 2 * W / sizes), rtol=1e-14)
    np.testing.assert_allclose(sigma, np.sqrt(2) * W / (sizes * np.sqrt(rho)), rtol=1e-15)
    np.testing.assert_allclose(fedpcs_sensitivity(W, sizes), 2 * W / sizes)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: gaussian_std_for_zcdp(-1, 1.0), "rho: must be >= 0, got -1"),
        (lambda: gaussian_std_for_zcdp(1.0, 0.0), "sensitivity: must be > 0"),
        (lambda: zcdp_to_eps(1.0, 1.0), "delta: must be in (0, 1), got 1"),
        (lambda: zcdp_to_eps(np.array([1.0, -2.0]), 1e-5), "rho: must be >= 0, got -2"),
        (lambda: eps_to_zcdp(-0.5, 1e-5), "eps: must be >= 0, got -0.5"),
        (lambda: fedpcs_noise_std(1.0, 1.0, 0), "n_samples: must be >= 1, got 0"),
        (lambda: zcdp_to_eps(float("nan"), 1e-5), "rho: must be a number, got nan"),
    ],
)
def test_errors_name_argument_and_range(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        call()  # type: ignore[operator]
