"""The one small registry every family shares (models, sketches, attacks, priors,
optimisers, data sets, defenses, protocols, sweep backends).

Each family exposes the same verbs, the torchvision ``models/_api.py`` way:
``get_X(name, ...)`` builds one and ``list_X()`` names them; this class holds the
names, refuses a name registered twice or one the command line could not write (:func:`name_error`) and
says, in one sentence, when a name is unknown.  A leaf module: it imports nothing of ours.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from typing import Any

from .errors import UserError

#: the import packages whose registrations are built in; anything another module registers is the user's
BUILT_IN = ("leakattack", "targets", "defenses")

#: characters the command line's specs give a meaning (``NAME:WEIGHT``, ``name:key=value@placement``, lists split at
#: commas): no registered name holds one, nor white space
RESERVED_CHARACTERS = ":,=@"


def name_error(family: str, name: Any) -> str | None:
    """None when ``name`` can name a member of ``family`` on the command line, else why not in one sentence: it must
    be a non-empty string without white space or any of :data:`RESERVED_CHARACTERS`."""
    if not isinstance(name, str):
        return f"{family} name must be a string, got {type(name).__name__} {name!r}"
    bad = sorted({c for c in name if c in RESERVED_CHARACTERS or c.isspace()})
    if name.startswith("-"):
        return (f"{family} name {name!r} cannot be written on the command line: a name starting with '-' reads as a "
                "flag")
    if not name or bad:
        held = f" (it holds {' '.join(repr(c) for c in bad)})" if bad else ""
        return (f"{family} name {name!r} cannot be written on the command line{held}: a name is a non-empty string "
                f"without white space or any of {' '.join(RESERVED_CHARACTERS)}")
    return None


def defined_in(obj: Any) -> str | None:
    """The module ``obj`` (a class or function, or a ``functools.partial`` of one) was defined in, or None where it
    names none."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else None


def is_built_in(module: str | None) -> bool:
    """Whether ``module`` belongs to one of the :data:`BUILT_IN` packages."""
    return module is not None and module.split(".")[0] in BUILT_IN


def where(obj: Any) -> str:
    """``module.Class`` for a built-in, else the class and the file it was defined in (a plugin file's module has a
    generated name that says nothing to its author)."""
    module = defined_in(obj)
    while isinstance(obj, functools.partial):
        obj = obj.func
    name = getattr(obj, "__qualname__", type(obj).__name__)
    if is_built_in(module):
        return f"{module}.{name}"
    file = getattr(sys.modules.get(module or ""), "__file__", None)
    return f"{name} of {file}" if file else f"{module or '?'}.{name}"


_ALL: "weakref.WeakSet[Registry]" = weakref.WeakSet()


def _registering_module() -> str | None:
    """The module whose code registers a name now: the first frame, outward from the registry's, that runs outside
    the :data:`BUILT_IN` packages; None where the top level of a built-in module (its import) comes first."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if not isinstance(module, str) or not is_built_in(module):
            return module if isinstance(module, str) else None
        if frame.f_code.co_name == "<module>":
            return None
        frame = frame.f_back
    return None


def members_outside() -> list[tuple[str, str, str]]:
    """(module, family, name) of every name registered now, in every registry, by code outside the :data:`BUILT_IN`
    packages (the user's own code, a plugin), by family and in registration order.  The module is the one whose code
    registered the name (importing it registers the name again), else where its class or builder is defined: a
    plugin's ``register_dataset("my-digits", load_digits)`` of a built-in loader is the plugin's."""
    out = []
    for registry in sorted(_ALL, key=lambda r: r.family):
        for name in registry.names():
            module = registry._by.get(name) or defined_in(registry._items[name])
            if module is not None and not is_built_in(module):
                out.append((module, registry.family, name))
    return out


def registered_outside() -> dict[str, list[str]]:
    """Module -> the names registered now, in every registry, with a class or builder defined outside the
    :data:`BUILT_IN` packages (the user's own code, a plugin): ``{"myplugins": ["attack 'grey'", ...]}``."""
    out: dict[str, list[str]] = {}
    for module, family, name in members_outside():
        out.setdefault(module, []).append(f"{family} '{name}'")
    return dict(sorted(out.items()))


class Registry:
    """Name -> constructor (plus metadata) for one family; ``get`` raises ``error`` for an unknown name."""

    def __init__(self, family: str, error: type[Exception] = UserError):
        self.family = family
        self.error = error
        self._items: dict[str, Any] = {}
        self._meta: dict[str, dict] = {}
        self._by: dict[str, str] = {}  #: name -> the module outside leakattack whose code registered it
        _ALL.add(self)

    def register(self, name: str, obj: Any = None, **meta) -> Any:
        """Register ``obj`` under ``name`` (metadata in ``meta``); without ``obj``, a decorator that does so.

        Registering a name twice raises ``ValueError``: two families must not
        silently shadow each other.  A name that is not a string raises ``TypeError``, and an empty one or one
        holding white space or a reserved character (:func:`name_error`) ``ValueError``, before anything is kept.
        """
        self.check_name(name)

        def deco(o):
            if name in self._items:
                raise ValueError(f"{self.family} '{name}' is registered twice (the name is taken by "
                                 f"{where(self._items[name])}): choose another name")
            self._items[name] = o
            self._meta[name] = dict(meta)
            by = _registering_module()
            if by is not None:
                self._by[name] = by
            return o

        return deco if obj is None else deco(obj)

    def check_name(self, name: Any) -> None:
        """Raise ``TypeError`` (not a string) or ``ValueError`` (empty, white space, a reserved character) with the
        sentence of :func:`name_error` when ``name`` cannot name a member of this family."""
        problem = name_error(self.family, name)
        if problem:
            raise (ValueError if isinstance(name, str) else TypeError)(problem)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def get(self, name: str) -> Any:
        """The constructor registered under ``name``."""
        if not isinstance(name, str) or name not in self._items:
            shown = f"'{name}'" if isinstance(name, str) else f"{name!r} ({type(name).__name__})"
            raise self.error(f"unknown {self.family} {shown}; choose one of: {', '.join(self.names())}")
        return self._items[name]

    def meta(self, name: str) -> dict:
        """The metadata registered beside ``name``."""
        self.get(name)
        return self._meta[name]


__all__ = ["Registry", "RESERVED_CHARACTERS", "BUILT_IN", "members_outside", "name_error", "registered_outside",
           "where"]
