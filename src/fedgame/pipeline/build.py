"""From a validated recipe to a ready engine: the only place that maps ``kind`` to a class."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgame.core.plugins import BuildContext
from fedgame.core.seeding import Streams
from fedgame.core.server_update import ServerUpdate, chain
from fedgame.data import DatasetSplit, FederatedDataset, natural, open_dataset, partition
from fedgame.pipeline.config import (
    PERSONAL_AGGREGATORS,
    NaturalPartition,
    parse_recipe,
    JDPCfg,
    JDPPrivacyCfg,
    QIDPFLCfg,
    RunConfig,
)
from fedgame.incentives import (
    INCENTIVES,
    FedPCSPlan,
    Incentive,
    QIDPFLPlan,
)
from fedgame.incentives.auctions import AuctionOutcome, KnapsackAuction, UnitPriceAuction, draw_costs
from fedgame.incentives.fedpcs.plugin import FedPCSIncentive, fedpcs_game
from fedgame.incentives.fedpcs.plugin import rho_source as baseline_rho
from fedgame.incentives.qidpfl import QIDPFLIncentive
from fedgame.models import build_model, count_params, model_options
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.jdp import local_perturbation
from fedgame.privacy.mechanisms import GaussianMechanism
from fedgame.robust import DIRTY_LABEL_TARGETS, ONE_CLASS_SOURCES, choose_adversary, dirty_label
from fedgame.privacy.plans import PRIVACY_PLANS, ClientPrivacy
from fedgame.selection import SELECTIONS, SelectionStrategy
from fedgame.sim import AGGREGATORS, Engine, LocalSpec, LocalTrainer, server_sgd
from fedgame.sim.client import Executor, InProcessExecutor
from fedgame.sim.jdp import JDPEngine, LeaveOneOut, RandomGroups, ServerRule, global_rule
from fedgame.sim.losses import make_loss
from fedgame.sim.pool import PoolExecutor, WorkerContext, WorkerPool, available_cores

__all__ = [
    "Built",
    "BuiltJDP",
    "ClientSide",
    "attach_executor",
    "baseline_rho",
    "build_client_side",
    "build_data",
    "build_silo_side",
    "check_delta",
    "check_silo",
    "load_silo",
    "scores_on_validation",
    "load_split",
    "natural_groups",
    "with_clients",
    "build_engine",
    "build_game",
    "build_jdp",
    "build_plan",
    "build_qidpfl",
    "build_trainer",
    "check_model",
    "fedpcs_game",
    "needs_label_counts",
    "query_label_counts",
]

log = logging.getLogger(__name__)


@dataclass
class Built:
    engine: Engine
    data: FederatedDataset
    model: torch.nn.Module
    plan: FedPCSPlan | QIDPFLPlan | None = None
    phs: Any = None
    pool: WorkerPool | None = None

    def close(self) -> None:
        """Stop the run's worker processes, if it has any."""
        if self.pool is not None:
            self.pool.close()


def plugin_call(field: str, factory: Any, method: str, section: Any, ctx: BuildContext) -> Any:
    """``factory.<method>(section, ctx)`` (``from_config``, ``setup``, ``build_plan``): what a
    plug-in's own code raises there other than a ``ValueError`` (a keyword ``__init__`` does not
    take, a missing key, an attribute of ``ctx`` that is None) becomes one ``ValueError`` line
    naming the recipe field, the plug-in and its class; a ``ValueError`` is already such a line."""
    try:
        return getattr(factory, method)(section, ctx)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of a plug-in's code is the recipe's plug-in's
        what = " ".join(str(e).split())[:300]
        raise ValueError(
            f"{field}: {section.kind!r} ({getattr(factory, '__qualname__', factory)}) could not be built "
            f"from the recipe ({method}): {type(e).__name__}: {what}"
        ) from e


def privacy_setup(cfg: RunConfig, ctx: BuildContext) -> Any:
    """What the recipe's privacy plan fixes before training for the selection to read (its
    ``setup``; PHS's client budgets), or None."""
    return plugin_call("privacy.kind", PRIVACY_PLANS.get(cfg.privacy.kind), "setup", cfg.privacy, ctx)


def load_split(cfg: RunConfig) -> DatasetSplit:
    """The recipe's dataset (``data.dataset`` with its ``data.options``), loaded and normalised."""
    ds = open_dataset(cfg.data.dataset, cfg.data.options)
    return ds.load(root=cfg.data.root, max_train=cfg.data.max_train, max_test=cfg.data.max_test)


#: the partitions that do not read class labels (the only ones a regression dataset can take)
LABEL_FREE_PARTITIONS = ("iid", "quantity")


def natural_groups(cfg: RunConfig, split: DatasetSplit) -> np.ndarray:
    """The per-example group codes a natural partition makes its clients of: the grouping
    ``data.partition.column`` names (or the dataset's only one)."""
    p = cfg.data.partition
    assert isinstance(p, NaturalPartition)
    have = sorted(split.groups)
    if p.column is None and len(have) == 1:
        return np.asarray(split.groups[have[0]])
    if p.column is None or p.column not in split.groups:
        said = "must name one" if p.column is None else f"{p.column!r} is not one"
        known = ", ".join(have) if have else "none (a csv dataset keeps the columns its options' groups list)"
        raise ValueError(f"data.partition.column: {said} of the dataset's groupings: {known}")
    return np.asarray(split.groups[p.column])


