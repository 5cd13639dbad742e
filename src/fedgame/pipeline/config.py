"""Recipes: YAML files parsed into frozen, self-validating pydantic models.

Every field is checked before any work; a bad value stops the run with a message naming the
field, the value and the allowed range (:func:`format_errors`). ``--set a.b=value`` overrides
are applied to the raw mapping before validation, so they are validated the same way.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model, field_validator, model_validator

from fedgame.core.plugins import load_plugins, refuse_bools
from fedgame.privacy.budgets import (  # noqa: F401  (re-exported: recipes' budget models)
    ConstantBudgetCfg,
    ListBudgetCfg,
    MixtureBudgetCfg,
    MixtureComponentCfg,
    PrivacyBudgetCfg,
    UniformBudgetCfg,
)
from fedgame.incentives.base import NoIncentive
from fedgame.incentives.fedpcs.plugin import BudgetCfg as FedPCSBudgetCfg
from fedgame.incentives.fedpcs.plugin import FedPCSIncentive
from fedgame.incentives.qidpfl.plugin import QICurveCfg as QIDPFLCurveCfg
from fedgame.incentives.qidpfl.plugin import QIDPFLIncentive
from fedgame.privacy.central import CentralDP
from fedgame.privacy.plans import PHSDPSGD, LocalDPSGD, NoPrivacy, ZCDPUpload
from fedgame.selection import AOCS, FedCBS, PHSSchedule, PowerOfChoice, PrivacyAware, SELECTIONS
from fedgame.selection.base import DataSize, FullParticipation, Uniform
from fedgame.selection.delta import Delta
from fedgame.selection.fixed import Participants, Screened

__all__ = [
    "RunConfig",
    "RecipeError",
    "load_recipe",
    "parse_recipe",
    "apply_overrides",
    "format_errors",
    "schema",
]


def _known(what: str, name: str, names: list[str]) -> str:
    """``name`` if it is one of ``names``; else a one-line error with the nearest name and the list."""
    if name in names:
        return name

    def abbreviates(full: str) -> bool:  # "fmnist" → "fashion_mnist": its letters in order
        it = iter(full)
        return all(c in it for c in name)

    near = [n for n in sorted(names, key=len) if abbreviates(n)][:1] or difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise ValueError(f"unknown {what} {name!r}; {hint}choose from {', '.join(sorted(names))}")


#: What one plug-in can need from another section of the recipe (a plug-in's Config declares
#: ``requires``; the sections that can supply it declare ``provides``): checked when the recipe
#: is read, so a missing partner is one line naming who provides it, not an error mid-build.
CAPABILITIES: dict[str, str] = {
    "fedpcs_game": "its rho schedule",
    "rho_schedule": "a rho schedule from a reward game",
    "participant_sets": "its participation sets",
    "client_budgets": "the clients' budgets and counts",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    requires: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bools(cls, data)


# -- data ---------------------------------------------------------------------------------
class IIDPartition(_Frozen):
    """IID: the training set shuffled and dealt into ``n_clients`` equal shares."""

    kind: Literal["iid"] = "iid"
    n_clients: int = Field(100, ge=1, le=100_000)


class DirichletPartition(_Frozen):
    """Label skew: each class spread over clients by a Dirichlet(``alpha``) draw (Hsu et al. 2019);
    redrawn until every client has ``min_size`` examples."""

    kind: Literal["dirichlet"] = "dirichlet"
    n_clients: int = Field(100, ge=1, le=100_000)
    alpha: float = Field(0.5, gt=0, le=1e6)
    min_size: int = Field(10, ge=1)


class ShardsPartition(_Frozen):
    """Pathological non-IID (McMahan et al. 2017): label-sorted shards, ``shards_per_client`` each."""

    kind: Literal["shards"] = "shards"
    n_clients: int = Field(100, ge=1, le=100_000)
    shards_per_client: int = Field(2, ge=1, le=1000)


class SimilarityPartition(_Frozen):
    """Similarity-``s`` split of the PHS experiments (Sec. VI-A; details in
    :func:`fedgame.data.partition.similarity`). ``size_spread: [a, b]`` draws relative client
    sizes ``v_k ~ U(a, b)`` from the partition stream (PHS default ``[0.5, 1.5]``); ``null``
    gives equal sizes."""

    kind: Literal["similarity"] = "similarity"
    n_clients: int = Field(100, ge=1, le=100_000)
    s: float = Field(30, ge=0, le=100)
    size_spread: tuple[float, float] | None = (0.5, 1.5)

    @field_validator("size_spread")
    @classmethod
    def _spread(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (math.isfinite(v[0]) and math.isfinite(v[1]) and 0 < v[0] < v[1]):
            raise ValueError("must be [a, b] with 0 < a < b (both finite)")
        return v


class QuantityPartition(_Frozen):
    """Quantity skew: an IID shuffle cut into clients of unequal size (``min_size`` each, the rest
    shared in Dirichlet(``alpha``) proportions)."""

    kind: Literal["quantity"] = "quantity"
    n_clients: int = Field(100, ge=1, le=100_000)
    alpha: float = Field(1.0, gt=0, le=1e6)
    min_size: int = Field(10, ge=1)


class NaturalPartition(_Frozen):
    """One client per group of the data (the user, hospital or speaker of each record: the
    dataset's per-example group ids, e.g. a CSV's ``client`` column named in its options'
    ``groups``): clients of every size the data gives. ``column`` names the grouping (may be left
    out when the dataset has one); ``n_clients`` is the number of groups, so it is left out or
    must equal it; a group with fewer than ``min_size`` training examples is refused."""

    kind: Literal["natural"] = "natural"
    column: str | None = None
    n_clients: int | None = Field(None, ge=1, le=100_000)
    min_size: int = Field(1, ge=1)


Partition = Annotated[
    IIDPartition | DirichletPartition | ShardsPartition | SimilarityPartition | QuantityPartition | NaturalPartition,
    Field(discriminator="kind"),
]


class DataCfg(_Frozen):
    dataset: str = "fashion_mnist"
    """a registered dataset plug-in (``fedgame list datasets``; a ``--plugin`` may add one)"""
    options: dict[str, Any] = Field(default_factory=dict)
    """the dataset plug-in's own options (its ``Config`` fields: e.g. ``csv``'s path, label, groups)"""
    root: str | None = None
    partition: Partition = Field(default_factory=DirichletPartition)
    max_train: int | None = Field(None, ge=10, description="use only the first N training examples (smoke runs)")
    max_test: int | None = Field(None, ge=10)
    validation: int = Field(0, ge=0, le=1_000_000, description="training examples held out (seeded) as the server's validation set")

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        from fedgame.data import DATASETS

        return _known("dataset", v, DATASETS.names())

    @field_validator("options")
    @classmethod
    def _dataset_options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The options checked against the dataset's ``Config`` (one line per bad field, naming
        it and what is allowed) and kept as given: nothing is read from disk here."""
        from fedgame.data import DATASETS

        name = info.data.get("dataset")
        if name is None:  # the dataset itself was refused; that error is the one to read
            return v
        conf = DATASETS.get(name).Config  # type: ignore[attr-defined]  # plug-in classes carry Config by convention, not in the base type
        if "kind" in v:
            raise ValueError(f"'kind' is data.dataset ({name!r}), not an option")
        try:
            conf(kind=name, **v)
        except ValidationError as e:
            allowed = ", ".join(f for f in conf.model_fields if f != "kind") or "none"
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise ValueError(f"{where}: {first['msg']} (dataset {name!r} takes: {allowed})") from None
        return v

    @property
    def n_clients(self) -> int:
        """``partition.n_clients``, which a natural partition may leave to the data: then an
        error for the paths that need it before reading any data (a Flower deployment's nodes)."""
        n = self.partition.n_clients
        if n is None:
            raise ValueError(
                "data.partition.n_clients: a natural partition takes its clients from the data; a Flower deployment "
                "needs the number before any node reads its data: set it to the number of groups"
            )
        return n

    @model_validator(mode="after")
    def _natural_needs_groups(self) -> DataCfg:
        if isinstance(self.partition, NaturalPartition) and self.validation:
            raise ValueError(
                "validation: a natural partition gives every training example to its group's client; "
                "hold the server's validation examples out in the data instead (allowed here: 0)"
            )
        return self


