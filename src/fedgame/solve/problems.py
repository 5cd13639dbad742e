"""Game problems posed as JSON and solved on their own, without training
(``fedgame solve fedpcs --input problem.json``, ``fedgame solve qidpfl ...``).

A FedPCS problem (FedPCS Eqs. 13-45: client problem, mean field, server reward, welfare,
Theorem 7; the server's solve as in docs/fedpcs.md, 'The accuracy scale κ and the server's
solve') names the population (``N``, ``K``,
``T``), the clients' types (``clients``: ``{"rho0", "varphi"}`` each), the rewards ``R`` and
either a given mean field ``phi`` (best responses to it) or ``"mean_field"`` (solve the fixed
point); or a ``stackelberg`` block (the server chooses R on the true cost); optionally Theorem 7
for homogeneous clients and a zCDP → (ε, δ) conversion. Every field is validated before any
work; errors name the field, the value and the allowed range.

A QI-DPFL problem (QI-DPFL Eq. 11 and Eqs. 15-33) is described at :func:`solve_qidpfl`; a
JDP-FL recruitment auction (JDP-FL Algorithms 1-2) at :func:`solve_jdp`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fedgame.incentives.auctions import (
    Auction,
    KnapsackAuction,
    UnitPriceAuction,
    individual_rationality,
    truthfulness_audit,
)
from fedgame.incentives.fedpcs import (
    MeanFieldSolverOptions,
    accuracy_weights,
    best_response,
    mean_field,
    price_of_anarchy,
    social_optimum,
    social_welfare,
    stackelberg,
    theorem7,
)
from fedgame.incentives.qidpfl.game import (
    AccuracyCurve,
    ServerParams,
    deviation_gains,
    equilibrium_slopes,
    label_emd,
    reward_range,
    screen,
    solve_qidpfl_game,
)
from fedgame.privacy.analysis import zcdp_to_eps

__all__ = [
    "FedPCSProblem",
    "JDPProblem",
    "ProblemError",
    "QIDPFLProblem",
    "parse_jdp_problem",
    "parse_qidpfl_problem",
    "solve_fedpcs",
    "solve_jdp",
    "solve_qidpfl",
]


class ProblemError(ValueError):
    """A problem that does not validate; one line per bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientType(_Strict):
    rho0: float = Field(gt=0, description="initial zCDP level ρ_i^0 > 0")
    varphi: float = Field(gt=0, lt=1, description="privacy sensitivity ϕ_i in (0, 1)")


class MeanFieldOptions(_Strict):
    beta: float = Field(1.0, gt=0, le=1, description="damping of the fixed-point iteration")
    tol: float = Field(1e-7, gt=0, le=1)
    max_iter: int = Field(200, ge=1, le=100_000)

    def solver_options(self) -> MeanFieldSolverOptions:
        """These settings as the solver's options object (its other fields at their defaults)."""
        return MeanFieldSolverOptions(beta=self.beta, tol=self.tol, max_iter=self.max_iter)


class Homogeneous(_Strict):
    G: float = Field(ge=0)
    H: float = Field(gt=0)
    v: float = Field(gt=0)
    gamma: float = Field(gt=0, lt=1)
    B: float = Field(gt=0)
    N: int = Field(ge=1)


class ZCDP(_Strict):
    rho: float = Field(gt=0)
    delta: float = Field(1e-5, gt=0, lt=1)


class StackelbergBlock(_Strict):
    """The server's problem (docs/fedpcs.md, 'The accuracy scale κ and the server's solve'):
    choose R_0..R_T ∈ [0, ``R_max``] minimising the expected server cost at the clients'
    mean-field equilibrium, with accuracy weights v_t = γ·``acc_scale``/(t+1) (``acc_scale`` =
    κ in units of (Σ|D|)², same page).
    ``server_solver``: ``"true_cost"`` (default) or ``"lemma2"`` (the paper's outer loop)."""

    gamma: float = Field(0.5, gt=0, lt=1, description="server weight γ of accuracy vs payment")
    acc_scale: float = Field(gt=0, le=1e12, description="κ in units of (Σ|D|)²")
    R_max: float = Field(100.0, gt=0, le=1e9, description="largest reward rate")
    server_solver: Literal["true_cost", "lemma2"] = "true_cost"


