"""FedSKETCH's compressors (paper 001): the t x m count-sketch table, PRIVIX and HEAVYMIX.

* :class:`CountSketchTable` — Algorithm 1 of FedSKETCH: t independent count
  sketches (hash h_j: [d] -> [m], sign s_j: [d] -> {+-1}), flattened row by row
  to a vector of length t*m.  Linear, so it is also a sketch operator (``apply``,
  ``adjoint``) and works with label recovery through the sketch.
* :func:`privix` — Algorithm 2: x~_i = median_j s_j(i) S[j, h_j(i)].
* :func:`heavymix_support` — Algorithm 3, steps 3-6: the index set Top_m
  (heavy coordinates by the PRIVIX estimate, filled up at random).
"""

from __future__ import annotations

import torch

from leakattack.sketch.base import Sketch
from leakattack.sketch.countsketch import CountSketch


class CountSketchTable(Sketch):
    """S(x) of FedSKETCH Algorithm 1: t rows of m buckets, row j a count sketch with its own hashes."""

    kind = "countsketch-table"

    def __init__(self, d: int, rows: int, buckets: int, seed: int = 0):
        super().__init__(d=d, b=rows * buckets, seed=seed)
        self.rows, self.buckets = int(rows), int(buckets)
        # row j uses the 2-wise/4-wise hash families of leakattack.sketch.countsketch, seed (seed, j)
        sketches = [CountSketch(d, buckets, seed=self.seed * 1009 + j) for j in range(self.rows)]
        self.index = torch.stack([s.rows for s in sketches])  # (t, d): h_j(i)
        self.sign = torch.stack([s.signs for s in sketches])  # (t, d): s_j(i)
        self.flat_index = self.index + self.buckets * torch.arange(self.rows).unsqueeze(1)

    def _sync(self, x):
        if self.index.device != x.device:
            self.to(x.device)

    def _apply(self, v):
        self._sync(v)
        flat = v.reshape(-1, 1, self.d) * self.sign.to(v.dtype)  # (n, t, d)
        out = torch.zeros(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        out = out.index_add(1, self.flat_index.reshape(-1), flat.reshape(flat.shape[0], -1))
        return out.reshape(*v.shape[:-1], self.b)

    def _adjoint(self, u):
        self._sync(u)
        vals = self.gather(u)  # (..., t, d)
        return vals.sum(-2)

    def gather(self, u: torch.Tensor) -> torch.Tensor:
        """s_j(i) S[j, h_j(i)] for every row j and coordinate i: shape (..., t, d)."""
        self._sync(u)
        return u.index_select(-1, self.flat_index.reshape(-1)).reshape(*u.shape[:-1], self.rows, self.d) \
            * self.sign.to(u.dtype)

    def describe(self) -> dict:
        return {"kind": self.kind, "d": self.d, "b": self.b, "rows": self.rows, "buckets": self.buckets,
                "seed": self.seed}


def median(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The median along ``dim`` (mean of the two middle values for an even count); differentiable a.e."""
    s = values.sort(dim=dim).values
    n = s.shape[dim]
    hi = s.narrow(dim, n // 2, 1)
    mid = hi if n % 2 else 0.5 * (hi + s.narrow(dim, n // 2 - 1, 1))
    return mid.squeeze(dim)


def privix(table: CountSketchTable, u: torch.Tensor) -> torch.Tensor:
    """PRIVIX (FedSKETCH Algorithm 2): x~_i = median over rows j of s_j(i) S[j, h_j(i)]."""
    return median(table.gather(u), dim=-2)


def heavymix_support(table: CountSketchTable, u: torch.Tensor, m: int, generator: torch.Generator) -> torch.Tensor:
    """Top_m of HEAVYMIX (FedSKETCH Algorithm 3): H = {i : x~_i^2 >= l2^2 / m}, filled at random to m indices."""
    est = privix(table, u)
    l2 = median(u.reshape(table.rows, table.buckets).pow(2).sum(-1), dim=0)  # (1 +- 0.5) ||x||^2
    score = est.pow(2)
    heavy = torch.nonzero(score >= l2 / m).flatten()
    if heavy.numel() >= m:  # more heavy hitters than slots: keep the largest
        return heavy[score[heavy].argsort(descending=True)[:m]].sort().values
    rest = torch.ones(table.d, dtype=torch.bool)
    rest[heavy.cpu()] = False
    light = torch.nonzero(rest).flatten()
    fill = light[torch.randperm(light.numel(), generator=generator)[: m - heavy.numel()]]
    return torch.cat([heavy.cpu(), fill]).sort().values.to(u.device)
