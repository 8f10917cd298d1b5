"""Image priors for gradient matching: ``get_prior(name, weight, obs=obs)`` / ``list_priors()``.

A prior is built for one observation (the ``bn`` prior reads the victim's
BatchNorm layers from it) and is one of two kinds:

- a penalty: a callable x -> weighted penalty added to the matching objective
  (``tv``, ``bn``);
- a re-parametrisation: an object with ``parametrise(shape, restarts, seed,
  device, dtype)`` returning the rows the attack optimises instead of the dummy
  data (``z0``, one row per restart), their images ``x_of(rows)`` (k, *shape),
  differentiable in the rows, and ``clamp`` (whether the box [0, 1] still applies).
  ``dip`` (the deep image prior) is one: x = G_theta(z), the attack optimises theta.
  At most one re-parametrisation runs; the penalties act on its images.

Adding a prior: its own module here, plus one registration line (``weight``: the
default weight; ``check``: optional, weight -> None or a one-sentence complaint,
for priors whose weight means something other than a penalty's factor).  On the
command line a prior is ``NAME[:WEIGHT]`` (:func:`parse_prior`); weight 0 turns
any prior off.
"""

from __future__ import annotations

import math

from ...errors import UserError
from ...registry import Registry
from .bn import BatchNormPrior, batch_moments, bn_statistics_distance
from .dip import DeepImagePrior, weight_error
from .tv import TotalVariation, total_variation

_PRIORS = Registry("prior")
_PRIORS.register("tv", TotalVariation, weight=1e-4)
_PRIORS.register("bn", BatchNormPrior, weight=1e-2)
_PRIORS.register("dip", DeepImagePrior, weight=1.0, check=weight_error)


def list_priors() -> list[str]:
    """Names accepted by :func:`get_prior`."""
    return _PRIORS.names()


def penalty_label(name: str) -> str | None:
    """How messages name prior ``name`` as a term of the objective (``TV``, ``the bn prior``); None for a
    re-parametrisation (``dip``), which adds no term."""
    if hasattr(_PRIORS.get(name), "parametrise"):
        return None
    return "TV" if name == "tv" else f"the {name} prior"


def get_prior(name: str, weight: float, obs=None):
    """Prior ``name`` with weight ``weight``, for the observation ``obs`` (needed by ``bn``)."""
    return _PRIORS.get(name)(weight, obs=obs)


def parse_prior(text: str) -> tuple[str, float]:
    """``NAME[:WEIGHT]`` -> (name, weight); without a weight, the prior's default.  One-sentence UserError."""
    if not isinstance(text, str):
        raise UserError(f"a prior must look like NAME or NAME:WEIGHT, got {text!r}")
    name, sep, weight = text.partition(":")
    _PRIORS.get(name)
    if not sep:
        return name, float(_PRIORS.meta(name)["weight"])
    try:
        value = float(weight)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UserError(f"the weight of prior '{name}' must be a non-negative number, got '{weight}'")
    check = _PRIORS.meta(name).get("check")
    problem = check(value) if check is not None else None
    if problem:
        raise UserError(problem)
    return name, value


def prior_error(text) -> str | None:
    """None when ``text`` is a valid ``NAME[:WEIGHT]``, else the one-sentence complaint."""
    try:
        parse_prior(text)
    except UserError as err:
        return str(err)
    return None


__all__ = ["get_prior", "list_priors", "parse_prior", "penalty_label", "prior_error", "total_variation",
           "TotalVariation",
           "BatchNormPrior", "batch_moments", "bn_statistics_distance", "DeepImagePrior"]
