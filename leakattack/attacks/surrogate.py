"""A smooth stand-in for ReLU's derivative in the attacker's model of the client (``--relu-surrogate TAU``).

The gradient of a ReLU network's weights, g(x) = grad_w F(w, x), holds every unit's
derivative ReLU'(z) = 1[z > 0] (its backward pass multiplies by it).  So g, and with it
the matching objective ||R g(x) - y|| or its cosine, jumps wherever a pre-activation z
of the dummy data crosses 0, and the derivative of the objective in x, which autograd
forms piece by piece, sees none of those jumps.  Measured on a trained ResNet-20 (at the
iterate the ``ig`` recipe keeps after 400 steps, srht b/d = 0.01, float64;
scripts/relu_jumps.py): along the derivative's descent direction the cosine distance rises
at every step length from 1e-3 to 1 (by 3.9e-6 at 1e-3, where the derivative predicts a
fall of 9.6e-7); docs/ig_recipe.md has the table.

The surrogate keeps the forward pass exact and replaces 1[z > 0] in the backward pass by
sigmoid(z / tau), which is differentiable in z, so the objective's derivative in x sees
units near their threshold.  As tau -> 0 it is the exact gradient.  The attack anneals
tau with its step schedule and reports, and keeps its best iterate by, the exact
objective.  Only ``nn.ReLU`` modules are replaced (a model that calls ``F.relu`` keeps its
exact derivative); DLG's LeNet (sigmoid) and the ViTs (GELU) are smooth already.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


class _SurrogateReLU(torch.autograd.Function):
    """max(z, 0) forward; backward multiplies by sigmoid(z / tau), in differentiable operations (double backward)."""

    @staticmethod
    def forward(ctx, z, tau):
        ctx.save_for_backward(z)
        ctx.tau = tau
        return z.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        z, = ctx.saved_tensors
        return grad * torch.sigmoid(z / ctx.tau), None


def surrogate_relu(z: torch.Tensor, tau: float) -> torch.Tensor:
    """ReLU whose derivative is sigmoid(z / tau) (tau > 0)."""
    return _SurrogateReLU.apply(z, float(tau))


def relu_modules(model: nn.Module) -> list[nn.Module]:
    """The ``nn.ReLU`` modules of ``model`` (each once, however often it is called)."""
    return [m for m in model.modules() if type(m) is nn.ReLU]


@contextlib.contextmanager
def relu_surrogate(model: nn.Module, tau: float) -> Iterator[None]:
    """Within the block, every ``nn.ReLU`` of ``model`` differentiates as sigmoid(z / tau); tau 0 leaves it exact."""
    if not tau > 0:
        yield
        return
    layers = relu_modules(model)
    for m in layers:
        m.forward = lambda z, _tau=float(tau): surrogate_relu(z, _tau)  # an instance attribute shadows the class's
    try:
        yield
    finally:
        for m in layers:
            del m.forward


#: the surrogate's width follows the step schedule: tau * SURROGATE_DECAY ** (decays so far)
SURROGATE_DECAY = 0.1


__all__ = ["relu_surrogate", "surrogate_relu", "relu_modules", "SURROGATE_DECAY"]
