"""Subsampled randomized Hadamard transform (kind ``srht``): R = sqrt(n/b) S H D.

n is the next power of two >= d and v is zero-padded to length n (Definition D.3
requires log n to be an integer); R is the b x d block of the b x n operator that
acts on the first d coordinates, so E[R^T R] = I_d still holds.  H is applied by
a fast Walsh-Hadamard transform: O(n log n) time, O(n) memory.

On the CPU (float32/float64, compiled kernels present) one call of the fused kernel
(``_kernels.srht``) does a whole apply or adjoint: D and the zero padding are applied
while each cache-sized block is loaded for the transform's first pass, and S while
its last pass drains: the padded vector goes to memory and back once, between the
two passes, and the plan's index arrays are read once.  The n-entry work row and the
plan's scratch are kept on the sketch between calls (one sketch is therefore not to be
called from two threads at once).  Elsewhere (GPUs, other dtypes, no kernels) torch
passes (:mod:`.hadamard`) and the scatter plan's torch twin compute the same map.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import seeds
from .base import LinearMap, Sketch
from .hadamard import fwht, hadamard_owned
from .kernels import applies, buffer, empty, ext, threads
from .scatter import ScatterPlan


def srht_operator_norm(n: int, b: int) -> float:
    """sqrt(n/b) for R = sqrt(n/b) S H D cut to d > n - b columns: R R^T = (n/b)(I_b - N N^T), N = the b x (n - d)
    padded block, singular (Lu et al. 2013, Definition D.3)."""
    return math.sqrt(n / b)


def padded_length(d: int) -> int:
    """n = 2^ceil(log2 d), the length H acts on."""
    return 1 << max(0, (d - 1).bit_length())


def draw(seed: int, n: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of R from ``seed``: D's sign bits (n entries, 1 for +1) and S's b rows of H, in y's order."""
    rng = seeds.numpy_stream(seed, seeds.SRHT)
    sign_bits = rng.integers(0, 2, size=n)
    return sign_bits, rng.choice(n, size=b, replace=False)


def prefix_rows(d: int, b: int, seed: int, n: int) -> int:
    """How many distinct rows (up to sign) the SRHT of ``seed`` has on its first n columns: H's entry
    (-1)^popcount(r & c) for columns c < 2^k depends on the row r's lowest k bits only (k = ceil(log2 n)), so at
    most 2^k, however large b is."""
    k = max(0, (n - 1).bit_length())
    _, rows = draw(seed, padded_length(d), b)
    return int(np.unique(rows & ((1 << k) - 1)).size)