def with_clients(cfg: RunConfig, split: DatasetSplit) -> RunConfig:
    """``cfg`` with a natural partition's ``n_clients`` set to the number of groups the data
    gives (every other recipe unchanged): what the games, the selection and config.yaml read."""
    p = cfg.data.partition
    if not isinstance(p, NaturalPartition):
        return cfg
    parts = natural(natural_groups(cfg, split), n_clients=p.n_clients, min_size=p.min_size, what="data.partition")
    return _n_clients(cfg, len(parts))


def _n_clients(cfg: RunConfig, n: int) -> RunConfig:
    """``cfg`` with ``data.partition.n_clients = n`` where a natural partition left it out."""
    p = cfg.data.partition
    if not isinstance(p, NaturalPartition) or p.n_clients == n:
        return cfg
    raw = cfg.model_dump(mode="json")
    raw["data"]["partition"]["n_clients"] = n
    return parse_recipe(raw)  # validated again: every check that needs the number of clients runs now


def build_data(cfg: RunConfig, streams: Streams, split: DatasetSplit | None = None) -> FederatedDataset:
    """Load the dataset named by the recipe (or take ``split``, data given in memory) and
    partition it with the run's partition stream (a natural partition draws nothing)."""
    split = load_split(cfg) if split is None else split
    train, test = split.train, split.test
    p = cfg.data.partition
    if isinstance(p, NaturalPartition):
        parts = natural(natural_groups(cfg, split), n_clients=p.n_clients, min_size=p.min_size, what="data.partition")
        return check_delta(cfg, FederatedDataset(train=train, test=test, parts=tuple(parts)))
    params = p.model_dump(exclude={"kind", "n_clients"})
    n_val = cfg.data.validation
    if train.classes == 0 and p.kind not in LABEL_FREE_PARTITIONS:
        raise ValueError(
            f"data.partition.kind: {p.kind!r} splits by class label, and this dataset is a regression (float targets); "
            f"allowed: {', '.join(LABEL_FREE_PARTITIONS)}, natural"
        )

    def draw_parts(labels: np.ndarray) -> list[np.ndarray]:
        if train.classes == 0:  # a label-free partition reads the labels only for their number
            labels = np.zeros(labels.shape, dtype=np.int64)
        try:
            return list(partition(p.kind, labels, p.n_clients, streams.numpy("partition"), **params))
        except ValueError as e:  # name the recipe field: data.partition.<field>
            msg = str(e)
            raise ValueError(f"data.{msg}" if msg.startswith("partition.") else f"data.partition: {msg}") from None

    if n_val == 0:
        return check_delta(cfg, FederatedDataset(train=train, test=test, parts=tuple(draw_parts(train.y))))
    if n_val >= len(train.y):
        raise ValueError(f"data.validation: must be < the {len(train.y)} training examples, got {n_val}")
    # JDP-FL's validation set (the paper gives neither size nor provenance): the server's
    # validation examples drawn uniformly (own stream) and removed from the pool the partition
    # splits among clients.
    perm = streams.numpy("validation").permutation(len(train.y))
    val, pool = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    parts = draw_parts(train.y[pool])
    return check_delta(cfg, FederatedDataset(train=train, test=test, parts=tuple(pool[q] for q in parts), validation=val))


def check_delta(cfg: RunConfig, data: FederatedDataset) -> FederatedDataset:
    """Refuse an ``accountant.delta`` that makes every reported ε meaningless: (ε, δ)-DP with
    δ ≥ 1/n allows a mechanism that publishes one of a client's n examples in the clear, so δ
    must be below 1/n for the largest client's n (with a privacy plan that gives any privacy;
    DP-SGD's own ``privacy.delta`` must equal it, checked with the recipe)."""
    if cfg.privacy.kind == "none" or data.n_clients == 0:
        return data
    n = int(data.sizes.max())
    if not cfg.accountant.delta < 1.0 / n:
        raise ValueError(
            f"accountant.delta: must be < 1/n = {1.0 / n:.3g} for the largest client's n = {n} examples "
            f"(a larger δ allows publishing an example in the clear), got {cfg.accountant.delta:g}"
        )
    return data


def build_game(cfg: RunConfig) -> FedPCSPlan | None:
    """The recipe's FedPCS plan (:meth:`FedPCSIncentive.build_plan`), None without
    ``incentive.kind: fedpcs``: what the contract tests and the figures build alone."""
    return FedPCSIncentive.build_plan(cfg.incentive, BuildContext(run=cfg))


