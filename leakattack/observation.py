"""What the attacker sees: y = R(g~), g~ the client's (possibly defended) gradient.

The threat model grants the attacker the weights w, the sketch (through its
seed) and, if the label mode says so, the labels; never the client's data nor
any noise sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import targets


@dataclass
class Observation:
    """The message y and what the attacker knows about how it was made."""

    y: torch.Tensor  #: the observed (sketched, defended) message, length b
    g_norm: float  #: ||g|| of the client's true gradient (for reporting only)
    d: int
    b: int


def observe(model, x: torch.Tensor, labels: torch.Tensor, sketch) -> Observation:
    """The client computes g = grad_w F(w, x) and sends y = R g."""
    g = targets.flat_gradient(model, x, labels).detach()
    y = sketch.apply(g).detach()
    return Observation(y=y, g_norm=float(g.norm()), d=sketch.d, b=sketch.b)
