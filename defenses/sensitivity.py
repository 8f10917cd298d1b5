"""Sensitivity: the first Gaussian noise of a defense pipeline and the L2 sensitivity of what it is added to.

The pipeline's steps are walked in the order the channel runs them (before the
sketch, R, after it); :func:`noise_bound` returns a :class:`NoiseBound`, which the
accountants (:mod:`defenses.accounting`) turn into epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting.analysis import clip_sensitivity, linear_map_sensitivity
from .base import BEFORE
from .noise import Gaussian, Laplace
from .pruning import Prune

#: Marks the sketch's place among the steps when the pipeline is walked in the order the channel runs it.
_SKETCH = object()


@dataclass(frozen=True)
class NoiseBound:
    """The first Gaussian noise of a pipeline and the L2 sensitivity of the vector it is added to.

    Noise steps run later in the channel act on an already noisy vector: they are
    post-processing and not counted (a valid, conservative guarantee).
    """

    sigma: float  #: standard deviation of the noise (consecutive Gaussian steps combined)
    sensitivity: float | None  #: Delta_2 of what the noise is added to; None: nothing bounds it
    formula: str = ""  #: how Delta was obtained, e.g. "||R||_op * C = 1.563 * 1.0"
    where: str = ""  #: the bounding clip and the noise, relative to the sketch
    neighbours: str = ""  #: the neighbouring relation Delta is for
    crosses_sketch: bool = False  #: a clip before the sketch bounds noise after it: Delta has the factor ||R||_op
    reason: str = ""  #: why ``sensitivity`` is None
    later_noise: int = 0  #: Gaussian steps after the counted ones


def noise_bound(pipeline, sketch_norm: float | None = 1.0, batch_size: int | None = None) -> NoiseBound | None:
    """The first Gaussian noise of ``pipeline`` in channel order and the sensitivity of what it is added to (None
    without noise).

    The steps are walked as the channel runs them: before the sketch, R, after
    it.  Neighbours add or remove one example with a ``per_example`` step, one
    client's update otherwise.  A clip bounds Delta (``clip_sensitivity``), R
    multiplies it by ``sketch_norm`` = ||R||_op (None: not known).  Pruning
    keeps the bound on a client's update (zeroing entries never raises its
    norm), and Laplace noise keeps it (it is drawn without the data, so the
    release is the Gaussian's, post-processed); any other step between the
    clip and the noise leaves Delta untracked.  The channel divides a per-example sum by the batch size B before
    the sketch: given ``batch_size``, noise after that division (after the sketch) has Delta divided by B; without
    it the bound keeps the sum's Delta, B times larger than needed (valid, conservative).
    """
    per_ex = pipeline.per_example
    delta, sym, val, clip, crossed = None, "", "", None, False
    reason = "no clip before the noise: sensitivity unbounded"
    order = [*pipeline.before, _SKETCH, *pipeline.after]
    for i, step in enumerate(order):
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
            if step.sigma > 0:
                return _bound_at(order, i, delta, f"{sym} = {val}", clip, crossed, reason, per_ex)
        elif step.bounds_norm:
            # per_example bounds one example's gradient; a later clip acts on the sum one example changes
            new = clip_sensitivity(step.C, delta, inside_sum=per_ex and not step.per_example)
            if delta is None or new < delta:
                delta, clip, crossed = new, step, False
                sym, val = ("C", f"{step.C}") if new == step.C else ("2 * C", f"2 * {step.C}")
        elif isinstance(step, Laplace):
            pass  # noise drawn without the data: the Gaussian's release is post-processed by it, Delta unchanged
        elif not (isinstance(step, Prune) and not per_ex) and (delta is not None or clip is not None):
            # a clip's bound lost at the sketch (its norm not known, as where no later noise needed it) is lost here
            # too, and this step is the reason that holds whatever the sketch's norm
            delta, clip, crossed = None, None, False
            reason = f"'{step.spec()}' runs between the clip and the noise: sensitivity not tracked"
    return None



def _bound_at(order, i, delta, formula, clip, crossed, reason, per_example) -> NoiseBound:
    """The NoiseBound of the Gaussian steps that run together from ``order[i]`` on."""
    j, sigmas = i, []
    while j < len(order) and isinstance(order[j], Gaussian):
        sigmas.append(order[j].sigma)
        j += 1
    later = sum(1 for t in order[j:] if isinstance(t, Gaussian) and t.sigma > 0)
    sigma = math.hypot(*sigmas)  # sqrt of the sum of squares without overflow for huge sigmas
    if delta is None:
        return NoiseBound(sigma, None, reason=reason, later_noise=later)
    name = "per-example clip" if clip.per_example else "clip"
    if clip.placement != order[i].placement:
        where = f"{name} before the sketch, noise after it"
    else:
        where = f"{name} and noise {'before' if clip.placement == BEFORE else 'after'} the sketch"
    if formula.split(" = ")[0] != "C":
        formula = f"{formula} = {delta:.4g}"
    neighbours = "add/remove one example" if per_example else "add/remove one client's update"
    return NoiseBound(sigma, delta, formula, where, neighbours, crossed, later_noise=later)


__all__ = ["NoiseBound", "noise_bound"]
