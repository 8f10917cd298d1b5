"""The registry of defense families and the parser of one spec step ("name:key=value@placement")."""

from __future__ import annotations

import inspect
import math

from leakattack.constraints import read_float
from leakattack.registry import Registry

from .base import PLACEMENTS, DefenseError, Transform
from .clipping import Clip, PerExample
from .noise import Gaussian, Laplace
from .pruning import Prune
from .quantization import Quantize

_REGISTRY = Registry("defense", DefenseError)

#: the types a defense's schema may give its parameters, and how a spec's text is read as each
SCHEMA_TYPES = (float, int, str, bool)
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def register_defense(cls: type[Transform]) -> type[Transform]:
    """Add a transform class to the registry under ``cls.name``.  Anything but a ``Transform`` subclass (a function,
    an instance) is a ``TypeError``; a ``name`` left at the base's, or one a spec cannot write
    (:func:`~leakattack.registry.name_error`), no ``__call__`` of its own or one that cannot be called as
    ``step(v, gen)`` or a constructor that cannot be called as ``cls(params, placement)``, a ``ValueError``."""
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        what = "an instance of one" if isinstance(cls, Transform) else f"{type(cls).__name__} {cls!r}"
        raise TypeError(f"register_defense takes a Transform subclass (the class itself, with name, schema and "
                        f"__call__(v, gen)), got {what}")
    if cls.name == Transform.name:
        raise ValueError(f"defense class {cls.__name__} sets no name (the name a spec gives it)")
    if cls.name == "none":  # the spec "none" is no defense: it never reaches a step of that name
        raise ValueError(f"defense class {cls.__name__} is named 'none', the spec that means no defense, so no spec "
                         "could apply it: give it another name")
    for k, entry in cls.schema.items():
        if not (isinstance(entry, tuple) and len(entry) == 3):
            raise ValueError(f"defense class {cls.__name__}: schema entry '{k}' must be a tuple (type, description, "
                             f"predicate), got {entry!r:.60}")
        if entry[0] not in SCHEMA_TYPES:
            raise ValueError(f"defense class {cls.__name__}: schema entry '{k}' has type {entry[0]!r:.40}, not one of "
                             "float, int, str, bool")
        if not callable(entry[2]):
            raise ValueError(f"defense class {cls.__name__}: schema entry '{k}' has predicate {entry[2]!r:.40}, not "
                             "a callable that takes the value and returns whether it is allowed")
    if cls.__call__ is Transform.__call__:
        raise ValueError(f"defense class {cls.__name__} does not implement __call__(self, v, gen)")
    try:  # the channel calls step(v, gen)
        inspect.signature(cls.__call__).bind(None, None, None)
    except TypeError as err:
        raise ValueError(f"defense class {cls.__name__}: its __call__ cannot be called as step(v, gen), as the channel "
                         f"calls it ({err}): define __call__(self, v, gen)") from None
    except ValueError:  # no signature to read: the call decides
        pass
    try:  # a spec builds it as cls(params, placement)
        inspect.signature(cls).bind({}, None)
    except TypeError as err:
        raise ValueError(f"defense class {cls.__name__}: its constructor cannot be called as {cls.__name__}(params, "
                         f"placement), as a spec builds it ({err}): keep Transform's __init__ or take those two") \
            from None
    except ValueError:  # no signature to read: the call decides
        pass
    return _REGISTRY.register(cls.name, cls)


for _cls in (Clip, PerExample, Gaussian, Laplace, Prune, Quantize):  # one line per family
    register_defense(_cls)


def get_defense(name: str, params: dict, placement: str | None = None) -> Transform:
    """One transform ``name`` with its parameters (validated as in a spec)."""
    return parse_step({"name": name, **params, **({"placement": placement} if placement else {})})


def list_defenses() -> list[str]:
    """Names accepted in a spec."""
    return _REGISTRY.names()


def defense_class(name: str) -> type[Transform]:
    """The transform class registered as ``name`` (its ``schema``, ``placements``, ``default_placement``)."""
    return _REGISTRY.get(name)


