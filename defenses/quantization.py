"""k-bit stochastic rounding, unbiased (Alistarh et al., "QSGD", NeurIPS 2017, Sec. 3.1), onto 2^k uniform points,
2^k - 1 intervals, of [-max|v|, max|v|]; an exact zero stays zero, as QSGD's zero level keeps it (an entry a prune
removed is not sent)."""

from __future__ import annotations

import torch

from .base import AFTER, Transform, seeded


def stochastic_round(v: torch.Tensor, bits: int, u: torch.Tensor) -> torch.Tensor:
    """Round v onto 2^bits - 1 intervals of [-s, s], s = max|v|, up with probability the remainder (E = v);
    u ~ U[0,1) like v.  An entry that is exactly 0 stays 0 (unbiased too): the grid's 2^bits points leave out 0, and a
    pruned entry rounded onto them would be sent as ±s/(2^bits - 1), no longer pruned."""
    s = v.abs().max()
    if s == 0:
        return v
    levels = 2 ** bits - 1
    t = (v / s + 1) / 2 * levels  # in [0, levels]
    low = t.floor()
    q = low + (u < (t - low)).to(v.dtype)
    return torch.where(v == 0, v, (q / levels * 2 - 1) * s)


class Quantize(Transform):
    """Round every entry stochastically onto 2^bits uniform points (2^bits - 1 intervals) of [-max|v|, max|v|],
    unbiased (QSGD); an exact zero stays zero."""

    name = "quantize"
    rounds = True
    # beyond 32 bits the levels are finer than float32 resolution: nothing is quantised any more
    schema = {"bits": (int, "an integer in [1, 32]", lambda k: 1 <= k <= 32)}
    default_placement = AFTER  # quantisation compresses what is sent: the sketch

    def __call__(self, v, gen):
        u = torch.rand(v.shape, generator=seeded(gen, self.spec()), dtype=torch.float64)
        u = u.to(device=v.device, dtype=v.dtype)
        return stochastic_round(v, self.params["bits"], u)
