"""The accuracy-scale sweep that picks FedPCS's reproduction κ (``acc_scale``; docs/fedpcs.md).

The paper never states the scale of its accuracy term (Eq. 13): with κ = (Σ|D|)², i.e.
v_t = γ/(t+1), paying is never worth it and the game is inert (R_t = 0, every ρ decays,
negative welfare, τ(t) = 1). This module solves the game on the paper-like instance (N = 100,
K = 20, T = 29, ρ⁰ ~ U[0.01, 12], ϕ ~ U(0, 1), γ = 0.5, seed 0: the types of
``recipes/fedpcs/fmnist.yaml``) for each κ of a decade grid, in units of (Σ|D|)², and records

* the server's rewards on the true cost (:func:`~fedgame.incentives.fedpcs.stackelberg`;
  docs/fedpcs.md, 'The accuracy scale κ and the server's solve'): min/mean R_t over t ≥ 1
  (R_0 := R_1), the true cost J, and J at the paper's Lemma-2 outer loop's rewards for
  comparison;
* the clients' mean field φ at t = 0 and t = T, equilibrium welfare (Eq. 30) and the price of
  anarchy against the bounded social optimum (Eqs. 31-32 with ρ ∈ [ρ_L, ρ_H]);
* Algorithm 3 under B_t = 700 → 300: τ(t) first/last/max and whether it is non-increasing
  (Theorem 7 on the Lemma-2 coefficients averaged at the true-cost equilibrium, exactly the
  schedule :func:`~fedgame.incentives.fedpcs.solve_plan` builds for a budgeted recipe).

The default is the smallest κ at which (a) R_t > 0 in every round, (b) τ(t) < 1 and
non-increasing, (c) equilibrium welfare > 0. ``python scripts/fedpcs_kappa_sweep.py``
solves each κ not yet under ``results/fedpcs_kappa_sweep/runs/`` (one cell per κ,
``kappa=<κ>/seed_<s>/`` with ``config.yaml``, ``summary.json`` and ``metrics.csv`` holding R_t,
τ(t), φ(t) per round: resumable, as a solve takes up to 20 minutes) and writes ``sweep.csv``,
``sweep.md`` and ``sweep.json`` from those files (``fedgame report RUNS --kind kappa-sweep``).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml

from fedgame.incentives.fedpcs import (
    FedPCSGame,
    accuracy_weights,
    adaptive_schedule,
    affine_response,
    equilibrium_cost,
    linear_budget,
    price_of_anarchy,
    social_welfare,
    solve_plan,
    stackelberg,
)

__all__ = [
    "KAPPA_GRID",
    "KappaRow",
    "choose_default",
    "kappa_row",
    "kappa_sweep",
    "load_rows",
    "run_sweep",
    "save_row",
    "write_sweep",
    "write_sweep_runs",
]

log = logging.getLogger(__name__)

#: κ / (Σ|D|)² on a decade grid
KAPPA_GRID = (1.0, 10.0, 100.0, 1000.0, 10_000.0)


@dataclass(frozen=True)
class KappaRow:
    """One κ of the sweep (rewards over t ≥ 1; R_0 := R_1 carries no information)."""

    kappa: float
    R_min: float
    R_mean: float
    R_max: float
    phi_0: float
    phi_T: float
    welfare: float
    poa: float
    tau_first: float
    tau_last: float
    tau_max: float
    tau_nonincreasing: bool
    cost: float  # J = Σ_{t≥1} U_t at the true-cost rewards
    cost_lemma2: float  # J at the Lemma-2 outer loop's rewards (same true cost)
    lemma2_converged: bool
    lemma2_equilibrium: bool
    converged: bool
    one_round_gain: float  # largest relative decrease any one-round check found at the answer
    live: bool  # criteria (a)-(c) of the module docstring
    seconds: float
    R: tuple[float, ...]
    tau: tuple[float, ...]
    phi: tuple[float, ...]


def kappa_row(
    kappa: float,
    *,
    n_clients: int = 100,
    clients_per_round: int = 20,
    rounds: int = 30,
    gamma: float = 0.5,
    seed: int = 0,
    budget: tuple[float, float] = (700.0, 300.0),
    n_starts: int = 8,
) -> KappaRow:
    """Solve the game at ``kappa`` (units of (Σ|D|)²) and measure criteria (a)-(c)."""
    if not (kappa > 0 and math.isfinite(kappa)):
        raise ValueError(f"kappa: must be > 0 and finite, got {kappa!r}")
    tic = time.perf_counter()
    game = FedPCSGame(
        n_clients=n_clients,
        clients_per_round=clients_per_round,
        rounds=rounds,
        gamma=gamma,
        acc_scale=float(kappa),
        n_starts=n_starts,
        seed=seed,
    )
    plan = solve_plan(game)  # true-cost rewards at a fixed K (Algorithm 2); the runs of a recipe reuse it
    N, K, T = n_clients, clients_per_round, rounds - 1
    R, rho, varphi = plan.reward, plan.rho, plan.varphi
    # Algorithm 3 exactly as solve_plan builds it for a budgeted recipe (same equilibrium)
    B = linear_budget(T, *budget)
    aff = affine_response(plan.alpha, rho, plan.phi, R, varphi, N, K, inclusion=game.inclusion)
    sched = adaptive_schedule(aff.G, aff.H, aff.P, plan.v, gamma, B, R_max=game.R_max, rho_max=game.rho_max, rho_min=game.rho_min)
    tau = np.asarray(sched.tau)
    # the paper's outer loop, priced on the same true cost
    paper = stackelberg(
        plan.rho0,
        varphi,
        K,
        T,
        v=accuracy_weights(T, gamma=gamma, acc_scale=float(kappa)),
        gamma=gamma,
        server_solver="lemma2",
        rng=seed,
        n_starts=n_starts,
    )
    paper_cost = equilibrium_cost(paper.reward, plan.rho0, varphi, K, T, v=plan.v, gamma=gamma, rng=seed, n_starts=n_starts)
    welfare = social_welfare(rho, R, varphi)
    nonincreasing = bool(np.all(np.diff(tau) <= 1e-12))
    live = bool(np.all(R[1:] > 0) and np.all(tau < 1.0) and nonincreasing and welfare > 0)
    return KappaRow(
        kappa=float(kappa),
        R_min=float(R[1:].min()),
        R_mean=float(R[1:].mean()),
        R_max=float(R[1:].max()),
        phi_0=float(plan.phi[0]),
        phi_T=float(plan.phi[-1]),
        welfare=float(welfare),
        poa=float(price_of_anarchy(rho, R, varphi, bounded=True, rho_min=game.rho_min, rho_max=game.rho_max)),
        tau_first=float(tau[0]),
        tau_last=float(tau[-1]),
        tau_max=float(tau.max()),
        tau_nonincreasing=nonincreasing,
        cost=float(plan.cost[1:].sum()),
        cost_lemma2=paper_cost.objective,
        lemma2_converged=bool(paper.converged),
        lemma2_equilibrium=bool(paper_cost.equilibrium),
        converged=bool(plan.converged),
        one_round_gain=float(plan.extras["reward_residual"]),
        live=live,
        seconds=time.perf_counter() - tic,
        R=tuple(map(float, R)),
        tau=tuple(map(float, tau)),
        phi=tuple(map(float, plan.phi)),
    )


def choose_default(rows: Sequence[KappaRow]) -> tuple[float | None, str]:
    """The reproduction κ and the criteria it was chosen by: the smallest κ meeting (a)-(c);
    when none does, the smallest at which the game is live, (a) R_t > 0 in every round and
    (c) welfare > 0, saying that (b) fails everywhere; (None, ...) when no κ is live."""
    full = sorted(r.kappa for r in rows if r.live)
    if full:
        return full[0], "(a)-(c)"
    live = sorted(r.kappa for r in rows if r.R_min > 0 and r.welfare > 0)
    if live:
        return live[0], "(a) and (c); (b) fails at every κ of the grid"
    return None, "none"


def kappa_sweep(kappas: Sequence[float] = KAPPA_GRID, **kwargs: object) -> list[KappaRow]:
    """:func:`kappa_row` for each κ (ascending), logging one line per κ."""
    rows = []
    for kappa in sorted(kappas):
        row = kappa_row(kappa, **kwargs)  # type: ignore[arg-type]  # kwargs are kappa_row's keywords, checked there
        log.info(
            "kappa %g: R_t in [%.4g, %.4g], phi %.3f -> %.3f, welfare %.4g, tau %.2f -> %.2f, J %.6g (Lemma 2: %.6g), %.0f s",
            kappa,
            row.R_min,
            row.R_max,
            row.phi_0,
            row.phi_T,
            row.welfare,
            row.tau_first,
            row.tau_last,
            row.cost,
            row.cost_lemma2,
            row.seconds,
        )
        rows.append(row)
    return rows


_COLUMNS = (
    "kappa",
    "R_min",
    "R_mean",
    "R_max",
    "phi_0",
    "phi_T",
    "welfare",
    "poa",
    "tau_first",
    "tau_last",
    "tau_max",
    "tau_nonincreasing",
    "cost",
    "cost_lemma2",
    "lemma2_converged",
    "lemma2_equilibrium",
    "converged",
    "one_round_gain",
    "live",
    "seconds",
)


def _fmt(x: object) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.4g}"
    return str(x)


def write_sweep(rows: Sequence[KappaRow], dest: Path, *, instance: str) -> float | None:
    """``sweep.csv`` (the columns of :class:`KappaRow` but the per-round series),
    ``sweep.json`` (everything, with R_t, τ(t), φ(t) per κ) and ``sweep.md`` (the table and
    the chosen default) under ``dest``; returns the chosen κ."""
    dest.mkdir(parents=True, exist_ok=True)
    chosen, by = choose_default(rows)
    _write_csv(rows, dest / "sweep.csv")
    (dest / "sweep.json").write_text(
        json.dumps({"instance": instance, "chosen_acc_scale": chosen, "chosen_by": by, "rows": [asdict(r) for r in rows]}, indent=1) + "\n"
    )
    lines = [
        *_intro(instance),
        *_table(rows),
        *_solver_status(rows),
        *_per_round(rows),
        *_chosen(chosen, by),
    ]
    (dest / "sweep.md").write_text("\n".join(lines))
    return chosen


def _write_csv(rows: Sequence[KappaRow], path: Path) -> None:
    """``sweep.csv``: one row per κ with the scalar columns :data:`_COLUMNS` of :class:`KappaRow`."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(_COLUMNS)
        for r in rows:
            d = asdict(r)
            w.writerow([d[c] for c in _COLUMNS])


