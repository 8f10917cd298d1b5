"""The one exception family users see: a :class:`UserError` carries one sentence.

A leaf module (imports nothing of ours), so every station can raise it.  The
command line prints its message and exits with code 2; library callers catch it
like any ``ValueError``.
"""

from __future__ import annotations


class UserError(ValueError):
    """A request the user can fix; ``str(err)`` is one sentence naming the bad value."""


__all__ = ["UserError"]
