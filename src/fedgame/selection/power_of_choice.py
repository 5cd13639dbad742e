"""Power-of-choice selection (Cho, Wang & Joshi, "Client selection in federated learning:
convergence analysis and power-of-choice selection strategies", arXiv:2010.01243, 2020; AISTATS
2022 as "Towards understanding biased client selection in federated learning"): the "Biased"
mechanism of PHS (Sec. VI-B; fedgame's reading of it in docs/phs.md, 'Pieces').

Round t: draw a candidate set A of ``d`` distinct clients without replacement with probabilities
∝ |D_i| (successive sampling), then keep the K candidates with the largest local loss.

**Losses.** ``losses="current"`` is pow-d proper (and PHS's "Biased"): every candidate's mean
loss of the current global model on its whole local data, asked of the engine through
:attr:`RoundState.probe` (one extra forward pass over the candidates' data per round; the
queries are unprivatised, as in the paper, and counted in the round record as
``probe_loss_queries``). ``losses="stale"`` is the cheap variant rpow-d: each client's mean
training loss from the last round it trained (:meth:`RoundOutcome.losses`). Clients never
measured count as +inf, so they are tried first. Ties are broken uniformly at random by the
round's generator (``ties="random"``) or by lower id (``ties="id"``, as fedgame's PHS recipes
do).

**Caps** (a gap the PHS paper leaves open). The schedule is adaptive, so a client's number of
selections is unknown in advance; ``max_selections`` (T^plan_k = ⌈K T^g p^u_k⌉ in PHS) makes a
client ineligible once it has been selected that often (its DP noise was calibrated for that
count). Candidates are drawn among the eligible; with fewer than K eligible, all of them are
selected.

**What ``probs`` means.** The strategy is biased by design: its aggregation is by data size over
the selected set (``aggregation.kind: fedavg``) and ``probs`` are never used to reweight. They are
reported as the clients' inclusion probabilities given this round's stored losses, over the
candidate draw and the tie-breaks: exact when every candidate sequence can be enumerated
(``d = N``, or N!/(N−d)! ≤ :data:`MAX_SEQUENCES`), otherwise a Monte-Carlo estimate from
:data:`MC_ROUNDS` further draws of the same design (the realised draw counted as one of them, so
a selected client's estimate is > 0). Clients ranked below every possible top-K have probability
0: with ``importance`` aggregation they would simply be missing, so that aggregate is biased.
"""

from __future__ import annotations

import math
from itertools import permutations
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from fedgame.core.plugins import BuildContext, PluginConfig

from fedgame.core.types import RoundOutcome, RoundState, Selection
from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_k_at_most_n

__all__ = ["PowerOfChoice", "MAX_SEQUENCES", "MC_ROUNDS", "loss_ranks", "strict_ranks"]

MAX_SEQUENCES = 200_000
MC_ROUNDS = 20_000


def loss_ranks(loss: np.ndarray) -> np.ndarray:
    """Dense rank of each client by loss, 0 = largest (+inf first); equal losses share a rank."""
    return np.unique(-np.asarray(loss, dtype=np.float64), return_inverse=True)[1].astype(np.int64)


def strict_ranks(loss: np.ndarray) -> np.ndarray:
    """Rank of each client by loss, 0 = largest (+inf first), ties by lower id: all distinct."""
    loss = np.asarray(loss, dtype=np.float64)
    order = np.lexsort((np.arange(loss.size), -loss))
    rank = np.empty(loss.size, dtype=np.int64)
    rank[order] = np.arange(loss.size)
    return rank


def top_k_shares(members: np.ndarray, rank: np.ndarray, k: int) -> np.ndarray:
    """For each row of candidate sets ``members`` (R, d): the chance that each member is among the
    ``k`` best ranked when ties are broken uniformly, (k − #better) / #tied clipped to [0, 1]."""
    r = rank[members]
    rows, d = r.shape
    key = (r + np.arange(rows)[:, None] * (int(rank.max()) + 1)).ravel()
    s = np.sort(key)
    base = np.repeat(np.arange(rows) * d, d)
    better = np.searchsorted(s, key, side="left") - base
    tied = np.searchsorted(s, key, side="right") - base - better
    shares: np.ndarray = np.clip((k - better) / tied, 0.0, 1.0).reshape(rows, d)
    return shares


