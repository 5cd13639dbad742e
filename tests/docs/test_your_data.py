"""docs/your_data.md's three worked examples, smoke-sized, on files the tests write: (a) a CSV
with a hospital column (natural partition) and an MLP, FedPCS against Random; (b) texts in JSON
lines through the one-file dataset plug-in, an embedding-bag model under DP-SGD with PHS's
per-client budgets; (c) a Hugging Face Dataset in memory split by flwr-datasets'
DirichletPartitioner through run_one with QI-DPFL. Then what ``validate`` refuses in one line."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedgame.data import DATASETS, load_partition
from fedgame.testing import check_dataset

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "your_data"
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
SMOKE = ["--set", "train.rounds=3", "--set", "train.eval_every=3"]


def fedgame(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEDGAME_PLUGINS": ""}
    return subprocess.run([sys.executable, "-m", "fedgame", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


def write_hospitals(folder: Path, n: int = 800, seed: int = 0) -> Path:
    """Records of four hospitals of different sizes and case mixes: three numeric features, an outcome."""
    rng = np.random.default_rng(seed)
    site = rng.choice(["north", "south", "east", "west"], size=n, p=[0.4, 0.3, 0.2, 0.1])
    shift = {"north": 0.0, "south": 0.5, "east": -0.5, "west": 1.0}
    with open(folder / "records.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["hospital", "age", "dose", "marker", "outcome"])
        for s in site:
            age, dose, marker = rng.normal(60, 10), rng.uniform(0, 5), rng.normal(shift[s], 1)
            w.writerow([s, f"{age:.2f}", f"{dose:.3f}", f"{marker:.3f}", "yes" if marker + 0.3 * dose + rng.normal(0, 0.5) > 1 else "no"])
    return folder / "records.csv"


def write_texts(folder: Path, seed: int = 0) -> None:
    """Short reviews by six speakers (different amounts), three labels with their own words."""
    rng = np.random.default_rng(seed)
    shared = [f"w{i}" for i in range(150)]
    own = {lab: [f"{lab}{i}" for i in range(15)] for lab in ("good", "bad", "meh")}
    speakers = ["ann", "bob", "cy", "di", "ed", "flo"]
    for name, n in (("train.jsonl", 900), ("test.jsonl", 200)):
        with open(folder / name, "w") as f:
            for _ in range(n):
                lab = str(rng.choice(list(own)))
                words = list(rng.choice(shared, size=int(rng.integers(6, 20)))) + list(rng.choice(own[lab], size=3))
                rng.shuffle(words)
                f.write(
                    json.dumps(
                        {"text": " ".join(words), "label": lab, "speaker": str(rng.choice(speakers, p=[0.3, 0.25, 0.15, 0.12, 0.1, 0.08]))}
                    )
                    + "\n"
                )


def test_a_tabular_csv_natural_partition_fedpcs_against_random(tmp_path: Path) -> None:
    write_hospitals(tmp_path)
    for recipe in ("tabular_fedpcs", "tabular_random"):
        r = fedgame("run", str(EXAMPLES / f"{recipe}.yaml"), "--set", f"data.root={tmp_path}", "--out", str(tmp_path / recipe), *SMOKE)
        assert r.returncode == 0, r.stderr[-2000:]
        cfg = yaml.safe_load((tmp_path / recipe / "config.yaml").read_text())
        assert cfg["data"]["partition"] == {"kind": "natural", "column": "hospital", "n_clients": 4, "min_size": 1}
        parts = load_partition(tmp_path / recipe / "partition.npz")
        assert len(parts) == 4 and sum(p.size for p in parts) == 640  # 800 records, a 20 % test share
        assert sorted(p.size for p in parts) != [160] * 4  # the hospitals' own sizes, not equal shares
        summary = json.loads((tmp_path / recipe / "summary.json").read_text())
        assert 0.0 <= summary["final_accuracy"] <= 1.0
    game = np.load(tmp_path / "tabular_fedpcs" / "game.npz")  # FedPCS solved its game for the 4 hospitals, 3 rounds
    assert game["rho"].shape == (4, 3) and json.loads((tmp_path / "tabular_fedpcs" / "game.json").read_text())["converged"]


def _plugin() -> None:
    from fedgame.core.plugins import load_plugins

    load_plugins([str(EXAMPLES / "jsonl_texts.py")])  # as --plugin does
    assert "jsonl_texts" in DATASETS


def test_b_text_plugin_passes_the_contract_and_trains_under_phs_budgets(tmp_path: Path) -> None:
    write_texts(tmp_path)
    _plugin()
    split = check_dataset("jsonl_texts", {"length": 24}, root=str(tmp_path))
    assert split.kind == "tokens" and split.train.shape == (24,) and split.classes == 3 and sorted(split.groups) == ["speaker"]
    plug = str(EXAMPLES / "jsonl_texts.py")
    r = fedgame("--plugin", plug, "validate", str(EXAMPLES / "text_phs.yaml"), "--set", f"data.root={tmp_path}")
    assert r.returncode == 0 and "over 6 clients" in r.stdout, r.stdout + r.stderr
    r = fedgame(
        "--plugin", plug, "run", str(EXAMPLES / "text_phs.yaml"), "--set", f"data.root={tmp_path}", "--out", str(tmp_path / "run"), *SMOKE
    )
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg["model"] == {"name": "embedding_bag", "options": {"dim": 32}} and cfg["data"]["partition"]["n_clients"] == 6
    with open(tmp_path / "run" / "privacy.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["client"] for r in rows} == {str(i) for i in range(6)} or len(rows) >= 6  # a ledger per speaker


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_c_hugging_face_dataset_split_by_flwr_datasets_runs_qidpfl(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    pytest.importorskip("flwr_datasets")
    from flwr_datasets.partitioner import DirichletPartitioner

    spec = importlib.util.spec_from_file_location("hf_qidpfl_under_test", EXAMPLES / "hf_qidpfl.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    summary = mod.run(tmp_path / "run", smoke=True)
    assert 0.0 <= summary["final_accuracy"] <= 1.0
    cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert cfg["data"]["dataset"] == "memory" and len(cfg["data"]["options"]["fingerprint"]) == 16
    # fedgame's clients are exactly flwr-datasets' partitions (sizes by partition id)
    train, _ = mod.hf_fashion_mnist(2000, 500)
    flwr = DirichletPartitioner(num_partitions=20, partition_by="label", alpha=1.0, seed=0, min_partition_size=10)
    flwr.dataset = train
    ours = load_partition(tmp_path / "run" / "partition.npz")
    assert [p.size for p in ours] == [len(flwr.load_partition(i)) for i in range(20)]
    assert not any(p.suffix in (".npy", ".arrow", ".parquet") for p in (tmp_path / "run").iterdir())  # no data copied


def test_validate_refuses_what_cannot_train_in_one_line(tmp_path: Path) -> None:
    write_hospitals(tmp_path)
    models = tmp_path / "my_models.py"
    models.write_text(
        "from torch import nn\n"
        "from fedgame.models import MODELS\n\n"
        "@MODELS.register('bn_mlp')\n"
        "def bn_mlp(*, in_shape, num_classes):\n"
        "    return nn.Sequential(nn.Linear(in_shape[0], 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, num_classes))\n\n"
        "@MODELS.register('one_output')\n"
        "def one_output(*, in_shape, num_classes):\n"
        "    return nn.Linear(in_shape[0], 1)\n"
    )
    recipe = str(EXAMPLES / "tabular_random.yaml")
    root = ["--set", f"data.root={tmp_path}"]
    cases = {
        ("--set", "data.partition.column=ward"): "data.partition.column: 'ward' is not one of the dataset's groupings: hospital",
        (
            "--plugin",
            str(models),
            "--set",
            "model.name=one_output",
        ): "model.name: 'one_output' outputs (2, 1) for 2 examples; the data has 2 classes and train.loss is 'cross_entropy'",
        (
            "--plugin",
            str(models),
            "--set",
            "model.name=bn_mlp",
            "--set",
            "privacy={kind: dpsgd, noise_multiplier: 1.0, max_grad_norm: 1.0}",
            "--set",
            "incentive={kind: none}",
            "--set",
            "aggregation.kind=mean",
            "--set",
            "accountant.kind=rdp",
        ): "model.name: layer '1' (BatchNorm1d) mixes the examples of a batch",
        ("--set", "model.name=mcmahan_cnn"): "model.name: 'mcmahan_cnn' cannot be built for features inputs 3",
        ("--set", "data.partition.n_clients=9"): "a natural partition has one client per group; the data has 4 groups, got 9",
        ("--set", "data.options.label=missing"): "data.options: column 'missing' is not in records.csv",
        ("--set", "data.options.test_path=records.csv"): "800 test example(s) are identical to training examples",
    }
    from typer.testing import CliRunner

    from fedgame.cli import app

    for extra, expected in cases.items():
        if extra[0] == "--plugin":  # a plug-in module: a fresh process, as a user's shell would start
            r = fedgame(*extra[:2], "validate", recipe, *root, *extra[2:])
            code, err = r.returncode, r.stderr.strip()
        else:  # the same command in this process (a process start is seconds of imports)
            res = CliRunner().invoke(app, ["validate", recipe, *root, *extra])
            code, err = res.exit_code, res.stderr.strip()
        assert code != 0 and expected in err and len(err.splitlines()) == 1, (extra, err)
