"""QI-DPFL's privacy and training checks (qidpfl.md §6, checks 17-20) as one suite: the noise of
Eq. 10 at its calibrated scale, the clipping of paper_update mode, the additive zCDP ledger and
its ε conversion, and the aggregators with noise off."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize

from fedgame.core.server_update import RoundContext
from fedgame.core.types import Selection
from fedgame.privacy.accountants import make_accountant
from fedgame.privacy.analysis import zcdp_to_eps
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.plans import ZCDPUpload
from fedgame.sim import AGGREGATORS


def test_check17_noise_has_sigma_sqrt2_c_over_d_sqrt_rho() -> None:
    """σ_i(t) = √2 C/(|D_i| √ρ_i^t): 10⁶ coordinates, std within 0.5 %, mean within 4σ/10³,
    excess kurtosis within ±0.05; same seed same noise, different seeds different noise.
    ``scale = 1`` so the mechanism acts on g itself."""
    rho, c, n = 0.3, 1.0, 50
    plan = ZCDPUpload(rho=rho, clip=c, sizes=np.array([n]), scale=1.0)
    sigma = math.sqrt(2) * c / (n * math.sqrt(rho))
    assert plan.noise_std(0, 0, n) == pytest.approx(sigma, rel=1e-12)
    mech = plan.upload(0, 0, n)
    zero = torch.zeros(1_000_000)
    a = mech.privatize(zero, torch.Generator().manual_seed(1)).double()
    assert abs(float(a.std()) / sigma - 1) < 0.005
    assert abs(float(a.mean())) < 4 * sigma / 1e3
    kurt = float(((a - a.mean()) ** 4).mean() / a.var() ** 2) - 3
    assert abs(kurt) < 0.05
    assert torch.equal(a, mech.privatize(zero, torch.Generator().manual_seed(1)).double())
    assert not torch.equal(a, mech.privatize(zero, torch.Generator().manual_seed(2)).double())


def test_check18_paper_update_clips_the_update() -> None:
    """paper_update: the uploaded displacement is clipped to s·C before the noise (s = lr × steps)."""
    plan = ZCDPUpload(rho=1e12, clip=1.0, sizes=np.array([100]), scale=0.5)  # noise negligible
    big = torch.full((1000,), 1.0)
    out = plan.upload(0, 0, 100).constrain(big)
    assert float(out.norm()) <= 0.5 * (1 + 1e-6)
    small = torch.full((1000,), 1e-4)
    torch.testing.assert_close(plan.upload(0, 0, 100).constrain(small), small)


def test_check19_ledger_adds_rho_and_converts_to_epsilon() -> None:
    """ρ_i^tot = Σ_{t: i∈S_t} ρ_i^t; non-participants' ledgers do not move; ε_DP(ρ, δ) = ρ +
    2√(ρ ln 1/δ) equals min_{a>1}[ρa + ln(1/δ)/(a−1)] (1e-9)."""
    acc = make_accountant("zcdp", n_clients=3)
    rounds = [{0: 0.1, 1: 0.2}, {0: 0.05}, {1: 0.3}]
    for r in rounds:
        for i, rho in r.items():
            acc.record([i], PrivacyEvent.zcdp(rho), 1)
    eps = acc.epsilons(1e-5)
    for i, total in enumerate([0.15, 0.5, 0.0]):
        assert eps[i] == pytest.approx(zcdp_to_eps(total, 1e-5) if total else 0.0, rel=1e-12)
    for rho in (1e-4, 0.1, 2.0, 50.0):
        best = optimize.minimize_scalar(
            lambda a: rho * a + math.log(1e5) / (a - 1), bounds=(1 + 1e-12, 1e9), method="bounded", options={"xatol": 1e-12}
        )
        assert zcdp_to_eps(rho, 1e-5) == pytest.approx(best.fun, rel=1e-9)


def test_check20_aggregators_with_noise_off() -> None:
    """The DP methods' aggregate is the uniform mean over participants; FedAvg is Eq. 2's
    data-size weighted mean over the round's clients (1e-6)."""
    rng = np.random.default_rng(0)
    theta = np.array([0.1, 0.2, 0.3, 0.4])
    ups = [torch.tensor(rng.normal(size=5)) for _ in range(4)]
    sel = Selection(indices=np.array([0, 2, 3]), probs=np.ones(3), k=3, scheme="inclusion")
    ctx = RoundContext(t=0, selection=sel, theta=theta, params=torch.zeros(5), rng=rng)
    slot = [ups[i] for i in sel.indices]
    mean = AGGREGATORS.get("mean")()
    out, _ = mean.update(slot, mean.init(torch.zeros(5)), ctx)
    torch.testing.assert_close(out[0], torch.stack(slot).mean(0), atol=1e-6, rtol=0)
    fedavg = AGGREGATORS.get("fedavg")()
    out, _ = fedavg.update(slot, fedavg.init(torch.zeros(5)), ctx)
    w = theta[sel.indices] / theta[sel.indices].sum()
    torch.testing.assert_close(out[0], sum(float(wi) * u for wi, u in zip(w, slot)), atol=1e-6, rtol=0)
