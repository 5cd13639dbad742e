"""The JDP-FL round pinned: two rounds of the Fig. 3 recipe (smoke size, seed 0, one thread) must
give exactly these numbers. JDP-FL's Fig. 3 and Fig. 4 once held the same configuration with
different numbers because engine refactors changed the round silently; a refactor that changes
what a JDP-FL round computes must now change this test, on purpose, with the reason in its commit."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.sim.test_pool import _cfg, needs_fmnist
from fedgame.pipeline.build import build_jdp

EXTRA = [
    "data.partition.n_clients=8",
    "data.validation=200",
    "jdp.auction.budget=4000",
    "train.local.batch_size=32",
    "train.workers=1",
    "train.threads=1",
]
#: per round: M4's chosen client, the uploads M5 averaged, M4's scores, the loss, test accuracy
PINNED = [
    (3, "[0, 1, 2, 4, 5, 6, 7]", "[0.105, 0.145, 0.13, 0.165, 0.12, 0.105, 0.105, 0.105]", 2.3029344379901886, 0.16, True),
    (7, "[0, 1, 2, 3, 4, 5, 6]", "[0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]", 797.1311340332031, 0.1025, False),
]
PARAMS_ABS_SUM, PARAMS_SUM = 10419.334541735212, -66.3504180771688


@needs_fmnist
def test_the_jdp_round_is_pinned() -> None:
    n = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = build_jdp(_cfg("jdp/fig3.yaml", EXTRA))
            result = built.engine.run(2)
    finally:
        torch.set_num_threads(n)
    got = [(r["chosen"], r["used"], r["scores"], r["train_loss"], r["test_acc"], r["adversary_used"]) for r in result.records]
    for g, want in zip(got, PINNED, strict=True):
        assert g[:3] == want[:3] and g[5] == want[5]
        assert g[3] == pytest.approx(want[3], rel=1e-6) and g[4] == pytest.approx(want[4], abs=1e-9)
    p = result.params.double()
    assert float(p.abs().sum()) == pytest.approx(PARAMS_ABS_SUM, rel=1e-6)
    assert float(p.sum()) == pytest.approx(PARAMS_SUM, rel=1e-5, abs=1e-3)