class ModelCfg(_Frozen):
    name: str = "mcmahan_cnn"
    options: dict[str, Any] = Field(default_factory=dict)
    """the model's own keyword options (``fedgame list models``; e.g. embedding_bag's ``dim``)"""

    @field_validator("name")
    @classmethod
    def _known_model(cls, v: str) -> str:
        from fedgame.models import MODELS

        return _known("model", v, MODELS.names())

    @field_validator("options")
    @classmethod
    def _model_options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from fedgame.models import model_options

        name = info.data.get("name")
        if name is None:
            return v
        allowed = model_options(name)
        unknown = sorted(set(v) - set(allowed))
        if unknown:
            raise ValueError(f"model {name!r} takes no option {', '.join(map(repr, unknown))}; its options: {', '.join(allowed) or 'none'}")
        return v


# -- training -----------------------------------------------------------------------------
class LocalCfg(_Frozen):
    epochs: int | None = Field(1, ge=1, le=1000)
    steps: int | None = Field(None, ge=1, le=1_000_000)
    batch_size: int = Field(32, ge=1, le=1_000_000)
    lr: float = Field(0.05, gt=0, le=100)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_length(self) -> LocalCfg:
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("give exactly one of train.local.epochs and train.local.steps (set the other to null)")
        return self


class TrainCfg(_Frozen):
    rounds: int = Field(20, ge=1, le=100_000)
    clients_per_round: int = Field(10, ge=1, le=100_000)
    eval_every: int = Field(1, ge=1)
    local: LocalCfg = Field(default_factory=LocalCfg)
    loss: str = "cross_entropy"
    """the training loss (``fedgame.sim.losses.LOSSES``): ``cross_entropy`` on one logit per class,
    ``bce_with_logits`` on one logit for binary labels, or a plug-in's"""
    per_example: Literal["auto", "bk", "ghost", "functorch", "hooks"] = "auto"
    threads: int | None = Field(None, ge=1, le=256)
    """Torch threads of this process (None: torch's default, all cores). With ``workers`` > 1
    the server side runs on ``threads`` or 1 thread and every worker on one."""
    workers: int | None = Field(None, ge=1, le=256)
    """Worker processes that train a round's clients in parallel (:mod:`fedgame.sim.pool`);
    None: this machine's cores, capped by the round's jobs; 1: the sequential path in this
    process. A run with ``workers: N`` gives exactly the numbers of ``workers: 1, threads: 1``."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """``bf16``: forward passes under bfloat16 autocast (clipping, noise and every privacy
    quantity stay float32); refused on a device without bf16 support."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where local training runs (``auto``: CUDA when available); ``cuda`` without CUDA is refused."""
    memory_format: Literal["auto", "channels_last", "contiguous"] = "auto"
    """``auto``: conv nets train in channels_last on the CPU (faster with oneDNN, same maths)."""
    cuda_graphs: bool = True
    """On a GPU, each full mini-batch step of plain local SGD (no momentum, no dropout, no
    DP-SGD) replays one captured CUDA graph instead of some forty kernel launches; the same
    numbers as ``false``. Nothing changes on the CPU."""

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        from fedgame.sim.losses import LOSSES

        return _known("loss", v, LOSSES.names())

    @model_validator(mode="after")
    def _device_can_be_honoured(self) -> TrainCfg:
        # refused here, before any data is read or any model trained
        from fedgame.sim.local import bf16_supported, resolve_device

        dev = resolve_device(self.device)
        if self.precision == "bf16" and not bf16_supported(dev):
            raise ValueError(f"train.precision: 'bf16' is not supported on this {dev.type} device; allowed here: fp32")
        if dev.type == "cuda" and self.workers is not None and self.workers > 1:
            raise ValueError(
                f"train.workers: must be 1 with train.device '{self.device}' on a GPU (one process trains the clients "
                f"one after another on the device), got {self.workers}; train.device: cpu trains on CPU worker processes"
            )
        return self

    on_missing: Literal["continue", "fail"] = "continue"
    """When a selected client does not reply (a remote backend: Flower): ``continue`` ends the
    round with the replies that arrived (the missing client is not charged), ``fail`` stops
    the run with a clear error. In process every client replies."""


