"""Sketch families of Song, Wang, Yu, Zhang (ICML 2023), Appendix D, behind one registry.

``get_sketch(kind, d, b, seed, **params)`` builds an operator with ``apply``
(R v), ``adjoint`` (R^T u) and ``to_dense``; ``list_sketches()`` names the kinds.
``make_sketch`` is the same function under the name client scripts use.

A leaf package: it imports only the registry and the seed streams.  Adding a
sketch family: its own module with a ``Sketch`` subclass that sets ``kind``,
plus one entry in the registration line below.
"""

from __future__ import annotations

import math

from ..errors import UserError
from ..registry import Registry
from .base import DENSE_LIMIT, Sketch
from .ams import AMSSketch
from .countsketch import CountSketch
from .gaussian import GaussianSketch
from .identity import Identity
from .sparse import SparseSketch
from .srht import SRHTSketch
from .uniform import UniformSketch

_REGISTRY = Registry("sketch")


def register_sketch(cls: type) -> type:
    """Add a ``Sketch`` subclass to the registry under its ``kind``."""
    return _REGISTRY.register(cls.kind, cls)


def list_sketches() -> list[str]:
    """Names accepted by :func:`get_sketch`."""
    return _REGISTRY.names()


def is_identity(kind: str) -> bool:
    """Whether sketch ``kind`` is the identity (b = d whatever is asked)."""
    return _REGISTRY.get(kind).identity


def sketch_dim(ratio: float, d: int) -> int:
    """b = ratio * d rounded half up; 0 for a ratio too small for d (the caller reports it)."""
    return int(math.floor(ratio * d + 0.5))


def get_sketch(kind: str, d: int, b: int, seed: int = 0, **params) -> Sketch:
    """Build the sketch ``kind`` mapping R^d -> R^b from ``seed``.

    ``none`` is the identity (b is ignored and set to d).  Raises ``ValueError``
    with one sentence for an unknown kind or b outside [1, d].
    """
    cls = _REGISTRY.get(kind)
    if not cls.identity and not 1 <= b <= d:
        raise UserError(f"sketch dimension b must satisfy 1 <= b <= d = {d}, got b = {b}")
    cls.check_params(params, b)
    return cls(d=d, b=b, seed=seed, **params)


def check_sketch_params(kind: str, params: dict, b: int | None = None) -> None:
    """Refuse unknown or bad parameters of sketch ``kind`` in one sentence (checks needing b skipped without it)."""
    _REGISTRY.get(kind).check_params(params, b)


make_sketch = get_sketch

# one entry per family
for _cls in (Identity, GaussianSketch, SRHTSketch, AMSSketch, CountSketch, SparseSketch, UniformSketch):
    register_sketch(_cls)

__all__ = ["Sketch", "DENSE_LIMIT", "get_sketch", "make_sketch", "list_sketches", "register_sketch", "is_identity", "check_sketch_params", "sketch_dim"]
