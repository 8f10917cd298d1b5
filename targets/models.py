"""Victim models.  Each is an ``nn.Module`` with ``in_shape``, ``num_classes`` and
``loss(output, target)`` (the F of F(w, x)); none uses BatchNorm.

* ``lenet``  — the LeNet of DLG (Zhu et al., 2019): three 5x5 convolutions with 12
  channels and sigmoid activations, then one linear head; weights and biases drawn
  U(-0.5, 0.5) by default as in the DLG code.
* ``mlp``    — one hidden layer (sigmoid by default) and a linear head.
* ``logreg`` — multinomial logistic regression (linear layer + cross-entropy).
* ``linreg`` — linear regression F(w, x) = 1/2 (w^T x - y)^2 with a real target y
  (the class index as a number); no bias, as in the sketching paper's example.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

INITS = ("uniform", "default", "xavier", "normal")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``target`` is class indices (B,) or probabilities (B, C)."""
    if target.dtype in (torch.int64, torch.int32):
        return F.cross_entropy(logits, target)
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


class _Classifier(nn.Module):
    loss_name = "cross_entropy"

    def __init__(self, in_shape, num_classes):
        super().__init__()
        self.in_shape = tuple(in_shape)
        self.num_classes = int(num_classes)

    def loss(self, output, target):
        return cross_entropy(output, target)

    def head(self) -> nn.Linear:
        """The final linear layer (its weight gradient carries the label signal)."""
        return self.fc


class LeNet(_Classifier):
    """DLG's LeNet: conv(5x5, 12, stride 2) x2, conv(5x5, 12, stride 1), sigmoid, linear."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, act="sigmoid"):
        super().__init__(in_shape, num_classes)
        c, h, w = self.in_shape
        self.act = _activation(act)
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


class MLP(_Classifier):
    """Flatten -> Linear(hidden) -> activation -> Linear(num_classes)."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, hidden=64, act="sigmoid"):
        super().__init__(in_shape, num_classes)
        self.fc1 = nn.Linear(math.prod(self.in_shape), hidden)
        self.act = _activation(act)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc(self.act(self.fc1(x.flatten(1))))


class LogReg(_Classifier):
    """Multinomial logistic regression: softmax(W x + c) with cross-entropy."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        super().__init__(in_shape, num_classes)
        self.fc = nn.Linear(math.prod(self.in_shape), num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class LinReg(nn.Module):
    """F(w, x) = 1/2 (w^T x - y)^2, averaged over the batch; y is a real number."""

    loss_name = "squared_error"

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        super().__init__()
        self.in_shape = tuple(in_shape)
        self.num_classes = int(num_classes)
        self.fc = nn.Linear(math.prod(self.in_shape), 1, bias=False)

    def forward(self, x):
        return self.fc(x.flatten(1)).squeeze(-1)

    def loss(self, output, target):
        return 0.5 * (output - target.to(output.dtype)).pow(2).mean()

    def head(self):
        return None


def _activation(name: str) -> nn.Module:
    acts = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU, "softplus": nn.Softplus}
    if name not in acts:
        raise ValueError(f"unknown activation '{name}'; choose one of: {', '.join(acts)}")
    return acts[name]()


def initialise(model: nn.Module, init: str, generator: torch.Generator) -> None:
    """Draw the weights: ``uniform`` U(-0.5, 0.5) (DLG), ``default`` (PyTorch's
    Kaiming-uniform), ``xavier`` (Glorot normal, zero bias) or ``normal`` N(0, 0.1^2)."""
    with torch.no_grad():
        for m in model.modules():
            if not isinstance(m, (nn.Conv2d, nn.Linear)):
                continue
            if init == "uniform":
                for p in m.parameters():
                    p.copy_(torch.rand(p.shape, generator=generator) - 0.5)
            elif init == "normal":
                for p in m.parameters():
                    p.copy_(0.1 * torch.randn(p.shape, generator=generator))
            elif init == "xavier":
                fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(m.weight)
                std = math.sqrt(2.0 / (fan_in + fan_out))
                m.weight.copy_(std * torch.randn(m.weight.shape, generator=generator))
                if m.bias is not None:
                    m.bias.zero_()
            elif init == "default":
                bound = 1.0 / math.sqrt(nn.init._calculate_fan_in_and_fan_out(m.weight)[0])
                for p in m.parameters():
                    p.copy_((2 * torch.rand(p.shape, generator=generator) - 1) * bound)
            else:
                raise ValueError(f"unknown init '{init}'; choose one of: {', '.join(INITS)}")
