"""Count-sketch (kind ``countsketch``): one +-1 per column, R[h(i), i] = sigma(i).

h is a random degree-1 polynomial over GF(p), p = 2^31 - 1, reduced mod b
(Carter-Wegman, 2-wise independent); sigma takes the low bit of a random degree-3
polynomial over GF(p) (4-wise independent up to a 1/(2p) bias).  Both are
evaluated once at construction in O(d) and cached as an index and a sign tensor.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import seeds
from .base import Sketch

#: The Mersenne prime 2^31 - 1 used by the polynomial hash families.
PRIME = (1 << 31) - 1


def poly_hash(coeffs, x: np.ndarray, p: int = PRIME) -> np.ndarray:
    """Evaluate sum_k coeffs[k] * x**k mod p (Horner, exact in int64 for x, coeffs < p < 2^31)."""
    x = np.asarray(x, dtype=np.int64)
    acc = np.full(x.shape, int(coeffs[-1]) % p, dtype=np.int64)
    for c in reversed(list(coeffs)[:-1]):
        acc = (acc * x + int(c)) % p
    return acc


def countsketch_operator_norm(rows: torch.Tensor, b: int) -> float:
    """sqrt(max bucket load): one +-1 per column makes R R^T = diag(loads of the b buckets) (Charikar et al. 2002)."""
    return float(torch.bincount(rows.cpu(), minlength=b).max()) ** 0.5


class CountSketch(Sketch):
    """Definition D.5 of Song et al. 2023 (Charikar et al. 2002): R_{h(i),i} = sigma(i), h 2-wise, sigma 4-wise independent."""

    kind = "countsketch"

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        if self.d >= PRIME:
            raise ValueError(f"countsketch needs d < 2^31 - 1, got d = {self.d}")
        rng = seeds.numpy_stream(self.seed, seeds.COUNTSKETCH)
        h_coef = rng.integers(0, PRIME, size=2)   # degree 1: 2-wise independent
        s_coef = rng.integers(0, PRIME, size=4)   # degree 3: 4-wise independent
        cols = np.arange(self.d, dtype=np.int64)
        self.rows = torch.from_numpy(poly_hash(h_coef, cols) % self.b)
        bits = poly_hash(s_coef, cols) & 1
        self.signs = torch.from_numpy((2.0 * bits - 1.0).astype(np.float32))

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(-1, self.d) * self.signs.to(v.dtype)
        out = torch.zeros(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        out = out.index_add(1, self.rows, flat)
        return out.reshape(*v.shape[:-1], self.b)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return u.index_select(-1, self.rows) * self.signs.to(u.dtype)

    def _operator_norm(self) -> float:
        return countsketch_operator_norm(self.rows, self.b)