def build_qidpfl(
    cfg: RunConfig, data: FederatedDataset, streams: Streams, dim: int, *, label_counts: np.ndarray | None = None
) -> QIDPFLPlan | None:
    """The recipe's QI-DPFL plan (:meth:`QIDPFLIncentive.build_plan`), None without
    ``incentive.kind: qidpfl``."""
    if not isinstance(cfg.incentive, QIDPFLCfg):
        return None
    return QIDPFLIncentive.build_plan(cfg.incentive, BuildContext(run=cfg, data=data, streams=streams, label_counts=label_counts, dim=dim))


def build_plan(cfg: RunConfig, ctx: BuildContext) -> Any:
    """What the recipe's incentive solves before training (its ``build_plan``; None for most)."""
    return plugin_call("incentive.kind", INCENTIVES.get(cfg.incentive.kind), "build_plan", cfg.incentive, ctx)


def build_privacy(
    cfg: RunConfig,
    data: FederatedDataset,
    plan: FedPCSPlan | QIDPFLPlan | None = None,
    *,
    phs: Any = None,
    selection: SelectionStrategy | None = None,
) -> ClientPrivacy:
    pc = cfg.privacy
    if pc.kind not in PRIVACY_PLANS:
        # never fail open: a privacy kind this builder does not know must not train without its noise
        raise ValueError(f"privacy.kind: {pc.kind!r} has no builder in this pipeline; refusing to train without the privacy it asks for")
    factory = PRIVACY_PLANS.get(pc.kind)
    ctx = BuildContext(run=cfg, data=data, plan=plan, phs=phs, selection=selection)
    plan_: ClientPrivacy = plugin_call("privacy.kind", factory, "from_config", pc, ctx)
    return plan_


def build_selection(
    cfg: RunConfig,
    plan: FedPCSPlan | QIDPFLPlan | None = None,
    data: FederatedDataset | None = None,
    *,
    phs: Any = None,
    streams: Streams | None = None,
    label_counts: np.ndarray | None = None,
) -> SelectionStrategy:
    """The recipe's selection; ``label_counts`` are the clients' queried histograms (None:
    the server's copy of the partition), for ``fedcbs`` and ``screened``."""
    sel = cfg.selection
    factory = SELECTIONS.get(sel.kind)
    ctx = BuildContext(
        run=cfg,
        data=data,
        rng=(streams or Streams(seed=cfg.seed)).numpy("selection_build"),
        plan=plan,
        label_counts=label_counts,
        streams=streams or Streams(seed=cfg.seed),
        phs=phs,
    )
    strategy: SelectionStrategy = plugin_call("selection.kind", factory, "from_config", sel, ctx)
    return strategy


def build_incentive(cfg: RunConfig, plan: FedPCSPlan | QIDPFLPlan | None = None, data: FederatedDataset | None = None) -> Incentive:
    """The recipe's incentive, built by its class from the plan the pipeline solved (FedPCS's game,
    QI-DPFL's reward game) or from its own fields (a plug-in)."""
    factory = INCENTIVES.get(cfg.incentive.kind)
    incentive: Incentive = plugin_call("incentive.kind", factory, "from_config", cfg.incentive, BuildContext(run=cfg, data=data, plan=plan))
    return incentive


def build_server_update(cfg: RunConfig, privacy: ClientPrivacy | None = None, accountant: Any = None) -> ServerUpdate:
    """The recipe's aggregation rule, then the server step. A central-DP privacy plan (one whose
    :meth:`~fedgame.privacy.plans.ClientPrivacy.server_update` gives one: ``central_dp``) takes
    the rule's place: it clips, sums and noises the raw uploads, and charges ``accountant``."""
    central = privacy.server_update(accountant) if privacy is not None else None
    first = central if central is not None else AGGREGATORS.get(cfg.aggregation.kind)()
    return chain(first, server_sgd(lr=cfg.server.lr))


def workers_for(cfg: RunConfig, jobs: int, cores: int | None = None) -> int:
    """How many worker processes a run uses: ``train.workers``, or (None) the ``cores`` it may
    use (default: this machine's) capped by the round's ``jobs``; 1 on a GPU."""
    w = cfg.train.workers
    if w is None:
        from fedgame.sim.local import resolve_device

        share = cores if cores is not None else available_cores()
        w = 1 if resolve_device(cfg.train.device).type == "cuda" else min(share, max(1, int(jobs)))
    return int(w)


def set_threads(cfg: RunConfig, workers: int = 1, cores: int | None = None) -> None:
    """This process's torch threads: the recipe's ``threads``; with a worker pool, 1 unless
    given (the workers do the heavy work, and one thread keeps the server's arithmetic the same
    as on the sequential path with ``threads: 1``); with a share of ``cores`` (a grid running
    several cells at once), that share."""
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)
    elif workers > 1:
        torch.set_num_threads(1)
    elif cores is not None:
        torch.set_num_threads(max(1, cores))


