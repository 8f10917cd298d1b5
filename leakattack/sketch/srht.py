"""Subsampled randomized Hadamard transform (kind ``srht``): R = sqrt(n/b) S H D.

n is the next power of two >= d and v is zero-padded to length n (Definition D.3
requires log n to be an integer); R is the b x d block of the b x n operator that
acts on the first d coordinates, so E[R^T R] = I_d still holds.  H is applied by
a fast Walsh-Hadamard transform: O(n log n) time, O(n) memory.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import register_sketch
from .base import Sketch


def _fwht_butterfly(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    y = x.reshape(-1, n)
    rows, h = y.shape[0], 1
    while h < n:
        pairs = y.view(rows, n // (2 * h), 2, h)
        a, c = pairs[:, :, 0, :], pairs[:, :, 1, :]
        z = torch.empty_like(pairs)
        torch.add(a, c, out=z[:, :, 0, :])
        torch.sub(a, c, out=z[:, :, 1, :])
        y = z.view(rows, n)
        h *= 2
    return (y * (1.0 / math.sqrt(n))).reshape(x.shape)


class _FWHT(torch.autograd.Function):
    """The normalised H is symmetric and orthogonal, so its backward is itself."""

    @staticmethod
    def forward(ctx, x):
        return _fwht_butterfly(x)

    @staticmethod
    def backward(ctx, g):
        return _FWHT.apply(g)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Normalised fast Walsh-Hadamard transform H x / sqrt(n) along the last dim, natural (Sylvester) order; butterfly of Fino & Algazi, IEEE Trans. Computers C-25(11), 1976."""
    return _FWHT.apply(x)


@register_sketch("srht")
class SRHTSketch(Sketch):
    """Definition D.3 of Song et al. 2023 (Lu et al. 2013): R = sqrt(n/b) S H D with zero-padding of v to n = 2^ceil(log2 d)."""

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        self.n = 1 << max(0, (self.d - 1).bit_length())
        rng = np.random.default_rng(np.random.SeedSequence([self.seed % 2 ** 63, 3]))
        signs = 2.0 * rng.integers(0, 2, size=self.n) - 1.0           # diagonal of D (n entries)
        idx = rng.choice(self.n, size=self.b, replace=False)           # rows of S
        self.signs = torch.from_numpy(signs[: self.d].astype(np.float32))  # padding never reaches D
        self.idx = torch.from_numpy(idx.astype(np.int64))
        self.scale = math.sqrt(self.n / self.b)

    def _sync(self, x: torch.Tensor) -> None:
        if self.idx.device != x.device:
            self.to(x.device)

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        self._sync(v)
        x = v * self.signs.to(v.dtype)
        if self.n > self.d:
            x = F.pad(x, (0, self.n - self.d))
        return fwht(x).index_select(-1, self.idx) * self.scale

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        self._sync(u)
        flat = u.reshape(-1, self.b) * self.scale
        z = torch.zeros(flat.shape[0], self.n, dtype=u.dtype, device=u.device).index_add(1, self.idx, flat)
        w = fwht(z)[:, : self.d] * self.signs.to(u.dtype)
        return w.reshape(*u.shape[:-1], self.d)
