"""JDP-FL ledger (spec jdp.md §3.7, A2, A8; check 21): Theorem 5 per round, basic composition
over T rounds, the RDP figure of the Gaussian part."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fedgame.privacy.accountants import make_accountant
from fedgame.privacy.analysis import (
    exponential_epsilon,
    gaussian_rdp_epsilon,
    jdp_paper_total,
    jdp_rdp_total,
    jdp_round_guarantee,
    jdp_totals,
    m3_noise_std,
)
from fedgame.privacy.events import PrivacyEvent

Z = float(m3_noise_std(1.0, 1e-5, 1.0))  # σ/Δ₂f of the classic calibration at ε_L = 1, δ = 1e-5


def _plain_rdp_brute(rounds: int, z: float, delta: float) -> float:
    """min over α > 1 of [Tα/(2z²) + ln(1/δ)/(α − 1)], numerically."""
    f = lambda a: rounds * a / (2 * z * z) + math.log(1 / delta) / (a - 1)  # noqa: E731
    res = minimize_scalar(f, bounds=(1 + 1e-9, 1e6), method="bounded", options={"xatol": 1e-12})
    return float(res.fun)


def test_round_and_paper_totals() -> None:
    assert jdp_round_guarantee(1.0, 0.5, 1e-5) == (1.5, 1e-5)
    eps, delta = jdp_paper_total(30, 1.0, 1.0, 1e-5)
    assert eps == 60.0 and delta == pytest.approx(30e-5, rel=1e-15)
    for T in (1, 7, 50):
        e, d = jdp_paper_total(T, 0.2, 0.3, 1e-6)
        assert e == pytest.approx(T * 0.5) and d == pytest.approx(T * 1e-6)


def test_rdp_reference_and_below_paper_for_T_at_least_10() -> None:
    assert Z == pytest.approx(4.844805, abs=1e-6)
    assert gaussian_rdp_epsilon(30, Z, 30 * 1e-5) == pytest.approx(5.19, abs=0.01)  # spec: ≈ 5.2
    for T in range(10, 101, 5):
        e = gaussian_rdp_epsilon(T, Z, T * 1e-5)
        assert e < T * 1.0
        assert e == pytest.approx(_plain_rdp_brute(T, Z, T * 1e-5), rel=1e-6)
    # at T = 1 the plain conversion exceeds ε_L (the classic calibration is loose the other way)
    assert gaussian_rdp_epsilon(1, Z, 1e-5) > 1.0
    # the RDP accountant (Balle et al. 2020 conversion) is tighter still
    acc = make_accountant("rdp", n_clients=1)
    acc.record([0], PrivacyEvent.gaussian(Z), 30)
    assert acc.epsilon(0, 30e-5) <= gaussian_rdp_epsilon(30, Z, 30e-5)


def test_rdp_total_and_record() -> None:
    eps, delta = jdp_rdp_total(30, Z, 1.0, 1e-5)
    assert delta == pytest.approx(30e-5)
    assert eps == pytest.approx(gaussian_rdp_epsilon(30, Z, 30e-5) + 30.0)
    t = jdp_totals(30, eps_local=1.0, eps_exp=1.0, delta=1e-5, noise_multiplier=Z)
    assert (t.round_epsilon, t.round_delta) == (2.0, 1e-5)
    assert t.paper_epsilon == 60.0 and t.total_delta == pytest.approx(30e-5)
    assert t.rdp_epsilon == pytest.approx(eps) and t.gaussian_rdp_epsilon < t.paper_epsilon
    assert gaussian_rdp_epsilon(5, 0.0, 1e-5) == math.inf


def test_exponential_epsilon_of_the_paper_sensitivity() -> None:
    """A2: run with Δy = 1/(m−1) on accuracy scores (Δy_true = 1) ⇒ ε' = (m−1) ε_E."""
    assert exponential_epsilon(1.0, sensitivity_used=1 / 19) == pytest.approx(19.0)
    assert exponential_epsilon(0.5, sensitivity_used=1.0) == 0.5
    np.testing.assert_allclose(exponential_epsilon(np.array([1.0, 2.0]), sensitivity_used=0.5, sensitivity_true=0.25), [0.5, 1.0])


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: jdp_paper_total(0, 1.0, 1.0, 1e-5), "rounds"),
        (lambda: jdp_paper_total(2.5, 1.0, 1.0, 1e-5), "rounds"),  # type: ignore[arg-type]
        (lambda: jdp_paper_total(10, 0.0, 1.0, 1e-5), "eps_local"),
        (lambda: jdp_paper_total(10, 1.0, -1.0, 1e-5), "eps_exp"),
        (lambda: jdp_paper_total(10, 1.0, 1.0, 0.0), "delta"),
        (lambda: jdp_paper_total(10**6, 1.0, 1.0, 1e-5), "rounds \\* delta"),
        (lambda: gaussian_rdp_epsilon(10, -1.0, 1e-5), "noise_multiplier"),
        (lambda: jdp_rdp_total(10, 1.0, 1.0, 0.2), "rounds \\* delta"),
        (lambda: exponential_epsilon(1.0, sensitivity_used=0.0), "sensitivity_used"),
        (lambda: m3_noise_std(1.0, 1e-5, 1.0, calibrator="exact"), "calibrator"),  # type: ignore[arg-type]
    ],
)
def test_bad_inputs_name_the_field(call, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=f"^{field}: must"):
        call()
