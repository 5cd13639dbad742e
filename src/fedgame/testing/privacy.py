"""The privacy-plan contract (docs/plugins.md): a plan never fails open. What it records is what
it applies — noise on the upload or in every DP-SGD step whenever it records a privacy event, an
event whenever it adds noise — and the noise it adds has the standard deviation it declares."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.plans import DPSGD, ClientPrivacy, record_verified

__all__ = ["check_privacy_plan"]


def _noise(plan: ClientPrivacy, client: int, t: int, n: int, draws: int, label: str) -> bool:
    """The upload mechanism's clip and noise scale, checked on ``draws`` coordinates; whether it adds noise."""
    mech = plan.upload(client, t, n)
    if mech is None:
        return False
    where = f"{label}.upload(client={client}, t={t})"
    big = torch.full((draws,), 10.0, dtype=torch.float32)
    clipped = mech.constrain(big)
    clip = float(getattr(mech, "clip", float("inf")))
    assert float(torch.linalg.vector_norm(clipped)) <= clip * (1 + 1e-5), f"{where}: constrain() must clip to L2 norm {clip}"
    std = float(getattr(mech, "noise_std", 0.0))
    zero = torch.zeros(draws, dtype=torch.float32)
    out = mech.privatize(zero, torch.Generator().manual_seed(0))
    got = float(out.double().std())
    se = max(std, 1e-30) / np.sqrt(2 * (draws - 1))
    assert abs(got - std) <= 4 * se + 1e-12, (
        f"{where}: noise std {got:.6g} over {draws} coordinates, declared {std:.6g} (4 SE = {4 * se:.2g})"
    )
    return std > 0


def _dpsgd(plan: ClientPrivacy, client: int, t: int, n: int, label: str) -> bool:
    spec = plan.dpsgd(client, t, n)
    if spec is None:
        return False
    assert isinstance(spec, DPSGD), f"{label}.dpsgd(): must return a DPSGD or None, got {type(spec).__name__}"
    assert spec.max_grad_norm > 0 and np.isfinite(spec.noise_multiplier) and spec.noise_multiplier >= 0, f"{label}.dpsgd(): {spec}"
    return spec.noise_multiplier > 0


def check_privacy_plan(
    make: Callable[[], ClientPrivacy],
    *,
    clients: Sequence[int] = (0, 1),
    rounds: Sequence[int] = (0, 1),
    n_examples: int = 100,
    steps: int = 5,
    draws: int = 100_000,
) -> None:
    """Check the privacy-plan contract on ``make()`` for the given clients and rounds. On a
    pass the plan's class is recorded as verified for its current source (runs then report its
    own accounting label instead of ``"unverified"``; :func:`fedgame.privacy.plans.accounting_label`)."""
    plan = make()
    assert isinstance(plan, ClientPrivacy), f"make() must return a ClientPrivacy, got {type(plan).__name__}"
    label = type(plan).__name__
    for c in clients:
        for t in rounds:
            noisy = _noise(plan, c, t, n_examples, draws, label)
            noisy |= _dpsgd(plan, c, t, n_examples, label)
            events = plan.events(c, t, n_examples, steps)
            assert isinstance(events, list), f"{label}.events(): must return a list of (PrivacyEvent, count)"
            for ev, count in events:
                assert isinstance(ev, PrivacyEvent), f"{label}.events(): {ev!r} is not a PrivacyEvent"
                assert isinstance(count, (int, np.integer)) and count >= 1, f"{label}.events(): counts must be integers >= 1, got {count!r}"
            if events:
                assert noisy, f"{label}: client {c}, round {t} records privacy events but adds no noise (fails open)"
            if noisy:
                assert events, f"{label}: client {c}, round {t} adds noise but records no privacy event (its cost is lost)"
    again = make()
    again.load_state_dict(plan.state_dict())
    for c in clients:
        for t in rounds:
            assert again.events(c, t, n_examples, steps) == plan.events(c, t, n_examples, steps), (
                f"{label}: a plan restored from state_dict() must record the same events"
            )
    record_verified(type(plan))
