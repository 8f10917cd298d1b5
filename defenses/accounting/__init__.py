"""Privacy accounting for the Gaussian mechanism: the sketching paper's formulas and a tight accountant (Opacus).

Split the Opacus way: :mod:`.analysis` holds the pure math (Lemma H.7 and
Theorem 6.2 of Song et al. 2023), :mod:`.accountants` the wrapper over Opacus'
RDP / PRV accountants and :func:`message_privacy`, which reports both for one
defended message.
"""

from __future__ import annotations

from .accountants import ACCOUNTANTS, accountant_epsilon, message_privacy
from .analysis import gaussian_epsilon, gaussian_sigma, paper_composition

__all__ = ["ACCOUNTANTS", "accountant_epsilon", "gaussian_epsilon", "gaussian_sigma", "message_privacy",
           "paper_composition"]