# -- plug-ins -----------------------------------------------------------------------------
# -- selection: each strategy declares its recipe model on its class (``Config``) -------------
UniformSel = Uniform.Config
FullSel = FullParticipation.Config
DataSizeSel = DataSize.Config
PrivacyAwareSel = PrivacyAware.Config
PowerOfChoiceSel = PowerOfChoice.Config
AOCSSel = AOCS.Config
FedCBSSel = FedCBS.Config
DeltaSel = Delta.Config
PHSSel = PHSSchedule.Config
ParticipantsSel = Participants.Config
ScreenedSel = Screened.Config

Selection = Annotated[
    Union[  # noqa: UP007 (the members are classes' Config attributes)
        UniformSel,
        FullSel,
        DataSizeSel,
        PrivacyAwareSel,
        PowerOfChoiceSel,
        AOCSSel,
        FedCBSSel,
        DeltaSel,
        PHSSel,
        ParticipantsSel,
        ScreenedSel,
    ],
    Field(discriminator="kind"),
]


class AggregationCfg(_Frozen):
    """The server's aggregation: any name registered in ``fedgame.sim.AGGREGATORS`` (the
    built-ins ``fedavg``, ``importance``, ``mean``, or a plug-in's; ``fedgame list``)."""

    kind: str = Field("fedavg", description="a registered aggregator (fedgame list)")

    @field_validator("kind")
    @classmethod
    def _known_aggregator(cls, v: str) -> str:
        from fedgame.sim import AGGREGATORS

        return _known("aggregator", v, AGGREGATORS.names())


