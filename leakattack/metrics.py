"""Reconstruction quality: MSE, PSNR, SSIM, LPIPS, label accuracy and batch matching.

Images are torch tensors (B, C, H, W) in [0, 1].  Per-image metrics return a
tensor of shape (B,); :func:`score` matches a reconstructed batch to the ground
truth (Hungarian algorithm on pairwise MSE) and returns JSON-ready numbers.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import torch
import torch.nn.functional as F


class MetricsError(ValueError):
    """Inputs a caller can fix: mismatched shapes, wrong rank, images too small."""


#: Lower bound on the MSE inside :func:`psnr`, so identical images give a finite value.
PSNR_MSE_FLOOR = 1e-20

_SSIM_WIN = 11
_SSIM_SIGMA = 1.5
_SSIM_K1, _SSIM_K2 = 0.01, 0.03

#: The file torchvision's AlexNet_Weights.IMAGENET1K_V1 downloads (its ``url`` basename).
ALEXNET_WEIGHTS_FILE = "alexnet-owt-7be5be79.pth"
#: LPIPS-Alex needs at least 31 pixels per side; smaller images are upsampled to this.
LPIPS_MIN_SIDE = 32

_LPIPS_CACHE: dict = {}


def _check_pair(x_hat: torch.Tensor, x: torch.Tensor) -> None:
    """Raise MetricsError unless both are 4-D tensors of the same shape."""
    if not isinstance(x_hat, torch.Tensor) or not isinstance(x, torch.Tensor):
        raise MetricsError("images must be torch tensors of shape (B, C, H, W)")
    if x.ndim != 4 or x_hat.shape != x.shape:
        raise MetricsError(f"images must share one shape (B, C, H, W); got "
                           f"{tuple(x_hat.shape)} and {tuple(x.shape)}")


def mse(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image, mean over C, H, W; shape (B,)."""
    _check_pair(x_hat, x)
    return (x_hat - x).pow(2).flatten(1).mean(1)


