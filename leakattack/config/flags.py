"""Command-line flags generated from the declared parameters, without importing torch.

:func:`add_arguments` adds one flag per declared parameter (grouped as in
``leakattack run --help``); the protocol settings become ``protocol_spec``
(:func:`protocol_spec_from_args`).  Turning parsed flags into a RunConfig is
:func:`~leakattack.config.arguments.config_from_args`.
"""

from __future__ import annotations

import argparse
import json

from .constraints import Flag, Items, Number, Optional, Table
from .params import PROTOCOL_PARAMS, RUN_PARAMS, Param, help_text

GROUP_TITLES = {"victim": "victim", "sketch": "sketch (what the client sends)", "attacker": "attacker",
                "data": "data", "output": "output", "protocol": "protocol"}
#: dest prefix of the protocol flags (their names overlap run parameters, e.g. batch_size)
SPEC_DEST = "spec_"


def parse_pair(text: str) -> tuple[str, object]:
    """NAME=VALUE with VALUE read as JSON when it parses (numbers, booleans), else as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"sketch parameter '{text}' must look like NAME=VALUE")
    key, val = text.split("=", 1)
    try:
        return key, json.loads(val)
    except json.JSONDecodeError:
        return key, val


def _value_type(c):
    inner = c.inner if isinstance(c, Optional) else c
    if isinstance(inner, Number):
        return int if inner.integer else float
    return str


def add_flag(group, p: Param, dest: str | None = None) -> None:
    """One parameter's flag in ``group``."""
    dest = dest or p.name
    if isinstance(p.constraint, Flag):
        group.add_argument(p.option, dest=dest, action="store_false" if p.invert else "store_true",
                           default=p.default, help=help_text(p))
    elif isinstance(p.constraint, Optional) and isinstance(p.constraint.inner, Flag):  # on, off, or left to a default
        group.add_argument(p.option, dest=dest, action=argparse.BooleanOptionalAction, default=p.default,
                           help=help_text(p))
    elif isinstance(p.constraint, Table):
        group.add_argument(p.option, dest=dest, type=parse_pair, action="append", default=[], metavar="NAME=VALUE",
                           help=help_text(p))
    elif isinstance(p.constraint, Items):
        group.add_argument(p.option, dest=dest, action="append", default=[], metavar=p.constraint.metavar,
                           help=help_text(p))
    else:
        group.add_argument(p.option, dest=dest, type=_value_type(p.constraint), default=p.default, help=help_text(p))


def add_arguments(parser: argparse.ArgumentParser, params=RUN_PARAMS, protocol: bool = True) -> dict:
    """Add the flags of ``params`` (and the protocol settings) to ``parser``; returns the groups by name."""
    groups = {}
    for p in params:
        if p.option is None:
            continue
        if p.group not in groups:
            groups[p.group] = parser.add_argument_group(GROUP_TITLES.get(p.group, p.group))
        add_flag(groups[p.group], p)
    if protocol:
        add_protocol_arguments(groups.setdefault("protocol", parser.add_argument_group("protocol")))
    return groups


def add_protocol_arguments(group) -> None:
    """The protocol settings shared by ``train`` and ``run --protocol``."""
    for p in PROTOCOL_PARAMS:
        add_flag(group, p, dest=SPEC_DEST + p.name)


def protocol_spec_from_args(a: argparse.Namespace) -> dict:
    return {p.name: getattr(a, SPEC_DEST + p.name) for p in PROTOCOL_PARAMS}


__all__ = ["GROUP_TITLES", "SPEC_DEST", "add_arguments", "add_flag", "add_protocol_arguments",
           "protocol_spec_from_args", "parse_pair"]
