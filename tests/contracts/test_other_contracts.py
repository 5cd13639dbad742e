"""Every built-in accountant, aggregation rule, incentive and auction keeps its contract in
:mod:`fedgame.testing`, and each contract catches a deliberately broken plug-in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedgame.core.server_update import RoundContext, ServerUpdate
from fedgame.core.types import Selection
from fedgame.incentives import INCENTIVES, Incentive
from fedgame.incentives.auctions import Auction, AuctionOutcome, KnapsackAuction, UnitPriceAuction
from fedgame.privacy.accountants import ACCOUNTANTS, ZCDPAccountant, make_accountant
from fedgame.sim import AGGREGATORS
from fedgame.testing import check_accountant, check_aggregator, check_auction, check_incentive


@pytest.mark.parametrize("name", sorted(ACCOUNTANTS))
def test_built_in_accountants(name: str) -> None:
    check_accountant(lambda n: make_accountant(name, n_clients=n))


@pytest.mark.parametrize("name", AGGREGATORS.names())
def test_built_in_aggregators(name: str) -> None:
    check_aggregator(AGGREGATORS.get(name))


def _fedpcs_incentive(tmp: Path, game: bool) -> Callable[[], Incentive]:
    from fedgame.incentives.fedpcs import FedPCSIncentive
    from fedgame.pipeline.build import build_game
    from fedgame.pipeline.config import parse_recipe

    cfg = parse_recipe(
        {
            "data": {"partition": {"kind": "iid", "n_clients": 8}},
            "train": {"rounds": 4, "clients_per_round": 3},
            "selection": {"kind": "privacy_aware" if game else "uniform"},
            "privacy": {"kind": "zcdp_upload", "rho": "game"},
            "incentive": {"kind": "fedpcs", "acc_scale": 10000, **({} if game else {"baseline_rho": "initial"})},
        }
    )
    plan = build_game(cfg)
    assert plan is not None
    return lambda: FedPCSIncentive(plan)


def test_built_in_incentives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    assert set(INCENTIVES.names()) == {"none", "fedpcs", "qidpfl"}  # the games' mechanisms are built from their plans:
    check_incentive(lambda: INCENTIVES.create("none"))
    check_incentive(_fedpcs_incentive(tmp_path, game=True))  # FedPCS: R_t ρ_i^t to each drawn client
    check_incentive(_fedpcs_incentive(tmp_path, game=False))  # a baseline outside the game: nothing paid


FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_qidpfl_incentive() -> None:
    """QI-DPFL's mechanism, from the plan its reward game gives on a small Fashion-MNIST split."""
    import yaml

    from fedgame.core.seeding import Streams
    from fedgame.incentives.qidpfl import QIDPFLIncentive
    from fedgame.pipeline.build import build_data, build_qidpfl
    from fedgame.pipeline.config import apply_overrides, parse_recipe

    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "recipes" / "qidpfl" / "fmnist.yaml").read_text())
    cfg = parse_recipe(apply_overrides(raw, ["data.max_train=2000", "data.max_test=200", "data.partition.n_clients=10", "train.rounds=3"]))
    streams = Streams(seed=cfg.seed)
    plan = build_qidpfl(cfg, build_data(cfg, streams), streams, 1000)
    assert plan is not None
    check_incentive(lambda: QIDPFLIncentive(plan), n_clients=10)


@pytest.mark.parametrize(("make", "feasible"), [(UnitPriceAuction, True), (KnapsackAuction, False)], ids=["M1", "M2"])
def test_built_in_auctions(make: Callable[[], Auction], feasible: bool) -> None:
    """M1 keeps its payments within the budget; M2 only its winners' costs (docs/jdp.md)."""
    check_auction(make, budget_feasible=feasible)


# -- broken plug-ins each contract must catch --------------------------------------------------
class _HalfEpsilon(ZCDPAccountant):
    def epsilon(self, client: int, delta: float) -> float:
        return 0.5 * super().epsilon(client, delta)


def _summing() -> ServerUpdate:
    def update(updates: Sequence[torch.Tensor], state: Any, ctx: RoundContext) -> tuple[list[torch.Tensor], Any]:
        return [torch.stack(list(updates)).sum(0)], state

    return ServerUpdate(lambda params: (), update)


class _Charging(Incentive):
    def settle(self, t: int, selection: Selection) -> np.ndarray:
        return np.full(selection.clients.size, -1.0)


class _FirstPrice(Auction):
    """Winners by lowest bid within budget, paid their bid: not truthful (a winner gains by overbidding)."""

    name = "first_price"

    def _run(self, bids: np.ndarray, data_sizes: np.ndarray, budget: float) -> AuctionOutcome:
        order = np.argsort(bids, kind="stable")
        won = order[np.cumsum(bids[order]) <= budget]
        return AuctionOutcome(
            mechanism="first_price",
            winners=np.sort(won),
            payments=bids[np.sort(won)],
            n=bids.size,
            budget=budget,
            winners_cost=float(bids[won].sum()),
            data_bought=float(data_sizes[won].sum()),
        )


def test_contracts_catch_broken_plugins() -> None:
    with pytest.raises(AssertionError, match="below the exact"):
        check_accountant(lambda n: _HalfEpsilon(n_clients=n))
    with pytest.raises(AssertionError, match="identical updates under full participation"):
        check_aggregator(_summing)
    with pytest.raises(AssertionError, match="finite and >= 0"):
        check_incentive(_Charging)
    with pytest.raises(AssertionError, match="a misreport gains"):
        check_auction(_FirstPrice)