def psnr(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """PSNR per image, 10 log10(range^2 / mse) (Gonzalez & Woods); mse is clamped at 1e-20, so at most 200 dB for range 1, never inf."""
    m = mse(x_hat, x).clamp_min(PSNR_MSE_FLOOR)
    return 10.0 * torch.log10(data_range ** 2 / m)


def _gaussian_window(dtype, device) -> torch.Tensor:
    """Normalised 1-D Gaussian of 11 taps, sigma 1.5 (as scipy.ndimage.gaussian_filter with truncate 3.5)."""
    r = (_SSIM_WIN - 1) // 2
    t = torch.arange(-r, r + 1, dtype=torch.float64)
    g = torch.exp(-0.5 * (t / _SSIM_SIGMA) ** 2)
    return (g / g.sum()).to(dtype=dtype, device=device)


def ssim(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """SSIM per image (Wang et al. 2004, IEEE TIP 13(4)), Gaussian window 11 taps, sigma 1.5, K1=0.01, K2=0.03, population covariances, mean over the valid (border-cropped) map and channels, as skimage.metrics.structural_similarity."""
    _check_pair(x_hat, x)
    b, c, h, w = x.shape
    if h < _SSIM_WIN or w < _SSIM_WIN:
        raise MetricsError(f"SSIM needs images of at least {_SSIM_WIN}x{_SSIM_WIN} pixels, got {h}x{w}")
    dtype = torch.promote_types(torch.promote_types(x_hat.dtype, x.dtype), torch.float32)
    a, y = x_hat.to(dtype), x.to(dtype)
    g = _gaussian_window(dtype, x.device)
    # Separable filter on the 5 statistics, each channel separately; "valid" convolution
    # equals skimage's filtering followed by cropping (win-1)//2 border pixels.
    stack = torch.cat([a, y, a * a, y * y, a * y], dim=1).reshape(b * 5 * c, 1, h, w)
    stack = F.conv2d(stack, g.view(1, 1, 1, -1))
    stack = F.conv2d(stack, g.view(1, 1, -1, 1))
    mu_a, mu_y, e_aa, e_yy, e_ay = stack.reshape(b, 5, c, h - _SSIM_WIN + 1, w - _SSIM_WIN + 1).unbind(1)
    var_a = e_aa - mu_a * mu_a
    var_y = e_yy - mu_y * mu_y
    cov = e_ay - mu_a * mu_y
    c1 = (_SSIM_K1 * data_range) ** 2
    c2 = (_SSIM_K2 * data_range) ** 2
    s = ((2 * mu_a * mu_y + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_y ** 2 + c1) * (var_a + var_y + c2))
    return s.flatten(1).mean(1)


def alexnet_weights_path() -> str:
    """Where torchvision keeps AlexNet_Weights.IMAGENET1K_V1: <torch.hub.get_dir()>/checkpoints/<url basename>."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", ALEXNET_WEIGHTS_FILE)


def _missing_weights_note(path: str) -> str:
    """The one-sentence note returned instead of an LPIPS value when the backbone is absent."""
    return (f"LPIPS not computed: AlexNet backbone weights not found in the local torch cache "
            f"at {path}; see README 'LPIPS weights'")


def lpips_module(pnet_rand: bool = False, device="cpu"):
    """lpips.LPIPS(net='alex') (Zhang et al. 2018) with the package's shipped linear layers; pnet_rand=True gives a randomly initialised backbone."""
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
    """LPIPS per image with ``module``: [0,1] -> [-1,1], grey repeated to RGB, sides < 32 px upsampled bilinearly to 32."""
    _check_pair(x_hat, x)
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
    """LPIPS-Alex per image (Zhang et al. 2018) as (Tensor (B,), ""), or (None, note) when the AlexNet weights are not cached locally; never downloads."""
    _check_pair(x_hat, x)
    path = alexnet_weights_path()
    if not os.path.isfile(path):
        return None, _missing_weights_note(path)
    module = lpips_module(pnet_rand=False, device=device)
    with torch.no_grad():
        return _lpips_with(module, x_hat, x).cpu(), ""


def label_accuracy(pred, true) -> float:
    """Fraction of positions where the predicted label equals the true label."""
    p = torch.as_tensor(pred).reshape(-1).cpu()
    t = torch.as_tensor(true).reshape(-1).cpu()
    if p.numel() != t.numel() or t.numel() == 0:
        raise MetricsError(f"label accuracy needs two non-empty label lists of one length, got "
                           f"{p.numel()} and {t.numel()}")
    return float((p.long() == t.long()).float().mean())


def match(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Permutation perm with x_hat[perm] aligned to x, by the Hungarian algorithm (Kuhn 1955; scipy linear_sum_assignment) on pairwise MSE."""
    from scipy.optimize import linear_sum_assignment

    _check_pair(x_hat, x)
    a = x_hat.detach().to(torch.float64).flatten(1).cpu()
    y = x.detach().to(torch.float64).flatten(1).cpu()
    cost = torch.cdist(a, y, compute_mode="donot_use_mm_for_euclid_dist").pow(2).div(a.shape[1]).numpy()  # cost[i, j] = mse(x_hat[i], x[j])
    bad = ~np.isfinite(cost)
    if bad.any():  # diverged reconstructions: match them last instead of failing
        finite = cost[~bad]
        cost[bad] = (finite.max() + 1.0) * cost.size if finite.size else 1.0
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(len(rows), dtype=np.int64)
    perm[cols] = rows
    return torch.from_numpy(perm)


def _finite_or_none(v: float):
    """v as a float, or None when it is NaN or infinite (keeps the result JSON-valid)."""
    v = float(v)
    return v if math.isfinite(v) else None


def score(x_hat: torch.Tensor, x: torch.Tensor, labels_hat=None, labels=None,
          with_lpips: bool = True, device="cpu") -> dict:
    """Match x_hat to x (Hungarian on MSE when B > 1), then mean MSE/PSNR/SSIM/LPIPS, label accuracy and per-image lists, as JSON-ready values."""
    _check_pair(x_hat, x)
    x_hat = x_hat.detach()
    x = x.detach().to(x_hat.device)
    b = x.shape[0]
    perm = match(x_hat, x) if b > 1 else torch.zeros(1, dtype=torch.long)
    xm = x_hat[perm.to(x_hat.device)]
    m, p, s = mse(xm, x), psnr(xm, x), ssim(xm, x)
    out = {
        "mse": _finite_or_none(m.mean()),
        "psnr": _finite_or_none(p.mean()),
        "ssim": _finite_or_none(s.mean()),
        "lpips": None,
        "lpips_note": "LPIPS not requested",
        "label_acc": None,
        "psnr_each": [_finite_or_none(v) for v in p.tolist()],
        "ssim_each": [_finite_or_none(v) for v in s.tolist()],
        "match": [int(i) for i in perm.tolist()],
    }
    if with_lpips:
        val, note = lpips_distance(xm, x, device=device)
        out["lpips"] = None if val is None else _finite_or_none(val.mean())
        out["lpips_note"] = note
    if labels_hat is not None:
        if labels is None:
            raise MetricsError("labels_hat was given without the true labels")
        lh = torch.as_tensor(labels_hat).reshape(-1).cpu()
        if lh.numel() != b:
            raise MetricsError(f"labels_hat has {lh.numel()} entries for a batch of {b} images")
        out["label_acc"] = label_accuracy(lh[perm], labels)
    return out