def _intro(instance: str) -> list[str]:
    """sweep.md's title, the instance and what each column of the table measures (Eqs. 13 and 30,
    the bounded optimum of Eqs. 31-32, Algorithm 3 with Theorem 7 under B_t = 700 → 300)."""
    return [
        "# FedPCS accuracy scale κ: sweep",
        "",
        f"Instance: {instance}.",
        "",
        "R_t over t = 1..T from the true-cost server solve (R_0 := R_1); welfare = Σ_t SW_t (Eq. 30) at the "
        "equilibrium; PoA against the social optimum with ρ ∈ [ρ_L, ρ_H] (inf: welfare ≤ 0); τ(t) from "
        "Algorithm 3 (Theorem 7 on the Lemma-2 coefficients averaged at the true-cost equilibrium, "
        "ρ_t* ≤ ρ_H) under B_t = 700 → 300; J = Σ_{t≥1} U_t (Eq. 13), also at the rewards of the paper's "
        "Lemma-2 outer loop (same true cost).",
        "",
    ]


def _table(rows: Sequence[KappaRow]) -> list[str]:
    """The sweep's table, one row per κ: rewards, mean field, welfare and PoA, τ(t), the true cost
    J (and J at the Lemma-2 rewards), and whether criteria (a)-(c) hold."""
    head = (
        "| κ/(Σ\\|D\\|)² | min R_t | mean R_t | φ(0) | φ(T) | welfare | PoA | τ(0) | τ(T) | τ max | τ non-incr. "
        "| J true cost | J at Lemma-2 R | (a)-(c) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1 - head.count("\\|"))]
    for r in rows:
        cells = (
            r.kappa,
            r.R_min,
            r.R_mean,
            r.phi_0,
            r.phi_T,
            r.welfare,
            r.poa,
            r.tau_first,
            r.tau_last,
            r.tau_max,
            r.tau_nonincreasing,
            r.cost,
            r.cost_lemma2,
            r.live,
        )
        lines.append("| " + " | ".join(_fmt(x) for x in cells) + " |")
    return lines


def _solver_status(rows: Sequence[KappaRow]) -> list[str]:
    """One line per κ on how far to trust its row: the true-cost solve's convergence and largest
    one-round gain, the Lemma-2 loop's convergence and equilibrium, and the solve's seconds."""
    lines = [
        "",
        "Solver status per κ (true cost: converged = a full pass of one-round checks found no "
        "decrease above 1e-7 relative and the mean field converged):",
        "",
    ]
    for r in rows:
        lines.append(
            f"* κ = {_fmt(r.kappa)}: converged {_fmt(r.converged)}, largest one-round gain "
            f"{r.one_round_gain:.2g}, Lemma-2 loop converged {_fmt(r.lemma2_converged)} (its rewards "
            f"{'give' if r.lemma2_equilibrium else 'do not give'} a pure-strategy equilibrium), "
            f"{r.seconds:.0f} s"
        )
    return lines


def _per_round(rows: Sequence[KappaRow]) -> list[str]:
    """R_t, τ(t) and φ(t) for t = 0..T, one bullet per κ: the series the table's columns summarise."""
    lines = ["", "Per round t = 0..T: R_t, τ(t) and φ(t):", ""]
    for r in rows:
        lines += [
            f"* κ = {_fmt(r.kappa)}:",
            "  R = " + " ".join(f"{x:.3g}" for x in r.R),
            "  τ = " + " ".join(f"{x:.2f}" for x in r.tau),
            "  φ = " + " ".join(f"{x:.2f}" for x in r.phi),
        ]
    return lines


def _chosen(chosen: float | None, by: str) -> list[str]:
    """The page's conclusion: the chosen reproduction ``acc_scale`` and the criteria ``by`` it met
    (:func:`choose_default`), or that no κ of the grid makes the game live."""
    if chosen is None:
        return [
            "",
            "**No κ of the grid makes the game live** ((a) R_t > 0 in every round and (c) welfare > 0); "
            "see the table for which criterion fails.",
            "",
        ]
    return [
        "",
        f"**Chosen reproduction default: acc_scale = {_fmt(chosen)}**, the smallest κ meeting {by} "
        "((a) R_t > 0 in every round, (b) τ(t) < 1 and non-increasing, (c) welfare > 0).",
        "",
    ]


_SERIES = ("R", "tau", "phi")


def save_row(row: KappaRow, cell: Path, config: dict[str, object], versions: dict[str, str]) -> None:
    """One κ as a run folder: ``config.yaml`` (the instance), ``metrics.csv`` (R_t, τ(t), φ(t) per
    round, exact decimal round trips) and ``summary.json`` (the scalars and the code version;
    written last, so a folder with it is finished)."""
    from fedgame.pipeline.store import atomic_write_text

    cell.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cell / "config.yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    series = [getattr(row, k) for k in _SERIES]
    lines = ["round," + ",".join(_SERIES)] + [f"{t}," + ",".join(repr(float(s[t])) for s in series) for t in range(len(row.R))]
    atomic_write_text(cell / "metrics.csv", "\n".join(lines) + "\n")
    scalars = {k: v for k, v in asdict(row).items() if k not in _SERIES}
    atomic_write_text(cell / "summary.json", json.dumps({**scalars, "versions": versions}, indent=1) + "\n")


def load_rows(root: Path) -> tuple[list[KappaRow], str]:
    """The finished κ cells under ``root`` (ascending κ) and their instance's description."""
    from fedgame.pipeline.results import finished_runs

    rows, instances = [], set()
    for run in finished_runs(root):
        fields: dict[str, object] = {k: v for k, v in run.summary.items() if k != "versions"}
        fields.update({k: tuple(float(r[k]) for r in run.metrics()) for k in _SERIES})
        rows.append(KappaRow(**fields))  # type: ignore[arg-type]  # the fields save_row wrote
        instances.add(str(run.cfg["instance"]))
    if not rows:
        raise ValueError(f"runs: no finished κ cell (summary.json) under {root}")
    if len(instances) > 1:
        raise ValueError(f"runs: κ cells of different instances under {root}: {sorted(instances)}")
    return sorted(rows, key=lambda r: r.kappa), instances.pop()


def write_sweep_runs(root: Path, dest: Path) -> float | None:
    """:func:`write_sweep` from the κ cells under ``root`` (:func:`load_rows`), with the line
    naming the code version(s) they were solved by."""
    from fedgame.pipeline.results import code_note, finished_runs

    rows, instance = load_rows(root)
    chosen = write_sweep(rows, dest, instance=instance)
    with (dest / "sweep.md").open("a") as f:
        f.write("\n" + code_note(run.dir for run in finished_runs(root)) + "\n")
    return chosen


def run_sweep(out: Path, kappas: Sequence[float] = KAPPA_GRID, *, seed: int = 0) -> float | None:
    """Solve every κ of ``kappas`` not yet under ``out/runs`` (resumable: a finished cell is
    skipped), then write the sweep from every cell there and its provenance; returns the chosen
    ``acc_scale`` (``scripts/fedpcs_kappa_sweep.py`` is the command)."""
    from fedgame.pipeline.results import record_report
    from fedgame.pipeline.runner import versions

    instance = (
        f"N = 100, K = 20, T = 29, ρ⁰ ~ U[0.01, 12], ϕ ~ U(0, 1) clipped to [1e-3, 1 − 1e-3], γ = 0.5, "
        f"seed {seed} (the types of recipes/fedpcs/fmnist.yaml), privacy-aware inclusion"
    )
    for kappa in sorted(kappas):
        cell = out / "runs" / f"kappa={_fmt(float(kappa))}" / f"seed_{seed}"
        if (cell / "summary.json").exists():
            log.info("kappa %g: finished, skipped (%s)", kappa, cell)
            continue
        (row,) = kappa_sweep([kappa], seed=seed)
        save_row(
            row,
            cell,
            {
                "instance": instance,
                "kappa": float(kappa),
                "seed": seed,
                "n_clients": 100,
                "clients_per_round": 20,
                "rounds": 30,
                "gamma": 0.5,
                "budget": [700.0, 300.0],
                "n_starts": 8,
            },
            versions(),
        )
    chosen = write_sweep_runs(out / "runs", out)
    record_report(out, "kappa-sweep", [out / "runs"], "game")
    log.info("kappa sweep: chosen acc_scale %s → %s", chosen, out / "sweep.md")
    return chosen
