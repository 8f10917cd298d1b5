"""Sketch families of Song, Wang, Yu, Zhang (ICML 2023), Appendix D, behind one registry.

``make_sketch(kind, d, b, seed, **params)`` builds an operator with ``apply``
(R v), ``adjoint`` (R^T u) and ``to_dense``; ``list_sketches()`` names the kinds.
"""

from __future__ import annotations

import math
from typing import Callable

from ..registry import Registry
from .base import DENSE_LIMIT, Sketch

_REGISTRY = Registry("sketch")


def register_sketch(name: str) -> Callable[[type], type]:
    """Class decorator adding a sketch family to the registry under ``name``."""

    def deco(cls: type) -> type:
        cls.kind = name
        return _REGISTRY.register(name, cls)

    return deco


def list_sketches() -> list[str]:
    """Names accepted by :func:`make_sketch`."""
    return _REGISTRY.names()


def sketch_dim(ratio: float, d: int) -> int:
    """b = ratio * d rounded half up; 0 for a ratio too small for d (the caller reports it)."""
    return int(math.floor(ratio * d + 0.5))


def make_sketch(kind: str, d: int, b: int, seed: int = 0, **params) -> Sketch:
    """Build the sketch ``kind`` mapping R^d -> R^b from ``seed``.

    ``none`` is the identity (b is ignored and set to d).  Raises ``ValueError``
    with one sentence for an unknown kind or b outside [1, d].
    """
    cls = _REGISTRY.get(kind)
    if kind != "none" and not 1 <= b <= d:
        raise ValueError(f"sketch dimension b must satisfy 1 <= b <= d = {d}, got b = {b}")
    return cls(d=d, b=b, seed=seed, **params)


# one line per family: importing the module registers it
from . import identity, gaussian, srht, ams, countsketch, sparse, uniform  # noqa: E402,F401

__all__ = ["Sketch", "DENSE_LIMIT", "make_sketch", "list_sketches", "register_sketch", "sketch_dim"]
