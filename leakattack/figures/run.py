"""Figures of one run folder: the batch beside its reconstruction, and the loss curve."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping

import numpy as np

from ..rebuilt import NOT_REBUILT, REBUILT, images_words, why_not_rebuilt
from .common import fixed, plt, save, to_hwc

#: the y label of the convergence figure: the quantity the attack minimised, by objective
LOSS_LABELS = {"l2": r"$L_R(x_t) = \|R\nabla_w F(x_t) - y\|^2$", "cosine": r"$1 - \cos(R\nabla_w F(x_t),\, y)$",
               "closed-form": "relative residual (closed-form solve)"}
#: batches up to this size are drawn one row per image (truth | start | reconstruction); larger ones as a grid of pairs
MAX_ROWS = 4
#: resolution figures are saved at (common.save), used to size images in saved pixels
DPI = 150
#: the convergence figure's title is wrapped to lines of at most this many characters (its 9 pt over a 5 in figure)
TITLE_CHARS = 70
#: widest grid of pairs, in inches (about 1800 px at DPI)
MAX_WIDTH_IN = 12.0


def verdict_line(m: Mapping) -> str:
    """A run's verdict (a metrics.json dict) for its figure's title, with the better baseline's PSNR and SSIM, so
    that a copied figure does not read as a plain score: ``not rebuilt (PSNR within 1 dB of the data set's mean
    image): better baseline 13.64 dB / 0.188``, with how many of a batch's images are rebuilt on their own where that
    differs from the verdict (``rebuilt (2 of 4 images): ...``); a run that attacked nothing says so; "" without a
    verdict."""
    if m.get("attacked") is False:
        return "nothing attacked: the image shown as returned is the attack's start"
    verdict = m.get("verdict")
    if verdict is None:
        return ""
    bp, bs = m.get("baseline_psnr"), m.get("baseline_ssim")
    base = (f"better baseline {fixed(bp, '.2f')} dB / {fixed(bs, '.3f')}" if bp is not None and bs is not None
            else "no baseline scored")
    why = why_not_rebuilt(m)[0] if verdict == NOT_REBUILT else ""
    images = images_words(m)  # a batch whose images on their own disagree with its verdict on the means
    why = "; ".join(w for w in (why, images) if w)
    return f"{verdict}{f' ({why})' if why else ''}: {base}"


def reconstruction_figure(path, truth, start, recon, psnr_each, ssim_each, title: str = "", verdict: str = "",
                          returned: str = "reconstruction", verdict_each=None, indices=None) -> None:
    """The attacked batch beside its reconstruction, in ground-truth order.

    Up to :data:`MAX_ROWS` images: one row each, truth | start | reconstruction
    (PSNR/SSIM in the label); ``start`` None (a closed-form attack, which has no
    start) leaves the start out.  Larger batches: a near-square grid of pairs, truth
    left and reconstruction right, with the image's index and PSNR under each pair
    and the means in the title; the start images are left out.  ``verdict``
    (:func:`verdict_line`) is a line of the title; ``returned`` names the
    reconstruction's panel (the start itself where nothing was attacked);
    ``verdict_each`` (each image's own verdict, metrics.json's) marks, in a batch
    whose images' verdicts differ, the images rebuilt on their own; ``indices`` (the data set's index of each
    truth image, config.json's ``image_indices``) is shown beside each image's place in the batch (the number the
    summary's notes and the report use).
    Constrained layout keeps every title and label clear of the images at any
    batch size.
    """
    each = list(verdict_each or [])
    marks = [" (rebuilt)" if v == REBUILT else "" for v in each] if len(set(each)) > 1 else [""] * truth.shape[0]
    names = [str(i) for i in indices] if indices is not None and len(indices) == truth.shape[0] else None
    if truth.shape[0] <= MAX_ROWS:
        fig = _rows_figure(truth, start, recon, psnr_each, ssim_each, title, verdict, returned, marks, names)
    else:
        fig = _pairs_figure(truth, recon, psnr_each, ssim_each, title, verdict, marks, names)
    save(fig, path)


def _shown(v, spec: str, unit: str = "") -> str:
    """A score as the figure prints it: ``n/a`` for one that is not a number (a non-finite reconstruction's)."""
    return "n/a" if v is None or not math.isfinite(v) else f"{fixed(v, spec)}{unit}"


def _interpolation(image_px: int, shown_px: float) -> str:
    """Blocky pixels when an image is enlarged at least twice, a smoothing filter when shrunk or barely enlarged."""
    return "nearest" if shown_px >= 2 * image_px else "antialiased"


def _show(ax, a: np.ndarray, interpolation: str) -> None:
    ax.imshow(a, cmap="gray" if a.ndim == 2 else None, vmin=0, vmax=1, interpolation=interpolation)


def _rows_figure(truth, start, recon, psnr_each, ssim_each, title: str, verdict: str = "",
                 returned: str = "reconstruction", marks=None, names=None):
    n, panels = truth.shape[0], 2 if start is None else 3
    width = 2.0 * panels
    head = "\n".join(line for text in (title, verdict) if text for line in textwrap.wrap(text, int(14 * width)))
    fig, axes = plt.subplots(n, panels, figsize=(width, 2.1 * n + 0.25 + 0.18 * (head.count("\n") + 1)),
                             squeeze=False, layout="constrained")
    interpolation = _interpolation(truth.shape[-1], 1.8 * DPI)  # a panel is about 1.8 in wide
    for i in range(n):
        place = "" if n == 1 else f" {i}"
        named = f"truth{place} (data set index {names[i]})" if names else f"truth{place}"
        cells = [(truth[i], named), *([] if start is None else [(start[i], "start")]),
                 (recon[i], f"{returned}{marks[i] if marks else ''}\nPSNR {_shown(psnr_each[i], '.1f', ' dB')}, "
                            f"SSIM {_shown(ssim_each[i], '.3f')}")]
        for ax, (img, label) in zip(axes[i], cells):
            _show(ax, to_hwc(img), interpolation)
            ax.set_title(label, fontsize=8)
            ax.axis("off")
    if head:
        fig.suptitle(head, fontsize=9)
    return fig


def _pairs_figure(truth, recon, psnr_each, ssim_each, title: str, verdict: str = "", marks=None, names=None):
    n, _, h, w = truth.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    gap = max(1, w // 16)  # white pixels between truth and reconstruction
    pair_px = 2 * w + gap
    # about three saved pixels per image pixel for small images, never wider than MAX_WIDTH_IN in all
    pair_in = min(MAX_WIDTH_IN / cols, max(1.2, 3 * pair_px / DPI))
    width = max(6.0, cols * pair_in + 0.2)
    psnr, ssim = np.asarray(psnr_each, dtype=float), np.asarray(ssim_each, dtype=float)
    where = "its place in the batch (#: the data set's index)" if names else "its place in the batch"
    legend = (f"{n} images, each pair truth | reconstruction with {where} and PSNR below; mean PSNR "
              f"{_shown(psnr.mean(), '.1f', ' dB')}, SSIM {_shown(ssim.mean(), '.3f')} (start images not shown)")
    chars = int(14 * width)  # characters of the 9 pt title that fit in the figure's width (about 16 per inch)
    head = "\n".join(line for text in (title, verdict, legend) if text for line in textwrap.wrap(text, chars))
    # rows a little shorter than the images' width allows: height binds, so no band opens under the title
    height = rows * (pair_in * h / pair_px + 0.15) + 0.15 * (head.count("\n") + 1) + 0.12
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained")
    # thin pads keep the title on the images; the space between rows (hspace) keeps each label with its pair
    fig.get_layout_engine().set(h_pad=0.01, hspace=0.08)
    interpolation = _interpolation(pair_px, pair_in * DPI)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            fig.delaxes(ax)
            continue
        t, r = to_hwc(truth[i]), to_hwc(recon[i])
        _show(ax, np.concatenate([t, np.ones((h, gap, *t.shape[2:]), dtype=t.dtype), r], axis=1), interpolation)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        index = f" (#{names[i]})" if names else ""
        ax.set_xlabel(f"{i}{index}: {_shown(psnr[i], '.1f', ' dB')}{marks[i] if marks else ''}", fontsize=6,
                      labelpad=1.5)
    fig.suptitle(head, fontsize=9)
    return fig


def convergence_figure(path, losses, title: str = "", objective: str = "l2") -> None:
    """The minimised loss against step t, log scale: L_R for the ``l2`` objective, 1 − cos for ``cosine``, the
    relative residuals of a ``closed-form`` attack's steps.  A loss of exactly 0, which a log scale cannot place, is
    marked at the axis' foot (a triangle) and counted in the title, not left out."""
    y = np.asarray(losses, dtype=float)
    # no constrained layout: one axes needs none (the saved bounding box is fitted to its labels anyway), and
    # it would lay the figure out again on each of the two draws of the save
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), lw=1.2, marker="o" if len(y) == 1 else None)
    zeros = np.flatnonzero(y == 0)
    if zeros.size:  # exact zeros: at the foot of the axis, where the curve cannot reach them
        ax.plot(zeros, np.zeros_like(zeros, dtype=float), "v", color="C3", transform=ax.get_xaxis_transform(),
                clip_on=False, ms=6)
        title = f"{title}\n" if title else ""
        title += f"{zeros.size} step(s) at exactly 0 (marked at the foot: a log scale has no 0)"
    if len(y) < 2:  # a closed-form attack, or a run that took no step: no curve to draw
        value = f"{y[0]:.3e}" if len(y) and np.isfinite(y[0]) else "not finite"
        ax.text(0.5, 0.75, f"one value ({value}): no iterations to draw", transform=ax.transAxes, ha="center",
                va="center", fontsize=8, color="dimgrey")
        ax.set_xlim(-1, 1)  # one step, 0, at the middle of whole steps
    ax.set_xlabel("step t")
    from matplotlib.ticker import MaxNLocator  # imported with pyplot, above

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at 0.5 or -0.04
    ax.set_ylabel(LOSS_LABELS.get(objective, f"{objective} loss"))
    ax.grid(True, which="both", alpha=0.3)
    if title:  # wrapped to the axes' width (a defense's spec and ε make one line wider than the figure)
        ax.set_title("\n".join(part for line in title.split("\n") for part in textwrap.wrap(line, TITLE_CHARS)),
                     fontsize=9)
    save(fig, path)
