"""The model zoo: every architecture a recipe can name, built by :func:`build_model`.

A builder takes the per-example input shape ``in_shape`` and the number of classes (plus
model-specific keyword options such as VGG's ``norm``, ResNet's ``stem`` or embedding_bag's
``vocab``) and returns a fresh ``nn.Module``. ``in_shape`` is the shape of one example without
the batch dimension:

* ``(C, H, W)`` — images: every model but ``embedding_bag``;
* ``(F,)`` — float feature vectors (tabular data): the dense models ``logreg`` and ``mlp``
  (a convolutional model refuses a flat input with a ``ValueError`` naming it);
* ``(L,)`` — sequences of L integer token ids (int64, 0 = padding; text): ``embedding_bag``.

Every model is DP-compatible: no BatchNorm or other layer that mixes the examples
of a batch (GroupNorm where normalisation is needed), and only layers Opacus'
``GradSampleModule`` supports, so per-example gradients come from ``torch.func.vmap(grad)``,
Opacus or fedgame's book-keeping clipper alike (for ``embedding_bag``: ``vmap(grad)`` and the
book-keeping clipper; Opacus' EmbeddingBag sampler expects 1-d inputs with offsets).

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
embedding_bag       tokens L=64  2            320,130
==================  ===========  =======  ==========

``embedding_bag`` with ``vocab=5000, dim=64`` (vocab·dim + dim·classes + classes); ``logreg``
on F features has F·classes + classes.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fedgame.core import Registry
from fedgame.models import _cnn, _resnet, _text, _vgg
from fedgame.models._layers import InShape

__all__ = ["MODELS", "InShape", "build_model", "count_params", "list_models", "model_options"]

#: Name → builder ``(*, in_shape, num_classes, **options) -> nn.Module``.
MODELS: Registry[nn.Module] = Registry("model")

_BUILDERS: dict[str, tuple[Callable[..., nn.Module], str]] = {
    "logreg": (_cnn.logreg, "Multinomial logistic regression (Flatten → Linear)."),
    "mlp": (_cnn.mlp, "McMahan et al. 2017 2NN: two hidden layers of 200 ReLU units."),
    "mcmahan_cnn": (_cnn.mcmahan_cnn, "McMahan et al. 2017 FedAvg CNN (FedPCS, Fashion-MNIST)."),
    "mcmahan_cifar_cnn": (_cnn.mcmahan_cifar_cnn, "McMahan et al. 2017 CIFAR-10 CNN (FedPCS); same network as qidpfl_cifar_cnn."),
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
    "embedding_bag": (
        _text.embedding_bag,
        "Token sequences (L,): mean of token embeddings (EmbeddingBag, padding 0) → Linear; needs vocab.",
    ),
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


def model_options(name: str) -> list[str]:
    """The keyword options model ``name`` takes besides ``in_shape`` and ``num_classes``,
    sorted (``ValueError`` for an unknown name, listing the registered ones)."""
    return _options(MODELS.get(name))


def _options(builder: Callable[..., nn.Module]) -> list[str]:
    params = inspect.signature(builder).parameters.values()
    return sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _COMMON)


def _integer(value: object, what: str) -> int:
    """``value`` as a Python int (NumPy integers accepted; bools and floats refused)."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]  # any object may be tried; a non-integer raises TypeError, caught below
    except TypeError:
        raise ValueError(f"{what}: must be an integer, got {value!r}") from None


_SHAPES = "(F,) for feature vectors, (L,) for token sequences or (C, H, W) for images"


def _check_shape(in_shape: object) -> InShape:
    """``in_shape`` as a tuple of Python ints: one (a flat input) or three (an image), all >= 1."""
    try:
        dims: tuple[int, ...] | None = tuple(_integer(d, "in_shape") for d in in_shape)  # type: ignore[attr-defined]  # TypeError caught
    except (TypeError, ValueError):
        dims = None
    if isinstance(in_shape, tuple | list) and len(in_shape) == 3:  # an image: (C, H, W)
        if dims is None:
            raise ValueError(f"in_shape: must be three integers (C, H, W), got {in_shape!r}")
        if min(dims) < 1:
            raise ValueError(f"in_shape: must be three positive integers (C, H, W), got {in_shape!r}")
        return dims[0], dims[1], dims[2]
    if dims is None or len(dims) != 1 or dims[0] < 1:
        raise ValueError(f"in_shape: must be one or three positive integers — {_SHAPES}; got {in_shape!r}")
    return (dims[0],)


def build_model(
    name: str,
    *,
    in_shape: tuple[int, ...],
    num_classes: int,
    seed: int | None = None,
    **kw: Any,
) -> nn.Module:
    """A fresh model ``name`` for examples of shape ``in_shape``: ``(C, H, W)`` images, ``(F,)``
    feature vectors or ``(L,)`` token-id sequences (see the module docstring for which model
    takes which). ``in_shape`` is checked here (one or three positive integers; e.g.
    ``tuple(x.shape[1:])`` of the training tensor) and reaches the builder as :data:`InShape`.

    ``seed`` makes the initialisation reproducible without touching global randomness: the
    parameters are drawn inside ``torch.random.fork_rng`` from a CPU generator seeded with it, so
    the same seed gives the same initial parameters in any process, and the caller's RNG
    continues as if nothing had been drawn. With ``seed=None`` initialisation draws from (and
    advances) torch's global generator, as plain PyTorch construction does.

    ``kw`` are the model's own options (``norm``/``groups`` for VGG, ``stem``/``groups`` for
    ResNet-18, ``vocab``/``dim`` for embedding_bag; :func:`model_options`), passed to its
    builder. Raises ``ValueError`` for an unknown name (listing the registered ones), a bad
    shape or class count, an input too small for the architecture, a shape of the wrong kind
    (a flat input for a convolutional model), or a bad or missing option value (embedding_bag
    without ``vocab``); ``TypeError`` for an option the model does not take.
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
            f"model {name!r} takes no option {', '.join(map(repr, unknown))}; its options: {', '.join(allowed) if allowed else 'none'}"
        )
    if seed is None:
        return builder(in_shape=shape, num_classes=classes, **kw)
    s = _integer(seed, "seed")
    if not 0 <= s < 2**64:
        raise ValueError(f"seed: must be an integer in [0, 2**64), got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(s)
        return builder(in_shape=shape, num_classes=classes, **kw)