class FedPCSProblem(_Strict):
    N: int = Field(ge=1, le=10_000_000)
    K: int = Field(ge=1)
    T: int = Field(ge=1, le=100_000)
    clients: list[ClientType] = Field(min_length=1)
    R: float | list[float] | None = None
    phi: float | list[float] | None = None
    mean_field: bool | MeanFieldOptions = False
    inclusion: Literal["privacy", "uniform"] = "privacy"
    homogeneous: Homogeneous | None = None
    zcdp: ZCDP | None = None
    stackelberg: StackelbergBlock | None = None

    @field_validator("R", "phi")
    @classmethod
    def _non_negative(cls, v: float | list[float] | None) -> float | list[float] | None:
        vals = [] if v is None else (v if isinstance(v, list) else [v])
        bad = [x for x in vals if not (x >= 0 and np.isfinite(x))]
        if bad:
            raise ValueError(f"every value must be finite and >= 0, got {bad[0]}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> FedPCSProblem:
        if self.K > self.N:
            raise ValueError(f"K: must be in [1, N] = [1, {self.N}], got {self.K}")
        for name in ("R", "phi"):
            v = getattr(self, name)
            if isinstance(v, list) and len(v) != self.T + 1:
                raise ValueError(f"{name}: a list must have T+1 = {self.T + 1} values (rounds 0..T), got {len(v)}")
        if isinstance(self.phi, (int, float)) and not self.phi > 0:
            raise ValueError(f"phi: must be > 0, got {self.phi}")
        if isinstance(self.phi, list) and min(self.phi) <= 0:
            raise ValueError(f"phi: every value must be > 0, got {min(self.phi)}")
        wants_mf = self.mean_field is not False
        if self.phi is not None and wants_mf:
            raise ValueError("phi, mean_field: give exactly one of phi (best responses to it) and mean_field")
        if self.stackelberg is None and self.phi is None and not wants_mf:
            raise ValueError("phi, mean_field: give exactly one of phi (best responses to it) and mean_field (or a stackelberg block)")
        if self.R is None and (self.phi is not None or wants_mf):
            raise ValueError("R: required with phi or mean_field (the rewards the clients respond to)")
        if self.R is not None and self.phi is None and not wants_mf:
            raise ValueError("R: only used with phi or mean_field (the stackelberg block chooses its own R)")
        if (wants_mf or self.stackelberg is not None) and len(self.clients) != self.N:
            what = "the mean field" if wants_mf else "stackelberg"
            raise ValueError(f"clients: {what} needs all N = {self.N} clients, got {len(self.clients)}")
        if len(self.clients) > self.N:
            raise ValueError(f"clients: at most N = {self.N} clients, got {len(self.clients)}")
        return self

    def rounds(self, v: float | list[float]) -> np.ndarray:
        return np.full(self.T + 1, float(v)) if not isinstance(v, list) else np.asarray(v, dtype=float)


def parse_problem(raw: Any) -> FedPCSProblem:
    if not isinstance(raw, dict):
        raise ProblemError(f"problem: expected a JSON object, got {type(raw).__name__}")
    try:
        return FedPCSProblem.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) else f", got {got!r}"
            lines.append(f"{loc}: {msg}{shown}" if loc else msg)
        raise ProblemError("\n".join(lines)) from None


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _clients(res: Any) -> list[dict[str, Any]]:
    return [
        {
            "alpha": np.asarray(res.alpha[i]).tolist(),
            "rho": np.asarray(res.rho[i]).tolist(),
            "utility": float(res.utility[i]),
            "kkt_residual": float(res.kkt_residual[i]),
        }
        for i in range(np.asarray(res.utility).size)
    ]


def solve_fedpcs(raw: Any) -> dict[str, Any]:
    """Solve a FedPCS problem (see module docstring); returns a JSON-ready dict.

    With a ``stackelberg`` block the output's ``stackelberg`` holds the server's rewards
    ``R`` (T+1 values, R_0 = R_1), the mean field ``phi``, ``cost`` (``per_round`` U_t,
    ``total`` over t = 0..T, and ``objective`` = Σ_{t≥1} U_t, what the server minimises),
    ``converged``, ``server_solver``, and the clients' equilibrium budgets ``rho``
    (N × (T+1))."""
    p = parse_problem(raw)
    rho0 = np.array([c.rho0 for c in p.clients])
    varphi = np.array([c.varphi for c in p.clients])
    out: dict[str, Any] = {}
    if p.stackelberg is not None:
        out["stackelberg"] = _stackelberg(p, rho0, varphi)
    if p.R is None:
        return _extras(p, out)
    R = p.rounds(p.R)
    if p.phi is not None:
        br = best_response(rho0, varphi, p.rounds(p.phi), R, p.N, p.K, rng=0, inclusion=p.inclusion)
        out["best_responses"] = _clients(br)
        out["social_welfare"] = social_welfare(np.asarray(br.rho).reshape(rho0.size, -1), R, varphi)
    elif p.mean_field is not False:
        opts = p.mean_field if isinstance(p.mean_field, MeanFieldOptions) else MeanFieldOptions()
        mf = mean_field(rho0, varphi, R, p.K, p.T, options=opts.solver_options(), rng=0, inclusion=p.inclusion)
        sw = social_welfare(mf.rho, R, varphi)
        out["mean_field"] = {
            "phi": np.asarray(mf.phi).tolist(),
            "residual": float(mf.residual),
            "iterations": int(mf.iterations),
            "converged": bool(mf.converged),
            "phi_history": np.asarray(mf.phi_history).tolist(),
            "clients": _clients(mf),
            "social_welfare": sw,
            "social_optimum": social_optimum(R, varphi).welfare,
            # PoA = +inf when SW(eq) <= 0 (the paper has no participation constraint): JSON null
            "poa": _finite(price_of_anarchy(mf.rho, R, varphi)),
        }
    return _extras(p, out)


