"""A tight accountant (Opacus' RDP / PRV) and the privacy report of one defended message.

:func:`accountant_epsilon` is a thin wrapper over Opacus' accountants;
:func:`message_privacy` reports it next to the paper's numbers
(:mod:`.analysis`) for a defense pipeline's Gaussian noise, and the pure-DP
epsilon of the Laplace mechanism for a pipeline whose only noise is Laplace.
"""

from __future__ import annotations

import math
import warnings

from leakattack.errors import UserError

from ..noise import Laplace
from .analysis import (
    check_count,
    check_delta,
    check_number,
    gaussian_epsilon,
    laplace_epsilon,
    paper_composition,
    pure_composition,
)

#: Names accepted by :func:`accountant_epsilon`'s ``accountant``.
ACCOUNTANTS = ("rdp", "prv")


#: noise multipliers above this give the accountant's floor epsilon (see accountant_epsilon)
Z_MAX = 1e6
#: the PRV accountant's epsilon reaches no higher than about log of the largest float (709.78): a value from here on
#: is its grid's cap, not the mechanism's epsilon (at z = 0.005 the exact one is 20,852: Balle and Wang 2018, computed
#: in tests/defenses/test_accounting.py)
PRV_CAP = 709.0


def accountant_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, *,
                       accountant: str = "rdp") -> float:
    """epsilon of ``steps`` sub-sampled Gaussian mechanisms (noise multiplier z = sigma/Delta) by Opacus' ``rdp`` or
    ``prv`` accountant.

    ``noise_multiplier`` is a finite non-negative number (0, no noise: epsilon inf), ``sample_rate`` in (0, 1],
    ``steps`` an integer of at least 1 and ``delta`` in (0, 1); anything else is one UserError sentence.  Where
    ``prv``'s grid cannot span the privacy loss (small z: Opacus raises, or caps epsilon at about 709.8,
    :data:`PRV_CAP`, which under-reports it up to 80-fold), the ``rdp`` epsilon of the same mechanism is returned,
    an upper bound; so it is, without asking PRV, where it is twice that cap or more.  Never below 0: where a large
    ``delta`` takes the accountant's conversion below 0, the mechanism is (0, delta)-DP and 0 is returned.
    """
    if accountant not in ACCOUNTANTS:
        raise UserError(f"unknown accountant '{accountant}'; choose one of: {', '.join(ACCOUNTANTS)}")
    noise_multiplier = check_number("noise_multiplier", noise_multiplier, low_open=False)
    sample_rate = check_number("sample_rate", sample_rate, high=1.0, high_open=False)
    steps = check_count("steps", steps)
    delta = check_delta(delta)
    if noise_multiplier == 0:
        return math.inf
    # beyond Z_MAX the epsilon sits at the accountant's floor (RDP: log(1/delta)/(alpha_max - 1)); Opacus
    # overflows on astronomically large z, so the floor is computed at Z_MAX
    noise_multiplier = min(float(noise_multiplier), Z_MAX)
    if accountant == "prv":  # the RDP bound first: where it lies far past PRV's cap, PRV cannot answer (and takes
        rdp = accountant_epsilon(noise_multiplier, sample_rate, steps, delta)  # 10-30 s to say so at z < 0.005)
        if rdp >= 2 * PRV_CAP:
            return rdp
    # Opacus is a heavy import (it pulls in its whole training stack): only when an epsilon is asked for.
    if accountant == "rdp":
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
    else:
        from opacus.accountants import PRVAccountant

        acc = PRVAccountant()
    acc.history = [(noise_multiplier, sample_rate, steps)]
    # tiny z: "optimal order is the smallest alpha", log(0) in PRV (epsilon is huge anyway)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            epsilon = float(acc.get_epsilon(delta=delta))
        except RuntimeError:  # PRV: "Discrete mean differs significantly from continuous mean" (z of about 0.01)
            epsilon = math.inf if accountant == "rdp" else PRV_CAP
        except (MemoryError, OverflowError, ValueError, ZeroDivisionError):
            # PRV's grid cannot span tiny z, and below about 1e-154 z**2 is 0.0 in Opacus' RDP orders (a division
            # by zero): epsilon is astronomically large
            epsilon = math.inf
    if accountant == "prv" and epsilon >= PRV_CAP:  # the grid's cap, not the mechanism's epsilon
        return rdp
    # a large delta can take the accountant's conversion below 0 (Opacus' RDP and PRV alike: -0.69 at z = 5, q = 0.1,
    # 10 steps, delta = 0.5); (epsilon, delta)-DP with epsilon < 0 is (0, delta)-DP, the strongest epsilon there is
    return max(epsilon, 0.0)