def start_pool(
    cfg: RunConfig, trainer: LocalTrainer, parts: list[torch.Tensor], streams: Streams, data: FederatedDataset, workers: int
) -> WorkerPool | None:
    """A pool of ``workers`` processes holding the trainer, the parts and the test set (None
    when ``workers`` is 1: the sequential path)."""
    if workers <= 1:
        return None
    _, _, x_test, y_test = data.as_tensors()
    ctx = WorkerContext(trainer=trainer, parts=parts, streams=streams, classes=data.train.classes, eval_sets={"test": (x_test, y_test)})
    return WorkerPool(ctx, workers)


def model_for(cfg: RunConfig, data: FederatedDataset, streams: Streams) -> torch.nn.Module:
    """The recipe's model (``model.name`` with ``model.options``) for ``data``'s examples and
    classes, initialised from the ``init`` stream. A token model's ``vocab`` option, when the
    recipe leaves it out, is the data's (the largest token id + 1)."""
    options = dict(cfg.model.options)
    if data.train.kind == "tokens" and "vocab" in model_options(cfg.model.name) and "vocab" not in options:
        options["vocab"] = int(max(data.train.x.max(initial=0), data.test.x.max(initial=0))) + 1
    outputs = make_loss(cfg.train.loss).outputs(data.train.classes)
    return build_model(cfg.model.name, in_shape=data.train.shape, num_classes=outputs, seed=streams.integer("init"), **options)


#: layers that mix the examples of a batch: per-example gradients (DP-SGD) are undefined with them
_BATCH_MIXING = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.SyncBatchNorm)
#: privacy plans that clip each example's gradient (DP-SGD)
PER_EXAMPLE_PLANS = frozenset({"dpsgd", "phs"})


def check_model(cfg: RunConfig, data: FederatedDataset) -> torch.nn.Module:
    """The recipe's model, refused before any training (one line naming ``model.name`` or
    ``model.options``, what was found and what is allowed) when it cannot be built for the
    data's examples, fails on two of them, does not output one score per class, or holds a
    layer that mixes the examples of a batch under a DP-SGD privacy plan."""
    shape = "×".join(map(str, data.train.shape))
    loss = make_loss(cfg.train.loss)
    loss.check(data.train.classes)
    if data.train.classes == 0 and needs_label_counts(cfg):
        raise ValueError(
            "selection.kind: the recipe asks the clients for class-label histograms (QI-DPFL's screening, "
            "Fed-CBS, screened FedAvg), and this dataset is a regression (float targets)"
        )
    try:
        model = model_for(cfg, data, Streams(seed=cfg.seed))
    except (TypeError, ValueError) as e:
        raise ValueError(f"model.name: {cfg.model.name!r} cannot be built for {data.train.kind} inputs {shape}: {e}") from None
    if cfg.privacy.kind in PER_EXAMPLE_PLANS:
        mixing = [(n, type(m).__name__) for n, m in model.named_modules() if isinstance(m, _BATCH_MIXING)]
        if mixing:
            raise ValueError(
                f"model.name: layer {mixing[0][0]!r} ({mixing[0][1]}) mixes the examples of a batch, so privacy.kind "
                f"{cfg.privacy.kind!r} (DP-SGD) has no per-example gradient to clip; replace it with GroupNorm "
                "(fedgame.models.group_norm) or LayerNorm"
            )
        from fedgame.sim.clipping import supports

        how = cfg.train.per_example if cfg.train.per_example != "auto" else ("bk" if supports(model) else "ghost")
        bags = [n for n, m in model.named_modules() if isinstance(m, torch.nn.EmbeddingBag)]
        if bags and how in ("ghost", "hooks"):
            raise ValueError(
                f"train.per_example: {how!r} (Opacus) cannot take per-example gradients of layer {bags[0]!r} (EmbeddingBag "
                "on (B, L) token ids); allowed here: auto or bk (book-keeping, mean or sum bags), functorch"
            )
    x = torch.from_numpy(np.array(data.train.x[:2]))  # a writable copy of two examples
    try:
        with torch.no_grad():
            out = model.eval()(x)
    except (RuntimeError, IndexError, ValueError) as e:
        msg = " ".join(str(e).split())[:200]
        raise ValueError(f"model.name: {cfg.model.name!r} fails on the data's {data.train.kind} examples ({shape}): {msg}") from None
    want = (int(x.shape[0]), loss.outputs(data.train.classes))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"model.name: {cfg.model.name!r} outputs {got} for {want[0]} examples; the data has {data.train.classes} classes "
            f"and train.loss is {cfg.train.loss!r}, so it must output (batch, {want[1]})"
        )
    return model


def build_trainer(cfg: RunConfig, data: FederatedDataset, streams: Streams) -> LocalTrainer:
    """The recipe's model (initialised from the ``init`` stream) and the local trainer every
    client of ``data`` trains with (on the recipe's device, precision and memory format)."""
    model = model_for(cfg, data, streams)
    x_train, y_train, _, _ = data.as_tensors()
    l = cfg.train.local
    return LocalTrainer(
        model=model,
        x=x_train,
        y=y_train,
        spec=LocalSpec(batch_size=l.batch_size, lr=l.lr, epochs=l.epochs, steps=l.steps, momentum=l.momentum, weight_decay=l.weight_decay),
        per_example=cfg.train.per_example,
        precision=cfg.train.precision,
        memory_format=cfg.train.memory_format,
        device=cfg.train.device,
        cuda_graphs=cfg.train.cuda_graphs,
        loss=make_loss(cfg.train.loss),
    )


