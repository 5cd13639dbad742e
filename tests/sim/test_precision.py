"""Precision, memory format and device of local training (``train.precision``,
``train.memory_format``, ``train.device``): bf16 keeps every privacy quantity in float32 (the
DP-SGD noise has its std, clipping is float32), channels_last is the same maths to fp32
round-off and the same seed gives the same numbers, bad settings are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedgame.pipeline.config import RecipeError, apply_overrides, parse_recipe
from fedgame.models import build_model
from fedgame.privacy.plans import DPSGD
from fedgame.sim import local as local_mod
from fedgame.sim.clipping import BookKeepingClipper
from fedgame.sim.local import LocalSpec, LocalTrainer, bf16_supported, flat_params

needs_bf16 = pytest.mark.skipif(not bf16_supported(torch.device("cpu")), reason="this CPU has no native bf16")


def _data(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _trainer(name: str = "mcmahan_cnn", **kw: object) -> LocalTrainer:
    x, y = _data()
    model = build_model(name, in_shape=(1, 28, 28), num_classes=10, seed=0)
    return LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=16, lr=1.0, epochs=None, steps=1), **kw)  # type: ignore[arg-type]


@needs_bf16
def test_bf16_dp_sgd_noise_is_float32_with_its_std() -> None:
    z, c, b = 1.3, 0.7, 16
    tr = _trainer(precision="bf16")
    start = flat_params(tr.model)
    idx = torch.arange(64)
    quiet = tr.train(start, idx, torch.Generator().manual_seed(5), DPSGD(max_grad_norm=c, noise_multiplier=0.0, sampling="shuffle"))
    noisy = tr.train(start, idx, torch.Generator().manual_seed(5), DPSGD(max_grad_norm=c, noise_multiplier=z, sampling="shuffle"))
    assert noisy.params.dtype == torch.float32
    noise = ((quiet.params - noisy.params) * b).double()  # one step of lr 1 on (clipped sum + noise)/B
    d = noise.numel()  # 1.66M draws: the std's relative standard error is 1/sqrt(2d) = 0.05 %
    assert abs(float(noise.mean())) < 5 * z * c / d**0.5
    assert float(noise.std()) == pytest.approx(z * c, rel=5 / (2 * d) ** 0.5 + 1e-4)
    # float32 noise, not bf16-rounded: almost no draw is a bf16 number
    assert float((noise.float().bfloat16().float() == noise.float()).double().mean()) < 0.05


@needs_bf16
def test_bf16_clipping_is_float32_and_close_to_fp32() -> None:
    x, y = _data(16)
    model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
    bk = BookKeepingClipper(model)
    _, n32 = bk.clipped_sum(x, y, 1.0)
    g32 = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    _, n16 = bk.clipped_sum(x, y, 1.0, autocast=torch.bfloat16)
    g16 = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert n16.dtype == torch.float32 and g16.dtype == torch.float32
    torch.testing.assert_close(n16, n32, rtol=3e-2, atol=1e-3)
    assert float((g16 - g32).norm() / g32.norm()) < 0.1  # bf16 forward: about 3 significant digits
    assert float(g16.norm()) <= 16 * 1.0 * (1 + 1e-5)  # a sum of 16 gradients each clipped to norm 1


def test_channels_last_is_the_same_maths_and_the_same_seed_the_same_numbers() -> None:
    dp = DPSGD(max_grad_norm=1.0, noise_multiplier=1.0, sampling="shuffle")
    cl, co = _trainer(memory_format="channels_last"), _trainer(memory_format="contiguous")
    assert cl.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    start = flat_params(co.model)
    torch.testing.assert_close(flat_params(cl.model), start)  # the flat vector is in logical order
    idx = torch.arange(64)
    for d in (None, dp):
        a = cl.train(start, idx, torch.Generator().manual_seed(3), d)
        b = co.train(start, idx, torch.Generator().manual_seed(3), d)
        again = cl.train(start, idx, torch.Generator().manual_seed(3), d)
        assert torch.equal(a.params, again.params)
        torch.testing.assert_close(a.params, b.params, rtol=1e-4, atol=1e-5)
    assert cl.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)  # loading params kept the layout


@pytest.mark.parametrize(
    ("name", "shape", "precision"),
    [
        ("mcmahan_cnn", (1, 28, 28), "fp32"),
        ("mcmahan_cnn", (1, 28, 28), "bf16"),
        ("mcmahan_cifar_cnn", (3, 32, 32), "fp32"),  # max-pool 3 × 3, stride 2: overlapping windows
        ("simple_cnn", (1, 28, 28), "fp32"),  # max-pool 2 × 2, stride 1: overlapping windows
        ("phs_cifar_cnn", (3, 32, 32), "fp32"),
    ],
)
def test_flatten_hands_back_channels_last_gradients_with_the_same_numbers(
    name: str, shape: tuple[int, int, int], precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU a channels_last model's Flatten returns its gradient in channels_last
    (``_grad_in_input_layout``) instead of NCHW, so the max-pool and convolution backward passes
    before it stop re-laying out their tensors every step: the same parameters to the bit after
    plain SGD and after DP-SGD (book-keeping clipping), in fp32 and in bf16 (which the kernels
    compute, if slowly, where fedgame refuses it for speed), overlapping pooling windows too."""
    monkeypatch.setattr(local_mod, "bf16_supported", lambda device: True)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, *shape, generator=g), torch.randint(0, 10, (48,), generator=g)
    start = flat_params(build_model(name, in_shape=shape, num_classes=10, seed=0))

    def trained(keep: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(LocalTrainer, "keep_grad_layout", keep)
        model = build_model(name, in_shape=shape, num_classes=10, seed=0)
        tr = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=16, lr=0.05, epochs=None, steps=4), precision=precision)  # type: ignore[arg-type]
        assert tr.memory_format == "channels_last"
        hooked = any(len(m._forward_pre_hooks) for m in model.modules() if isinstance(m, torch.nn.Flatten))
        assert hooked == keep
        dp = DPSGD(max_grad_norm=1.0, noise_multiplier=0.5, sampling="shuffle")
        return [tr.train(start, torch.arange(48), torch.Generator().manual_seed(7), d).params for d in (None, dp)]

    for a, b in zip(trained(True), trained(False), strict=True):
        assert torch.equal(a, b)


