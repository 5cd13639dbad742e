"""VGG-11 and VGG-16 for small images, with GroupNorm instead of BatchNorm.

Configurations "A" (11 weight layers) and "D" (16) of Simonyan & Zisserman, "Very Deep
Convolutional Networks for Large-Scale Image Recognition" (ICLR 2015, Table 1), written out as
torchvision's ``vgg.cfgs`` has them (torchvision is not a dependency). As in the CIFAR versions
used throughout federated-learning work, the three 4096-wide fully connected layers are replaced
by one ``Linear(512·H/32·W/32, classes)`` — ``Linear(512, classes)`` for 32×32 inputs.

Each 3×3 convolution (padding 1, with bias, as in torchvision) is followed by GroupNorm (Wu & He,
ECCV 2018; ``min(32, C)`` groups) and ReLU — torchvision's ``vgg*_bn`` layer order with the
batch statistics, which would couple the examples of a batch and break per-example DP gradients,
replaced by per-example group statistics. ``norm="none"`` gives the plain network.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

from fedgame.models._layers import Shape3, Stack, group_norm

__all__ = ["VGG_CONFIGS", "vgg", "vgg11", "vgg16"]

Norm = Literal["group", "none"]

#: Channel widths per convolution, ``"M"`` for a 2×2 max-pool (torchvision ``vgg.cfgs``).
VGG_CONFIGS: dict[str, tuple[int | str, ...]] = {
    "A": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "D": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
}


def vgg(config: str, *, in_shape: Shape3, num_classes: int, norm: Norm = "group", groups: int = 32) -> nn.Module:
    """VGG of configuration ``config`` ("A" or "D"); see the module docstring.

    Initialised as torchvision initialises VGG: Kaiming-normal (fan-out, ReLU) convolutions,
    zero biases, ``N(0, 0.01²)`` classifier weights; GroupNorm starts at weight 1, bias 0.
    """
    if config not in VGG_CONFIGS:
        raise ValueError(f"config: must be one of {sorted(VGG_CONFIGS)}, got {config!r}")
    if norm not in ("group", "none"):
        raise ValueError(f"norm: must be 'group' or 'none', got {norm!r}")
    name = {"A": "vgg11", "D": "vgg16"}[config]
    s = Stack(model=name, in_shape=in_shape)
    conv = pool = 0
    for item in VGG_CONFIGS[config]:
        if item == "M":
            pool += 1
            s.max_pool(f"pool{pool}", 2, stride=2)
            continue
        assert isinstance(item, int)
        conv += 1
        s.conv(f"conv{conv}", item, 3, padding=1)
        if norm == "group":
            s.add(f"gn{conv}", group_norm(item, groups=groups))
        s.add(f"relu{conv}", nn.ReLU())
    s.flatten()
    s.linear("fc", num_classes)
    model = s.build()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return model


def vgg11(*, in_shape: Shape3, num_classes: int, norm: Norm = "group", groups: int = 32) -> nn.Module:
    """VGG-11 (configuration "A", Simonyan & Zisserman 2015) with GroupNorm, for 32×32 inputs.

    3×32×32: 9,231,114 parameters with 10 classes, 9,277,284 with 100 (``norm="none"``:
    5,504 fewer, the GroupNorm affine parameters).
    """
    return vgg("A", in_shape=in_shape, num_classes=num_classes, norm=norm, groups=groups)


def vgg16(*, in_shape: Shape3, num_classes: int, norm: Norm = "group", groups: int = 32) -> nn.Module:
    """VGG-16 (configuration "D", Simonyan & Zisserman 2015) with GroupNorm, for 32×32 inputs.

    3×32×32: 14,728,266 parameters with 10 classes, 14,774,436 with 100 (``norm="none"``:
    8,448 fewer).
    """
    return vgg("D", in_shape=in_shape, num_classes=num_classes, norm=norm, groups=groups)
