"""Figures of one run folder: truth | start | reconstruction, and the loss curve."""

from __future__ import annotations

import numpy as np

from .common import plt, save, to_hwc


def reconstruction_figure(path, truth, start, recon, psnr_each, ssim_each, title: str = "") -> None:
    """Rows: images of the batch; columns: truth | start | reconstruction (PSNR/SSIM in the label)."""
    n = truth.shape[0]
    fig, axes = plt.subplots(n, 3, figsize=(6.0, 2.1 * n + 0.4), squeeze=False)
    for i in range(n):
        cells = [(truth[i], "truth"), (start[i], "start"),
                 (recon[i], f"reconstruction\nPSNR {psnr_each[i]:.1f} dB, SSIM {ssim_each[i]:.3f}")]
        for ax, (img, label) in zip(axes[i], cells):
            a = to_hwc(img)
            ax.imshow(a, cmap="gray" if a.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(label, fontsize=8)
            ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    save(fig, path)


def convergence_figure(path, losses, title: str = "") -> None:
    """log10 L_R(x_t) against step t."""
    y = np.asarray(losses, dtype=float)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), lw=1.2)
    ax.set_xlabel("step t")
    ax.set_ylabel(r"$L_R(x_t)$")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    save(fig, path)
