"""Central DP-FedAvg (``privacy.kind: central_dp``, :mod:`fedgame.privacy.central`): the server's
noise has the std its formula gives (z·C, or z_Δ·C with adaptive clipping), updates are clipped
to C and no further, the adaptive clip finds the target quantile of a stream of norms, the
reported ε is dp-accounting's for the round's sampled Gaussian, bad recipes are refused in one
line, and a small run reports that ε.

Statistics are vectorised (10^5 draws in one call) and seeded; tolerances are 4 standard errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy.stats import norm as normal

from fedgame.core.server_update import RoundContext
from fedgame.core.types import Selection
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.privacy.accountants import Accountant, PLDAccountant, RDPAccountant, ZCDPAccountant
from fedgame.privacy.central import (
    AdaptiveClip,
    CentralDP,
    CentralGaussian,
    calibrate_central_dp,
    central_dp_epsilon,
    round_event,
    update_noise_multiplier,
)
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.plans import PRIVACY_PLANS, accounting_label

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")

DRAWS = 100_000


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))


def _updates(norms: list[float], d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Updates of the given norms in random directions, and (known in closed form) each one
    clipped to C = 1: the same direction at norm min(‖Δ‖, 1)."""
    g = torch.Generator().manual_seed(seed)
    dirs = torch.randn((len(norms), d), generator=g, dtype=torch.float64)
    dirs = dirs / torch.linalg.vector_norm(dirs, dim=1, keepdim=True)
    n = torch.tensor(norms, dtype=torch.float64)[:, None]
    return (dirs * n).float(), (dirs * n.clamp(max=1.0)).float()


# -- 1. the noise std matches its formula ---------------------------------------------------------
@pytest.mark.parametrize(
    ("z", "clip", "sigma_b", "seed"),
    [(1.0, 1.0, None, 1), (0.7, 2.5, None, 2), (1.0, 1.0, 0.6, 3), (2.0, 0.5, 5.0, 4)],
    ids=["fixed", "fixed-C2.5", "adaptive-sigma_b0.6", "adaptive-sigma_b5"],
)
def test_noised_sum_has_the_formula_std_and_the_true_mean(z: float, clip: float, sigma_b: float | None, seed: int) -> None:
    """10^5 draws of the noised sum of 5 fixed updates (2 above C): per-coordinate mean within 4
    SE of the true clipped sum, pooled std within 4 SE of z·C (adaptive: of z_Δ·C with
    z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), written out here)."""
    adaptive = None if sigma_b is None else AdaptiveClip(target_quantile=0.5, clipped_count_stddev=sigma_b)
    mech = CentralGaussian(noise_multiplier=z, clip=clip, expected_clients=5, adaptive=adaptive)
    updates, unit_clipped = _updates([0.3, 3.0, 0.9, 10.0, 0.05])
    updates, truth = updates * clip, (unit_clipped.double() * clip).sum(0)
    z_expected = z if sigma_b is None else (z**-2 - (2 * sigma_b) ** -2) ** -0.5
    assert mech.update_noise_multiplier == pytest.approx(z_expected, rel=1e-12)
    sigma = z_expected * clip

    clipped, _ = mech.clip_updates(updates)
    draws = mech.noised_sum(clipped, torch.Generator().manual_seed(seed), draws=DRAWS).double()
    assert draws.shape == (DRAWS, updates.shape[1])
    mean_err = (draws.mean(0) - truth).abs()
    assert bool((mean_err < 4 * sigma / math.sqrt(DRAWS)).all()), (mean_err, sigma)
    n = draws.numel()
    std = float((draws - truth).pow(2).mean().sqrt())
    assert abs(std - sigma) < 4 * sigma / math.sqrt(2 * n), (std, sigma)


