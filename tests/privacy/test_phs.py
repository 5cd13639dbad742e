"""PHS paper calibration (Eq. 6–7, Lemmas 1–2), spec phs.md §3.3 and §3.5."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fedgame.privacy.analysis import (
    phs_epsilon_prime,
    phs_epsilon_spent,
    phs_noise_multiplier,
    phs_sigma,
    phs_V,
)

# phs.md §3.3 table: |M| = 600, B = 128 (so r = B/|M| = 0.21333…, printed 0.2133), δ = 1e-5.
M, B, DELTA = 600, 128, 1e-5
R = B / M
TABLE = [  # ε_k, k, ε'_k, V_k, z paper
    (0.1, 50, 0.4008, 2.7523e-2, 150.157),
    (0.5, 10, 1.3965, 2.5795e-3, 20.558),
    (0.5, 50, 1.3965, 2.5795e-3, 45.969),
    (1.0, 50, 2.2033, 1.0821e-3, 29.774),
    (2.0, 50, 3.4323, 4.6426e-4, 19.502),
    (10.0, 50, 11.5449, 4.5479e-5, 6.104),
]


@pytest.mark.parametrize(("eps", "k", "eps_prime", "V", "z"), TABLE)
def test_table_of_section_3_3(eps: float, k: int, eps_prime: float, V: float, z: float) -> None:
    assert round(phs_epsilon_prime(eps, R), 4) == pytest.approx(eps_prime, abs=1e-12)
    assert float(f"{phs_V(eps, DELTA, R, M):.4e}") == pytest.approx(V, rel=1e-12)
    assert round(phs_noise_multiplier(eps, DELTA, R, k), 3) == pytest.approx(z, abs=1e-12)


def test_sigma_V_and_z_relations() -> None:
    """phs.md acceptance 2: σ² = V k C², z = σ B / C (rel. 1e-12)."""
    eps = np.array([0.1, 0.5, 1.0, 2.0, 10.0])
    C, k = 1.7, 50
    V = phs_V(eps, DELTA, R, M)
    sigma = phs_sigma(eps, DELTA, R, M, k, C)
    np.testing.assert_allclose(sigma**2, V * k * C**2, rtol=1e-12)
    np.testing.assert_allclose(sigma * B / C, phs_noise_multiplier(eps, DELTA, R, k), rtol=1e-12)


def test_golden_example_of_section_3_5() -> None:
    sizes = np.array([500, 600, 700, 550, 650])
    eps = np.array([0.2, 0.5, 1, 5, 10])
    r = 64 / sizes
    V = phs_V(eps, DELTA, r, sizes)
    np.testing.assert_allclose(V, [1.83256e-2, 5.06985e-3, 2.23849e-3, 4.33395e-4, 1.50679e-4], rtol=5e-6)
    z = phs_noise_multiplier(eps, DELTA, r, 20 * 5)
    np.testing.assert_allclose(z, [86.6382, 45.5698, 30.2801, 13.3236, 7.85608], rtol=5e-6)


def test_forward_map_inverts_calibration() -> None:
    """phs.md acceptance 4: ε ∈ [1e-3, 30], r ∈ [0.01, 1], k ∈ [1, 2000] → rel. 1e-9."""
    eps = np.array([1e-3, 0.05, 0.5, 2.0, 10.0, 30.0])[:, None, None]
    r = np.array([0.01, 0.2, 1.0])[None, :, None]
    k = np.array([1, 50, 2000])[None, None, :]
    z = phs_noise_multiplier(eps, 1e-5, r, k)
    back = phs_epsilon_spent(z, k, r, 1e-5)
    np.testing.assert_allclose(back, np.broadcast_to(eps, back.shape), rtol=1e-9)


def test_public_data_and_limits() -> None:
    assert phs_epsilon_prime(math.inf, 0.3) == math.inf
    assert phs_V(math.inf, 1e-5, 0.3, 100) == 0.0
    assert phs_sigma(math.inf, 1e-5, 0.3, 100, 50, 1.0) == 0.0
    assert phs_noise_multiplier(math.inf, 1e-5, 0.3, 50) == 0.0
    assert phs_epsilon_spent(0.0, 50, 0.3, 1e-5) == math.inf
    assert phs_epsilon_prime(0.7, 1.0) == pytest.approx(0.7, rel=1e-15)  # r = 1: Lemma 1 is the identity
    # large ε: no overflow
    assert phs_epsilon_prime(800.0, 0.5) == pytest.approx(800.0 + math.log(2.0), rel=1e-15)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: phs_V(0.0, 1e-5, 0.2, 600), "eps: must be > 0"),
        (lambda: phs_V(-1.0, 1e-5, 0.2, 600), "eps: must be > 0"),
        (lambda: phs_V(1.0, 0.0, 0.2, 600), "delta: must be > 0, got 0"),
        (lambda: phs_V(1.0, 0.5, 0.2, 600), "delta: must satisfy delta/r <= 1"),
        (lambda: phs_V(1.0, 1e-5, 0.0, 600), "r: must be in (0, 1], got 0"),
        (lambda: phs_V(1.0, 1e-5, 1.5, 600), "r: must be in (0, 1], got 1.5"),
        (lambda: phs_V(1.0, 1e-5, 0.2, 0), "n_samples: must be >= 1, got 0"),
        (lambda: phs_noise_multiplier(1.0, 1e-5, 0.2, 0), "steps: must be >= 1, got 0"),
        (lambda: phs_sigma(1.0, 1e-5, 0.2, 600, 10, -1.0), "clip: must be > 0 and finite, got -1"),
        (lambda: phs_epsilon_spent(-1.0, 10, 0.2, 1e-5), "z: must be >= 0, got -1"),
        (lambda: phs_epsilon_prime(np.array([0.5, -0.1]), 0.2), "eps: must be > 0"),
    ],
)
def test_invalid_inputs_raise_naming_the_argument(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()  # type: ignore[operator]
