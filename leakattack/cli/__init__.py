"""Command line: parse -> config -> one API call, one module per command.

Every user error ends with one line on stderr and exit code 2, and no output
folder is created for it.  Adding a command: its own module here with a
``register(subparsers)`` function, plus its name in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings

from .. import __version__
from ..errors import SettingWarning, UserError
from . import check, collect, figures, list as list_cmd, reproduce, run, sweep, train

EXIT_USAGE = 2

#: the command modules, in the order ``leakattack --help`` lists them
COMMANDS = (run, list_cmd, check, train, sweep, figures, collect, reproduce)


class UsageError(Exception):
    """Raised instead of argparse's multi-line usage dump."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one sentence, exit code 2 (handled in main)
        raise UsageError(message)


def build_parser() -> Parser:
    parser = Parser(prog="leakattack", description="Gradient-inversion attacks on true and sketched federated-learning gradients.")
    parser.add_argument("--version", action="version", version=f"leakattack {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, SettingWarning):
        print(f"leakattack: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: temporary files are removed, finished ones kept


def main(argv=None) -> int:
    warnings.showwarning = _one_line_warning
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        parser = build_parser()
        a = parser.parse_args(argv)
        if not getattr(a, "command", None):
            parser.print_help()
            return EXIT_USAGE
        return a.func(a)
    except (UsageError, UserError) as err:
        print(f"leakattack: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`): not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        print("leakattack: interrupted; finished results are kept, the unfinished one was not written", file=sys.stderr)
        return 130


__all__ = ["main", "build_parser", "EXIT_USAGE"]
