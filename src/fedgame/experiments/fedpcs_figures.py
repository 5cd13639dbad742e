"""FedPCS's game-level figures at the reproduction accuracy scale κ = 1e4 (Σ|D|)².

Yuan & Wang, FedPCS, draw several figures from the game alone, before any model is trained.
This module draws them from game plans that are already solved
(:func:`~fedgame.incentives.fedpcs.solve_plan`, read from the cache) and a baseline outside the
game (:func:`~fedgame.incentives.fedpcs.baseline_plan` ``"initial"``: Random's clients keep
ρ_i^t = ρ_i^0 and are paid nothing). It computes every number shown under each figure:

* Fig. 4: Pearson correlation of the clients' ρ_i^t trajectories, t = 0..T, and the mean
  off-diagonal correlation. A constant trajectory has no correlation (zero variance), so such
  clients are left out and counted; Random's trajectories are all constant, so its correlation
  is undefined (``None``), not zero;
* Fig. 5: social welfare per round SW_t (summand of Eq. 30) at FedPCS's equilibrium, the
  bounded social optimum at the same rewards (Eqs. 31-32, ρ ∈ [ρ_L, ρ_H]) and Random's; the
  totals Σ_t, the gaps, and Eq. 30 split into the clients' reward income and privacy cost;
* Fig. 6: the expected server cost per round U_t (Eq. 13) for FedPCS and Random, totals over
  t ≥ 1 (ρ^0 is given, and the cost the server can act on starts at t = 1), and the client
  with the largest share of it;
* Figs. 7-8: Algorithm 3 under B_t = 700 → 300 on FedPCS's plan: K_t, τ(t) = K_t/N, Theorem 7's
  ρ_t*, and the expected budget usage of K_t privacy-aware draws with replacement,
  E[Σ_{k≤K_t} ρ_{i_k}] = K_t Σ_i ρ_i² / Σ_i ρ_i (x_i ∝ ρ_i), at the plan's ρ^t.

Algorithm 3 is computed exactly as :func:`~fedgame.experiments.kappa_sweep.kappa_row` and a
budgeted :func:`~fedgame.incentives.fedpcs.solve_plan` compute it (Theorem 7 on the Lemma-2
coefficients at the fixed-K equilibrium), without solving any game: the expected usage is taken
at that equilibrium's ρ^t, not at the equilibrium a budgeted plan re-solves under Algorithm 3's
rewards. ``python scripts/fedpcs_figures.py --seeds 0 1`` writes
``results/fedpcs_figures/`` (``figures.md``, ``figures.json`` and the PNGs) and refuses to run
for a seed whose plan is not cached (a solve takes ~15 CPU minutes).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from numpy.typing import NDArray  # noqa: E402

from fedgame.experiments.report import _save  # noqa: E402
from fedgame.pipeline.store import atomic_write_text  # noqa: E402
from fedgame.incentives.fedpcs import (  # noqa: E402
    FedPCSGame,
    FedPCSPlan,
    adaptive_schedule,
    affine_response,
    baseline_plan,
    cache_dir,
    inclusion_probability,
    linear_budget,
    solve_plan,
)

__all__ = ["algorithm3", "client_costs", "figure_numbers", "figures_from_recipes", "rho_correlation", "write_fedpcs_figures"]

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]

_DEFAULTS = FedPCSGame(n_clients=1, clients_per_round=1, rounds=2)


def rho_correlation(rho: FloatArray) -> tuple[FloatArray, dict[str, Any]]:
    """Fig. 4: the (N, N) Pearson correlation of the rows of ``rho`` (N, T+1), NaN on the rows
    and columns of constant trajectories (their correlation is undefined, not zero), and its
    summary: ``mean_offdiag``, ``min_offdiag``, ``max_offdiag`` over the pairs of non-constant
    clients (``None`` with fewer than two such clients) and ``constant_clients``."""
    r = np.asarray(rho, dtype=float)
    n = r.shape[0]
    moving = np.ptp(r, axis=1) > 0
    corr = np.full((n, n), np.nan)
    summary: dict[str, Any] = {
        "mean_offdiag": None,
        "min_offdiag": None,
        "max_offdiag": None,
        "constant_clients": np.flatnonzero(~moving).tolist(),
        "pairs": 0,
    }
    idx = np.flatnonzero(moving)
    if idx.size < 2:
        return corr, summary
    c = np.corrcoef(r[idx])
    corr[np.ix_(idx, idx)] = c
    off = c[~np.eye(idx.size, dtype=bool)]
    summary.update(mean_offdiag=float(off.mean()), min_offdiag=float(off.min()), max_offdiag=float(off.max()), pairs=int(off.size // 2))
    return corr, summary


def client_costs(plan: FedPCSPlan) -> FloatArray:
    """Each client's share of the expected server cost, Σ_{t≥1} P_i^t [v^t/ρ_i^t + (1−γ) R_t ρ_i^t]
    (the summand of Eq. 13 under the plan's inclusion rule), shape (N,); they sum to
    Σ_{t≥1} ``plan.cost`` (checked by :func:`figure_numbers`)."""
    N = plan.rho.shape[0]
    P = inclusion_probability(plan.rho, plan.phi, N, int(plan.K[0]), inclusion=plan.inclusion)  # type: ignore[arg-type]  # plan.inclusion is a str; inclusion_probability checks it at runtime
    per = P * (plan.v / plan.rho + (1.0 - plan.gamma) * plan.reward * plan.rho)
    return np.asarray(per[:, 1:].sum(axis=1), dtype=float)


def _cost_summary(plan: FedPCSPlan) -> dict[str, Any]:
    per = client_costs(plan)
    top = int(np.argmax(per))
    return {
        "top_client": top,
        "top_client_rho0": float(plan.rho0[top]),
        "top_client_share": float(per[top] / per.sum()),
        "per_client_sums_to_total": bool(np.isclose(per.sum(), np.asarray(plan.cost)[1:].sum(), rtol=1e-9)),
    }


def _welfare_parts(plan: FedPCSPlan) -> dict[str, float]:
    """Eq. 30 split: the clients' reward income Σ_t R_t Σ_i ρ_i^t and privacy cost Σ_t Σ_i ϕ_i (ρ_i^t)²."""
    return {
        "payments": float((plan.reward * plan.rho.sum(axis=0)).sum()),
        "privacy_cost": float((plan.varphi[:, None] * plan.rho**2).sum()),
    }


def algorithm3(
    plan: FedPCSPlan,
    budget: tuple[float, float],
    *,
    R_max: float = _DEFAULTS.R_max,
    rho_min: float = _DEFAULTS.rho_min,
    rho_max: float = _DEFAULTS.rho_max,
) -> dict[str, Any]:
    """Figs. 7-8: Algorithm 3 under the linear budget B_t = ``budget[0]`` → ``budget[1]`` on a
    fixed-K plan, exactly as a budgeted solve builds it (Theorem 7 per round on the Lemma-2
    coefficients averaged at the plan's equilibrium, ρ_t* kept in [ρ_L, ρ_H]), without
    re-solving the clients' equilibrium under the new rewards.

    Returns per round ``budget`` B_t, ``K`` K_t, ``tau`` τ(t) = K_t/N, ``rho_star`` ρ_t*,
    ``reward`` Algorithm 3's R_t, ``planned_usage`` K_t ρ_t* (≤ B_t by Eq. 41),
    ``expected_usage`` K_t Σ_i ρ_i² / Σ_i ρ_i at the plan's ρ^t (the expected Σ ρ of K_t
    privacy-aware draws with replacement, x_i ∝ ρ_i), the rounds where that exceeds B_t and the
    rounds where τ rises."""
    if np.any(np.isfinite(plan.budget)):
        raise ValueError("plan: Algorithm 3 needs the fixed-K plan (no incentive.budget); this one has a budget")
    N, T1 = plan.rho.shape
    T, K = T1 - 1, int(plan.K[0])
    B = linear_budget(T, *budget)
    aff = affine_response(plan.alpha, plan.rho, plan.phi, plan.reward, plan.varphi, N, K, inclusion=plan.inclusion)  # type: ignore[arg-type]  # plan.inclusion is a str; affine_response checks it at runtime
    sched = adaptive_schedule(aff.G, aff.H, aff.P, plan.v, plan.gamma, B, R_max=R_max, rho_max=rho_max, rho_min=rho_min)
    Ks = np.asarray(sched.K, dtype=np.int64)
    tau = Ks / N
    expected = Ks * (plan.rho**2).sum(axis=0) / plan.rho.sum(axis=0)
    planned = Ks * np.asarray(sched.rho_star)
    rises = [int(t) + 1 for t in np.flatnonzero(np.diff(tau) > 1e-12)]
    over = [int(t) for t in np.flatnonzero(expected > B)]
    return {
        "budget": B.tolist(),
        "K": Ks.tolist(),
        "tau": tau.tolist(),
        "rho_star": np.asarray(sched.rho_star).tolist(),
        "reward": np.asarray(sched.reward).tolist(),
        "slack": np.asarray(sched.slack).tolist(),
        "planned_usage": planned.tolist(),
        "expected_usage": expected.tolist(),
        "rounds_over_budget": over,
        "expected_over_budget_max": float((expected - B).max()),
        "expected_usage_total": float(expected.sum()),
        "budget_total": float(B.sum()),
        "tau_rises": rises,
        "tau_nonincreasing": not rises,
        "tau_schedule_matches": bool(np.allclose(np.asarray(sched.tau), tau)),
    }


def figure_numbers(
    fedpcs: FedPCSPlan,
    random: FedPCSPlan,
    *,
    budget: tuple[float, float] = (700.0, 300.0),
    R_max: float = _DEFAULTS.R_max,
    rho_min: float = _DEFAULTS.rho_min,
    rho_max: float = _DEFAULTS.rho_max,
) -> dict[str, Any]:
    """The numbers of Figs. 4, 5, 6 and 7-8 for one seed: ``fedpcs`` the solved fixed-K plan,
    ``random`` the plan of Random's clients outside the game (same ρ^0 and ϕ, i.e. the same
    seed). Per-round series are lists over t = 0..T."""
    if fedpcs.rho.shape != random.rho.shape or not np.array_equal(fedpcs.rho0, random.rho0):
        raise ValueError("random: must be the baseline of the same clients (same seed, N and T) as fedpcs")
    _, mean_fed = rho_correlation(fedpcs.rho)
    _, mean_fed1 = rho_correlation(fedpcs.rho[:, 1:])
    _, mean_rnd = rho_correlation(random.rho)
    mean_fed["rise_at_t1"] = int((fedpcs.rho[:, 1] > fedpcs.rho[:, 0]).sum())
    mean_fed["fall_at_t1"] = int((fedpcs.rho[:, 1] < fedpcs.rho[:, 0]).sum())
    w, w_opt, w_rnd = (np.asarray(x, dtype=float) for x in (fedpcs.welfare, fedpcs.welfare_optimum, random.welfare))
    tot, tot_opt, tot_rnd = float(w.sum()), float(w_opt.sum()), float(w_rnd.sum())
    c_fed, c_rnd = np.asarray(fedpcs.cost, dtype=float), np.asarray(random.cost, dtype=float)
    j_fed, j_rnd = float(c_fed[1:].sum()), float(c_rnd[1:].sum())
    return {
        "fig4": {"fedpcs": mean_fed, "fedpcs_from_t1": mean_fed1, "random": mean_rnd},
        "fig5": {
            "fedpcs": w.tolist(),
            "optimum": w_opt.tolist(),
            "random": w_rnd.tolist(),
            "total_fedpcs": tot,
            "total_optimum": tot_opt,
            "total_random": tot_rnd,
            "gap_to_optimum_rel": (tot_opt - tot) / abs(tot_opt) if tot_opt != 0 else None,
            "fedpcs_minus_random": tot - tot_rnd,
            "rounds_fedpcs_below_random": [int(t) for t in np.flatnonzero(w < w_rnd)],
            "rounds_fedpcs_negative": [int(t) for t in np.flatnonzero(w < 0)],
            "parts_fedpcs": _welfare_parts(fedpcs),
            "parts_random": _welfare_parts(random),
        },
        "fig6": {
            "fedpcs": c_fed.tolist(),
            "random": c_rnd.tolist(),
            "total_fedpcs": j_fed,
            "total_random": j_rnd,
            "cheaper": "FedPCS" if j_fed < j_rnd else "Random" if j_rnd < j_fed else "neither",
            "random_over_fedpcs": j_rnd / j_fed if j_fed > 0 else None,
            "rounds_fedpcs_dearer": [int(t) for t in np.flatnonzero(c_fed[1:] > c_rnd[1:]) + 1],
            "clients_fedpcs": _cost_summary(fedpcs),
            "clients_random": _cost_summary(random),
        },
        "fig78": algorithm3(fedpcs, budget, R_max=R_max, rho_min=rho_min, rho_max=rho_max),
    }


def _g(x: float | None, spec: str = ".4g") -> str:
    return "null" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _series(xs: Sequence[float], spec: str = ".4g") -> str:
    return " ".join(format(x, spec) for x in xs)


def _draw(plans: Mapping[int, tuple[FedPCSPlan, FedPCSPlan]], numbers: Mapping[int, dict[str, Any]], dest: Path) -> dict[str, str]:
    """The PNGs: Fig. 4 for the first seed, Figs. 5, 6, 7-8 with one line per seed."""
    figs: list[tuple[str, str]] = []
    first = next(iter(plans))
    fed0, rnd0 = plans[first]
    corr, _ = rho_correlation(fed0.rho)
    order = np.argsort(fed0.rho0)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    cmap = plt.get_cmap("coolwarm").with_extremes(bad="0.75")
    im = axes[0].imshow(np.ma.masked_invalid(corr[np.ix_(order, order)]), vmin=-1, vmax=1, cmap=cmap)
    fig.colorbar(im, ax=axes[0], shrink=0.8)
    axes[0].set_title(f"Fig. 4: corr(ρ_i, ρ_j), FedPCS, seed {first}\n(clients by ρ_i^0; grey: constant, undefined)", fontsize=8)
    axes[0].set_xlabel("client (by ρ_i^0)")
    axes[0].set_ylabel("client (by ρ_i^0)")
    t = np.arange(fed0.rho.shape[1])
    for k, i in enumerate(order[:: max(1, order.size // 8)]):
        (line,) = axes[1].plot(t, fed0.rho[i], lw=1, label="FedPCS ρ_i^t" if k == 0 else None)
        axes[1].plot(t, rnd0.rho[i], ls=":", lw=1, color=line.get_color(), label="Random ρ_i^0" if k == 0 else None)
    axes[1].set_xlabel("round t")
    axes[1].set_ylabel("ρ_i^t")
    axes[1].set_title("some clients' trajectories (Random: constant)", fontsize=8)
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    _save(fig, dest, "fig4_rho_correlation.png", "fig4", figs)

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for k, (s, n) in enumerate(numbers.items()):
        f = n["fig5"]
        t = np.arange(len(f["fedpcs"]))
        ax.plot(t, f["fedpcs"], color="C0", alpha=1 - 0.4 * k, label=f"FedPCS equilibrium, seed {s}")
        ax.plot(t, f["optimum"], "k--", alpha=1 - 0.4 * k, label=f"social optimum (Eqs. 31-32), seed {s}")
        ax.plot(t, f["random"], color="C3", alpha=1 - 0.4 * k, label=f"Random (ρ^0, R = 0), seed {s}")
    ax.axhline(0, color="0.5", lw=0.5)
    ax.set_xlabel("round t")
    ax.set_ylabel("SW_t (Eq. 30)")
    ax.set_title("Fig. 5: social welfare per round, κ = 1e4 (Σ|D|)²", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, dest, "fig5_welfare.png", "fig5", figs)

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for k, (s, n) in enumerate(numbers.items()):
        f = n["fig6"]
        t = np.arange(1, len(f["fedpcs"]))
        ax.plot(t, f["fedpcs"][1:], color="C0", alpha=1 - 0.4 * k, marker=".", label=f"FedPCS, seed {s}")
        ax.plot(t, f["random"][1:], color="C3", alpha=1 - 0.4 * k, marker=".", label=f"Random (ρ^0, uniform), seed {s}")
    ax.set_yscale("log")
    ax.set_xlabel("round t")
    ax.set_ylabel("expected server cost U_t (Eq. 13)")
    ax.set_title("Fig. 6: expected server cost per round (t ≥ 1)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, dest, "fig6_server_cost.png", "fig6", figs)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for k, (s, n) in enumerate(numbers.items()):
        f = n["fig78"]
        t = np.arange(len(f["budget"]))
        if k == 0:
            axes[0].plot(t, f["budget"], "k-", lw=2, label="B_t")
        axes[0].plot(t, f["expected_usage"], color=f"C{k}", marker=".", label=f"E[usage] = K_t Σρ²/Σρ, seed {s}")
        axes[0].plot(t, f["planned_usage"], color=f"C{k}", ls=":", label=f"K_t ρ_t* (Theorem 7), seed {s}")
        axes[1].plot(t, f["tau"], color=f"C{k}", marker=".", label=f"τ(t) = K_t/N, seed {s}")
    axes[0].set_xlabel("round t")
    axes[0].set_ylabel("Σ ρ over the K_t draws")
    axes[0].set_title("Fig. 7: budget B_t and its expected usage (Algorithm 3)", fontsize=9)
    axes[1].set_xlabel("round t")
    axes[1].set_ylabel("τ(t)")
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("Fig. 8: sampling ratio τ(t) (Algorithm 3)", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    _save(fig, dest, "fig78_budget_tau.png", "fig78", figs)
    return {caption: name for caption, name in figs}


def _markdown(
    numbers: Mapping[int, dict[str, Any]], pngs: Mapping[str, str], *, instance: str, commit: str | None, budget: tuple[float, float]
) -> str:
    """figures.md: the instance, then one section per figure (Figs. 4, 5, 6 and 7-8), each with
    its PNG and every number under it, all read from ``numbers`` (what figures.json holds)."""
    lines = [
        *_intro(list(numbers), instance, commit),
        *_fig4_section(numbers, pngs["fig4"]),
        *_fig5_section(numbers, pngs["fig5"]),
        *_fig6_section(numbers, pngs["fig6"]),
        *_fig78_section(numbers, pngs["fig78"], budget),
    ]
    return "\n".join(lines) + "\n"


def _intro(seeds: Sequence[int], instance: str, commit: str | None) -> list[str]:
    """The page's title and the paragraph naming the instance, the seeds, the two plans
    compared (FedPCS against Random outside the game) and the command that wrote the page."""
    return [
        "# FedPCS game-level figures at κ = 1e4 (Σ|D|)²",
        "",
        f"Instance: {instance}; seeds {', '.join(map(str, seeds))}. FedPCS: the solved fixed-K game "
        "(privacy-aware inclusion, the server's rewards on the true cost); Random: its clients outside the game "
        "(ρ_i^t = ρ_i^0, R_t = 0, uniform inclusion), the same ρ^0 and ϕ. Computed from the cached plans "
        f"at commit {commit or 'unknown'} by `fedgame.experiments.fedpcs_figures` (the command: "
        f"`python scripts/fedpcs_figures.py --seeds {' '.join(map(str, seeds))}`); every number below is computed "
        "by that module (figures.json holds them).",
    ]


def _section_head(fig: str, title: str, png: str) -> list[str]:
    """A figure's heading (``## <fig>: <title>``) and its PNG, each section's first lines."""
    return ["", f"## {fig}: {title}", "", f"![{fig}]({png})", ""]


def _table_head(head: str) -> list[str]:
    """A markdown table's header row ``head`` and the separator row under it (one ``---`` per column)."""
    return [head, "|" + "---|" * (head.count("|") - 1)]


def _per_round(numbers: Mapping[int, dict[str, Any]], fig: str, series: Sequence[tuple[str, str]], t0: int) -> list[str]:
    """The per-round values under a figure's tables (Figs. 5 and 6): for each seed, one line per
    ``(label, key)`` of ``series`` with ``numbers[seed][fig][key]`` from round ``t0`` to T."""
    width = max(len(label) for label, _ in series)
    lines = ["", f"Per round t = {t0}..T:", ""]
    for s, n in numbers.items():
        lines.append(f"* seed {s}:")
        lines += [f"  {label.ljust(width)} = {_series(n[fig][key][t0:])}" for label, key in series]
    return lines


def _fig4_section(numbers: Mapping[int, dict[str, Any]], png: str) -> list[str]:
    """Fig. 4's section: the off-diagonal correlation of the ρ_i^t trajectories per seed over
    t = 0..T and over t ≥ 1, and why Random's correlation is undefined (null), not zero."""
    n_rnd_const = {len(n["fig4"]["random"]["constant_clients"]) for n in numbers.values()}
    return [
        *_section_head("Fig. 4", "correlation of the clients' ρ_i^t trajectories (t = 0..T)", png),
        "Pearson correlation between clients' trajectories; the off-diagonal summary is over the pairs of clients "
        "whose trajectory is not constant (a constant trajectory has zero variance: its correlation is undefined, "
        f"drawn grey, not 0). Heat map for seed {next(iter(numbers))}.",
        "",
        *_fig4_table(numbers),
        "",
        "The same from t = 1 (leaving out the first step of Eq. 20, from the given ρ^0 to ρ^1), and how many "
        "clients' budgets go up or down in that step:",
        "",
        *_fig4_from_t1_table(numbers),
        "",
        f"Random: all {'/'.join(map(str, sorted(n_rnd_const)))} clients' trajectories are constant (ρ_i^t = ρ_i^0), "
        "so the correlation is undefined (null), not zero.",
    ]


def _fig4_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Fig. 4 over t = 0..T: FedPCS's mean, min and max off-diagonal correlation, the pairs it is
    over, its constant clients, and Random's mean, one row per seed."""
    lines = _table_head("| seed | FedPCS mean off-diag. | min | max | pairs | constant FedPCS clients | Random mean off-diag. |")
    for s, n in numbers.items():
        f, r = n["fig4"]["fedpcs"], n["fig4"]["random"]
        const = f["constant_clients"]
        lines.append(
            f"| {s} | {_g(f['mean_offdiag'], '.3f')} | {_g(f['min_offdiag'], '.3f')} | "
            f"{_g(f['max_offdiag'], '.3f')} | {f['pairs']} | {len(const)} {const} | "
            f"{_g(r['mean_offdiag'], '.3f')} |"
        )
    return lines


def _fig4_from_t1_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Fig. 4 over t ≥ 1 (without Eq. 20's first step from the given ρ^0), and how many clients'
    budgets rise or fall in that first step, one row per seed."""
    lines = _table_head("| seed | FedPCS mean off-diag., t ≥ 1 | pairs | clients constant over t ≥ 1 | ρ^1 > ρ^0 | ρ^1 < ρ^0 |")
    for s, n in numbers.items():
        f, f1 = n["fig4"]["fedpcs"], n["fig4"]["fedpcs_from_t1"]
        lines.append(
            f"| {s} | {_g(f1['mean_offdiag'], '.3f')} | {f1['pairs']} | {len(f1['constant_clients'])} | "
            f"{f['rise_at_t1']} | {f['fall_at_t1']} |"
        )
    return lines


def _fig5_section(numbers: Mapping[int, dict[str, Any]], png: str) -> list[str]:
    """Fig. 5's section: social welfare (Eq. 30) of FedPCS, the bounded social optimum (Eqs.
    31-32) and Random, their totals and gaps, Eq. 30 split into income and privacy cost, per round."""
    return [
        *_section_head("Fig. 5", "social welfare per round (Eq. 30)", png),
        "SW_t = Σ_i [ρ_i^t R_t − ϕ_i (ρ_i^t)²]. Optimum: the bounded social optimum at FedPCS's rewards "
        "(Eqs. 31-32, ρ ∈ [ρ_L, ρ_H]). Random is unpaid (R_t = 0), so its SW_t = −Σ_i ϕ_i (ρ_i^0)². Totals over "
        "t = 0..T; gap = (Σ optimum − Σ FedPCS)/|Σ optimum|.",
        "",
        *_fig5_totals_table(numbers),
        "",
        "Eq. 30 split into the clients' reward income Σ_t R_t Σ_i ρ_i^t and privacy cost Σ_t Σ_i ϕ_i (ρ_i^t)² "
        "(the server's payments are income to the clients, not subtracted):",
        "",
        *_fig5_parts_table(numbers),
        *_per_round(numbers, "fig5", (("FedPCS", "fedpcs"), ("optimum", "optimum"), ("Random", "random")), 0),
    ]


def _fig5_totals_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Fig. 5's totals Σ_t SW_t (FedPCS, optimum, Random), FedPCS's gap to the optimum and to
    Random, and the rounds where FedPCS is below Random, one row per seed."""
    lines = _table_head("| seed | Σ SW FedPCS | Σ SW optimum | Σ SW Random | gap to optimum | FedPCS − Random | rounds FedPCS < Random |")
    for s, n in numbers.items():
        f = n["fig5"]
        gap = f["gap_to_optimum_rel"]
        lines.append(
            f"| {s} | {f['total_fedpcs']:.6g} | {f['total_optimum']:.6g} | {f['total_random']:.6g} | "
            f"{'null' if gap is None else f'{100 * gap:.1f}%'} | {f['fedpcs_minus_random']:.6g} | "
            f"{f['rounds_fedpcs_below_random'] or 'none'} |"
        )
    return lines


def _fig5_parts_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Eq. 30 split into FedPCS's reward income and privacy cost beside Random's privacy cost,
    and the rounds where FedPCS's SW_t is negative, one row per seed."""
    lines = _table_head("| seed | FedPCS income | FedPCS privacy cost | Random privacy cost | rounds with FedPCS SW_t < 0 |")
    for s, n in numbers.items():
        f = n["fig5"]
        lines.append(
            f"| {s} | {f['parts_fedpcs']['payments']:.6g} | {f['parts_fedpcs']['privacy_cost']:.6g} | "
            f"{f['parts_random']['privacy_cost']:.6g} | {f['rounds_fedpcs_negative'] or 'none'} |"
        )
    return lines


def _fig6_section(numbers: Mapping[int, dict[str, Any]], png: str) -> list[str]:
    """Fig. 6's section: the expected server cost U_t (Eq. 13) of FedPCS and Random, totals over
    t ≥ 1, the client with the largest share of it, and the cost per round."""
    return [
        *_section_head("Fig. 6", "expected server cost per round (Eq. 13)", png),
        "U_t = Σ_i P_i^t [v^t/ρ_i^t + (1−γ) R_t ρ_i^t], P_i^t the probability that client i is among the K draws "
        "(FedPCS: x_i ∝ ρ_i^t; Random: uniform, R_t = 0). Totals over t ≥ 1.",
        "",
        *_fig6_totals_table(numbers),
        "",
        "The single client with the largest share of Σ_{t≥1} U_t (per-client summands of Eq. 13; "
        "v^t/ρ_i makes clients with a small budget dear):",
        "",
        *_fig6_top_client_table(numbers),
        *_per_round(numbers, "fig6", (("FedPCS", "fedpcs"), ("Random", "random")), 1),
    ]


def _fig6_totals_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Fig. 6's totals Σ_{t≥1} U_t of FedPCS and Random, which is cheaper, their ratio and the
    rounds where FedPCS costs more, one row per seed."""
    lines = _table_head("| seed | Σ_{t≥1} U_t FedPCS | Σ_{t≥1} U_t Random | cheaper | Random / FedPCS | rounds FedPCS dearer |")
    for s, n in numbers.items():
        f = n["fig6"]
        lines.append(
            f"| {s} | {f['total_fedpcs']:.6g} | {f['total_random']:.6g} | {f['cheaper']} | "
            f"{_g(f['random_over_fedpcs'], '.3f')} | {f['rounds_fedpcs_dearer'] or 'none'} |"
        )
    return lines


def _fig6_top_client_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """The client with the largest share of Σ_{t≥1} U_t under FedPCS and under Random (with its
    ρ_i^0), and whether the per-client summands of Eq. 13 add up to the totals, one row per seed."""
    lines = _table_head("| seed | FedPCS: client (ρ_i^0), share | Random: client (ρ_i^0), share | per-client sums = totals |")
    for s, n in numbers.items():
        a, b = n["fig6"]["clients_fedpcs"], n["fig6"]["clients_random"]
        ok = a["per_client_sums_to_total"] and b["per_client_sums_to_total"]
        lines.append(
            f"| {s} | {a['top_client']} ({a['top_client_rho0']:.3g}), {100 * a['top_client_share']:.1f}% | "
            f"{b['top_client']} ({b['top_client_rho0']:.3g}), {100 * b['top_client_share']:.1f}% | "
            f"{'yes' if ok else 'no'} |"
        )
    return lines


def _fig78_section(numbers: Mapping[int, dict[str, Any]], png: str, budget: tuple[float, float]) -> list[str]:
    """Figs. 7-8's section: Algorithm 3 under B_t = ``budget`` (K_t, τ(t), Theorem 7's ρ_t*) and
    the expected budget usage at FedPCS's fixed-K ρ^t, a summary per seed, then each round."""
    lines = [
        *_section_head("Figs. 7-8", f"Algorithm 3 under B_t = {budget[0]:g} → {budget[1]:g}", png),
        "K_t = ⌊B_t/ρ_t*⌋ with Theorem 7's ρ_t* on the Lemma-2 coefficients averaged at FedPCS's fixed-K "
        "equilibrium (ρ_t* ∈ [ρ_L, ρ_H]), τ(t) = K_t/N, the same computation as a budgeted plan and "
        "results/fedpcs_kappa_sweep/. E[usage] = K_t Σ_i (ρ_i^t)² / Σ_i ρ_i^t is the expected Σ ρ of K_t "
        "privacy-aware draws with replacement (x_i ∝ ρ_i^t), at the fixed-K equilibrium's ρ^t: a budgeted plan "
        "re-solves the clients' equilibrium under Algorithm 3's rewards, which is not done here (it is a game "
        "solve), so this is the usage of Algorithm 3's K_t at the clients' fixed-K budgets. K_t ρ_t* ≤ B_t by "
        "Eq. 41, so E[usage] can exceed B_t only where the clients' ρ-weighted mean Σρ²/Σρ exceeds ρ_t*.",
        "",
        *_fig78_summary_table(numbers),
    ]
    for s, n in numbers.items():
        lines += _fig78_round_table(s, n["fig78"])
    return lines


def _fig78_summary_table(numbers: Mapping[int, dict[str, Any]]) -> list[str]:
    """Figs. 7-8 per seed: τ(0), τ(T), whether τ(t) is non-increasing (Fig. 8) and where it
    rises, the rounds where E[usage] exceeds B_t and by how much, and the totals (Fig. 7)."""
    lines = _table_head(
        "| seed | τ(0) | τ(T) | τ non-increasing | rounds τ rises | rounds E[usage] > B_t | max E[usage] − B_t | Σ_t E[usage] | Σ_t B_t |"
    )
    for s, n in numbers.items():
        f = n["fig78"]
        over = f["rounds_over_budget"]
        lines.append(
            f"| {s} | {f['tau'][0]:.2f} | {f['tau'][-1]:.2f} | {'yes' if f['tau_nonincreasing'] else 'no'} | "
            f"{len(f['tau_rises'])} {f['tau_rises']} | {len(over)} {over} | "
            f"{f['expected_over_budget_max']:.4g} | {f['expected_usage_total']:.6g} | {f['budget_total']:.6g} |"
        )
    return lines


def _fig78_round_table(seed: int, f: Mapping[str, Any]) -> list[str]:
    """Algorithm 3 round by round for one seed (``f``: its ``fig78`` numbers): B_t, K_t, τ(t),
    ρ_t*, the planned usage K_t ρ_t* and the expected usage, marked where it exceeds B_t."""
    lines = ["", f"Seed {seed}, per round:", "", *_table_head("| t | B_t | K_t | τ(t) | ρ_t* | K_t ρ_t* | E[usage] | E[usage] > B_t |")]
    for t, (b, k, tau, rs, pu, eu) in enumerate(
        zip(f["budget"], f["K"], f["tau"], f["rho_star"], f["planned_usage"], f["expected_usage"], strict=True)
    ):
        lines.append(f"| {t} | {b:.4g} | {k} | {tau:.2f} | {rs:.4g} | {pu:.4g} | {eu:.4g} | {'yes' if eu > b else ''} |")
    return lines


def write_fedpcs_figures(
    plans: Mapping[int, tuple[FedPCSPlan, FedPCSPlan]],
    dest: Path,
    *,
    budget: tuple[float, float] = (700.0, 300.0),
    R_max: float = _DEFAULTS.R_max,
    rho_min: float = _DEFAULTS.rho_min,
    rho_max: float = _DEFAULTS.rho_max,
    instance: str = "",
    commit: str | None = None,
) -> dict[str, Any]:
    """Figs. 4, 5, 6 and 7-8 for ``plans`` (seed → (FedPCS plan, Random plan)) into ``dest``:
    the PNGs, ``figures.md`` (each figure with its numbers) and ``figures.json``; returns the
    JSON's content (numbers per seed under ``"seeds"``, keyed by the seed as a string)."""
    if not plans:
        raise ValueError("plans: need at least one seed")
    dest.mkdir(parents=True, exist_ok=True)
    numbers = {s: figure_numbers(f, r, budget=budget, R_max=R_max, rho_min=rho_min, rho_max=rho_max) for s, (f, r) in plans.items()}
    pngs = _draw(plans, numbers, dest)
    out: dict[str, Any] = {
        "instance": instance,
        "commit": commit,
        "budget": list(budget),
        "figures": pngs,
        "seeds": {str(s): n for s, n in numbers.items()},
    }
    atomic_write_text(dest / "figures.json", json.dumps(out, indent=1, allow_nan=False) + "\n")
    atomic_write_text(dest / "figures.md", _markdown(numbers, pngs, instance=instance, commit=commit, budget=budget))
    return out


def _commit() -> str | None:
    """``git rev-parse --short HEAD``, with the uncommitted changes under src/ (if any) named."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."], cwd=here.parents[1], capture_output=True, text=True, check=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return None
    changed = [line[3:] for line in dirty if line.strip()]
    return head + (f" (with uncommitted {', '.join(changed)})" if changed else "")


def _cached(game: FedPCSGame) -> FedPCSPlan:
    """The plan of ``game`` from the cache; FileNotFoundError rather than a ~15-minute solve."""
    path = cache_dir() / f"fedpcs-{game.key()}.npz"
    if not path.exists():
        raise FileNotFoundError(
            f"seed {game.seed}: the FedPCS game is not cached ({path}); solve it first "
            "(a training run of the recipe, or solve_plan) and run this again"
        )
    return solve_plan(game)


def figures_from_recipes(
    dest: Path,
    *,
    seeds: Sequence[int] = (0, 1),
    recipe: Path = Path("recipes/fedpcs/fmnist.yaml"),
    random_recipe: Path = Path("recipes/fedpcs/random.yaml"),
    budget: tuple[float, float] = (700.0, 300.0),
) -> Path:
    """The figures of FedPCS's (``recipe``) and Random's (``random_recipe``, outside the game)
    plans for ``seeds``, from the game cache (a seed whose plan is not cached is refused), into
    ``dest``; returns ``dest/figures.md`` (``scripts/fedpcs_figures.py`` is the command)."""
    from fedgame.pipeline.build import fedpcs_game
    from fedgame.pipeline.config import load_recipe

    plans: dict[int, tuple[FedPCSPlan, FedPCSPlan]] = {}
    game = None
    for s in seeds:
        game = fedpcs_game(load_recipe(recipe, [f"seed={s}"]))
        rgame = fedpcs_game(load_recipe(random_recipe, [f"seed={s}"]))
        if game is None or rgame is None:
            raise ValueError("recipe, random_recipe: both need incentive.kind: fedpcs")
        plans[s] = (_cached(game), baseline_plan(rgame, "initial"))
    if game is None:
        raise ValueError("seeds: give at least one seed")
    kappa = "(Σ|D|)²" if game.acc_scale is None else f"κ = {game.acc_scale:g} (Σ|D|)²"
    instance = (
        f"N = {game.n_clients}, K = {game.clients_per_round}, T = {game.rounds - 1}, {kappa}, "
        f"γ = {game.gamma:g}, ρ⁰ ~ U[{game.rho_min:g}, {game.rho_max:g}], ϕ ~ U(0, 1) ({recipe} "
        f"and {random_recipe} with incentive.baseline_rho: initial)"
    )
    write_fedpcs_figures(
        plans,
        dest,
        budget=budget,
        R_max=game.R_max,
        rho_min=game.rho_min,
        rho_max=game.rho_max,
        instance=instance,
        commit=_commit(),
    )
    log.info("wrote %s", dest / "figures.md")
    return dest / "figures.md"