class ServerCfg(_Frozen):
    lr: float = Field(1.0, gt=0, le=100)


# -- privacy: each plan declares its recipe model on its class (``Config``) ------------------
NoPrivacyCfg = NoPrivacy.Config
DPSGDCfg = LocalDPSGD.Config
ZCDPUploadCfg = ZCDPUpload.Config
PHSPrivacyCfg = PHSDPSGD.Config
CentralDPCfg = CentralDP.Config


class JDPPrivacyCfg(_Frozen):
    """M3, JDP-FL's local Gaussian perturbation of the whole parameter vector after local
    training (Algorithm 3, eq. (6)): clip to L2 norm ``clip``, add
    N(0, σ²I) with σ = sqrt(2 ln(1.25/δ)) Δ₂f / ε_L. ``sensitivity``: ``record`` (2C/d_i, the
    default), ``client`` (2C) or a number; ``accounting``: ``mechanisms`` (the Gaussian and
    exponential releases to the accountant) or ``paper`` (approx-DP (ε_L, δ) + (ε_E, 0) per round).
    ``delta`` is M3's δ per release (it sets σ); ``accountant.delta`` is the δ at which the ε of
    all rounds composed is reported: two different quantities, so they may differ."""

    kind: Literal["jdp"] = "jdp"
    epsilon: float = Field(1.0, gt=0, le=1e4, description="ε_L of M3 per round")
    delta: float = Field(1e-5, gt=0, lt=1)
    clip: float = Field(20.0, gt=0, le=1e6)
    sensitivity: Literal["record", "client"] | Annotated[float, Field(gt=0, le=1e6)] = "record"
    calibrator: Literal["classic", "analytic"] = "classic"
    accounting: Literal["mechanisms", "paper"] = "mechanisms"


Privacy = Annotated[NoPrivacyCfg | DPSGDCfg | ZCDPUploadCfg | PHSPrivacyCfg | CentralDPCfg | JDPPrivacyCfg, Field(discriminator="kind")]


class AccountantCfg(_Frozen):
    """The privacy accountant: any name in ``fedgame.privacy.accountants.ACCOUNTANTS`` (the
    built-ins ``rdp``, ``pld``, ``zcdp``, or a plug-in's) and the δ at which it reports ε."""

    kind: str = Field("rdp", description="a registered accountant (fedgame list)")
    delta: float = Field(1e-5, gt=0, lt=1)

    @field_validator("kind")
    @classmethod
    def _known_accountant(cls, v: str) -> str:
        from fedgame.privacy.accountants import ACCOUNTANTS

        return _known("accountant", v, ACCOUNTANTS.names())


# -- incentives: each mechanism declares its recipe model on its class (``Config``) ----------
NoIncentiveCfg = NoIncentive.Config
BudgetCfg = FedPCSBudgetCfg
FedPCSCfg = FedPCSIncentive.Config
QICurveCfg = QIDPFLCurveCfg
QIDPFLCfg = QIDPFLIncentive.Config


IncentiveCfg = Annotated[NoIncentiveCfg | FedPCSCfg | QIDPFLCfg, Field(discriminator="kind")]


# -- JDP-FL ------------------------------------------------------------------------------
class AttackCfg(_Frozen):
    """The poisoning client (JDP-FL Sec. 6.1): one winner, uniform with the seed, relabels
    its data (``all_to_target``: every label; ``one_class``: labels of ``source`` only) to
    ``target`` (default: MNIST/Fashion-MNIST 2, CIFAR-10 3)."""

    kind: Literal["none", "dirty_label"] = "dirty_label"
    mode: Literal["all_to_target", "one_class"] = "all_to_target"
    target: int | None = Field(None, ge=0, le=100_000)
    source: int | None = Field(None, ge=0, le=100_000)


