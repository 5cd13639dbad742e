"""``fedgame solve`` refuses, before any work, a problem whose memory estimate exceeds what the
machine has (``$FEDGAME_MEMORY_BYTES`` stands for a small machine here), and the estimate is an
upper bound of what a solve of that size takes (tracemalloc's peak of the same solve)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.core.limits import BASE, solve_estimate
from fedgame.solve import solve_fedpcs, solve_phs

rng = np.random.default_rng(0)
N = 3000
FEDPCS = {
    "N": N,
    "K": N // 5,
    "T": 10,
    "R": 2.0,
    "mean_field": {"tol": 1e-6},
    "clients": [{"rho0": float(a), "varphi": float(b)} for a, b in zip(rng.uniform(1, 5, N), rng.uniform(0.1, 0.5, N))],
}
PHS = {
    "eps": rng.uniform(0.2, 10, N).tolist(),
    "delta": 1e-5,
    "sizes": rng.integers(300, 900, N).tolist(),
    "batch_size": 64,
    "D": 26010,
    "eta": 1,
    "T_g": 100,
    "T_l": 5,
    "K": 2,
    "C": 1,
}


@pytest.mark.parametrize(("game", "problem", "field"), [("fedpcs", FEDPCS, "clients"), ("phs", PHS, "eps")])
def test_too_big_for_this_machine_is_refused_in_one_line(
    game: str, problem: dict[str, object], field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(problem))
    est = solve_estimate(game, problem)
    assert est is not None and est[1] == field
    monkeypatch.setenv("FEDGAME_MEMORY_BYTES", str(est[0] - 1))
    r = CliRunner().invoke(app, ["solve", game, "--input", str(f)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"error: {field}: solve {game} with 3,000 clients" in r.stderr and "more than the" in r.stderr
    monkeypatch.setenv("FEDGAME_MEMORY_BYTES", str(est[0]))
    r = CliRunner().invoke(app, ["solve", game, "--input", str(f)])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("game", "problem", "solve"), [("fedpcs", FEDPCS, solve_fedpcs), ("phs", PHS, solve_phs)])
def test_the_estimate_bounds_the_solves_own_peak(game: str, problem: dict[str, object], solve: object) -> None:
    est = solve_estimate(game, problem)
    assert est is not None
    solve(problem)  # type: ignore[operator]  # warm: imports, compiled kernels
    tracemalloc.start()
    try:
        json.dumps(solve(problem))  # type: ignore[operator]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= est[0] - BASE, (peak, est[0] - BASE)


def test_a_recipe_whose_game_does_not_fit_is_refused_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same limit at the recipe: FedPCS's game over 20,000 clients × 30 rounds, before any data is read."""
    from fedgame.core.limits import recipe_estimate
    from fedgame.pipeline.config import RecipeError, load_recipe

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "fedpcs" / "fmnist.yaml"
    est = recipe_estimate(20_000, 30, fedpcs_game=True, phs=False)
    assert est is not None
    monkeypatch.setenv("FEDGAME_MEMORY_BYTES", str(est[0] - 1))
    with pytest.raises(
        RecipeError, match=r"^data.partition.n_clients: the recipe's FedPCS game with 20,000 clients over 30 rounds needs about"
    ):
        load_recipe(recipe, ["data.partition.n_clients=20000"])
    monkeypatch.setenv("FEDGAME_MEMORY_BYTES", str(est[0]))
    assert load_recipe(recipe, ["data.partition.n_clients=20000"]).data.partition.n_clients == 20_000


def test_a_jdp_auction_over_the_time_limit_is_refused_after_its_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """M2's payments cost one step per (candidate, winner) pair: an instance whose estimate is
    over --time-limit is refused in one line naming the field and the counts, before the
    payments run; within the limit it is solved. The rate is lowered so that a small instance
    is 'long' (the estimate's arithmetic, not this host's speed, is what is tested)."""
    import fedgame.core.limits as limits
    from fedgame.solve import solve_jdp

    rng = np.random.default_rng(0)
    n = 3000
    problem = {"costs": rng.uniform(1, 10, n).tolist(), "data": rng.uniform(100, 1000, n).tolist(), "budget": 3000.0, "mechanism": "M2"}
    path = tmp_path / "jdp.json"
    path.write_text(json.dumps(problem))
    winners = len(solve_jdp(problem)["M2"]["winners"])
    monkeypatch.setattr(limits, "M2_STEPS_PER_SECOND", 1000.0)
    need = n * winners / 1000.0  # seconds at the lowered rate
    r = CliRunner().invoke(app, ["solve", "jdp", "--input", str(path), "--time-limit", str(need / 2)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"costs: M2's payments for 3,000 candidates and {winners:,} winners would take about {need / 60:,.0f} min" in r.stderr
    r = CliRunner().invoke(app, ["solve", "jdp", "--input", str(path), "--time-limit", str(need * 2)])
    assert r.exit_code == 0 and len(json.loads(r.stdout)["M2"]["winners"]) == winners


def test_a_solve_shows_a_live_line_on_a_terminal_and_nothing_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """While ``fedgame solve`` runs, a terminal's stderr gets a spinner line with the elapsed time
    (a FedPCS game at the papers' size takes minutes); a pipe gets nothing, so a one-line error
    stays one line and stdout stays the JSON alone."""
    import io

    from rich.console import Console

    import fedgame.cli as cli

    problem = json.dumps({"N": 10, "K": 3, "T": 20, "clients": [{"rho0": 2, "varphi": 0.3}], "R": 2, "phi": 5})
    tty = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=tty, force_terminal=True, width=100))
    with cli._solving("solve fedpcs (4 clients)"):
        pass
    assert "solve fedpcs (4 clients): solving" in tty.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=pipe, width=100))
    with cli._solving("solve fedpcs (4 clients)"):
        pass
    assert pipe.getvalue() == ""
    r = CliRunner().invoke(cli.app, ["solve", "fedpcs", "--input", "-"], input=problem)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)
