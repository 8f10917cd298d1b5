"""``python -m leakattack``: the same as the ``leakattack`` command (its exit code passed on)."""

import sys

from .cli import entry

sys.exit(entry())
