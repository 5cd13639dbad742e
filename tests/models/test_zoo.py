"""The model zoo: exact architectures (pinned parameter counts), DP compatibility, seeding."""

from __future__ import annotations

import functools
from collections import OrderedDict

import pytest
import torch
from opacus import GradSampleModule
from opacus.validators import ModuleValidator
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from fedgame.models import MODELS, build_model, count_params, list_models

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)

#: name → (canonical input shape, classes, pinned number of trainable parameters)
CANONICAL: dict[str, tuple[tuple[int, int, int], int, int]] = {
    "logreg": (MNIST, 10, 7_850),
    "mlp": (MNIST, 10, 199_210),
    "mcmahan_cnn": (MNIST, 10, 1_663_370),
    "mcmahan_cifar_cnn": (CIFAR, 10, 1_756_426),
    "qidpfl_cifar_cnn": (CIFAR, 10, 1_756_426),
    "simple_cnn": (CIFAR, 10, 62_006),
    "lenet5": (MNIST, 62, 66_126),
    "phs_mnist_cnn": (MNIST, 10, 26_010),
    "phs_cifar_cnn": (CIFAR, 10, 550_570),
    "jdp_mnist_cnn": (MNIST, 10, 21_840),
    "jdp_cifar_cnn": (CIFAR, 10, 307_498),
    "vgg11": (CIFAR, 10, 9_231_114),
    "vgg16": (CIFAR, 10, 14_728_266),
    "resnet18": (CIFAR, 10, 11_173_962),
}

#: Models for token-id inputs (L,) (tests/models/test_flat_inputs.py): name → (in_shape,
#: classes, options, pinned number of trainable parameters), as the table in zoo.py has them.
TOKENS: dict[str, tuple[tuple[int], int, dict[str, object], int]] = {
    "embedding_bag": ((64,), 2, {"vocab": 5000, "dim": 64}, 320_130),
}

#: Further pinned counts: (name, in_shape, classes, options, parameters).
OTHER_COUNTS = [
    ("lenet5", MNIST, 10, {}, 61_706),
    ("vgg11", CIFAR, 100, {}, 9_277_284),
    ("vgg16", CIFAR, 100, {}, 14_774_436),
    ("vgg11", CIFAR, 10, {"norm": "none"}, 9_225_610),
    ("vgg16", CIFAR, 10, {"norm": "none"}, 14_719_818),
    ("resnet18", (3, 64, 64), 200, {}, 11_279_112),
    ("simple_cnn", CIFAR, 10, {}, 456 + 2_416 + 48_120 + 10_164 + 850),
]

#: Per-layer counts the specs state.
PER_LAYER = {
    "phs_mnist_cnn": [1_040, 8_224, 16_416, 330],
    "phs_cifar_cnn": [896, 9_248, 18_496, 36_928, 73_856, 147_584, 262_272, 1_290],
    "jdp_mnist_cnn": [260, 5_020, 16_050, 510],
}


def _build(name: str) -> nn.Module:
    """A fresh model ``name`` at its canonical shape, seed 0."""
    shape, classes, _ = CANONICAL[name]
    return build_model(name, in_shape=shape, num_classes=classes, seed=0)


@functools.cache
def _shared(name: str) -> nn.Module:
    """One model per name for the read-only tests (building VGG/ResNet is the slow part)."""
    return _build(name)


def test_every_registered_model_is_pinned() -> None:
    assert sorted([*CANONICAL, *TOKENS]) == list_models()


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_token_model_parameter_count_is_pinned(name: str) -> None:
    shape, classes, options, expected = TOKENS[name]
    assert count_params(build_model(name, in_shape=shape, num_classes=classes, seed=0, **options)) == expected


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_parameter_count_is_pinned(name: str) -> None:
    assert count_params(_shared(name)) == CANONICAL[name][2]


