"""ResNet-18 with GroupNorm in place of BatchNorm.

He, Zhang, Ren & Sun, "Deep Residual Learning for Image Recognition" (CVPR 2016, Table 1,
18-layer): BasicBlocks [2, 2, 2, 2] of widths 64, 128, 256, 512, global average pooling and a
linear classifier, laid out as torchvision's ``resnet18``. Two stems:

* ``"imagenet"``: 7×7 convolution, stride 2, then 3×3 max-pool, stride 2 (the paper's);
* ``"cifar"``: one 3×3 convolution, stride 1, no max-pool (the paper's §4.2 CIFAR stem, as used
  by the common CIFAR ResNet-18), which keeps 32×32 images from shrinking to 8×8 at once.

Every BatchNorm is a GroupNorm with 32 groups (Wu & He, ECCV 2018), which normalises each example
on its own: the replacement DP-SGD work makes so per-example gradients exist (Kurakin et al.
2022; De et al. 2022). GroupNorm has the same two affine parameters per channel as BatchNorm,
so the parameter count equals the BatchNorm network's.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from fedgame.models._layers import InShape, group_norm, image_shape

__all__ = ["BasicBlock", "ResNet", "resnet18"]

Stem = Literal["cifar", "imagenet", "auto"]


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with a residual connection (He et al. 2016, Fig. 2).

    The shortcut is the identity, or a strided 1×1 convolution with GroupNorm when the block
    changes resolution or width (torchvision's "option B" downsample).
    """

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.gn1 = group_norm(out_channels, groups=groups)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.gn2 = group_norm(out_channels, groups=groups)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                group_norm(out_channels, groups=groups),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        y: torch.Tensor = self.relu2(out + self.shortcut(x))
        return y


class ResNet(nn.Module):
    """A four-stage ResNet of BasicBlocks (widths 64, 128, 256, 512), laid out as torchvision's;
    ``blocks`` gives the number of blocks per stage (``(2, 2, 2, 2)``: ResNet-18)."""

    def __init__(
        self,
        *,
        in_channels: int,
        num_classes: int,
        blocks: tuple[int, int, int, int] = (2, 2, 2, 2),
        stem: Literal["cifar", "imagenet"] = "cifar",
        groups: int = 32,
    ) -> None:
        super().__init__()
        if stem == "cifar":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False),
                group_norm(64, groups=groups),
                nn.ReLU(),
            )
        elif stem == "imagenet":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False),
                group_norm(64, groups=groups),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        else:
            raise ValueError(f"stem: must be 'cifar' or 'imagenet', got {stem!r}")
        self.layer1 = self._stage(64, 64, blocks[0], stride=1, groups=groups)
        self.layer2 = self._stage(64, 128, blocks[1], stride=2, groups=groups)
        self.layer3 = self._stage(128, 256, blocks[2], stride=2, groups=groups)
        self.layer4 = self._stage(256, 512, blocks[3], stride=2, groups=groups)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(start_dim=1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():  # torchvision's initialisation; the classifier keeps PyTorch's
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.GroupNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _stage(in_channels: int, out_channels: int, n: int, *, stride: int, groups: int) -> nn.Sequential:
        if n < 1:
            raise ValueError(f"blocks: every stage needs at least one block, got {n}")
        first = BasicBlock(in_channels, out_channels, stride=stride, groups=groups)
        rest = [BasicBlock(out_channels, out_channels, stride=1, groups=groups) for _ in range(n - 1)]
        return nn.Sequential(first, *rest)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits: torch.Tensor = self.fc(self.flatten(self.pool(x)))
        return logits


def resnet18(*, in_shape: InShape, num_classes: int, stem: Stem = "auto", groups: int = 32) -> nn.Module:
    """ResNet-18 (He et al. 2016) with GroupNorm(32); see the module docstring.

    ``stem="auto"`` picks the CIFAR stem for inputs smaller than 64×64 and the ImageNet stem
    for 64×64 or larger (e.g. Tiny-ImageNet). Parameters: 11,173,962 for 3×32×32 with 10 classes
    (CIFAR stem); 11,279,112 for 3×64×64 with 200 classes (ImageNet stem). A flat
    ``in_shape`` (``(F,)``) raises ``ValueError``: ResNet needs image inputs.
    """
    if stem not in ("cifar", "imagenet", "auto"):
        raise ValueError(f"stem: must be 'cifar', 'imagenet' or 'auto', got {stem!r}")
    c, h, w = image_shape("resnet18", in_shape)
    chosen: Literal["cifar", "imagenet"]
    if stem == "auto":
        chosen = "cifar" if min(h, w) < 64 else "imagenet"
    else:
        chosen = stem
    return ResNet(in_channels=c, num_classes=num_classes, blocks=(2, 2, 2, 2), stem=chosen, groups=groups)
