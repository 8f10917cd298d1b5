"""Integrations with federated-learning frameworks (optional dependencies; the core never imports them).

* :mod:`leakattack.integrations.flower` — Flower (``pip install "leakattack[flower]"``):
  a strategy wrapper that records clients' updates as message files for
  ``leakattack run --message``, and sketched updates (Song et al., Algorithm 1)
  on both sides of a deployment.
"""

import os

# Flower reads this switch once, when it is first imported: leakattack sends nothing over the network on its own,
# so its anonymous usage telemetry stays off unless the environment turns it on.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