def test_release_noise_on_the_mean_is_z_update_c_over_m() -> None:
    """Through :meth:`CentralGaussian.release` (the path a round takes): 10^5 coordinates of
    zero updates from m = 4 clients, mean·m has std z_Δ·C; and the noisy count b̄ has std σ_b/m
    over 10^5 draws around the true unclipped fraction."""
    z, clip, m, sigma_b = 1.0, 2.0, 4, 0.75
    mech = CentralGaussian(
        noise_multiplier=z, clip=clip, expected_clients=m, adaptive=AdaptiveClip(target_quantile=0.5, clipped_count_stddev=sigma_b)
    )
    rel = mech.release(torch.zeros((m, DRAWS)), torch.Generator().manual_seed(2))
    sigma = update_noise_multiplier(z, sigma_b) * clip
    assert rel.noise_std == pytest.approx(sigma)
    noise = rel.mean.double() * m
    assert abs(float(noise.mean())) < 4 * sigma / math.sqrt(DRAWS)
    assert abs(float(noise.std()) - sigma) < 4 * sigma / math.sqrt(2 * DRAWS)

    assert mech.adaptive is not None
    bits = torch.tensor([True, False, True, True])  # true unclipped fraction 3/4
    frac = mech.adaptive.noised_fraction(bits, m, torch.Generator().manual_seed(3), draws=DRAWS)
    assert abs(float(frac.mean()) - 0.75) < 4 * (sigma_b / m) / math.sqrt(DRAWS)
    assert abs(float(frac.std()) - sigma_b / m) < 4 * (sigma_b / m) / math.sqrt(2 * DRAWS)


# -- 2. clipping ------------------------------------------------------------------------------
def test_updates_above_the_clip_are_scaled_to_it_and_the_rest_untouched() -> None:
    clip = 1.0
    updates, unit_clipped = _updates([0.3, 3.0, 1.0, 10.0, 0.0, 1.0000001])
    mech = CentralGaussian(noise_multiplier=1.0, clip=clip, expected_clients=6)
    clipped, unclipped = mech.clip_updates(updates)
    norms = torch.linalg.vector_norm(updates.double(), dim=1)
    assert unclipped.tolist() == (norms <= clip).tolist()
    for i in range(updates.shape[0]):
        if norms[i] <= clip:
            assert torch.equal(clipped[i], updates[i])  # bit-identical
        else:
            assert float(torch.linalg.vector_norm(clipped[i].double())) == pytest.approx(clip, rel=1e-6)
            torch.testing.assert_close(clipped[i].double(), unit_clipped[i].double(), rtol=1e-6, atol=1e-7)


# -- 3. the adaptive clip converges to the target quantile --------------------------------------
@pytest.mark.parametrize("gamma", [0.2, 0.5, 0.8])
def test_adaptive_clip_converges_to_the_target_quantile(gamma: float) -> None:
    """16 independent seeded streams of 300 rounds, m = 100 clients whose update norms are
    lognormal(0, 1) (γ-quantile exp(Φ⁻¹(γ))), count noise on (σ_b = m/20, the default),
    η_C = 0.2, each starting 10x above the quantile. The final clip wobbles around the quantile
    with a sd of about 4.5 % in log (measured over 100 streams: 3.7-4.2 %; the sampling noise of
    100 norms and the count noise σ_b/m = 0.05 on b̄): the geometric mean of the 16 final clips
    is within 4 standard errors (4.5 %) of the true quantile, and every stream's final clip
    within 20 % (4.5 sd)."""
    m, rounds, streams, sd = 100, 300, 16, 0.045
    truth = math.exp(normal.ppf(gamma))
    mech = CentralGaussian(
        noise_multiplier=1.0, clip=10 * truth, expected_clients=m, adaptive=AdaptiveClip(target_quantile=gamma, clip_lr=0.2)
    )
    assert mech.count_stddev == pytest.approx(m / 20)
    finals = []
    for s in range(streams):
        rng = np.random.default_rng([10, s])
        gen = torch.Generator().manual_seed(1000 + s)
        clip = mech.clip
        for _ in range(rounds):
            norms = rng.lognormal(0.0, 1.0, size=m)
            signs = rng.choice([-1.0, 1.0], size=(m, 2))
            updates = torch.as_tensor(signs * (norms[:, None] / math.sqrt(2)), dtype=torch.float32)  # ‖Δ_i‖ = norms[i]
            clip = mech.release(updates, gen, clip=clip).next_clip
        finals.append(clip)
    log_err = np.log(np.array(finals) / truth)
    assert abs(float(log_err.mean())) < 4 * sd / math.sqrt(streams), (gamma, np.exp(log_err.mean()), truth)
    assert float(np.abs(log_err).max()) < 0.2, (gamma, finals, truth)