class SRHTSketch(Sketch):
    """Definition D.3 of Song et al. 2023 (Lu et al. 2013): R = sqrt(n/b) S H D with zero-padding of v to
    n = 2^ceil(log2 d)."""

    kind = "srht"
    draws_columns = True

    @classmethod
    def column_work_length(cls, d: int) -> int | None:
        return padded_length(d)  # one transform of length n per seed

    @classmethod
    def adjoint_columns(cls, seed_list, y, cols, *, d, b, **params):
        """R^T y = sqrt(n/b) D H S^T y / sqrt(n) at ``cols``: one batched transform of the K scattered messages."""
        n, K = padded_length(d), len(seed_list)
        cols = np.asarray(cols, dtype=np.int64)
        yv = y.detach().to(torch.float64).cpu()
        flat = np.empty((K, b), dtype=np.int64)
        signs = np.empty((K, len(cols)))
        for i, s in enumerate(seed_list):
            sign_bits, rows = draw(int(s), n, b)
            flat[i] = rows + i * n
            signs[i] = 2.0 * sign_bits[cols] - 1.0
        z = torch.zeros(K * n, dtype=torch.float64)
        z.index_copy_(0, torch.from_numpy(flat.reshape(-1)), yv.repeat(K))
        w = hadamard_owned(z.view(K, n))
        contiguous = cols.size and np.array_equal(cols, np.arange(cols[0], cols[0] + cols.size))
        w = w[:, int(cols[0]):int(cols[0]) + cols.size] if contiguous else w.index_select(1, torch.from_numpy(cols))
        return w * torch.from_numpy(signs) / math.sqrt(b)

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        self.n = padded_length(self.d)
        sign_bits, idx = draw(self.seed, self.n, self.b)              # D's diagonal, S's rows
        signs = 2.0 * sign_bits - 1.0
        del sign_bits
        self.signs = torch.from_numpy(signs[: self.d].astype(np.float32))  # padding never reaches D
        del signs
        # S as a scatter plan: entries in increasing row order of H (a sequential read of H D v), each sent to
        # its place in y; the row order idx is part of R and is kept exactly
        order = np.argsort(idx, kind="stable")
        kept = idx[order]
        self._select = ScatterPlan(order, self.b, src_len=self.n, src_index=kept, covers=True)
        self.scale = math.sqrt(self.n / self.b)
        self._work: dict = {}
        # S for the fused kernel: bit i % 64 of word i // 64 set when row i of H is kept, and the kept
        # rows below each word (NumPy arrays: they stay on the CPU when the sketch moves)
        self._mask = self._rank = None
        if self._select.pos is not None:
            words = (self.n + 63) // 64
            bits = np.zeros(words * 64, dtype=bool)
            bits[kept] = True
            self._mask = np.packbits(bits, bitorder="little").view("<u8").astype(np.int64)
            self._rank = np.searchsorted(kept, np.arange(0, words * 64, 64)).astype(np.int32)

    @property
    def idx(self) -> torch.Tensor:
        """The b rows of H that S keeps, in the order of y (int64)."""
        plan = self._select
        assert plan.src_index is not None  # S's plan is built with the kept rows as its source indices
        return torch.empty(self.b, dtype=torch.int64).index_copy_(0, plan.dest(), plan.src_index.long())

    def _dscale(self, dtype) -> torch.Tensor:
        """D with sqrt(n/b) and H's 1/sqrt(n) folded in: signs * sqrt(n/b) / sqrt(n) = signs / sqrt(b) (cached per
        dtype)."""
        key = (dtype, self.signs.device)
        cache = self.__dict__.setdefault("_dscale_cache", {})
        if key not in cache:
            cache[key] = self.signs.to(dtype) * (self.scale / math.sqrt(self.n))
        return cache[key]

    def _work_row(self, dtype) -> torch.Tensor:
        """The fused kernel's n-entry scratch row, kept between calls (a fresh one costs a page fault per 4 KiB)."""
        if dtype not in self._work:
            self._work[dtype] = torch.empty(self.n, dtype=dtype)
        return self._work[dtype]

    def _fused(self, x: torch.Tensor) -> bool:
        return self._mask is not None and applies(x)

    def _kernel(self, forward: bool, x: torch.Tensor) -> torch.Tensor:
        """R x (forward) or R^T x in one call of the fused kernel, row by row."""
        d_in, d_out = (self.d, self.b) if forward else (self.b, self.d)
        flat = x.detach().reshape(-1, d_in).resolve_neg().contiguous()
        out = empty((flat.shape[0], d_out), x.dtype)
        plan = self._select
        assert plan.pos is not None and plan.destB is not None and plan.starts is not None, \
            "the fused kernel runs on a bucketed plan"
        assert ext is not None  # _fused(): the kernels are compiled
        ext.srht(forward, buffer(flat), buffer(out), buffer(self._work_row(x.dtype)), buffer(plan.scratch(x.dtype)),
                 buffer(self._dscale(x.dtype)), self.d, self._mask, self._rank, buffer(plan.pos), buffer(plan.destB),
                 buffer(plan.starts), threads(self.n))
        return out.reshape(*x.shape[:-1], d_out)

    def _apply_raw(self, v: torch.Tensor) -> torch.Tensor:
        if self._fused(v):
            return self._kernel(True, v)
        flat = v.reshape(-1, self.d)
        z = torch.empty(flat.shape[0], self.n, dtype=v.dtype, device=v.device)  # D v, zero-padded
        torch.mul(flat, self._dscale(v.dtype), out=z[:, : self.d])
        z[:, self.d:].zero_()
        return self._select.forward(hadamard_owned(z)).reshape(*v.shape[:-1], self.b)

    def _adjoint_raw(self, u: torch.Tensor) -> torch.Tensor:
        if self._fused(u):
            return self._kernel(False, u)
        flat = u.reshape(-1, self.b)
        z = self._select.transpose(flat)
        w = hadamard_owned(z)[:, : self.d] * self._dscale(u.dtype)
        return w.reshape(*u.shape[:-1], self.d)

    def readout_variance(self) -> float:
        """b of the n rows of a scaled orthogonal H D drawn without replacement: 1/b - 1/n (n: d padded)."""
        return max(0.0, 1.0 / self.b - 1.0 / self.n)

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


__all__ = ["SRHTSketch", "fwht", "srht_operator_norm", "prefix_rows"]