def _stackelberg(p: FedPCSProblem, rho0: np.ndarray, varphi: np.ndarray) -> dict[str, Any]:
    """The ``stackelberg`` output block (see :func:`solve_fedpcs`)."""
    s = p.stackelberg
    assert s is not None
    v = accuracy_weights(p.T, gamma=s.gamma, acc_scale=s.acc_scale)
    res = stackelberg(
        rho0, varphi, p.K, p.T, v=v, gamma=s.gamma, R_max=s.R_max, server_solver=s.server_solver, rng=0, inclusion=p.inclusion
    )
    cost = np.asarray(res.cost)
    return {
        "server_solver": s.server_solver,
        "R": np.asarray(res.reward).tolist(),
        "phi": np.asarray(res.mean_field.phi).tolist(),
        "cost": {"per_round": cost.tolist(), "total": float(cost.sum()), "objective": float(cost[1:].sum())},
        "converged": bool(res.converged),
        "rho": np.asarray(res.mean_field.rho).tolist(),
    }


def _extras(p: FedPCSProblem, out: dict[str, Any]) -> dict[str, Any]:
    """The optional ``homogeneous`` (Theorem 7) and ``zcdp`` blocks."""
    if p.homogeneous is not None:
        h = p.homogeneous
        if h.B < h.H:
            raise ProblemError(f"homogeneous.B: a budget below one client's rho* (>= H = {h.H}) admits no client, got {h.B}")
        try:
            th = theorem7(h.G, h.H, h.v, h.gamma, h.B, h.N)
        except ValueError as e:
            raise ProblemError(f"homogeneous.{e}") from None
        out["homogeneous"] = {"rho_star": th.rho_star, "R_star": th.R_star, "K": int(th.K), "corner": bool(th.corner)}
    if p.zcdp is not None:
        out["zcdp"] = {"eps": float(zcdp_to_eps(p.zcdp.rho, p.zcdp.delta))}
    return out


# ============================================================================================
# QI-DPFL (``fedgame solve qidpfl``; QI-DPFL Eq. 11, Eqs. 15-33)
# ============================================================================================


_TYPE_TAG = re.compile(r"^(float|int|bool|str|none|list\[.*\]|literal\[.*\])$")

_M = TypeVar("_M", bound=BaseModel)


def size_errors(sizes: Sequence[int], n: int, count: str) -> list[str]:
    """The messages for a problem's ``sizes`` (examples per client): one per client (``n`` of
    them, described as ``count`` in the message, e.g. ``"H = 5, as nu"``), each > 0."""
    bad = []
    if len(sizes) != n:
        bad.append(f"sizes: must have one value per client ({count}), got {len(sizes)}")
    for i, m in enumerate(sizes):
        if m <= 0:
            bad.append(f"sizes.{i}: must be > 0 (examples held by client {i}), got {m}")
    return bad


def validate_problem(model: type[_M], raw: Any) -> _M:
    """``model.model_validate(raw)``, or :class:`ProblemError` with one line per bad field:
    the field's path (without pydantic's union-member tags such as ``float``), the message and
    the value given; repeated lines once."""
    if not isinstance(raw, dict):
        raise ProblemError(f"problem: expected a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines: list[str] = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and _TYPE_TAG.match(p)))
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) or not loc else f", got {got!r}"
            for line in (f"{loc}: {msg}{shown}" if loc else msg).splitlines():
                if line not in lines:
                    lines.append(line)
        raise ProblemError("\n".join(lines)) from None


class QIDPFLServer(_Strict):
    """Stage I constants (QI-DPFL Eq. 15, Theorem 2): γ, β, λ, V, model dimension d, clip C,
    rounds T, discount π and κ_acc (a number, or ``"calibrate"`` so that R_1* = R_min,1; needs a
    curve)."""

    gamma: float = 0.5
    beta: float = 1.0
    lam: float = 1.0
    V: float = 1.0
    d: int
    C: float = 1.0
    T: int
    pi: float
    acc_scale: float | Literal["calibrate"] = 1.0


class QIDPFLCurve(_Strict):
    """Accuracy curve I(ρ) = I1 − I2 e^{−I3 ρ − I4} and the targets ε ≤ ε_max < I1 (QI-DPFL
    Sec. IV-B, Eqs. 32-33)."""

    I1: float
    I2: float
    I3: float
    I4: float = 0.0
    eps: float
    eps_max: float


