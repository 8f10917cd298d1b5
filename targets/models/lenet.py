"""The LeNet of DLG (Zhu et al., "Deep Leakage from Gradients", 2019)."""

from __future__ import annotations

import math

from torch import nn

from .layers import activation


class LeNet(nn.Module):
    """Conv(5x5, 12, stride 2) x2, conv(5x5, 12, stride 1), each followed by the activation, then one linear head.

    DLG uses sigmoid activations and weights and biases drawn U(-0.5, 0.5).
    """

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, act="sigmoid"):
        super().__init__()
        c, h, w = in_shape
        self.act = activation(act)
        self.conv1 = nn.Conv2d(c, 12, 5, padding=2, stride=2)
        self.conv2 = nn.Conv2d(12, 12, 5, padding=2, stride=2)
        self.conv3 = nn.Conv2d(12, 12, 5, padding=2, stride=1)
        oh, ow = math.ceil(math.ceil(h / 2) / 2), math.ceil(math.ceil(w / 2) / 2)
        self.fc = nn.Linear(12 * oh * ow, num_classes)

    def forward(self, x):
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        x = self.act(self.conv3(x))
        return self.fc(x.flatten(1))
