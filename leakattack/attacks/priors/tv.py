"""Total variation, the image prior of Inverting Gradients (Geiping et al. 2020)."""

from __future__ import annotations

import torch

from ...errors import UserError


def _one_axis(what: str) -> UserError:
    """The refusal of TV for inputs of fewer than two axes; ``what`` names them."""
    return UserError(f"TV sums the differences of neighbouring pixels along an image's two axes, and {what}: "
                     f"give TV no weight (tv 0) for such a model")


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV of a batch of images (B, C, H, W): mean |x_{i+1,j} - x_{i,j}| + mean |x_{i,j+1} - x_{i,j}|
    (Rudin et al. 1992); an axis of one pixel has no neighbours and adds nothing."""
    if x.dim() < 3:
        raise _one_axis(f"a batch of shape {tuple(x.shape)} holds inputs of one axis")
    terms = [(x[..., 1:, :] - x[..., :-1, :]).abs().mean()] if x.shape[-2] > 1 else []
    terms += [(x[..., :, 1:] - x[..., :, :-1]).abs().mean()] if x.shape[-1] > 1 else []
    return sum(terms[1:], terms[0]) if terms else x.new_zeros(())


class TotalVariation:
    """weight * TV(x), added to the matching loss; with ``obs``, inputs of fewer than two axes are refused in one
    sentence (TV would difference the examples of the batch)."""

    def __init__(self, weight: float, obs=None):
        self.weight = float(weight)
        shape = tuple(obs.victim.input_shape) if obs is not None else ()
        if obs is not None and self.weight > 0 and len(shape) < 2:
            raise _one_axis(f"model '{obs.victim.name}' takes inputs of shape {shape}")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * total_variation(x)
