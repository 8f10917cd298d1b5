"""Sketch families of Song, Wang, Yu, Zhang (ICML 2023), Appendix D, behind one registry.

``get_sketch(kind, d, b, seed, **params)`` builds an operator with ``apply``
(R v), ``adjoint`` (R^T u) and ``to_dense``; ``list_sketches()`` names the kinds.
``make_sketch`` is the same function under the name client scripts use;
``sketch_from_description(sketch.describe())`` rebuilds the same operator.

A leaf package: it imports only the registry and the seed streams.  Adding a
sketch family: its own module with a ``Sketch`` subclass that sets ``kind``,
plus one entry in the registration line below.
"""

from __future__ import annotations

import inspect
import math
import numbers
import warnings

import torch

from ..errors import SettingWarning, UserError
from ..registry import Registry
from ..seeds import check_seed
from .ams import AMSSketch
from .base import DENSE_LIMIT, Sketch, readout_variance
from .countsketch import CountSketch
from .gaussian import GaussianSketch, default_memory_gb, regeneration_note, regeneration_refusal, regeneration_warning
from .identity import Identity
from .sparse import SparseSketch
from .srht import SRHTSketch
from .uniform import UniformSketch

_REGISTRY = Registry("sketch")


def register_sketch(cls: type[Sketch]) -> type[Sketch]:
    """Add a ``Sketch`` subclass to the registry under its ``kind``; it must implement ``_apply`` (R v) and
    ``_adjoint`` (R^T u) and be built as ``cls(d=, b=, seed=, **params)``.  Anything but a ``Sketch`` subclass (an
    instance, a name) is a ``TypeError``; a ``kind`` left at the base's or one the command line cannot write, a
    method left out or a constructor that does not take d, b and seed a ``ValueError``."""
    if not (isinstance(cls, type) and issubclass(cls, Sketch)):
        what = "an instance of one" if isinstance(cls, Sketch) else f"{type(cls).__name__} {cls!r}"
        raise TypeError(f"register_sketch takes a Sketch subclass (the class itself, its kind set), got {what}")
    if cls.kind == Sketch.kind:
        raise ValueError(f"sketch class {cls.__name__} sets no kind (the name it is registered under)")
    missing = [m for m in ("_apply", "_adjoint") if getattr(cls, m, None) is getattr(Sketch, m)]
    if missing:
        raise ValueError(f"sketch class {cls.__name__} does not implement {' and '.join(missing)}")
    try:  # get_sketch builds it as cls(d=d, b=b, seed=seed, **params): a constructor that cannot is named now
        inspect.signature(cls).bind_partial(d=1, b=1, seed=0)
    except TypeError as err:
        raise ValueError(f"sketch class {cls.__name__} cannot be built as {cls.__name__}(d=..., b=..., seed=..., "
                         f"**params), as get_sketch builds it ({err}): its __init__ takes d, b and seed") from None
    except ValueError:  # no signature to read: the constructor decides
        pass
    return _REGISTRY.register(cls.kind, cls)


def list_sketches() -> list[str]:
    """Names accepted by :func:`get_sketch`."""
    return _REGISTRY.names()


def sketch_class(kind: str) -> type[Sketch]:
    """The ``Sketch`` subclass registered as ``kind`` (its class methods need no operator: ``adjoint_columns``)."""
    return _REGISTRY.get(kind)


def is_identity(kind: str) -> bool:
    """Whether sketch ``kind`` is the identity (b = d whatever is asked)."""
    return _REGISTRY.get(kind).identity


def sketch_dim(ratio: float, d: int) -> int:
    """b = ratio * d rounded half up; 0 for a ratio too small for d (the caller reports it)."""
    return int(math.floor(ratio * d + 0.5))