@dataclass
class ClientSide:
    """What a remote client process needs to run any client's job of a recipe: the same
    dataset and partition as the server (from the ``partition`` stream), the same model and
    trainer, and the run's streams (:func:`fedgame.sim.client.run_client_job`)."""

    data: FederatedDataset
    trainer: LocalTrainer
    streams: Streams
    parts: list[torch.Tensor]


def build_client_side(cfg: RunConfig) -> ClientSide:
    """The client half of :func:`build_engine`: data, partition, model and trainer (no game,
    no privacy plan, no selection — those live on the server, which sends each job's settings)."""
    set_threads(cfg)
    streams = Streams(seed=cfg.seed)
    data = build_data(cfg, streams)
    trainer = build_trainer(cfg, data, streams)
    parts = [torch.as_tensor(p, dtype=torch.long) for p in data.parts]
    return ClientSide(data=data, trainer=trainer, streams=streams, parts=parts)


def scores_on_validation(cfg: RunConfig) -> bool:
    """Whether the recipe's server scores on a validation set: JDP-FL's personal rules
    (``leave_one_out``'s M4, ``random_groups``), which need ``data.validation`` examples."""
    return cfg.jdp is not None and cfg.jdp.aggregator in PERSONAL_AGGREGATORS


def check_silo(cfg: RunConfig) -> None:
    """Refuse, in one line naming the field, a recipe a silo federation cannot run: every node's
    whole data is its client (no partition to draw), and the server holds no client example.
    A JDP-FL personal rule's ``data.validation`` examples are drawn from the server's own data
    (``server-data``'s training split; :mod:`fedgame.deploy.flower.silo`), no other recipe's."""
    if cfg.data.validation and not scores_on_validation(cfg):
        raise ValueError(
            f"data.validation: a silo server holds no client example to set aside, got {cfg.data.validation}; allowed: 0 "
            "(only JDP-FL's leave_one_out and random_groups score on a validation set, drawn from the server's own --server-data)"
        )
    _ = cfg.data.n_clients  # a natural partition must say how many nodes to wait for (its error names the field)


def load_silo(cfg: RunConfig, data_dir: str | Path) -> DatasetSplit:
    """A silo node's own data: the recipe's dataset plug-in (``data.dataset`` with
    ``data.options``) loading from the node's ``data_dir`` (its ``data-dir`` node config), so a
    relative path among the options is taken from there (``data.root`` is not used), then
    ``data.max_train``/``data.max_test``. A missing folder is a FileNotFoundError naming it."""
    d = Path(data_dir).expanduser()
    if not d.is_dir():
        raise FileNotFoundError(f"data-dir {str(d)!r} {'is not a folder' if d.exists() else 'does not exist'}")
    ds = open_dataset(cfg.data.dataset, cfg.data.options)
    return ds.load(root=str(d), max_train=cfg.data.max_train, max_test=cfg.data.max_test)


def build_silo_side(cfg: RunConfig, split: DatasetSplit) -> ClientSide:
    """The client side of a silo node: its whole training split is its one client (``parts[0]``:
    every example; no partition is drawn), with the recipe's model and trainer. The client index
    its jobs and queries name is the server's (the node trains its own data whatever it is)."""
    set_threads(cfg)
    streams = Streams(seed=cfg.seed)
    data = FederatedDataset(train=split.train, test=split.test, parts=(np.arange(len(split.train), dtype=np.int64),))
    trainer = build_trainer(cfg, data, streams)
    return ClientSide(data=data, trainer=trainer, streams=streams, parts=[torch.as_tensor(data.parts[0], dtype=torch.long)])


def needs_label_counts(cfg: RunConfig) -> bool:
    """Whether a plug-in's pre-training set-up uses the clients' label histograms (its Config's
    ``client_queries()``: QI-DPFL screening, FedAvg-select's ``screened``, FedCBS selection)."""
    sections = (cfg.selection, cfg.privacy, cfg.incentive)
    return any("label_counts" in getattr(s, "client_queries", frozenset)() for s in sections)


def query_label_counts(executor: Executor, n_clients: int) -> np.ndarray:
    """``(n_clients, classes)`` int64: every client's answer to the ``label_counts`` query; an
    error naming the clients that did not answer (the screening needs every candidate)."""
    answers = executor.query("label_counts", np.arange(n_clients))
    silent = [i for i, a in enumerate(answers) if a is None]
    if silent:
        raise ValueError(f"query 'label_counts': client(s) {silent} did not answer; the screening needs every candidate's histogram")
    return np.stack([np.asarray(a, dtype=np.int64) for a in answers])


