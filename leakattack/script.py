"""The entry point of the repository's scripts and benchmarks: bad input (a missing file, a value leakattack
refuses, a run that failed) ends in one sentence on stderr and exit status 2, as the command line's does, not in a
traceback; and argparse types for counts and lists of them."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, NoReturn

from .config.constraints import Cores, available_cores
from .config.flags import threads_value
from .constraints import MAX_SEED, read_float, read_int
from .errors import UserError
from .results.io import writable_out


def script_main(main: Callable[[], int | None]) -> NoReturn:
    """Exit with ``main()``'s status (0 for None), or with 2 and ``NAME: error: SENTENCE`` where it fails on its
    input."""
    name = Path(sys.argv[0]).name
    try:
        code = main()
    except UserError as err:
        sentence = str(err)
    except FileNotFoundError as err:
        sentence = f"{err.filename} does not exist"
    except (IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError) as err:
        sentence = f"{err.filename}: {err.strerror}"
    except subprocess.CalledProcessError as err:
        command = err.cmd if isinstance(err.cmd, str) else shlex.join(map(str, err.cmd))
        sentence = f"a command it ran failed with exit status {err.returncode}: {command}"
    else:
        raise SystemExit(code or 0)
    print(f"{name}: error: {sentence}", file=sys.stderr)
    raise SystemExit(2)


#: a help text that states its option's default already: "(default 0.9)", "(default: the recipe's)"
_STATES_DEFAULT = re.compile(r"\(default\b|\bdefault:", re.IGNORECASE)


def _shows_default(action: argparse.Action) -> bool:
    """Whether ``--help`` adds the option's default: an option whose default is a value (not None, not a flag's
    False, not suppressed; 0 is a value) and whose help does not state it already."""
    default = action.default
    if default is None or default is argparse.SUPPRESS or isinstance(default, bool) or not action.option_strings:
        return False
    if isinstance(default, (list, tuple)) and not default:  # an option given any number of times: none by default
        return False
    return not _STATES_DEFAULT.search(action.help or "")


def _default_text(action: argparse.Action) -> str:
    """``(default: ...)`` as the option is written: a list as its values are given (``1,4,8``, or ``a b`` for an
    option of several arguments), not as Python prints it."""
    default = action.default
    if isinstance(default, (list, tuple)):
        several = action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1
        shown = (" " if several else ",").join(map(str, default)).replace("%", "%%")
        return f"(default: {shown})"
    return "(default: %(default)s)"


class _Defaults(argparse.HelpFormatter):
    """Help that gives each option's default, where it has one its own help does not already state (an option
    without help gets the default alone)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text + (" " if text else "") + _default_text(action) if _shows_default(action) else text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose options without help still show their default (argparse prints no help line for an
    option without help, and so no default)."""

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.help is None and _shows_default(action):
            action.help = _default_text(action)
        return action


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of a script or benchmark: its description the first paragraph of its docstring ``doc``
    (whole sentences, not its first line alone), and every option's default in ``--help``."""
    first = (doc or "").strip().split("\n\n")[0]
    return _Parser(description=" ".join(first.split()), formatter_class=_Defaults)


def _written(text: str, file: str | None) -> Path:
    """``text`` where :func:`leakattack.results.io.writable_out` takes it as the command line's ``--out`` (a
    ``file`` of that kind, or a folder with None), else argparse's error with its sentence."""
    try:
        return writable_out(text, file, said=f"'{text}'")
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def out_file(text: str) -> Path:
    """An argparse type: a file to write, as ``--out`` of a command takes one, in a folder that exists: checked
    before the script works, not when it saves its result."""
    path = _written(text, Path(text).suffix or "result")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of '{text}' does not exist")
    return path


def out_folder(text: str) -> Path:
    """An argparse type: a folder to write runs into (made where it is not there), as ``--out`` of a command takes
    one, checked before the script runs anything."""
    return _written(text, None)


def _integer(text: str, low: int) -> int:
    """``text`` as an integer of at least ``low``, else argparse's error naming the problem."""
    try:
        value = read_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is below {low}")
    return value


def count(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _integer(text, 1)


def index(text: str) -> int:
    """An argparse type: an integer of at least 0 (an index)."""
    return _integer(text, 0)


def seed(text: str) -> int:
    """An argparse type: a seed, an integer from 0 to 2^63 - 1 (what ``torch.manual_seed`` and every seed of a run
    take)."""
    value = _integer(text, 0)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text} is not a seed (0 to 2^63 - 1)")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, an integer from 1 to 65535."""
    value = _integer(text, 1)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1 to 65535)")
    return value


def counts(text: str) -> list[int]:
    """An argparse type: comma-separated integers of at least 1 (``1,4,8``)."""
    return [count(v) for v in text.split(",")]


def _number(text: str) -> float:
    """``text`` as a float, else argparse's error naming it."""
    try:
        return read_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive(text: str) -> float:
    """An argparse type: a positive finite number."""
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive finite number")
    return value


def weight_text(text: str) -> str:
    """An argparse type: a finite number of at least 0 (a prior's weight), kept as written for the runs it is
    passed to."""
    if not 0 <= _number(text) < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of at least 0")
    return text


def _cores(value: int) -> int:
    """``value`` where it is a count of threads from 1 to the cores this process may use, else argparse's error."""
    cores = Cores()
    if not cores.ok(value):
        raise argparse.ArgumentTypeError(cores.error("thread count", value))
    return value


def threads_text(text: str) -> str:
    """An argparse type: what ``leakattack run --threads`` takes (``auto`` or a count of threads, read as it reads
    them), within the cores this process may use, kept as written for the runs it is passed to."""
    value = threads_value(text)
    if value is not None:
        _cores(value)
    return text


def thread_count(text: str) -> int:
    """An argparse type: ``all`` (every core this process may use) or a count of threads from 1 to that."""
    if text == "all":
        return available_cores()
    try:
        return _cores(read_int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a count of threads nor 'all'") from None


def positives(text: str) -> list[float]:
    """An argparse type: comma-separated positive numbers (``1,1e-3``)."""
    return [positive(v) for v in text.split(",")]


def fraction(text: str) -> float:
    """An argparse type: a number in (0, 1] (a sketch's b/d)."""
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]")
    return value


def fractions(text: str) -> list[float]:
    """An argparse type: comma-separated numbers in (0, 1] (sketches' b/d: ``1,0.5,0.1``)."""
    return [fraction(v) for v in text.split(",")]


def pattern(text: str) -> re.Pattern:
    """An argparse type: a regular expression, compiled."""
    try:
        return re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression ({err})") from None


def one_of(choices: Callable[[], Iterable[str]], what: str, files: bool = False) -> Callable[[str], str]:
    """An argparse type: one of the names ``choices()`` gives (a registry's), or with ``files`` a model of the
    user's (``file.py:Name``)."""
    def parse(text: str) -> str:
        known = list(choices())
        if text not in known and not (files and ":" in text):
            raise argparse.ArgumentTypeError(f"unknown {what} {text!r}; choose among {', '.join(known)}"
                                             + (" or file.py:Name" if files else ""))
        return text
    return parse


def some_of(choices: Callable[[], Iterable[str]], what: str, files: bool = False) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each as :func:`one_of` takes it."""
    one = one_of(choices, what, files)
    return lambda text: [one(v) for v in text.split(",")]


__all__ = ["count", "counts", "fraction", "fractions", "index", "one_of", "out_file", "out_folder", "parser",
           "pattern", "port", "positive", "positives", "script_main", "some_of", "thread_count", "threads_text",
           "weight_text"]