# -- 4. ε is dp-accounting's for the round's event -----------------------------------------------
def _direct_poisson(z: float, q: float, rounds: int, delta: float) -> float:
    acc = rdp.RdpAccountant()
    step = dp_event.GaussianDpEvent(z) if q == 1 else dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))
    acc.compose(dp_event.SelfComposedDpEvent(step, rounds))
    return float(acc.get_epsilon(delta))


def _direct_fixed_size(z: float, n: int, m: int, rounds: int, delta: float) -> float:
    """m of n without replacement is replace-one adjacency in dp-accounting; replacing one
    client moves the sum of updates clipped to C by up to 2C, so noise z·C is multiplier z/2."""
    acc = rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(n, m, dp_event.GaussianDpEvent(z / 2)), rounds))
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(("z", "n", "m", "rounds"), [(1.1, 1000, 10, 100), (0.8, 100, 20, 30), (1.0, 50, 50, 10)])
def test_epsilon_poisson_matches_dp_accounting(z: float, n: int, m: int, rounds: int) -> None:
    got = central_dp_epsilon(z, population_size=n, sample_size=m, rounds=rounds, delta=1e-5, sampling="poisson")
    assert got == pytest.approx(_direct_poisson(z, m / n, rounds, 1e-5), rel=1e-9)


@pytest.mark.parametrize(("z", "n", "m", "rounds"), [(1.0, 100, 10, 50), (2.0, 5, 2, 3)])
def test_epsilon_fixed_size_matches_dp_accounting(z: float, n: int, m: int, rounds: int) -> None:
    got = central_dp_epsilon(z, population_size=n, sample_size=m, rounds=rounds, delta=1e-5, sampling="fixed_size")
    assert got == pytest.approx(_direct_fixed_size(z, n, m, rounds, 1e-5), rel=1e-9)


def _ctx(t: int, k: int, dim: int, metrics: dict[str, float]) -> RoundContext:
    sel = Selection(indices=np.arange(k), probs=np.full(k, 0.5), k=k, scheme="inclusion")
    return RoundContext(t=t, selection=sel, theta=np.full(k, 1 / k), params=torch.zeros(dim), rng=np.random.default_rng(t), metrics=metrics)


@pytest.mark.parametrize("adaptive", [False, True])
def test_the_plan_charges_every_client_each_release_and_reports_dp_accountings_epsilon(adaptive: bool) -> None:
    """The run's path: the plan's server update over T rounds charges each of the N clients once
    per round, sampled or not, at the requested z (adaptive clipping raises only the update's
    noise), so every client's ε is the direct dp-accounting value."""
    n, m, z, rounds, delta = 20, 4, 1.2, 12, 1e-5
    ad = AdaptiveClip(target_quantile=0.5, clipped_count_stddev=2.0) if adaptive else None
    plan = CentralDP(n_clients=n, clients_per_round=m, noise_multiplier=z, clip=1.0, adaptive=ad, sampling="fixed_size")
    assert plan.events(0, 0, 100, 5) == [] and plan.upload(0, 0, 100) is None and plan.dpsgd(0, 0, 100) is None
    acc = RDPAccountant(n_clients=n)
    su = plan.server_update(acc)
    state = su.init(torch.zeros(3))
    clips = []
    for t in range(rounds):
        metrics: dict[str, float] = {}
        ups = [torch.full((3,), 2.0 * (i + 1)) for i in range(m)]
        out, state = su.update(ups, state, _ctx(t, m, 3, metrics))
        assert out[0].shape == (3,) and bool(torch.isfinite(out[0]).all())
        clips.append(metrics["dp_clip"])
        assert ("dp_unclipped_fraction" in metrics) == adaptive
    assert all(acc.ledger(i).total_count() == rounds for i in range(n))
    eps = acc.epsilons(delta)
    assert np.all(eps == eps[0])
    assert eps[0] == pytest.approx(_direct_fixed_size(z, n, m, rounds, delta), rel=1e-9)
    assert (len(set(clips)) > 1) == adaptive  # every update is clipped: an adaptive clip grows
    assert accounting_label(plan) == "formal"


