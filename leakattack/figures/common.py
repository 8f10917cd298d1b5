"""What every figure shares: the Agg backend, atomic saving, images as arrays."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..errors import signals_held
from ..results import atomic_write_bytes


class _Pyplot:
    """``matplotlib.pyplot`` on the Agg backend, imported on first use (half a second that a run without
    figures, ``leakattack --help`` or ``leakattack list`` should not pay)."""

    module = None

    def __getattr__(self, name):
        if _Pyplot.module is None:
            # held: a Ctrl-C inside matplotlib's import of its C extension (ft2font) raised ImportError, "initialization
            # failed", a traceback where the run stops in one line, and left matplotlib half imported
            with signals_held():
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot

            _Pyplot.module = matplotlib.pyplot
        return getattr(_Pyplot.module, name)


plt = _Pyplot()


def fixed(v: float, spec: str) -> str:
    """``format(v, spec)`` without a minus sign on a value that rounds to zero: an SSIM of -0.0003 at three digits
    reads 0.000, not -0.000 (a sign with no digit to carry it)."""
    text = format(v, spec)
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text.split("e")[0]) else text


def save(fig, path) -> None:
    """Write a figure (format from the suffix: .png or .pdf) atomically and close it."""
    buf = io.BytesIO()
    fmt = str(path).rsplit(".", 1)[-1]
    with signals_held():  # as save_both
        fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight")
        plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def save_both(fig, folder, stem) -> list:
    """Write ``folder/stem.png`` and ``folder/stem.pdf`` atomically, close the figure; returns both paths."""
    paths = []
    with signals_held():  # a Ctrl-C stops the drawing between files, not inside matplotlib's rendering
        for ext in ("png", "pdf"):
            path = Path(folder) / f"{stem}.{ext}"
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=150, bbox_inches="tight")
            atomic_write_bytes(path, buf.getvalue())
            paths.append(path)
        plt.close(fig)
    return paths


def to_hwc(img) -> np.ndarray:
    """(C, H, W) tensor/array in [0, 1] -> (H, W, C) or (H, W) numpy for imshow."""
    a = np.asarray(img.detach().cpu() if hasattr(img, "detach") else img, dtype=np.float32)
    a = np.clip(a, 0, 1).transpose(1, 2, 0)
    return a[..., 0] if a.shape[-1] == 1 else a
