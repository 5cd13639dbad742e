"""Aggregation rules on a list of flat update (or parameter) tensors: JDP-FL's "traditional"
baseline and the classic Byzantine-robust rules, plain functions behind a one-line
:class:`~fedgame.core.ServerUpdate` wrapper (:func:`robust_step`).

* :func:`weighted_average` — Σ_j w_j u_j / Σ_j w_j; with w_j = d_j on M3-perturbed parameters
  this is JDP-FL's "traditional" method (Sec. 6.2.2; FedAvg, McMahan et al. 2017).
* :func:`krum` — Krum / Multi-Krum (Blanchard et al., NeurIPS 2017): with f Byzantine clients
  among m (m ≥ 2f + 3), score(i) = Σ of the squared distances from u_i to its m − f − 2 nearest
  other vectors; output the vector of lowest score (``multi = 1``) or the mean of the ``multi``
  lowest-scored ones. Ties go to the lower position.
* :func:`coordinate_median` — the coordinate-wise median (Yin et al., ICML 2018); for even m the
  mean of the two middle values.
* :func:`trimmed_mean` — the coordinate-wise trimmed mean (Yin et al., ICML 2018): per
  coordinate drop the b largest and b smallest values and average the rest; b = ``n_trim`` or
  ⌊β m⌋ for a fraction ``beta`` ∈ [0, 1/2).

All compute in float64 and return the inputs' dtype. Krum, the median and the trimmed mean are
translation-equivariant (rule(u + c) = rule(u) + c), so applying them to displacements
w_i − w or to parameters w_i gives the same model; they ignore data sizes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from fedgame.core.registry import Registry
from fedgame.core.server_update import RoundContext, ServerUpdate, Updates
from fedgame.core.validate import check_int, check_weights
from fedgame.robust._checks import check_vectors, stack

__all__ = [
    "Rule",
    "ROBUST_AGGREGATORS",
    "weighted_average",
    "krum_scores",
    "krum_select",
    "krum",
    "coordinate_median",
    "trimmed_mean",
    "robust_step",
]

#: A rule maps the round's flat vectors to one vector.
Rule = Callable[[Sequence[Tensor]], Tensor]

ROBUST_AGGREGATORS: Registry[ServerUpdate] = Registry("robust aggregator")


def weighted_average(updates: Sequence[Tensor] | Tensor, weights: ArrayLike | None = None) -> Tensor:
    """Σ_j w_j u_j / Σ_j w_j (``weights=None``: the plain mean). With w_j = d_j on the
    M3-perturbed parameters θ̂_j this is JDP-FL's traditional aggregation θ^t = Σ d_j θ̂_j / Σ d_j
    (Sec. 6.2.2)."""
    vecs = check_vectors(updates)
    w = np.ones(len(vecs)) if weights is None else check_weights(weights, len(vecs), name="weights")
    x = stack(vecs)
    out = torch.as_tensor(w / math.fsum(w), dtype=torch.float64) @ x
    return out.to(vecs[0].dtype)


def _check_krum(m: int, n_byzantine: int, multi: int) -> tuple[int, int]:
    f = check_int("n_byzantine", n_byzantine, 0)
    if m < 2 * f + 3:
        raise ValueError(f"n_byzantine: Krum needs m >= 2f + 3 (m = {m} clients allow f <= {max((m - 3) // 2, 0)}), got f = {f}")
    k = check_int("multi", multi, 1, m)
    return f, k


def krum_scores(updates: Sequence[Tensor] | Tensor, *, n_byzantine: int) -> np.ndarray:
    """Krum's score of every vector: Σ of squared L2 distances to its m − f − 2 nearest other
    vectors (Blanchard et al. 2017, §4). Requires m ≥ 2f + 3."""
    vecs = check_vectors(updates)
    f, _ = _check_krum(len(vecs), n_byzantine, 1)
    x = stack(vecs)
    d2 = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow(2).numpy()
    m = len(vecs)
    np.fill_diagonal(d2, np.inf)
    nearest = np.sort(d2, axis=1)[:, : m - f - 2]
    return np.asarray(nearest.sum(axis=1), dtype=np.float64)


def krum_select(updates: Sequence[Tensor] | Tensor, *, n_byzantine: int, multi: int = 1) -> np.ndarray:
    """Positions of the ``multi`` lowest Krum scores (ties: lower position first)."""
    vecs = check_vectors(updates)
    _, k = _check_krum(len(vecs), n_byzantine, multi)
    return np.argsort(krum_scores(vecs, n_byzantine=n_byzantine), kind="stable")[:k]


def krum(updates: Sequence[Tensor] | Tensor, *, n_byzantine: int, multi: int = 1) -> Tensor:
    """Krum (``multi = 1``): the vector of lowest score; Multi-Krum: the mean of the ``multi``
    lowest-scored vectors (Blanchard et al. 2017). ``n_byzantine`` = f, with m ≥ 2f + 3."""
    vecs = check_vectors(updates)
    idx = krum_select(vecs, n_byzantine=n_byzantine, multi=multi)
    if idx.size == 1:
        return vecs[int(idx[0])].clone()
    return stack([vecs[int(i)] for i in idx]).mean(dim=0).to(vecs[0].dtype)


def coordinate_median(updates: Sequence[Tensor] | Tensor) -> Tensor:
    """The coordinate-wise median (Yin et al. 2018, Option I): per coordinate the middle value,
    the mean of the two middle values for even m (``torch.median`` would give the lower one)."""
    vecs = check_vectors(updates)
    x = torch.sort(stack(vecs), dim=0).values
    m = len(vecs)
    mid = x[m // 2] if m % 2 else 0.5 * (x[m // 2 - 1] + x[m // 2])
    return mid.to(vecs[0].dtype)


def _n_trim(m: int, beta: float | None, n_trim: int | None) -> int:
    if (beta is None) == (n_trim is None):
        raise ValueError("trimmed_mean: give exactly one of beta (fraction trimmed per side) and n_trim (count per side)")
    if beta is not None:
        bv = float(beta)
        if isinstance(beta, bool) or not 0 <= bv < 0.5:
            raise ValueError(f"beta: must be in [0, 0.5), got {beta!r}")
        b = math.floor(bv * m)
        name = "beta"
    else:
        b = check_int("n_trim", n_trim, 0)
        name = "n_trim"
    if 2 * b >= m:
        raise ValueError(f"{name}: must leave at least one value per coordinate (2 * trimmed < m = {m}), got {b} trimmed per side")
    return b


def trimmed_mean(updates: Sequence[Tensor] | Tensor, *, beta: float | None = None, n_trim: int | None = None) -> Tensor:
    """The coordinate-wise trimmed mean (Yin et al. 2018, Option II): per coordinate drop the b
    largest and b smallest values and average the m − 2b others; b = ``n_trim``, or ⌊β m⌋ for
    ``beta`` ∈ [0, 1/2). Give exactly one; 2b < m."""
    vecs = check_vectors(updates)
    m = len(vecs)
    b = _n_trim(m, beta, n_trim)
    x = torch.sort(stack(vecs), dim=0).values
    return x[b : m - b].mean(dim=0).to(vecs[0].dtype)


def robust_step(rule: Rule) -> ServerUpdate:
    """The one-line wrapper: a :class:`~fedgame.core.ServerUpdate` that replaces the round's
    per-slot updates by ``[rule(updates)]`` (stateless; data sizes and selection ignored)."""

    def update(updates: Sequence[Tensor], state: Any, ctx: RoundContext) -> tuple[Updates, Any]:
        return [rule(updates)], state

    return ServerUpdate(lambda params: (), update)


@ROBUST_AGGREGATORS.register("krum", doc="Krum / Multi-Krum (Blanchard et al. 2017): the vector(s) closest to their m − f − 2 neighbours.")
def krum_step(*, n_byzantine: int, multi: int = 1) -> ServerUpdate:
    """Krum as a server update (``n_byzantine`` = f; m ≥ 2f + 3 is checked each round)."""
    check_int("n_byzantine", n_byzantine, 0)
    check_int("multi", multi, 1)
    return robust_step(functools.partial(krum, n_byzantine=n_byzantine, multi=multi))


@ROBUST_AGGREGATORS.register("median", doc="Coordinate-wise median (Yin et al. 2018).")
def median_step() -> ServerUpdate:
    """The coordinate-wise median as a server update."""
    return robust_step(coordinate_median)


@ROBUST_AGGREGATORS.register("trimmed_mean", doc="Coordinate-wise β-trimmed mean (Yin et al. 2018).")
def trimmed_mean_step(*, beta: float | None = None, n_trim: int | None = None) -> ServerUpdate:
    """The coordinate-wise trimmed mean as a server update (exactly one of ``beta``, ``n_trim``)."""
    _n_trim(2**62, beta, n_trim)  # the arguments alone (2b < m is checked each round)
    return robust_step(functools.partial(trimmed_mean, beta=beta, n_trim=n_trim))
