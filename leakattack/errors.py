"""The one exception family users see: a :class:`UserError` carries one sentence.

A leaf module (imports nothing of ours), so every station can raise it.  The
command line prints its message and exits with code 2; library callers catch it
like any ``ValueError``.  A :class:`SettingWarning` (through :mod:`warnings`)
flags a setting that runs but cannot give what is probably wanted; the command
line prints it as one line.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import warnings
from collections.abc import Iterator


class UserError(ValueError):
    """A request the user can fix; ``str(err)`` is one sentence naming the bad value."""


class SettingWarning(UserWarning):
    """A setting that runs but will not give what the user probably wants (one sentence, naming the cheaper choice)."""


class SlowWarning(SettingWarning):
    """A setting whose work, measured on its first part, will take long (a seed search, rounds re-simulated): said
    as soon as it is known, also while a run's checks still hold their other warnings until they end."""


_show_warning = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, SettingWarning):
        print(f"leakattack: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


def a_type(value) -> str:
    """``value``'s type named with its article, as a sentence says it: ``a Tensor``, ``an AvgPool2d``, ``an LSTM``,
    ``a GELU``."""
    name = type(value).__name__
    initialism = name[:2].isupper()  # LSTM, RReLU, LPPool2d: said letter by letter ("an el-ess-tee-em")
    return f"{'an' if name[:1] in ('AEFHILMNORSX' if initialism else 'AEIOUaeiou') else 'a'} {name}"


def duration_text(seconds: float) -> str:
    """An estimated duration as a warning states it: seconds, minutes, hours, days or years."""
    if seconds >= 86400 * 365:
        return f"{seconds / (86400 * 365):.3g} years"
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    if seconds >= 9.5:
        return f"{seconds:.0f} s"
    return f"{seconds:.2g} s"  # 0.4 s, 2.5 s: a time limit under a second does not read 0 s


def size_text(n_bytes: float) -> str:
    """An amount of memory as a message states it: GB to three figures."""
    return f"{n_bytes / 1e9:.3g} GB"


def listed(items) -> str:
    """``a``, ``a and b`` or ``a, b and c``: a list of names as a sentence says it."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def shown_names(names, most: int = 3) -> str:
    """``a, b, c and 4 more``: the first ``most`` of some names a sentence shows, and how many it leaves out."""
    names = [str(n) for n in names]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def ratio_text(b: int, d: int) -> str:
    """A sketch's b/d as titles and reports print it: two significant digits (0.5, 0.01, 0.00093, 1)."""
    return f"{b / d:.2g}"


#: the warning torch gives on the first forward-mode JVP of a process: it then loads its JVP decompositions
#: (torch._decomp.decompositions_for_jvp), which script functions with the deprecated torch.jit.script
JIT_SCRIPT_WARNING = r"`torch\.jit\.script` is deprecated"


@contextlib.contextmanager
def quiet_jvp_setup() -> Iterator[None]:
    """Within the block torch's own deprecation notice on its first forward-mode JVP is silenced (that one only:
    it is not ours to act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=JIT_SCRIPT_WARNING, category=FutureWarning)
        yield


def one_line_warnings() -> None:
    """Print every SettingWarning of this process as one ``leakattack: warning: ...`` line (other warnings as usual);
    the command line and the sweep's worker processes call it."""
    warnings.showwarning = _one_line_warning


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held for the block and delivered, once each, to their own handlers when it ends.  For work
    that an interrupt would leave broken rather than stopped: an import (torch's import of numpy swallows a
    KeyboardInterrupt and runs on without numpy) or matplotlib writing a file (an interrupt inside its C code can
    leave the figure half transformed, and the next call fails with an unrelated error)."""
    kinds = (signal.SIGINT, signal.SIGTERM)
    held: list[int] = []
    try:
        before = [signal.signal(s, lambda signum, frame: held.append(signum)) for s in kinds]
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        for kind, handler in zip(kinds, before):
            signal.signal(kind, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


def allocation_failed(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that did not fit: Python's MemoryError, a GPU's OutOfMemoryError, or another
    of torch's allocators ("can't allocate memory", "Tried to allocate ...")."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or (
        isinstance(err, RuntimeError) and ("can't allocate memory" in str(err) or "Tried to allocate" in str(err)))


__all__ = ["UserError", "SettingWarning", "allocation_failed", "duration_text", "listed", "size_text", "ratio_text",
           "one_line_warnings", "signals_held"]
