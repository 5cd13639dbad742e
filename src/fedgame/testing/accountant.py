"""The accountant contract (docs/plugins.md): an accountant never reports less privacy loss than
was spent. One Gaussian release is at least the exact ε of the Gaussian mechanism (Balle & Wang
2018, from dp-accounting); ε never falls as releases are added; a client with no release has
ε = 0; a restored accountant reports what the original does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian

from fedgame.privacy.accountants import Accountant
from fedgame.privacy.events import PrivacyEvent

__all__ = ["check_accountant"]


def check_accountant(make: Callable[[int], Accountant], *, delta: float = 1e-5, rtol: float = 1e-6) -> None:
    """Check the contract on ``make(n_clients)`` (3 clients; Gaussian releases, noise
    multipliers 0.8-4)."""
    acc = make(3)
    assert isinstance(acc, Accountant), f"make() must return an Accountant, got {type(acc).__name__}"
    label = type(acc).__name__
    assert np.all(acc.epsilons(delta) == 0), f"{label}: ε must be 0 before any release, got {acc.epsilons(delta)}"
    for z in (0.8, 1.5, 4.0):
        one = make(3)
        one.record([0], PrivacyEvent.gaussian(noise_multiplier=z), 1)
        exact = float(get_epsilon_gaussian(z, delta))
        got = one.epsilon(0, delta)
        assert got >= exact * (1 - rtol), (
            f"{label}: one Gaussian release with noise multiplier {z} reports ε = {got:.6g}, below the exact {exact:.6g}"
        )
        assert one.epsilon(1, delta) == 0.0, f"{label}: a client with no release must have ε = 0"
    prev = 0.0
    for k in range(1, 6):
        acc.record([0, 1], PrivacyEvent.gaussian(noise_multiplier=1.2), 1)
        eps = acc.epsilon(0, delta)
        assert eps >= prev - 1e-12, f"{label}: ε fell from {prev:.6g} to {eps:.6g} when release {k} was added"
        prev = eps
    assert acc.epsilon(0, delta) == acc.epsilon(1, delta), f"{label}: two clients with the same releases differ"
    again = make(3)
    again.load_state_dict(acc.state_dict())
    np.testing.assert_allclose(
        again.epsilons(delta), acc.epsilons(delta), rtol=0, atol=0, err_msg=f"{label}: a restored accountant must report the same ε"
    )