class AuctionCfg(_Frozen):
    """Who trains (JDP-FL Algorithms 1-2): ``none`` takes every client of the partition (the
    setting of Figs. 3-5); ``M1``/``M2`` run the sealed-bid auction once before training on
    the clients' truthful bids c_i ~ U{cost_low..cost_high} (seeded) and public d_i = their
    partition sizes, with money ``budget``."""

    mechanism: Literal["none", "M1", "M2"] = "none"
    budget: float = Field(50_000.0, gt=0, le=1e15)
    cost_low: int = Field(1, ge=1, le=10**9)
    cost_high: int = Field(1000, ge=1, le=10**9)


#: JDP-FL's personal rules: the server scores the winners' groups on a validation set of
#: ``data.validation`` examples (M4's exponential mechanism; Fig. 5's random groups)
PERSONAL_AGGREGATORS = ("leave_one_out", "random_groups")


class JDPCfg(_Frozen):
    """The JDP-FL protocol (Sec. 4.1, steps ①-⑦): how the server combines the M3 uploads.

    ``leave_one_out`` (M4 + M5, "ours"), ``random_groups`` (Fig. 5, groups of ``group_size``),
    and the comparisons on the same perturbed parameters with every client restarting from
    the server's model: ``fedavg`` ("traditional"), ``krum`` (``krum_byzantine`` assumed
    attackers), ``median``, ``trimmed_mean`` (``trim_beta`` cut at each end).
    ``epsilon_exp`` is ε_E of the exponential mechanism (``same`` = privacy.epsilon, the
    paper's ε = ε_L = ε_E)."""

    aggregator: Literal["leave_one_out", "random_groups", "fedavg", "krum", "median", "trimmed_mean"] = "leave_one_out"
    epsilon_exp: Annotated[float, Field(gt=0, le=1e9)] | Literal["same"] = "same"
    score_sensitivity: Literal["paper", "worst_case"] = "paper"
    group_size: int | None = Field(None, ge=1, le=100_000)
    self_weighting: Literal["add", "replace"] = "add"
    krum_byzantine: int = Field(1, ge=0, le=100_000)
    trim_beta: float = Field(0.1, ge=0, lt=0.5)
    attack: AttackCfg = Field(default_factory=AttackCfg)
    auction: AuctionCfg = Field(default_factory=AuctionCfg)


def _check_requirements(sections: dict[str, Any]) -> None:
    """Every capability a section's plug-in ``requires`` is ``provided`` by another section;
    otherwise one line naming the kinds that provide it."""
    provided: set[str] = set().union(*(getattr(c, "provides", frozenset()) for c in sections.values()))
    for name, c in sections.items():
        missing = sorted(set(getattr(c, "requires", frozenset())) - provided)
        if not missing:
            continue
        cap = missing[0]
        run = schema()
        who = [
            f"{field}.kind '{m.model_fields['kind'].default}'"
            for field in sections
            for m in _models(run.model_fields[field].annotation)
            if cap in getattr(m, "provides", frozenset())
        ]
        raise ValueError(f"{name}.kind: '{c.kind}' needs {' or '.join(who) or cap} ({CAPABILITIES.get(cap, cap)})")