def _accountant(cfg: RunConfig, n_clients: int) -> Any:
    """The run's privacy accountant. Imported here, not at the top: the accountants import
    dp-accounting (about 2 s of CPU), which the client side (``build_client_side``, run by every
    Flower ClientApp process) never needs."""
    from fedgame.privacy.accountants import make_accountant

    return make_accountant(cfg.accountant.kind, n_clients=n_clients)


def build_engine(
    cfg: RunConfig,
    *,
    data: FederatedDataset | None = None,
    executor: Executor | None = None,
    parallel: bool = False,
    cores: int | None = None,
    split: DatasetSplit | None = None,
) -> Built:
    """Everything a run needs, seeded from ``cfg.seed``. ``executor`` reaches the clients
    (default: in this process); what the plan needs from them before training (label
    histograms: :func:`needs_label_counts`) is asked of it as query messages. ``parallel``
    (and no ``executor``): the clients train in a pool of ``train.workers`` processes
    (:func:`workers_for`, within ``cores``); close it with :meth:`Built.close`. ``split``:
    the examples to partition instead of the recipe's dataset (data given in memory)."""
    workers = workers_for(cfg, cfg.train.clients_per_round, cores) if parallel and executor is None else 1
    set_threads(cfg, workers, cores)
    streams = Streams(seed=cfg.seed)
    data = data if data is not None else build_data(cfg, streams, split)
    cfg = _n_clients(cfg, data.n_clients)  # a natural partition's clients: the data's groups
    check_model(cfg, data)  # a model that cannot train on these examples: one line, before anything runs
    trainer = build_trainer(cfg, data, streams)
    model = trainer.model
    pool: WorkerPool | None = None
    if executor is None:
        parts = [torch.as_tensor(p, dtype=torch.long) for p in data.parts]
        pool = start_pool(cfg, trainer, parts, streams, data, workers)
        if pool is not None:
            executor = PoolExecutor(pool, parts=parts)
        else:
            executor = InProcessExecutor(trainer=trainer, model=model, parts=parts, streams=streams, classes=data.train.classes)
    counts = query_label_counts(executor, data.n_clients) if needs_label_counts(cfg) else None
    dim = count_params(model)
    budgets = privacy_setup(cfg, BuildContext(run=cfg, data=data, streams=streams, dim=dim))
    plan = build_plan(cfg, BuildContext(run=cfg, data=data, streams=streams, label_counts=counts, dim=dim))
    selection = build_selection(cfg, plan, data, phs=budgets, streams=streams, label_counts=counts)
    # the pre-training plan phs.json records: the selection's (budgets and Problem 1), else the budgets
    phs = getattr(selection, "setup", None) or budgets
    privacy = build_privacy(cfg, data, plan, phs=budgets, selection=selection)
    accountant = _accountant(cfg, data.n_clients)
    engine = Engine(
        model=model,
        data=data,
        trainer=trainer,
        selection=selection,
        privacy=privacy,
        accountant=accountant,
        server_update=build_server_update(cfg, privacy, accountant),
        streams=streams,
        clients_per_round=cfg.train.clients_per_round,
        incentive=build_incentive(cfg, plan, data),
        eval_every=cfg.train.eval_every,
        delta=cfg.accountant.delta,
        executor=executor,
        on_missing=cfg.train.on_missing,
    )
    if pool is not None:
        n_test = int(data.as_tensors()[2].shape[0])
        engine.evaluator = lambda params: pool.evaluate("test", params, n_test)
    return Built(engine=engine, data=data, model=model, plan=plan, phs=phs, pool=pool)


def attach_executor(built: Built, cfg: RunConfig, executor: Executor) -> None:
    """Point ``built``'s engine at ``executor`` (e.g. Flower nodes, once discovered). When the
    plan depends on the clients' answers (:func:`needs_label_counts`), the engine is rebuilt
    from what they answer over ``executor`` — so a Flower run screens on the histograms its
    nodes sent, not on the server's copy of the partition."""
    if needs_label_counts(cfg):
        fresh = build_engine(cfg, data=built.data, executor=executor)
        built.engine, built.model, built.plan, built.phs = fresh.engine, fresh.model, fresh.plan, fresh.phs
    else:
        built.engine.executor = executor


# -- JDP-FL (Sec. 4.1, steps ①-⑦) ------------------------------------------------------------
@dataclass
class BuiltJDP:
    """A ready JDP-FL run: the engine, its data, the auction's outcome (None without one), the
    clients' drawn costs, and the adversary's client id (None without an attack)."""

    engine: JDPEngine
    data: FederatedDataset
    model: torch.nn.Module
    auction: AuctionOutcome | None
    costs: np.ndarray | None
    adversary: int | None
    eps_exp: float
    pool: WorkerPool | None = None

    def close(self) -> None:
        """Stop the run's worker processes, if it has any."""
        if self.pool is not None:
            self.pool.close()

    def summary(self) -> dict[str, Any]:
        a = self.auction
        out: dict[str, Any] = {
            "winners": self.engine.winners.tolist(),
            "m": int(self.engine.winners.size),
            "adversary": self.adversary,
            "aggregator": self.engine.rule.name,
            "eps_exp": self.eps_exp,
        }
        if a is not None:
            assert self.costs is not None
            out.update(
                mechanism=a.mechanism,
                budget=a.budget,
                costs=self.costs.tolist(),
                payments=a.payment_vector().tolist(),
                total_payment=a.total_payment,
                payments_within_budget=a.payments_within_budget,
                costs_within_budget=a.costs_within_budget,
                data_bought=int(np.asarray(self.data.sizes)[self.engine.winners].sum()),
            )
        return out


