"""Subsampled randomized Hadamard transform (kind ``srht``): R = sqrt(n/b) S H D.

n is the next power of two >= d and v is zero-padded to length n (Definition D.3
requires log n to be an integer); R is the b x d block of the b x n operator that
acts on the first d coordinates, so E[R^T R] = I_d still holds.  H is applied by
a fast Walsh-Hadamard transform (:mod:`.hadamard`: a compiled kernel on the CPU, torch
passes elsewhere): O(n log n) time, O(n) memory.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import seeds
from .base import LinearMap, Sketch
from .hadamard import fwht, hadamard_owned
from .kernels import applies
from .scatter import ScatterPlan


def srht_operator_norm(n: int, b: int) -> float:
    """sqrt(n/b) for R = sqrt(n/b) S H D cut to d > n - b columns: R R^T = (n/b)(I_b - N N^T), N = the b x (n - d) padded block, singular (Lu et al. 2013, Definition D.3)."""
    return math.sqrt(n / b)


class SRHTSketch(Sketch):
    """Definition D.3 of Song et al. 2023 (Lu et al. 2013): R = sqrt(n/b) S H D with zero-padding of v to n = 2^ceil(log2 d)."""

    kind = "srht"

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        self.n = 1 << max(0, (self.d - 1).bit_length())
        rng = seeds.numpy_stream(self.seed, seeds.SRHT)
        signs = 2.0 * rng.integers(0, 2, size=self.n) - 1.0           # diagonal of D (n entries)
        idx = rng.choice(self.n, size=self.b, replace=False)           # rows of S
        self.signs = torch.from_numpy(signs[: self.d].astype(np.float32))  # padding never reaches D
        del signs
        # S as a scatter plan: entries in increasing row order of H (a sequential read of H D v), each sent to
        # its place in y; the row order idx is part of R and is kept exactly
        order = np.argsort(idx, kind="stable")
        self._select = ScatterPlan(order, self.b, src_len=self.n, src_index=idx[order], covers=True)
        self.scale = math.sqrt(self.n / self.b)
        self._work: dict = {}

    @property
    def idx(self) -> torch.Tensor:
        """The b rows of H that S keeps, in the order of y (int64)."""
        plan = self._select
        return torch.empty(self.b, dtype=torch.int64).index_copy_(0, plan.dest(), plan.src_index.long())

    def _dscale(self, dtype) -> torch.Tensor:
        """D with sqrt(n/b) and H's 1/sqrt(n) folded in: signs * sqrt(n/b) / sqrt(n) = signs / sqrt(b) (cached per dtype)."""
        key = (dtype, self.signs.device)
        cache = self.__dict__.setdefault("_dscale_cache", {})
        if key not in cache:
            cache[key] = self.signs.to(dtype) * (self.scale / math.sqrt(self.n))
        return cache[key]

    def _workspace(self, rows: int, like: torch.Tensor) -> torch.Tensor:
        """A (rows, n) scratch tensor; one row on the CPU is kept between calls (a fresh one costs a page fault per 4 KiB)."""
        if rows != 1 or not applies(like):
            return torch.empty(rows, self.n, dtype=like.dtype, device=like.device)
        if like.dtype not in self._work:
            self._work[like.dtype] = torch.empty(1, self.n, dtype=like.dtype)
        return self._work[like.dtype]

    def _apply_raw(self, v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(-1, self.d)
        z = self._workspace(flat.shape[0], v)  # D v, zero-padded, in one pass
        torch.mul(flat, self._dscale(v.dtype), out=z[:, : self.d])
        z[:, self.d:].zero_()
        return self._select.forward(hadamard_owned(z)).reshape(*v.shape[:-1], self.b)

    def _adjoint_raw(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(-1, self.b)
        z = self._select.transpose(flat, out=self._workspace(flat.shape[0], u))
        w = hadamard_owned(z)[:, : self.d] * self._dscale(u.dtype)
        return w.reshape(*u.shape[:-1], self.d)

    def _operator_norm(self) -> float:
        # S draws b distinct rows of the orthogonal H / sqrt(n), so R R^T = (n/b)(I_b - N N^T) with N the b rows cut
        # to the n - d padded columns; N N^T is singular when b > n - d, and then ||R|| = sqrt(n/b) exactly.  With
        # b <= n - d the padding can shrink the norm below sqrt(n/b): no closed form, the base class iterates.
        if self.b > self.n - self.d:
            return srht_operator_norm(self.n, self.b)
        return super()._operator_norm()

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(v, self._apply_raw, self._adjoint_raw)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(u, self._adjoint_raw, self._apply_raw)


__all__ = ["SRHTSketch", "fwht", "srht_operator_norm"]
