"""Command line: parse -> config -> one API call, one module per command.

Every user error ends with one line on stderr and exit code 2, and no output
folder is created for it.  The flags of every command are declared in
:mod:`.parser`, which imports no torch, so ``leakattack --help`` and
``leakattack <cmd> --help`` answer at once; each command's own module (named by
its subparser) is imported once the arguments have parsed.  Adding a command: its
module here with the function that carries it out, plus its flags in :mod:`.parser`.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import re
import signal
import sys

from ..errors import UserError, allocation_failed, one_line_warnings, signals_held, size_text
from ..plugins import load_plugins
from .parser import Parser, UsageError, build_parser, given_dests

EXIT_USAGE = 2


def _import_holding_interrupts(name: str):
    """Import module ``name`` with Ctrl-C and SIGTERM held until the import is done (:func:`signals_held`), then
    raise KeyboardInterrupt if one came."""
    with signals_held():
        return importlib.import_module(name)


def dispatch(a) -> int:
    """Carry out the parsed command: import its module (``a.target`` is ``module:function``) and call it."""
    module, _, function = a.target.partition(":")
    return getattr(_import_holding_interrupts(f"{__name__}.{module}"), function)(a)


_stopped_by = [signal.SIGINT]

#: what torch's allocators say when a tensor does not fit (CPU: "DefaultCPUAllocator: can't allocate memory: you
#: tried to allocate N bytes"; a GPU: torch.OutOfMemoryError, "... Tried to allocate 2.00 GiB ...")
_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes"
                         r"|Tried to allocate ([\d.]+ [KMGT]?i?B)")


def out_of_memory(err: BaseException) -> str | None:
    """The sentence for an allocation that did not fit (Python's MemoryError, torch's allocators), or None."""
    found = _ALLOCATION.search(str(err)) if isinstance(err, (MemoryError, RuntimeError)) else None
    if not allocation_failed(err) and found is None:
        return None
    size = "" if found is None else f" of {size_text(int(found[1]))}" if found[1] else f" of {found[2]}"
    return (f"out of memory: an allocation{size} did not fit on this machine (what had finished is kept, nothing "
            "unfinished was written); a smaller --batch-size or --image-size, fewer --restarts, or --optimizer adam "
            "in place of L-BFGS need less")


def _terminate(signum, frame):
    _stopped_by[0] = signal.SIGTERM
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: temporary files are removed, finished ones kept


def interrupted_exit() -> int:
    """The exit code of a command that a signal stopped: 128 + its number, as a shell reports it (130 for Ctrl-C,
    143 for SIGTERM, which SLURM and ``timeout`` send)."""
    return 128 + int(_stopped_by[0])


#: the commands whose module adds a note to a signal that came before its own handling (``interrupted_note``): a
#: module that gains one is named here too, so that no other command's module is imported for nothing
_NOTED = ("sweep",)


def _interrupted_note(a, argv) -> str | None:
    """What the command's module adds to a signal that stopped it before its own handling began (its
    ``interrupted_note(a)``, where it has one): a sweep's earlier SLURM jobs still running.  A signal that came
    before the flags were parsed (while plugins loaded) or before the module was imported has them parsed and the
    module imported now, as far as that goes without a plugin's flags (else no note)."""
    words = sys.argv[1:] if argv is None else [*argv]  # not list(): the package's submodule list shadows it here
    if a is None:
        if not words or words[0] not in _NOTED or any(w in ("-h", "--help", "--version") for w in words):
            return None
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                a = build_parser().parse_args(words)
        except (UsageError, UserError, SystemExit, ImportError):
            return None
    target = str(getattr(a, "target", "")).partition(":")[0]
    if target not in _NOTED:  # no note to add: its module is not imported for nothing
        return None
    name = f"{__name__}.{target}"
    try:
        module = sys.modules.get(name) or _import_holding_interrupts(name)
    except (KeyboardInterrupt, ImportError):  # a second signal: no note
        return None
    hook = getattr(module, "interrupted_note", None)
    return hook(a) if callable(hook) else None


#: the file system's refusals that no command handles on its own path: one sentence each, not a traceback
_FULL = {errno.ENOSPC, errno.EDQUOT}


def file_system_refused(err: OSError) -> str | None:
    """One sentence for a full disk, a name too long for the file system or a read-only file system, naming the
    path; None for any other OSError (a fault of the program's, left as a traceback).  The commands write each file
    whole or not at all, so what had finished is kept."""
    where = f"'{err.filename}'" if err.filename is not None else "a file"
    reason = err.strerror or os.strerror(err.errno or 0)
    if err.errno in _FULL:
        return f"{where} could not be written ({reason}); what had finished is kept: free space and run it again"
    if err.errno == errno.EFBIG:
        return (f"{where} could not be written ({reason}: larger than the file system or the file size limit takes); "
                "what had finished is kept")
    if err.errno == errno.ENAMETOOLONG:
        return f"{where} is too long a name for the file system ({reason}): give a shorter one"
    if err.errno == errno.EROFS:
        return f"{where} could not be written ({reason}): give a folder on a writable file system"
    return None


def main(argv=None) -> int:
    one_line_warnings()
    if hasattr(sys.stdout, "reconfigure"):  # a path the output's encoding cannot spell is escaped, not a traceback
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        os.getcwd()
    except FileNotFoundError:  # before torch, whose import fails there with a fatal error of MKL's
        print("leakattack: error: the current folder no longer exists: change to a folder that does",
              file=sys.stderr)
        return EXIT_USAGE
    _stopped_by[0] = signal.SIGINT
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    a = None
    try:
        load_plugins()  # before the flags: their names and options are the registries'
        parser = build_parser()
        a = parser.parse_args(argv)
        if not getattr(a, "command", None):
            parser.print_help()
            return EXIT_USAGE
        a.given_flags = given_dests(parser, argv)
        return dispatch(a)
    except (UsageError, UserError) as err:
        print(f"leakattack: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (MemoryError, RuntimeError) as err:  # torch's out-of-memory errors are RuntimeErrors
        said = out_of_memory(err)
        if said is None:
            raise
        print(f"leakattack: error: {said}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`): not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except OSError as err:  # a file system that refuses what a command reads or writes, wherever it comes
        said = file_system_refused(err)
        if said is None:
            raise
        print(f"leakattack: error: {said}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("leakattack: interrupted; what had finished is kept, nothing unfinished was written", file=sys.stderr)
        note = _interrupted_note(a, argv)
        if note:
            print(f"leakattack: {note}", file=sys.stderr)
        return interrupted_exit()


def entry() -> int:
    """The ``leakattack`` command and ``python -m leakattack``: :func:`main`, after which Ctrl-C and SIGTERM are
    ignored.  Its work is done and written by then, and what is left is the interpreter's shutdown (about a second
    with torch and matplotlib loaded), where a late signal would end the process as interrupted (exit 130) after a
    result it had finished."""
    code = main()
    with contextlib.suppress(ValueError):  # not the main thread: nothing to hand over
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    return code


__all__ = ["main", "entry", "out_of_memory", "build_parser", "dispatch", "EXIT_USAGE", "interrupted_exit", "Parser",
           "UsageError"]
