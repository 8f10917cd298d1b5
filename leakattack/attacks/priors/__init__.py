"""Image priors for gradient matching: ``get_prior(name, weight)`` / ``list_priors()``.

A prior is a callable x -> penalty added to the matching objective.  Adding a
prior: its own module here, plus one registration line.
"""

from __future__ import annotations

from ...registry import Registry
from .tv import TotalVariation, total_variation

_PRIORS = Registry("prior")
_PRIORS.register("tv", TotalVariation)


def list_priors() -> list[str]:
    """Names accepted by :func:`get_prior`."""
    return _PRIORS.names()


def get_prior(name: str, weight: float):
    """Prior ``name`` with weight ``weight``."""
    return _PRIORS.get(name)(weight)


__all__ = ["get_prior", "list_priors", "total_variation", "TotalVariation"]