class QIDPFLProblem(_Strict):
    """A QI-DPFL game instance (see :func:`solve_qidpfl`). Types are checked by pydantic, ranges
    by :meth:`_ranges`, which reports every bad entry on its own line."""

    nu: list[float]
    phi1: float = 1.0
    fixed_cost: float | list[float] = 0.0
    R: float | list[float]
    sizes: list[int]
    label_counts: list[list[int]] | None = None
    reference: Literal["pooled", "uniform"] | list[float] = "pooled"
    theta_th: float | None = None
    keep_fraction: float | None = None
    server: QIDPFLServer | None = None
    curve: QIDPFLCurve | None = None

    @property
    def H(self) -> int:
        return len(self.nu)

    def rewards(self) -> list[float]:
        return list(self.R) if isinstance(self.R, list) else [float(self.R)]

    @model_validator(mode="after")
    def _ranges(self) -> QIDPFLProblem:
        """Check every range at once and report every bad entry on its own line: the clients
        (:func:`_client_errors`), the screening inputs (:func:`_screening_errors`), the accuracy
        curve (:func:`_curve_errors`), the server (:func:`_server_errors`) and, only if all of
        those are fine, whether the screening leaves a game to play
        (:func:`_screening_outcome_errors`)."""
        bad = _client_errors(self) + _screening_errors(self)
        if self.curve is not None:
            bad += _curve_errors(self.curve)
        if self.server is not None:
            bad += _server_errors(self.server, has_curve=self.curve is not None)
        if not bad and self.label_counts is not None:  # screening is cheap: refuse N < 2 before any game work
            bad += _screening_outcome_errors(self, self.label_counts)
        if bad:
            raise ValueError("\n".join(bad))
        return self


def _client_errors(p: QIDPFLProblem) -> list[str]:
    """The clients' side of the game: privacy values ν_h > 0 for at least two clients (the
    contest for the reward, QI-DPFL Eq. 16, has no equilibrium with one), φ_1 > 0 and fixed
    costs ≥ 0 (the cost C_{h,t} of Eq. 17 is φ_1 ν_h ρ_h plus terms that do not depend on ρ),
    total rewards R ≥ 0, and the dataset sizes |D_h| > 0 (|D_h| weighs client h in the
    accuracy loss of Eq. 15); fixed costs and sizes given per client need one value each."""
    bad: list[str] = []
    H = p.H
    if H < 2:
        bad.append(f"nu: must list at least 2 clients (one privacy value each), got {H}")
    for i, v in enumerate(p.nu):
        if not (v > 0 and math.isfinite(v)):
            bad.append(f"nu.{i}: must be > 0 and finite (privacy value), got {v!r}")
    if not (p.phi1 > 0 and math.isfinite(p.phi1)):
        bad.append(f"phi1: must be > 0 and finite, got {p.phi1!r}")
    costs = p.fixed_cost if isinstance(p.fixed_cost, list) else [p.fixed_cost]
    if isinstance(p.fixed_cost, list) and len(p.fixed_cost) != H:
        bad.append(f"fixed_cost: a list must have one value per client (H = {H}, as nu), got {len(p.fixed_cost)}")
    for i, c in enumerate(costs):
        name = f"fixed_cost.{i}" if isinstance(p.fixed_cost, list) else "fixed_cost"
        if not (c >= 0 and math.isfinite(c)):
            bad.append(f"{name}: must be >= 0 and finite, got {c!r}")
    if isinstance(p.R, list) and not p.R:
        bad.append("R: must list at least one reward, got []")
    for i, r in enumerate(p.rewards()):
        name = f"R.{i}" if isinstance(p.R, list) else "R"
        if not (r >= 0 and math.isfinite(r)):
            bad.append(f"{name}: must be >= 0 and finite (a total reward), got {r!r}")
    bad += size_errors(p.sizes, H, f"H = {H}, as nu")
    return bad