class RunConfig(_Frozen):
    """One run of the engine, as a recipe names it."""

    name: str = Field("run", min_length=1, max_length=200)
    seed: int = Field(0, ge=0, le=2**63 - 1)

    @field_validator("name")
    @classmethod
    def _one_path_component(cls, v: str) -> str:
        """The name is the default run folder ``runs/<name>``: one path component, so a run
        cannot write outside ``runs/`` (``../../x``) or into a hidden folder."""
        if v.startswith(".") or "/" in v or "\0" in v or v != v.strip():
            raise ValueError(f"must be one folder name (no '/', no leading '.', no surrounding spaces), got {v!r}")
        return v

    data: DataCfg = Field(default_factory=DataCfg)
    model: ModelCfg = Field(default_factory=ModelCfg)
    train: TrainCfg = Field(default_factory=TrainCfg)
    selection: Selection = Field(default_factory=UniformSel)
    aggregation: AggregationCfg = Field(default_factory=AggregationCfg)
    server: ServerCfg = Field(default_factory=ServerCfg)
    privacy: Privacy = Field(default_factory=NoPrivacyCfg)
    accountant: AccountantCfg = Field(default_factory=AccountantCfg)
    incentive: IncentiveCfg = Field(default_factory=NoIncentiveCfg)
    jdp: JDPCfg | None = Field(None, description="run the JDP-FL protocol (M3, M4, M5 with an auction) instead of FedAvg rounds")

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, raw: Any) -> Any:
        """Let a recipe omit ``kind`` where the default plug-in is meant."""
        if not isinstance(raw, dict):
            return raw
        raw = dict(raw)
        for path, kind in _DEFAULT_KINDS:
            cur: Any = raw
            for key in path[:-1]:
                cur = cur.get(key) if isinstance(cur, dict) else None
            if isinstance(cur, dict) and isinstance(cur.get(path[-1]), dict) and "kind" not in cur[path[-1]]:
                cur[path[-1]] = {"kind": kind, **cur[path[-1]]}
        return raw

    def provided(self) -> frozenset[str]:
        """The capabilities the recipe's plug-ins provide (their Configs' ``provides``)."""
        return frozenset().union(*(getattr(c, "provides", frozenset()) for c in (self.selection, self.privacy, self.incentive)))

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        """The JDP-FL protocol section against the others, then every plug-in's ``requires`` and
        its own ``check_run`` (the checks that need the rest of the recipe)."""
        from fedgame.core.limits import check_memory, recipe_estimate

        est = recipe_estimate(
            self.data.partition.n_clients,
            self.train.rounds,
            fedpcs_game=self.incentive.kind == "fedpcs",
            phs="phs" in (self.privacy.kind, self.selection.kind),
        )
        if est is not None:  # limits before work: the game a recipe solves must fit this machine
            check_memory(
                est[0],
                field=est[1],
                what=f"the recipe's {'FedPCS game' if self.incentive.kind == 'fedpcs' else 'PHS problem'} with {est[2]}",
            )
        sel = self.selection
        jdp_priv = self.privacy.kind == "jdp"
        if jdp_priv and self.jdp is None:
            raise ValueError("privacy.kind: 'jdp' (M3) is part of the JDP-FL protocol: add a jdp section")
        if self.jdp is not None:
            if not (jdp_priv or self.privacy.kind == "none"):
                raise ValueError(f"privacy.kind: a jdp run perturbs with M3: use 'jdp' (or 'none'), got '{self.privacy.kind}'")
            if sel.kind != "full":
                raise ValueError(
                    f"selection.kind: in a jdp run every winner trains every round (the auction decides who wins): "
                    f"use 'full', got '{sel.kind}'"
                )
            if self.jdp.aggregator in PERSONAL_AGGREGATORS and self.data.validation < 1:
                raise ValueError(
                    f"data.validation: aggregator '{self.jdp.aggregator}' scores groups on the server's validation "
                    "set: must be >= 1 (the spec's 1000), got 0"
                )
            if self.jdp.aggregator == "random_groups" and self.jdp.group_size is None:
                raise ValueError("jdp.group_size: aggregator 'random_groups' needs a group size s (s must divide m)")
            au = self.jdp.auction
            if au.cost_high < au.cost_low:
                raise ValueError(f"jdp.auction.cost_high: must be >= cost_low ({au.cost_low}), got {au.cost_high}")
            if (
                self.jdp.attack.kind == "dirty_label"
                and self.jdp.attack.mode == "one_class"
                and self.jdp.attack.source == self.jdp.attack.target is not None
            ):
                raise ValueError(f"jdp.attack.source: must differ from target, got {self.jdp.attack.source}")
        _check_requirements({"selection": sel, "privacy": self.privacy, "incentive": self.incentive})
        for section in (sel, self.privacy, self.incentive):  # each plug-in's own cross-section checks
            check = getattr(section, "check_run", None)
            if callable(check):
                check(self)
        return self


# -- errors and loading -------------------------------------------------------------------
class RecipeError(ValueError):
    """A recipe that does not validate; ``str()`` lists one line per bad field."""


def format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        path = e["loc"]
        loc = ".".join(str(p) for i, p in enumerate(path) if not (i and p in _UNION_TAGS and path[i - 1] in _UNION_FIELDS))
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        said = isinstance(got, str) and repr(got) in msg or f"got {got}" in msg or f"got {got!r}" in msg
        shown = "" if isinstance(got, dict) or said else f", got {got!r}"
        if e["type"] == "extra_forbidden" and path:
            near = difflib.get_close_matches(str(path[-1]), _fields_at(path[:-1]), n=1, cutoff=0.6)
            if near:
                msg, shown = f"{msg}; did you mean {near[0]!r}?", ""
        if e["type"] == "union_tag_invalid":
            ctx = e.get("ctx", {})
            loc, shown = f"{loc}.kind" if loc else "kind", ""
            msg = (
                f"unknown kind {ctx.get('tag')!r}; choose from {ctx.get('expected_tags')} "
                "(a plug-in's kind: load its module with --plugin MODULE, see docs/plugins.md)"
            )
        lines.append(f"{loc}: {msg}{shown}" if loc else msg)
    return "\n".join(lines)


