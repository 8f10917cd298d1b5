"""Residual networks for small images (He, Zhang, Ren, Sun, "Deep Residual Learning", CVPR 2016).

* ``resnet20`` / ``resnet32`` / ``resnet_cifar`` — the CIFAR family of the paper's
  section 4.2: a 3x3 stem conv with ``width`` (16) channels, three stages of n
  basic blocks with width, 2 width, 4 width channels (n = (depth - 2) / 6: 3 for
  ResNet-20, 5 for ResNet-32), subsampling by stride-2 convs, global average
  pooling and a linear head.  Shortcuts are option A by default (identity,
  subsampled and zero-padded where the width doubles: no parameters, as in the
  paper's CIFAR runs); ``shortcut="B"`` uses 1x1 conv + BatchNorm projections.
* ``resnet18`` — the usual CIFAR form of ResNet-18: torchvision's BasicBlock
  layout [2, 2, 2, 2] with 64/128/256/512 channels and projection shortcuts,
  but a 3x3 stride-1 stem and no max-pool.

Attribute names follow torchvision's ``ResNet`` (conv1, bn1, layer1.., blocks
with conv1/bn1/conv2/bn2/downsample, fc), so a checkpoint of torchvision's
``resnet18`` with a 3x3 ``conv1`` and an identity ``maxpool`` loads into ours.
Weights as torchvision draws them: Kaiming-normal (fan_out) convs, BatchNorm
weight 1 and bias 0, PyTorch's default linear layer.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from leakattack.errors import UserError

from .layers import activation

SHORTCUTS = ("A", "B")


class PadShortcut(nn.Module):
    """Option A: x subsampled by ``stride`` and zero-padded to ``cout`` channels (no parameters)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride, self.before, self.after = stride, (cout - cin) // 2, cout - cin - (cout - cin) // 2

    def forward(self, x):
        return F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.before, self.after))


class BasicBlock(nn.Module):
    """conv3x3-BN-act-conv3x3-BN, plus the shortcut, then the activation."""

    def __init__(self, cin: int, cout: int, stride: int = 1, act: str = "relu", shortcut: str = "B"):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act = activation(act)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = (PadShortcut(cin, cout, stride) if shortcut == "A" else
                               nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """3x3 stem conv + BN + act, stages of basic blocks (the first of each later stage strides 2), pool, linear head."""

    def __init__(self, blocks: list[int], widths: list[int], in_shape=(3, 32, 32), num_classes=10,
                 act: str = "relu", shortcut: str = "B"):
        super().__init__()
        if shortcut not in SHORTCUTS:
            raise UserError(f"unknown shortcut '{shortcut}'; choose one of: {', '.join(SHORTCUTS)}")
        if not isinstance(widths[0], int) or isinstance(widths[0], bool) or widths[0] < 1:
            raise UserError(f"resnet width {widths[0]!r} is not a positive integer")
        self.conv1 = nn.Conv2d(in_shape[0], widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act = activation(act)
        cin = widths[0]
        for i, (n, cout) in enumerate(zip(blocks, widths)):
            stage = [BasicBlock(cin if j == 0 else cout, cout, 2 if (i > 0 and j == 0) else 1, act, shortcut)
                     for j in range(n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
            cin = cout
        self.num_stages = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.act(self.bn1(self.conv1(x)))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(self.avgpool(x).flatten(1))


def resnet_cifar(in_shape=(3, 32, 32), num_classes=10, depth=20, width=16, act="relu", shortcut="A"):
    """The CIFAR ResNet of depth 6n + 2 (20, 32, 44, 56, 110, ...)."""
    if not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise UserError(f"resnet depth {depth!r} is not 6n + 2 for n >= 1 (20, 32, 44, 56, 110, ...)")
    n = (depth - 2) // 6
    return ResNet([n] * 3, [width, 2 * width, 4 * width], in_shape, num_classes, act, shortcut)


def resnet20(in_shape=(3, 32, 32), num_classes=10, width=16, act="relu", shortcut="A"):
    """ResNet-20 (n = 3), 0.27 M weights at width 16."""
    return resnet_cifar(in_shape, num_classes, 20, width, act, shortcut)


def resnet32(in_shape=(3, 32, 32), num_classes=10, width=16, act="relu", shortcut="A"):
    """ResNet-32 (n = 5), 0.46 M weights at width 16."""
    return resnet_cifar(in_shape, num_classes, 32, width, act, shortcut)


def resnet18(in_shape=(3, 32, 32), num_classes=10, width=64, act="relu"):
    """ResNet-18 for small images: 3x3 stem, no max-pool, [2, 2, 2, 2] basic blocks, projection shortcuts."""
    return ResNet([2, 2, 2, 2], [width, 2 * width, 4 * width, 8 * width], in_shape, num_classes, act, "B")


__all__ = ["ResNet", "BasicBlock", "PadShortcut", "resnet_cifar", "resnet20", "resnet32", "resnet18", "SHORTCUTS"]
