"""Local training on a CUDA GPU (``train.device: cuda``). Every test here skips without CUDA,
and the suite hides a GPU unless ``FEDGAME_TEST_CUDA=1`` (tests/conftest.py): on a GPU machine,
``FEDGAME_TEST_CUDA=1 pytest tests/sim/test_cuda.py``, as ``bench/gpu.sh`` does (docs/speed.md,
"Measured on a GPU").

What a GPU must keep: the DP-SGD noise has its std in fp32 and bf16 (it is drawn on the device
from a CUDA generator), the same seed gives the same numbers (cuDNN restricted to deterministic
kernels), ``precision: fp32`` is the CPU's maths to float32 round-off (no TF32), steps replayed
from CUDA graphs give the eager numbers bit for bit, and whole runs through the engine repeat
exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from fedgame.models import build_model
from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import apply_overrides, parse_recipe
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer, flat_params

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (on a GPU machine: FEDGAME_TEST_CUDA=1)")

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def _trainer(device: str = "cuda", *, steps: int = 1, lr: float = 1.0, **kw: object) -> LocalTrainer:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g)
    model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
    spec = LocalSpec(batch_size=16, lr=lr, epochs=None, steps=steps)
    return LocalTrainer(model=model, x=x, y=y, spec=spec, device=device, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_dp_sgd_noise_is_float32_with_its_std(precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    z, c, b = 1.3, 0.7, 16
    tr = _trainer(precision=precision)
    start = flat_params(tr.model)
    idx = torch.arange(64)
    quiet = tr.train(start, idx, torch.Generator().manual_seed(5), DPSGD(max_grad_norm=c, noise_multiplier=0.0, sampling="shuffle"))
    noisy = tr.train(start, idx, torch.Generator().manual_seed(5), DPSGD(max_grad_norm=c, noise_multiplier=z, sampling="shuffle"))
    assert noisy.params.device.type == "cpu" and noisy.params.dtype == torch.float32
    noise = ((quiet.params - noisy.params) * b).double()  # one step of lr 1 on (clipped sum + noise)/B
    d = noise.numel()  # 1.66M draws: the std's relative standard error is 1/sqrt(2d) = 0.05 %
    assert abs(float(noise.mean())) < 5 * z * c / d**0.5
    assert float(noise.std()) == pytest.approx(z * c, rel=5 / (2 * d) ** 0.5 + 1e-4)
    assert float((noise.float().bfloat16().float() == noise.float()).double().mean()) < 0.05  # not bf16-rounded


@pytest.mark.parametrize("dp", [None, DPSGD(max_grad_norm=1.0, noise_multiplier=1.0, sampling="shuffle")])
def test_cuda_same_seed_same_numbers(dp: DPSGD | None) -> None:
    tr = _trainer(steps=8, lr=0.1)
    start = flat_params(tr.model)
    runs = [tr.train(start, torch.arange(64), torch.Generator().manual_seed(3), dp).params for _ in range(3)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    assert not torch.equal(runs[0], start)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graph_steps_give_the_eager_numbers(precision: str) -> None:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(70, 1, 28, 28, generator=g), torch.randint(0, 10, (70,), generator=g)
    spec = LocalSpec(batch_size=16, lr=0.05, epochs=2)  # 2 passes of 4 full batches and a short one (6)

    def trainer(graphs: bool) -> LocalTrainer:
        model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
        return LocalTrainer(model=model, x=x, y=y, spec=spec, device="cuda", precision=precision, cuda_graphs=graphs)  # type: ignore[arg-type]

    graphed, eager = trainer(True), trainer(False)
    assert graphed.graphed() and not eager.graphed()
    start = flat_params(eager.model)
    for seed in (3, 4, 3):  # the later calls replay the graph the first one captured
        a = graphed.train(start, torch.arange(70), torch.Generator().manual_seed(seed))
        b = eager.train(start, torch.arange(70), torch.Generator().manual_seed(seed))
        assert torch.equal(a.params, b.params) and a.train_loss == b.train_loss and a.steps == b.steps == 10
        assert not torch.equal(a.params, start)
    assert len(graphed._graphs) == 1
    momentum = LocalTrainer(
        model=build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0),
        x=x,
        y=y,
        spec=LocalSpec(batch_size=16, lr=0.05, momentum=0.9),
        device="cuda",
    )
    assert not momentum.graphed() and not graphed.graphed(moments=object())  # their steps are not one fixed graph


def test_cuda_fp32_is_the_cpu_maths_to_round_off() -> None:
    # lr 0.01: at 0.1 a few steps on random labels amplify float32 round-off (ReLU and max-pool
    # decisions flip) until channels_last and contiguous differ by 4 % on the CPU alone
    gpu, cpu = _trainer(steps=8, lr=0.01), _trainer("cpu", steps=8, lr=0.01, memory_format="contiguous")
    start = flat_params(cpu.model)
    a = gpu.train(start, torch.arange(64), torch.Generator().manual_seed(3))  # the same batches: drawn on the CPU
    b = cpu.train(start, torch.arange(64), torch.Generator().manual_seed(3))
    moved = float((b.params - start).norm())
    assert moved > 0.05
    assert float((a.params - b.params).norm()) < 1e-4 * moved  # TF32 convolutions give about 1e-3


def test_cuda_dp_sgd_is_the_cpu_maths_without_noise() -> None:
    # Poisson batches of varying size (12 steps at q = 0.25 of 16 examples: 2 to 6), their indices copied to the GPU in one go and sliced per step, the clipped count
    # kept on the device: without noise, the CPU's clipped sums to float32 round-off
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, 1, 28, 28, generator=g), torch.randint(0, 10, (16,), generator=g)
    spec = LocalSpec(batch_size=4, lr=0.05, epochs=None, steps=12)

    def trainer(device: str) -> LocalTrainer:
        model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
        return LocalTrainer(model=model, x=x, y=y, spec=spec, device=device, memory_format="contiguous")

    gpu, cpu = trainer("cuda"), trainer("cpu")
    dp = DPSGD(max_grad_norm=0.5, noise_multiplier=0.0, sampling="poisson")
    start = flat_params(cpu.model)
    sizes = [int(b.numel()) for b in cpu._dp_batches(torch.arange(16), torch.Generator().manual_seed(7), 12, dp)]
    assert len(set(sizes)) > 1  # the batches vary, as Poisson sampling makes them
    a = gpu.train(start, torch.arange(16), torch.Generator().manual_seed(7), dp)
    b = cpu.train(start, torch.arange(16), torch.Generator().manual_seed(7), dp)
    moved = float((b.params - start).norm())
    assert moved > 1e-3
    assert float((a.params - b.params).norm()) < 1e-4 * moved
    assert a.train_loss == pytest.approx(b.train_loss, rel=1e-5)
    assert a.clipped_fraction == b.clipped_fraction and 0 < b.clipped_fraction


def _cfg(recipe: str, extra: list[str]) -> Any:
    raw = yaml.safe_load((ROOT / "recipes" / recipe).read_text())
    smoke = [
        "data.max_train=1200",
        "data.max_test=400",
        "train.rounds=2",
        "train.eval_every=1",
        "data.partition.n_clients=12",
        "train.clients_per_round=4",
        "train.device=cuda",
    ]
    return parse_recipe(apply_overrides(raw, smoke + extra))


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
@pytest.mark.parametrize("recipe", ["main/dp_fedavg.yaml", "main/fedpcs.yaml"])
def test_cuda_runs_repeat_exactly(recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))
    records = []
    for _ in range(2):
        built = build_engine(_cfg(recipe, []))
        assert built.engine.trainer.device.type == "cuda"  # type: ignore[attr-defined]
        try:
            records.append(built.engine.run(2).records)
        finally:
            built.close()
    for ra, rb in zip(*records, strict=True):
        for key in ("selected", "train_loss", "test_acc", "test_loss", "eps_max"):
            if key in ra:
                va, vb = ra[key], rb[key]
                assert va == vb or (isinstance(va, float) and np.isnan(va) and np.isnan(vb)), (key, va, vb)
    assert 0.1 < records[0][-1]["test_acc"] <= 1.0