def message_privacy(pipeline, delta: float, *, steps: int = 1, sample_rate: float = 1.0,
                    sketch_norm: float | None = 1.0, batch_size: int | None = None, d: int | None = None,
                    b: int | None = None) -> dict:
    """epsilon/delta of a defense pipeline's Gaussian noise over ``steps`` releases: Opacus RDP next to the paper's
    numbers; for a pipeline whose only noise is Laplace, the Laplace mechanism's pure epsilon.

    The noise counted is the run of Gaussian steps with the largest sigma/Delta, and its sensitivity Delta is what the
    pipeline bounds (``Pipeline.noise_bound``):
    a clip before the sketch with the noise after it gives Delta = ||R||_op * C,
    with ``sketch_norm`` = ||R||_op (over several steps, the largest ||R_t||); with a ``per_example`` clip, noise
    after the channel's division of the sum by ``batch_size`` (after the sketch) has Delta divided by it.
    Keys: ``epsilon``/``delta`` (Opacus RDP, the tight one), ``epsilon_paper``/
    ``delta_paper`` (Lemma H.7 per step at delta_hat = delta/steps, composed by
    Theorem 6.2 with T*K = steps; no sub-sampling amplification),
    ``noise_multiplier`` = sigma/Delta, ``sensitivity`` (Delta), ``sketch_norm``
    (the ||R||_op in Delta, None when Delta does not cross the sketch),
    ``privacy_note``.  Without noise every value is None; without a
    clip before it epsilon is None (inf): the sensitivity is unbounded.

    Laplace noise (only where the pipeline has no Gaussian noise, which is counted
    instead): ``epsilon`` = ``steps`` * Delta_1 / b with ``delta`` = 0 (the Laplace
    mechanism, composed linearly over the releases; no sub-sampling amplification),
    ``sensitivity`` = Delta_1 <= sqrt(k) * Delta_2 with k = ``d`` (noise before the
    sketch) or ``b`` (after it), the lengths of g and of the message;
    ``epsilon_paper``, ``delta_paper`` and ``noise_multiplier`` are None (the paper
    has no Laplace formula).  Without ``d`` / ``b`` the L1 sensitivity is not
    bounded and epsilon is None.

    ``pipeline`` is a :class:`defenses.Pipeline` (``defenses.build(spec)``) or None (no defense); ``delta`` a
    number in (0, 1), ``steps`` an integer of at least 1, ``sample_rate`` in (0, 1], ``sketch_norm`` a finite
    positive number or None, ``d`` and ``b`` integers of at least 1 or None; anything else is one UserError
    sentence.
    """
    if pipeline is not None and not callable(getattr(pipeline, "noise_bound", None)):
        what = f"{type(pipeline).__name__} {pipeline!r:.80}"
        if isinstance(pipeline, (str, dict, list, tuple)):  # a spec: the pipeline is what defenses.build makes of it
            raise UserError(f"pipeline must be a defense Pipeline or None, got the spec {what}: pass "
                            f"defenses.build({pipeline!r:.80}) instead")
        raise UserError(f"pipeline must be a defense Pipeline (defenses.build(spec)) or None, got {what}")
    delta = check_delta(delta)
    steps = check_count("steps", steps)
    sample_rate = check_number("sample_rate", sample_rate, high=1.0, high_open=False)
    if sketch_norm is not None:
        sketch_norm = check_number("sketch_norm", sketch_norm)
    out: dict[str, float | str | None] = {"epsilon": None, "delta": None, "epsilon_paper": None, "delta_paper": None,
           "noise_multiplier": None, "sensitivity": None, "sketch_norm": None, "privacy_note": ""}
    if batch_size is not None:
        batch_size = check_count("batch_size", batch_size)
    d, b = (None if v is None else check_count(name, v) for name, v in (("d", d), ("b", b)))
    bound = pipeline.noise_bound(sketch_norm, batch_size) if pipeline else None
    if bound is None:
        laplace = pipeline.laplace_bound(sketch_norm, batch_size, (d, b)) if pipeline else None
        if laplace is None:
            out["privacy_note"] = "no Gaussian noise: no DP guarantee"
            return out
        return _laplace_privacy(out, laplace, steps, sketch_norm)
    out["delta"] = delta
    if bound.sensitivity is None:
        out["privacy_note"] = f"{bound.reason}, epsilon = inf"
        return out
    sigma, sens = bound.sigma, bound.sensitivity
    eps_hat = gaussian_epsilon(sigma, delta / steps, sens)
    eps_p, delta_p = paper_composition(eps_hat, delta / steps, steps, 1)
    # sigma / Delta overflows (huge sigma, tiny C) or Delta underflows to 0 (C / B below the smallest float): the
    # noise multiplier is infinite, and epsilon is the accountant's floor, reached from Z_MAX on
    z = sigma / sens if sens > 0 else math.inf
    out.update(epsilon=accountant_epsilon(min(z, Z_MAX), sample_rate, steps, delta), epsilon_paper=eps_p,
               delta_paper=delta_p, noise_multiplier=z, sensitivity=sens,
               sketch_norm=sketch_norm if bound.crosses_sketch else None)
    note = (f"Delta = {bound.formula} ({bound.where}; {bound.neighbours}); "
            "paper: Lemma H.7 + Thm 6.2, no amplification")
    note += _uncounted(bound)
    laplace = sum(1 for step in pipeline.steps if isinstance(step, Laplace) and step.params["b"] > 0)
    if laplace:  # before the counted noise drawn without the data, after it post-processing
        note += f"; {laplace} Laplace step(s) not counted (the Gaussian noise is)"
    out["privacy_note"] = note
    return out


