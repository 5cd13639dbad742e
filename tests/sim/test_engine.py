"""The engine on real Fashion-MNIST in smoke settings: determinism, the DP noise it adds,
the privacy it records, and a SIGKILLed run that resumes to the same numbers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import parse_recipe
from fedgame.pipeline.runner import code_version, cpu_model, run_one
from fedgame.pipeline.store import ResultStore, read_metrics
from fedgame.privacy.analysis.subsampled import dpsgd_epsilon
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
pytestmark = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def smoke(**over: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "name": "smoke",
        "seed": 0,
        "data": {
            "dataset": "fashion_mnist",
            "max_train": 2000,
            "max_test": 500,
            "partition": {"kind": "dirichlet", "n_clients": 10, "alpha": 0.5, "min_size": 20},
        },
        "model": {"name": "logreg"},
        "train": {"rounds": 3, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        "selection": {"kind": "uniform", "replace": False},
    }
    for k, v in over.items():
        raw[k] = v
    return raw


def test_same_seed_same_run_different_seed_differs() -> None:
    runs = []
    for seed in (0, 0, 1):
        cfg = parse_recipe({**smoke(privacy={"kind": "dpsgd", "noise_multiplier": 1.0}), "seed": seed})
        res = build_engine(cfg).engine.run(3)
        runs.append(res)
    assert torch.equal(runs[0].params, runs[1].params)
    assert [r["test_acc"] for r in runs[0].records] == [r["test_acc"] for r in runs[1].records]
    assert not torch.equal(runs[0].params, runs[2].params)


def test_fedavg_learns() -> None:
    cfg = parse_recipe(smoke(train={"rounds": 4, "clients_per_round": 5, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}}))
    res = build_engine(cfg).engine.run(4)
    assert res.records[-1]["test_acc"] > 0.5  # 10 classes: chance is 0.1
    assert np.all(res.epsilons == 0)


def test_dpsgd_noise_has_the_calibrated_std() -> None:
    """One DP-SGD step from the same start with and without noise: the difference is
    -lr·N(0, (zC)²)/B per coordinate (Poisson batches, fixed denominator B)."""
    from fedgame.models import build_model

    model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
    x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    lr, z, c, b = 0.5, 1.3, 0.7, 64
    tr = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=b, lr=lr, steps=1))
    idx = torch.arange(256)
    noisy = tr.train(start, idx, torch.Generator().manual_seed(4), DPSGD(max_grad_norm=c, noise_multiplier=z))
    clean = tr.train(start, idx, torch.Generator().manual_seed(4), DPSGD(max_grad_norm=c, noise_multiplier=0.0))
    diff = (noisy.params - clean.params).double()
    expect = lr * z * c / b
    assert diff.numel() > 1_000_000
    assert abs(diff.std().item() / expect - 1) < 0.005
    assert abs(diff.mean().item()) < 4 * expect / diff.numel() ** 0.5


def test_zcdp_upload_noise_has_the_calibrated_std() -> None:
    from fedgame.privacy.plans import ZCDPUpload

    plan = ZCDPUpload(rho=np.array([0.5, 2.0]), clip=1.0, sizes=np.array([100, 400]))
    for client, (rho, n) in enumerate([(0.5, 100), (2.0, 400)]):
        noise = plan.upload(client, 0, n)
        out = noise.privatize(torch.zeros(1_000_000, dtype=torch.float64), torch.Generator().manual_seed(client))
        expect = np.sqrt(2) * 1.0 / (n * np.sqrt(rho))  # FedPCS Prop. 1
        assert noise.noise_std == pytest.approx(expect, rel=1e-12)
        assert abs(out.std().item() / expect - 1) < 0.005


def test_accountant_records_what_was_run() -> None:
    cfg = parse_recipe(smoke(privacy={"kind": "dpsgd", "noise_multiplier": 1.1}, accountant={"kind": "rdp", "delta": 1e-5}))
    built = build_engine(cfg)
    res = built.engine.run(3)
    sizes = np.asarray(built.data.sizes)
    for i in range(built.data.n_clients):
        if res.selected_counts[i] == 0:
            assert res.epsilons[i] == 0
            continue
        steps = int(res.selected_counts[i]) * int(np.ceil(sizes[i] / 32))
        expect = dpsgd_epsilon(noise_multiplier=1.1, sample_rate=min(1.0, 32 / sizes[i]), steps=steps, delta=1e-5, method="rdp")
        assert res.epsilons[i] == pytest.approx(expect, rel=1e-9)


def test_target_epsilon_is_respected_in_the_worst_case() -> None:
    cfg = parse_recipe(
        smoke(
            privacy={"kind": "dpsgd", "target_epsilon": 4.0, "calibrate_over": "all"},
            selection={"kind": "full"},
            train={"rounds": 2, "clients_per_round": 10, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        )
    )
    res = build_engine(cfg).engine.run(2)
    assert np.all(res.epsilons <= 4.0 + 1e-6)
    assert np.all(res.epsilons >= 4.0 * 0.95)  # every client joined every round: the budget is (almost) spent


def _write_recipe(path: Path) -> Path:
    raw = smoke(
        train={"rounds": 6, "clients_per_round": 3, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}},
        privacy={"kind": "dpsgd", "noise_multiplier": 1.0},
        model={"name": "mcmahan_cnn"},
    )
    path.write_text(yaml.safe_dump(raw))
    return path


def test_sigkill_then_resume_gives_the_uninterrupted_numbers(tmp_path: Path) -> None:
    recipe = _write_recipe(tmp_path / "r.yaml")
    fedgame = [sys.executable, "-m", "fedgame.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = tmp_path / "ref"
    subprocess.run([*fedgame, "run", str(recipe), "--out", str(ref)], check=True, env=env, capture_output=True)

    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [*fedgame, "run", str(recipe), "--out", str(run)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if (run / "metrics.csv").exists() and len(read_metrics(run / "metrics.csv")) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists(), "the run finished before it could be killed"
    done = len(read_metrics(run / "metrics.csv"))
    assert 2 <= done < 6

    subprocess.run([*fedgame, "run", str(recipe), "--out", str(run), "--resume"], check=True, env=env, capture_output=True)
    a, b = read_metrics(ref / "metrics.csv"), read_metrics(run / "metrics.csv")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_time")} for r in rows]  # noqa: E731
    assert strip(a) == strip(b)
    sa, sb = (yaml.safe_load((d / "summary.json").read_text()) for d in (ref, run))
    assert sa["final_accuracy"] == sb["final_accuracy"] and sa["epsilon_per_client"] == sb["epsilon_per_client"]
    assert 1 <= sb["resumed_from_round"] <= done  # the checkpoint trails metrics.csv by at most a round
    # who trained which rounds: one session for the uninterrupted run, two for the killed one
    me = {"code": code_version(), "cpu": cpu_model()}
    assert sa["sessions"] == [{"from_round": 0, **me}]
    assert sb["sessions"] == [{"from_round": 0, **me}, {"from_round": sb["resumed_from_round"], **me}]


def test_a_checkpoint_without_sessions_says_its_first_rounds_code_is_unknown(tmp_path: Path) -> None:
    cfg = parse_recipe(smoke())
    built = build_engine(cfg)
    store = ResultStore(tmp_path / "run")  # a folder as a fedgame before sessions.json left it: a checkpoint after round 0
    store.write_text("config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    built.engine.run(1, sink=store)
    assert not store.exists("sessions.json")
    summary = run_one(cfg, tmp_path / "run")
    assert summary["resumed_from_round"] == 1
    assert summary["sessions"] == [
        {"from_round": 0, "code": "unknown (before sessions.json)", "cpu": "unknown"},
        {"from_round": 1, "code": code_version(), "cpu": cpu_model()},
    ]
    again = run_one(cfg, tmp_path / "fresh")
    assert again["sessions"] == [{"from_round": 0, "code": code_version(), "cpu": cpu_model()}]


def test_run_folder_contents(tmp_path: Path) -> None:
    cfg = parse_recipe(smoke())
    summary = run_one(cfg, tmp_path / "run")
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.yaml", "partition.npz", "partition.json", "metrics.csv", "privacy.csv", "summary.json"} <= names
    assert "checkpoint.pt" not in names
    assert len(summary["partition_fingerprint"]) == 16
    assert len(read_metrics(tmp_path / "run" / "metrics.csv")) == 3


def test_resume_refuses_a_folder_of_another_config(tmp_path: Path) -> None:
    from fedgame.pipeline.runner import RunFolderMismatch

    cfg = parse_recipe(smoke(train={"rounds": 1, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}}))
    first = run_one(cfg, tmp_path / "run", resume=True)
    assert run_one(cfg, tmp_path / "run", resume=True) == first  # same config: the finished run
    other = cfg.model_copy(update={"seed": 5})
    with pytest.raises(RunFolderMismatch, match="different config"):
        run_one(other, tmp_path / "run", resume=True)


def test_a_run_folder_written_before_a_field_was_added_is_still_the_same_config(tmp_path: Path) -> None:
    """A field added to the schema later (at its default) does not turn an old run into
    "another config": the stored config.yaml is resolved again by today's schema. A real
    difference still is one, and so is a file today's schema cannot read."""
    from fedgame.pipeline.runner import RunFolderMismatch

    cfg = parse_recipe(smoke(train={"rounds": 1, "clients_per_round": 2, "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}}))
    first = run_one(cfg, tmp_path / "run", resume=True)
    stored = tmp_path / "run" / "config.yaml"
    old = yaml.safe_load(stored.read_text())
    del old["train"]["on_missing"]  # as a folder written before train.on_missing existed
    stored.write_text(yaml.safe_dump(old, sort_keys=False))
    assert run_one(cfg, tmp_path / "run", resume=True) == first
    old["train"]["on_missing"] = "fail"
    stored.write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(RunFolderMismatch, match="different config"):
        run_one(cfg, tmp_path / "run", resume=True)
    old["train"]["no_such_field"] = 1
    stored.write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(RunFolderMismatch, match="different config"):
        run_one(cfg, tmp_path / "run", resume=True)


def test_code_version_is_the_commit_the_named_commit_or_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedgame

    monkeypatch.delenv("FEDGAME_CODE_VERSION", raising=False)
    assert code_version.__wrapped__(tmp_path) == f"fedgame {fedgame.__version__}"  # no git repository here
    commit = code_version.__wrapped__()
    assert commit != f"fedgame {fedgame.__version__}" and len(commit.split("+")[0]) == 40  # this checkout's commit
    monkeypatch.setenv("FEDGAME_CODE_VERSION", "0123abc")  # a copy shipped elsewhere names its commit
    assert code_version.__wrapped__(tmp_path) == "0123abc" and code_version.__wrapped__() == "0123abc"
