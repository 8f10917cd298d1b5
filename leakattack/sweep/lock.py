"""One sweep per output folder: a lock file holding the owner's process id.

The lock is created with ``O_CREAT | O_EXCL`` (atomic: of two sweeps started
together, one gets it) and removed when the sweep ends, also on Ctrl-C or an
error.  A lock left by a process that died (kill -9) is taken over, also where a new process
has its id by now (the lock records its owner's start time), as is one left
empty for a minute (its writer died between creating and writing it); taking it
over happens under an ``flock`` on the folder, so two sweeps finding the same
stale lock cannot both take it.  The second sweep on a folder is refused in one
sentence naming the owner.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from ..errors import UserError

LOCK_NAME = "sweep.lock"
#: a lock file still without its owner this many seconds after it was created was left by a process that died
#: between creating and writing it (a sweep writes its process id right after creating the file): it is taken over
UNWRITTEN_SECONDS = 60.0


class SweepLocked(UserError):
    """Another live process holds the folder's lock."""


def _owner(path: Path) -> tuple[int | None, str]:
    """(pid, host) written in a lock file; (None, "") if it is unreadable or not yet written."""
    pid, host, _ = _written(path)
    return pid, host


def _written(path: Path) -> tuple[int | None, str, int | None]:
    """(pid, host, start) written in a lock file: ``start`` is the process's start time in clock ticks since boot
    (``/proc/PID/stat``), None in a lock written without it; (None, "", None) if unreadable or not yet written."""
    try:
        fields = path.read_text(encoding="utf-8").split()
        pid, host = int(fields[0]), fields[1]
        return pid, host, int(fields[2]) if len(fields) > 2 else None
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None, "", None


def _started(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot, from ``/proc/PID/stat`` (None where there is none)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # field 22; the name in parentheses may hold spaces
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class FolderLock:
    """``with FolderLock(folder):`` holds ``folder/sweep.lock`` for this process, or raises :class:`SweepLocked`.
    ``name`` and ``kind`` give another lock file and what holds it (``leakattack train``'s run folders)."""

    def __init__(self, folder, name: str = LOCK_NAME, kind: str = "sweep"):
        self.path = Path(folder) / name
        self.kind = kind
        self.held = False

    def acquire(self) -> "FolderLock":
        started = _started(os.getpid())
        me = f"{os.getpid()} {socket.gethostname()}" + (f" {started}" if started is not None else "") + "\n"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if self._take_over_if_stale():
                    continue
                raise self._in_use() from None
            try:
                os.write(fd, me.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self.held = True
            return self
        raise SweepLocked(f"{self.kind} folder '{self.path.parent}' changed hands while this {self.kind} tried to "
                          "lock it: start it again")

    def check(self) -> None:
        """Refuse (:class:`SweepLocked`) where another live sweep holds the folder now, as :meth:`acquire` would;
        nothing is created, removed or taken over (a sweep checks this before it reads its points, so that a folder
        in use is refused before the points are checked and their warnings printed)."""
        who = self.holder()
        if who is not None:
            raise self._in_use(who)

    def holder(self) -> str | None:
        """Who holds the folder now (``process P on HOST``), or None where no live sweep does; nothing is created,
        removed or taken over."""
        if not self.path.exists() or self._stale():
            return None
        pid, host = _owner(self.path)
        return f"process {pid} on {host}" if pid is not None else "its lock file is still being written"

    def _in_use(self, who: str | None = None) -> SweepLocked:
        who = who or self.holder() or "its lock file is still being written"
        return SweepLocked(f"{self.kind} folder '{self.path.parent}' is in use by another {self.kind} ({who}): wait "
                           f"for it to finish, or remove '{self.path}' if no {self.kind} is running there")

    def _stale(self) -> bool:
        """Whether the lock file names a dead process on this host, or has named no owner for
        :data:`UNWRITTEN_SECONDS` (True also where it is gone)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return True
        pid, host, started = _written(self.path)
        if pid is None:  # not written yet, or never: a writer fills it right after creating it
            return time.time() - mtime >= UNWRITTEN_SECONDS
        if host != socket.gethostname():
            return False
        # a live process of that id that started at another time took the id over after the owner died (a container
        # restarted or requeued reuses ids soon)
        return not _alive(pid) or (started is not None and _started(pid) not in (None, started))

    def _take_over_if_stale(self) -> bool:
        """Remove the lock if its owner is a dead process on this host, or if it has named no owner for
        :data:`UNWRITTEN_SECONDS`; True if removed (or gone already)."""
        dirfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(dirfd, fcntl.LOCK_EX)  # one taker at a time; released by the kernel if we die
            if not self.path.exists():
                return True
            if not self._stale():
                return False
            try:
                os.unlink(self.path)
            except OSError as err:
                if err.errno != errno.ENOENT:
                    raise
            return True
        finally:
            os.close(dirfd)  # closing drops the flock

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        pid, _ = _owner(self.path)
        if pid == os.getpid():
            self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["FolderLock", "SweepLocked", "LOCK_NAME"]