def _jdp_winners(
    cfg: RunConfig, data: FederatedDataset, streams: Streams, bids: np.ndarray | None = None
) -> tuple[np.ndarray, AuctionOutcome | None, np.ndarray | None]:
    assert cfg.jdp is not None
    au = cfg.jdp.auction
    if au.mechanism == "none":
        return np.arange(data.n_clients), None, None
    # the clients' `bid` answers: asked over the network by a remote backend, else drawn here
    costs = (
        np.asarray(bids, dtype=np.float64) if bids is not None else draw_costs(streams, data.n_clients, low=au.cost_low, high=au.cost_high)
    )
    auction = UnitPriceAuction() if au.mechanism == "M1" else KnapsackAuction()
    out = auction.run(costs, budget=au.budget, data_sizes=np.asarray(data.sizes, dtype=np.float64))
    winners = np.sort(np.asarray(out.winners, dtype=np.int64))
    if winners.size < 2:
        raise ValueError(
            f"jdp.auction.budget: the {au.mechanism} auction with budget {au.budget:g} recruits {winners.size} client(s); "
            "JDP-FL needs m >= 2 (raise the budget or the number of clients)"
        )
    return winners, out, costs


def jdp_poisoned_labels(cfg: RunConfig, data: FederatedDataset, y: torch.Tensor, adversary: int) -> torch.Tensor:
    """A copy of the training labels ``y`` with client ``adversary``'s examples dirty-labelled
    as ``jdp.attack`` says (the shared labels stay clean: validation, other clients). The
    server's in-process run and the adversary's own Flower node both call this."""
    assert cfg.jdp is not None
    a = cfg.jdp.attack
    name = cfg.data.dataset.lower()
    target = a.target if a.target is not None else DIRTY_LABEL_TARGETS.get(name, 2)
    source = a.source
    if a.mode == "one_class" and source is None:
        source = ONE_CLASS_SOURCES.get(name, 7)
    idx = torch.as_tensor(data.parts[adversary], dtype=torch.long)
    out = y.clone()
    out[idx] = dirty_label(out[idx], target=target, mode=a.mode, source=source, num_classes=data.train.classes)
    return out


def _jdp_mechanisms(cfg: RunConfig, winners: np.ndarray, sizes: np.ndarray) -> list[GaussianMechanism | None]:
    """M3 for each winner (JDP-FL Sec. 4.2): the Gaussian perturbation of its update at
    (ε_L, δ) for its own record-level sensitivity; None for every winner when the recipe's
    privacy is not JDP-FL's. The classic calibration's "ε ≥ 1 is not certified" warning is
    logged once per run, not once per winner."""
    p = cfg.privacy
    if not isinstance(p, JDPPrivacyCfg):
        return [None] * int(np.asarray(winners).size)
    mechs: list[GaussianMechanism | None] = []
    gauss_log = logging.getLogger("fedgame.privacy.analysis.gaussian")
    level = gauss_log.level
    try:
        for k, i in enumerate(winners):
            if k == 1:
                gauss_log.setLevel(logging.ERROR)
            mechs.append(
                local_perturbation(
                    epsilon=p.epsilon,
                    delta=p.delta,
                    clip=p.clip,
                    n_examples=int(sizes[i]),
                    sensitivity=p.sensitivity,
                    calibrator=p.calibrator,
                )
            )
    finally:
        gauss_log.setLevel(level)
    return mechs


def _jdp_rule(j: JDPCfg, m: int, eps_exp: float) -> ServerRule:
    """The server rule of a JDP-FL run with m winners: leave-one-out M4 + M5 or random
    groups (the exponential mechanism at ε_E = ``eps_exp``), or a robust aggregator of the
    perturbed models (Krum, coordinate median, trimmed mean, FedAvg); the group size and
    Krum's f are checked against m here, naming the field."""
    if j.aggregator == "random_groups" and j.group_size is not None and (j.group_size > m or m % j.group_size):
        raise ValueError(f"jdp.group_size: must divide the number of winners m = {m} (1 <= s <= m, m % s == 0), got {j.group_size}")
    if j.aggregator == "krum" and not 2 * j.krum_byzantine + 2 < m:
        raise ValueError(f"jdp.krum_byzantine: Krum needs 2f + 2 < m = {m}, got f = {j.krum_byzantine}")
    if j.aggregator == "leave_one_out":
        return LeaveOneOut(epsilon=eps_exp, sensitivity=j.score_sensitivity)
    if j.aggregator == "random_groups":
        assert j.group_size is not None
        return RandomGroups(epsilon=eps_exp, group_size=j.group_size, sensitivity=j.score_sensitivity)
    return global_rule(j.aggregator, krum_byzantine=j.krum_byzantine, trim_beta=j.trim_beta)


