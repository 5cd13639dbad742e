"""Every user mistake is one line: ``error: ...`` on stderr, exit status 2, never a traceback.

Each command is driven with a malformed input of each kind the fail-closed probe found ending in
a traceback or accepted silently; then a seeded fuzzer mutates valid recipes and ``solve``
inputs (types, ranges, missing and extra keys, non-finite numbers)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.pipeline.config import RecipeError, RunConfig, load_recipe

runner = CliRunner()
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 0,
    "data": {"dataset": "fashion_mnist", "max_train": 600, "max_test": 100, "partition": {"kind": "iid", "n_clients": 4}},
    "model": {"name": "logreg"},
    "train": {"rounds": 1, "clients_per_round": 2, "workers": 1, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
    "selection": {"kind": "uniform"},
    "privacy": {"kind": "dpsgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0},
    "accountant": {"kind": "rdp", "delta": 1e-5},
}
MISMATCHED_PLUGIN = '''
from typing import Literal
import numpy as np
from fedgame.core.plugins import PluginConfig
from fedgame.selection import SELECTIONS, SelectionStrategy

@SELECTIONS.register("powered_{tag}")
class Powered(SelectionStrategy):
    """Sizes to a power."""
    class Config(PluginConfig):
        kind: Literal["powered_{tag}"] = "powered_{tag}"
        exponent: float = 1.0
    def __init__(self, power: float = 1.0) -> None:
        self.power = power
    def probabilities(self, state):
        return np.full(4, 0.25)
'''


def one_line_error(r: Any) -> str:
    """The error line of a refused command, after checking it is the only line and exit 2."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output
    return str(lines[0])


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    f = {
        "good": tmp_path / "good.yaml",
        "binary": tmp_path / "binary.yaml",
        "empty": tmp_path / "empty.yaml",
        "dup": tmp_path / "dup.yaml",
        "nodata": tmp_path / "nodata.yaml",
        "afile": tmp_path / "afile",
        "syntax": tmp_path / "syntax_plugin.py",
        "mismatch": tmp_path / "mismatch_plugin.py",
        "nan": tmp_path / "nan.json",
        "runs": tmp_path / "runs",
    }
    f["good"].write_text(yaml.safe_dump(TINY))
    f["binary"].write_bytes(b"\x00\x01\xff\xfe")
    f["empty"].write_text("")
    f["dup"].write_text(yaml.safe_dump(TINY) + "seed: 3\n")
    f["nodata"].write_text(yaml.safe_dump({k: v for k, v in TINY.items() if k != "data"}))
    f["afile"].write_text("x")
    f["syntax"].write_text("def broken(:\n    pass\n")
    f["mismatch"].write_text(MISMATCHED_PLUGIN.replace("{tag}", str(abs(hash(tmp_path)) % 10**8)))
    f["nan"].write_text('{"eps": [NaN, 1.0]}')
    damaged = f["runs"] / "cell" / "seed_0"
    damaged.mkdir(parents=True)
    (damaged / "config.yaml").write_text(yaml.safe_dump(TINY))
    (damaged / "summary.json").write_text('{"final_accuracy": 0.')  # truncated
    (damaged / "metrics.csv").write_text("round,test_acc\n0\n")
    return f


def test_recipe_mistakes_are_one_line(files: dict[str, Path]) -> None:
    good = str(files["good"])
    cases: list[tuple[list[str], str]] = [
        (["validate", str(files["binary"])], "is not a text (UTF-8) file"),
        (["validate", str(files["empty"])], "is empty; a recipe names at least data.dataset and model.name"),
        (["validate", str(files["dup"])], "key 'seed' appears twice in one mapping (line"),
        (["validate", str(files["nodata"])], "data.dataset: missing; a recipe must name it"),
        (["validate", str(files["afile"].parent)], "is a folder; give a recipe file"),
        (["validate", good, "--set", "train.rounds=true"], "rounds: must be a number or text, not a boolean, got True"),
        (["validate", good, "--set", "train.rounds=[1,"], "the value is not valid YAML"),
        (["validate", good, "--set", "name=../../x"], "name: must be one folder name"),
        (["validate", good, "--set", "privacy.noise_multiplier=0"], "privacy.noise_multiplier: Input should be greater than 0, got 0"),
        (["run", good, "--resume", "--force"], "--resume and --force contradict each other"),
        (["run", good, "--out", str(files["afile"])], f"--out: {files['afile']} is not a folder"),
        (["run", good, "--out", str(files["afile"] / "sub")], "is not a folder"),
        (["run", good, "--bogus"], "No such option"),
        (["--plugin", str(files["syntax"]), "list"], "SyntaxError"),
        (["--plugin", str(files["mismatch"]), "list"], "Config field exponent not taken by __init__"),
        (["compare", good, "--out", str(files["afile"])], "--out: "),
        (["init", str(files["afile"])], "DEST: "),
        (["list", "bogus"], "unknown group 'bogus'"),
        (["solve", "phs", "--input", str(files["nan"])], "NaN is not a number JSON allows"),
        (["solve", "phs", "--input", str(files["binary"])], "is not a text (UTF-8) file"),
        (["flower", "app", str(files["empty"]), str(files["runs"] / "app")], "is empty"),
    ]
    for args, expected in cases:
        line = one_line_error(runner.invoke(app, args))
        assert expected in line, (args, line)


