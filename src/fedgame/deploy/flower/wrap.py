"""fedgame's mechanisms inside a user's own Flower app: a strategy wrapper and a ClientApp mod.

A Flower user who already has a ``ServerApp`` running Flower's ``FedAvg`` (or any Message-API
strategy) and a ``ClientApp`` with their own training adds fedgame by wrapping, the way Flower's
own ``DifferentialPrivacyServerSideFixedClipping`` wraps a strategy and ``fixedclipping_mod``
wraps a ClientApp:

* :class:`FedgameSampling` wraps the strategy. Each round it lets the inner strategy build its
  training payload (arrays and config), then draws the round's nodes with a fedgame
  :class:`~fedgame.selection.base.SelectionStrategy` (privacy-aware x ∝ ρ, PHS, data-size,
  uniform...), sends the payload to those nodes only, each with its own ρ_i^t where a plan gives
  one (:data:`KEY_RHO`), and before the inner strategy aggregates it sets each reply's weight to
  fedgame's importance weight n_i·m_i/(K x_i) (draws; FedPCS Eq. 4) or n_i/π_i (inclusion
  samples). Flower's ``FedAvg`` divides by the sum of the weights, so the aggregate is the
  self-normalised (Hájek) form of Eq. 4's estimator: a weighted *average* of full models, which
  stays a model whatever the draw, where Eq. 4's unnormalised sum is written for displacements.
  It records, per round, the nodes drawn, their inclusion probabilities, the weights, the
  payments R_t ρ_i^t of an incentive plan (FedPCS Algorithm 2), who replied, and each node's
  reported ε (:attr:`FedgameSampling.records`, and a JSON-lines file when ``log_path`` is given).
* :func:`privacy_mod` wraps the ClientApp: after the user's training it clips the model
  displacement w_i − w(t) to L2 norm C and adds Gaussian noise calibrated to ρ-zCDP for a
  replace-one change of the client's data (sensitivity 2C, σ = 2C/√(2ρ); Bun & Steinke 2016,
  Prop. 1.6), keeps the node's privacy ledger in its ``Context.state`` (it survives the fresh
  process Flower starts per message) and reports ρ this round, total ρ and ε at δ in the reply's
  metrics (:data:`METRIC_RHO`, :data:`METRIC_RHO_TOTAL`, :data:`METRIC_EPSILON`). A round with no
  ρ (neither from the server's message nor the mod's own default) is refused with an error reply:
  a release is never made without its noise.

Both are hand-written on Flower's Message API (``flwr.serverapp.strategy.Strategy``,
``flwr.clientapp`` mods) because Flower ships no sampling hook: its strategies draw nodes
uniformly inside ``configure_train``. The noise, the ledger and the ε conversion are fedgame's own
(:class:`~fedgame.privacy.mechanisms.GaussianMechanism`, :class:`~fedgame.privacy.accountants.Ledger`,
:func:`~fedgame.privacy.analysis.zcdp.zcdp_to_eps`), the same code the simulator charges.
``docs/flower.md`` walks through an app wrapped this way.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from fedgame.deploy.flower._env import configure

configure()

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import Strategy  # noqa: E402

from fedgame.core.types import RoundState, Selection  # noqa: E402
from fedgame.privacy.accountants import Ledger, event_rho  # noqa: E402
from fedgame.privacy.analysis.zcdp import zcdp_to_eps  # noqa: E402
from fedgame.privacy.mechanisms import GaussianMechanism  # noqa: E402
from fedgame.selection.base import SelectionStrategy  # noqa: E402
from fedgame.selection.privacy_aware import PrivacyAware  # noqa: E402
from fedgame.sim.updates import upload_weights  # noqa: E402

__all__ = ["KEY_RHO", "METRIC_EPSILON", "METRIC_RHO", "METRIC_RHO_TOTAL", "FedgameSampling", "RoundRecord", "privacy_mod"]

#: config key of a training message: the ρ_i^t (zCDP) the server's plan gives this node this round
KEY_RHO = "fedgame-rho"
#: reply metrics written by :func:`privacy_mod`: ρ spent this round, in total, and ε at the mod's δ
METRIC_RHO = "fedgame-rho"
METRIC_RHO_TOTAL = "fedgame-rho-total"
METRIC_EPSILON = "fedgame-epsilon"
_STATE = "fedgame-ledger"


@dataclass
class RoundRecord:
    """What :class:`FedgameSampling` did in one round: the nodes drawn (one entry per draw, in
    draw order, and their one-draw or inclusion probabilities), the weight each distinct node's
    reply entered the aggregate with, the payment each was owed, who replied, who did not, and
    the ε each reported (:data:`METRIC_EPSILON`, when its ClientApp runs :func:`privacy_mod`)."""

    round: int
    scheme: str
    draws: list[int]
    probs: list[float]
    weights: dict[int, float] = field(default_factory=dict)
    payments: dict[int, float] = field(default_factory=dict)
    replied: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    epsilon: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("weights", "payments", "epsilon"):  # JSON keys are strings
            d[k] = {str(n): v for n, v in d[k].items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RoundRecord:
        """The record :meth:`to_json` wrote (node ids back to integers)."""
        keyed = {k: {int(n): float(v) for n, v in d[k].items()} for k in ("weights", "payments", "epsilon")}
        return cls(
            round=int(d["round"]),
            scheme=str(d["scheme"]),
            draws=[int(n) for n in d["draws"]],
            probs=[float(p) for p in d["probs"]],
            replied=[int(n) for n in d["replied"]],
            missing=[int(n) for n in d["missing"]],
            **keyed,
        )


class FedgameSampling(Strategy):
    """Wrap a Flower Message-API ``strategy``: draw each round's nodes with ``selection`` and
    weight their replies by fedgame's aggregation rule (see the module docstring).

    ``clients_per_round``: K, the draws (or the target sample size) per round. ``aggregation``:
    ``"importance"`` (n_i·m_i/(K x_i), or n_i/π_i: FedPCS Eq. 4, self-normalised by the inner
    strategy), ``"fedavg"`` (the inner strategy's own n_i weights) or ``"mean"`` (each reply
    equally). ``rho``: per-node zCDP budgets, (N,) or (N, rounds) — sent to each drawn node as
    :data:`KEY_RHO` for :func:`privacy_mod`; ``reward``: R_t per round, making the payment of a
    drawn node R_t ρ_i^t (FedPCS Algorithm 2). ``n_nodes``: how many nodes the federation has
    (default: the length of ``rho``, else the nodes connected at the first round); the wrapper
    waits up to ``wait`` seconds for them. Node i of the selection is the i-th smallest Flower
    node id. ``seed``: the draws' RNG. ``log_path``: a JSON-lines file, one
    :class:`RoundRecord` per round, appended as rounds finish."""

    def __init__(
        self,
        strategy: Strategy,
        selection: SelectionStrategy,
        *,
        clients_per_round: int,
        aggregation: Literal["importance", "fedavg", "mean"] = "importance",
        rho: Sequence[float] | np.ndarray | None = None,
        reward: Sequence[float] | np.ndarray | None = None,
        sizes: Sequence[int] | np.ndarray | None = None,
        n_nodes: int | None = None,
        seed: int = 0,
        wait: float = 120.0,
        log_path: str | Path | None = None,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"strategy: must be a Flower Message-API Strategy (flwr.serverapp.strategy), got {type(strategy).__name__}")
        if not isinstance(selection, SelectionStrategy):
            raise TypeError(f"selection: must be a fedgame SelectionStrategy, got {type(selection).__name__}")
        if not (isinstance(clients_per_round, int) and clients_per_round >= 1):
            raise ValueError(f"clients_per_round: must be an integer >= 1, got {clients_per_round!r}")
        if aggregation not in ("importance", "fedavg", "mean"):
            raise ValueError(f"aggregation: must be 'importance', 'fedavg' or 'mean', got {aggregation!r}")
        self.central_dp = _is_central_dp(strategy)
        if self.central_dp and aggregation != "mean":
            raise ValueError(
                f"aggregation: Flower's {type(strategy).__name__} calibrates its noise to an unweighted mean of "
                f"num_sampled_clients replies; weighted replies would move the mean by more than clip/K: use "
                f"aggregation='mean' (allowed here: 'mean'), got {aggregation!r}"
            )
        self.strategy, self.selection, self.k, self.aggregation = strategy, selection, clients_per_round, aggregation
        self.rho = None if rho is None else _positive(rho, "rho")
        self.reward = None if reward is None else np.asarray(reward, dtype=np.float64)
        if self.reward is not None and self.rho is None:
            raise ValueError("reward: payments R_t ρ_i^t need rho")
        if self.reward is not None and (self.reward.ndim != 1 or not np.all(np.isfinite(self.reward)) or np.any(self.reward < 0)):
            raise ValueError("reward: must be a 1-D array of finite values >= 0 (R_t per round)")
        if n_nodes is None and self.rho is not None:
            n_nodes = int(self.rho.shape[0])
        if n_nodes is not None and (self.rho is not None and self.rho.shape[0] != n_nodes):
            raise ValueError(f"rho: has {self.rho.shape[0]} rows but n_nodes is {n_nodes}")
        self.n_nodes = n_nodes
        self.sizes = None if sizes is None else _positive(sizes, "sizes")
        self.wait = float(wait)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[int] = []  # selection index → Flower node id
        self.records: list[RoundRecord] = []
        self._drawn: dict[int, Selection] = {}
        self.log_path = None if log_path is None else Path(log_path)

    @classmethod
    def from_fedpcs_plan(cls, strategy: Strategy, plan: Any, *, clients_per_round: int, **kwargs: Any) -> FedgameSampling:
        """FedPCS in a Flower app: privacy-aware draws x_i^t ∝ ρ_i^t from a solved
        :class:`~fedgame.incentives.fedpcs.FedPCSPlan` (``fedgame solve fedpcs``, or a run's
        ``game.npz``), ρ_i^t sent to each drawn node, payments R_t ρ_i^t recorded."""
        return cls(strategy, PrivacyAware(rho=plan.rho), clients_per_round=clients_per_round, rho=plan.rho, reward=plan.reward, **kwargs)

    # -- Flower's Strategy interface -------------------------------------------------------
    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        inner = list(self.strategy.configure_train(server_round, arrays, config, grid))
        if not inner:  # the inner strategy trains nobody this round
            return []
        nodes = self._connect(grid)
        n = len(nodes)
        t = server_round - 1
        sizes = self.sizes if self.sizes is not None else np.ones(n)
        state = RoundState(t=t, k=self.k, sizes=sizes, theta=sizes / sizes.sum())
        sel = self.selection.select(state, self.rng)
        if sel.indices.size and int(sel.indices.max()) >= n:
            raise ValueError(f"selection: drew client {int(sel.indices.max())} but the federation has {n} nodes")
        if self.central_dp and (np.unique(sel.indices).size != sel.indices.size or sel.indices.size != self.k):
            raise ValueError(
                f"selection: Flower's {type(self.strategy).__name__} needs exactly clients_per_round = {self.k} distinct "
                f"nodes a round (its noise is calibrated to their mean), but {type(self.selection).__name__} drew "
                f"{np.unique(sel.indices).size} distinct of {sel.indices.size}: use a sampler without replacement "
                "(Uniform(replace=False), PrivacyAware(sampler='pips'))"
            )
        self._drawn[server_round] = sel
        rec = RoundRecord(server_round, sel.scheme, [nodes[i] for i in sel.indices.tolist()], sel.probs.tolist())
        template = inner[0]
        out = []
        for i in sel.clients.tolist():
            content = RecordDict({k: v for k, v in template.content.items()})
            rho_i = self._rho(i, t)
            if rho_i is not None:
                cfg_key, old = next(((k, v) for k, v in content.items() if isinstance(v, ConfigRecord)), ("config", None))
                cfg = ConfigRecord(dict(old)) if isinstance(old, ConfigRecord) else ConfigRecord()
                cfg[KEY_RHO] = rho_i
                content[cfg_key] = cfg
                if self.reward is not None:
                    rec.payments[nodes[i]] = float(self.reward[min(t, self.reward.size - 1)] * rho_i)
            out.append(Message(content=content, message_type=template.metadata.message_type, dst_node_id=nodes[i]))
        self.records.append(rec)
        return out

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        sel, rec = self._drawn.pop(server_round), self.records[-1]
        index = {node: i for i, node in enumerate(self.nodes)}
        key = str(getattr(self.strategy, "weighted_by_key", "num-examples"))
        n_of: dict[int, float] = {}
        for msg in replies:
            node = msg.metadata.src_node_id
            if msg.has_error() or node not in index:
                continue
            metrics = _metrics(msg)
            if metrics is None or key not in metrics:
                continue  # the inner strategy's own consistency check names what is missing
            n_of[index[node]] = float(metrics[key])  # type: ignore[arg-type]  # MetricRecord values may be lists; this one is a scalar
            if METRIC_EPSILON in metrics:
                rec.epsilon[node] = float(metrics[METRIC_EPSILON])  # type: ignore[arg-type]  # a MetricRecord value may be a list
        rec.replied = sorted(self.nodes[i] for i in n_of)
        rec.missing = sorted(set(self.nodes[i] for i in sel.clients.tolist()) - set(rec.replied))
        weights = self._weights(sel, n_of)
        for msg in replies:
            node = msg.metadata.src_node_id
            i = index.get(node)
            if i is None or i not in n_of:
                continue
            rec.weights[node] = weights[i]
            if self.aggregation != "fedavg":
                metrics = _metrics(msg)
                assert metrics is not None
                metrics[key] = weights[i]
        if self.sizes is not None:
            for i, n_i in n_of.items():
                self.sizes[i] = n_i
        self._log(rec)
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a ServerApp that stops and resumes must keep for the draws to go on as if it had
        not stopped: the draws' RNG state, the node ids fixed at the first round, the sizes the
        replies reported, the selection strategy's own state and the rounds' records (JSON
        types and NumPy arrays: store it with the ServerApp's own checkpoint)."""
        return {
            "rng": self.rng.bit_generator.state,
            "nodes": list(self.nodes),
            "sizes": None if self.sizes is None else self.sizes.copy(),
            "selection": self.selection.state_dict(),
            "records": [r.to_json() for r in self.records],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (the same strategy, selection and seed as the
        wrapper that saved it): the next round draws what the saved wrapper would have drawn."""
        self.rng.bit_generator.state = state["rng"]
        self.nodes = [int(n) for n in state["nodes"]]
        if state["sizes"] is not None:
            self.sizes = np.asarray(state["sizes"], dtype=np.float64).copy()
        self.selection.load_state_dict(state["selection"])
        self.records = [RoundRecord.from_json(r) for r in state["records"]]

    # -- helpers -----------------------------------------------------------------------------
    def _connect(self, grid: Grid) -> list[int]:
        """The federation's node ids, fixed at the first round (selection index i ↔ the i-th
        smallest id): waits up to ``wait`` seconds for ``n_nodes`` of them."""
        if self.nodes:
            return self.nodes
        deadline = time.monotonic() + self.wait
        while True:
            ids = sorted(int(n) for n in grid.get_node_ids())
            if self.n_nodes is None and ids or self.n_nodes is not None and len(ids) >= self.n_nodes:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"n_nodes: {len(ids)} nodes connected after {self.wait:g} s, need {self.n_nodes or 1}")
            time.sleep(0.5)
        self.nodes = ids[: self.n_nodes] if self.n_nodes is not None else ids
        if self.sizes is not None and self.sizes.size != len(self.nodes):
            raise ValueError(f"sizes: has {self.sizes.size} entries but the federation has {len(self.nodes)} nodes")
        return self.nodes

    def _rho(self, i: int, t: int) -> float | None:
        if self.rho is None:
            return None
        return float(self.rho[i] if self.rho.ndim == 1 else self.rho[i, min(t, self.rho.shape[1] - 1)])

    def _weights(self, sel: Selection, n_of: dict[int, float]) -> dict[int, float]:
        """Per replying node: n_i·m_i/(K x_i) or n_i/π_i (``importance``), n_i (``fedavg``) or 1."""
        if self.aggregation == "mean":
            return {i: 1.0 for i in n_of}
        if self.aggregation == "fedavg":
            return dict(n_of)
        theta = np.zeros(max(len(self.nodes), int(sel.indices.max(initial=0)) + 1))
        for i, n_i in n_of.items():
            theta[i] = n_i
        per_upload = upload_weights(sel, sel.importance_weights(theta))
        return {int(i): float(w) for i, w in zip(sel.clients.tolist(), per_upload, strict=True) if int(i) in n_of}

    def _log(self, rec: RoundRecord) -> None:
        if self.log_path is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as f:
            f.write(json.dumps(rec.to_json()) + "\n")


def _is_central_dp(strategy: Strategy) -> bool:
    """Whether ``strategy`` is one of Flower's central-DP wrappers (server- or client-side
    clipping), whose noise assumes an unweighted mean of a fixed number of replies."""
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideAdaptiveClipping,
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideAdaptiveClipping,
        DifferentialPrivacyServerSideFixedClipping,
    )

    return isinstance(
        strategy,
        (
            DifferentialPrivacyClientSideAdaptiveClipping,
            DifferentialPrivacyClientSideFixedClipping,
            DifferentialPrivacyServerSideAdaptiveClipping,
            DifferentialPrivacyServerSideFixedClipping,
        ),
    )


def _positive(v: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.array(v, dtype=np.float64)
    if a.ndim not in (1, 2) or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name}: must be a non-empty (N,) or (N, rounds) array of finite values > 0")
    return a


def _metrics(msg: Message) -> MetricRecord | None:
    """The reply's MetricRecord (Flower's strategies read the first one)."""
    return next(iter(msg.content.metric_records.values()), None)


# -- the ClientApp mod ---------------------------------------------------------------------------
Mod = Callable[[Message, Context, Callable[[Message, Context], Message]], Message]


def privacy_mod(*, clip: float, rho: float | None = None, delta: float = 1e-5, seed: int | None = None) -> Mod:
    """A Flower ClientApp mod: clip the training reply's displacement to ``clip`` and noise it for
    ρ-zCDP (ρ: the server's :data:`KEY_RHO` for this round, else ``rho``), charge the node's
    ledger and report ρ and ε at ``delta`` (see the module docstring). ``seed``: a fixed noise
    seed for tests (the round's seed is ``seed + server-round``); by default each release draws
    a fresh seed from :mod:`secrets`. Use it as ``ClientApp(mods=[privacy_mod(clip=1.0)])``;
    it must be the last mod to touch the arrays."""
    if not (isinstance(clip, (int, float)) and 0 < clip < math.inf):
        raise ValueError(f"clip: must be a finite number > 0, got {clip!r}")
    if rho is not None and not (0 < rho < math.inf):
        raise ValueError(f"rho: must be a finite number > 0, got {rho!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta: must be in (0, 1), got {delta!r}")

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, context)
        sent = list(msg.content.array_records.values())
        if len(sent) != 1:
            return _error(msg, f"privacy_mod: a training message must carry exactly one ArrayRecord, got {len(sent)}")
        cfg = next(iter(msg.content.config_records.values()), ConfigRecord())
        r = float(cfg[KEY_RHO]) if KEY_RHO in cfg else rho  # type: ignore[arg-type]  # ConfigRecord values may be lists; rho is a scalar
        if r is None or not (0 < r < math.inf):
            return _error(
                msg,
                f"privacy_mod: no ρ for this round ({KEY_RHO} in the message's config, or privacy_mod(rho=...)), "
                f"got {r!r}; refusing to release an update without noise",
            )
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        got = list(reply.content.array_records.items())
        if len(got) != 1 or list(got[0][1].keys()) != list(sent[0].keys()):
            return _error(msg, "privacy_mod: the reply must carry one ArrayRecord with the keys the server sent")
        key, arrays = got[0]
        before = sent[0].to_numpy_ndarrays()
        after = arrays.to_numpy_ndarrays()
        shapes = [a.shape for a in before]
        delta_v = torch.from_numpy(
            np.concatenate([(b.astype(np.float64) - a.astype(np.float64)).ravel() for a, b in zip(before, after, strict=True)])
        )
        mech = GaussianMechanism.for_zcdp(r, clip=float(clip), sensitivity=2.0 * float(clip))
        gen = torch.Generator().manual_seed((seed + int(cfg.get("server-round", 0))) if seed is not None else secrets.randbits(63))  # type: ignore[arg-type]  # ConfigRecord values may be lists; server-round is an int
        noisy = mech.privatize(delta_v, gen).numpy()
        out, at = [], 0
        for a, shape in zip(before, shapes, strict=True):
            size = int(np.prod(shape))
            out.append((a.astype(np.float64) + noisy[at : at + size].reshape(shape)).astype(a.dtype))
            at += size
        reply.content.array_records[key] = ArrayRecord({k: Array(v) for k, v in zip(arrays.keys(), out, strict=True)})
        ledger = Ledger.from_list(json.loads(str(context.state[_STATE]["ledger"]))) if _STATE in context.state else Ledger()
        ledger.append(mech.event())
        context.state[_STATE] = ConfigRecord({"ledger": json.dumps(ledger.to_list())})
        total = math.fsum(c * event_rho(e) for e, c in ledger)
        metrics = _metrics(reply)
        if metrics is None:
            metrics = MetricRecord()
            reply.content["fedgame-metrics"] = metrics
        metrics[METRIC_RHO] = event_rho(mech.event())
        metrics[METRIC_RHO_TOTAL] = total
        metrics[METRIC_EPSILON] = float(zcdp_to_eps(total, delta))
        return reply

    return mod


def _error(msg: Message, reason: str) -> Message:
    return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)