def _uncounted(bound) -> str:
    """The note's words on the noise steps before and after the counted one, which are not counted."""
    note = ""
    if bound.earlier_noise:
        note += (f"; {bound.earlier_noise} earlier noise step(s) not counted (drawn without the data, as if part of "
                 "the input)")
    if bound.later_noise:
        note += f"; {bound.later_noise} later noise step(s) not counted (post-processing)"
    return note


def _laplace_privacy(out: dict, bound, steps: int, sketch_norm: float | None) -> dict:
    """``out`` filled in for the counted Laplace noise ``bound`` (a :class:`defenses.sensitivity.LaplaceBound`) over
    ``steps`` releases: pure epsilon-DP, delta = 0."""
    out["delta"] = 0.0
    if bound.sensitivity is None:
        out["privacy_note"] = f"Laplace noise: {bound.reason}, epsilon = inf"
        return out
    out.update(epsilon=pure_composition(laplace_epsilon(bound.scale, bound.sensitivity), steps),
               sensitivity=bound.sensitivity, sketch_norm=sketch_norm if bound.crosses_sketch else None)
    releases = f"{steps} releases composed linearly" if steps > 1 else "one release"
    note = (f"Laplace noise, pure DP: epsilon = {'steps * ' if steps > 1 else ''}Delta_1 / b, b = {bound.scale:.4g}, "
            f"Delta_1 <= {bound.formula} ({bound.where}; {bound.neighbours}); {releases}, no sub-sampling "
            "amplification; a valid bound, loose by up to sqrt(k); no paper epsilon (the paper counts Gaussian noise)")
    note += _uncounted(bound)
    out["privacy_note"] = note
    return out


__all__ = ["ACCOUNTANTS", "accountant_epsilon", "message_privacy"]
