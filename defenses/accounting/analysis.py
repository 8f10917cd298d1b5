"""The sketching paper's privacy math for the Gaussian mechanism, as pure functions.

Sensitivity.  We follow the paper: Lemma H.8 bounds the norm of the (averaged)
stochastic gradient by the Lipschitz constant l_c and Lemma H.9 plugs
Delta_2 = l_c into Lemma H.7; with clipping to norm C that is Delta_2 = C, the
add/remove-one-example notion Opacus uses too (sigma = z * C).  For
replace-one neighbours Delta_2 = 2C: pass ``sensitivity=2*C``.
"""

from __future__ import annotations

import math


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sigma with sigma^2 = 2 ln(1.25/delta) Delta^2 / epsilon^2 (Song et al. 2023, Lemma H.7; Dwork & Roth 2014, Thm A.1)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """epsilon = sqrt(2 ln(1.25/delta)) Delta / sigma, the inverse of Lemma H.7 (Song et al. 2023); inf for sigma = 0."""
    if sigma <= 0:
        return math.inf
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / sigma


def paper_composition(eps_hat: float, delta_hat: float, T: int, K: int) -> tuple[float, float]:
    """(eps_DP, delta_DP) = (sqrt(TK) eps_hat, TK delta_hat) over T rounds of K local steps (Song et al. 2023, Theorem 6.2 / H.11)."""
    return math.sqrt(T * K) * eps_hat, T * K * delta_hat


__all__ = ["gaussian_sigma", "gaussian_epsilon", "paper_composition"]
