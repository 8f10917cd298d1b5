"""Run folders: ``results/runs/<timestamp>-<model>-<sketch>-<dataset>[-<defense>]/``.

A run folder holds ``config.json``, ``metrics.json``, ``trace.csv``,
``reconstruction.png`` and ``convergence.png``, each written atomically.  Its
name says what was attacked, each part made safe for file names:
``20240101-120000-lenet-srht-photos-clip1-gaussz1.1``; a user model
``path/to/net.py:Net`` is named ``net-Net``.  The full settings are in
``config.json``; the name is a summary.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import itertools
import os
import re
import shutil
import socket
import tempfile
import time
import warnings
import zlib
from pathlib import Path
from typing import Callable, Iterator

from ..errors import SettingWarning, UserError, signals_held
from .io import directory_mode, folder_kind, link_target

#: defense names shortened in folder names; others are kept as written
_SHORT_DEFENSES = {"gaussian": "gauss", "laplace": "lap", "per_example": "pex", "quantize": "quant"}
#: parameter keys shortened in folder names ("" drops the key: the value alone follows the name)
_SHORT_KEYS = {"C": "", "sigma": "sd"}
#: longest defense summary kept in a folder name
MAX_DEFENSE_CHARS = 40


def safe_part(text: str) -> str:
    """``text`` as one piece of a file name: runs of anything but letters, digits, '.', '_', '+' become '-'."""
    part = re.sub(r"[^A-Za-z0-9._+]+", "-", str(text)).strip("-.")
    return part or "x"


def model_part(model: str) -> str:
    """A model name for a folder name: ``path/to/net.py:Net`` -> ``net-Net``, ``pkg.nets:Net`` -> ``nets-Net``."""
    if ":" not in model:
        return safe_part(model)
    source, _, cls = model.rpartition(":")
    stem = re.split(r"[\\/]", source)[-1]
    stem = stem[:-3] if stem.endswith(".py") else stem.rsplit(".", 1)[-1]
    return safe_part(f"{stem}-{cls}")


def defense_part(spec) -> str:
    """A short summary of a defense spec, '' for none: ``clip:C=1,gaussian:z=1.1@after_sketch`` -> ``clip1-gaussz1.1``.

    Each step is its (shortened) name followed by its parameters, key and value
    run together; placements are left out.
    """
    text = "" if spec is None else str(spec).strip()
    if text in ("", "none"):
        return ""
    steps = []
    for step in text.split(","):
        body = step.split("@", 1)[0].strip()
        name, *params = body.split(":")
        words = [_SHORT_DEFENSES.get(name.strip(), name.strip())]
        for param in params:
            key, _, value = param.partition("=")
            words.append(_SHORT_KEYS.get(key.strip(), key.strip()) + value.strip())
        steps.append(safe_part("".join(words)))
    summary = "-".join(steps)
    return summary if len(summary) <= MAX_DEFENSE_CHARS else summary[:MAX_DEFENSE_CHARS].rstrip("-.") + "+"


def run_folder_name(model: str, sketch: str, dataset: str | None = None, defense=None) -> str:
    """``<model>-<sketch>[-<dataset>][-<defense summary>]``, every part safe for file names."""
    parts = [model_part(model), safe_part(sketch)]
    if dataset:
        parts.append(safe_part(dataset))
    summary = defense_part(defense)
    if summary:
        parts.append(summary)
    return "-".join(parts)


#: where a command without --out writes its folder, under the current folder
RUNS_ROOT = Path("results") / "runs"


def default_run_dir(model: str, sketch: str, dataset: str | None = None, defense=None,
                    root: str | os.PathLike = RUNS_ROOT, unique: bool = True) -> Path:
    """results/runs/<YYYYmmdd-HHMMSS>-<model>-<sketch>-<dataset>[-<defense>]/ (a suffix -2, -3, ... keeps it unique).
    ``unique`` False: the name without the suffix, for :func:`write_run_folder` with ``fresh``, which adds the suffix
    when it writes (a suffix chosen before would be suffixed again where another process took it meanwhile)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{stamp}-{run_folder_name(model, sketch, dataset, defense)}"
    return unused_path(base) if unique else base


