"""Figures, one module per kind, drawn from stored results only (never re-running an attack).

``run``: a run folder's reconstruction and convergence; ``sweep``: a sweep
folder's grid, metrics against strength, privacy-utility frontier and phase
transition; ``training``: accuracy against floats sent over training runs.
Imports nothing of leakattack but :mod:`leakattack.results`.
"""

from __future__ import annotations

from .common import plt, save, save_both, to_hwc
from .run import convergence_figure, reconstruction_figure
from .sweep import metrics_vs_strength, phase_transition, privacy_utility_frontier, reconstruction_grid, sweep_figures
from .training import accuracy_figure

__all__ = [
    "plt", "save", "save_both", "to_hwc",
    "reconstruction_figure", "convergence_figure",
    "sweep_figures", "reconstruction_grid", "metrics_vs_strength", "privacy_utility_frontier", "phase_transition",
    "accuracy_figure",
]