def _jdp_events(
    cfg: RunConfig, winners: np.ndarray, mechs: list[GaussianMechanism | None], rule: ServerRule, eps_exp: float
) -> Callable[[int], list[tuple[PrivacyEvent, int]]]:
    """Each winner's privacy events per round for its ledger: M3's Gaussian release (or, with
    ``privacy.accounting: paper``, the (ε_L, δ) the paper states) and, when the server rule
    is personal (M4/M5), the exponential mechanism at ε_E (pure ε_E-DP under ``paper``)."""
    p = cfg.privacy
    mech_of = {int(i): m for i, m in zip(winners, mechs)}
    paper = isinstance(p, JDPPrivacyCfg) and p.accounting == "paper"

    def events(client: int) -> list[tuple[PrivacyEvent, int]]:
        m = mech_of[client]
        out: list[tuple[PrivacyEvent, int]] = []
        if m is not None:
            assert isinstance(p, JDPPrivacyCfg)
            out.append((PrivacyEvent.approx_dp(p.epsilon, p.delta), 1) if paper else (m.event(), 1))
        if rule.personal:
            out.append((PrivacyEvent.approx_dp(eps_exp, 0.0) if paper else PrivacyEvent.exponential(eps_exp), 1))
        return out

    return events


def build_jdp(
    cfg: RunConfig,
    *,
    data: FederatedDataset | None = None,
    bids: np.ndarray | None = None,
    parallel: bool = False,
    cores: int | None = None,
    split: DatasetSplit | None = None,
) -> BuiltJDP:
    """Everything a JDP-FL run needs (JDP-FL Sec. 4.1), seeded from ``cfg.seed``: the
    auction (or every client; on ``bids`` when the clients were asked over the network), the
    adversary and its dirty labels, M3 per winner (:func:`_jdp_mechanisms`), the server rule
    (:func:`_jdp_rule`) and each winner's per-round privacy events (:func:`_jdp_events`)."""
    j = cfg.jdp
    if j is None:
        raise ValueError("jdp: this recipe has no jdp section")
    streams = Streams(seed=cfg.seed)
    data = data if data is not None else build_data(cfg, streams, split)
    cfg = _n_clients(cfg, data.n_clients)
    check_model(cfg, data)
    winners, auction, costs = _jdp_winners(cfg, data, streams, bids)
    workers = workers_for(cfg, int(np.asarray(winners).size), cores) if parallel else 1
    set_threads(cfg, workers, cores)
    model = model_for(cfg, data, streams)
    x_train, y_train, _, _ = data.as_tensors()
    adversary: int | None = None
    if j.attack.kind == "dirty_label":
        adversary = choose_adversary(winners, streams.numpy("adversary"))
        y_train = jdp_poisoned_labels(cfg, data, y_train, adversary)
    l = cfg.train.local
    trainer = LocalTrainer(
        model=model,
        x=x_train,
        y=y_train,
        spec=LocalSpec(batch_size=l.batch_size, lr=l.lr, epochs=l.epochs, steps=l.steps, momentum=l.momentum, weight_decay=l.weight_decay),
        per_example=cfg.train.per_example,
        precision=cfg.train.precision,
        memory_format=cfg.train.memory_format,
        device=cfg.train.device,
        cuda_graphs=cfg.train.cuda_graphs,
        loss=make_loss(cfg.train.loss),
    )
    p = cfg.privacy
    eps_exp = (p.epsilon if isinstance(p, JDPPrivacyCfg) else 1.0) if j.epsilon_exp == "same" else float(j.epsilon_exp)
    mechs = _jdp_mechanisms(cfg, winners, np.asarray(data.sizes))
    rule = _jdp_rule(j, int(winners.size), eps_exp)
    # the winners' trainings (each winner's state travels with its job) and the test evaluation
    # in a pool of processes that inherit the trainer, the poisoned labels and the winners' parts
    parts = [torch.as_tensor(data.parts[int(i)], dtype=torch.long) for i in np.asarray(winners, dtype=np.int64)]
    pool = start_pool(cfg, trainer, parts, streams, data, workers)
    engine = JDPEngine(
        model=model,
        data=data,
        trainer=trainer,
        winners=winners,
        mechanisms=mechs,
        rule=rule,
        events=_jdp_events(cfg, winners, mechs, rule, eps_exp),
        accountant=_accountant(cfg, data.n_clients),
        streams=streams,
        self_weighting=j.self_weighting,
        adversary=adversary,
        eval_every=cfg.train.eval_every,
        delta=cfg.accountant.delta,
        pool=pool,
    )
    if pool is not None:
        n_test = int(data.as_tensors()[2].shape[0])
        engine.evaluator = lambda params: pool.evaluate("test", params, n_test)
    return BuiltJDP(engine=engine, data=data, model=model, auction=auction, costs=costs, adversary=adversary, eps_exp=eps_exp, pool=pool)