def _screening_errors(p: QIDPFLProblem) -> list[str]:
    """The inputs of the EMD screening (QI-DPFL Eq. 11, θ_h = Σ_j |P_h(y = j) − P_a(y = j)|
    against a threshold θ_th). Without ``label_counts`` there is nothing to screen, so
    ``theta_th``, ``keep_fraction`` and a non-default ``reference`` are refused as unused.
    With them: one histogram per client (:func:`_histogram_errors`), a valid reference
    distribution P_a when one is given (:func:`_reference_errors`), and exactly one of the
    threshold θ_th ≥ 0 and the kept fraction in (0, 1]."""
    bad: list[str] = []
    screening_fields = [n for n in ("theta_th", "keep_fraction") if getattr(p, n) is not None]
    lc = p.label_counts
    if lc is None:
        for n in screening_fields + (["reference"] if p.reference != "pooled" else []):
            bad.append(f"{n}: only used with label_counts (screening), got {getattr(p, n)!r}")
        return bad
    ref = p.reference if isinstance(p.reference, list) else None
    if len(lc) != p.H:
        bad.append(f"label_counts: must have one histogram per client (H = {p.H}, as nu), got {len(lc)}")
    if ref is not None:
        bad += _reference_errors(ref)
    bad += _histogram_errors(lc, p.sizes, None if ref is None else len(ref))
    if len(screening_fields) != 1:
        bad.append("theta_th, keep_fraction: with label_counts give exactly one of them")
    if p.theta_th is not None and not p.theta_th >= 0:
        bad.append(f"theta_th: must be >= 0 (inf keeps everyone), got {p.theta_th!r}")
    if p.keep_fraction is not None and not 0 < p.keep_fraction <= 1:
        bad.append(f"keep_fraction: must be in (0, 1], got {p.keep_fraction!r}")
    return bad


def _reference_errors(ref: list[float]) -> list[str]:
    """A reference distribution P_a of Eq. 11 given as class weights: at least two classes,
    every weight finite and ≥ 0, and a positive total (it is normalised)."""
    bad: list[str] = []
    if len(ref) < 2:
        bad.append(f"reference: must have at least 2 classes, got {len(ref)}")
    for j, q in enumerate(ref):
        if not (q >= 0 and math.isfinite(q)):
            bad.append(f"reference.{j}: must be >= 0 and finite, got {q!r}")
    if all(q == 0 for q in ref):
        bad.append("reference: must have a positive total, got all zeros")
    return bad


def _histogram_errors(lc: list[list[int]], sizes: list[int], ref_P: int | None) -> list[str]:
    """The clients' label histograms, from which Eq. 11 takes P_h(y = j): P ≥ 2 classes each
    (as many as the reference, when ``ref_P`` classes are given, else as the first
    histogram), counts ≥ 0 with a positive total, and that total equal to the client's
    dataset size |D_h|."""
    bad: list[str] = []
    P = len(lc[0]) if lc else 0
    want = ref_P if ref_P is not None else P
    like = "the reference" if ref_P is not None else "label_counts.0"
    if want < 2:
        bad.append(f"label_counts.0: must have at least 2 classes, got {P}")
    for h, row in enumerate(lc):
        if len(row) != want:
            bad.append(f"label_counts.{h}: must have P = {want} class counts (as {like}), got {len(row)}")
        for j, m in enumerate(row):
            if m < 0:
                bad.append(f"label_counts.{h}.{j}: must be a count >= 0, got {m}")
        if row and all(m == 0 for m in row):
            bad.append(f"label_counts.{h}: must have a positive total (|D_h| > 0), got all zeros")
        elif h < len(sizes) and all(m >= 0 for m in row) and sum(row) != sizes[h]:
            bad.append(f"sizes.{h}: must equal the total of label_counts.{h} (|D_h| = {sum(row)}), got {sizes[h]}")
    return bad


def _curve_errors(cv: QIDPFLCurve) -> list[str]:
    """The accuracy curve ε = I(ρ) = I_1 − I_2 e^{−I_3 ρ − I_4} of QI-DPFL Sec. IV-B (Eq. 32):
    I_1, I_2, I_3 > 0 and I_4 finite; the targets ε ≤ ε_max must stay below the ceiling I_1,
    or the logarithms of the reward range (Eq. 33) are undefined."""
    bad: list[str] = []
    for n in ("I1", "I2", "I3"):
        x = getattr(cv, n)
        if not (x > 0 and math.isfinite(x)):
            bad.append(f"curve.{n}: must be > 0 and finite, got {x!r}")
    if not math.isfinite(cv.I4):
        bad.append(f"curve.I4: must be finite, got {cv.I4!r}")
    if math.isfinite(cv.I1):
        for n in ("eps", "eps_max"):
            x = getattr(cv, n)
            if not (math.isfinite(x) and x < cv.I1):
                bad.append(f"curve.{n}: must be < I1 = {cv.I1:g} (the curve's ceiling), got {x!r}")
    if cv.eps > cv.eps_max:
        bad.append(f"curve.eps: must be <= eps_max = {cv.eps_max:g}, got {cv.eps!r}")
    return bad


