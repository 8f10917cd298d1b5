"""Parameter constraints declared as objects, checked once, with one error template, and :class:`Param`.

Each constraint knows whether a value satisfies it and how to say what it
wants; :class:`Param` pairs one with a name, a default, a label and a help
text, and that single declaration yields the command-line flag, the validation
and the sweep key.  (The scikit-learn ``_parameter_constraints`` way.)  A leaf
module: the run's parameters (:mod:`leakattack.config.params`) and each attack's
own options (``Attack.options``) are declared with it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

#: the largest seed a run takes (--seed, --sketch-seed, --model-seed, --noise-seed: [0, 2^63 - 1])
MAX_SEED = 2 ** 63 - 1
#: a million steps is hours even for the smallest victims; more is a typo, not a plan
MAX_ITERATIONS = 1_000_000
#: the starts run as one batch through the victim (restarts times the batch size), so a thousand starts already hold
#: a thousand dummy batches at every evaluation; more is a typo, not a plan
MAX_RESTARTS = 1000


class Constraint:
    """A predicate on values with a description; ``error(label, v)`` is the one-sentence complaint."""

    what = "valid"

    def ok(self, v) -> bool:  # pragma: no cover
        raise NotImplementedError

    def error(self, label: str, v) -> str:
        return f"{label} must {self.what}, got {v!r}"


class Choice(Constraint):
    """One of a set of names; the set may come from a registry (a callable)."""

    def __init__(self, options: Iterable | Callable[[], Iterable], *, allow_empty: bool = False):
        self._options = options
        self.allow_empty = allow_empty  #: "" means "none of them" (e.g. no protocol)

    @property
    def options(self) -> list:
        return list(self._options() if callable(self._options) else self._options)

    @property
    def shown(self) -> list:
        """The names help texts print: the options, or the copy a registry's names carry (``names.Listed``,
        which imports no torch) followed by those registered at run time (a plugin's) where the registry is loaded."""
        copy = getattr(self._options, "shown", None)
        if not copy:
            return self.options
        current = getattr(self._options, "current", None)
        return [*copy, *(n for n in (current() if callable(current) else ()) if n not in copy)]

    def ok(self, v) -> bool:
        return isinstance(v, str) and (v in self.options or (self.allow_empty and v == ""))

    def error(self, label, v):
        return f"unknown {label} '{v}'; choose one of: {', '.join(map(str, self.options))}"


class DeviceName(Choice):
    """One of the named devices, or ``cuda:N``, the GPU of index N on a machine with several."""

    def ok(self, v) -> bool:
        if isinstance(v, str) and v.startswith("cuda:"):
            return v[5:].isdigit() and v[5:].isascii()
        return super().ok(v)

    def error(self, label, v):
        return f"unknown {label} '{v}'; choose one of: {', '.join(map(str, self.options))} or cuda:N (GPU N)"


class DatasetName(Choice):
    """A registered data set's name; a folder given in its place is pointed to ``imagefolder``."""

    def error(self, label, v):
        text = super().error(label, v)
        if isinstance(v, str) and v and os.path.isdir(os.path.expanduser(v)):
            text += f"; a folder of images is the data set imagefolder: --dataset imagefolder --data-root {v}"
        return text


class ModelName(Choice):
    """A registered model name, or ``path/to/file.py:Name`` / ``package.module:Name`` for the user's own class."""

    def ok(self, v) -> bool:
        return isinstance(v, str) and (v in self.options or (":" in v and all(v.split(":", 1))))

    def error(self, label, v):
        return (f"unknown {label} '{v}'; choose one of: {', '.join(self.options)}, "
                "or name your own class as path/to/file.py:Name or package.module:Name")


class Number(Constraint):
    """An integer or real number in an interval; ``integer`` refuses 1.5 and True."""

    def __init__(self, low=None, high=None, *, integer: bool = False, low_open: bool = False,
                 high_open: bool = False, what: str | None = None):
        self.low, self.high, self.integer = low, high, integer
        self.low_open, self.high_open = low_open, high_open
        self.what = what or self._describe()

    def _describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            lo = "(" if self.low_open else "["
            hi = ")" if self.high_open else "]"
            return f"lie in {lo}{self.low}, {self.high}{hi}"
        if self.low is not None:
            noun = " integer" if self.integer else ""
            if self.low == 0:
                return f"be {'a positive' if self.low_open else 'a non-negative'}{noun or ' number'}"
            return f"be an integer of at least {self.low}" if self.integer else f"be at least {self.low}"
        return f"be {kind}"

    def _finite(self) -> str:
        """What a value unbounded above must be, said of inf or nan (which are not numbers of an interval)."""
        kind = "integer" if self.integer else "number"
        if self.low is None:
            return f"be a finite {kind}"
        if self.low == 0:
            return f"be a finite {'positive' if self.low_open else 'non-negative'} {kind}"
        return f"be a finite {kind} {'above' if self.low_open else 'of at least'} {self.low}"

    def error(self, label, v):
        if isinstance(v, float) and not math.isfinite(v) and self.high is None:  # inf is not "negative": say finite
            return f"{label} must {self._finite()}, got {v!r}"
        kind = "an integer" if self.integer else "a number"
        wrong_kind = isinstance(v, bool) or not isinstance(v, (int, float)) or (self.integer and not isinstance(v, int))
        if wrong_kind and self.what.startswith("lie in "):  # a string, true/false, 1.5 for a count: name the kind
            return f"{label} must be {kind} in {self.what.removeprefix('lie in ')}, got {v!r}"
        return super().error(label, v)

    def ok(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if self.integer and not isinstance(v, int):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        if self.high is not None and (v >= self.high if self.high_open else v > self.high):
            return False
        return True


class Index(Number):
    """A round or client number: an integer from ``low`` on; a wrong one "does not exist"."""

    def __init__(self, low: int):
        super().__init__(low, integer=True)

    def error(self, label, v):
        return f"{label} {v} does not exist: {label}s start at {self.low}"


def available_cores() -> int:
    """The CPU cores this process may run on: its affinity where the system states one, else the machine's count; at
    most ``SLURM_CPUS_PER_TASK`` in a SLURM job that asked for its CPUs (a node without cgroups leaves every core in
    the job's affinity)."""
    try:
        n = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        n = max(1, os.cpu_count() or 1)
    cap = env_count("SLURM_CPUS_PER_TASK")
    return n if cap is None else min(n, cap)


def env_count(name: str) -> int | None:
    """The positive whole number the environment variable ``name`` holds (a cap on cores: ``SLURM_CPUS_PER_TASK``,
    ``OMP_NUM_THREADS``), else None."""
    cap = os.environ.get(name, "").strip()
    return int(cap) if cap.isdigit() and int(cap) > 0 else None


#: the units a duration may carry (``90s``, ``10m``, ``1h``); a plain number is seconds
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def read_int(text) -> int:
    """``text`` as an integer, as ``int`` reads it but without ``_`` between digits (ValueError): ``int('1_0')`` is
    10, which a typo of 100 or 1.0 would become unsaid."""
    if isinstance(text, str) and "_" in text:
        raise ValueError(f"invalid literal for int(): {text!r}")
    return int(text)


def read_float(text) -> float:
    """``text`` as a float, as ``float`` reads it but without ``_`` between digits (ValueError, as :func:`read_int`)."""
    if isinstance(text, str) and "_" in text:
        raise ValueError(f"could not convert string to float: {text!r}")
    return float(text)


read_int.__name__, read_float.__name__ = "int", "float"  # argparse names the type in "invalid int value: '1_0'"


#: a duration of several units, largest first, each at most once: ``1h30m``, ``10m30s``, ``1h5m10s``
_COMPOUND = re.compile(r"(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?")


def duration_seconds(v) -> float | None:
    """The seconds a duration stands for (``90s``, ``10m``, ``1h``, units together largest first as ``1h30m``, or
    a plain number of seconds, as text or a number); None when ``v`` is not a positive finite duration."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        seconds = float(v)
    elif isinstance(v, str):
        text = v.strip().lower()
        parts = _COMPOUND.fullmatch(text)
        if parts is not None and sum(value is not None for value in parts.groupdict().values()) > 1:
            seconds = sum(float(value) * DURATION_UNITS[unit] for unit, value in parts.groupdict().items()
                          if value is not None)
            return seconds if math.isfinite(seconds) and seconds > 0 else None
        unit = DURATION_UNITS.get(text[-1:], 1.0)
        number = text[:-1] if text[-1:] in DURATION_UNITS else text
        try:
            seconds = read_float(number) * unit
        except ValueError:
            return None
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


class Cores(Number):
    """A thread count: an integer from 1 to the cores this process may use, read when a value is checked (more
    threads than cores only wait on each other, and torch's thread pool crashes at counts in the tens of thousands)."""

    def __init__(self):
        super().__init__(1, integer=True)

    def ok(self, v) -> bool:
        return super().ok(v) and v <= available_cores()

    def error(self, label, v):
        if super().ok(v):  # an integer above the cores
            n = available_cores()
            return f"{label} {v} exceeds the {n} CPU core{'s' if n != 1 else ''} this process may use: give at most {n}"
        return super().error(label, v)


class Flag(Constraint):
    what = "be true or false"

    def ok(self, v) -> bool:
        return isinstance(v, bool)


class Text(Constraint):
    what = "be a string"

    def ok(self, v) -> bool:
        return isinstance(v, str)


class Steps(Text):
    """Steps joined by ``sep`` in one string (a defense spec): its flag is given once, the steps joined there."""

    def __init__(self, sep: str = ","):
        self.sep = sep


class PathName(Text):
    """A path given by its name: a non-empty string (an empty one names nothing, and is not "none")."""

    def __init__(self, kind: str = "file"):
        self.kind = kind
        self.what = f"name a {kind}"

    def ok(self, v) -> bool:
        return isinstance(v, str) and v != ""

    def error(self, label, v):
        if v == "":
            return f"{label} must name a {self.kind}, got an empty string"
        return f"{label} must be a string, got {v!r}"


class Table(Constraint):
    what = "be a table of NAME = VALUE pairs"

    def ok(self, v) -> bool:
        return isinstance(v, dict)


class Items(Constraint):
    """A list of strings, each accepted by ``check`` (a callable: None, or the one-sentence complaint)."""

    what = "be a list of strings"

    def __init__(self, check: Callable[[str], str | None], metavar: str | None = None):
        self.check = check
        self.metavar = metavar  #: how the command line shows one item

    def ok(self, v) -> bool:
        return isinstance(v, list) and all(isinstance(s, str) and self.check(s) is None for s in v)

    def error(self, label, v):
        if isinstance(v, list):
            for s in v:
                if isinstance(s, str) and self.check(s) is not None:
                    return self.check(s)
        return super().error(label, v)


class Optional(Constraint):
    """None, or a value the inner constraint accepts."""

    def __init__(self, inner: Constraint):
        self.inner = inner
        self.what = inner.what

    def ok(self, v) -> bool:
        return v is None or self.inner.ok(v)

    def error(self, label, v):
        if isinstance(self.inner, Cores) and (isinstance(v, bool) or not isinstance(v, int)):  # None is auto
            return f"{label} must be a count of threads or auto, got {v!r}"
        return self.inner.error(label, v)


NOTHING = object()  #: marks a parameter without a command-line flag


@dataclass(frozen=True)
class Param:
    """One parameter: its constraint, default and how it appears on the command line."""

    name: str
    default: Any
    constraint: Constraint
    label: str  #: how errors name it ("sketch ratio")
    help: str = ""
    group: str = "attacker"
    flag: Any = None  #: None: --name-with-dashes; NOTHING: no flag; else the flag text
    invert: bool = False  #: a flag that stores False (e.g. --sketch-unknown for sketch_known)

    @property
    def option(self) -> str | None:
        if self.flag is NOTHING:
            return None
        return self.flag or "--" + self.name.replace("_", "-")


__all__ = ["Param", "NOTHING", "Constraint", "Choice", "DeviceName", "DatasetName", "ModelName", "Number", "Index",
           "Cores", "available_cores", "Flag", "Text", "PathName", "Table", "Items", "Optional", "DURATION_UNITS",
           "duration_seconds", "MAX_SEED", "read_int", "read_float", "env_count"]
