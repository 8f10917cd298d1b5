"""Gradient pruning: zero the fraction p of smallest-magnitude entries (Zhu, Liu, Han, "Deep Leakage from Gradients",
NeurIPS 2019, Sec. 5)."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from .base import Transform


def pruned_count(p: float, n: int) -> int:
    """floor(p * n) for the fraction p as written (its shortest decimal form): 0.29 of 100 is 29, where the float
    product 0.29 * 100 = 28.999999999999996 truncates to 28."""
    return math.floor(Fraction(repr(float(p))) * n)


def prune_smallest(v: torch.Tensor, p: float) -> torch.Tensor:
    """Zero the floor(p * n) entries of smallest |v| (DLG 2019, Sec. 5 'gradient compression'; :func:`pruned_count`)."""
    k = pruned_count(p, v.numel())
    if k == 0:
        return v
    idx = v.abs().flatten().argsort()[:k]
    out = v.flatten().clone()
    out[idx] = 0
    return out.view_as(v)


class Prune(Transform):
    """Zero the fraction p of entries of smallest magnitude (DLG's gradient compression)."""

    name = "prune"
    prunes = True
    schema = {"p": (float, "a fraction in [0, 1)", lambda p: 0 <= p < 1)}

    def changes_nothing(self) -> bool:
        return self.params["p"] == 0

    def changes_nothing_at(self, n: int) -> bool:
        return pruned_count(self.params["p"], n) == 0  # prune_smallest zeroes floor(p * n) entries

    def __call__(self, v, gen):
        return prune_smallest(v, self.params["p"])
