"""JDP-FL's server aggregation M4: score client groups on the server's validation set and pick
one with the exponential mechanism (Zhang et al., TKDE 2023, Algorithm 4, eq. (7), with the
exponential and ε_E that the printed eq. (7) and line 10 lose restored; the selected group's
pair (agg, sum) is broadcast, as M5 needs sum), and its random-group variant of Fig. 5.

Round t, uploads θ̂_j with data sizes d_j (j = 0..m−1, positions in the winner list)::

    groups   g_k = W \\ {k}  (leave-one-out, k = 0..m−1)   or  a random partition into m/s groups of s
    agg_g    = Σ_{j∈g} d_j θ̂_j,   sum_g = Σ_{j∈g} d_j,   θ̄_g = agg_g / sum_g
    y_g      = score(θ̄_g)       # accuracy on D_val, evaluated by the server (a callable or given)
    Pr[g]    ∝ exp(ε_E y_g / (2Δy)),   Δy = 1/|g| ("paper": 1/(m−1) resp. 1/s) or 1 ("worst_case")
    g*       ~ Pr  (the server's generator)
    broadcast (agg_{g*}, sum_{g*}); the server's global model is θ̄_{g*}

Leave-one-out sums use the subtraction trick agg_k = A − d_k θ̂_k with A = Σ_j d_j θ̂_j, in
float64 (they equal the direct sums over g_k). Sums and broadcast ``agg`` are float64 tensors;
the score callable receives θ̄_g in the uploads' dtype.

Why here and not in ``privacy/``: M4's job is robustness (limit one adversarial submission's
influence on the chosen aggregate, §4 of the paper); w.r.t. the clients' raw data it adds no
privacy — it post-processes M3's noisy uploads. Its ε_E is recorded by the caller as
``PrivacyEvent.exponential(ε_E)`` (:func:`fedgame.privacy.jdp.jdp_events`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from fedgame.core.validate import check_int, check_positive, check_weights
from fedgame.robust._checks import check_vectors

__all__ = [
    "ScoreFn",
    "ScoreSensitivity",
    "GroupSelection",
    "score_sensitivity",
    "exponential_probabilities",
    "draw_group",
    "leave_one_out_groups",
    "random_groups",
    "group_sums",
    "leave_one_out_sums",
    "select_group",
    "leave_one_out_aggregate",
    "random_group_aggregate",
]

#: The server's score of a group's average parameters: accuracy on D_val, in [0, 1].
ScoreFn = Callable[[Tensor], float]
#: Δy of M4: ``"paper"`` = 1/|g| (1/(m−1) for leave-one-out, 1/s for random groups of s);
#: ``"worst_case"`` = 1 (an accuracy can move by 1 when one member changes arbitrarily).
ScoreSensitivity = Literal["paper", "worst_case"]


def score_sensitivity(group_size: int, mode: ScoreSensitivity | float = "paper") -> float:
    """Δy for groups of ``group_size`` members: ``"paper"`` 1/group_size (Algorithm 4 line 9:
    1/(m−1); random groups of s: 1/s), ``"worst_case"`` 1, or a positive number as given."""
    s = check_int("group_size", group_size, 1)
    if isinstance(mode, str):
        if mode == "paper":
            return 1.0 / s
        if mode == "worst_case":
            return 1.0
        raise ValueError(f"score_sensitivity: must be 'paper', 'worst_case' or a number > 0, got {mode!r}")
    v = float(mode)
    if isinstance(mode, bool) or not (v > 0 and math.isfinite(v)):
        raise ValueError(f"score_sensitivity: must be 'paper', 'worst_case' or a number > 0, got {mode!r}")
    return v


def _scores(scores: ArrayLike, *, name: str = "scores") -> np.ndarray:
    try:
        y = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a 1-D array of numbers, got {scores!r}") from None
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"{name}: must be a non-empty 1-D array (one score per group), got shape {y.shape}")
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}]: must be finite, got {float(y[i])!r}")
    return y


def exponential_probabilities(scores: ArrayLike, *, epsilon: float, sensitivity: float) -> np.ndarray:
    """The exponential mechanism's distribution (McSherry & Talwar 2007; JDP-FL eq. (7) and
    Algorithm 4 line 10 with the exponential and ε_E restored, which the printed text loses):

        Pr[k] = exp(ε y_k / (2Δy)) / Σ_l exp(ε y_l / (2Δy)),

    computed as exp(s_k − max s)/Σ exp(s_l − max s), s_k = ε y_k/(2Δy). Equal scores give the
    uniform distribution; ``epsilon = inf`` gives the uniform distribution over the argmax set
    (the ε → ∞ limit). For M4, Δy = 1/(m−1) turns the exponent into ε_E (m−1) y_k / 2, and two
    groups' odds are exp(ε_E (m−1)(y_a − y_b)/2) (e.g. m = 2, y = (1, 0), ε = 1 →
    (0.622459, 0.377541))."""
    y = _scores(scores)
    e = check_positive("epsilon", epsilon, allow_inf=True, show="repr", not_a_number="must be a number > 0")
    dy = float(sensitivity)
    if isinstance(sensitivity, bool) or not (dy > 0 and math.isfinite(dy)):
        raise ValueError(f"sensitivity: must be > 0 and finite, got {sensitivity!r}")
    with np.errstate(over="ignore", invalid="ignore"):
        s = e * y / (2.0 * dy)
    if not np.all(np.isfinite(s)):  # ε = inf, or ε·y overflows: the argmax limit
        top = y == y.max()
        return np.asarray(top / top.sum(), dtype=np.float64)
    w = np.exp(s - s.max())
    return np.asarray(w / w.sum(), dtype=np.float64)


def draw_group(probs: ArrayLike, rng: np.random.Generator, size: int | None = None) -> Any:
    """k* ~ ``probs`` with the server's generator: an ``int`` (``size=None``) or an array of
    ``size`` independent draws (vectorised; used by the frequency tests)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or np.any(~np.isfinite(p)) or np.any(p < 0) or not math.isclose(p.sum(), 1.0, abs_tol=1e-9):
        raise ValueError(f"probs: must be a non-empty 1-D probability vector summing to 1, got {probs!r}")
    if size is None:
        return int(rng.choice(p.size, p=p))
    return rng.choice(p.size, size=check_int("size", size, 0), p=p)


