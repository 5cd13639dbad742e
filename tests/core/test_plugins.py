"""User plug-ins (docs/plugins.md): the one-file example runs from a recipe through ``--plugin``
and through the ``fedgame.plugins`` entry-point group; a plug-in that could not be built is
refused at registration; a recipe naming an unloaded plug-in is one line that says how to load it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from fedgame.core.plugins import PluginConfig, PluginError, load_plugins
from fedgame.privacy.plans import PRIVACY_PLANS, ClientPrivacy
from fedgame.selection import SELECTIONS, SelectionStrategy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "loss_sampling.py"
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
SMOKE = [
    "--set",
    "data.max_train=1000",
    "--set",
    "data.max_test=200",
    "--set",
    "data.partition.n_clients=5",
    "--set",
    "data.partition.kind=iid",
    "--set",
    "model.name=logreg",
    "--set",
    "train.rounds=2",
    "--set",
    "train.clients_per_round=2",
    "--set",
    "train.local.epochs=1",
]


def _fedgame(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("FEDGAME_PLUGINS", None) if env is None or "FEDGAME_PLUGINS" not in env else None
    return subprocess.run([sys.executable, "-m", "fedgame", *args], capture_output=True, text=True, cwd=ROOT, env=full, timeout=600)


@pytest.fixture
def clean_registries() -> Iterator[None]:
    from fedgame.incentives import INCENTIVES

    saved = {r: (dict(r._items), dict(r._docs)) for r in (SELECTIONS, PRIVACY_PLANS, INCENTIVES)}
    yield
    for r, (items, docs) in saved.items():
        r._items, r._docs = items, docs


def test_incomplete_privacy_plugin_is_refused_at_registration(clean_registries: None) -> None:
    with pytest.raises(TypeError, match=r"privacy plan 'half_done': HalfDone does not implement events"):

        @PRIVACY_PLANS.register("half_done")
        class HalfDone(ClientPrivacy):  # no events(): the accountant would see nothing
            pass

    assert "half_done" not in PRIVACY_PLANS


def test_plugin_config_must_name_its_kind(clean_registries: None) -> None:
    with pytest.raises(TypeError, match=r"Config needs a field kind: Literal\['mine'\]"):

        @SELECTIONS.register("mine")
        class Mine(SelectionStrategy):
            class Config(PluginConfig):
                kind: Literal["other"] = "other"

            def probabilities(self, state):  # type: ignore[no-untyped-def]
                raise NotImplementedError


def _page_blocks(marker: str) -> list[str]:
    """The fenced Python blocks of docs/plugins.md that follow ``<!-- marker... -->``."""
    page = (ROOT / "docs" / "plugins.md").read_text()
    return [part.split("```python\n", 1)[1].split("```", 1)[0] for part in page.split(f"<!-- {marker}")[1:]]


def test_the_pages_example_is_the_file_the_cli_runs() -> None:
    """docs/plugins.md shows the whole plug-in file, imports included: pasted into a file it is
    docs/examples/loss_sampling.py, byte for byte."""
    (block,) = _page_blocks("file: docs/examples/loss_sampling.py")
    assert block == EXAMPLE.read_text()


def test_the_pages_checking_script_runs_as_given(clean_registries: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's checking script, executed as a file from the repository's root: it loads the
    example, runs the selection contract and check_plugin, and raises nothing."""
    (script,) = _page_blocks("run: from the repository root")
    monkeypatch.chdir(ROOT)
    assert "check_plugin(LossSoftmax)" in script
    exec(compile(script, "docs/plugins.md", "exec"), {"__name__": "__main__"})