def _whole(value) -> bool:
    """Whether ``value`` is a whole number of a type that says so (an int or a NumPy integer; not True/False)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_memory_gb(memory_gb) -> None:
    """Refuse in one sentence a ``memory_gb`` (:func:`get_sketch`'s bound on a dense matrix) that is not None or a
    non-negative finite number."""
    if memory_gb is not None and (isinstance(memory_gb, bool) or not isinstance(memory_gb, numbers.Real)
                                  or not 0 <= float(memory_gb) < math.inf):
        raise UserError(f"memory_gb must be a non-negative number of GB or None (a quarter of the available RAM), "
                        f"got {memory_gb!r}")


def get_sketch(kind: str, d: int, b: int | None, seed: int = 0, *, memory_gb: float | None = None,
               **params) -> Sketch:
    """Build the sketch ``kind`` mapping R^d -> R^b from ``seed``.

    ``none`` is the identity: b is set to d (``b=None`` asks for that), and a b other than d
    is named in a :class:`~leakattack.errors.SettingWarning` (as ``--sketch none --sketch-dim B``
    warns).  ``memory_gb`` bounds the matrix a dense family (gaussian, ams) may hold (default: a quarter of
    the available RAM); it never changes R.  Raises ``ValueError`` (:class:`UserError`) with one
    sentence for an unknown kind, a d, b or seed that is not a whole number (1.5, "100", True),
    d < 1, a seed outside [0, 2^63 - 1], a negative or non-numeric ``memory_gb``, or b outside [1, d], checked in
    that order.
    """
    cls = _REGISTRY.get(kind)
    if cls.identity and b is None:  # the identity's b is d: leaving it out asks for nothing else
        b = d
    for name, value in (("gradient length d", d), ("sketch dimension b", b), ("sketch seed", seed)):
        if not _whole(value):
            raise UserError(f"the {name} must be an integer, got {value!r} ({type(value).__name__})")
    d, b, seed = int(d), int(b), int(seed)  # type: ignore[arg-type]  # b is an integer by now
    if d < 1:
        raise UserError(f"the gradient length d must be at least 1, got d = {d}")
    check_seed(seed, "sketch seed")
    check_memory_gb(memory_gb)
    if cls.identity:
        if b != d:
            warnings.warn(f"sketch '{kind}' sends the whole gradient (b = d = {d}): b = {b} changes nothing",
                          SettingWarning, stacklevel=2)
        b = d
    elif not 1 <= b <= d:
        raise UserError(f"sketch dimension b must satisfy 1 <= b <= d = {d}, got b = {b}")
    cls.check_params(params, b)
    if getattr(cls, "takes_memory_budget", False):
        params = {**params, "memory_gb": memory_gb}
    sketch = cls(d=d, b=b, seed=seed, **params)
    if not cls.__module__.startswith(__name__ + "."):  # a family registered from outside: checked once per build
        _check_adjoint(sketch)
    return sketch


#: relative tolerance of the adjoint check of a family registered from outside leakattack (float64)
ADJOINT_TOLERANCE = 1e-6


def _check_adjoint(sketch: Sketch) -> None:
    """One sentence where <R v, u> and <v, R^T u> differ for random v and u (float64, seeded): R^T is what the
    attack's gradient and the label rules read through, and a wrong one gives wrong results without an error."""
    gen = torch.Generator().manual_seed(sketch.seed)
    v = torch.randn(sketch.d, dtype=torch.float64, generator=gen).to(sketch.device)
    u = torch.randn(sketch.b, dtype=torch.float64, generator=gen).to(sketch.device)
    with torch.no_grad():
        rv, rtu = sketch.apply(v), sketch.adjoint(u)
        left, right = float(rv @ u), float(v @ rtu)
        scale = float(rv.norm() * u.norm()) + float(v.norm() * rtu.norm())
    for method, out in (("_apply", rv), ("_adjoint", rtu)):  # the method at fault where one returns no numbers
        bad = int((~torch.isfinite(out)).sum())
        if bad:
            raise UserError(f"sketch '{sketch.kind}': its {method} returned {bad} NaN or infinite value(s) of "
                            f"{out.numel()} for a random finite vector")
    if not abs(left - right) <= ADJOINT_TOLERANCE * max(scale, 1e-300):
        raise UserError(f"sketch '{sketch.kind}': its _adjoint is not the transpose of its _apply (<R v, u> = "
                        f"{left:.6g} against <v, R^T u> = {right:.6g} for random v and u)")


def check_sketch_params(kind: str, params: dict, b: int | None = None) -> None:
    """Refuse unknown or bad parameters of sketch ``kind`` in one sentence (checks needing b skipped without it)."""
    _REGISTRY.get(kind).check_params(params, b)


make_sketch = get_sketch
"""The same function as :func:`get_sketch`, by the name the paper's notation suggests (a sketch R is made)."""

#: the keys every ``Sketch.describe()`` holds; any other key is a parameter of the family
DESCRIPTION_KEYS = ("kind", "d", "b", "seed")


def check_description(desc: dict) -> int:
    """Check that ``desc`` is a ``Sketch.describe()`` dict, without building R; returns b, the message length.

    Raises ``UserError`` with one sentence naming the first fault.
    """
    if not isinstance(desc, dict):
        raise UserError(f"a sketch description must be a dict with keys {', '.join(DESCRIPTION_KEYS)}, "
                        f"got {type(desc).__name__}")
    missing = [k for k in DESCRIPTION_KEYS if k not in desc]
    if missing:
        raise UserError(f"the sketch description has no '{missing[0]}'")
    kind = desc["kind"]
    if not isinstance(kind, str) or kind not in list_sketches():
        raise UserError(f"unknown sketch {kind!r}; choose one of: {', '.join(list_sketches())}")
    for key in ("d", "b", "seed"):
        value = desc[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise UserError(f"the sketch description's {key} must be a "
                            f"{'non-negative' if key == 'seed' else 'positive'} integer, got {value!r}")
    if is_identity(kind):
        return desc["d"]
    if desc["b"] > desc["d"]:
        raise UserError(f"the sketch description has b = {desc['b']} > d = {desc['d']}")
    check_sketch_params(kind, {k: v for k, v in desc.items() if k not in DESCRIPTION_KEYS}, desc["b"])
    return desc["b"]


def sketch_from_description(desc: dict) -> Sketch:
    """The operator ``desc = sketch.describe()`` stands for: the same kind, d, b, seed and parameters, so the same R.

    Raises ``UserError`` with one sentence when ``desc`` is not such a description.
    """
    check_description(desc)
    params = {k: v for k, v in desc.items() if k not in DESCRIPTION_KEYS}
    return get_sketch(desc["kind"], desc["d"], desc["b"], seed=desc["seed"], **params)


# one entry per family
for _cls in (Identity, GaussianSketch, SRHTSketch, AMSSketch, CountSketch, SparseSketch, UniformSketch):
    register_sketch(_cls)

__all__ = ["Sketch", "DENSE_LIMIT", "check_memory_gb", "default_memory_gb", "regeneration_note", "regeneration_refusal",
           "regeneration_warning", "get_sketch",
           "make_sketch", "sketch_from_description", "check_description", "list_sketches", "register_sketch",
           "sketch_class", "is_identity", "check_sketch_params", "sketch_dim", "readout_variance"]
