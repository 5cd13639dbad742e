"""Building blocks shared by the zoo: a shape-tracking layer stack and GroupNorm.

Every architecture in :mod:`fedgame.models` sizes its first fully connected layer from the
input shape, so the size is computed here once, layer by layer, instead of being hard-coded
(and silently wrong) per model. The same walk rejects inputs too small for an architecture
with a message that names the layer, rather than a shape error deep in the first forward pass.

The per-example input shape (:data:`InShape`) is ``(C, H, W)`` for images or ``(F,)`` for an
already flat input (a feature vector, or a sequence of ``L`` token ids). A flat input starts the
stack flat: dense layers apply at once, a convolution or pooling layer is refused with a
``ValueError`` that names the model.

Only layers that DP per-example gradients support are used (Conv2d with integer padding and
``groups=1``, Linear, GroupNorm, pooling, activations, Dropout, Flatten): no layer mixes
examples of a batch, which BatchNorm would.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from torch import nn

__all__ = ["InShape", "Shape", "Shape3", "Stack", "group_norm", "image_shape", "shape_str"]

#: The per-example input shape of an image, ``(C, H, W)``.
Shape3 = tuple[int, int, int]
#: The per-example input shape a builder takes: ``(F,)`` features or ``(L,)`` token ids (flat),
#: or ``(C, H, W)`` for images.
InShape = tuple[int] | tuple[int, int, int]


def shape_str(in_shape: InShape) -> str:
    """``in_shape`` as the messages write it: ``1×28×28``, ``13``."""
    return "×".join(str(d) for d in in_shape)


def image_shape(model: str, in_shape: InShape, *, layer: str | None = None) -> Shape3:
    """``in_shape`` as ``(C, H, W)``; a ``ValueError`` naming ``model`` (and ``layer``) for a
    flat input."""
    if len(in_shape) == 3:
        return in_shape
    raise _not_an_image(model, in_shape, layer)


def _not_an_image(model: str, in_shape: InShape, layer: str | None) -> ValueError:
    where = f" (layer {layer!r})" if layer is not None else ""
    return ValueError(f"{model}: needs image inputs (C, H, W){where}, got flat in_shape {tuple(in_shape)!r}")


@dataclass(frozen=True)
class Shape:
    """The ``(C, H, W)`` shape of one example as it passes through a network."""

    c: int
    h: int
    w: int

    @property
    def numel(self) -> int:
        return self.c * self.h * self.w

    def window(self, *, out_channels: int, kernel: int, stride: int, padding: int) -> Shape:
        """Shape after a convolution or (floor-mode) pooling window: ⌊(n + 2p − k)/s⌋ + 1."""
        h = (self.h + 2 * padding - kernel) // stride + 1
        w = (self.w + 2 * padding - kernel) // stride + 1
        return Shape(out_channels, h, w)

    def __str__(self) -> str:
        return f"{self.c}×{self.h}×{self.w}"


class Stack:
    """Appends named layers to an ``nn.Sequential`` while tracking the per-example shape.

    ``in_shape`` is ``(C, H, W)`` (an image: ``shape`` tracks it until :meth:`flatten`) or
    ``(F,)`` (already flat: ``shape`` is None and ``features`` is F from the start; a
    :meth:`flatten` is allowed and adds an ``nn.Flatten``, a no-op on a B×F batch, so dense
    models build the same way for both; a convolution or pooling layer raises ``ValueError``).
    ``model`` is used only in error messages.
    """

    def __init__(self, *, model: str, in_shape: InShape) -> None:
        self.model = model
        self.in_shape = in_shape
        self.flat_input = len(in_shape) == 1
        self.shape: Shape | None = None if len(in_shape) == 1 else Shape(*in_shape)
        self.features = in_shape[0] if len(in_shape) == 1 else 0  # length of the flat vector once flat
        self.layers: OrderedDict[str, nn.Module] = OrderedDict()

    def _spatial(self, name: str) -> Shape:
        if self.shape is None:
            if self.flat_input:
                raise _not_an_image(self.model, self.in_shape, name)
            raise RuntimeError(f"{self.model}: layer {name!r} needs an image but the stack is already flat")
        return self.shape

    def _set(self, name: str, shape: Shape) -> None:
        if shape.h < 1 or shape.w < 1:
            raise ValueError(f"{self.model}: input {shape_str(self.in_shape)} is too small, layer {name!r} would output {shape}")
        self.shape = shape

    def add(self, name: str, module: nn.Module) -> None:
        """A layer that keeps the shape (activation, normalisation, dropout)."""
        if name in self.layers:
            raise RuntimeError(f"{self.model}: layer name {name!r} used twice")
        self.layers[name] = module

    def conv(self, name: str, out_channels: int, kernel: int, *, stride: int = 1, padding: int = 0, bias: bool = True) -> None:
        s = self._spatial(name)
        self.add(name, nn.Conv2d(s.c, out_channels, kernel, stride=stride, padding=padding, bias=bias))
        self._set(name, s.window(out_channels=out_channels, kernel=kernel, stride=stride, padding=padding))

    def max_pool(self, name: str, kernel: int, *, stride: int | None = None, padding: int = 0) -> None:
        """Max-pooling. Right after a ReLU it goes *before* that ReLU: max is monotone, so
        max-pool(ReLU(x)) = ReLU(max-pool(x)), and the gradients agree too (a ReLU's backward
        selects; both orders route each window's gradient to its first maximal element, and a
        window whose maximum is ≤ 0 passes none), so the model computes the same function and
        the same gradients bit for bit (tests/models/test_zoo.py), with the ReLU on the pooled
        map: a quarter of the elements after a 2 × 2 pool. A McMahan CNN step on one thread in fp32
        took 18.8 ms instead of 20.3 on the Intel AVX-512 host. Not for tanh or other
        activations: their backward multiplies, and overlapping windows would sum in another order."""
        s = self._spatial(name)
        stride = kernel if stride is None else stride
        last = next(reversed(self.layers.items()), None)
        relu = last if last is not None and type(last[1]) is nn.ReLU else None
        if relu is not None:
            del self.layers[relu[0]]
        self.add(name, nn.MaxPool2d(kernel, stride=stride, padding=padding))
        if relu is not None:
            self.layers[relu[0]] = relu[1]
        self._set(name, s.window(out_channels=s.c, kernel=kernel, stride=stride, padding=padding))

    def flatten(self, name: str = "flatten") -> None:
        """Flatten the image to a vector; on a flat input (``(F,)``) an ``nn.Flatten`` that
        leaves the B×F batch as it is."""
        if self.shape is None and self.flat_input:
            self.add(name, nn.Flatten(start_dim=1))
            return
        s = self._spatial(name)
        self.add(name, nn.Flatten(start_dim=1))
        self.features = s.numel
        self.shape = None

    def linear(self, name: str, out_features: int) -> None:
        if self.shape is not None:
            raise RuntimeError(f"{self.model}: layer {name!r} needs a flat input; call flatten() first")
        self.add(name, nn.Linear(self.features, out_features))
        self.features = out_features

    def build(self) -> nn.Sequential:
        return nn.Sequential(self.layers)


def group_norm(channels: int, *, groups: int = 32) -> nn.GroupNorm:
    """GroupNorm (Wu & He, ECCV 2018) over ``channels`` with up to ``groups`` groups.

    The number of groups is the largest divisor of ``channels`` not above ``groups``
    (``min(32, C)`` for the power-of-two widths of VGG and ResNet). GroupNorm normalises each
    example on its own, so — unlike BatchNorm — per-example gradients stay well defined, which
    is why DP-SGD work uses it (Kurakin et al. 2022; De et al. 2022).
    """
    if groups < 1:
        raise ValueError(f"groups: must be >= 1, got {groups}")
    g = min(groups, channels)
    while channels % g:
        g -= 1
    return nn.GroupNorm(g, channels)
