"""The PHS privacy plan (phs.md §3.2-3.3; acceptance checks 2, 3, 6, 7, 14): per-client noise
from Eq. 6-7 for the count fixed before training, noise of the calibrated scale in the actual
DP-SGD steps, Poisson batches with a fixed denominator, and the three accountants per client."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from fedgame.models import build_model
from fedgame.privacy.analysis.phs import phs_V
from fedgame.privacy.plans import PHSDPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer


def _plan(**over: object) -> PHSDPSGD:
    kw: dict[str, object] = dict(
        eps=np.array([0.1, 0.5, 1.0, 2.0, 10.0]),
        delta=1e-5,
        sizes=np.full(5, 600),
        batch_size=128,
        local_steps=5,
        counts=np.array([10, 10, 10, 10, 10]),
    )
    kw.update(over)
    return PHSDPSGD(**kw)  # type: ignore[arg-type]


def test_noise_multipliers_are_the_papers_table() -> None:
    """§3.3 table (|M| = 600, B = 128, k = T_k T^l = 50): z paper, and σ² = V k C² (Eq. 6)."""
    plan = _plan()
    np.testing.assert_allclose(plan.z, [150.157, 45.969, 29.774, 19.502, 6.104], atol=6e-4)  # printed digits
    r = 128 / 600
    np.testing.assert_allclose(plan.sigma**2, phs_V(plan.eps, 1e-5, r, 600) * 50, rtol=1e-12)
    np.testing.assert_allclose(plan.z, plan.sigma * 128 / 1.0, rtol=1e-12)


def test_three_accountants_paper_spends_its_budget_tight_ones_far_less() -> None:
    """Check 6: at the paper's z, the paper's forward map returns ε_k and PLD/RDP give the table's
    spends (ε ≤ ε_k); the tight calibration meets ε_k with less noise."""
    plan = _plan()
    e = plan.epsilons(1e-5, steps=plan.total_steps)
    np.testing.assert_allclose(e["eps_paper"], plan.eps, rtol=1e-9)
    np.testing.assert_allclose(e["eps_pld"][[0, 2, 3, 4]], [0.0274, 0.1635, 0.2603, 0.9524], rtol=0.02)
    np.testing.assert_allclose(e["eps_rdp"][[0, 2, 3, 4]], [0.0324, 0.1847, 0.2880, 1.0472], rtol=0.01)
    assert np.all(e["eps_pld"] <= plan.eps) and np.all(e["eps_rdp"] <= plan.eps)
    tight = _plan(calibration="pld")
    assert np.all(tight.z < plan.z / 2)
    et = tight.epsilons(1e-5, steps=tight.total_steps)
    assert np.all(et["eps_pld"] <= plan.eps * (1 + 1e-3)) and np.all(et["eps_pld"] > 0.95 * plan.eps)


def test_public_data_and_unselected_clients_get_no_noise() -> None:
    plan = _plan(eps=np.array([math.inf, 0.5, 1.0, 2.0, 10.0]), counts=np.array([3, 0, 2, 2, 2]))
    assert plan.z[0] == 0 and plan.z[1] == 0 and np.all(plan.z[2:] > 0)
    assert plan.events(0, 0, 600, 5) == []
    e = plan.epsilons(1e-5, steps=np.array([15, 0, 10, 10, 10]))
    assert e["eps_pld"][0] == 0 and e["eps_paper"][1] == 0


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"eps": np.array([0.1, -1, 1, 2, 3])}, r"privacy.budgets: every ε_k must be > 0"),
        ({"delta": 0.5}, r"privacy.delta: must satisfy delta/r_k <= 1"),
        ({"batch_size": 0}, r"train.local.batch_size: must be >= 1, got 0"),
        ({"calibration": "moments"}, r"privacy.calibration: must be 'paper', 'pld' or 'rdp'"),
    ],
)
def test_bad_input_names_the_field(over: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _plan(**over)


def _noise(plan: PHSDPSGD, client: int, seed: int) -> tuple[torch.Tensor, float]:
    """One DP step with and without noise from the same start: the parameter difference is
    −lr · ξ, ξ ~ N(0, σ_k²) per coordinate (σ_k on the averaged clipped gradient)."""
    model = build_model("phs_mnist_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
    x, y = torch.randn(600, 1, 28, 28), torch.randint(0, 10, (600,))
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    lr = 0.05
    tr = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=128, lr=lr, epochs=None, steps=1))
    dp = plan.dpsgd(client, 0, 600)
    noisy = tr.train(start, torch.arange(600), torch.Generator().manual_seed(seed), dp)
    clean = tr.train(start, torch.arange(600), torch.Generator().manual_seed(seed), type(dp)(dp.max_grad_norm, 0.0, dp.sampling))
    return (noisy.params - clean.params).double() / -lr, float(plan.sigma[client])


@pytest.mark.parametrize("fixed_batch", [False, True])
def test_noise_added_has_the_calibrated_std(fixed_batch: bool) -> None:
    """Check 3: chi-square test of the sample variance against σ_k² at level 1e-3 (26 010
    coordinates); fixed_batch doubles σ."""
    plan = _plan(fixed_batch=fixed_batch)
    xi, sigma = _noise(plan, 3, seed=1)
    assert sigma == pytest.approx((2 if fixed_batch else 1) * 19.502 / 128, rel=5e-5)
    n = xi.numel()
    stat = float((xi**2).sum()) / sigma**2  # mean is known to be 0: n degrees of freedom
    assert stats.chi2.ppf(5e-4, n) < stat < stats.chi2.ppf(1 - 5e-4, n)
    assert abs(float(xi.mean())) < 4 * sigma / math.sqrt(n)


def test_noise_is_independent_across_steps_and_copies() -> None:
    plan = _plan()
    a, _ = _noise(plan, 2, seed=1)
    b, _ = _noise(plan, 2, seed=2)
    r = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    assert abs(r) < 4 / math.sqrt(a.numel())


def test_poisson_batches_have_mean_b_and_binomial_variance() -> None:
    """Check 14: realised batch sizes over many steps, mean B and variance B(1 − r)."""
    model = build_model("logreg", in_shape=(1, 2, 2), num_classes=2, seed=0)
    tr = LocalTrainer(
        model=model,
        x=torch.zeros(600, 1, 2, 2),
        y=torch.zeros(600, dtype=torch.long),
        spec=LocalSpec(batch_size=128, lr=0.1, epochs=None, steps=1),
    )
    dp = _plan().dpsgd(0, 0, 600)
    sizes = np.array([b.numel() for b in tr._dp_batches(torch.arange(600), torch.Generator().manual_seed(0), 20_000, dp)])
    r = 128 / 600
    assert abs(sizes.mean() - 128) < 4 * math.sqrt(128 * (1 - r) / sizes.size)
    assert abs(sizes.var() / (128 * (1 - r)) - 1) < 4 * math.sqrt(2 / sizes.size)
    fixed = _plan(fixed_batch=True).dpsgd(0, 0, 600)
    batches = tr._dp_batches(torch.arange(600), torch.Generator().manual_seed(0), 50, fixed)
    assert all(b.numel() == 128 and b.unique().numel() == 128 for b in batches)