def test_a_plugin_file_may_be_imported_twice(clean_registries: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--plugin file.py`` and a later ``import`` of the same file under its module name run its
    decorators twice: the second registration of the same class from the same file replaces the
    first instead of failing "registered twice"; another class under the name is still refused."""
    import importlib

    (tmp_path / "my_loss_plugin.py").write_text(EXAMPLE.read_text())
    load_plugins([str(tmp_path / "my_loss_plugin.py")])
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("my_loss_plugin")
    assert SELECTIONS.get("loss_softmax") is mod.LossSoftmax
    with pytest.raises(ValueError, match="selection strategy 'loss_softmax' is registered twice"):

        @SELECTIONS.register("loss_softmax")
        class LossSoftmax(SelectionStrategy):  # same name, another file: a real clash
            def probabilities(self, state):  # type: ignore[no-untyped-def]
                raise NotImplementedError


def test_missing_plugin_module_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="no module named 'no_such_plugin_xyz'"):
        load_plugins(["no_such_plugin_xyz"])
    r = _fedgame("--plugin", str(tmp_path / "absent.py"), "list")
    assert r.returncode == 2 and "file not found" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_example_runs_from_its_recipe_through_plugin(tmp_path: Path) -> None:
    recipe = ROOT / "docs" / "examples" / "loss_sampling.yaml"
    r = _fedgame("validate", str(recipe))
    assert r.returncode == 2 and "unknown kind 'loss_softmax'" in r.stderr and "--plugin" in r.stderr
    out = tmp_path / "run"
    r = _fedgame("--plugin", str(EXAMPLE), "run", str(recipe), "--out", str(out), *SMOKE)
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["selection"] == {"kind": "loss_softmax", "temperature": 0.5, "mix": 0.2}
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [int(r["round"]) for r in rows] == [0, 1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and 0 < summary["final_accuracy"] <= 1


def test_entry_point_group_loads_a_distributions_plugin(tmp_path: Path) -> None:
    """A distribution declaring ``[project.entry-points."fedgame.plugins"]`` is loaded when a recipe is parsed."""
    site = tmp_path / "site"
    dist = site / "myplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedgame.plugins]\nloss = myplug_loss\n")
    (site / "myplug_loss.py").write_text(EXAMPLE.read_text())
    recipe = tmp_path / "r.yaml"
    base = {"data": {"dataset": "fashion_mnist"}, "model": {"name": "mcmahan_cnn"}}
    recipe.write_text(yaml.safe_dump({**base, "selection": {"kind": "loss_softmax", "mix": 0.5}}))
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    r = _fedgame("validate", str(recipe), env={"PYTHONPATH": path})
    assert r.returncode == 0, r.stderr
    assert "selection loss_softmax" in r.stdout
    recipe.write_text(yaml.safe_dump({**base, "selection": {"kind": "loss_softmax", "mix": 2}}))
    r = _fedgame("validate", str(recipe), env={"PYTHONPATH": path})
    assert r.returncode == 2 and "selection.mix: Input should be less than or equal to 1" in r.stderr


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_privacy_plan_and_incentive_plugins_run_through_the_pipeline(tmp_path: Path, clean_registries: None) -> None:
    """A user's privacy plan (Gaussian noise on each upload, accounted) and incentive (a flat
    payment per selected client), each one class with its Config, run from a recipe: the noise
    is accounted (ε > 0, formal) and the payments land in metrics.csv."""
    import numpy as np
    from pydantic import Field

    from fedgame.incentives import INCENTIVES, Incentive
    from fedgame.pipeline.config import parse_recipe
    from fedgame.pipeline.runner import run_one
    from fedgame.privacy.events import PrivacyEvent
    from fedgame.privacy.mechanisms import GaussianMechanism
    from fedgame.testing import check_privacy_plan

    @PRIVACY_PLANS.register("my_gaussian_upload")
    class MyGaussianUpload(ClientPrivacy):
        class Config(PluginConfig):
            kind: Literal["my_gaussian_upload"] = "my_gaussian_upload"
            clip: float = Field(1.0, gt=0)
            noise_multiplier: float = Field(1.0, gt=0)

        def __init__(self, clip: float = 1.0, noise_multiplier: float = 1.0) -> None:
            self.clip, self.z = clip, noise_multiplier

        def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism:
            return GaussianMechanism(clip=self.clip, noise_std=self.z * self.clip, sensitivity=self.clip)

        def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
            return [(PrivacyEvent.gaussian(noise_multiplier=self.z), 1)]

    @INCENTIVES.register("flat_pay")
    class FlatPay(Incentive):
        class Config(PluginConfig):
            kind: Literal["flat_pay"] = "flat_pay"
            amount: float = Field(1.0, ge=0)

        def __init__(self, amount: float = 1.0) -> None:
            self.amount = amount

        def settle(self, t: int, selection):  # type: ignore[no-untyped-def]
            return np.full(selection.clients.size, self.amount)

    check_privacy_plan(lambda: MyGaussianUpload(clip=1.0, noise_multiplier=2.0), draws=20_000)
    raw = yaml.safe_load(
        yaml.safe_dump(
            {
                "name": "plugged",
                "data": {"dataset": "fashion_mnist", "max_train": 1000, "max_test": 200, "partition": {"kind": "iid", "n_clients": 5}},
                "model": {"name": "logreg"},
                "train": {"rounds": 2, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 50}},
                "privacy": {"kind": "my_gaussian_upload", "noise_multiplier": 2.0},
                "incentive": {"kind": "flat_pay", "amount": 3.0},
            }
        )
    )
    summary = run_one(parse_recipe(raw), tmp_path / "run")
    assert summary["privacy_accounting"] == "formal" and summary["epsilon_max"] > 0
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [float(r["payments"]) for r in rows] == [3.0 * int(r["n_selected"]) for r in rows]


def test_a_plugin_declares_what_it_needs_from_another_section(
    clean_registries: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A selection plug-in that ``requires`` FedPCS's game is refused without it (one line naming
    the incentive that provides it) and, with it, is handed the game's ρ schedule in ``ctx.plan``."""
    import numpy as np

    from fedgame.core import RoundState
    from fedgame.pipeline.build import build_game, build_selection
    from fedgame.pipeline.config import RecipeError, parse_recipe

    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))

    @SELECTIONS.register("rho_greedy")
    class RhoGreedy(SelectionStrategy):
        class Config(PluginConfig):
            kind: Literal["rho_greedy"] = "rho_greedy"
            requires = frozenset({"fedpcs_game"})

        def __init__(self, rho: np.ndarray) -> None:
            self.rho = np.asarray(rho)

        @classmethod
        def from_config(cls, cfg, ctx):  # type: ignore[no-untyped-def]
            return cls(ctx.plan.rho)

        def probabilities(self, state: RoundState) -> np.ndarray:
            col = self.rho[:, min(state.t, self.rho.shape[1] - 1)]
            return col / col.sum()

    base = {
        "data": {"partition": {"kind": "iid", "n_clients": 6}},
        "train": {"rounds": 3, "clients_per_round": 2},
        "selection": {"kind": "rho_greedy"},
    }
    with pytest.raises(RecipeError, match=r"selection.kind: 'rho_greedy' needs incentive.kind 'fedpcs' \(its rho schedule\)"):
        parse_recipe(base)
    cfg = parse_recipe({**base, "incentive": {"kind": "fedpcs"}, "privacy": {"kind": "zcdp_upload", "rho": "game"}})
    plan = build_game(cfg)
    strat = build_selection(cfg, plan)
    assert isinstance(strat, RhoGreedy)
    np.testing.assert_array_equal(strat.rho, plan.rho)


