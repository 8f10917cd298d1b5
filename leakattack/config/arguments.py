"""Parsed command-line flags back to a configuration: :func:`config_from_args` builds the :class:`RunConfig`.

The flags themselves come from :mod:`.flags` (re-exported here), which imports no torch.
"""

from __future__ import annotations

import argparse
from typing import Any

from .constraints import Items, Table
from .flags import (
    GROUP_TITLES,
    SPEC_DEST,
    add_arguments,
    add_flag,
    add_protocol_arguments,
    attack_params_from_args,
    pairs_table,
    parse_pair,
    protocol_spec_from_args,
)
from .params import PROTOCOL_PARAMS, RUN_PARAMS
from .run import RunConfig


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed ``run`` flags (not validated yet)."""
    values: dict[str, Any] = {}
    for p in RUN_PARAMS:
        if p.option is None:
            continue
        v = getattr(a, p.name)
        values[p.name] = pairs_table(p.option, v) if isinstance(p.constraint, Table) else list(v) \
            if isinstance(p.constraint, Items) else v
    if hasattr(a, SPEC_DEST + PROTOCOL_PARAMS[0].name):
        values["protocol_spec"] = protocol_spec_from_args(a)
    values["attack_params"] = attack_params_from_args(a)
    given: frozenset[str] = getattr(a, "given_flags", frozenset())  # the dests the command line gave (cli.main)
    values["given"] = frozenset({p.name for p in RUN_PARAMS if p.name in given}
                                | {f"protocol_spec.{p.name}" for p in PROTOCOL_PARAMS if SPEC_DEST + p.name in given})
    return RunConfig(**values)


__all__ = ["add_arguments", "add_flag", "add_protocol_arguments", "config_from_args", "protocol_spec_from_args",
           "parse_pair", "GROUP_TITLES", "SPEC_DEST"]
