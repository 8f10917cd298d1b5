"""Command-line flags generated from the declared parameters, without importing torch.

:func:`add_arguments` adds one flag per declared parameter (grouped as in
``leakattack run --help``); the protocol settings become ``protocol_spec``
(:func:`protocol_spec_from_args`).  Turning parsed flags into a RunConfig is
:func:`~leakattack.config.arguments.config_from_args`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from ..constraints import read_float, read_int
from ..errors import UserError
from .constraints import Cores, Flag, Items, Number, Optional, Steps, Table
from .params import PROTOCOL_PARAMS, RUN_PARAMS, Param, help_text

GROUP_TITLES = {"victim": "victim", "sketch": "sketch (what the client sends)", "attacker": "attacker",
                "data": "data", "output": "output", "protocol": "protocol"}
#: dest prefix of the protocol flags (their names overlap run parameters, e.g. batch_size)
SPEC_DEST = "spec_"
#: dest prefix of the flags of the attacks' own options (gathered into ``attack_params``)
ATTACK_DEST = "attack_param_"
#: dest of the attacks' options -> their flags (for refusals that name a flag)
ATTACK_FLAGS = "attack_flags"


def parse_pair(text: str) -> tuple[str, object]:
    """NAME=VALUE with VALUE read as JSON when it parses (numbers, booleans), else as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"'{text}' must look like NAME=VALUE")
    key, val = text.split("=", 1)
    try:
        return key, json.loads(val)
    except json.JSONDecodeError:
        return key, val


def pairs_table(option: str, pairs: list[tuple[str, object]]) -> dict:
    """The NAME=VALUE ``pairs`` of flag ``option`` as a table; a name given twice is refused (UserError: ``--model-param
    act is given 2 times (act=relu, act=tanh): give it once``)."""
    keys = [key for key, _ in pairs]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice is not None:
        raise UserError(f"{option} {twice} is given {keys.count(twice)} times "
                        f"({', '.join(f'{key}={val}' for key, val in pairs if key == twice)}): give it once")
    return dict(pairs)


def threads_value(text: str) -> int | None:
    """A ``--threads`` value: a count of threads, or ``auto`` (None: the choice the command makes by itself)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return read_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a count of threads or auto") from None


def _value_type(c):
    inner = c.inner if isinstance(c, Optional) else c
    if isinstance(inner, Cores) and isinstance(c, Optional):  # None is auto
        return threads_value
    if isinstance(inner, Number):
        return read_int if inner.integer else read_float
    return str


class _StepsOnce(argparse.Action):
    """Stores the flag's value, and refuses a second, different one: its steps are joined in one value, and the
    second would replace the first unseen (``--defense clip:C=1 --defense gaussian:z=1``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "_given_once", {})
        if self.dest in given and given[self.dest] != values:  # the same value again changes nothing
            sep = self.sep
            parser.error(f"{option_string} is given twice ({given[self.dest]!r} and {values!r}): give the steps "
                         f"once, joined by '{sep}' ({option_string} '{given[self.dest]}{sep}{values}')")
        setattr(namespace, "_given_once", {**given, self.dest: values})
        setattr(namespace, self.dest, values)


def add_flag(group, p: Param, dest: str | None = None) -> argparse.Action:
    """One parameter's flag in ``group``."""
    dest, text = dest or p.name, help_text(p)
    if isinstance(p.constraint, Flag):
        return group.add_argument(p.option, dest=dest, action="store_false" if p.invert else "store_true",
                                  default=p.default, help=text)
    if isinstance(p.constraint, Optional) and isinstance(p.constraint.inner, Flag):  # on, off, or left to a default
        return group.add_argument(p.option, dest=dest, action=argparse.BooleanOptionalAction, default=p.default,
                                  help=text)
    if isinstance(p.constraint, Table):
        return group.add_argument(p.option, dest=dest, type=parse_pair, action="append", default=[],
                                  metavar="NAME=VALUE", help=text)
    if isinstance(p.constraint, Items):
        return group.add_argument(p.option, dest=dest, action="append", default=[], metavar=p.constraint.metavar,
                                  help=text)
    if isinstance(p.constraint, Steps):
        action = group.add_argument(p.option, dest=dest, action=_StepsOnce, default=p.default, help=text)
        action.sep = p.constraint.sep
        return action
    return group.add_argument(p.option, dest=dest, type=_value_type(p.constraint), default=p.default, help=text)


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


def add_attack_arguments(parser: argparse.ArgumentParser, attacks) -> None:
    """The flags of the options the attacks declare (``attacks``: (name, class) pairs; an option name shared by two
    attacks gets one flag), in ``parser``'s attacker group.  A flag left out stores nothing: ``attack_params``
    holds only the options given, the attack's declared defaults fill in the rest."""
    title = GROUP_TITLES["attacker"]
    group = next((g for g in parser._action_groups if g.title == title), None) or parser.add_argument_group(title)
    seen: dict[str, str | None] = {}
    for name, cls in attacks:
        for p in cls.options:
            if p.name not in seen:
                seen[p.name] = p.option
                add_flag(group, dataclasses.replace(p, help=f"attack {name}: {p.help}"),
                         dest=ATTACK_DEST + p.name).default = argparse.SUPPRESS
    parser.set_defaults(**{ATTACK_FLAGS: seen})


def attack_params_from_args(a: argparse.Namespace) -> dict:
    """The attack options given on the command line, by name (NAME=VALUE pairs as a table, a name given twice
    refused as :func:`pairs_table` refuses it)."""
    out = {}
    flags = getattr(a, ATTACK_FLAGS, {})
    for key, v in vars(a).items():
        if key.startswith(ATTACK_DEST):
            name = key[len(ATTACK_DEST):]
            out[name] = pairs_table(flags.get(name) or name, v) if isinstance(v, list) and v and all(
                isinstance(i, tuple) for i in v) else v
    return out


def add_protocol_arguments(group) -> None:
    """The protocol settings shared by ``train`` and ``run --protocol``."""
    for p in PROTOCOL_PARAMS:
        add_flag(group, p, dest=SPEC_DEST + p.name)


def protocol_spec_from_args(a: argparse.Namespace) -> dict:
    """The protocol settings the command line gives; --local-epochs with --local-steps given at any value (1, the
    default, included: a flag given counts as given) is refused in one sentence."""
    spec = {p.name: getattr(a, SPEC_DEST + p.name) for p in PROTOCOL_PARAMS}
    if spec.get("local_epochs") and SPEC_DEST + "local_steps" in getattr(a, "given_flags", frozenset()):
        raise UserError(f"give --local-epochs or --local-steps, not both: with --local-epochs {spec['local_epochs']} "
                        "the local steps are E ceil(n_c/B), one per mini-batch (got --local-steps "
                        f"{spec['local_steps']})")
    return spec


__all__ = ["GROUP_TITLES", "SPEC_DEST", "ATTACK_DEST", "add_arguments", "add_attack_arguments", "add_flag",
           "add_protocol_arguments", "attack_params_from_args",
           "protocol_spec_from_args", "pairs_table", "parse_pair", "threads_value"]
