"""Sensitivity: the noise of a defense pipeline that is counted and the sensitivity of what it is added to.

The pipeline's steps are walked in the order the channel runs them (before the
sketch, R, after it); :func:`noise_bound` returns a :class:`NoiseBound` for the
Gaussian noise (L2 sensitivity), :func:`laplace_bound` a :class:`LaplaceBound` for
Laplace noise (L1 sensitivity, bounded by sqrt(k) times the L2 one), which the
accountants (:mod:`defenses.accounting`) turn into epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .accounting.analysis import (
    check_count,
    check_number,
    clip_sensitivity,
    l1_from_l2_sensitivity,
    linear_map_sensitivity,
)
from .base import BEFORE, norm_bound
from .noise import Gaussian, Laplace
from .pruning import Prune

#: Marks the sketch's place among the steps when the pipeline is walked in the order the channel runs it.
_SKETCH = object()


@dataclass(frozen=True)
class NoiseBound:
    """The Gaussian noise of a pipeline that is counted and the L2 sensitivity of the vector it is added to.

    Every run of Gaussian steps is a Gaussian mechanism on what it is added to; the
    one with the largest sigma/Delta is counted.  The others are not: noise run later
    in the channel acts on an already noisy vector (post-processing), and noise run
    earlier is drawn without the data, so it only randomises the input of the counted
    mechanism and leaves its Delta as it is (a valid, conservative guarantee).
    """

    sigma: float  #: standard deviation of the noise (consecutive Gaussian steps combined)
    sensitivity: float | None  #: Delta_2 of what the noise is added to; None: nothing bounds it
    formula: str = ""  #: how Delta was obtained, e.g. "||R||_op * C = 1.563 * 1.0"
    where: str = ""  #: the bounding clip and the noise, relative to the sketch
    neighbours: str = ""  #: the neighbouring relation Delta is for
    crosses_sketch: bool = False  #: a clip before the sketch bounds noise after it: Delta has the factor ||R||_op
    reason: str = ""  #: why ``sensitivity`` is None
    later_noise: int = 0  #: Gaussian steps after the counted ones
    earlier_noise: int = 0  #: Gaussian steps before the counted ones
    noise: str = ""  #: the spec of the Gaussian steps that run together here


@dataclass(frozen=True)
class LaplaceBound:
    """A Laplace step of a pipeline and the L1 sensitivity of the vector of length k it is added to.

    Laplace noise of scale b on a vector of L1 sensitivity Delta_1 is the Laplace
    mechanism, epsilon = Delta_1 / b (pure DP).  The pipeline bounds the L2
    sensitivity Delta_2 (as for the Gaussian noise); Cauchy-Schwarz gives
    Delta_1 <= sqrt(k) * Delta_2, k = d for noise before the sketch and b after it:
    a valid bound, loose by up to sqrt(k) (tight only for a difference spread evenly
    over all k entries).
    """

    scale: float  #: b of the Laplace step
    sensitivity: float | None  #: Delta_1 <= sqrt(k) * Delta_2; None: nothing bounds it
    l2_sensitivity: float | None = None  #: Delta_2 of what the noise is added to
    length: int | None = None  #: k, the length of the vector the noise is added to (None: not given)
    formula: str = ""  #: how Delta_1 was obtained
    where: str = ""  #: the bounding clip and the noise, relative to the sketch
    neighbours: str = ""  #: the neighbouring relation Delta is for
    crosses_sketch: bool = False  #: a clip before the sketch bounds noise after it: Delta_2 has the factor ||R||_op
    reason: str = ""  #: why ``sensitivity`` is None
    later_noise: int = 0  #: Laplace steps of positive scale after the counted one
    earlier_noise: int = 0  #: Laplace steps of positive scale before the counted one
    noise: str = ""  #: the spec of the Laplace step


def laplace_bound(pipeline, sketch_norm: float | None = 1.0, batch_size: int | None = None,
                  lengths: tuple[int | None, int | None] | None = None) -> LaplaceBound | None:
    """The Laplace step of ``pipeline`` with the smallest epsilon (the largest b/Delta_1) and the L1 sensitivity of
    what it is added to; ``lengths`` = (d, b), the lengths before and after the sketch (None, or None for one: not
    known, so no L1 bound for noise there); where none is bounded, the first in channel order, with the reason; None
    without Laplace noise.  Noise after the counted step is post-processing, noise before it is drawn without the
    data (as for the Gaussian)."""
    bounds = _walk(pipeline, sketch_norm, batch_size, lengths)[1]
    if not bounds:
        return None
    bounded = [b for b in bounds if b.sensitivity is not None]
    # the first of equal ones: ties keep the noise the channel adds first
    i = bounds.index(max(bounded, key=lambda b: _ratio(b.scale, b.sensitivity))) if bounded else 0
    return replace(bounds[i], earlier_noise=i, later_noise=len(bounds) - 1 - i,
                   reason=bounds[i].reason if bounded else _reasons(bounds))


def noise_bound(pipeline, sketch_norm: float | None = 1.0, batch_size: int | None = None) -> NoiseBound | None:
    """The Gaussian noise of ``pipeline`` that gives the smallest epsilon (the largest sigma/Delta of
    :func:`noise_bounds`) and the sensitivity of what it is added to; where none is bounded, the first in channel
    order, with the reason; None without noise."""
    bounds = noise_bounds(pipeline, sketch_norm, batch_size)
    if not bounds:
        return None
    bounded = [b for b in bounds if b.sensitivity is not None]
    # the first of equal ones: ties keep the noise the channel adds first
    if bounded:
        return max(bounded, key=lambda b: _ratio(b.sigma, b.sensitivity))
    return replace(bounds[0], reason=_reasons(bounds))


def _reasons(bounds: list) -> str:
    """Why no noise of ``bounds`` (none bounded) has a sensitivity: its one reason, or each noise's, named."""
    if len(bounds) == 1:
        return bounds[0].reason
    return "no noise step has a bounded sensitivity: " + "; ".join(f"'{b.noise}': {b.reason}" for b in bounds)


