"""A multi-layer perceptron: flatten, one hidden layer, a linear head."""

from __future__ import annotations

import math

from torch import nn

from .layers import activation


class MLP(nn.Module):
    """Flatten -> Linear(hidden) -> activation (sigmoid by default) -> Linear(num_classes)."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, hidden=64, act="sigmoid"):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(in_shape), hidden)
        self.act = activation(act)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc(self.act(self.fc1(x.flatten(1))))
