"""The aggregation-rule contract (docs/plugins.md): a server update returns one vector of the
parameters' shape; every client sending the same update under full participation aggregates to
that update (the weights sum to one then); the same inputs give the same output; its state is
plain data the engine can checkpoint."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedgame.core.server_update import RoundContext, ServerUpdate
from fedgame.core.types import Selection

__all__ = ["check_aggregator"]


def _ctx(n: int, params: torch.Tensor, seed: int = 0) -> RoundContext:
    sizes = np.arange(1, n + 1, dtype=np.float64)
    sel = Selection(indices=np.arange(n), probs=np.ones(n), k=n, scheme="inclusion")
    return RoundContext(t=0, selection=sel, theta=sizes / sizes.sum(), params=params, rng=np.random.default_rng(seed))


def check_aggregator(make: Callable[[], ServerUpdate], *, n: int = 6, dim: int = 10) -> None:
    """Check the contract on ``make()`` with ``n`` clients of unequal sizes, all selected."""
    rule = make()
    assert isinstance(rule, ServerUpdate), f"make() must return a ServerUpdate, got {type(rule).__name__}"
    params = torch.zeros(dim)
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(dim, generator=gen)
    out, state = rule.update([v.clone() for _ in range(n)], rule.init(params), _ctx(n, params))
    assert isinstance(out, list) and len(out) == 1, f"update() must return one aggregate, got {len(out)} vectors"
    assert out[0].shape == v.shape, f"the aggregate has shape {tuple(out[0].shape)}, the parameters {tuple(v.shape)}"
    torch.testing.assert_close(
        out[0], v, rtol=1e-5, atol=1e-6, msg="identical updates under full participation must aggregate to that update"
    )
    ups = [torch.randn(dim, generator=gen) for _ in range(n)]
    a, _ = make().update([u.clone() for u in ups], make().init(params), _ctx(n, params, seed=3))
    b, _ = make().update([u.clone() for u in ups], make().init(params), _ctx(n, params, seed=3))
    assert torch.equal(a[0], b[0]), "the same updates and seed must give the same aggregate"
    torch.save(state, __import__("io").BytesIO())  # checkpointable: tensors and plain data
