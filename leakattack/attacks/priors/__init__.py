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

A prior is registered as a builder ``builder(weight, *, obs) -> prior`` (a class whose
constructor takes the weight and the keyword ``obs`` is one): :func:`register_prior`
(``weight``: the default weight; ``check``: optional, weight -> None or a one-sentence
complaint, for priors whose weight means something other than a penalty's factor).  A
plain function of x is not a builder: wrap it, ``lambda weight, obs=None: lambda x:
weight * penalty(x)``.  Adding a built-in prior: its own module here plus one
``register_prior`` line below.  On the command line a prior is ``NAME[:WEIGHT]``
(:func:`parse_prior`); weight 0 turns any prior off.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

from ...constraints import read_float
from ...errors import UserError, a_type
from ...registry import Registry
from .bn import BatchNormPrior, batch_moments, bn_statistics_distance
from .dip import DeepImagePrior, weight_error
from .tv import TotalVariation, total_variation

_PRIORS = Registry("prior")


def register_prior(name: str, builder: Callable[..., Any] | None = None, *, weight: float = 1.0,
                   check: Callable[[float], str | None] | None = None, reparametrises: bool | None = None):
    """Register ``builder(weight, *, obs) -> prior`` as prior ``name`` (a decorator without ``builder``).

    The prior is a penalty (a callable x -> weighted penalty, x a batch of images) or a
    re-parametrisation (see the module docstring).  ``weight`` is the weight ``--prior NAME``
    takes; ``check(weight)`` returns None or a one-sentence complaint; ``reparametrises``: whether the priors
    it builds re-parametrise the images (None: whether the builder itself has ``parametrise``, as a class that
    defines it does; a function that returns one says True), which settles how runs name it and whether the box
    stays on before any prior is built.  A builder that cannot be
    called as ``builder(weight, obs=obs)`` raises ``TypeError``, a bad weight ``ValueError``, a
    name registered twice ``ValueError``, as does a name the command line cannot write (``--prior NAME:WEIGHT``:
    :func:`~leakattack.registry.name_error`; not a string: ``TypeError``).
    """
    _PRIORS.check_name(name)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise UserError(f"the default weight of prior '{name}' must be a non-negative number, got {weight!r}")
    if check is not None and not callable(check):
        raise TypeError(f"the check of prior '{name}' must be a callable weight -> None or a sentence, got {check!r}")

    def deco(b):
        if not callable(b):
            raise TypeError(f"prior '{name}' must be registered with a builder(weight, *, obs), got {b!r}")
        try:
            inspect.signature(b).bind(float(weight), obs=None)
        except TypeError:
            raise TypeError(f"prior '{name}': {getattr(b, '__name__', b)!s}{_signature(b)} cannot be called as "
                            "builder(weight, obs=obs); wrap a plain function of x as "
                            "lambda weight, obs=None: lambda x: weight * penalty(x)") from None
        except ValueError:  # a builtin without a signature: it is called as it is
            pass
        remaps = hasattr(b, "parametrise") if reparametrises is None else bool(reparametrises)
        return _PRIORS.register(name, b, weight=float(weight), check=check, reparametrises=remaps)

    return deco if builder is None else deco(builder)


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


register_prior("tv", TotalVariation, weight=1e-4)
register_prior("bn", BatchNormPrior, weight=1e-2)
register_prior("dip", DeepImagePrior, weight=1.0, check=weight_error)


def list_priors() -> list[str]:
    """Names accepted by :func:`get_prior`."""
    return _PRIORS.names()


def penalty_label(name: str) -> str | None:
    """How messages name prior ``name`` as a term of the objective (``TV``, ``the bn prior``); None for a
    re-parametrisation (``dip``), which adds no term."""
    _PRIORS.get(name)
    if _PRIORS.meta(name)["reparametrises"]:
        return None
    return "TV" if name == "tv" else f"the {name} prior"


def get_prior(name: str, weight: float, obs=None):
    """Prior ``name`` with weight ``weight``, for the observation ``obs`` (needed by ``bn``); one UserError sentence
    where the prior built is not the kind its registration declares (``reparametrises``)."""
    prior = _PRIORS.get(name)(weight, obs=obs)
    declared = bool(_PRIORS.meta(name)["reparametrises"])
    if not hasattr(prior, "parametrise") and not callable(prior):  # neither kind: called at the first step else
        got = "None" if prior is None else a_type(prior)
        kind = ("a re-parametrisation (an object with parametrise), as it was registered" if declared else
                "a callable x -> weighted penalty (or a re-parametrisation registered with reparametrises=True)")
        raise UserError(f"prior '{name}''s builder returned {got}, not {kind}")
    if hasattr(prior, "parametrise") != declared:
        raise UserError(f"prior '{name}' was registered as a {'re-parametrisation' if declared else 'penalty'} and "
                        f"its builder returned a {'penalty' if declared else 're-parametrisation'}: register it with "
                        f"reparametrises={not declared}")
    return prior


def parse_prior(text: str) -> tuple[str, float]:
    """``NAME[:WEIGHT]`` -> (name, weight); without a weight, the prior's default.  One-sentence UserError."""
    if not isinstance(text, str):
        raise UserError(f"a prior must look like NAME or NAME:WEIGHT, got {text!r}")
    name, sep, weight = text.partition(":")
    _PRIORS.get(name)
    if not sep:
        return name, float(_PRIORS.meta(name)["weight"])
    try:
        value = read_float(weight)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        finite = "finite " if math.isinf(value) else ""  # inf is not negative: it is not finite
        raise UserError(f"the weight of prior '{name}' must be a {finite}non-negative number, got '{weight}'")
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


__all__ = ["get_prior", "list_priors", "register_prior", "parse_prior", "penalty_label", "prior_error",
           "total_variation", "TotalVariation",
           "BatchNormPrior", "batch_moments", "bn_statistics_distance", "DeepImagePrior"]
