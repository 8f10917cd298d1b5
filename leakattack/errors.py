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


def one_line_warnings() -> None:
    """Print every SettingWarning of this process as one ``leakattack: warning: ...`` line (other warnings as usual);
    the command line and the sweep's worker processes call it."""
    warnings.showwarning = _one_line_warning


__all__ = ["UserError", "SettingWarning", "one_line_warnings"]
