"""AMS sketch (kind ``ams``): R_{i,j} = h_i(j) in {-1/sqrt(b), +1/sqrt(b)}.

Design decision: the b hash functions h_i are *fully independent* seeded random
signs rather than a degree-3 polynomial hash over GF(2^31 - 1).  A fully
independent family is in particular 4-wise independent, so this meets
Definition D.4 exactly (the polynomial hash would, in addition, carry the 1/(2p)
bias of taking the low bit of a value uniform on [0, p)).  The reason is speed:
for d = 16k, b = 8k the signs are regenerated on every call, and raw PCG64 bytes
unpacked into bits are ~12x cheaper on the CPU than evaluating 125M polynomial
hashes with int64 arithmetic.  Signs are drawn on the CPU per row block from
(seed, block index); the packed bytes are unpacked with integer ops on the
input's device, so every machine sees the same R.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .gaussian import RowBlockSketch, block_seed


def sign_table(scale: float) -> np.ndarray:
    """(256, 8) float32 table: row x holds bits of byte x, most significant first, as -scale (0) / +scale (1)."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)
    s = np.float32(scale)
    return np.where(bits == 1, s, -s).astype(np.float32)


class AMSSketch(RowBlockSketch):
    """Definition D.4 of Song et al. 2023 (Alon et al. 1999): entries +-1/sqrt(b), 4-wise (here fully) independent per
    row."""

    kind = "ams"

    _tag = 4
    _prefetch = False  # unpacking is memory-bound: threads only add contention

    def __init__(self, d: int, b: int, seed: int = 0, force_blocks: bool = False, memory_gb: float | None = None):
        self._table = sign_table(1.0 / math.sqrt(b))
        self._device_tables: dict = {}
        super().__init__(d=d, b=b, seed=seed, force_blocks=force_blocks, memory_gb=memory_gb)

    def _make_block(self, k: int, device=None) -> torch.Tensor:
        r0, r1 = self._block_range(k)
        n = (r1 - r0) * self.d
        rng = np.random.default_rng(block_seed(self.seed, k, self._tag))
        packed = np.frombuffer(rng.bytes((n + 7) // 8), dtype=np.uint8)
        device = torch.device("cpu") if device is None else torch.device(device)
        if device.type == "cpu":
            signs = torch.from_numpy(np.take(self._table, packed, axis=0))
        else:  # unpack on the device: ship 1 bit per entry, same table, same values
            key = str(device)
            if key not in self._device_tables:
                self._device_tables[key] = torch.from_numpy(self._table).to(device)
            idx = torch.from_numpy(packed.astype(np.int32)).to(device)
            signs = self._device_tables[key].index_select(0, idx)
        return signs.reshape(-1)[:n].reshape(r1 - r0, self.d)
