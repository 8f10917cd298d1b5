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

Laplace noise is counted with its L1 sensitivity: Delta_1 <= sqrt(k) Delta_2 for a
vector of length k (Cauchy-Schwarz), epsilon = Delta_1 / b (pure DP), and T
releases compose to T epsilon (basic composition).
"""

from __future__ import annotations

import math
import numbers

from leakattack.errors import UserError


def check_number(name: str, value, *, low: float = 0.0, low_open: bool = True, high: float = math.inf,
                 high_open: bool = True, infinite: bool = False) -> float:
    """``value`` as a float, refused in one UserError sentence naming ``name`` unless it is a real number (not a
    bool or a string) in the interval from ``low`` to ``high`` (open or closed at each end; finite, or also +inf
    with ``infinite``)."""
    if low == 0 and high == math.inf:
        allowed = f"a {'' if infinite else 'finite '}{'positive' if low_open else 'non-negative'} number"
        if infinite:
            allowed += " or inf"
    else:
        allowed = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UserError(f"{name} must be {allowed}, got {type(value).__name__} {value!r}")
    v = float(value)
    if infinite and v == math.inf:
        return v
    inside = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not (math.isfinite(v) and inside):
        raise UserError(f"{name} must be {allowed}, got {value!r}")
    return v


def check_delta(delta) -> float:
    """``delta`` as a float, refused in one UserError sentence unless it is a number in (0, 1)."""
    return check_number("delta", delta, low=0.0, high=1.0)


def check_count(name: str, value) -> int:
    """``value`` as an int, refused in one UserError sentence naming ``name`` unless it is an integer (Python's or
    NumPy's, not a bool) of at least 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise UserError(f"{name} must be an integer of at least 1, got {type(value).__name__} {value!r}")
    return int(value)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sigma with sigma^2 = 2 ln(1.25/delta) Delta^2 / epsilon^2 (Song et al. 2023, Lemma H.7; Dwork & Roth 2014,
    Thm A.1).  ``epsilon`` must be a finite positive number, ``delta`` in (0, 1), ``sensitivity`` finite and
    non-negative (one UserError sentence otherwise)."""
    epsilon = check_number("epsilon", epsilon)
    delta = check_delta(delta)
    sensitivity = check_number("sensitivity", sensitivity, low_open=False)
    return math.sqrt(2.0 * _log_125_over(delta)) * sensitivity / epsilon


def _log_125_over(delta: float) -> float:
    """ln(1.25 / delta) as ln 1.25 - ln delta: 1.25 / delta overflows to inf for a subnormal delta (1e-320)."""
    return math.log(1.25) - math.log(delta)


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """epsilon = sqrt(2 ln(1.25/delta)) Delta / sigma, the inverse of Lemma H.7 (Song et al. 2023); inf for
    sigma = 0.  ``sigma`` must be a non-negative number (inf: epsilon 0), ``delta`` in (0, 1), ``sensitivity``
    finite and non-negative (one UserError sentence otherwise)."""
    delta = check_delta(delta)
    sensitivity = check_number("sensitivity", sensitivity, low_open=False)
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not float(sigma) >= 0:
        raise UserError(f"sigma must be a non-negative number, got {type(sigma).__name__} {sigma!r}")
    if sigma == 0:
        return math.inf
    return math.sqrt(2.0 * _log_125_over(delta)) * sensitivity / sigma


def clip_sensitivity(C: float, before: float | None, *, inside_sum: bool) -> float:
    """Delta_2 after an l2 clip to C: min(before, C) if the neighbour adds/removes the clipped vector itself,
    min(before, 2C) if it changes one term of a clipped sum (a 1-Lipschitz projection onto a ball of diameter 2C)."""
    C = check_number("the clip bound C", C)
    if before is not None:
        before = check_number("the sensitivity before the clip", before, low_open=False, infinite=True)
    bound = 2.0 * C if inside_sum else C
    return bound if before is None else min(before, bound)


def linear_map_sensitivity(sensitivity: float, operator_norm: float) -> float:
    """Delta_2 of R v: ||R v - R v'|| <= ||R||_op ||v - v'|| (definition of the operator norm).  Both must be
    finite and non-negative (one UserError sentence otherwise)."""
    sensitivity = check_number("sensitivity", sensitivity, low_open=False)
    return check_number("operator_norm", operator_norm, low_open=False) * sensitivity


def l1_from_l2_sensitivity(sensitivity: float, length: int) -> float:
    """Delta_1 <= sqrt(k) Delta_2 for vectors of length k: ||v||_1 <= sqrt(k) ||v||_2 (Cauchy-Schwarz).
    ``sensitivity`` must be finite and non-negative, ``length`` an integer of at least 1."""
    sensitivity = check_number("sensitivity", sensitivity, low_open=False)
    return math.sqrt(check_count("length", length)) * sensitivity


def laplace_epsilon(scale: float, l1_sensitivity: float) -> float:
    """epsilon = Delta_1 / b of Laplace(0, b) noise on each entry of a vector of L1 sensitivity Delta_1, with
    delta = 0 (the Laplace mechanism: Dwork & Roth 2014, Thm 3.6); inf for b = 0.  ``scale`` must be a
    non-negative number (inf: epsilon 0), ``l1_sensitivity`` finite and non-negative (one UserError sentence
    otherwise)."""
    scale = check_number("scale", scale, low_open=False, infinite=True)
    l1_sensitivity = check_number("l1_sensitivity", l1_sensitivity, low_open=False)
    return math.inf if scale == 0 else l1_sensitivity / scale


def pure_composition(epsilon: float, releases: int) -> float:
    """T epsilon: T releases of an epsilon-DP mechanism are T epsilon-DP (basic composition: Dwork & Roth 2014,
    Thm 3.16, with delta = 0).  ``epsilon`` must be a non-negative number or inf, ``releases`` an integer of at
    least 1."""
    return check_count("releases", releases) * check_number("epsilon", epsilon, low_open=False, infinite=True)


def paper_epsilon_holds(epsilon_paper: float) -> bool:
    """Whether the paper's epsilon (Lemma H.7 per step, then Thm 6.2 over K steps: sqrt(K) eps_hat) lies where the
    paper's conditions hold: Lemma H.7 (Dwork & Roth 2014, Thm A.1) needs eps_hat < 1, and Thm 6.2, which drops the
    K eps_hat^2 term of advanced composition (Lemma H.3), needs eps_hat < 1/sqrt(K); both are sqrt(K) eps_hat < 1.
    Outside them the number is not a DP guarantee.  ``epsilon_paper`` must be a non-negative number or inf."""
    return check_number("epsilon_paper", epsilon_paper, low_open=False, infinite=True) < 1.0


def paper_composition(eps_hat: float, delta_hat: float, T: int, K: int) -> tuple[float, float]:
    """(eps_DP, delta_DP) = (sqrt(TK) eps_hat, TK delta_hat) over T rounds of K local steps (Song et al. 2023,
    Theorem 6.2 / H.11).  ``eps_hat`` must be a non-negative number or inf, ``delta_hat`` in (0, 1), ``T`` and
    ``K`` integers of at least 1 (one UserError sentence otherwise).  delta_DP is the theorem's TK delta_hat as it
    stands, which reaches 1 or more over many steps: such a pair bounds nothing, and its callers say so (a protocol's
    ``privacy`` records no accountant's epsilon there)."""
    eps_hat = check_number("eps_hat", eps_hat, low_open=False, infinite=True)
    delta_hat = check_number("delta_hat", delta_hat, low=0.0, high=1.0)
    T, K = check_count("T", T), check_count("K", K)
    return math.sqrt(T * K) * eps_hat, T * K * delta_hat


__all__ = ["gaussian_sigma", "gaussian_epsilon", "clip_sensitivity", "linear_map_sensitivity", "l1_from_l2_sensitivity",
           "laplace_epsilon", "pure_composition", "paper_epsilon_holds", "paper_composition"]
