"""Random Gaussian sketch (kind ``gaussian``) and the row-block machinery shared with ``ams``.

Dense random sketches have b*d independent entries, which for real models is far
too many to store (d = 16k, b = 8k is 125M floats).  ``RowBlockSketch`` therefore
defines R by row blocks: block k holds rows [k*r, (k+1)*r) with r = 2**22 // d,
and is drawn on the CPU from a generator seeded by (seed, k) alone.  Small
sketches (b*d <= 2**24) cache the concatenated blocks; large ones regenerate the
blocks on every apply/adjoint call, and a custom autograd Function makes the
backward pass call the (regenerating) adjoint, so autograd never saves a block.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .. import seeds
from .base import DENSE_LIMIT, LinearMap, Sketch

#: Largest number of entries in one regenerated row block.
BLOCK_ENTRIES = 2 ** 22

_POOL_WORKERS = max(1, min(4, os.cpu_count() or 1))
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """A small process-wide thread pool that generates blocks ahead of the matmul."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_POOL_WORKERS, thread_name_prefix="sketch-block")
        return _POOL


def block_seed(seed: int, k: int, tag: int) -> np.random.SeedSequence:
    """The seed sequence of row block ``k`` of a sketch with ``seed`` (``tag`` separates families)."""
    return seeds.seed_sequence(seed, k, tag)


class RowBlockSketch(Sketch):
    """Dense sketch defined by seeded row blocks; subclasses implement ``_make_block``.

    ``force_blocks=True`` uses the regenerating path even when the dense matrix
    would be small enough to cache (for tests: both paths give the same R).
    """

    _tag = 0
    #: entries per row block (part of the definition of R: changing it changes R)
    _block_entries = BLOCK_ENTRIES
    #: generate blocks ahead in a thread pool (pays off when generation is compute-bound)
    _prefetch = True
    param_rules = {"force_blocks": ("true or false", lambda v, b: isinstance(v, bool))}

    def __init__(self, d: int, b: int, seed: int = 0, force_blocks: bool = False):
        super().__init__(d=d, b=b, seed=seed)
        self.block_rows = max(1, min(self.b, self._block_entries // self.d))
        self.n_blocks = -(-self.b // self.block_rows)
        self.force_blocks = bool(force_blocks)
        self._dense = None
        if not self.force_blocks and self.b * self.d <= DENSE_LIMIT:
            self._dense = torch.cat([self._make_block(k) for k in range(self.n_blocks)], 0)

    # -- block generation --------------------------------------------------
    def _block_range(self, k: int) -> tuple[int, int]:
        r0 = k * self.block_rows
        return r0, min(self.b, r0 + self.block_rows)

    def _make_block(self, k: int, device=None) -> torch.Tensor:  # pragma: no cover
        """Rows ``_block_range(k)`` of R as a float32 tensor (drawn on the CPU from (seed, k))."""
        raise NotImplementedError

    def _blocks(self, device):
        """Yield (r0, r1, block on ``device``) for every block, generated a few blocks ahead."""
        if self.n_blocks == 1 or not self._prefetch:
            for k in range(self.n_blocks):
                yield (*self._block_range(k), self._make_block(k, device))
            return
        pool = _pool()
        ahead = _POOL_WORKERS + 1
        pending: deque = deque()
        for k in range(self.n_blocks):
            pending.append((k, pool.submit(self._make_block, k, device)))
            if len(pending) >= ahead:
                j, fut = pending.popleft()
                yield (*self._block_range(j), fut.result())
        while pending:
            j, fut = pending.popleft()
            yield (*self._block_range(j), fut.result())

    def _blocks_apply(self, v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(-1, self.d)
        out = torch.empty(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        for r0, r1, blk in self._blocks(v.device):
            out[:, r0:r1] = flat @ blk.to(v.dtype).T
        return out.reshape(*v.shape[:-1], self.b)

    def _blocks_adjoint(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(-1, self.b)
        out = torch.zeros(flat.shape[0], self.d, dtype=u.dtype, device=u.device)
        for r0, r1, blk in self._blocks(u.device):
            out.addmm_(flat[:, r0:r1], blk.to(u.dtype))
        return out.reshape(*u.shape[:-1], self.d)

    # -- Sketch API ------------------------------------------------------------
    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        if v.shape[-1] != self.d:
            raise ValueError(f"expected last dimension d = {self.d}, got {v.shape[-1]}")
        if self._dense is None:
            return LinearMap.apply(v, self._blocks_apply, self._blocks_adjoint)
        return v @ self._dense.to(v.dtype).T

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        if u.shape[-1] != self.b:
            raise ValueError(f"expected last dimension b = {self.b}, got {u.shape[-1]}")
        if self._dense is None:
            return LinearMap.apply(u, self._blocks_adjoint, self._blocks_apply)
        return u @ self._dense.to(u.dtype)


class GaussianSketch(RowBlockSketch):
    """Definition D.2 of Song et al. 2023: i.i.d. N(0, 1/b) entries."""

    kind = "gaussian"

    _tag = 2

    def _make_block(self, k: int, device=None) -> torch.Tensor:
        r0, r1 = self._block_range(k)
        seed = int(block_seed(self.seed, k, self._tag).generate_state(1, np.uint64)[0] >> 1)
        gen = seeds.torch_generator(seed)
        blk = torch.randn(r1 - r0, self.d, generator=gen, dtype=torch.float32)
        blk.mul_(1.0 / math.sqrt(self.b))
        return blk if device is None else blk.to(device)
