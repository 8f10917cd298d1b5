"""Figures of one run folder: truth | start | reconstruction, and the loss curve."""

from __future__ import annotations

import numpy as np

from .common import plt, save, to_hwc

#: the y label of the convergence figure: the quantity the attack minimised, by objective
LOSS_LABELS = {"l2": r"$L_R(x_t) = \|R\nabla_w F(x_t) - y\|^2$", "cosine": r"$1 - \cos(R\nabla_w F(x_t),\, y)$"}


def reconstruction_figure(path, truth, start, recon, psnr_each, ssim_each, title: str = "") -> None:
    """Rows: images of the batch; columns: truth | start | reconstruction (PSNR/SSIM in the label).

    Constrained layout keeps the title right above the first row and every
    panel title clear of the image above it, whatever the batch size.
    """
    n = truth.shape[0]
    fig, axes = plt.subplots(n, 3, figsize=(6.0, 2.1 * n + 0.4), squeeze=False, layout="constrained")
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


def convergence_figure(path, losses, title: str = "", objective: str = "l2") -> None:
    """The minimised loss against step t, log scale: L_R for the ``l2`` objective, 1 − cos for ``cosine``."""
    y = np.asarray(losses, dtype=float)
    fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), lw=1.2)
    ax.set_xlabel("step t")
    ax.set_ylabel(LOSS_LABELS.get(objective, f"{objective} loss"))
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    save(fig, path)
