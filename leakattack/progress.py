"""Progress bars that draw only where a person watches: on a terminal, or in a notebook.

A bar redrawn into a log file or a pipe is hundreds of kilobytes of carriage
returns, so every bar of the package is made here and stays off when stderr is
not a terminal.  ``LEAKATTACK_PROGRESS=1`` forces bars on (e.g. under a pager
that shows them), ``LEAKATTACK_PROGRESS=0`` forces them off.
"""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm

#: environment variable that overrides the terminal test: 1/0 (also true/false, yes/no, on/off)
FORCE_ENV = "LEAKATTACK_PROGRESS"
_ON, _OFF = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (tqdm.auto then draws a widget, not on stderr)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def show_progress(requested: bool = True, stream=None) -> bool:
    """Whether to draw a bar the caller asked for: as ``LEAKATTACK_PROGRESS`` says if set, else whether
    ``stream`` (stderr) is a terminal or this is a notebook."""
    if not requested:
        return False
    forced = os.environ.get(FORCE_ENV, "").strip().lower()
    if forced in _ON or forced in _OFF:
        return forced in _ON
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty()) or _in_notebook()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress_bar(total: int, desc: str, unit: str, requested: bool = True, **kwargs) -> tqdm:
    """A tqdm bar on stderr, disabled (a silent no-op with the same methods) unless :func:`show_progress`."""
    return tqdm(total=total, desc=desc, unit=unit, disable=not show_progress(requested), dynamic_ncols=True,
                **kwargs)


__all__ = ["FORCE_ENV", "progress_bar", "show_progress"]