@pytest.mark.parametrize(("name", "shape", "classes", "options", "expected"), OTHER_COUNTS)
def test_other_parameter_counts(name: str, shape: tuple[int, int, int], classes: int, options: dict[str, object], expected: int) -> None:
    assert count_params(build_model(name, in_shape=shape, num_classes=classes, **options)) == expected


@pytest.mark.parametrize("name", sorted(PER_LAYER))
def test_per_layer_counts(name: str) -> None:
    layers = [m for m in _build(name).modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    assert [count_params(m) for m in layers] == PER_LAYER[name]


def test_count_params_counts_trainable_only() -> None:
    model = build_model("logreg", in_shape=MNIST, num_classes=10)
    next(model.parameters()).requires_grad_(False)  # the 7,840 weights
    assert count_params(model) == 10


def test_cifar_cnn_alias_is_the_same_network() -> None:
    a = build_model("mcmahan_cifar_cnn", in_shape=CIFAR, num_classes=10, seed=3)
    b = build_model("qidpfl_cifar_cnn", in_shape=CIFAR, num_classes=10, seed=3)
    assert str(a) == str(b)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb
        assert torch.equal(va, vb)


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_forward_gives_one_logit_row_per_example(name: str) -> None:
    shape, classes, _ = CANONICAL[name]
    model = _shared(name)
    with torch.no_grad():
        out = model(torch.randn(2, *shape, generator=torch.Generator().manual_seed(0)))
    assert out.shape == (2, classes)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_opacus_validator_finds_no_errors(name: str) -> None:
    model = _shared(name)
    assert ModuleValidator.validate(model, strict=False) == []
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _per_example_grads_vmap(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    result: dict[str, torch.Tensor] = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return result


def _data(name: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape, classes, _ = CANONICAL[name]
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g)


@pytest.mark.parametrize("name", ["logreg", "mcmahan_cnn", "phs_mnist_cnn"])
def test_vmap_per_example_gradients_match_a_loop(name: str) -> None:
    model = _build(name)
    x, y = _data(name, 4)
    batched = _per_example_grads_vmap(model, x, y)
    for i in range(4):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for k, p in model.named_parameters():
            assert p.grad is not None
            torch.testing.assert_close(batched[k][i], p.grad, atol=1e-5, rtol=1e-5)


def _assert_opacus_matches_vmap(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    expected = _per_example_grads_vmap(model, x, y)
    gsm = GradSampleModule(model, loss_reduction="sum")
    try:
        F.cross_entropy(gsm(x), y, reduction="sum").backward()
        for k, p in model.named_parameters():
            assert p.grad_sample is not None, k
            torch.testing.assert_close(p.grad_sample, expected[k], atol=1e-5, rtol=1e-4)
    finally:
        gsm._close()


_NO_INPUT_GRAD = "ignore:Full backward hook is firing:UserWarning"


@pytest.mark.filterwarnings(_NO_INPUT_GRAD)
@pytest.mark.parametrize("name", ["phs_mnist_cnn", "jdp_mnist_cnn", "simple_cnn"])
def test_opacus_grad_samples_match_vmap(name: str) -> None:
    """Opacus' GradSampleModule gives the same per-example gradients as ``vmap(grad)``. Opacus
    records only in training mode, so just the dropout layers are put in eval mode (identity)
    to make both sides draw the same network."""
    model = _build(name)
    for m in model.modules():
        if isinstance(m, nn.Dropout | nn.Dropout2d):
            m.eval()
    _assert_opacus_matches_vmap(model, *_data(name, 2))


@pytest.mark.filterwarnings(_NO_INPUT_GRAD)
def test_opacus_grad_samples_match_vmap_through_groupnorm_residual_block() -> None:
    """The GroupNorm models' building block — ResNet's BasicBlock with a downsampling shortcut —
    under Opacus (kept narrow: the full ResNet-18/VGG are too big for a quick test)."""
    from fedgame.models._layers import group_norm
    from fedgame.models._resnet import BasicBlock

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            group_norm(8, groups=4),
            BasicBlock(8, 16, stride=2, groups=4),
            BasicBlock(16, 16, stride=1, groups=4),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 5),
        )
    g = torch.Generator().manual_seed(3)
    _assert_opacus_matches_vmap(model, torch.randn(2, 3, 8, 8, generator=g), torch.tensor([1, 4]))


def test_models_without_groupnorm_suit_book_keeping_clipping() -> None:
    from fedgame.sim.clipping import supports

    for name in CANONICAL:
        model = _shared(name)
        has_norm = any(isinstance(m, nn.GroupNorm) for m in model.modules())
        assert supports(model) is not has_norm, name


# -- seeding ---------------------------------------------------------------------------------
def _vector(model: nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


@pytest.mark.parametrize("name", ["mcmahan_cnn", "phs_cifar_cnn", "vgg11"])
def test_same_seed_same_initial_parameters(name: str) -> None:
    first = _vector(_build(name))
    assert torch.equal(first, _vector(_build(name)))
    shape, classes, _ = CANONICAL[name]
    other = build_model(name, in_shape=shape, num_classes=classes, seed=1)
    assert not torch.equal(first, _vector(other))


def test_seed_leaves_global_rng_untouched() -> None:
    state = torch.get_rng_state()
    build_model("mlp", in_shape=MNIST, num_classes=10, seed=123)
    assert torch.equal(torch.get_rng_state(), state)


def test_seed_is_independent_of_global_rng() -> None:
    torch.manual_seed(0)
    a = build_model("mlp", in_shape=MNIST, num_classes=10, seed=5)
    torch.manual_seed(99)
    b = build_model("mlp", in_shape=MNIST, num_classes=10, seed=5)
    assert torch.equal(_vector(a), _vector(b))


def test_no_seed_draws_from_the_global_rng() -> None:
    def build() -> nn.Module:
        return build_model("logreg", in_shape=MNIST, num_classes=10)

    torch.manual_seed(7)
    a = build()
    torch.manual_seed(7)
    b = build()
    assert torch.equal(_vector(a), _vector(b))
    assert not torch.equal(_vector(a), _vector(build()))


# -- errors and options ----------------------------------------------------------------------
def test_unknown_name_lists_the_registered_models() -> None:
    with pytest.raises(ValueError, match="unknown model 'resnet50'") as info:
        build_model("resnet50", in_shape=CIFAR, num_classes=10)
    for name in list_models():
        assert name in str(info.value)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(TypeError, match="'norm'.*options: none"):
        build_model("logreg", in_shape=MNIST, num_classes=10, norm="group")
    with pytest.raises(TypeError, match="options: groups, norm"):
        build_model("vgg11", in_shape=CIFAR, num_classes=10, stem="cifar")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"in_shape": (28, 28), "num_classes": 10}, "in_shape"),
        ({"in_shape": (1, 0, 28), "num_classes": 10}, "in_shape"),
        ({"in_shape": (1, 28.0, 28), "num_classes": 10}, "in_shape"),
        ({"in_shape": MNIST, "num_classes": 0}, "num_classes"),
        ({"in_shape": MNIST, "num_classes": 10, "seed": -1}, "seed"),
    ],
)
def test_bad_arguments_are_refused(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_model("logreg", **kw)  # type: ignore[arg-type]


def test_too_small_input_names_the_layer() -> None:
    with pytest.raises(ValueError, match="vgg11: input 3×16×16 is too small, layer 'pool5'"):
        build_model("vgg11", in_shape=(3, 16, 16), num_classes=10)


def test_vgg_norm_option() -> None:
    plain = build_model("vgg11", in_shape=CIFAR, num_classes=10, norm="none")
    assert not any(isinstance(m, nn.GroupNorm) for m in plain.modules())
    grouped = build_model("vgg11", in_shape=CIFAR, num_classes=10)
    norms = [m for m in grouped.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 8 and all(m.num_groups == 32 for m in norms)
    with pytest.raises(ValueError, match="norm"):
        build_model("vgg11", in_shape=CIFAR, num_classes=10, norm="batch")


@pytest.mark.parametrize(
    ("shape", "stem", "kernel"),
    [(CIFAR, "auto", 3), ((3, 64, 64), "auto", 7), ((3, 64, 64), "cifar", 3), (CIFAR, "imagenet", 7)],
)
def test_resnet_stem(shape: tuple[int, int, int], stem: str, kernel: int) -> None:
    model = build_model("resnet18", in_shape=shape, num_classes=10, stem=stem)
    first = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first.kernel_size == (kernel, kernel)
    assert all(m.num_groups == 32 for m in model.modules() if isinstance(m, nn.GroupNorm))


@pytest.mark.parametrize(("name", "shape"), [("mcmahan_cnn", CIFAR), ("lenet5", CIFAR), ("phs_cifar_cnn", (1, 28, 28))])
def test_first_dense_layer_follows_the_input_shape(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, in_shape=shape, num_classes=7)
    assert model(torch.zeros(2, *shape)).shape == (2, 7)


def test_registry_describes_every_model() -> None:
    docs = MODELS.describe()
    assert sorted(docs) == list_models() and all(docs.values())


def _layer(m: nn.Module) -> tuple[object, ...]:
    """A layer as the spec tables write it: kind and the hyperparameters that matter."""
    if isinstance(m, nn.Conv2d):
        return ("conv", m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.bias is not None)
    if isinstance(m, nn.MaxPool2d):
        return ("maxpool", m.kernel_size, m.stride, m.padding)
    if isinstance(m, nn.Linear):
        return ("linear", m.in_features, m.out_features, m.bias is not None)
    return (type(m).__name__.lower(),)


def _conv(cin: int, cout: int, k: int, s: int, p: int) -> tuple[object, ...]:
    return ("conv", cin, cout, (k, k), (s, s), (p, p), True)


#: PHS spec §5.2, layer by layer: (layer, output shape per example).
PHS_LAYERS: dict[str, list[tuple[tuple[object, ...], tuple[int, ...]]]] = {
    "phs_mnist_cnn": [  # A10: ReLU, Tramèr-Boneh kernels/strides/paddings
        (_conv(1, 16, 8, 2, 2), (16, 13, 13)),
        (("relu",), (16, 13, 13)),
        (("maxpool", 2, 1, 0), (16, 12, 12)),
        (_conv(16, 32, 4, 2, 0), (32, 5, 5)),
        (("relu",), (32, 5, 5)),
        (("maxpool", 2, 1, 0), (32, 4, 4)),
        (("flatten",), (512,)),
        (("linear", 512, 32, True), (32,)),
        (("relu",), (32,)),
        (("linear", 32, 10, True), (10,)),
    ],
    "phs_cifar_cnn": [  # A11: all convs 3×3, stride 1, padding 1, each followed by tanh
        (_conv(3, 32, 3, 1, 1), (32, 32, 32)),
        (("tanh",), (32, 32, 32)),
        (_conv(32, 32, 3, 1, 1), (32, 32, 32)),
        (("tanh",), (32, 32, 32)),
        (("maxpool", 2, 2, 0), (32, 16, 16)),
        (_conv(32, 64, 3, 1, 1), (64, 16, 16)),
        (("tanh",), (64, 16, 16)),
        (_conv(64, 64, 3, 1, 1), (64, 16, 16)),
        (("tanh",), (64, 16, 16)),
        (("maxpool", 2, 2, 0), (64, 8, 8)),
        (_conv(64, 128, 3, 1, 1), (128, 8, 8)),
        (("tanh",), (128, 8, 8)),
        (_conv(128, 128, 3, 1, 1), (128, 8, 8)),
        (("tanh",), (128, 8, 8)),
        (("maxpool", 2, 2, 0), (128, 4, 4)),
        (("flatten",), (2048,)),
        (("linear", 2048, 128, True), (128,)),
        (("tanh",), (128,)),
        (("linear", 128, 10, True), (10,)),
    ],
}


def _pool_before_relu(layers: list[tuple[tuple[object, ...], tuple[int, ...]]]) -> list[tuple[tuple[object, ...], tuple[int, ...]]]:
    """The paper's sequence as the model builds it: a ReLU followed by a max-pool becomes the
    max-pool followed by the ReLU on the pooled map (``Stack.max_pool``: the same function and
    gradients)."""
    out = list(layers)
    for i in range(len(out) - 1):
        if out[i][0] == ("relu",) and out[i + 1][0][0] == "maxpool":
            out[i], out[i + 1] = out[i + 1], (("relu",), out[i + 1][1])
    return out


@pytest.mark.parametrize("name", sorted(PHS_LAYERS))
def test_phs_models_follow_the_spec_layer_by_layer(name: str) -> None:
    """Check 18 and §5.2: the exact layer sequence (kernel, stride, padding, activation; no
    normalisation or dropout) and every intermediate output shape, on a batch of 3, with each
    ReLU → max-pool pair built pool first (:func:`_pool_before_relu`)."""
    model = _shared(name)
    shape, _, _ = CANONICAL[name]
    assert isinstance(model, nn.Sequential)
    x = torch.zeros(3, *shape)
    got = []
    with torch.no_grad():
        for layer in model:
            x = layer(x)
            got.append((_layer(layer), tuple(x.shape[1:])))
    assert got == _pool_before_relu(PHS_LAYERS[name])
    assert x.shape == (3, 10)


def _relu_first(model: nn.Sequential) -> nn.Sequential:
    """The same layers in the papers' order: each max-pool that the builder put before a ReLU
    moved back after it (the layers themselves shared)."""
    layers = list(model.named_children())
    for i in range(len(layers) - 1):
        if isinstance(layers[i][1], nn.MaxPool2d) and type(layers[i + 1][1]) is nn.ReLU:
            layers[i], layers[i + 1] = layers[i + 1], layers[i]
    return nn.Sequential(OrderedDict(layers))


def _pooled_relus(model: nn.Module) -> int:
    """How many max-pools of a Sequential model come right before a ReLU."""
    layers = list(model.children()) if isinstance(model, nn.Sequential) else []
    return sum(isinstance(a, nn.MaxPool2d) and type(b) is nn.ReLU for a, b in zip(layers, layers[1:], strict=False))


POOLED_RELU = [n for n in sorted(CANONICAL) if _pooled_relus(_shared(n))]


def test_the_papers_relu_then_pool_models_are_built_pool_first() -> None:
    assert {"mcmahan_cnn", "mcmahan_cifar_cnn", "phs_mnist_cnn", "lenet5"} <= set(POOLED_RELU)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("name", POOLED_RELU)
def test_pooling_before_the_relu_changes_no_bit(name: str, memory_format: torch.memory_format) -> None:
    """``Stack.max_pool`` builds ReLU → max-pool as max-pool → ReLU: the outputs and every
    parameter's gradient are those of the papers' order bit for bit, overlapping windows
    (``mcmahan_cifar_cnn``'s 3 × 3 stride 2, ``phs_mnist_cnn``'s 2 × 2 stride 1) and both layouts
    included; on inputs with ties and negative maxima (rounded values, a shifted batch)."""
    model = build_model(name, in_shape=CANONICAL[name][0], num_classes=10, seed=0).to(memory_format=memory_format)
    model.eval()  # dropout off (its masks are random): ReLU and pooling are the same in both modes
    paper = _relu_first(model)
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(8, *CANONICAL[name][0], generator=g) * 4).round() / 4 - 0.5  # ties, and windows whose max is < 0
    x = x.contiguous(memory_format=memory_format)
    y = torch.randint(0, 10, (8,), generator=g)
    got = []
    for m in (model, paper):
        m.zero_grad(set_to_none=True)
        out = m(x)
        F.cross_entropy(out, y).backward()
        got.append([out.detach(), *(p.grad.clone() for p in m.parameters())])
    for a, b in zip(*got, strict=True):
        assert torch.equal(a, b)
