"""Every plot, drawn from stored results only (figures never re-run attacks).

Run figures: :func:`reconstruction_figure` (truth | start | reconstruction) and
:func:`convergence_figure` (log L_R against step).  Files are written atomically.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .results import atomic_write_bytes  # noqa: E402


def save(fig, path) -> None:
    """Write a figure (format from the suffix: .png or .pdf) atomically and close it."""
    buf = io.BytesIO()
    fmt = str(path).rsplit(".", 1)[-1]
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def to_hwc(img) -> np.ndarray:
    """(C, H, W) tensor/array in [0, 1] -> (H, W, C) or (H, W) numpy for imshow."""
    a = np.asarray(img.detach().cpu() if hasattr(img, "detach") else img, dtype=np.float32)
    a = np.clip(a, 0, 1).transpose(1, 2, 0)
    return a[..., 0] if a.shape[-1] == 1 else a


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
