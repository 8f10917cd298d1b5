"""The one small registry every family shares (models, sketches, attacks, priors,
optimisers, data sets, defenses, protocols, sweep backends).

Each family exposes the same verbs, the torchvision ``models/_api.py`` way:
``get_X(name, ...)`` builds one and ``list_X()`` names them; this class holds the
names, refuses a name registered twice and says, in one sentence, when a name is
unknown.  A leaf module: it imports nothing of ours.
"""

from __future__ import annotations

from typing import Any

from .errors import UserError


class Registry:
    """Name -> constructor (plus metadata) for one family; ``get`` raises ``error`` for an unknown name."""

    def __init__(self, family: str, error: type[Exception] = UserError):
        self.family = family
        self.error = error
        self._items: dict[str, Any] = {}
        self._meta: dict[str, dict] = {}

    def register(self, name: str, obj: Any = None, **meta) -> Any:
        """Register ``obj`` under ``name`` (metadata in ``meta``); without ``obj``, a decorator that does so.

        Registering a name twice raises ``ValueError``: two families must not
        silently shadow each other.
        """

        def deco(o):
            if name in self._items:
                raise ValueError(f"{self.family} '{name}' is registered twice")
            self._items[name] = o
            self._meta[name] = dict(meta)
            return o

        return deco if obj is None else deco(obj)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def get(self, name: str) -> Any:
        """The constructor registered under ``name``."""
        if name not in self._items:
            raise self.error(f"unknown {self.family} '{name}'; choose one of: {', '.join(self.names())}")
        return self._items[name]

    def meta(self, name: str) -> dict:
        """The metadata registered beside ``name``."""
        self.get(name)
        return self._meta[name]


__all__ = ["Registry"]
