"""Run folders: ``results/runs/<timestamp>-<model>-<sketch>/``.

A run folder holds ``config.json``, ``metrics.json``, ``trace.csv``,
``reconstruction.png`` and ``convergence.png``, each written atomically.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def default_run_dir(model: str, sketch: str, root: str | os.PathLike = "results/runs") -> Path:
    """results/runs/<YYYYmmdd-HHMMSS>-<model>-<sketch>/ (a suffix keeps it unique)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{stamp}-{model}-{sketch}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path
