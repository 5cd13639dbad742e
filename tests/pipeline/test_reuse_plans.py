"""``fedgame compare --plans``: cells play the FedPCS plan finished runs played instead of solving
their game again (a grid resumed on another host stays paired with its committed cells)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.incentives.fedpcs.plugin import FedPCSPlan, fedpcs_game, plan_path, reuse_plans, same_plan, solve_plan
from fedgame.pipeline.config import load_recipe
from fedgame.pipeline.results import played_plans

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "fedpcs"
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
# a game of 6 clients over 3 rounds (solved in seconds) and a logistic model on 600 images
SMALL = [
    "data.max_train=600",
    "data.max_test=200",
    "data.partition.n_clients=6",
    "train.clients_per_round=2",
    "train.rounds=3",
    "train.eval_every=1",
    "train.workers=1",
    "train.local.epochs=1",
    "model.name=logreg",
]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))


def _another_optimum(plan: FedPCSPlan) -> FedPCSPlan:
    """The plan as another host's solve might have ended: other rewards and budgets."""
    return dataclasses.replace(plan, reward=plan.reward * 1.5, rho=np.clip(plan.rho * 0.9, 0.01, None))


def _played(folder: Path, recipe: str, plan: FedPCSPlan, overrides: list[str]) -> Path:
    """A finished run's files as `fedgame export` keeps them: config.yaml, summary.json, game.npz."""
    cfg = load_recipe(RECIPES / recipe, [*SMALL, *overrides])
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(cfg.model_dump_json())  # JSON is YAML
    (folder / "summary.json").write_text('{"name": "%s", "seed": %d, "final_accuracy": 0.5}' % (cfg.name, cfg.seed))
    plan.save(folder / "game.npz")
    return folder


def test_the_played_plan_replaces_a_different_cached_one(tmp_path: Path) -> None:
    cfg = load_recipe(RECIPES / "ablation_uniform.yaml", SMALL)
    game = fedpcs_game(cfg)
    assert game is not None
    here = solve_plan(game)  # this host's solve, now in the cache
    played = _another_optimum(here)
    _played(tmp_path / "runs" / "fedpcs" / "seed_0", "fmnist.yaml", played, [])
    lines = reuse_plans(played_plans(tmp_path / "runs"), [cfg])
    assert len(lines) == 1 and "replaced in the cache" in lines[0]
    assert same_plan(solve_plan(game), played) and not same_plan(solve_plan(game), here)
    assert reuse_plans(played_plans(tmp_path / "runs"), [cfg]) == []  # already there: nothing to do


def test_a_baselines_fixed_budgets_are_not_a_plan(tmp_path: Path) -> None:
    """Random with baseline_rho initial keeps a game.npz of fixed budgets under the same game's
    key as Random with its clients in the game: it must not be taken for that game's solution."""
    base = load_recipe(RECIPES / "random.yaml", SMALL)
    game = fedpcs_game(base)
    assert game is not None
    _played(tmp_path / "runs" / "random" / "seed_0", "random.yaml", solve_plan(game, cache=False), [])
    wanted = load_recipe(RECIPES / "random.yaml", [*SMALL, "incentive.baseline_rho=game"])
    assert reuse_plans(played_plans(tmp_path / "runs"), [wanted]) == []
    assert not plan_path(game).exists()


def test_runs_that_played_different_plans_of_one_game_are_refused(tmp_path: Path) -> None:
    cfg = load_recipe(RECIPES / "fmnist.yaml", SMALL)
    game = fedpcs_game(cfg)
    assert game is not None
    plan = solve_plan(game, cache=False)
    _played(tmp_path / "runs" / "iid" / "seed_0", "fmnist.yaml", plan, [])
    _played(tmp_path / "runs" / "dirichlet" / "seed_0", "fmnist.yaml", _another_optimum(plan), ["data.partition.kind=dirichlet"])
    with pytest.raises(ValueError, match=r"--plans: .*dirichlet.* and .*iid.* played different plans of one game \(seed 0"):
        reuse_plans(played_plans(tmp_path / "runs"), [cfg])
    # a game no wanted recipe plays is not read at all
    other = load_recipe(RECIPES / "fmnist.yaml", [*SMALL, "seed=1"])
    assert reuse_plans(played_plans(tmp_path / "runs"), [other]) == []


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_compare_plays_the_committed_plan(tmp_path: Path) -> None:
    """Through the command: a FedPCS run (its game solved here), its plan changed as if another
    host had solved it, the cache emptied; the ablation's cell then runs with --plans and plays the
    committed plan (its game.npz holds it), not a new solve."""
    sets = [a for s in SMALL for a in ("--set", s)]
    first = runner.invoke(
        app, ["compare", str(RECIPES / "fmnist.yaml"), "--seeds", "1", "--out", str(tmp_path / "a"), "--no-report", *sets]
    )
    assert first.exit_code == 0, first.output
    run = tmp_path / "a" / "fedpcs" / "seed_0"
    played = _another_optimum(FedPCSPlan.load(run / "game.npz"))
    played.save(run / "game.npz")
    for p in (tmp_path / "cache" / "games").glob("*.npz"):
        p.unlink()
    out = tmp_path / "b"
    args = ["compare", str(RECIPES / "ablation_uniform.yaml"), "--seeds", "1", "--out", str(out), "--no-report", *sets]
    r = runner.invoke(app, [*args, "--plans", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "plan of game seed 0 taken from" in r.output
    assert same_plan(FedPCSPlan.load(out / "ablation_uniform" / "seed_0" / "game.npz"), played)
    # finished cells need no plan: runs that disagree about their game are not read for them
    _played(tmp_path / "odd" / "iid" / "seed_0", "fmnist.yaml", played, [])
    _played(tmp_path / "odd" / "dirichlet" / "seed_0", "fmnist.yaml", _another_optimum(played), ["data.partition.kind=dirichlet"])
    again = runner.invoke(app, [*args, "--plans", str(tmp_path / "odd")])
    assert again.exit_code == 0 and "(finished)" in again.output, again.output
    bad = runner.invoke(app, [*args, "--plans", str(tmp_path / "missing")])
    assert bad.exit_code == 2 and "--plans: not a folder" in bad.output
