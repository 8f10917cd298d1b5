"""Total variation, the image prior of Inverting Gradients (Geiping et al. 2020)."""

from __future__ import annotations

import torch


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV: mean |x_{i+1,j} - x_{i,j}| + mean |x_{i,j+1} - x_{i,j}| (Rudin et al. 1992)."""
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()


class TotalVariation:
    """weight * TV(x), added to the matching loss (``obs`` is not needed)."""

    def __init__(self, weight: float, obs=None):
        self.weight = float(weight)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * total_variation(x)
