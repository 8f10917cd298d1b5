"""The Walsh-Hadamard transform H_n x (Sylvester order) along the last dimension, on every device.

Two implementations of the same linear map: the compiled kernel (:mod:`.kernels`), in place
on contiguous CPU float32/float64 rows and cache-blocked so that n = 2^24 takes two passes
over memory; and matrix passes in torch (:func:`hadamard_torch`) for GPUs, other dtypes,
and the CPU when the kernel is missing or switched off.
"""

from __future__ import annotations

import math

import torch

from .kernels import applies, buffer, ext, threads

_SYLVESTER: dict = {}


def _sylvester(r: int, dtype, device) -> torch.Tensor:
    """The unnormalised r x r Sylvester-Hadamard matrix H_r = H_2 (x) ... (x) H_2 (cached)."""
    key = (r, dtype, device)
    if key not in _SYLVESTER:
        h = torch.ones(1, 1, dtype=dtype, device=device)
        while h.shape[0] < r:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _SYLVESTER[key] = h
    return _SYLVESTER[key]


def _check_length(n: int) -> None:
    if n < 1 or n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")


def hadamard_torch(x: torch.Tensor, radix_log: int = 3, first_log: int = 5) -> torch.Tensor:
    """H_n x along the last dim (entries +-1) by matrix passes: H_32 on the five lowest index bits, then H_8 on three
    bits at a time.

    H_n = H_2 (x) ... (x) H_2, so any grouping of the log2(n) bits gives the same
    transform; small fixed radices keep O(n log n) work with a fraction of the
    kernel launches of the radix-2 butterfly (measured fastest in torch on CPU in float64).
    """
    n = x.shape[-1]
    _check_length(n)
    k = n.bit_length() - 1
    y = x.reshape(-1, n)
    rows, h, done = y.shape[0], 1, 0
    while done < k:
        j = min(first_log if h == 1 else radix_log, k - done)
        r = 1 << j
        H = _sylvester(r, y.dtype, y.device)
        if h == 1:  # the innermost bits: one (rows*n/r, r) x (r, r) product (H_r is symmetric)
            y = (y.reshape(-1, r) @ H).view(rows, n)
        else:
            y = torch.matmul(H, y.view(rows, n // (r * h), r, h)).view(rows, n)
        h, done = h * r, done + j
    return y.reshape(x.shape)


def hadamard_owned(z: torch.Tensor) -> torch.Tensor:
    """H_n z along the last dim for a tensor the caller owns and no longer needs: the kernel overwrites a
    contiguous CPU float32/float64 ``z`` and returns it; otherwise a new tensor.  Use the return value."""
    n = z.shape[-1]
    _check_length(n)
    if applies(z) and z.is_contiguous() and not z.is_neg() and z.numel():
        assert ext is not None  # applies(): the kernels are compiled
        ext.transform(buffer(z), n, threads(z.numel()))
        return z
    return hadamard_torch(z)


def _scaled_copy(x: torch.Tensor, scale: float | None) -> torch.Tensor:
    """x * scale (or x) as a new C-contiguous tensor in one pass, whatever the layout of ``x``."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return out.copy_(x) if scale is None else torch.mul(x, scale, out=out)


def _transform(x: torch.Tensor, scale: float | None) -> torch.Tensor:
    if applies(x):
        return hadamard_owned(_scaled_copy(x, scale))
    y = hadamard_torch(x)
    return y if scale is None else y * scale


class _Hadamard(torch.autograd.Function):
    """y = H_n x * scale; H_n is symmetric, so the backward is the same map."""

    @staticmethod
    def forward(ctx, x, scale):
        _check_length(x.shape[-1])
        ctx.scale = scale
        return _transform(x.detach(), scale)

    @staticmethod
    def backward(ctx, g):
        return _Hadamard.apply(g, ctx.scale), None


def hadamard_unnormalised(x: torch.Tensor) -> torch.Tensor:
    """H_n x along the last dim (entries +-1, no 1/sqrt(n)); ``x`` is left untouched; differentiable."""
    return _Hadamard.apply(x, None)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Normalised fast Walsh-Hadamard transform H x / sqrt(n) along the last dim, natural (Sylvester) order; butterfly
    of Fino & Algazi, IEEE Trans. Computers C-25(11), 1976."""
    _check_length(x.shape[-1])
    return _Hadamard.apply(x, 1.0 / math.sqrt(x.shape[-1]))


__all__ = ["fwht", "hadamard_unnormalised", "hadamard_owned", "hadamard_torch"]