def _names(base: Path) -> Iterator[Path]:
    """``base``, ``base-2``, ``base-3``, ...: the names a new folder may take."""
    yield base
    for k in itertools.count(2):
        yield base.with_name(f"{base.name}-{k}")


def unused_path(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... : the first that does not exist (nothing is created)."""
    return next(path for path in _names(base) if not path.exists())


def _reserved(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ...: the first that this call creates (empty), which no other process
    can then take (``mkdir`` fails on a name that exists)."""
    for path in _names(base):
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable: _names never ends")


__all__ = ["RUNS_ROOT", "default_run_dir", "defense_part", "model_part", "run_folder_name", "safe_part", "unused_path"]


#: renameat2's flag that swaps two paths in one step (Linux 3.15 and later, on most local file systems)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _renameat2():
    """libc's renameat2, or None (not glibc 2.28 or later, not Linux); looked up once (find_library runs ldconfig)."""
    try:
        call = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return call


def _exchange(a: Path, b: Path) -> bool:
    """Swap folders ``a`` and ``b`` in one step (renameat2 RENAME_EXCHANGE): no moment without a run at either
    name.  False where the system or the file system does not offer it (the caller then renames twice)."""
    call = _renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _host_part() -> str:
    """This machine, as six hex digits of its name's CRC-32: hidden folders of a write on another machine that shares
    the file system are not this machine's to judge."""
    return f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFFFF:06x}"


def _aside_prefix(folder: Path) -> str:
    """The prefix of the hidden folders a write of ``folder`` makes beside it (``.NAME.PID-HOST.``): a later write
    can tell those of a process that no longer runs."""
    return f".{folder.name}.{os.getpid()}-{_host_part()}."