def _server_errors(s: QIDPFLServer, *, has_curve: bool) -> list[str]:
    """The server's constants of QI-DPFL Eq. 15: the weight γ and the discount π in (0, 1),
    β, λ, V, C > 0, the model dimension d and the horizon T positive integers (bounded), and
    κ_acc > 0 — or ``"calibrate"``, which sets κ_acc from the curve's R_min (Eq. 33) and so
    needs ``has_curve``."""
    bad: list[str] = []
    for n in ("gamma", "pi"):
        x = getattr(s, n)
        if not 0 < x < 1:
            bad.append(f"server.{n}: must be in (0, 1), got {x!r}")
    for n in ("beta", "lam", "V", "C"):
        x = getattr(s, n)
        if not (x > 0 and math.isfinite(x)):
            bad.append(f"server.{n}: must be > 0 and finite, got {x!r}")
    for n, hi in (("d", 10**12), ("T", 10**6)):
        x = getattr(s, n)
        if not 1 <= x <= hi:
            bad.append(f"server.{n}: must be an integer in [1, {hi}], got {x}")
    if isinstance(s.acc_scale, float) and not (s.acc_scale > 0 and math.isfinite(s.acc_scale)):
        bad.append(f'server.acc_scale: must be > 0 and finite (or "calibrate"), got {s.acc_scale!r}')
    if s.acc_scale == "calibrate" and not has_curve:
        bad.append('server.acc_scale: "calibrate" needs a curve (R_min,1), got no curve')
    return bad


def _screening_outcome_errors(p: QIDPFLProblem, lc: list[list[int]]) -> list[str]:
    """Run the screening of QI-DPFL Eq. 11 on valid inputs (it is cheap) and refuse a
    threshold or kept fraction that leaves fewer than 2 clients, naming the smallest value
    that would keep two: the second smallest EMD θ_h, or a fraction above 1/H."""
    try:
        screen(lc, reference=p.reference, theta_th=p.theta_th, keep_fraction=p.keep_fraction)
    except ValueError as e:
        if p.theta_th is not None:
            second = float(np.sort(label_emd(lc, p.reference))[1])
            return [(f"theta_th: {e} (allowed: theta_th >= {second:.10g}, the second smallest EMD), got {p.theta_th!r}")]
        return [(f"keep_fraction: {e} (allowed: keep_fraction > {1 / p.H:.10g} with H = {p.H}), got {p.keep_fraction!r}")]
    return []


def parse_qidpfl_problem(raw: Any) -> QIDPFLProblem:
    """Validate a JSON value as a :class:`QIDPFLProblem`; :class:`ProblemError` lists every bad
    field, one per line."""
    return validate_problem(QIDPFLProblem, raw)


def solve_qidpfl(raw: Any) -> dict[str, Any]:
    """Solve a QI-DPFL game instance without training (``fedgame solve qidpfl``).

    Input: ``nu`` (privacy values, one per client), ``phi1`` (default 1), ``fixed_cost``
    (number or one per client, default 0), ``R`` (a reward or a list of rewards at which to
    report the Stage II equilibrium), ``sizes`` |D_h|; optionally ``label_counts`` (H × P) with
    ``reference`` (``"pooled"``, ``"uniform"`` or P weights) and ``theta_th`` or
    ``keep_fraction`` (screening, Eq. 11); ``server`` {gamma, beta, lam, V, d, C, T, pi,
    acc_scale} (Stage I, Theorem 2); ``curve`` {I1, I2, I3, I4, eps, eps_max} (range, Eq. 33).

    Output: ``emd`` per candidate (null without label counts), ``kept`` (candidate indices);
    per reward: ``participants`` (candidate indices), ``rho``, ``shares``, ``payments``,
    ``utilities`` (one per candidate, 0 for the screened-out and the non-participants),
    ``rho_total`` and ``max_gain`` (largest gain of a unilateral deviation, by direct bounded
    1-D maximisation: ~0); with a curve, ``reward_range``; with a server, per round t = 1..T
    ``R_star``, ``R_min``, ``R_max`` (null without a curve), ``R_applied`` (QI-DPFL:
    clip(R*, R_min, R_max)) and ``cost`` u_t, plus ``acc_scale`` and ``total_cost``."""
    p = parse_qidpfl_problem(raw)
    H = p.H
    curve = None if p.curve is None else AccuracyCurve.from_paper(p.curve.I1, p.curve.I2, p.curve.I3, p.curve.I4)
    server = None
    if p.server is not None:
        s = p.server
        server = ServerParams(
            dim=s.d,
            rounds=s.T,
            discount=s.pi,
            gamma=s.gamma,
            beta=s.beta,
            lam=s.lam,
            grad_bound=s.V,
            clip=s.C,
            acc_scale=1.0 if s.acc_scale == "calibrate" else float(s.acc_scale),
        )
    try:
        out = solve_qidpfl_game(
            np.asarray(p.nu),
            np.asarray(p.sizes, dtype=float),
            phi1=p.phi1,
            fixed_cost=np.asarray(p.fixed_cost, dtype=float),
            rewards=p.rewards(),
            label_counts=p.label_counts,
            reference=p.reference,
            theta_th=p.theta_th,
            keep_fraction=p.keep_fraction,
            server=server,
            curve=curve,
            eps=None if p.curve is None else p.curve.eps,
            eps_max=None if p.curve is None else p.curve.eps_max,
            calibrate=p.server is not None and p.server.acc_scale == "calibrate",
        )
    except ValueError as e:
        raise ProblemError(str(e)) from None
    kept = np.asarray(out.kept)

    def full(x: np.ndarray) -> list[float]:
        v = np.zeros(H)
        v[kept] = x
        return v.tolist()

    result: dict[str, Any] = {
        "H": H,
        "emd": None if out.screening is None else np.asarray(out.screening.emd).tolist(),
        "theta_th": None if out.screening is None else _finite(out.screening.theta_th),
        "kept": kept.tolist(),
        "rewards": [
            {
                "R": eq.reward,
                "participants": kept[eq.participants].tolist(),
                "rho": full(eq.rho),
                "shares": full(eq.share),
                "payments": full(eq.payment),
                "utilities": full(eq.utility),
                "rho_total": eq.rho_total,
                "max_gain": float(deviation_gains(eq.rho, eq.reward, out.kappa).max()),
            }
            for eq in out.equilibria
        ],
    }
    if curve is not None and p.curve is not None:
        G, _ = equilibrium_slopes(out.kappa)
        lo, hi = reward_range(G.sum(), curve, p.curve.eps, p.curve.eps_max)
        result["reward_range"] = {
            "R_min": float(lo),
            "R_max": float(hi),
            "rho_lo_eps": curve.rho_lo(p.curve.eps),
            "rho_lo_eps_max": curve.rho_lo(p.curve.eps_max, "eps_max"),
        }
    sched = out.schedule
    if sched is not None:
        ranged = curve is not None
        result["acc_scale"] = sched.acc_scale
        result["total_cost"] = sched.total_cost
        result["rounds"] = [
            {
                "t": int(sched.t[j]),
                "A": float(sched.A[j]),
                "R_star": float(sched.R_star[j]),
                "R_min": float(sched.R_min[j]) if ranged else None,
                "R_max": float(sched.R_max[j]) if ranged else None,
                "R_applied": float(sched.R_applied[j]),
                "cost": float(sched.cost[j]),
                "n_participants": int(sched.n_part[j]),
            }
            for j in range(sched.t.size)
        ]
    return result


