"""The one exception family users see: a :class:`UserError` carries one sentence.

A leaf module (imports nothing of ours), so every station can raise it.  The
command line prints its message and exits with code 2; library callers catch it
like any ``ValueError``.  A :class:`SettingWarning` (through :mod:`warnings`)
flags a setting that runs but cannot give what is probably wanted; the command
line prints it as one line.
"""

from __future__ import annotations


class UserError(ValueError):
    """A request the user can fix; ``str(err)`` is one sentence naming the bad value."""


class SettingWarning(UserWarning):
    """A setting that runs but will not give what the user probably wants (one sentence, naming the cheaper choice)."""


__all__ = ["UserError", "SettingWarning"]
