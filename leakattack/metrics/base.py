"""The metrics' one error and the shape check every metric runs first."""

from __future__ import annotations

import torch

from leakattack.errors import UserError


class MetricsError(UserError):
    """Inputs a caller can fix: mismatched shapes, wrong rank, images too small."""


def check_pair(x_hat: torch.Tensor, x: torch.Tensor) -> None:
    """Raise MetricsError unless both are 4-D floating-point tensors of the same, non-empty shape."""
    if not isinstance(x_hat, torch.Tensor) or not isinstance(x, torch.Tensor):
        raise MetricsError("images must be torch tensors of shape (B, C, H, W)")
    if x_hat.shape == x.shape and x.ndim != 4:  # a victim of other inputs (tabular rows, sequences)
        raise MetricsError(f"the metrics score images of shape (B, C, H, W), and these inputs have shape "
                           f"{tuple(x.shape)}: compare such inputs directly, e.g. by the relative error "
                           "(x_hat - x).norm() / x.norm()")
    if x.ndim != 4 or x_hat.shape != x.shape:
        raise MetricsError(f"images must share one shape (B, C, H, W); got "
                           f"{tuple(x_hat.shape)} and {tuple(x.shape)}")
    if x.numel() == 0:
        raise MetricsError(f"the images are empty (shape {tuple(x.shape)}): there is nothing to score")
    for what, t in (("the reconstruction", x_hat), ("the truth", x)):
        if not t.is_floating_point():
            raise MetricsError(f"{what} is {str(t.dtype)[6:]}; the metrics take floating-point images in [0, 1] "
                               "(uint8 pixels: x.float() / 255)")


__all__ = ["MetricsError", "check_pair"]
