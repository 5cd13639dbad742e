"""JDP-FL client side (spec jdp.md §3.4, §3.6, §3.7): M3 calibration, clipping and noise
(checks 13-15), M5 (checks 19-20), the round's privacy events."""

from __future__ import annotations

import inspect
import logging
import math

import numpy as np
import pytest
import torch
from scipy import stats

from fedgame.privacy.accountants import make_accountant
from fedgame.privacy.analysis import m3_sensitivity
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.jdp import jdp_events, jdp_local_update, local_perturbation, perturb
from fedgame.robust import group_sums, leave_one_out_aggregate

Z_REF = 4.844805  # sqrt(2 ln(1.25e5)): σ for ε = 1, δ = 1e-5, Δ = 1


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- M3 calibration (check 13) -----------------------------------------------------------------
def test_m3_calibration_reference_values(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        unit = local_perturbation(epsilon=1.0, delta=1e-5, clip=20.0, sensitivity=1.0)
        record = local_perturbation(epsilon=1.0, delta=1e-5, clip=20.0, n_examples=2950)
        client = local_perturbation(epsilon=1.0, delta=1e-5, clip=20.0, sensitivity="client")
    assert unit.noise_std == pytest.approx(Z_REF, abs=1e-6)
    assert record.noise_std == pytest.approx(0.065692, abs=1e-6)
    assert client.noise_std == pytest.approx(193.792, abs=1e-3)
    assert record.clip == client.clip == 20.0
    assert record.sensitivity == pytest.approx(40 / 2950) and client.sensitivity == 40.0
    assert "proven only for eps < 1" in caplog.text
    # the event is the Gaussian release with z = σ/Δ₂f, the same for every reading of Δ₂f
    for mech in (unit, record, client):
        assert mech.event().mechanism == "gaussian"
        assert mech.event()["noise_multiplier"] == pytest.approx(Z_REF, abs=1e-6)


def test_m3_no_warning_below_one_and_analytic_is_smaller(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        classic = local_perturbation(epsilon=0.5, delta=1e-5, clip=20.0, n_examples=2950)
    assert caplog.text == ""
    analytic = local_perturbation(epsilon=0.5, delta=1e-5, clip=20.0, n_examples=2950, calibrator="analytic")
    assert 0 < analytic.noise_std < classic.noise_std
    assert classic.noise_std == pytest.approx(2 * 0.065692, abs=2e-6)  # σ ∝ 1/ε


def test_m3_sensitivity_readings_and_errors() -> None:
    assert m3_sensitivity("record", clip=20.0, n_examples=2950) == pytest.approx(2 * 20 / 2950)
    assert m3_sensitivity("client", clip=20.0) == 40.0
    assert m3_sensitivity(0.5, clip=20.0) == 0.5
    np.testing.assert_allclose(m3_sensitivity("record", clip=50.0, n_examples=np.array([100, 200])), [1.0, 0.5])
    with pytest.raises(ValueError, match="n_examples: required"):
        m3_sensitivity("record", clip=20.0)
    with pytest.raises(ValueError, match="sensitivity: must be 'record', 'client' or a number"):
        m3_sensitivity("example", clip=20.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sensitivity: must be > 0"):
        m3_sensitivity(-1.0, clip=20.0)
    with pytest.raises(ValueError, match="clip: must be > 0"):
        m3_sensitivity("client", clip=0.0)
    with pytest.raises(ValueError, match="n_examples: must be >= 1"):
        m3_sensitivity("record", clip=1.0, n_examples=0)
    with pytest.raises(ValueError, match="eps: must be > 0"):
        local_perturbation(epsilon=0.0, delta=1e-5, clip=1.0, sensitivity="client")
    with pytest.raises(ValueError, match="delta: must be in"):
        local_perturbation(epsilon=1.0, delta=1.0, clip=1.0, sensitivity="client")
    with pytest.raises(ValueError, match="calibrator"):
        local_perturbation(epsilon=0.5, delta=1e-5, clip=1.0, sensitivity="client", calibrator="rdp")  # type: ignore[arg-type]


# -- M3 clipping (check 14) ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_m3_clipping(dtype: torch.dtype) -> None:
    mech = local_perturbation(epsilon=0.5, delta=1e-5, clip=20.0, n_examples=2950)
    big = torch.randn(21_840, generator=_gen(1), dtype=dtype) * 3.0  # norm ≈ 443
    out = perturb(big, mech, _gen(2))
    norm = float(torch.linalg.vector_norm(out.clipped, dtype=torch.float64))
    assert out.clip_active and norm <= 20.0 * (1 + 1e-6) and norm == pytest.approx(20.0, rel=1e-6)
    # direction kept
    cos = float(torch.nn.functional.cosine_similarity(out.clipped.double(), big.double(), dim=0))
    assert cos == pytest.approx(1.0, abs=1e-6)
    small = big * (19.0 / float(torch.linalg.vector_norm(big, dtype=torch.float64)))
    kept = perturb(small, mech, _gen(3))
    assert not kept.clip_active and torch.equal(kept.clipped, small)
    assert kept.upload.dtype == dtype and not torch.equal(kept.upload, small)
    with pytest.raises(ValueError, match="theta: must be a flat"):
        perturb(big.reshape(2, -1), mech, _gen(0))


# -- M3 noise (check 15) -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_m3_noise_matches_calibrated_scale(dtype: torch.dtype) -> None:
    n = 1_200_000
    mech = local_perturbation(epsilon=0.5, delta=1e-5, clip=20.0, n_examples=2950)
    sigma = mech.noise_std
    theta = torch.randn(n, generator=_gen(10), dtype=dtype)  # norm ≈ 1095 > C: clipping binds
    out = perturb(theta, mech, _gen(11))
    noise = (out.upload.double() - out.clipped.double()).numpy()
    s2 = float(noise.var(ddof=1))
    assert abs(math.sqrt(s2) / sigma - 1) < 5e-3
    chi2 = (n - 1) * s2 / sigma**2  # ~ χ²_{n−1} when the noise std is σ
    p = 2 * min(stats.chi2.cdf(chi2, n - 1), stats.chi2.sf(chi2, n - 1))
    assert p > 1e-3
    assert abs(float(noise.mean())) < 5 * sigma / math.sqrt(n)
    z = (noise - noise.mean()) / math.sqrt(s2)
    assert abs(float((z**4).mean()) - 3.0) < 0.05  # Gaussian: excess kurtosis 0


def test_m3_same_seed_same_upload() -> None:
    mech = local_perturbation(epsilon=1.0, delta=1e-5, clip=1.0, n_examples=100)
    theta = torch.randn(1000, generator=_gen(0))
    a, b, c = (perturb(theta, mech, _gen(s)) for s in (5, 5, 6))
    assert torch.equal(a.upload, b.upload) and not torch.equal(a.upload, c.upload)


# -- M5 (checks 19, 20) --------------------------------------------------------------------------
def _round(m: int = 6, p: int = 50, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor], np.ndarray]:
    """Clipped un-noised θ_i, noisy uploads θ̂_i (float64) and data sizes of one round."""
    g = torch.Generator().manual_seed(seed)
    own = [torch.randn(p, generator=g, dtype=torch.float64) for _ in range(m)]
    up = [t + 0.3 * torch.randn(p, generator=g, dtype=torch.float64) for t in own]
    sizes = np.random.default_rng(seed).integers(50, 500, size=m).astype(float)
    return own, up, sizes


def _forced(up: list[torch.Tensor], sizes: np.ndarray, k_star: int):  # type: ignore[no-untyped-def]
    """M4 with k* forced: group k* scores 1, the others 0, ε = ∞ (the argmax)."""
    scores = np.zeros(len(up))
    scores[k_star] = 1.0
    return leave_one_out_aggregate(up, sizes, scores, epsilon=math.inf, rng=np.random.default_rng(0))


def test_m5_left_out_client_gets_the_exact_average() -> None:
    own, up, sizes = _round()
    k = 2
    sel = _forced(up, sizes, k)
    assert sel.chosen == k
    expect = (sum(sizes[j] * up[j] for j in range(6) if j != k) + sizes[k] * own[k]) / sizes.sum()
    for mode in ("add", "replace"):
        got = jdp_local_update(sel.agg, sel.total, own[k], sizes[k], self_weighting=mode, upload=up[k], member=sel.contains(k))
        torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-12)


def test_m5_members_add_and_replace_formulas() -> None:
    own, up, sizes = _round(seed=1)
    k = 4
    sel = _forced(up, sizes, k)
    agg = sum(sizes[j] * up[j] for j in range(6) if j != k)
    tot = sum(sizes[j] for j in range(6) if j != k)
    for i in (0, 1, 5):
        assert sel.contains(i)
        add = jdp_local_update(sel.agg, sel.total, own[i], sizes[i])
        torch.testing.assert_close(add, (agg + sizes[i] * own[i]) / (tot + sizes[i]), rtol=1e-12, atol=1e-12)
        rep = jdp_local_update(sel.agg, sel.total, own[i], sizes[i], self_weighting="replace", upload=up[i], member=True)
        torch.testing.assert_close(rep, (agg - sizes[i] * up[i] + sizes[i] * own[i]) / tot, rtol=1e-12, atol=1e-12)


def test_m5_dtype_and_errors() -> None:
    agg = torch.ones(4, dtype=torch.float64) * 10
    theta = torch.zeros(4, dtype=torch.float32)
    out = jdp_local_update(agg, 10.0, theta, 10.0)
    assert out.dtype == torch.float32 and torch.equal(out, torch.full((4,), 0.5))
    with pytest.raises(ValueError, match="agg: must have theta's shape"):
        jdp_local_update(torch.ones(3), 1.0, theta, 1.0)
    with pytest.raises(ValueError, match="total: must be > 0"):
        jdp_local_update(agg, 0.0, theta, 1.0)
    with pytest.raises(ValueError, match="n_examples: must be > 0"):
        jdp_local_update(agg, 1.0, theta, -2.0)
    with pytest.raises(ValueError, match="replace.*member"):
        jdp_local_update(agg, 10.0, theta, 1.0, self_weighting="replace")
    with pytest.raises(ValueError, match="total: must be >= n_examples"):
        jdp_local_update(agg, 1.0, theta, 2.0, self_weighting="replace", upload=theta, member=True)
    with pytest.raises(ValueError, match="self_weighting"):
        jdp_local_update(agg, 1.0, theta, 1.0, self_weighting="mean")  # type: ignore[arg-type]


def test_m5_billboard_structure() -> None:
    """Check 20: M5 reads only (agg, sum, θ_i, d_i); with k* fixed, changing client a's upload
    moves every other client's output exactly as recomputing it from the new signal does."""
    params = list(inspect.signature(jdp_local_update).parameters.values())
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == ["agg", "total", "theta", "n_examples"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[4:])  # replace-mode extras only

    own, up, sizes = _round(m=7, seed=3)
    k, a = 1, 5
    before = _forced(up, sizes, k)
    up2 = list(up)
    up2[a] = up[a] + torch.linspace(-3, 3, up[a].numel(), dtype=torch.float64)
    after = _forced(up2, sizes, k)
    assert after.chosen == before.chosen == k and after.total == before.total
    direct_agg, direct_sum = group_sums(up2, sizes, after.members[None, :])
    torch.testing.assert_close(after.agg, direct_agg[0], rtol=1e-12, atol=1e-10)
    for b in range(7):
        if b == a:
            continue
        for mode in ("add", "replace"):
            kw = {"self_weighting": mode, "upload": up[b], "member": after.contains(b)}
            new = jdp_local_update(after.agg, after.total, own[b], sizes[b], **kw)
            recomputed = jdp_local_update(direct_agg[0], float(direct_sum[0]), own[b], sizes[b], **kw)
            torch.testing.assert_close(new, recomputed, rtol=1e-12, atol=1e-10)
            old = jdp_local_update(before.agg, before.total, own[b], sizes[b], **kw)
            denom = before.total + (sizes[b] if mode == "add" or not after.contains(b) else 0.0)
            torch.testing.assert_close(new - old, sizes[a] * (up2[a] - up[a]) / denom, rtol=1e-9, atol=1e-10)


# -- events ---------------------------------------------------------------------------------------
def test_round_events_and_paper_ledger() -> None:
    mech = local_perturbation(epsilon=1.0, delta=1e-5, clip=20.0, n_examples=2950)
    ev = jdp_events(mech, eps_exp=1.0)
    assert ev == [(PrivacyEvent.gaussian(mech.noise_std / mech.sensitivity), 1), (PrivacyEvent.exponential(1.0), 1)]  # type: ignore[operator]
    paper = jdp_events(mech, eps_exp=0.5, accounting="paper", eps_local=1.0, delta=1e-5)
    assert paper == [(PrivacyEvent.approx_dp(1.0, 1e-5), 1), (PrivacyEvent.approx_dp(0.5, 0.0), 1)]
    T = 30
    acc = make_accountant("zcdp", n_clients=2)
    for _ in range(T):
        for e, c in paper:
            acc.record([0], e, c)
        for e, c in ev:
            acc.record([1], e, c)
    assert acc.epsilon(0, T * 1e-5) == pytest.approx(T * 1.5, rel=1e-12)  # (T(ε_L+ε_E), Tδ)
    assert acc.epsilon(1, T * 1e-5) < T * 2.0  # the mechanisms' own ledger is tighter
    with pytest.raises(ValueError, match="eps_local"):
        jdp_events(mech, eps_exp=1.0, accounting="paper")
    with pytest.raises(ValueError, match="eps_exp: must be > 0"):
        jdp_events(mech, eps_exp=0.0)
    with pytest.raises(ValueError, match="accounting"):
        jdp_events(mech, eps_exp=1.0, accounting="rdp")  # type: ignore[arg-type]