def test_an_empty_round_releases_the_noise_alone_and_is_charged() -> None:
    """No upload (an empty Poisson sample, or no reply): the server still releases
    N(0, (zC)² I)/m and charges every client (what the engine does once it calls the server
    update on empty rounds for plans with ``releases_empty_rounds``)."""
    plan = CentralDP(n_clients=10, clients_per_round=2, noise_multiplier=1.5, clip=2.0)
    assert plan.releases_empty_rounds
    acc = RDPAccountant(n_clients=10)
    su = plan.server_update(acc)
    out, _ = su.update([], su.init(torch.zeros(DRAWS)), _ctx(0, 2, DRAWS, {}))
    sigma = 1.5 * 2.0 / 2
    assert abs(float(out[0].double().std()) - sigma) < 4 * sigma / math.sqrt(2 * DRAWS)
    assert all(acc.ledger(i).total_count() == 1 for i in range(10))


def test_the_server_update_refuses_a_round_of_another_size() -> None:
    plan = CentralDP(n_clients=10, clients_per_round=3, noise_multiplier=1.0, clip=1.0)
    su = plan.server_update(RDPAccountant(n_clients=10))
    with pytest.raises(RuntimeError, match="calibrated for 3 clients per round, the selection drew k = 2"):
        su.update([torch.zeros(2)] * 2, su.init(torch.zeros(2)), _ctx(0, 2, 2, {}))


def test_sampling_without_replacement_is_refused_by_zcdp_and_pld_and_not_mixed() -> None:
    ev = round_event(1.0, population_size=10, sample_size=3, sampling="fixed_size")
    assert ev == PrivacyEvent.wor_subsampled_gaussian(0.5, 3, 10)
    refusing: list[Accountant] = [ZCDPAccountant(n_clients=2), PLDAccountant(n_clients=2)]
    for acc in refusing:
        with pytest.raises(ValueError, match="use accountant 'rdp'"):
            acc.record([0], ev)
    rdp_acc = RDPAccountant(n_clients=2)
    rdp_acc.record([0], ev)
    with pytest.raises(ValueError, match="one adjacency relation only"):
        rdp_acc.record([0], PrivacyEvent.gaussian(1.0))
    rdp_acc.record([1], PrivacyEvent.gaussian(1.0))
    with pytest.raises(ValueError, match="one adjacency relation only"):
        rdp_acc.record([1], ev)


def test_update_noise_multiplier_needs_twice_the_count_std_above_z() -> None:
    assert update_noise_multiplier(1.0, 0.6) == pytest.approx((1 - 1 / 1.44) ** -0.5)
    with pytest.raises(ValueError, match=r"privacy.adaptive.clipped_count_stddev: must be > privacy.noise_multiplier / 2 = 0.5"):
        update_noise_multiplier(1.0, 0.5)