def test_damaged_results_files_are_one_line_naming_the_file(files: dict[str, Path]) -> None:
    runs, summary = files["runs"], files["runs"] / "cell" / "seed_0" / "summary.json"
    for args in (["report", str(runs)], ["export", str(runs), str(runs.parent / "exported")], ["claim", str(runs), str(runs)]):
        line = one_line_error(runner.invoke(app, args))
        assert f"{summary}: not valid JSON" in line, (args, line)
    line = one_line_error(runner.invoke(app, ["export", str(runs), str(files["afile"] / "x")]))
    assert "DEST: " in line


@needs_fmnist
def test_a_damaged_checkpoint_on_resume_is_one_line(files: dict[str, Path]) -> None:
    out = files["runs"] / "resumed"
    out.mkdir()
    r = runner.invoke(app, ["run", str(files["good"]), "--out", str(out)])
    assert r.exit_code == 0, r.output
    (out / "summary.json").unlink()
    (out / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    line = one_line_error(runner.invoke(app, ["run", str(files["good"]), "--out", str(out), "--resume"]))
    assert "checkpoint.pt: not a checkpoint fedgame can read" in line


# -- fuzzing ----------------------------------------------------------------------------------
WILD: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**70,
    -1e308,
    1e-320,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "x" * 300,
    "../..",
    [],
    [1, 2],
    {},
    {"kind": "nope"},
    0.5,
    "auto",
]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    return out


def _mutate(base: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    raw = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(raw))
        parent = raw
        for k in path[:-1]:
            parent = parent[k] if isinstance(parent, dict) and isinstance(parent.get(k), dict) else None
            if parent is None:
                break
        if not isinstance(parent, dict):
            continue
        op = rng.random()
        if op < 0.2:
            parent.pop(path[-1], None)
        elif op < 0.3:
            parent[f"extra_{rng.randint(0, 9)}"] = rng.choice(WILD)
        else:
            parent[path[-1]] = rng.choice(WILD)
    return raw


def test_fuzzed_recipes_parse_or_fail_in_one_recipe_error(tmp_path: Path) -> None:
    """400 mutated recipes: each parses, or is refused with a RecipeError (which the CLI prints
    as its one line); no other exception escapes."""
    rng = random.Random(20261128)
    outcomes = {"ok": 0, "refused": 0}
    path = tmp_path / "fuzz.yaml"
    for _ in range(400):
        path.write_text(yaml.safe_dump(_mutate(TINY, rng)))
        try:
            assert isinstance(load_recipe(path), RunConfig)
            outcomes["ok"] += 1
        except RecipeError as e:
            assert str(e).strip(), "an empty error"
            outcomes["refused"] += 1
    assert outcomes["ok"] > 10 and outcomes["refused"] > 200, outcomes


PHS = {
    "eps": [0.2, 0.5, 1, 5, 10],
    "delta": 1e-5,
    "sizes": [500, 600, 700, 550, 650],
    "batch_size": 64,
    "D": 26010,
    "eta": 1,
    "T_g": 100,
    "T_l": 5,
    "K": 2,
    "C": 1,
}


def test_fuzzed_solve_inputs_succeed_with_json_or_fail_in_one_line(tmp_path: Path) -> None:
    """60 mutated PHS problems through ``fedgame solve``: exit 0 with JSON a strict parser reads
    (no NaN or infinity), or exit 2 with one error line."""
    rng = random.Random(7)
    seen = {0: 0, 2: 0}
    f = tmp_path / "p.json"
    for _ in range(60):
        f.write_text(json.dumps(_mutate(PHS, rng)))
        r = runner.invoke(app, ["solve", "phs", "--input", str(f)])
        if r.exit_code == 0:
            json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-finite {c} in the output"))
        else:
            one_line_error(r)
        seen[r.exit_code] += 1
    assert seen[2] > 20, seen
