"""Gaussian mechanism: clipping, noise statistics, reproducibility, events."""

from __future__ import annotations

import math

import pytest
import torch

from fedgame.privacy.analysis import analytic_gaussian_std, fedpcs_noise_std
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.mechanisms import GaussianMechanism, NoPrivacy, clip_by_l2, per_example_clip_factors

N = 1_000_000


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_noise_statistics(dtype: torch.dtype) -> None:
    """FedPCS acceptance 9 / JDP 15 / PHS 3: std within 0.5%, mean within 4σ/sqrt(n), kurtosis."""
    sigma = float(fedpcs_noise_std(0.5, 1.0, 600))
    mech = GaussianMechanism(clip=math.inf, noise_std=sigma)
    x = torch.zeros(N, dtype=dtype)
    noise = mech.add_noise(x, _gen(0)).double()
    assert mech.add_noise(x, _gen(0)).dtype == dtype
    mean = noise.mean().item()
    std = noise.std().item()
    z = (noise - mean) / std
    excess_kurtosis = (z**4).mean().item() - 3.0
    assert abs(std / sigma - 1) < 5e-3
    assert abs(mean) < 4 * sigma / math.sqrt(N)
    assert abs(excess_kurtosis) < 0.05


def test_same_seed_same_noise_different_seed_different() -> None:
    mech = GaussianMechanism(clip=1.0, noise_std=0.3)
    v = torch.randn(1000, generator=_gen(123))
    a = mech.privatize(v, _gen(7))
    b = mech.privatize(v, _gen(7))
    c = mech.privatize(v, _gen(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert (a - c).abs().min() > 0  # every coordinate differs


def test_no_noise_and_large_clip_is_identity() -> None:
    v = torch.randn(257, generator=_gen(1))
    mech = GaussianMechanism(clip=1e9, noise_std=0.0)
    assert torch.equal(mech.privatize(v, _gen(0)), v)
    assert torch.equal(NoPrivacy().privatize(v, _gen(0)), v)
    assert NoPrivacy().event() is None


def test_constrain_untouched_below_clip_and_exact_norm_above() -> None:
    v = torch.randn(10_000, generator=_gen(2))
    norm = torch.linalg.vector_norm(v).item()
    below = GaussianMechanism(clip=norm * 1.0001, noise_std=1.0).constrain(v)
    assert torch.equal(below, v)
    at = clip_by_l2(v, norm)
    assert torch.equal(at, v) or torch.linalg.vector_norm(at).item() == pytest.approx(norm, rel=1e-6)
    for clip in [1e-3, 0.5, 10.0]:
        out = GaussianMechanism(clip=clip, noise_std=1.0).constrain(v)
        assert torch.linalg.vector_norm(out.double()).item() == pytest.approx(clip, rel=1e-6)
        # direction preserved
        cos = torch.nn.functional.cosine_similarity(out.double(), v.double(), dim=0).item()
        assert cos == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(clip_by_l2(torch.zeros(5), 1.0), torch.zeros(5))


def test_per_example_clip_factors() -> None:
    norms = torch.tensor([0.0, 0.5, 1.0, 1.0 + 1e-7, 2.0, 1e6])
    f = per_example_clip_factors(norms, 1.0)
    assert torch.equal(f[:3], torch.ones(3))
    assert torch.allclose(f[3:] * norms[3:], torch.ones(3))
    with pytest.raises(ValueError, match="max_grad_norm: must be > 0 and finite, got 0"):
        per_example_clip_factors(norms, 0.0)


def test_calibrators_and_events() -> None:
    W, n, rho = 1.0, 600, 0.25
    mech = GaussianMechanism.for_zcdp(rho, clip=W, sensitivity=2 * W / n)
    assert mech.noise_std == pytest.approx(fedpcs_noise_std(rho, W, n), rel=1e-15)
    ev = mech.event()
    assert ev.mechanism == "gaussian"
    assert 1 / (2 * ev.params["noise_multiplier"] ** 2) == pytest.approx(rho, rel=1e-12)
    assert mech.event(2 * W / n) == ev

    classic = GaussianMechanism.for_epsilon_delta(1.0, 1e-5, clip=20.0, sensitivity=1.0)
    assert classic.noise_std == pytest.approx(4.844805, abs=1e-6)
    analytic = GaussianMechanism.for_epsilon_delta(1.0, 1e-5, clip=20.0, sensitivity=1.0, calibrator="analytic")
    assert analytic.noise_std == pytest.approx(analytic_gaussian_std(1.0, 1e-5, 1.0), rel=1e-15)
    assert analytic.event() == PrivacyEvent.gaussian(analytic.noise_std)

    with pytest.raises(ValueError, match="sensitivity: required"):
        GaussianMechanism(clip=1.0, noise_std=1.0).event()
    with pytest.raises(ValueError, match="calibrator: must be 'classic' or 'analytic', got 'exact'"):
        GaussianMechanism.for_epsilon_delta(1.0, 1e-5, clip=1.0, sensitivity=1.0, calibrator="exact")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clip: must be > 0, got -1"):
        GaussianMechanism(clip=-1.0, noise_std=1.0)
    with pytest.raises(ValueError, match="noise_std: must be >= 0 and finite, got -0.1"):
        GaussianMechanism(clip=1.0, noise_std=-0.1)
    with pytest.raises(ValueError, match="rho: must be > 0 and finite, got 0"):
        GaussianMechanism.for_zcdp(0.0, clip=1.0, sensitivity=1.0)
