"""The sketching paper's privacy math for the Gaussian mechanism, as pure functions.

Sensitivity Delta_2 of what the noise is added to, with add/remove neighbours.
A whole-update clip to C bounds one client's update: Delta_2 = C (Lemma H.8
bounds the update by l_c, Lemma H.9 plugs Delta_2 = l_c into Lemma H.7).  A
per-example clip to C bounds one example's share of the sum: Delta_2 = C
(Abadi et al. 2016, sigma = z * C as in Opacus); a later clip of the sum to C2
is a projection onto a ball, 1-Lipschitz and of diameter 2 C2, so
Delta_2 <= min(C, 2 C2).  A linear map R between the clip and the noise
multiplies Delta_2 by ||R||_op.  For replace-one neighbours pass twice the
add/remove value.
"""

from __future__ import annotations

import math


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sigma with sigma^2 = 2 ln(1.25/delta) Delta^2 / epsilon^2 (Song et al. 2023, Lemma H.7; Dwork & Roth 2014,
    Thm A.1)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """epsilon = sqrt(2 ln(1.25/delta)) Delta / sigma, the inverse of Lemma H.7 (Song et al. 2023); inf for
    sigma = 0."""
    if sigma <= 0:
        return math.inf
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / sigma


def clip_sensitivity(C: float, before: float | None, *, inside_sum: bool) -> float:
    """Delta_2 after an l2 clip to C: min(before, C) if the neighbour adds/removes the clipped vector itself,
    min(before, 2C) if it changes one term of a clipped sum (a 1-Lipschitz projection onto a ball of diameter 2C)."""
    bound = 2.0 * C if inside_sum else C
    return bound if before is None else min(before, bound)


def linear_map_sensitivity(sensitivity: float, operator_norm: float) -> float:
    """Delta_2 of R v: ||R v - R v'|| <= ||R||_op ||v - v'|| (definition of the operator norm)."""
    return operator_norm * sensitivity


def paper_composition(eps_hat: float, delta_hat: float, T: int, K: int) -> tuple[float, float]:
    """(eps_DP, delta_DP) = (sqrt(TK) eps_hat, TK delta_hat) over T rounds of K local steps (Song et al. 2023,
    Theorem 6.2 / H.11)."""
    return math.sqrt(T * K) * eps_hat, T * K * delta_hat


__all__ = ["gaussian_sigma", "gaussian_epsilon", "clip_sensitivity", "linear_map_sensitivity", "paper_composition"]
