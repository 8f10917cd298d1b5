"""Sparse embedding matrix I (kind ``sparse``): s nonzeros +-1/sqrt(s) per column.

Each column's s rows are a uniformly random s-subset of [b] (Floyd's sampling
algorithm, vectorised over columns), independent across columns, with
independent random signs.  Stored as (s, d) row indices and values: O(s*d).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import seeds
from .base import Sketch


def distinct_rows(rng: np.random.Generator, b: int, s: int, d: int) -> np.ndarray:
    """(s, d) int64 array whose columns are independent uniform s-subsets of range(b) (Floyd 1987)."""
    rows = np.empty((s, d), dtype=np.int64)
    for i in range(s):
        t = b - s + i
        r = rng.integers(0, t + 1, size=d)
        dup = (rows[:i] == r).any(axis=0) if i else np.zeros(d, dtype=bool)
        rows[i] = np.where(dup, t, r)
    return rows


class SparseSketch(Sketch):
    """Definition D.6 of Song et al. 2023 (Nelson & Nguyen 2013): s nonzeros +-1/sqrt(s) per column at distinct uniform rows."""

    kind = "sparse"
    #: s nonzeros per column; drawing them costs O(s^2 d), and s = O(log(1/delta)/eps) is small in practice
    MAX_S = 64
    param_rules = {"s": (f"an integer in [1, min(b, {MAX_S})]",
                         lambda s, b: isinstance(s, int) and not isinstance(s, bool)
                         and 1 <= s <= min(SparseSketch.MAX_S, b if b is not None else SparseSketch.MAX_S))}

    def __init__(self, d: int, b: int, seed: int = 0, s: int = 4):
        super().__init__(d=d, b=b, seed=seed)
        self.s = min(int(s), self.b)  # the default s = 4 on a sketch with b < 4
        rng = seeds.numpy_stream(self.seed, seeds.SPARSE)
        rows = distinct_rows(rng, self.b, self.s, self.d)
        signs = 2.0 * rng.integers(0, 2, size=(self.s, self.d)) - 1.0
        self.rows = torch.from_numpy(rows.reshape(-1))  # (s*d,), row-major over (s, d)
        self.values = torch.from_numpy((signs * np.float32(1.0 / math.sqrt(self.s))).astype(np.float32))

    def describe(self) -> dict:
        return {**super().describe(), "s": self.s}

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(-1, 1, self.d) * self.values.to(v.dtype)  # (B, s, d)
        out = torch.zeros(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        out = out.index_add(1, self.rows, flat.reshape(flat.shape[0], -1))
        return out.reshape(*v.shape[:-1], self.b)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        g = u.index_select(-1, self.rows).reshape(*u.shape[:-1], self.s, self.d)
        return (g * self.values.to(u.dtype)).sum(-2)
