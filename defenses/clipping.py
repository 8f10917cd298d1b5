"""Clipping: the update to l2 norm C (``clip``), or each example's gradient before averaging (``per_example``,
DP-SGD, Abadi et al. 2016, Alg. 1)."""

from __future__ import annotations

import torch

from .base import BEFORE, Schema, Transform


def clip_by_norm(v: torch.Tensor, C: float) -> torch.Tensor:
    """v * min(1, C / ||v||_2) over the last dimension (Abadi et al. 2016, Alg. 1, 'clip gradient')."""
    norm = v.norm(dim=-1, keepdim=True)
    return v * torch.clamp(C / norm.clamp_min(torch.finfo(v.dtype).tiny), max=1.0)


_C: Schema = {"C": (float, "a positive number", lambda c: c > 0)}


class Clip(Transform):
    """l2-clip the whole message to norm C (default before the sketch: what Lemma H.8 bounds)."""

    name = "clip"
    schema = _C
    bounds_norm = True

    def __call__(self, v, gen):
        return clip_by_norm(v, self.params["C"])

    def only_rescales(self, batch_size: int) -> bool:
        return True  # the whole vector to norm C: a positive factor

    @property
    def C(self) -> float:
        return self.params["C"]


class PerExample(Clip):
    """Clip each example's gradient to norm C, then sum (the channel divides by the batch size after the noise)."""

    name = "per_example"
    placements = (BEFORE,)
    per_example = True

    def __call__(self, v, gen):  # v: (B, d) per-example gradients
        return clip_by_norm(v, self.params["C"]).sum(dim=0)

    def only_rescales(self, batch_size: int) -> bool:
        return batch_size == 1  # a batch's examples shrink by different factors