# ============================================================================================
# JDP-FL recruitment auctions (``fedgame solve jdp``; JDP-FL Algorithms 1-2)
# ============================================================================================

#: at most this many bad entries of one list are spelled out (then a count of the rest)
_MAX_LISTED = 10
#: above this many candidates, the audit grid keeps a seeded sample of this many structural points
_AUDIT_FULL_GRID_N = 200
_AUDIT_STRUCTURAL = 600


class JDPProblem(_Strict):
    """A recruitment auction instance (see :func:`solve_jdp`). Types are checked by pydantic,
    ranges by :meth:`_ranges`, which reports every bad entry on its own line."""

    costs: list[float]
    data: list[float]
    budget: float
    mechanism: str = "both"
    audit_clients: list[int] | None = None

    @model_validator(mode="after")
    def _ranges(self) -> JDPProblem:
        bad: list[str] = []
        n = len(self.costs)

        def entries(name: str, values: list[float], what: str) -> None:
            wrong = [(i, v) for i, v in enumerate(values) if not (v > 0 and math.isfinite(v))]
            bad.extend(f"{name}.{i}: must be > 0 and finite ({what}), got {v!r}" for i, v in wrong[:_MAX_LISTED])
            if len(wrong) > _MAX_LISTED:
                bad.append(f"{name}: {len(wrong) - _MAX_LISTED} more entries are not > 0 and finite")

        if n == 0:
            bad.append("costs: must list at least 1 candidate (n >= 1), got []")
        entries("costs", self.costs, "a reported cost c_i")
        entries("data", self.data, "a data size d_i")
        if len(self.data) != n:
            bad.append(f"data: must have one value per candidate (n = {n}, as costs), got {len(self.data)}")
        if not (self.budget > 0 and math.isfinite(self.budget)):
            bad.append(f"budget: must be > 0 and finite, got {self.budget!r}")
        if self.mechanism not in ("M1", "M2", "both"):
            bad.append(f"mechanism: must be one of 'M1', 'M2', 'both', got {self.mechanism!r}")
        if self.audit_clients is not None:
            seen: set[int] = set()
            for k, j in enumerate(self.audit_clients):
                if not 0 <= j < n:
                    bad.append(f"audit_clients.{k}: must be a candidate index in [0, {n - 1}], got {j}")
                elif j in seen:
                    bad.append(f"audit_clients.{k}: candidate {j} is listed twice, got {j}")
                seen.add(j)
        if bad:
            raise ValueError("\n".join(bad))
        return self


def parse_jdp_problem(raw: Any) -> JDPProblem:
    """Validate a JSON value as a :class:`JDPProblem`; :class:`ProblemError` lists every bad
    field, one per line (before any auction work)."""
    return validate_problem(JDPProblem, raw)


