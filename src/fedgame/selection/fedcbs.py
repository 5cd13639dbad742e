"""Fed-CBS: class-imbalance-reducing client sampling (J. Zhang et al., "Fed-CBS: A
heterogeneity-aware client sampling mechanism for federated learning via class-imbalance
reduction", ICML 2023; a baseline of FedPCS, Sec. VIII-A).

QCID of a set M (label fractions q_n over B classes, sizes α_n = |D_n|):
QCID(M) = Σ_b (Σ_{n∈M} α_n q_n^(b) / Σ_{n∈M} α_n − 1/B)², i.e. the squared distance of the pooled
label distribution from uniform. K clients are drawn one after another without replacement; the
k-th among the unchosen with probability ∝ 1/(QCID(M_{k−1} ∪ {n}) + 1e-12)^{β_k}, β_k = k (the
paper's x ∝ QCID(M_{k−1})^{β_{k−1}} / QCID(M_k)^{β_k}; the numerator is common to all candidates).
Weights are computed in log space, so large β_k cannot overflow. QCID is computed in the clear
from ``label_counts`` (the paper uses secure aggregation; simulation only). Aggregation: data-size
weights over the selected set (``aggregation.kind: fedavg``).

**What ``probs`` means.** Inclusion probabilities of sequential sampling have no closed form.
They are computed exactly by enumerating all N!/(N−K)! ordered sequences when that number is
≤ :data:`MAX_SEQUENCES` (cached per K: they do not change between rounds). Above that, ``probs``
holds the per-step conditional probability of each chosen client (the probability of picking it
at its step, given the clients before it), which is *not* an inclusion probability: do not use
``importance`` aggregation then. :meth:`probabilities` is then the first step's distribution.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from fedgame.core.plugins import BuildContext, PluginConfig

from fedgame.core.types import RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_k_at_most_n

__all__ = ["FedCBS", "qcid", "fedcbs_inclusion", "MAX_SEQUENCES"]

MAX_SEQUENCES = 200_000
EPS = 1e-12


def qcid(counts: np.ndarray) -> np.ndarray:
    """QCID of pooled label counts ``(..., B)``: Σ_b (n_b / Σ n − 1/B)² (Zhang et al. 2023)."""
    c = np.asarray(counts, dtype=np.float64)
    q: np.ndarray = np.sum((c / c.sum(-1, keepdims=True) - 1.0 / c.shape[-1]) ** 2, axis=-1)
    return q


def _step_log_weights(pooled: np.ndarray, counts: np.ndarray, step: int) -> np.ndarray:
    """log of 1/(QCID(M ∪ {n}) + 1e-12)^{β_step} for every n, β_step = step; pooled (..., B)."""
    return -step * np.log(qcid(pooled[..., None, :] + counts) + EPS)


def _normalise(logw: np.ndarray) -> np.ndarray:
    w = np.exp(logw - logw.max(-1, keepdims=True))
    probs: np.ndarray = w / w.sum(-1, keepdims=True)
    return probs


def _check_counts(label_counts: np.ndarray) -> np.ndarray:
    c = np.asarray(label_counts, dtype=np.float64)
    if c.ndim != 2 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0) or np.any(c.sum(1) <= 0):
        raise ValueError(
            "selection.label_counts: must be an (n_clients, classes) array of counts >= 0 with every client "
            f"holding data, got shape {c.shape}"
        )
    return c


def fedcbs_inclusion(label_counts: np.ndarray, k: int) -> np.ndarray:
    """Exact inclusion probabilities of Fed-CBS sequential sampling, by expanding every ordered
    prefix (N!/(N−k)! sequences at the last step; the caller keeps that number small)."""
    counts = _check_counts(label_counts)
    n = counts.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"train.clients_per_round: must be in [1, {n}] (sampling without replacement), got {k}")
    seq = np.zeros((1, 0), dtype=np.int64)
    prob = np.ones(1)
    pooled = np.zeros((1, counts.shape[1]))
    for step in range(1, k + 1):
        logw = _step_log_weights(pooled, counts, step)
        np.put_along_axis(logw, seq, -np.inf, axis=1)
        w = _normalise(logw)
        rows, cols = np.nonzero(np.isfinite(logw))
        seq = np.concatenate([seq[rows], cols[:, None]], axis=1)
        prob = prob[rows] * w[rows, cols]
        pooled = pooled[rows] + counts[cols]
    pi = np.zeros(n)
    np.add.at(pi, seq.ravel(), np.repeat(prob, k))
    return np.minimum(pi, 1.0)


@SELECTIONS.register("fedcbs")
class FedCBS(SelectionStrategy):
    """Fed-CBS (Zhang et al., ICML 2023): K distinct clients drawn in turn ∝ 1/QCID(M ∪ {n})^k.

    Favours sets whose pooled labels are balanced; needs the (N, classes) ``label_counts``."""

    class Config(PluginConfig):
        """Fed-CBS (a FedPCS baseline): sequential sampling ∝ 1/QCID^k from the partition's label
        counts; ``fedavg``."""

        kind: Literal["fedcbs"] = "fedcbs"

        def check_run(self, run: Any) -> None:
            check_k_at_most_n(run, f"selection '{self.kind}'")

        def client_queries(self) -> frozenset[str]:
            return frozenset({"label_counts"})

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> FedCBS:
        """The clients' label histograms: as queried, else the server's copy of the partition."""
        del cfg
        return cls(label_counts=ctx.counts())

    def __init__(self, *, label_counts: np.ndarray) -> None:
        self.label_counts = _check_counts(label_counts)
        self._exact: dict[int, np.ndarray] = {}

    def _check(self, state: RoundState) -> None:
        n, k = self.label_counts.shape[0], state.k
        if state.n_clients != n:
            raise ValueError(f"selection.label_counts: has {n} clients, the data has {state.n_clients}")
        if not 1 <= k <= n:
            raise ValueError(f"train.clients_per_round: must be in [1, {n}] (sampling without replacement), got {k}")

    def exact_inclusion(self, k: int) -> np.ndarray | None:
        """Exact inclusion probabilities for ``k`` clients, or None when enumeration is too large."""
        if math.perm(self.label_counts.shape[0], k) > MAX_SEQUENCES:
            return None
        if k not in self._exact:
            self._exact[k] = fedcbs_inclusion(self.label_counts, k)
        return self._exact[k]

    def probabilities(self, state: RoundState) -> np.ndarray:
        """Exact π_i / K where enumerable, else the first draw's distribution ∝ 1/QCID({n})."""
        self._check(state)
        pi = self.exact_inclusion(state.k)
        if pi is None:
            return _normalise(_step_log_weights(np.zeros(self.label_counts.shape[1]), self.label_counts, 1))
        probs: np.ndarray = pi / pi.sum()
        return probs

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        self._check(state)
        counts = self.label_counts
        chosen: list[int] = []
        step_p: list[float] = []
        pooled = np.zeros(counts.shape[1])
        for step in range(1, state.k + 1):
            logw = _step_log_weights(pooled, counts, step)
            logw[chosen] = -np.inf
            w = _normalise(logw)
            i = int(rng.choice(w.size, p=w))
            chosen.append(i)
            step_p.append(float(w[i]))
            pooled = pooled + counts[i]
        idx = np.array(chosen)
        pi = self.exact_inclusion(state.k)
        probs = np.array(step_p) if pi is None else pi[idx]
        order = np.argsort(idx)
        return Selection(indices=idx[order], probs=probs[order], k=state.k, scheme="inclusion")
