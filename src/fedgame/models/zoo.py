"""The model zoo: every architecture a recipe can name, built by :func:`build_model`.

A builder takes the per-example input shape ``(C, H, W)`` and the number of classes (plus
model-specific keyword options such as VGG's ``norm`` or ResNet's ``stem``) and returns a fresh
``nn.Module``. Every model is DP-compatible: no BatchNorm or other layer that mixes the examples
of a batch (GroupNorm where normalisation is needed), and only layers Opacus'
``GradSampleModule`` supports, so per-example gradients come from ``torch.func.vmap(grad)``,
Opacus or fedgame's book-keeping clipper alike.

Parameter counts for the canonical inputs (pinned in ``tests/models``):

==================  ===========  =======  ==========
name                input        classes  parameters
==================  ===========  =======  ==========
logreg              1×28×28      10            7,850
mlp                 1×28×28      10          199,210
mcmahan_cnn         1×28×28      10        1,663,370
mcmahan_cifar_cnn   3×32×32      10        1,756,426
qidpfl_cifar_cnn    3×32×32      10        1,756,426
simple_cnn          3×32×32      10           62,006
lenet5              1×28×28      62           66,126
phs_mnist_cnn       1×28×28      10           26,010
phs_cifar_cnn       3×32×32      10          550,570
jdp_mnist_cnn       1×28×28      10           21,840
jdp_cifar_cnn       3×32×32      10          307,498
vgg11               3×32×32      10        9,231,114
vgg16               3×32×32      10       14,728,266
resnet18            3×32×32      10       11,173,962
==================  ===========  =======  ==========
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fedgame.core import Registry
from fedgame.models import _cnn, _resnet, _vgg

__all__ = ["MODELS", "build_model", "count_params", "list_models"]

#: Name → builder ``(*, in_shape, num_classes, **options) -> nn.Module``.
MODELS: Registry[nn.Module] = Registry("model")

_BUILDERS: dict[str, tuple[Callable[..., nn.Module], str]] = {
    "logreg": (_cnn.logreg, "Multinomial logistic regression (Flatten → Linear)."),
    "mlp": (_cnn.mlp, "McMahan et al. 2017 2NN: two hidden layers of 200 ReLU units."),
    "mcmahan_cnn": (_cnn.mcmahan_cnn, "McMahan et al. 2017 FedAvg CNN (FedPCS, Fashion-MNIST)."),
    "mcmahan_cifar_cnn": (_cnn.qidpfl_cifar_cnn, "McMahan et al. 2017 CIFAR-10 CNN (FedPCS); same network as qidpfl_cifar_cnn."),
    "qidpfl_cifar_cnn": (_cnn.qidpfl_cifar_cnn, "McMahan et al. 2017 CIFAR-10 CNN (QI-DPFL, CIFAR-10; d = 1,756,426)."),
    "simple_cnn": (_cnn.simple_cnn, "NIID-Bench / FedDisco simple CNN (CINIC-10, CIFAR-10)."),
    "lenet5": (_cnn.lenet5, "LeNet-5 with ReLU and max-pooling (QI-DPFL, EMNIST)."),
    "phs_mnist_cnn": (_cnn.phs_mnist_cnn, "PHS / Opacus DP-SGD MNIST CNN (26,010 parameters)."),
    "phs_cifar_cnn": (_cnn.phs_cifar_cnn, "PHS / Papernot et al. 2021 tanh CIFAR-10 CNN."),
    "jdp_mnist_cnn": (_cnn.jdp_mnist_cnn, "JDP-FL MNIST CNN (PyTorch examples/mnist, with dropout)."),
    "jdp_cifar_cnn": (_cnn.jdp_cifar_cnn, "JDP-FL CIFAR-10 CNN: three double-conv blocks and a linear classifier."),
    "vgg11": (_vgg.vgg11, "VGG-11 (configuration A) with GroupNorm and a linear classifier."),
    "vgg16": (_vgg.vgg16, "VGG-16 (configuration D) with GroupNorm and a linear classifier."),
    "resnet18": (_resnet.resnet18, "ResNet-18 with GroupNorm; CIFAR or ImageNet stem by input size."),
}
for _name, (_builder, _doc) in _BUILDERS.items():
    MODELS.register(_name, doc=_doc)(_builder)

_COMMON = frozenset({"in_shape", "num_classes"})


def list_models() -> list[str]:
    """The registered model names, sorted."""
    return MODELS.names()


def count_params(model: nn.Module) -> int:
    """The number of trainable scalars of ``model`` (each shared tensor counted once) — the
    dimension ``d`` of the vector that DP noise is added to."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _options(builder: Callable[..., nn.Module]) -> list[str]:
    params = inspect.signature(builder).parameters.values()
    return sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _COMMON)


def _integer(value: object, what: str) -> int:
    """``value`` as a Python int (NumPy integers accepted; bools and floats refused)."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{what}: must be an integer, got {value!r}") from None


def _check_shape(in_shape: object) -> tuple[int, int, int]:
    try:
        dims = tuple(_integer(d, "in_shape") for d in in_shape)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ValueError(f"in_shape: must be three integers (C, H, W), got {in_shape!r}") from None
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"in_shape: must be three positive integers (C, H, W), got {in_shape!r}")
    return dims[0], dims[1], dims[2]


def build_model(
    name: str,
    *,
    in_shape: tuple[int, int, int],
    num_classes: int,
    seed: int | None = None,
    **kw: Any,
) -> nn.Module:
    """A fresh model ``name`` for examples of shape ``in_shape = (C, H, W)``.

    ``seed`` makes the initialisation reproducible without touching global randomness: the
    parameters are drawn inside ``torch.random.fork_rng`` from a CPU generator seeded with it, so
    the same seed gives the same initial parameters in any process, and the caller's RNG
    continues as if nothing had been drawn. With ``seed=None`` initialisation draws from (and
    advances) torch's global generator, as plain PyTorch construction does.

    ``kw`` are the model's own options (``norm``/``groups`` for VGG, ``stem``/``groups`` for
    ResNet-18). Raises ``ValueError`` for an unknown name (listing the registered ones), a bad
    shape or class count, or an input too small for the architecture; ``TypeError`` for an
    option the model does not take.
    """
    builder = MODELS.get(name)
    shape = _check_shape(in_shape)
    classes = _integer(num_classes, "num_classes")
    if classes < 1:
        raise ValueError(f"num_classes: must be a positive integer, got {num_classes!r}")
    allowed = _options(builder)
    unknown = sorted(set(kw) - set(allowed))
    if unknown:
        raise TypeError(
            f"model {name!r} takes no option {', '.join(map(repr, unknown))}; "
            f"its options: {', '.join(allowed) if allowed else 'none'}"
        )
    if seed is None:
        return builder(in_shape=shape, num_classes=classes, **kw)
    s = _integer(seed, "seed")
    if not 0 <= s < 2**64:
        raise ValueError(f"seed: must be an integer in [0, 2**64), got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(s)
        return builder(in_shape=shape, num_classes=classes, **kw)
