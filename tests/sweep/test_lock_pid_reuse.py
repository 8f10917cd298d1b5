"""A lock file records its owner's start time beside its process id: a live process that took the id over after the
owner died (ids are reused soon in a restarted container) does not keep the folder locked."""

import os
import socket
import subprocess
import sys

import pytest

from leakattack.sweep.lock import FolderLock, SweepLocked, _started


@pytest.fixture
def other():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_lock_records_its_owner_s_start_time(tmp_path):
    with FolderLock(tmp_path):
        pid, host, started = (tmp_path / "sweep.lock").read_text().split()
        assert (int(pid), host, int(started)) == (os.getpid(), socket.gethostname(), _started(os.getpid()))
    assert not (tmp_path / "sweep.lock").exists()


def test_a_live_process_that_reused_the_owner_s_id_does_not_hold_the_lock(tmp_path, other):
    lock = tmp_path / "sweep.lock"
    lock.write_text(f"{other.pid} {socket.gethostname()} {_started(other.pid) + 1}\n")  # the owner started then
    with FolderLock(tmp_path):  # taken over
        assert int(lock.read_text().split()[0]) == os.getpid()


@pytest.mark.parametrize("written", ["{pid} {host} {start}", "{pid} {host}"])
def test_the_live_owner_itself_holds_it_with_or_without_a_start_time(tmp_path, other, written):
    (tmp_path / "sweep.lock").write_text(written.format(pid=other.pid, host=socket.gethostname(),
                                                        start=_started(other.pid)) + "\n")
    with pytest.raises(SweepLocked, match=f"in use by another sweep \\(process {other.pid} on"):
        FolderLock(tmp_path).acquire()
