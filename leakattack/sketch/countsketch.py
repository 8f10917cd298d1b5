"""Count-sketch (kind ``countsketch``): one +-1 per column, R[h(i), i] = sigma(i).

h is a random degree-1 polynomial over GF(p), p = 2^31 - 1, reduced mod b
(Carter-Wegman, 2-wise independent); sigma takes the low bit of a random degree-3
polynomial over GF(p) (4-wise independent up to a 1/(2p) bias).  Both are
evaluated once at construction in O(d), a chunk of columns at a time, and kept as a
scatter plan (:mod:`.scatter`) with the signs as weights.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import seeds
from .base import LinearMap, Sketch
from .scatter import ScatterPlan

#: The Mersenne prime 2^31 - 1 used by the polynomial hash families.
PRIME = (1 << 31) - 1
#: columns hashed per step at construction (bounds the int64 temporaries of the hashes)
HASH_CHUNK = 1 << 20


def poly_hash(coeffs, x: np.ndarray, p: int = PRIME) -> np.ndarray:
    """Evaluate sum_k coeffs[k] * x**k mod p (Horner, exact in int64 for x, coeffs < p < 2^31)."""
    x = np.asarray(x, dtype=np.int64)
    acc = np.full(x.shape, int(coeffs[-1]) % p, dtype=np.int64)
    for c in reversed(list(coeffs)[:-1]):
        acc *= x
        acc += int(c)
        acc %= p
    return acc


def countsketch_operator_norm(loads: torch.Tensor) -> float:
    """sqrt(max bucket load): one +-1 per column makes R R^T = diag(loads of the b buckets) (Charikar et al. 2002)."""
    return float(loads.max()) ** 0.5


def draw(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of R from ``seed``: the coefficients of h (degree 1: 2-wise independent) and of
    sigma (degree 3: 4-wise independent), each below PRIME."""
    rng = seeds.numpy_stream(seed, seeds.COUNTSKETCH)
    h_coef = rng.integers(0, PRIME, size=2)
    return h_coef, rng.integers(0, PRIME, size=4)


def poly_hash_rows(coeffs: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`poly_hash` for K coefficient rows (K, k) at once over the columns x (1, m): a (K, m) int64 array."""
    acc = np.broadcast_to(coeffs[:, -1:] % PRIME, (coeffs.shape[0], x.size)).copy()
    for k in range(coeffs.shape[1] - 2, -1, -1):
        acc *= x
        acc += coeffs[:, k:k + 1]
        acc %= PRIME
    return acc


class CountSketch(Sketch):
    """Definition D.5 of Song et al. 2023 (Charikar et al. 2002): R_{h(i),i} = sigma(i), h 2-wise, sigma 4-wise
    independent."""

    kind = "countsketch"
    draws_columns = True

    @classmethod
    def adjoint_columns(cls, seed_list, y, cols, *, d, b, **params):
        """(R^T y)_i = sigma(i) y[h(i)] at ``cols``, from the two hash polynomials of each seed."""
        x = np.asarray(cols, dtype=np.int64)[None, :]
        yv = y.detach().to(torch.float64).cpu()
        drawn = [draw(int(s)) for s in seed_list]
        hc = np.array([h for h, _ in drawn], dtype=np.int64).reshape(-1, 2)
        sc = np.array([s for _, s in drawn], dtype=np.int64).reshape(-1, 4)
        rows = torch.from_numpy(poly_hash_rows(hc, x) % b)
        signs = torch.from_numpy(np.where(poly_hash_rows(sc, x) & 1, 1.0, -1.0))
        return yv[rows] * signs

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        if self.d >= PRIME:
            raise ValueError(f"countsketch needs d < 2^31 - 1, got d = {self.d}")
        h_coef, s_coef = draw(self.seed)
        rows = np.empty(self.d, dtype=np.int32)   # b <= d < 2^31 - 1
        signs = np.empty(self.d, dtype=np.float32)
        for c0 in range(0, self.d, HASH_CHUNK):
            cols = np.arange(c0, min(self.d, c0 + HASH_CHUNK), dtype=np.int64)
            rows[c0:c0 + cols.size] = poly_hash(h_coef, cols) % self.b
            signs[c0:c0 + cols.size] = np.where(poly_hash(s_coef, cols) & 1, np.float32(1), np.float32(-1))
        self.signs = torch.from_numpy(signs)
        self._plan = ScatterPlan(rows, self.b, src_len=self.d, weights=self.signs)

    @property
    def rows(self) -> torch.Tensor:
        """h(i) for every column i (int64)."""
        return self._plan.dest()

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(v, self._plan.forward, self._plan.transpose)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(u, self._plan.transpose, self._plan.forward)

    def loads(self) -> torch.Tensor:
        """How many columns hash to each of the b buckets (counted once, then cached): R R^T = diag(loads)."""
        if "_loads_cache" not in self.__dict__:
            self._loads_cache = torch.bincount(self.rows.cpu(), minlength=self.b)
        return self._loads_cache

    def nonzero_rows(self) -> int:
        """The buckets at least one column hashes to: R's other rows are zero.  The linear hash leaves far more of
        them empty on some seeds than a random hash would (docs/sketches.md)."""
        return int((self.loads() > 0).sum())

    def _operator_norm(self) -> float:
        return countsketch_operator_norm(self.loads())
