"""Sparse embedding matrix I (kind ``sparse``): s nonzeros +-1/sqrt(s) per column.

Each column's s rows are a uniformly random s-subset of [b] (Floyd's sampling
algorithm, vectorised over columns), independent across columns, with
independent random signs.  Stored as a scatter plan (:mod:`.scatter`) over the
(s, d) row indices with the (s, d) values as weights: O(s*d).  Construction draws
the same random numbers as one NumPy call per row of indices and one for all
signs, but keeps them int32 and works through the signs and the duplicate checks a
chunk at a time, so its temporaries stay O(d).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .. import seeds
from .base import LinearMap, Sketch
from .scatter import ScatterPlan

#: entries handled per step at construction (even: see ``sign_values``)
CHUNK = 1 << 20


def distinct_rows(rng: np.random.Generator, b: int, s: int, d: int) -> np.ndarray:
    """(s, d) int32 array whose columns are independent uniform s-subsets of range(b) (Floyd 1987)."""
    rows = np.empty((s, d), dtype=np.int32)
    for i in range(s):
        t = b - s + i
        r = rng.integers(0, t + 1, size=d, dtype=np.int32)  # the same draws as the default int64 call
        for c0 in range(0, d, CHUNK):  # r = t where r already is one of the column's rows
            seg = r[c0:c0 + CHUNK]
            dup = np.zeros(seg.shape, dtype=bool)
            for k in range(i):
                dup |= rows[k, c0:c0 + CHUNK] == seg
            seg[dup] = t
        rows[i] = r
    return rows


def sign_values(rng: np.random.Generator, shape: tuple, value: float) -> np.ndarray:
    """float32 array of ``shape`` with independent entries +-value: the draws of ``rng.integers(0, 2, size=shape)``.

    Drawn in chunks of even length: a two-valued draw takes exactly one 32-bit word, so
    even chunks consume the generator exactly as one call does (no half-used words).
    """
    out = np.empty(int(np.prod(shape)), dtype=np.float32)
    v = np.float32(value)
    for c0 in range(0, out.size, CHUNK):
        bits = rng.integers(0, 2, size=min(CHUNK, out.size - c0), dtype=np.int32)
        out[c0:c0 + bits.size] = np.where(bits == 1, v, -v)
    return out.reshape(shape)


def draw(seed: int, b: int, s: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of R from ``seed``: the s distinct rows of every column (s, d) and their values +-1/sqrt(s)
    (float32, (s, d))."""
    rng = seeds.numpy_stream(seed, seeds.SPARSE)
    rows = distinct_rows(rng, b, s, d)
    return rows, sign_values(rng, (s, d), 1.0 / math.sqrt(s))


class SparseSketch(Sketch):
    """Definition D.6 of Song et al. 2023 (Nelson & Nguyen 2013): s nonzeros +-1/sqrt(s) per column at distinct
    uniform rows."""

    kind = "sparse"
    #: s nonzeros per column; drawing them costs O(s^2 d), and s = O(log(1/delta)/eps) is small in practice
    MAX_S = 64
    param_rules = {"s": (f"an integer in [1, min(b, {MAX_S})]",
                         lambda s, b: isinstance(s, numbers.Integral) and not isinstance(s, bool)
                         and 1 <= int(s) <= min(SparseSketch.MAX_S, b if b is not None else SparseSketch.MAX_S))}

    draws_columns = True

    @classmethod
    def adjoint_columns(cls, seed_list, y, cols, *, d, b, s=4, **params):
        """(R^T y)_i = sum_k v_k(i) y[r_k(i)] at ``cols``, from each seed's rows and values."""
        s_nz = min(int(s), b)
        yv = y.detach().to(torch.float64).cpu()
        out = torch.zeros(len(seed_list), len(cols), dtype=torch.float64)
        for i, seed in enumerate(seed_list):
            rows, vals = draw(int(seed), b, s_nz, d)
            out[i] = (yv[torch.from_numpy(rows[:, cols].astype(np.int64))]
                      * torch.from_numpy(vals[:, cols].astype(np.float64))).sum(0)
        return out

    def __init__(self, d: int, b: int, seed: int = 0, s: int = 4):
        super().__init__(d=d, b=b, seed=seed)
        self.s = min(int(s), self.b)  # the default s = 4 on a sketch with b < 4
        rows, values = draw(self.seed, self.b, self.s, self.d)
        self.values = torch.from_numpy(values)
        self._plan = ScatterPlan(rows.reshape(-1), self.b, src_len=self.d, reps=self.s,
                                 weights=self.values.reshape(-1))

    @property
    def rows(self) -> torch.Tensor:
        """The row of every nonzero, (s*d,) int64, row-major over (s, d)."""
        return self._plan.dest()

    def describe(self) -> dict:
        return {**super().describe(), "s": self.s}

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(v, self._plan.forward, self._plan.transpose)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(u, self._plan.transpose, self._plan.forward)
