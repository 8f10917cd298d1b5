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

from .. import seeds
from .base import LinearMap, Sketch


_SYLVESTER: dict = {}


def _sylvester(r: int, dtype, device) -> torch.Tensor:
    """The unnormalised r x r Sylvester-Hadamard matrix H_r = H_2 (x) ... (x) H_2 (cached)."""
    key = (r, dtype, device)
    if key not in _SYLVESTER:
        h = torch.ones(1, 1, dtype=dtype, device=device)
        while h.shape[0] < r:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _SYLVESTER[key] = h
    return _SYLVESTER[key]


def _hadamard_unnormalised(x: torch.Tensor, radix_log: int = 3, first_log: int = 5) -> torch.Tensor:
    """H_n x along the last dim (entries +-1): the first pass applies H_32 to the five lowest index bits, later passes H_8 to three bits each.

    H_n = H_2 (x) ... (x) H_2, so any grouping of the log2(n) bits gives the same
    transform; small fixed radices keep O(n log n) work with a fraction of the
    kernel launches of the radix-2 butterfly (measured fastest on CPU in float64).
    """
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    k = n.bit_length() - 1
    y = x.reshape(-1, n)
    rows, h, done = y.shape[0], 1, 0
    while done < k:
        j = min(first_log if h == 1 else radix_log, k - done)
        r = 1 << j
        H = _sylvester(r, y.dtype, y.device)
        if h == 1:  # the innermost bits: one (rows*n/r, r) x (r, r) product (H_r is symmetric)
            y = (y.view(-1, r) @ H).view(rows, n)
        else:
            y = torch.matmul(H, y.view(rows, n // (r * h), r, h)).view(rows, n)
        h, done = h * r, done + j
    return y.reshape(x.shape)


class _FWHT(torch.autograd.Function):
    """The normalised H is symmetric and orthogonal, so its backward is itself."""

    @staticmethod
    def forward(ctx, x):
        return _hadamard_unnormalised(x) * (1.0 / math.sqrt(x.shape[-1]))

    @staticmethod
    def backward(ctx, g):
        return _FWHT.apply(g)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Normalised fast Walsh-Hadamard transform H x / sqrt(n) along the last dim, natural (Sylvester) order; butterfly of Fino & Algazi, IEEE Trans. Computers C-25(11), 1976."""
    return _FWHT.apply(x)


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
        self.idx = torch.from_numpy(idx.astype(np.int64))
        self.scale = math.sqrt(self.n / self.b)

    def _dscale(self, dtype) -> torch.Tensor:
        """D with sqrt(n/b) and H's 1/sqrt(n) folded in: signs * sqrt(n/b) / sqrt(n) = signs / sqrt(b) (cached per dtype)."""
        key = (dtype, self.signs.device)
        cache = self.__dict__.setdefault("_dscale_cache", {})
        if key not in cache:
            cache[key] = self.signs.to(dtype) * (self.scale / math.sqrt(self.n))
        return cache[key]

    def _apply_raw(self, v: torch.Tensor) -> torch.Tensor:
        x = v * self._dscale(v.dtype)
        if self.n > self.d:
            x = F.pad(x, (0, self.n - self.d))
        return _hadamard_unnormalised(x).index_select(-1, self.idx)

    def _adjoint_raw(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(-1, self.b)
        z = torch.zeros(flat.shape[0], self.n, dtype=u.dtype, device=u.device).index_copy_(1, self.idx, flat)
        w = _hadamard_unnormalised(z)[:, : self.d] * self._dscale(u.dtype)
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