def solve_jdp(raw: Any, *, time_limit: float | None = None) -> dict[str, Any]:
    """Run JDP-FL's recruitment auctions on one instance (``fedgame solve jdp``).

    Input: ``costs`` (reported costs c_i > 0, one per candidate), ``data`` (data sizes d_i > 0),
    ``budget`` B > 0; optionally ``mechanism`` (``"M1"``, ``"M2"`` or ``"both"``, the default)
    and ``audit_clients`` (0-based candidates whose truthfulness is audited by brute force).

    Output: ``n``, ``budget`` and, per mechanism under ``"M1"`` / ``"M2"``: ``winners``
    (0-based, ascending), ``payments`` (one per candidate, 0 for losers), ``total_payment``,
    ``data_bought`` (Σ_{i∈W} d_i), ``winners_cost`` (Σ_{i∈W} c_i), ``payments_within_budget``
    (Σp ≤ B; false for M2 whenever its critical bids overspend — the paper's budget balance
    holds for M2's winners' costs, not its payments, and payments are never rescaled),
    ``costs_within_budget`` (Σ_{i∈W} c_i ≤ B); M1 adds ``price`` (ρ, null without winners),
    M2 ``fallback`` (whether it output {i*}). With ``audit_clients``, ``audit``: per audited
    client the largest utility gain from misreporting its cost on the grid of
    :func:`~fedgame.incentives.auctions.misreport_grid`
    (``max_gain``, with ``best_misreport``, ``truthful_utility`` and ``grid_points``; for
    n > 200 the grid keeps a seeded sample of 600 of its O(n) structural points),
    ``worst_gain``, ``tolerance`` = 1e-9·max(1, B) and ``truthful`` (worst_gain ≤ tolerance),
    and ``individual_rationality`` over all candidates (``holds``, ``min_winner_utility``,
    ``paid_losers``), the costs being taken as true.

    ``time_limit``: seconds; M2's payments cost one step per (candidate, winner) pair, so after
    its (fast) allocation an instance whose estimate exceeds the limit is refused in one line
    (:func:`~fedgame.core.limits.check_time`) instead of running for hours."""
    p = parse_jdp_problem(raw)
    c = np.asarray(p.costs, dtype=np.float64)
    d = np.asarray(p.data, dtype=np.float64)
    B = float(p.budget)
    auctions: list[Auction] = []
    if p.mechanism in ("M1", "both"):
        auctions.append(UnitPriceAuction())
    if p.mechanism in ("M2", "both"):
        auctions.append(KnapsackAuction(warn_over_budget=False))  # the flag below reports it
    result: dict[str, Any] = {"n": int(c.size), "budget": B}
    if time_limit is not None and p.mechanism in ("M2", "both"):
        from fedgame.core.limits import M2_STEPS_PER_SECOND, check_time
        from fedgame.incentives.auctions._m2 import _m2_rows

        winners = int(np.count_nonzero(_m2_rows(c[None, :], d, B)[0][0]))
        try:
            check_time(
                c.size * winners / M2_STEPS_PER_SECOND,
                time_limit,
                field="costs",
                what=f"M2's payments for {c.size:,} candidates and {winners:,} winners",
            )
        except ValueError as e:
            raise ProblemError(str(e)) from None
    for auction in auctions:
        out = auction.run(c, budget=B, data_sizes=d)
        entry: dict[str, Any] = {
            "winners": out.winners.tolist(),
            "payments": out.payment_vector().tolist(),
            "total_payment": out.total_payment,
            "data_bought": out.data_bought,
            "winners_cost": out.winners_cost,
            "payments_within_budget": out.payments_within_budget,
            "costs_within_budget": out.costs_within_budget,
        }
        if auction.name == "M1":
            entry["price"] = out.price
        else:
            entry["fallback"] = out.fallback
        if p.audit_clients is not None:
            audit = truthfulness_audit(
                auction,
                c,
                d,
                B,
                clients=p.audit_clients,
                max_structural=None if c.size <= _AUDIT_FULL_GRID_N else _AUDIT_STRUCTURAL,
            )
            ir = individual_rationality(out, c)
            tol = 1e-9 * max(1.0, B)
            entry["audit"] = {
                "clients": audit.clients.tolist(),
                "max_gain": audit.max_gain.tolist(),
                "best_misreport": audit.best_misreport.tolist(),
                "truthful_utility": audit.truthful_utility.tolist(),
                "grid_points": audit.grid_points.tolist(),
                "worst_gain": audit.worst_gain,
                "tolerance": tol,
                "truthful": audit.truthful(tol),
                "individual_rationality": {
                    "holds": ir.holds(tol),
                    "min_winner_utility": _finite(ir.min_winner_utility),
                    "paid_losers": ir.paid_losers,
                },
            }
        result[auction.name] = entry
    return result