def parse_step(item) -> Transform:
    """One transform from a step string (``name:key=value@placement``) or dict, validated; raise DefenseError."""
    if isinstance(item, str):
        name, raw, placement = _split_step(item)
    elif isinstance(item, dict):
        raw = dict(item)
        name = raw.pop("name", None)
        placement = raw.pop("placement", None)
        if not isinstance(name, str):
            raise DefenseError(f"defense step {item!r} needs a 'name'")
    else:
        raise DefenseError(f"defense step must be a string or dict, got {item!r}")
    cls = _REGISTRY.get(name)
    placement = placement or cls.default_placement
    if placement not in cls.placements:
        raise DefenseError(f"defense '{name}' cannot be placed '@{placement}'; allowed: {', '.join(cls.placements)}")
    params = {}
    for key, value in raw.items():
        if key not in cls.schema:
            allowed = ", ".join(cls.schema) or "none"
            raise DefenseError(f"defense '{name}' has no parameter '{key}' (value {value!r}); allowed: {allowed}")
        typ, what, ok = cls.schema[key]
        try:
            v = _as_type(typ, value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: inf as an integer
            raise DefenseError(f"defense '{name}': {key} must be {_finite(what, value)}, got {value!r}") from None
        if not (v == v and ok(v)) or (typ in (int, float) and v in (float("inf"), float("-inf"))):
            raise DefenseError(f"defense '{name}': {key} must be {_finite(what, value)}, got {value!r}")
        params[key] = v + 0.0 if typ is float else v  # -0.0 as 0.0: one spec, one point of a sweep
    missing = [k for k in cls.schema if k not in params]
    if name != "gaussian" and missing:
        raise DefenseError(f"defense '{name}' needs {' and '.join(k + '=' for k in missing)}")
    if name == "gaussian" and not params:
        raise DefenseError("defense 'gaussian' needs sigma= or z=")
    return cls(params, placement)


def _finite(what: str, value) -> str:
    """``what`` a parameter must be, said as finite where ``value`` is inf or nan (inf is "a positive number" too)."""
    try:
        infinite = not math.isfinite(float(value))
    except (TypeError, ValueError):
        return what
    return what.replace("a ", "a finite ", 1) if infinite and what.startswith("a ") and "number" in what else what


def _as_type(typ: type, value):
    """``value`` (a spec's text, or a dict's value) as ``typ`` of :data:`SCHEMA_TYPES`; ValueError where it is not
    one (an integer with a fraction, a bool other than true/false, yes/no, on/off, 1/0)."""
    if typ is float:
        if isinstance(value, bool):
            raise ValueError
        return read_float(value)
    if typ is int:
        return _as_int(value)
    if typ is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError
    if typ is str:
        if not isinstance(value, str):
            raise ValueError
        return value
    raise TypeError


def _as_int(value) -> int:
    if isinstance(value, bool):
        raise ValueError
    f = read_float(value)
    if f != int(f):
        raise ValueError
    return int(f)


def _split_step(text: str):
    placement = None
    if text.count("@") > 1:
        raise DefenseError(f"defense step '{text}' names {text.count('@')} placements: give one, "
                           f"@{' or @'.join(PLACEMENTS)}")
    if "@" in text:
        text, placement = text.rsplit("@", 1)
        if placement not in PLACEMENTS:
            raise DefenseError(f"unknown defense placement '@{placement}'; choose one of: {', '.join(PLACEMENTS)}")
    name, *pairs = text.split(":")
    raw = {}
    for pair in pairs:
        if "=" not in pair or not pair.split("=", 1)[0]:
            raise DefenseError(f"malformed defense parameter '{pair}' in '{text}': write KEY=VALUE")
        k, v = pair.split("=", 1)
        if k.strip() in raw:
            raise DefenseError(f"defense parameter '{k.strip()}' is given twice in '{text}': give it once")
        raw[k.strip()] = v.strip()
    return name.strip(), raw, placement


__all__ = ["register_defense", "get_defense", "defense_class", "list_defenses", "parse_step"]