def test_auto_layout_is_channels_last_only_with_book_keeping() -> None:
    assert _trainer().memory_format == "channels_last"
    assert _trainer(per_example="ghost").memory_format == "contiguous"
    assert _trainer("logreg").memory_format == "contiguous"
    with pytest.raises(ValueError, match=r"train\.memory_format: 'channels_last' needs train\.per_example"):
        _trainer(per_example="ghost", memory_format="channels_last")


def _raw(**train: object) -> dict[str, object]:
    return {"name": "t", "data": {"dataset": "fashion_mnist", "partition": {"kind": "iid", "n_clients": 4}}, "train": train}


def test_bf16_without_native_support_is_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_mod, "bf16_supported", lambda device: False)
    with pytest.raises(RecipeError, match=r"train\.precision: 'bf16' is not supported on this cpu device; allowed here: fp32"):
        parse_recipe(_raw(precision="bf16", device="cpu"))  # (auto would be CUDA on a GPU machine)
    with pytest.raises(RecipeError, match=r"train\.precision"):
        parse_recipe(_raw(precision="fp16"))


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw amx_bf16 amx_tile avx512_bf16\n", "amx"),
        ("flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16\n", "avx512_bf16"),
        ("flags\t\t: fpu avx2 avx512f avx512bw avx512vl avx512dq avx512_vnni\n", "none"),  # AVX-512 without BF16
        ("flags\t\t: fpu avx2\n", "none"),
        ("processor\t: 0\nFeatures\t: fp asimd bf16\n", None),  # arm64: no x86 flags, oneDNN decides
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path: Path, text: str, units: str | None) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    assert local_mod.cpu_bf16_units(info) == units
    assert local_mod.cpu_bf16_units(tmp_path / "absent") is None


def test_bf16_is_offered_exactly_where_the_cpu_has_bf16_units() -> None:
    """oneDNN emulates bf16 on AVX-512 CPUs without BF16 (4x slower than fp32 there): refused."""
    units = local_mod.cpu_bf16_units()
    if units is None:
        pytest.skip("no x86 flags in /proc/cpuinfo on this host")
    assert bf16_supported(torch.device("cpu")) is (units != "none")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (on a GPU machine: FEDGAME_TEST_CUDA=1)")
def test_cuda_training_runs_on_the_device_and_returns_cpu_params() -> None:
    tr = _trainer(device="cuda")
    assert next(tr.model.parameters()).is_cuda and tr.x.is_cuda
    start = flat_params(tr.model)
    res = tr.train(
        start, torch.arange(64), torch.Generator().manual_seed(0), DPSGD(max_grad_norm=1.0, noise_multiplier=1.0, sampling="shuffle")
    )
    assert res.params.device.type == "cpu" and torch.isfinite(res.params).all()


def test_cuda_graphs_setting_is_checked_and_changes_nothing_on_the_cpu() -> None:
    assert not _trainer().graphed()  # CUDA graphs only on a GPU
    with pytest.raises(ValueError, match=r"train\.cuda_graphs: must be true or false, got 'auto'"):
        _trainer(cuda_graphs="auto")
    with pytest.raises(RecipeError, match=r"train\.cuda_graphs"):
        parse_recipe(_raw(cuda_graphs="sometimes"))
    raw = apply_overrides(_raw(clients_per_round=2), ["train.cuda_graphs=off"])  # YAML reads off as false
    assert parse_recipe(raw).train.cuda_graphs is False
