"""Configuration: parameters declared once (constraints, defaults, labels, flags), validated at the edge.

``RUN_PARAMS`` generates :class:`RunConfig`, the flags of ``leakattack run``
(:func:`add_arguments`), the validation and the sweep keys; ``PROTOCOL_PARAMS``
does the same for protocol settings shared by ``train`` and ``run --protocol``.
"""

from __future__ import annotations

from .arguments import add_arguments, config_from_args, protocol_spec_from_args
from .constraints import Choice, Constraint, Flag, Items, Number, Optional, Table, Text
from .params import DEVICES, DTYPES, MATCH_SPACES, PROTOCOL_PARAMS, RUN_PARAMS, Param
from .run import ConfigError, Derived, RunConfig, check_protocol_spec, validate_protocol

__all__ = [
    "ConfigError", "Derived", "RunConfig", "RUN_PARAMS", "PROTOCOL_PARAMS", "Param", "DEVICES", "DTYPES",
    "MATCH_SPACES", "check_protocol_spec", "validate_protocol", "add_arguments", "config_from_args",
    "protocol_spec_from_args", "Constraint", "Choice", "Number", "Flag", "Text", "Table", "Items", "Optional",
]
