"""Sweeps: a grid of attacks from a TOML file, resumable, run on a backend with one writer of the results.

``plan``: the sweep file expanded into validated points (:func:`load_plan`);
``backends``: where the points run (``get_backend`` / ``list_backends``);
``lock``: one sweep per output folder (:class:`FolderLock`);
``runner``: the coordinator (:func:`run_sweep`, :func:`finalize`) that alone
writes ``results.jsonl`` and ``points/*.pt``; the store itself (reading,
summarising) lives in :mod:`leakattack.results.store`.
"""

from __future__ import annotations

from ..results import load_records, read_results, summarize
from .backends import Backend, get_backend, list_backends
from .lock import FolderLock, SweepLocked
from .plan import MAX_POINTS, SWEEP_KEYS, Plan, check_name, check_runnable, effective_params, load_plan, point_key
from .runner import SweepInterrupted, finalize, run_point, run_sweep

__all__ = [
    "Plan", "load_plan", "point_key", "effective_params", "check_name", "check_runnable", "SWEEP_KEYS", "MAX_POINTS",
    "FolderLock", "SweepLocked",
    "Backend", "get_backend", "list_backends",
    "run_point", "run_sweep", "finalize", "SweepInterrupted",
    "read_results", "load_records", "summarize",
]