def _ratio(scale: float, sensitivity: float | None) -> float:
    """scale / Delta, the noise per unit of sensitivity; inf where Delta is 0 (a clip so small that C / B underflows
    to 0.0: the noise's input does not depend on the data)."""
    assert sensitivity is not None
    return scale / sensitivity if sensitivity > 0 else math.inf


def noise_bounds(pipeline, sketch_norm: float | None = 1.0, batch_size: int | None = None) -> list[NoiseBound]:
    """Each run of Gaussian steps (of positive sigma) of ``pipeline`` in channel order, with the sensitivity of what
    it is added to.

    The steps are walked as the channel runs them: before the sketch, R, after
    it.  Neighbours add or remove one example with a ``per_example`` step, one
    client's update otherwise.  A clip bounds Delta (``clip_sensitivity``), R
    multiplies it by ``sketch_norm`` = ||R||_op (None: not known).  The
    neighbour runs the same pipeline on the neighbouring data (a client's
    update replaced by zero), so noise keeps the bound, Laplace or Gaussian: it
    is drawn without the data, and the same sample is added on both sides.  But
    the neighbour's vector is no longer zero after it, so a clip after noise
    bounds Delta by its diameter 2C, and pruning keeps the bound on a client's
    update only while no noise has run (zeroing entries never raises the norm of
    the update, whose neighbour is zero); any other step between the clip and the
    noise leaves Delta untracked.  The channel divides a per-example sum by the batch
    size B before the sketch: given ``batch_size``, noise after that division (after the sketch) has Delta divided
    by B; without it the bound keeps the sum's Delta, B times larger than needed (valid, conservative).
    """
    return _walk(pipeline, sketch_norm, batch_size)[0]


def sketch_norm_needed(pipeline) -> bool:
    """Whether a noise's sensitivity (Gaussian or Laplace) may depend on ||R||_op: a clip before the sketch bounds
    noise added after it."""
    gaussian, laplace = _walk(pipeline, 1.0, None, (1, 1))
    return any(bound.crosses_sketch for bound in gaussian) or any(bound.crosses_sketch for bound in laplace)