# -- 5. recipe refusals ---------------------------------------------------------------------------
def tiny(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiny",
        "seed": 0,
        "data": {"dataset": "fashion_mnist", "max_train": 1000, "max_test": 200, "partition": {"kind": "iid", "n_clients": 5}},
        "model": {"name": "logreg"},
        "train": {"rounds": 2, "clients_per_round": 2, "workers": 1, "threads": 1, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
        "selection": {"kind": "uniform", "replace": False},
        "accountant": {"kind": "rdp", "delta": 1e-5},
    }
    raw.update(over)
    return raw


def cdp(**fields: Any) -> dict[str, Any]:
    return {"kind": "central_dp", "noise_multiplier": 1.0, "clip": 1.0, **fields}


def test_the_design_recipe_reads() -> None:
    cfg = parse_recipe(tiny(privacy=cdp(adaptive={"target_quantile": 0.5, "clip_lr": 0.2, "clipped_count_stddev": 1.0})))
    assert isinstance(cfg.privacy, CentralDP.Config) and cfg.privacy.adaptive is not None
    assert cfg.privacy.adaptive.clipped_count_stddev == 1.0
    fixed = parse_recipe(tiny(privacy=cdp(adaptive=None))).privacy
    assert isinstance(fixed, CentralDP.Config) and fixed.adaptive is None
    assert "central_dp" in PRIVACY_PLANS


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"privacy": cdp(noise_multiplier=0)}, r"privacy.noise_multiplier: Input should be greater than 0, got 0"),
        ({"privacy": cdp(noise_multiplier=-1.0)}, r"privacy.noise_multiplier: Input should be greater than 0, got -1.0"),
        ({"privacy": cdp(clip=0)}, r"privacy.clip: Input should be greater than 0, got 0"),
        (
            {"privacy": cdp(adaptive={"target_quantile": 1.0, "clipped_count_stddev": 5})},
            r"privacy.adaptive.target_quantile: Input should be less than 1, got 1.0",
        ),
        (
            {"privacy": cdp(adaptive={"target_quantile": 0, "clipped_count_stddev": 5})},
            r"privacy.adaptive.target_quantile: Input should be greater than 0, got 0",
        ),
        (
            {"privacy": cdp(adaptive={"clip_lr": 0, "clipped_count_stddev": 5})},
            r"privacy.adaptive.clip_lr: Input should be greater than 0, got 0",
        ),
        (
            {"privacy": cdp(adaptive={"clipped_count_stddev": -0.1})},
            r"privacy.adaptive.clipped_count_stddev: Input should be greater than or equal to 0, got -0.1",
        ),
        (
            {"privacy": cdp(adaptive={"clipped_count_stddev": 0.4})},
            r"privacy.adaptive.clipped_count_stddev: must be > privacy.noise_multiplier / 2 = 0.5 .*got 0.4$",
        ),
        (
            {"privacy": cdp(adaptive={})},  # default m/20 = 0.1 with 2 clients per round
            r"privacy.adaptive.clipped_count_stddev: must be > privacy.noise_multiplier / 2 = 0.5 .*got 0.1 \(the default",
        ),
        (
            {"privacy": cdp(), "selection": {"kind": "uniform", "replace": True}},
            r"selection.kind: privacy.kind 'central_dp' is accounted for 'uniform' sampling without replacement",
        ),
        ({"privacy": cdp(), "selection": {"kind": "data_size"}}, r"selection.kind: .*got 'data_size'"),
        ({"privacy": cdp(), "accountant": {"kind": "pld", "delta": 1e-5}}, r"accountant.kind: .*use 'rdp', got 'pld'"),
        ({"privacy": cdp(), "aggregation": {"kind": "importance"}}, r"aggregation.kind: .*got 'importance'"),
        ({"privacy": cdp(), "accountant": {"kind": "rdp", "delta": 0.3}}, r"accountant.delta: must be < 1/N = 0.2"),
    ],
)
def test_bad_recipes_are_refused_in_one_line(over: dict[str, Any], match: str) -> None:
    with pytest.raises(RecipeError, match=match) as err:
        parse_recipe(tiny(**over))
    assert "\n" not in str(err.value)


