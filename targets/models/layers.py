"""Pieces the model families share: activations by name and seeded weight initialisation."""

from __future__ import annotations

import math

import torch
from torch import nn

from leakattack.errors import UserError
from leakattack.seeds import torch_defaults

ACTIVATIONS = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU, "softplus": nn.Softplus, "gelu": nn.GELU}
INITS = ("uniform", "default", "xavier", "normal")
"""The weight initialisations a registered model is built with (``init=``, ``--weight-init``; ``default`` is
torch's own)."""


def activation(name: str) -> nn.Module:
    """The activation module called ``name``."""
    if name not in ACTIVATIONS:
        raise UserError(f"unknown activation '{name}'; choose one of: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


def initialise(model: nn.Module, init: str, generator: torch.Generator) -> None:
    """Draw every weight of the conv and linear layers from ``generator``.

    ``uniform`` U(-0.5, 0.5) (DLG), ``default`` (PyTorch's Kaiming-uniform bound
    1/sqrt(fan_in) for weights and biases), ``xavier`` (Glorot normal, zero bias)
    or ``normal`` N(0, 0.1^2).
    """
    if init not in INITS:
        raise UserError(f"unknown weight init '{init}'; choose one of: {', '.join(INITS)}")
    with torch_defaults(), torch.no_grad():  # float32 draws whatever the caller's default dtype: the same weights
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
            else:  # default
                bound = 1.0 / math.sqrt(nn.init._calculate_fan_in_and_fan_out(m.weight)[0])
                for p in m.parameters():
                    p.copy_((2 * torch.rand(p.shape, generator=generator) - 1) * bound)
