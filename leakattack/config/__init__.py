"""Configuration: parameters declared once (constraints, defaults, labels, flags), validated at the edge.

``RUN_PARAMS`` generates the flags of ``leakattack run`` (:func:`add_arguments`),
the validation and the sweep keys, and :class:`RunConfig` types one field per entry;
``PROTOCOL_PARAMS`` does the same for protocol settings shared by ``train`` and ``run --protocol``.

The declarations and the flags import no torch (:mod:`.names` holds the registry names
they show); :class:`RunConfig` and the checks that need the registries (:mod:`.run`) are
imported on first use of one of their names, so that building a command line stays cheap.
"""

from __future__ import annotations

import importlib

from .constraints import Choice, Constraint, Flag, Items, Number, Optional, Table, Text
from .flags import add_arguments, protocol_spec_from_args
from .params import DEVICES, DTYPES, MATCH_SPACES, PROTOCOL_PARAMS, RUN_PARAMS, Param

#: names resolved on first use, from the module that needs torch
_LAZY = {"ConfigError": "run", "check_value": "run", "Derived": "run", "RunConfig": "run", "check_protocol_spec": "run",
         "validate_protocol": "run", "protocol_json": "run", "warn_unread": "run", "attack_option_names": "run",
         "config_from_args": "arguments"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConfigError", "check_value", "attack_option_names", "Derived", "RunConfig", "RUN_PARAMS", "PROTOCOL_PARAMS",
    "Param", "DEVICES", "DTYPES", "MATCH_SPACES", "check_protocol_spec", "validate_protocol", "protocol_json",
    "warn_unread", "add_arguments", "config_from_args",
    "protocol_spec_from_args", "Constraint", "Choice", "Number", "Flag", "Text", "Table", "Items", "Optional",
]
