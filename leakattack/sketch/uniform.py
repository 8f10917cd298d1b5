"""Uniform sampling sketch (kind ``uniform``): R = sqrt(d/b) S D, no padding (n = d)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import seeds
from .base import LinearMap, Sketch


def uniform_operator_norm(d: int, b: int) -> float:
    """sqrt(d/b): b distinct coordinates scaled by sqrt(d/b) give R R^T = (d/b) I_b (Definition D.8, sampled without
    replacement)."""
    return math.sqrt(d / b)


class UniformSketch(Sketch):
    """Definition D.8 of Song et al. 2023: R = sqrt(n/b) S D, S = b coordinates without replacement, D Rademacher."""

    kind = "uniform"

    def __init__(self, d: int, b: int, seed: int = 0):
        super().__init__(d=d, b=b, seed=seed)
        rng = seeds.numpy_stream(self.seed, seeds.UNIFORM)
        signs = 2.0 * rng.integers(0, 2, size=self.d) - 1.0           # diagonal of D
        idx = rng.choice(self.d, size=self.b, replace=False)           # rows of S
        self.idx = torch.from_numpy(idx.astype(np.int64))
        # row k of R is sqrt(d/b) * D[idx_k] * e_{idx_k}^T
        self.values = torch.from_numpy((signs[idx] * math.sqrt(self.d / self.b)).astype(np.float32))

    def _apply_raw(self, v: torch.Tensor) -> torch.Tensor:
        return v.index_select(-1, self.idx) * self.values.to(v.dtype)

    def _adjoint_raw(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(-1, self.b) * self.values.to(u.dtype)
        out = torch.zeros(flat.shape[0], self.d, dtype=u.dtype, device=u.device)
        out = out.index_add(1, self.idx, flat)
        return out.reshape(*u.shape[:-1], self.d)

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(v, self._apply_raw, self._adjoint_raw)

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return LinearMap.apply(u, self._adjoint_raw, self._apply_raw)

    def readout_variance(self) -> float:
        """b of the d coordinates drawn without replacement: 1/b - 1/d."""
        return max(0.0, 1.0 / self.b - 1.0 / self.d)

    def _operator_norm(self) -> float:
        # R's entries are +-sqrt(d/b) rounded to float32 (how ``values`` is stored): the norm of the R applied
        return float(np.float32(uniform_operator_norm(self.d, self.b)))
