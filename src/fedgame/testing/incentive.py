"""The incentive contract (docs/plugins.md): ``settle`` pays each selected client a finite,
non-negative amount aligned with the selection; ``metrics`` are numbers; a restored incentive
settles as the original does."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fedgame.core.types import Selection
from fedgame.incentives.base import Incentive

__all__ = ["check_incentive"]


def check_incentive(make: Callable[[], Incentive], *, n_clients: int = 8, rounds: int = 3, k: int = 3) -> None:
    """Check the contract on ``make()`` over ``rounds`` rounds of ``k`` draws (one repeated)."""
    inc = make()
    assert isinstance(inc, Incentive), f"make() must return an Incentive, got {type(inc).__name__}"
    label = type(inc).__name__
    rng = np.random.default_rng(0)
    sels = []
    for t in range(rounds):
        idx = rng.choice(n_clients, size=k)
        idx[-1] = idx[0]  # a client drawn twice
        sels.append(Selection(indices=idx, probs=np.full(k, 1.0 / n_clients), k=k, scheme="draws"))
    paid = []
    for t, sel in enumerate(sels):
        kt = inc.clients_per_round(t)
        assert kt is None or (isinstance(kt, (int, np.integer)) and kt >= 1), f"{label}.clients_per_round({t}) = {kt!r}"
        p = np.asarray(inc.settle(t, sel), dtype=np.float64)
        assert p.shape == (sel.clients.size,), f"{label}.settle: one payment per selected client ({sel.clients.size}), got {p.shape}"
        assert np.all(np.isfinite(p)) and np.all(p >= 0), f"{label}.settle: payments must be finite and >= 0, got {p}"
        m = inc.metrics(t, sel)
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in m.values()), f"{label}.metrics: numbers only, got {m}"
        assert all(isinstance(v, int) or math.isfinite(v) or math.isnan(v) for v in m.values())
        paid.append(p)
    fresh = make()
    for t, sel in enumerate(sels):
        np.testing.assert_array_equal(
            np.asarray(fresh.settle(t, sel)), paid[t], err_msg=f"{label}: a fresh incentive must settle round {t} as the first one did"
        )
    restored = make()
    restored.load_state_dict(inc.state_dict())
    last = len(sels) - 1
    np.testing.assert_array_equal(
        np.asarray(restored.settle(last, sels[last])),
        np.asarray(inc.settle(last, sels[last])),
        err_msg=f"{label}: a restored incentive must settle as the original",
    )
