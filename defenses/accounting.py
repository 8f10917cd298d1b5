"""Privacy accounting for the Gaussian mechanism: the sketching paper's formulas and a tight accountant (Opacus).

Pure functions first (the paper's math), then :func:`accountant_epsilon`, a thin
wrapper over Opacus' RDP / PRV accountants, then :func:`message_privacy`, which
reports both for one defended message.

Sensitivity.  We follow the paper: Lemma H.8 bounds the norm of the (averaged)
stochastic gradient by the Lipschitz constant l_c and Lemma H.9 plugs
Delta_2 = l_c into Lemma H.7; with clipping to norm C that is Delta_2 = C, the
add/remove-one-example notion Opacus uses too (sigma = z * C).  For
replace-one neighbours Delta_2 = 2C: pass ``sensitivity=2*C`` to the pure
functions.
"""

from __future__ import annotations

import math
import warnings


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


def accountant_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                       accountant: str = "rdp") -> float:
    """epsilon of ``steps`` sub-sampled Gaussian mechanisms (noise multiplier z = sigma/Delta) by Opacus' ``rdp`` or ``prv`` accountant."""
    if noise_multiplier <= 0:
        return math.inf
    if accountant == "rdp":
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
    elif accountant == "prv":
        from opacus.accountants import PRVAccountant

        acc = PRVAccountant()
    else:
        raise ValueError(f"unknown accountant '{accountant}'; choose one of: rdp, prv")
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    with warnings.catch_warnings():  # tiny z: "optimal order is the smallest alpha", log(0) in PRV (epsilon is huge anyway)
        warnings.simplefilter("ignore")
        try:
            return float(acc.get_epsilon(delta=delta))
        except (MemoryError, OverflowError, ValueError):  # PRV's grid cannot span tiny z: epsilon is astronomically large
            return math.inf


def message_privacy(pipeline, delta: float, steps: int = 1, sample_rate: float = 1.0) -> dict:
    """epsilon/delta of a defense pipeline's Gaussian noise over ``steps`` releases: Opacus RDP next to the paper's numbers.

    Keys: ``epsilon``/``delta`` (Opacus RDP, the tight one), ``epsilon_paper``/
    ``delta_paper`` (Lemma H.7 per step at delta_hat = delta/steps, composed by
    Theorem 6.2 with T*K = steps; no sub-sampling amplification),
    ``noise_multiplier``, ``sensitivity``, ``privacy_note``.  Without Gaussian
    noise every value is None; without a clip before it epsilon is None (inf):
    the sensitivity is unbounded.
    """
    out = {"epsilon": None, "delta": None, "epsilon_paper": None, "delta_paper": None,
           "noise_multiplier": None, "sensitivity": None, "privacy_note": ""}
    noisy = pipeline.gaussian_steps() if pipeline else []
    if not noisy:
        out["privacy_note"] = "no Gaussian noise: no DP guarantee"
        return out
    sigma = math.sqrt(sum(t.sigma ** 2 for t in noisy))
    clips = {(t.clip_C, t.clip_placement) for t in noisy}
    out["delta"] = delta
    if None in {c for c, _ in clips} or len(clips) > 1:
        out["privacy_note"] = "no single clip before the noise: sensitivity unbounded, epsilon = inf"
        return out
    C, clip_place = clips.pop()
    z = sigma / C
    eps_hat = gaussian_epsilon(sigma, delta / steps, C)
    eps_p, delta_p = paper_composition(eps_hat, delta / steps, steps, 1)
    out.update(epsilon=accountant_epsilon(z, sample_rate, steps, delta), epsilon_paper=eps_p,
               delta_paper=delta_p, noise_multiplier=z, sensitivity=C)
    notes = [f"Delta = C = {C} (add/remove one example); paper: Lemma H.7 + Thm 6.2, no amplification"]
    if any(t.placement != clip_place for t in noisy):
        notes.append("clip and noise on different sides of the sketch: exact only if ||R||_op <= 1")
    out["privacy_note"] = "; ".join(notes)
    return out
