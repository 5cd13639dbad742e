"""Every built-in privacy plan keeps :func:`fedgame.testing.check_privacy_plan`'s contract (it
records what it applies, its noise has its declared scale), and the contract catches plans that
fail open: one recording events without noise, one adding noise without recording it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.privacy.central import CentralDP
from fedgame.privacy.plans import PRIVACY_PLANS, PHSDPSGD, ClientPrivacy, LocalDPSGD, NoPrivacy, ZCDPUpload
from fedgame.testing import check_privacy_plan

SIZES = np.array([600, 300, 900])

BUILT_IN: dict[str, Callable[[], ClientPrivacy]] = {
    "none": NoPrivacy,
    "dpsgd": lambda: LocalDPSGD(sizes=SIZES, batch_size=32, steps_per_round=[10, 5, 15], max_grad_norm=1.0, noise_multiplier=1.1),
    "zcdp_upload": lambda: ZCDPUpload(rho=np.array([0.5, 2.0, 8.0]), clip=1.0, sizes=SIZES),
    "phs": lambda: PHSDPSGD(
        eps=np.array([0.5, 1.0, 2.0]),
        delta=1e-5,
        sizes=SIZES,
        batch_size=64,
        local_steps=np.array([5, 5, 5]),
        counts=np.array([4, 4, 4]),
    ),
    # central DP: the clients add no noise and record nothing (the server's release is charged;
    # tests/privacy/test_central_dp.py checks that side)
    "central_dp": lambda: CentralDP(n_clients=3, clients_per_round=2, noise_multiplier=1.0, clip=1.0),
}


def test_every_registered_plan_is_covered() -> None:
    assert set(BUILT_IN) == set(PRIVACY_PLANS.names())


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_built_in_plan_keeps_the_contract(name: str) -> None:
    check_privacy_plan(BUILT_IN[name], clients=(0, 1, 2), rounds=(0, 1))


class _EventsWithoutNoise(ClientPrivacy):
    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        return [(PrivacyEvent.zcdp(rho=1.0), 1)]


class _NoiseWithoutEvents(ClientPrivacy):
    def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism:
        return GaussianMechanism(clip=1.0, noise_std=0.5)

    def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
        return []


class _WrongScale(ZCDPUpload):
    def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism:
        m = super().upload(client, t, n_examples)
        assert m is not None
        m.noise_std *= 1.05  # applies 5 % more noise than it declares
        return _Declared(m, m.noise_std / 1.05)


class _Declared(GaussianMechanism):
    """Adds noise of std ``m.noise_std`` but declares ``declared``."""

    def __init__(self, m: GaussianMechanism, declared: float) -> None:
        super().__init__(clip=m.clip, noise_std=declared)
        self._real = m

    def privatize(self, v, gen):  # type: ignore[no-untyped-def]
        return self._real.privatize(v, gen)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (_EventsWithoutNoise, "records privacy events but adds no noise"),
        (_NoiseWithoutEvents, "adds noise but records no privacy event"),
        (lambda: _WrongScale(rho=np.array([0.5, 2.0, 8.0]), clip=1.0, sizes=SIZES), "noise std"),
    ],
)
def test_contract_catches_failing_plans(make: Callable[[], ClientPrivacy], match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check_privacy_plan(make, clients=(0, 1, 2))