_UNION_TAGS = {
    "iid",
    "dirichlet",
    "shards",
    "similarity",
    "quantity",
    "uniform",
    "full",
    "data_size",
    "none",
    "dpsgd",
    "zcdp_upload",
    "privacy_aware",
    "fedpcs",
    "power_of_choice",
    "aocs",
    "fedcbs",
    "delta",
    "phs",
    "participants",
    "screened",
    "qidpfl",
    "jdp",
    "natural",
    "central_dp",
    "mixture",
    "constant",
    "list",
}
#: fields holding a discriminated union: only the tag right after one is dropped from an error's
#: location ("selection.delta.alpha1" → "selection.alpha1", but "privacy.delta" stays)
_UNION_FIELDS = {"partition", "selection", "privacy", "incentive", "budgets"}


_DEFAULT_KINDS = (
    (("data", "partition"), "dirichlet"),
    (("selection",), "uniform"),
    (("privacy",), "none"),
    (("incentive",), "none"),
)


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[k] = nxt
        cur = nxt
    cur[keys[-1]] = value


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation admits (one, or a union's members)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models(a)]


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section at an error's location (union tags in it pick the member)."""
    models: list[type[BaseModel]] = [schema()]
    for key in loc:
        inner = [m for model in models if key in model.model_fields for m in _models(model.model_fields[key].annotation)]
        if inner:
            models = inner
            continue
        tagged = [m for m in models if "kind" in m.model_fields and m.model_fields["kind"].default == key]
        if not tagged:
            return []
        models = tagged
    return sorted({f for m in models for f in m.model_fields})


def _kind_fields(path: list[str], kind: Any) -> set[str] | None:
    """The fields the section at ``path`` accepts when its ``kind`` is ``kind`` (None: unknown)."""
    models: list[type[BaseModel]] = [schema()]
    for key in path:
        models = [m for model in models if key in model.model_fields for m in _models(model.model_fields[key].annotation)]
    for m in models:
        if "kind" in m.model_fields and m.model_fields["kind"].default == kind:
            return set(m.model_fields)
    return None


def _del_path(d: dict[str, Any], dotted: str) -> None:
    keys = dotted.split(".")
    cur: Any = d
    for k in keys[:-1]:
        cur = cur.get(k) if isinstance(cur, dict) else None
    if not isinstance(cur, dict) or keys[-1] not in cur:
        raise RecipeError(f"--set ~{dotted}: the recipe has no field {dotted}")
    del cur[keys[-1]]


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (values parsed as YAML) to a raw recipe mapping.

    ``~a.b`` deletes a field (back to its default). Setting a section's ``kind`` to another kind
    drops the fields the new kind does not have (``--set data.partition.kind=iid`` on a
    Dirichlet split forgets its ``alpha``), and keeps those it shares (``n_clients``)."""
    out = yaml.safe_load(yaml.safe_dump(raw)) or {}
    for item in overrides:
        if item.startswith("~"):
            _del_path(out, item[1:].strip())
            continue
        if "=" not in item:
            raise RecipeError(f"--set {item!r}: expected key.path=value (or ~key.path to delete one)")
        key, val = item.split("=", 1)
        try:
            key, value = key.strip(), yaml.load(val, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as e:
            raise RecipeError(f"--set {item!r}: the value is not valid YAML ({one_line(e)})") from None
        if not key or any(not k for k in key.split(".")):
            raise RecipeError(f"--set {item!r}: expected key.path=value with a non-empty key path")
        parts = key.split(".")
        if parts[-1] == "kind":
            section: Any = out
            for k in parts[:-1]:
                section = section.get(k) if isinstance(section, dict) else None
            current = section.get("kind", dict(_DEFAULT_KINDS).get(tuple(parts[:-1]), value)) if isinstance(section, dict) else value
            if isinstance(section, dict) and current != value:
                keep = _kind_fields(parts[:-1], value)
                if keep is not None:
                    for k in [k for k in section if k not in keep]:
                        del section[k]
        _set_path(out, key, value)
    return out


def _tags(union: Any) -> set[str]:
    members = get_args(get_args(union)[0])
    return {m.model_fields["kind"].default for m in members}


_SCHEMAS: dict[tuple[tuple[str, ...], ...], type[RunConfig]] = {}


def schema() -> type[RunConfig]:
    """The recipe model: :class:`RunConfig`, widened by the ``Config`` models of the selection
    strategies, privacy plans and incentives that plug-ins registered (``docs/plugins.md``)."""
    from fedgame.incentives import INCENTIVES
    from fedgame.privacy.plans import PRIVACY_PLANS

    def added(union: Any, registry: Any) -> dict[str, Any]:
        """The registered Configs that are not already members of the built-in union."""
        built_in = set(get_args(get_args(union)[0]))
        return {name: m for name, m in registry.configs().items() if m not in built_in}

    extra = {
        "selection": (Selection, added(Selection, SELECTIONS)),
        "privacy": (Privacy, added(Privacy, PRIVACY_PLANS)),
        "incentive": (IncentiveCfg, added(IncentiveCfg, INCENTIVES)),
    }
    key = tuple(tuple(models) for _, models in extra.values())
    if not any(key):
        return RunConfig
    if key not in _SCHEMAS:
        fields: dict[str, Any] = {}
        for field, (union, models) in extra.items():
            if not models:
                continue
            clash = _tags(union) & set(models)
            if clash:
                raise RecipeError(f"{field}.kind: plug-in kind(s) {sorted(clash)} clash with built-in kinds")
            members: tuple[Any, ...] = (*get_args(get_args(union)[0]), *models.values())
            widened: Any = Union[members]  # noqa: UP007 (a union built at run time)
            default = RunConfig.model_fields[field].default_factory
            assert default is not None
            fields[field] = (Annotated[widened, Field(discriminator="kind")], Field(default_factory=default))
            _UNION_TAGS.update(models)
        model = create_model("RunConfigWithPlugins", __base__=RunConfig, __module__=__name__, **fields)
        _SCHEMAS[key] = model
    return _SCHEMAS[key]


def __getattr__(name: str) -> Any:
    """``RunConfigWithPlugins`` resolves in a fresh process (a spawned worker unpickling a
    config): load the plug-ins named in ``FEDGAME_PLUGINS`` and build the widened schema."""
    if name == "RunConfigWithPlugins":
        load_plugins()
        return schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_recipe(raw: dict[str, Any]) -> RunConfig:
    """Validate a recipe mapping (after loading the plug-ins the environment names)."""
    try:
        load_plugins()
    except ImportError as e:
        raise RecipeError(f"plugins: {e}") from None
    try:
        return schema().model_validate(raw)
    except ValidationError as e:
        raise RecipeError(format_errors(e)) from None


def one_line(e: BaseException) -> str:
    """An exception's message on one line: a YAML error as its problem and where (YAML's own
    message spans several lines, with a caret drawing)."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if isinstance(e, yaml.YAMLError) and problem:
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{problem}{where}"
    return " ".join(str(e).split()) or type(e).__name__