def _walk(pipeline, sketch_norm: float | None, batch_size: int | None,
          lengths: tuple[int | None, int | None] | None = None) -> tuple[list[NoiseBound], list[LaplaceBound]]:
    """The bounds of :func:`noise_bounds` (each run of Gaussian steps) and of each Laplace step of positive scale,
    from one walk of the steps in channel order (see :func:`noise_bounds`).  ``sketch_norm`` is a finite positive
    number or None, ``batch_size`` an integer of at least 1 or None: anything else is one UserError sentence."""
    if sketch_norm is not None:
        sketch_norm = check_number("sketch_norm", sketch_norm)
    if batch_size is not None:
        batch_size = check_count("batch_size", batch_size)
    per_ex = pipeline.per_example
    delta, sym, val, clip, crossed = None, "", "", None, False
    reason = "no clip before the noise: sensitivity unbounded"
    order = [*pipeline.before, _SKETCH, *pipeline.after]
    bounds: list[NoiseBound] = []
    laplace: list[LaplaceBound] = []
    noisy = 0  # Gaussian steps of positive sigma already walked
    noised = False  # whether noise of positive scale has run: the neighbour's vector is no longer zero
    i = 0
    while i < len(order):
        step = order[i]
        if step is _SKETCH:
            if per_ex and batch_size and delta is not None:  # the channel's mean: the sum divided by B
                delta = delta / batch_size
                sym, val = f"{sym} / B", f"{val} / {batch_size}"
            if delta is not None and sketch_norm is None:
                delta, reason = None, "the sketch's operator norm is not known: sensitivity unbounded"
            elif delta is not None and sketch_norm is not None:
                delta, crossed = linear_map_sensitivity(delta, sketch_norm), True
                sym, val = f"||R||_op * {sym}", f"{sketch_norm:.4g} * {val}"
        elif isinstance(step, Gaussian):
            j = i
            while j < len(order) and isinstance(order[j], Gaussian):
                j += 1
            run = sum(1 for t in order[i:j] if t.sigma > 0)
            if run:
                bound = _bound_at(order, i, delta, f"{sym} = {val}", clip, crossed, reason, per_ex)
                bounds.append(replace(bound, earlier_noise=noisy))
                noisy, noised = noisy + run, True
            i = j  # noise drawn without the data: Delta unchanged for the steps after it
            continue
        elif (bound_c := norm_bound(step)) is not None:
            # per_example bounds one example's gradient; a later clip acts on the sum one example changes, and one
            # after noise on a vector the neighbour's noise made nonzero: both bound the difference by the diameter
            new = clip_sensitivity(bound_c, delta, inside_sum=(per_ex and not step.per_example) or noised)
            if delta is None or new < delta:
                delta, clip, crossed = new, step, False
                sym, val = ("C", f"{bound_c}") if new == bound_c else ("2 * C", f"2 * {bound_c}")
        elif step.bounds_norm:  # a norm bound the step does not name (no C): nothing to count across it
            delta, clip, crossed = None, None, False
            reason = f"'{step.spec()}' bounds the norm but names no bound C: sensitivity not tracked"
        elif isinstance(step, Laplace):
            if step.params["b"] > 0:
                laplace.append(_laplace_at(step, delta, f"{sym} = {val}", clip, crossed, reason, per_ex, lengths))
            noised = noised or step.params["b"] > 0  # drawn without the data: Delta unchanged
        elif not (isinstance(step, Prune) and not per_ex and not noised) and (delta is not None or clip is not None):
            # a clip's bound lost at the sketch (its norm not known, as where no later noise needed it) is lost here
            # too, and this step is the reason that holds whatever the sketch's norm
            delta, clip, crossed = None, None, False
            after = "after noise, " if isinstance(step, Prune) and noised else ""
            reason = f"'{step.spec()}' runs {after}between the clip and the noise: sensitivity not tracked"
        i += 1
    return bounds, laplace


def _where(clip, noise) -> str:
    """Where the bounding clip and the noise run, relative to the sketch."""
    name = "per-example clip" if clip.per_example else "clip"
    if clip.placement != noise.placement:
        return f"{name} before the sketch, noise after it"
    return f"{name} and noise {'before' if clip.placement == BEFORE else 'after'} the sketch"


def _neighbours(per_example: bool) -> str:
    return "add/remove one example" if per_example else "add/remove one client's update"


def _laplace_at(step, delta, formula, clip, crossed, reason, per_example, lengths) -> LaplaceBound:
    """The LaplaceBound of Laplace ``step``, added to a vector of L2 sensitivity ``delta`` (None: unbounded)."""
    b = step.params["b"]
    if delta is None:
        return LaplaceBound(b, None, reason=reason, noise=step.spec())
    k = None if lengths is None else lengths[0] if step.placement == BEFORE else lengths[1]
    if k is None:
        return LaplaceBound(b, None, delta, reason="the length of the vector the Laplace noise is added to is not "
                                                   "known: its L1 sensitivity is not bounded", noise=step.spec())
    l1 = l1_from_l2_sensitivity(delta, k)
    if formula.split(" = ")[0] != "C":
        formula = f"{formula} = {delta:.4g}"
    formula = f"sqrt(k) * Delta_2 = sqrt({k}) * {delta:.4g} = {l1:.4g}, Delta_2 = {formula}"
    return LaplaceBound(b, l1, delta, k, formula, _where(clip, step), _neighbours(per_example), crossed)


def _bound_at(order, i, delta, formula, clip, crossed, reason, per_example) -> NoiseBound:
    """The NoiseBound of the Gaussian steps that run together from ``order[i]`` on."""
    j, sigmas = i, []
    while j < len(order) and isinstance(order[j], Gaussian):
        sigmas.append(order[j].sigma)
        j += 1
    later = sum(1 for t in order[j:] if isinstance(t, Gaussian) and t.sigma > 0)
    sigma = math.hypot(*sigmas)  # sqrt of the sum of squares without overflow for huge sigmas
    if delta is None:
        return NoiseBound(sigma, None, reason=reason, later_noise=later,
                          noise=",".join(t.spec() for t in order[i:j]))
    if formula.split(" = ")[0] != "C":
        formula = f"{formula} = {delta:.4g}"
    return NoiseBound(sigma, delta, formula, _where(clip, order[i]), _neighbours(per_example), crossed,
                      later_noise=later)


__all__ = ["LaplaceBound", "NoiseBound", "laplace_bound", "noise_bound", "noise_bounds", "sketch_norm_needed"]
