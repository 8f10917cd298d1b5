"""Figures of federated training runs, from their stored ``train.jsonl`` files."""

from __future__ import annotations

from pathlib import Path

from ..results import read_jsonl
from .common import plt, save


def accuracy_figure(root) -> Path:
    """Test accuracy against cumulative uplink floats per client, one line per run folder under ``root``."""
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for f in sorted(Path(root).glob("*/train.jsonl")):
        rows = read_jsonl(f)
        if rows:
            ax.plot([r["floats_cum"] for r in rows], [r["test_acc"] for r in rows], lw=1.3, label=f.parent.name)
    ax.set_xscale("log")
    ax.set_xlabel("floats sent per client (cumulative uplink)")
    ax.set_ylabel("test accuracy")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    path = Path(root) / "accuracy_vs_floats.png"
    save(fig, path)
    return path