def _unique_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
    """YAML's mapping constructor, refusing a mapping that names a key twice (plain YAML keeps
    the last silently, so ``rounds: 5`` above ``rounds: 50`` would run 50)."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=deep))


#: YAML's safe loader with :func:`_unique_mapping` (built with ``type`` so it types the same with
#: and without PyYAML's stubs).
_UniqueKeyLoader: Any = type("_UniqueKeyLoader", (yaml.SafeLoader,), {})
_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


#: What a recipe file must name: without them a recipe would run the defaults' dataset and model
#: silently (an empty file ran 20 rounds).
REQUIRED = (("data", "dataset"), ("model", "name"))


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read, override and validate a recipe file; every problem a :class:`RecipeError` of one
    line naming the file or field."""
    p = Path(path)
    if p.is_dir():
        raise RecipeError(f"recipe: {p} is a folder; give a recipe file (.yaml)")
    if not p.is_file():
        raise RecipeError(f"recipe: file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"recipe: {p} is not a text (UTF-8) file; give a YAML recipe") from None
    except OSError as e:
        raise RecipeError(f"recipe: {p}: cannot read it ({e.strerror})") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise RecipeError(f"recipe: {p} is not valid YAML: {one_line(e)}") from None
    if raw is None:
        raise RecipeError(f"recipe: {p} is empty; a recipe names at least data.dataset and model.name (fedgame init writes examples)")
    if not isinstance(raw, dict):
        raise RecipeError(f"recipe: {p} must hold a mapping at the top level, got {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or [])
    for section, field in REQUIRED:
        part = raw.get(section)
        if not isinstance(part, dict) or field not in part:
            raise RecipeError(f"{section}.{field}: missing; a recipe must name it (fedgame list shows the choices)")
    return parse_recipe(raw)