def test_a_plugin_checks_the_rest_of_the_recipe_itself(clean_registries: None) -> None:
    """A plug-in's ``Config.check_run(run)`` refuses a recipe it cannot run in (here: a rule that
    picks exactly 2 clients), one line through the recipe parser; the built-ins' cross-section
    checks are theirs the same way (e.g. uniform without replacement and k > n)."""
    import numpy as np

    from fedgame.core import RoundState
    from fedgame.pipeline.config import RecipeError, parse_recipe

    @SELECTIONS.register("pairs")
    class Pairs(SelectionStrategy):
        class Config(PluginConfig):
            kind: Literal["pairs"] = "pairs"

            def check_run(self, run: object) -> None:
                k = run.train.clients_per_round  # type: ignore[attr-defined]
                if k != 2:
                    raise ValueError(f"train.clients_per_round: selection 'pairs' picks exactly 2, got {k}")

        def probabilities(self, state: RoundState) -> np.ndarray:
            return np.full(state.n_clients, 1.0 / state.n_clients)

    base = {"data": {"partition": {"kind": "iid", "n_clients": 6}}, "selection": {"kind": "pairs"}}
    assert parse_recipe({**base, "train": {"clients_per_round": 2}}).selection.kind == "pairs"
    with pytest.raises(RecipeError, match=r"train.clients_per_round: selection 'pairs' picks exactly 2, got 3"):
        parse_recipe({**base, "train": {"clients_per_round": 3}})
    with pytest.raises(
        RecipeError, match=r"train.clients_per_round: must be <= data.partition.n_clients \(6\) when sampling without replacement, got 7"
    ):
        parse_recipe(
            {
                "data": {"partition": {"kind": "iid", "n_clients": 6}},
                "train": {"clients_per_round": 7},
                "selection": {"kind": "uniform", "replace": False},
            }
        )