# -- 6. a run reports the accountant's ε ----------------------------------------------------------
@needs_fmnist
@pytest.mark.parametrize("adaptive", [None, {"target_quantile": 0.5, "clip_lr": 0.2, "clipped_count_stddev": 1.0}])
def test_smoke_run_reports_the_formal_central_epsilon(tmp_path: Path, adaptive: dict[str, Any] | None) -> None:
    from fedgame.pipeline.runner import run_one

    summary = run_one(parse_recipe(tiny(privacy=cdp(adaptive=adaptive))), tmp_path / "run")
    want = central_dp_epsilon(1.0, population_size=5, sample_size=2, rounds=2, delta=1e-5, sampling="fixed_size")
    assert summary["privacy_accounting"] == "formal"
    assert math.isfinite(summary["epsilon_max"])
    assert summary["epsilon_max"] == pytest.approx(want, rel=1e-12)
    assert summary["epsilon_per_client"] == pytest.approx([want] * 5, rel=1e-12)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["epsilon_max"] == pytest.approx(want, rel=1e-12)
    rows = list(csv.DictReader((tmp_path / "run" / "privacy.csv").open()))
    assert [float(r["epsilon"]) for r in rows] == pytest.approx([want] * 5, rel=1e-12)
    metrics = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [float(r["dp_clip"]) for r in metrics][0] == 1.0
    assert ("dp_unclipped_fraction" in metrics[0]) == (adaptive is not None)
    assert 0 <= float(metrics[-1]["test_acc"]) <= 1


@pytest.mark.parametrize(("target", "sampling"), [(0.5, "fixed_size"), (2.0, "fixed_size"), (1.0, "poisson")])
def test_target_epsilon_calibrates_the_smallest_z_that_meets_it(target: float, sampling: str) -> None:
    """``calibrate_central_dp``: the run's ε at the returned z (dp-accounting, through the same
    accountant a run uses) is at most the target, and 0.1 % less noise spends more than it."""
    n, m, rounds, delta = 100, 10, 30, 1e-5
    kw: dict[str, Any] = {"population_size": n, "sample_size": m, "rounds": rounds, "delta": delta, "sampling": sampling}
    z = calibrate_central_dp(target, **kw)
    assert central_dp_epsilon(z, **kw) <= target < central_dp_epsilon(z * 0.999, **kw)
    if sampling == "fixed_size":
        assert central_dp_epsilon(z, **kw) == pytest.approx(_direct_fixed_size(z, n, m, rounds, delta), rel=1e-9)


def test_a_recipe_with_target_epsilon_builds_the_calibrated_plan_and_refuses_both() -> None:
    raw: dict[str, Any] = {
        "data": {"dataset": "fashion_mnist", "partition": {"kind": "iid", "n_clients": 100}},
        "train": {"rounds": 30, "clients_per_round": 10},
        "selection": {"kind": "uniform", "replace": False},
        "aggregation": {"kind": "mean"},
        "accountant": {"kind": "rdp", "delta": 1e-5},
        "privacy": {"kind": "central_dp", "target_epsilon": 0.5, "clip": 1.0},
    }
    """The plan built from the recipe carries the calibrated z (its round event is the one of
    ``calibrate_central_dp``'s z); giving both noise settings is one line; an unreachable target
    is refused."""
    from types import SimpleNamespace

    from fedgame.core.plugins import BuildContext

    cfg = parse_recipe(raw)
    plan = CentralDP.from_config(cfg.privacy, BuildContext(run=cfg, data=SimpleNamespace(n_clients=100)))
    z = calibrate_central_dp(0.5, population_size=100, sample_size=10, rounds=30, delta=1e-5, sampling="fixed_size")
    assert plan.event == round_event(z, population_size=100, sample_size=10, sampling="fixed_size") and z > 1
    with pytest.raises(RecipeError, match="give one of privacy.noise_multiplier and privacy.target_epsilon, not both"):
        parse_recipe({**raw, "privacy": {**raw["privacy"], "noise_multiplier": 2.0}})
    with pytest.raises(ValueError, match="cannot be met"):
        calibrate_central_dp(1e-6, population_size=100, sample_size=10, rounds=30, delta=1e-5, sampling="fixed_size")
