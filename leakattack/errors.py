"""The one exception family users see: a :class:`UserError` carries one sentence.

A leaf module (imports nothing of ours), so every station can raise it.  The
command line prints its message and exits with code 2; library callers catch it
like any ``ValueError``.  A :class:`SettingWarning` (through :mod:`warnings`)
flags a setting that runs but cannot give what is probably wanted; the command
line prints it as one line.
"""

from __future__ import annotations

import sys
import warnings


class UserError(ValueError):
    """A request the user can fix; ``str(err)`` is one sentence naming the bad value."""


class SettingWarning(UserWarning):
    """A setting that runs but will not give what the user probably wants (one sentence, naming the cheaper choice)."""


_show_warning = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, SettingWarning):
        print(f"leakattack: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


def duration_text(seconds: float) -> str:
    """An estimated duration as a warning states it: seconds, minutes, hours, days or years."""
    if seconds >= 86400 * 365:
        return f"{seconds / (86400 * 365):.3g} years"
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def size_text(n_bytes: float) -> str:
    """An amount of memory as a message states it: GB to three figures."""
    return f"{n_bytes / 1e9:.3g} GB"


def one_line_warnings() -> None:
    """Print every SettingWarning of this process as one ``leakattack: warning: ...`` line (other warnings as usual);
    the command line and the sweep's worker processes call it."""
    warnings.showwarning = _one_line_warning


__all__ = ["UserError", "SettingWarning", "duration_text", "size_text", "one_line_warnings"]
