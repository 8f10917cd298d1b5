"""Image quality per image: MSE, PSNR, SSIM (and SSIM's Gaussian window), as pure functions.

Images are torch tensors (B, C, H, W) in [0, 1]; each metric returns a tensor of
shape (B,) and is differentiable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import MetricsError, check_pair

#: Lower bound on the MSE inside :func:`psnr`, so identical images give a finite value.
PSNR_MSE_FLOOR = 1e-20

SSIM_WIN = 11
SSIM_SIGMA = 1.5
SSIM_K1, SSIM_K2 = 0.01, 0.03


def in_range(x_hat: torch.Tensor) -> torch.Tensor:
    """The images as scored: clamped to [0, 1], with a pixel that is not finite (NaN, or ±inf, which clamping would
    turn into 0 or 1) kept as NaN, so that a non-finite reconstruction scores as not a number."""
    return torch.where(torch.isfinite(x_hat), x_hat.clamp(0, 1), torch.nan)


def mse(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image, mean over C, H, W; shape (B,); in float32 at least (float16's squares of
    differences below 2.4e-4 would be 0, and its PSNR overflow above 48 dB), float64 for float64 images."""
    check_pair(x_hat, x)
    dtype = scoring_dtype(x_hat, x)
    return (x_hat.to(dtype) - x.to(dtype)).pow(2).flatten(1).mean(1)


def scoring_dtype(x_hat: torch.Tensor, x: torch.Tensor) -> torch.dtype:
    """The dtype the scores are computed in: the pair's, at least float32."""
    return torch.promote_types(torch.promote_types(x_hat.dtype, x.dtype), torch.float32)


def psnr(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """PSNR per image, 10 log10(range^2 / mse) (Gonzalez & Woods); mse is clamped at 1e-20, so at most 200 dB for
    range 1, never inf."""
    m = mse(x_hat, x).clamp_min(PSNR_MSE_FLOOR)
    return 10.0 * torch.log10(data_range ** 2 / m)


def gaussian_window(dtype, device) -> torch.Tensor:
    """Normalised 1-D Gaussian of 11 taps, sigma 1.5 (Wang et al. 2004; as scipy.ndimage.gaussian_filter with
    truncate 3.5)."""
    r = (SSIM_WIN - 1) // 2
    t = torch.arange(-r, r + 1, dtype=torch.float64)
    g = torch.exp(-0.5 * (t / SSIM_SIGMA) ** 2)
    return (g / g.sum()).to(dtype=dtype, device=device)


def ssim(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """SSIM per image (Wang et al. 2004, IEEE TIP 13(4)), Gaussian window 11 taps, sigma 1.5, K1=0.01, K2=0.03,
    population covariances, mean over the valid (border-cropped) map and channels, as
    skimage.metrics.structural_similarity.  The statistics are computed in float64 whatever the images' dtype (as
    skimage does): in float32 the variances' E[a^2] - mu^2 cancel, and near-identical photographs (float32 values 1e-7
    to 1e-5 apart) scored above SSIM's maximum of 1.  The result has :func:`scoring_dtype`."""
    check_pair(x_hat, x)
    b, c, h, w = x.shape
    if h < SSIM_WIN or w < SSIM_WIN:
        raise MetricsError(f"SSIM needs images of at least {SSIM_WIN}x{SSIM_WIN} pixels, got {h}x{w}")
    a, y = x_hat.to(torch.float64), x.to(torch.float64)
    g = gaussian_window(torch.float64, x.device)
    # Separable filter on the 5 statistics, each channel separately; "valid" convolution
    # equals skimage's filtering followed by cropping (win-1)//2 border pixels.
    stack = torch.cat([a, y, a * a, y * y, a * y], dim=1).reshape(b * 5 * c, 1, h, w)
    stack = F.conv2d(stack, g.view(1, 1, 1, -1))
    stack = F.conv2d(stack, g.view(1, 1, -1, 1))
    mu_a, mu_y, e_aa, e_yy, e_ay = stack.reshape(b, 5, c, h - SSIM_WIN + 1, w - SSIM_WIN + 1).unbind(1)
    var_a = e_aa - mu_a * mu_a
    var_y = e_yy - mu_y * mu_y
    cov = e_ay - mu_a * mu_y
    c1 = (SSIM_K1 * data_range) ** 2
    c2 = (SSIM_K2 * data_range) ** 2
    s = ((2 * mu_a * mu_y + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_y ** 2 + c1) * (var_a + var_y + c2))
    return s.flatten(1).mean(1).to(scoring_dtype(x_hat, x))


__all__ = ["in_range", "PSNR_MSE_FLOOR", "SSIM_WIN", "SSIM_SIGMA", "SSIM_K1", "SSIM_K2",
           "mse", "psnr", "gaussian_window", "ssim"]
