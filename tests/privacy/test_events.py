"""PrivacyEvent: constructors, validation, hashing, JSON."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from fedgame.privacy.events import PrivacyEvent

EVENTS = [
    PrivacyEvent.zcdp(0.05),
    PrivacyEvent.gaussian(1.3),
    PrivacyEvent.subsampled_gaussian(noise_multiplier=1.1, sample_rate=0.01),
    PrivacyEvent.exponential(1.0),
    PrivacyEvent.approx_dp(0.5, 1e-6),
    PrivacyEvent.zcdp(math.inf),
]


@pytest.mark.parametrize("event", EVENTS, ids=repr)
def test_json_roundtrip_and_hash(event: PrivacyEvent) -> None:
    text = event.to_json()
    json.loads(text)  # valid JSON (inf written as a string)
    back = PrivacyEvent.from_json(text)
    assert back == event and hash(back) == hash(event)
    assert PrivacyEvent.from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_equality_and_hash_use_values() -> None:
    a = PrivacyEvent("zcdp", {"rho": 0.1})
    b = PrivacyEvent.zcdp(0.1)
    assert a == b and hash(a) == hash(b) and len({a, b, PrivacyEvent.zcdp(0.2)}) == 2
    assert PrivacyEvent.subsampled_gaussian(1.0, 0.5) != PrivacyEvent.subsampled_gaussian(1.0, 0.25)
    assert a.params["rho"] == 0.1 and a["rho"] == 0.1 and dict(a.params) == {"rho": 0.1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.mechanism = "gaussian"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PrivacyEvent.zcdp(-1), "rho: must be > 0"),
        (lambda: PrivacyEvent.gaussian(-0.5), "noise_multiplier: must be >= 0 and finite, got -0.5"),
        (lambda: PrivacyEvent.subsampled_gaussian(1.0, 1.5), r"sample_rate: must be in (0, 1], got 1.5"),
        (lambda: PrivacyEvent.exponential(0.0), "epsilon: must be > 0 and finite, got 0"),
        (lambda: PrivacyEvent.approx_dp(1.0, 1.0), "delta: must be in [0, 1), got 1"),
        (lambda: PrivacyEvent("laplace", {"epsilon": 1.0}), "mechanism: must be one of"),
        (lambda: PrivacyEvent("zcdp", {"sigma": 1.0}), "params: 'zcdp' takes ['rho']"),
        (lambda: PrivacyEvent.zcdp(float("nan")), "rho: must be a number, got nan"),
    ],
)
def test_validation(make: object, message: str) -> None:
    import re

    with pytest.raises(ValueError, match=re.escape(message)):
        make()  # type: ignore[operator]
