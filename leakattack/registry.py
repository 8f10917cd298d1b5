"""The one small registry every family shares (models, sketches, protocols, defenses).

Each family keeps its own verbs (``targets.get_model``/``list_models``,
``leakattack.sketch.make_sketch``/``list_sketches``, ...), the torchvision
``models/_api.py`` way; this class only holds the names and says, in one
sentence, when a name is unknown.
"""

from __future__ import annotations

from typing import Any


class Registry:
    """Name -> constructor for one family; ``get`` raises ``error`` for an unknown name."""

    def __init__(self, family: str, error: type[Exception] = ValueError):
        self.family = family
        self.error = error
        self._items: dict[str, Any] = {}

    def register(self, name: str, obj: Any = None) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, a decorator that does so."""

        def deco(o):
            self._items[name] = o
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


__all__ = ["Registry"]