def draw_rounds(rng: np.random.Generator, sizes: np.ndarray, rank: np.ndarray, d: int, k: int, reps: int) -> np.ndarray:
    """``reps`` independent rounds, (reps, k) selected clients. Candidates: the d smallest of
    E_i/|D_i|, E_i ~ Exp(1) (an exponential race, i.e. successive sampling ∝ |D_i|); then the k
    candidates of best loss rank, ties broken by an independent U(0,1) per candidate."""
    w = np.asarray(sizes, dtype=np.float64)
    keys = rng.standard_exponential((reps, w.size)) / w
    cand = np.argpartition(keys, d - 1, axis=1)[:, :d] if d < w.size else np.broadcast_to(np.arange(w.size), (reps, d))
    prio = rank[cand] + rng.random((reps, d))
    best = np.argpartition(prio, k - 1, axis=1)[:, :k] if k < d else np.broadcast_to(np.arange(d), (reps, k))
    return np.take_along_axis(cand, best, axis=1)


@SELECTIONS.register("power_of_choice")
class PowerOfChoice(SelectionStrategy):
    """Power-of-choice (Cho et al.; PHS "Biased"): of d candidates ∝ |D_i|, the K largest losses.

    Losses at the current global model (``losses="current"``) or the last known ones (rpow-d,
    ``"stale"``); optional per-client selection caps (module docstring)."""

    class Config(PluginConfig):
        """Power-of-choice ("Biased", PHS Sec. VI-B): ``d`` candidates ∝ |D_i|, the K with the
        largest loss; ``d: null`` makes every client a candidate (global top-K). ``losses: current``
        measures the candidates' losses at the global model (pow-d, PHS), ``stale`` uses the last
        training loss (rpow-d); ``ties: id`` breaks ties by lower id (PHS); ``cap: planned`` stops
        selecting a client after T^plan_k = ⌈K T^g p^u_k⌉ rounds (the count its noise is calibrated
        for, as the schedule is adaptive). Aggregate with ``fedavg`` or ``mean``."""

        kind: Literal["power_of_choice"] = "power_of_choice"

        def check_run(self, run: Any) -> None:
            check_k_at_most_n(run, f"selection '{self.kind}'")
            n, k = run.data.partition.n_clients, run.train.clients_per_round
            if self.d is not None and n is not None and not k <= self.d <= n:
                bound = f">= train.clients_per_round ({k})" if self.d < k else f"<= data.partition.n_clients ({n})"
                raise ValueError(f"selection.d: must be {bound}, got {self.d}")

        d: int | None = Field(None, ge=1, le=100_000)
        losses: Literal["stale", "current"] = "stale"
        ties: Literal["random", "id"] = "random"
        cap: Literal["none", "planned"] = "none"

    @classmethod
    def from_config(cls, cfg: BaseModel, ctx: BuildContext) -> PowerOfChoice:
        """With ``cap: planned``, each client's cap ⌈K T^g p^u_k⌉ from the partition's sizes."""
        from fedgame.selection.phs import planned_counts

        c: Any = cfg
        caps = None
        if c.cap == "planned":
            if ctx.data is None:
                raise ValueError("selection.cap: 'planned' needs the partition's sizes (pass data)")
            sizes = np.asarray(ctx.data.sizes, dtype=np.float64)
            caps = planned_counts(sizes / sizes.sum(), ctx.run.train.clients_per_round, ctx.run.train.rounds)
        return cls(d=c.d, losses=c.losses, ties=c.ties, max_selections=caps)

    def __init__(
        self,
        *,
        d: int | None = None,
        losses: Literal["stale", "current"] = "stale",
        ties: Literal["random", "id"] = "random",
        max_selections: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        if d is not None and not (isinstance(d, (int, np.integer)) and d >= 1):
            raise ValueError(f"selection.d: must be an integer >= 1 (or null for every client), got {d!r}")
        if losses not in ("stale", "current"):
            raise ValueError(f"selection.losses: must be 'stale' or 'current', got {losses!r}")
        if ties not in ("random", "id"):
            raise ValueError(f"selection.ties: must be 'random' or 'id', got {ties!r}")
        self.d = None if d is None else int(d)
        self.loss_mode, self.ties = losses, ties
        self.caps: np.ndarray | None = None
        if max_selections is not None:
            caps = np.asarray(max_selections)
            if caps.ndim != 1 or caps.size == 0 or not np.all(np.isfinite(caps)) or np.any(caps < 0) or np.any(caps != np.round(caps)):
                raise ValueError(f"selection.max_selections: must be one integer >= 0 per client, got {caps!r}")
            self.caps = caps.astype(np.int64)
        self._loss: np.ndarray | None = None
        self._count: np.ndarray | None = None
        self._sequences: dict[tuple[int, bytes], tuple[np.ndarray, np.ndarray]] = {}
        self._exact: tuple[tuple[int, int, bytes, bytes], np.ndarray] | None = None
        self._rank: tuple[bytes, np.ndarray] | None = None

    def _check(self, state: RoundState) -> int:
        n, k = state.n_clients, state.k
        d = n if self.d is None else self.d
        if not 1 <= k <= n:
            raise ValueError(f"train.clients_per_round: must be in [1, {n}] (number of clients), got {k}")
        if d < k:
            raise ValueError(f"selection.d: must be >= train.clients_per_round ({k}), got {d}")
        if d > n:
            raise ValueError(f"selection.d: must be <= the number of clients ({n}), got {d}")
        if self.caps is not None and self.caps.size != n:
            raise ValueError(f"selection.max_selections: must have one entry per client ({n}), got {self.caps.size}")
        return d

    def losses(self, n: int) -> np.ndarray:
        """The last known loss of each client (+inf if never measured)."""
        if self._loss is None or self._loss.size != n:
            self._loss = np.full(n, np.inf)
        return self._loss

    def counts(self, n: int) -> np.ndarray:
        """How often each client has been selected so far."""
        if self._count is None or self._count.size != n:
            self._count = np.zeros(n, dtype=np.int64)
        return self._count

    def eligible(self, n: int) -> np.ndarray:
        """Clients still below their cap (all without caps)."""
        if self.caps is None:
            return np.arange(n)
        return np.flatnonzero(self.counts(n) < self.caps)

    def participation_bound(self) -> np.ndarray | None:
        return None if self.caps is None else self.caps.copy()

    def _ranks(self, loss: np.ndarray) -> np.ndarray:
        """The clients' ranks by ``loss`` (kept for the next call: in stale mode the losses
        change only after a round, and ``select`` asks twice per draw)."""
        key = loss.tobytes()
        if self._rank is None or self._rank[0] != key:
            rank = strict_ranks(loss) if self.ties == "id" else loss_ranks(loss)
            rank.flags.writeable = False
            self._rank = (key, rank)
        return self._rank[1]

    def _candidate_sets(self, sizes: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Every ordered candidate sequence with its successive-sampling probability
        Π_j |D_{s_j}| / (Σ|D| − Σ_{l<j} |D_{s_l}|); None when there are too many."""
        n = sizes.size
        if d == n:
            return np.arange(n)[None, :], np.ones(1)
        if math.perm(n, d) > MAX_SEQUENCES:
            return None
        key = (d, sizes.tobytes())
        if key not in self._sequences:
            seq = np.array(list(permutations(range(n), d)), dtype=np.int64)
            w = sizes.astype(np.float64)[seq]
            left = float(sizes.sum()) - np.concatenate([np.zeros((len(seq), 1)), np.cumsum(w, 1)[:, :-1]], 1)
            self._sequences[key] = (seq, np.prod(w / left, axis=1))
        return self._sequences[key]

    def _design(self, state: RoundState) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """The round's design over the eligible clients: (ids, sizes, loss ranks, k, d)."""
        d = self._check(state)
        n = state.n_clients
        sub = self.eligible(n)
        if sub.size == 0:
            raise ValueError("selection.max_selections: every client has reached its cap; no client is eligible")
        sizes = np.asarray(state.sizes)[sub]
        return sub, sizes, self._ranks(self.losses(n)[sub]), min(state.k, sub.size), min(d, sub.size)

    def inclusion(self, state: RoundState, rng: np.random.Generator | None = None) -> np.ndarray:
        """Inclusion probabilities at the stored losses and current caps: exact by enumeration
        where feasible, otherwise estimated from :data:`MC_ROUNDS` draws of ``rng`` (seeded by
        ``t`` if None). Ineligible clients have probability 0."""
        return self._inclusion(state, self._design(state), rng)

    def _inclusion(
        self, state: RoundState, design: tuple[np.ndarray, np.ndarray, np.ndarray, int, int], rng: np.random.Generator | None
    ) -> np.ndarray:
        sub, sizes, rank, k, d = design
        n = state.n_clients
        pi = np.zeros(n)
        sets = self._candidate_sets(sizes, d)
        if sets is not None:
            key = (k, d, sub.tobytes() + sizes.tobytes(), rank.tobytes())
            if self._exact is None or self._exact[0] != key:
                seq, prob = sets
                local = np.zeros(sub.size)
                np.add.at(local, seq.ravel(), (prob[:, None] * top_k_shares(seq, rank, k)).ravel())
                self._exact = (key, np.minimum(local, 1.0))
            pi[sub] = self._exact[1]
            return pi
        rng = np.random.default_rng(state.t) if rng is None else rng
        hits = np.zeros(sub.size)
        chunk = max(1, 2**22 // sub.size)
        for start in range(0, MC_ROUNDS, chunk):
            drawn = draw_rounds(rng, sizes, rank, d, k, min(chunk, MC_ROUNDS - start))
            hits += np.bincount(drawn.ravel(), minlength=sub.size)
        pi[sub] = hits / MC_ROUNDS
        return pi

    def probabilities(self, state: RoundState) -> np.ndarray:
        """Inclusion probabilities normalised to one draw (π_i / K)."""
        pi = self.inclusion(state)
        probs: np.ndarray = pi / pi.sum()
        return probs

    def select(self, state: RoundState, rng: np.random.Generator) -> Selection:
        design = self._design(state)
        sub, sizes, _, k, d = design
        n = state.n_clients
        cand = sub[np.argsort(rng.standard_exponential(sub.size) / sizes, kind="stable")[:d]]  # successive ∝ |D_i|
        loss = self.losses(n)
        if self.loss_mode == "current":
            if state.probe is None:
                raise ValueError("selection.losses: 'current' needs the engine's probe (RoundState.probe), got none")
            measured = np.asarray(state.probe.losses(cand), dtype=np.float64)
            loss[cand] = np.where(np.isnan(measured), np.inf, measured)
        rank = self._ranks(loss)[cand]
        if self.ties == "random":
            order = np.lexsort((rng.random(cand.size), rank))
        else:
            order = np.argsort(rank, kind="stable")
        idx = np.sort(cand[order[:k]])
        # π at the losses as they stand now: this round's measured ones in 'current' mode
        pi = self._inclusion(state, self._design(state) if self.loss_mode == "current" else design, rng)
        if self._candidate_sets(sizes, d) is None:  # MC estimate: count the realised draw
            pi = (pi * MC_ROUNDS + np.isin(np.arange(n), idx)) / (MC_ROUNDS + 1)
        self.counts(n)[idx] += 1
        return Selection(indices=idx, probs=pi[idx], k=state.k, scheme="inclusion")

    def after_round(self, state: RoundState, outcome: RoundOutcome) -> None:
        """rpow-d: remember each trained client's loss (NaN, a diverged client, counts as +inf)."""
        if self.loss_mode != "stale":
            return
        loss = self.losses(state.n_clients)
        for c, v in outcome.losses().items():
            loss[c] = np.inf if np.isnan(v) else v

    def state_dict(self) -> dict[str, Any]:
        return {
            "loss": None if self._loss is None else self._loss.copy(),
            "count": None if self._count is None else self._count.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        loss, count = state.get("loss"), state.get("count")
        self._loss = None if loss is None else np.asarray(loss, dtype=np.float64).copy()
        self._count = None if count is None else np.asarray(count, dtype=np.int64).copy()
