"""LPIPS-Alex (Zhang et al. 2018) from the local torch cache only: never downloads.

When torchvision's AlexNet ImageNet weights are not cached, :func:`lpips_distance`
returns ``(None, note)`` with a one-sentence note naming the missing file.
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F

from .base import MetricsError, check_pair

#: The file torchvision's AlexNet_Weights.IMAGENET1K_V1 downloads (its ``url`` basename).
ALEXNET_WEIGHTS_FILE = "alexnet-owt-7be5be79.pth"
#: LPIPS-Alex needs at least 31 pixels per side; smaller images are upsampled to this.
LPIPS_MIN_SIDE = 32

_LPIPS_CACHE: dict = {}  # device -> the pretrained module, built once per device


def alexnet_weights_path() -> str:
    """Where torchvision keeps AlexNet_Weights.IMAGENET1K_V1: <torch.hub.get_dir()>/checkpoints/<url basename>."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", ALEXNET_WEIGHTS_FILE)


def _missing_weights_note(path: str) -> str:
    """The one-sentence note returned instead of an LPIPS value when the backbone is absent."""
    return (f"LPIPS not computed: AlexNet backbone weights not found in the local torch cache "
            f"at {path}; see docs/runs.md, 'LPIPS weights'")


def lpips_missing() -> str:
    """Why LPIPS cannot be computed on this machine, in one sentence ("" when the AlexNet weights are cached)."""
    path = alexnet_weights_path()
    return "" if os.path.isfile(path) else _missing_weights_note(path)


def lpips_module(pnet_rand: bool = False, device="cpu"):
    """lpips.LPIPS(net='alex') (Zhang et al. 2018) with the package's shipped linear layers; pnet_rand=True gives a
    randomly initialised backbone."""
    # The lpips package (and the torchvision models it pulls in) is a heavy import: only when LPIPS is wanted.
    import lpips

    if not pnet_rand:
        path = alexnet_weights_path()
        if not os.path.isfile(path):
            raise MetricsError(_missing_weights_note(path))
    key = str(torch.device(device))
    if not pnet_rand and key in _LPIPS_CACHE:
        return _LPIPS_CACHE[key]
    with warnings.catch_warnings():  # torchvision's deprecation notes about `pretrained=`
        warnings.simplefilter("ignore", UserWarning)
        module = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=pnet_rand, verbose=False)
    module = module.to(device).eval()
    for p in module.parameters():
        p.requires_grad_(False)
    if not pnet_rand:
        _LPIPS_CACHE[key] = module
    return module


def _lpips_with(module, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """LPIPS per image with ``module``: [0,1] -> [-1,1], grey repeated to RGB, sides < 32 px upsampled bilinearly to
    32."""
    check_pair(x_hat, x)
    if x.shape[1] not in (1, 3):
        raise MetricsError(f"LPIPS needs 1 or 3 channels, got {x.shape[1]}")
    dev = next(module.parameters()).device
    a, y = x_hat.to(dev, torch.float32), x.to(dev, torch.float32)
    if a.shape[1] == 1:
        a, y = a.repeat(1, 3, 1, 1), y.repeat(1, 3, 1, 1)
    h, w = a.shape[-2:]
    if h < LPIPS_MIN_SIDE or w < LPIPS_MIN_SIDE:
        size = (max(h, LPIPS_MIN_SIDE), max(w, LPIPS_MIN_SIDE))
        a = F.interpolate(a, size=size, mode="bilinear", align_corners=False)
        y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
    return module(2 * a - 1, 2 * y - 1).reshape(-1)


def lpips_distance(x_hat: torch.Tensor, x: torch.Tensor, device="cpu"):
    """LPIPS-Alex per image (Zhang et al. 2018) as (Tensor (B,), ""), or (None, note) when the AlexNet weights are not
    cached locally; never downloads."""
    check_pair(x_hat, x)
    missing = lpips_missing()
    if missing:
        return None, missing
    module = lpips_module(pnet_rand=False, device=device)
    with torch.no_grad():
        return _lpips_with(module, x_hat, x).cpu(), ""


__all__ = ["ALEXNET_WEIGHTS_FILE", "LPIPS_MIN_SIDE", "alexnet_weights_path", "lpips_missing", "lpips_module",
           "lpips_distance"]