def test_aggregator_and_accountant_plugins_are_named_by_recipes(tmp_path: Path) -> None:
    """``aggregation.kind`` and ``accountant.kind`` accept any registered name: a user's
    aggregator (the coordinate median of the uploads, one function) and a user's accountant
    (the built-in RDP one under another name) run from a recipe; an unregistered name is one
    line naming the field and the registered names."""
    import torch

    from fedgame.core.server_update import ServerUpdate
    from fedgame.pipeline.config import RecipeError, parse_recipe
    from fedgame.pipeline.runner import run_one
    from fedgame.privacy.accountants import ACCOUNTANTS, RDPAccountant
    from fedgame.sim import AGGREGATORS

    saved = dict(AGGREGATORS._items), dict(AGGREGATORS._docs), dict(ACCOUNTANTS._items), dict(ACCOUNTANTS._docs)
    seen: list[int] = []
    try:

        @AGGREGATORS.register("my_median")
        def my_median() -> ServerUpdate:
            """The coordinate median of the uploads."""

            def update(updates, state, ctx):  # type: ignore[no-untyped-def]
                seen.append(len(updates))
                return [torch.stack(list(updates)).median(dim=0).values], state

            return ServerUpdate(lambda params: (), update)

        @ACCOUNTANTS.register("my_rdp")
        class MyRDP(RDPAccountant):
            """The built-in RDP accountant under another name."""

        raw = {
            "name": "plugged",
            "data": {"dataset": "fashion_mnist", "max_train": 1000, "max_test": 200, "partition": {"kind": "iid", "n_clients": 5}},
            "model": {"name": "logreg"},
            "train": {"rounds": 2, "clients_per_round": 3, "local": {"epochs": 1}},
            "selection": {"kind": "uniform", "replace": False},
            "aggregation": {"kind": "my_median"},
            "accountant": {"kind": "my_rdp"},
            "privacy": {"kind": "dpsgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0},
        }
        summary = run_one(parse_recipe(raw), tmp_path / "run")
        assert seen == [3, 3] and summary["accountant"] == "my_rdp" and summary["epsilon_max"] > 0
        with pytest.raises(RecipeError) as err:
            parse_recipe({**raw, "aggregation": {"kind": "my_mediam"}})
        assert str(err.value) == (
            "aggregation.kind: unknown aggregator 'my_mediam'; did you mean 'my_median'? choose from fedavg, importance, mean, my_median"
        )
    finally:
        AGGREGATORS._items, AGGREGATORS._docs = saved[0], saved[1]
        ACCOUNTANTS._items, ACCOUNTANTS._docs = saved[2], saved[3]


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_a_plugin_that_fails_to_build_is_one_line_at_validate(tmp_path: Path) -> None:
    """``validate`` builds the recipe's plug-ins as ``run`` does: a ``from_config`` that fails in
    the plug-in's own code (here reading ``ctx.plan``, None without a planned incentive) is one
    ``error:`` line naming the field, the plug-in and its class, before anything trains."""
    plugin = tmp_path / "broken_build.py"
    plugin.write_text(
        "from typing import Literal\n"
        "import numpy as np\n"
        "from fedgame.core.plugins import PluginConfig\n"
        "from fedgame.selection import SELECTIONS, SelectionStrategy\n\n"
        "@SELECTIONS.register('needs_plan')\n"
        "class NeedsPlan(SelectionStrategy):\n"
        "    class Config(PluginConfig):\n"
        "        kind: Literal['needs_plan'] = 'needs_plan'\n\n"
        "    @classmethod\n"
        "    def from_config(cls, cfg, ctx):\n"
        "        return cls(ctx.plan.rho)\n\n"
        "    def __init__(self, rho):\n"
        "        self.rho = rho\n\n"
        "    def probabilities(self, state):\n"
        "        return np.full(state.n_clients, 1.0 / state.n_clients)\n"
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"data": {"dataset": "fashion_mnist"}, "selection": {"kind": "needs_plan"}}))
    r = _fedgame("--plugin", str(plugin), "validate", str(recipe), *SMOKE)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert (
        "selection.kind: 'needs_plan' (NeedsPlan) could not be built from the recipe (from_config): "
        "AttributeError: 'NoneType' object has no attribute 'rho'"
    ) in err
    from typer.testing import CliRunner

    from fedgame.cli import app

    ok = CliRunner().invoke(app, ["validate", str(ROOT / "src" / "fedgame" / "recipes" / "main" / "fedavg.yaml"), *SMOKE])
    assert ok.exit_code == 0 and "plug-ins ok (built as fedgame run builds them): selection Uniform" in ok.stdout, ok.output


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_validate_builds_planned_and_jdp_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``validate`` builds a planned incentive's plug-ins when its plan is quick or cached (QI-DPFL,
    a FedPCS game already solved), says in one line that an uncached FedPCS game was not solved,
    solves and caches it with ``--solve``, and builds the JDP-FL protocol (an auction that recruits
    too few clients is one error line there, not at ``run``)."""
    from typer.testing import CliRunner

    from fedgame.cli import app

    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    recipes = ROOT / "src" / "fedgame" / "recipes"
    small = [*SMOKE, "--set", "data.partition.n_clients=20", "--set", "train.clients_per_round=4", "--set", "train.rounds=3"]

    def validate(*args: str) -> Any:
        return CliRunner().invoke(app, ["validate", *args])

    fedpcs = str(recipes / "main" / "fedpcs.yaml")
    first = validate(fedpcs, *small)
    assert first.exit_code == 0 and "not built: incentive.kind 'fedpcs' must solve its game first" in " ".join(first.stdout.split())
    assert not list((tmp_path / "cache").glob("games/fedpcs-*.npz"))
    solved = validate(fedpcs, *small, "--solve")
    assert solved.exit_code == 0 and "selection PrivacyAware" in solved.stdout, solved.output
    assert len(list((tmp_path / "cache").glob("games/fedpcs-*.npz"))) == 1
    cached = validate(fedpcs, *small)  # the plan is at hand now: every plug-in is built
    assert cached.exit_code == 0 and "incentive FedPCSIncentive" in " ".join(cached.stdout.split()), cached.output
    qi = validate(str(recipes / "qidpfl" / "fmnist.yaml"), *SMOKE)
    assert qi.exit_code == 0 and "incentive QIDPFLIncentive" in " ".join(qi.stdout.split()), qi.output
    jdp_small = [*SMOKE, "--set", "data.validation=100", "--set", "data.partition.n_clients=10"]
    jdp = validate(str(recipes / "jdp" / "fmnist.yaml"), *jdp_small)
    assert jdp.exit_code == 0 and "JDP-FL auction" in jdp.stdout, jdp.output
    poor = validate(str(recipes / "jdp" / "fmnist.yaml"), *jdp_small, "--set", "jdp.auction.budget=0.001")
    assert poor.exit_code == 2 and "jdp.auction.budget:" in poor.output, poor.output
