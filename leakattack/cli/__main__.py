"""``python -m leakattack.cli``: the same as the ``leakattack`` command."""

import sys

from . import entry

sys.exit(entry())