def leave_one_out_groups(m: int) -> np.ndarray:
    """The m groups g_k = W \\ {k} of Algorithm 4 line 1, as an (m, m−1) array of positions
    (row k lists every position but k, ascending). Requires m ≥ 2."""
    m = check_int("m", m, 2)
    full = np.broadcast_to(np.arange(m), (m, m))
    return full[~np.eye(m, dtype=bool)].reshape(m, m - 1)


def _check_group_size(m: int, group_size: int) -> int:
    s = check_int("group_size", group_size, 1, m)
    if m % s:
        raise ValueError(f"group_size: must divide the number of clients m = {m} (m % s == 0), got {s}")
    return s


def random_groups(m: int, group_size: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random partition of positions 0..m−1 into m/s disjoint groups of s (JDP-FL
    Fig. 5; a fresh one every round), as an (m/s, s) array, each row ascending.
    ``group_size`` must divide m."""
    m = check_int("m", m, 1)
    s = _check_group_size(m, group_size)
    return np.sort(rng.permutation(m).reshape(m // s, s), axis=1)


def _check_groups(groups: ArrayLike, m: int) -> np.ndarray:
    g = np.asarray(groups)
    if g.ndim != 2 or g.shape[0] == 0 or g.shape[1] == 0 or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(
            f"groups: must be a non-empty 2-D integer array (one row of member positions per group), got shape {g.shape}, dtype {g.dtype}"
        )
    if g.min() < 0 or g.max() >= m:
        raise ValueError(f"groups: every member must be a position in [0, {m}), got values in [{g.min()}, {g.max()}]")
    srt = np.sort(g, axis=1)
    if np.any(srt[:, 1:] == srt[:, :-1]):
        raise ValueError("groups: a group lists a member twice")
    return g.astype(np.int64)


def _direct_sum(vecs: Sequence[Tensor], w: np.ndarray, members: np.ndarray) -> Tensor:
    acc = torch.zeros(vecs[0].shape, dtype=torch.float64)
    for j in members:
        acc.add_(vecs[int(j)].to(torch.float64), alpha=float(w[int(j)]))
    return acc


def group_sums(uploads: Sequence[Tensor] | Tensor, sizes: ArrayLike, groups: ArrayLike) -> tuple[Tensor, np.ndarray]:
    """Direct (agg_g, sum_g) for every group: agg (G, P) float64 with row g = Σ_{j∈g} d_j θ̂_j,
    and sum (G,) = Σ_{j∈g} d_j (Algorithm 4 line 3)."""
    vecs = check_vectors(uploads, name="uploads")
    w = check_weights(sizes, len(vecs))
    g = _check_groups(groups, len(vecs))
    agg = torch.stack([_direct_sum(vecs, w, row) for row in g])
    return agg, np.array([math.fsum(w[row]) for row in g])


def leave_one_out_sums(uploads: Sequence[Tensor] | Tensor, sizes: ArrayLike) -> tuple[Tensor, np.ndarray]:
    """(agg_k, sum_k) for every leave-one-out group by subtraction (Algorithm 4):
    agg_k = A − d_k θ̂_k, sum_k = S − d_k with A = Σ_j d_j θ̂_j, S = Σ_j d_j, in float64.
    Returns agg (m, P) and sum (m,). Requires m ≥ 2."""
    vecs = check_vectors(uploads, name="uploads", min_count=2)
    w = check_weights(sizes, len(vecs))
    total = _direct_sum(vecs, w, np.arange(len(vecs)))
    agg = torch.stack([total - float(w[k]) * vecs[k].to(torch.float64) for k in range(len(vecs))])
    return agg, math.fsum(w) - w


@dataclass(frozen=True, eq=False)
class GroupSelection:
    """M4's outcome for one round.

    ``m``: number of uploads; ``groups`` (G, s): member positions of every candidate group; ``scores`` y_g and ``probs``
    Pr[g] per group; ``sensitivity`` the Δy used; ``chosen`` the drawn group g* (for
    leave-one-out, k* = the left-out position); ``agg``/``total`` the broadcast signal
    (agg_{g*} as a float64 tensor, sum_{g*}).
    """

    m: int
    groups: np.ndarray
    scores: np.ndarray
    probs: np.ndarray
    epsilon: float
    sensitivity: float
    chosen: int
    agg: Tensor
    total: float

    @property
    def members(self) -> np.ndarray:
        """Positions in the chosen group g*."""
        return np.asarray(self.groups[self.chosen])

    @property
    def excluded(self) -> np.ndarray:
        """Positions outside g* (for leave-one-out: ``[k*]``)."""
        return np.setdiff1d(np.arange(self.m), self.members)

    def contains(self, position: int) -> bool:
        """Whether the client at ``position`` is a member of g* (M5 ``replace`` needs it)."""
        return bool(np.any(self.members == position))

    def global_params(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The server's global model of the round, θ^t = agg_{g*}/sum_{g*} (the chosen group's
        average)."""
        return (self.agg / self.total).to(dtype)


def _evaluate(
    score: ScoreFn | ArrayLike,
    n_groups: int,
    group_agg: Callable[[int], Tensor],
    totals: np.ndarray,
    dtype: torch.dtype,
) -> np.ndarray:
    if callable(score):
        ys: list[float] = []
        for g in range(n_groups):
            yg = float(score((group_agg(g) / totals[g]).to(dtype)))
            if not math.isfinite(yg):
                raise ValueError(f"score: must return a finite number, got {yg!r} for group {g}")
            ys.append(yg)
        return np.array(ys, dtype=np.float64)
    given = _scores(score)
    if given.size != n_groups:
        raise ValueError(f"scores: must give one score per group ({n_groups}), got {given.size}")
    return given


def _select(
    vecs: list[Tensor],
    groups: np.ndarray,
    totals: np.ndarray,
    group_agg: Callable[[int], Tensor],
    score: ScoreFn | ArrayLike,
    *,
    epsilon: float,
    rng: np.random.Generator,
    sensitivity: ScoreSensitivity | float,
) -> GroupSelection:
    e = check_positive("epsilon", epsilon, allow_inf=True, show="repr", not_a_number="must be a number > 0")
    dy = score_sensitivity(groups.shape[1], sensitivity)
    y = _evaluate(score, groups.shape[0], group_agg, totals, vecs[0].dtype)
    p = exponential_probabilities(y, epsilon=e, sensitivity=dy)
    k = draw_group(p, rng)
    return GroupSelection(
        m=len(vecs), groups=groups, scores=y, probs=p, epsilon=e, sensitivity=dy, chosen=k, agg=group_agg(k), total=float(totals[k])
    )


def select_group(
    uploads: Sequence[Tensor] | Tensor,
    sizes: ArrayLike,
    groups: ArrayLike,
    score: ScoreFn | ArrayLike,
    *,
    epsilon: float,
    rng: np.random.Generator,
    sensitivity: ScoreSensitivity | float = "paper",
) -> GroupSelection:
    """The exponential-mechanism group choice over any given ``groups`` (rows of member
    positions, all of one size s). ``score`` is either the server's callable on a group's
    average θ̄_g (called once per group, in row order) or the scores y_g already evaluated, one
    per row. Δy = :func:`score_sensitivity` (s, ``sensitivity``)."""
    vecs = check_vectors(uploads, name="uploads")
    w = check_weights(sizes, len(vecs))
    g = _check_groups(groups, len(vecs))
    totals = np.array([math.fsum(w[row]) for row in g])
    return _select(vecs, g, totals, lambda i: _direct_sum(vecs, w, g[i]), score, epsilon=epsilon, rng=rng, sensitivity=sensitivity)


def leave_one_out_aggregate(
    uploads: Sequence[Tensor] | Tensor,
    sizes: ArrayLike,
    score: ScoreFn | ArrayLike,
    *,
    epsilon: float,
    rng: np.random.Generator,
    sensitivity: ScoreSensitivity | float = "paper",
) -> GroupSelection:
    """M4 (Algorithm 4): the m leave-one-out groups g_k = W \\ {k}, each scored on its weighted
    average (``score``: the server's callable on θ̄_k, or the m scores y_k in order k = 0..m−1),
    k* drawn with Pr[k] ∝ exp(ε_E y_k/(2Δy)), Δy = 1/(m−1) (``"paper"``) or 1
    (``"worst_case"``). Sums by subtraction in float64; only one group's average is held at a
    time. Requires m ≥ 2 uploads; ``chosen`` is k*."""
    vecs = check_vectors(uploads, name="uploads")
    if len(vecs) < 2:
        raise ValueError(f"uploads: M4 needs m >= 2 clients (leave-one-out groups of m - 1), got m = {len(vecs)}")
    w = check_weights(sizes, len(vecs))
    total = _direct_sum(vecs, w, np.arange(len(vecs)))
    totals = math.fsum(w) - w

    def group_agg(k: int) -> Tensor:
        return total - float(w[k]) * vecs[k].to(torch.float64)

    groups = leave_one_out_groups(len(vecs))
    return _select(vecs, groups, totals, group_agg, score, epsilon=epsilon, rng=rng, sensitivity=sensitivity)


def random_group_aggregate(
    uploads: Sequence[Tensor] | Tensor,
    sizes: ArrayLike,
    score: ScoreFn,
    *,
    group_size: int,
    epsilon: float,
    rng: np.random.Generator,
    sensitivity: ScoreSensitivity | float = "paper",
) -> GroupSelection:
    """The random-group strategy of Fig. 5 (JDP-FL Sec. 6.2.5): a fresh uniformly random
    partition of the m clients into m/s groups of s = ``group_size`` (s must divide m), each
    scored with the server's callable, g* drawn with Pr ∝ exp(ε_E y_g/(2Δy)), Δy = 1/s
    (``"paper"``) or 1. The partition and the draw both use ``rng`` (partition first). To score
    groups yourself, call :func:`random_groups` then :func:`select_group` with the scores."""
    if not callable(score):
        raise TypeError(
            "score: must be the server's callable on a group's average (the partition is drawn here); "
            "to pass scores, call random_groups then select_group"
        )
    vecs = check_vectors(uploads, name="uploads")
    groups = random_groups(len(vecs), group_size, rng)
    return select_group(vecs, sizes, groups, score, epsilon=epsilon, rng=rng, sensitivity=sensitivity)