def _locked(path: Path) -> tuple[int | None, bool]:
    """(a descriptor of folder ``path`` holding an exclusive flock on it, or None; whether another process holds
    one).  A write holds its hidden folders so.  Where locks are not offered (Windows, NFS, which emulates flock by
    locks that need a file open for writing, Lustre without its flock option) there is no descriptor and no holder
    is known."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return None, False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None, False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        return None, err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    return fd, False


def _release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs here (POSIX only: on Windows os.kill(pid, 0) would send a Ctrl-C)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: it runs
        return False
    return False


def _left_by_the_killed(folder: Path) -> None:
    """Remove what a write of ``folder`` killed outright (SIGKILL, a lost node) left beside it, on this machine: its
    temporary folders (``.NAME.PID-HOST.XXXX.tmp``), and an earlier run it had moved aside (``.NAME....old/NAME``),
    which goes back to ``folder`` where nothing took that name since (and is removed where a later run did, kept
    where anything else did).  A folder is its killed writer's where no
    process of that number runs here and its lock (which a running writer holds) is free or not offered; POSIX
    systems only."""
    if os.name != "posix":
        return
    pattern = re.compile(re.escape(f".{folder.name}.") + r"(\d+)-" + _host_part() + r"\.[^.]+\.(tmp|old)")
    try:
        entries = list(folder.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or not entry.is_dir() or entry.is_symlink() or not _process_gone(int(found[1])):
            continue
        lock, busy = _locked(entry)
        if busy:  # its writer holds it still (another PID namespace); where no lock is offered, its number decides
            continue
        try:
            kept = entry / folder.name
            if found[2] == "old" and kept.is_dir():
                if not os.path.lexists(folder):
                    os.replace(kept, folder)
                elif folder_kind(folder) != "run":  # the name holds something else now: the earlier run stays aside
                    continue
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue
        finally:
            _release(lock)


def write_run_folder(folder: str | Path, write: Callable[[Path], None], fresh: bool = False,
                     foreign: Callable[[Path], str | None] | None = None) -> Path:
    """Fill ``folder`` by ``write(path)``, all or nothing; returns the folder written.

    ``write`` fills a temporary folder beside ``folder``, which is then renamed
    into place (replacing an earlier run in ``folder``): an interrupted write
    leaves no folder that looks finished.  A ``folder`` that is a symbolic link
    stays one: the folder it points to is written so.  ``fresh``: a name chosen to be new
    (:func:`default_run_dir`) is never replaced; where another process took it
    since, the folder becomes ``folder-2``, ``folder-3``, ... (the first name
    this process creates itself).  ``foreign(folder)``: what an existing folder holds that may not be replaced, in
    words, or None; checked when the run is written (files put there while it ran), such a folder, or a file that
    took its name, is left as it is and the run written to ``folder-2``, ... as a fresh one, with a one-line
    warning.
    """
    folder = Path(folder)
    try:
        target = link_target(folder)  # a link to a folder elsewhere (another disk) stays a link: its target is written
        written = _write_run_folder(target, write, fresh, foreign)
        return folder if written == target else written
    except OSError as err:  # a full disk, a folder that cannot be renamed: one sentence, nothing half-written
        raise UserError(f"the run folder '{folder}' could not be written ({err.strerror or err}); nothing of it was "
                        "kept") from None


def _write_run_folder(folder: Path, write: Callable[[Path], None], fresh: bool,
                      foreign: Callable[[Path], str | None] | None = None) -> Path:
    """:func:`write_run_folder` itself.  The folders above ``folder`` that it makes are removed again when the write
    does not finish (an error, Ctrl-C), where they are still empty."""
    made = []  # the missing folders above, deepest first
    for above in (folder.parent, *folder.parent.parents):
        if above.exists():
            break
        made.append(above)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _left_by_the_killed(folder)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=_aside_prefix(folder), suffix=".tmp"))
    lock = _locked(tmp)[0]  # held while this process writes: no later write takes it for a killed one's
    written = False
    try:
        write(tmp)
        os.chmod(tmp, directory_mode())
        held = None
        if foreign is not None and not fresh and os.path.lexists(folder):  # checked empty or a run's before
            if not folder.is_dir():
                held = "became a file" if folder.is_file() else "became something other than a folder"
            elif (what := foreign(folder)) is not None:
                held = f"came to hold {what}, which a run does not write"
        if held is not None:  # put there while the run ran: kept, and the run goes beside it
            fresh = True
            asked = folder
        if fresh:
            folder = _reserved(folder)
            try:
                os.replace(tmp, folder)  # onto the empty folder just made: POSIX rename replaces an empty one
            except OSError:
                folder.rmdir()
                raise
            if held is not None:
                warnings.warn(f"while the run ran, '{asked}' {held}: it is left as it is, and the run is written "
                              f"to '{folder}'", SettingWarning, stacklevel=3)
        elif folder.is_dir() and not folder.is_symlink() and _exchange(tmp, folder):
            pass  # the earlier run is now at tmp, removed below
        elif folder.exists():
            # Ctrl-C or SIGTERM between the two renames would leave neither run in the folder: both are held until
            # the new run stands there and the earlier one is gone (a SIGKILL there leaves the earlier run aside,
            # which the next write of the folder puts back)
            with signals_held():
                old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=_aside_prefix(folder), suffix=".old"))
                old_lock = _locked(old)[0]
                try:
                    try:
                        os.replace(folder, old / folder.name)
                    except OSError:
                        old.rmdir()  # the earlier run stays where it was
                        raise
                    try:
                        os.replace(tmp, folder)
                    except OSError:
                        try:
                            os.replace(old / folder.name, folder)  # the earlier run back in its place
                        except OSError:  # another write took the name meanwhile: its run replaces the earlier one
                            if folder_kind(folder) != "run":
                                raise
                        shutil.rmtree(old, ignore_errors=True)
                        raise
                    written = True
                    shutil.rmtree(old, ignore_errors=True)
                finally:
                    _release(old_lock)
        else:
            os.replace(tmp, folder)
        written = True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        _release(lock)
        for above in made if not written else ():
            try:
                above.rmdir()
            except OSError:  # another run wrote into it meanwhile
                break
    return folder
