"""``python -m leakattack``: the same as the ``leakattack`` command (its exit code passed on)."""

import sys

from .cli import main

sys.exit(main())
