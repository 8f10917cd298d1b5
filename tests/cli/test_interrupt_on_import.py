"""Ctrl-C while a command's module is imported: held until the import is done, then the command stops cleanly."""

import signal
import sys
import threading

import pytest

from leakattack.cli import _import_holding_interrupts

SWALLOWS = '''
import os, signal
try:  # as torch's import of numpy does: an error there, KeyboardInterrupt included, is swallowed
    os.kill(os.getpid(), signal.SIGINT)
    swallowed = False
except BaseException:
    swallowed = True
DONE = True
'''


def test_an_interrupt_during_the_import_is_raised_after_it_not_inside_it(tmp_path, monkeypatch):
    assert threading.current_thread() is threading.main_thread()  # signal handlers need the main thread
    (tmp_path / "swallowing_module.py").write_text(SWALLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        _import_holding_interrupts("swallowing_module")
    module = sys.modules.pop("swallowing_module")
    assert module.DONE and not module.swallowed  # the import ran to its end, nothing was raised inside it
    assert signal.getsignal(signal.SIGINT) is before


def test_an_import_without_an_interrupt_returns_the_module(tmp_path, monkeypatch):
    (tmp_path / "quiet_module.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = signal.getsignal(signal.SIGINT)
    assert _import_holding_interrupts("quiet_module").VALUE == 3
    sys.modules.pop("quiet_module")
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupted_command_says_nothing_unfinished_was_written(monkeypatch, capsys):
    """The line fits a single run stopped before its attack as well as a command that finished part of its work."""
    import leakattack.cli as cli

    def stopped(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "dispatch", stopped)
    assert cli.main(["run", "--iterations", "2"]) == 130
    assert capsys.readouterr().err == ("leakattack: interrupted; what had finished is kept, nothing unfinished was "
                                       "written\n")


def test_sigterm_exits_143_and_ctrl_c_130(monkeypatch, capsys):
    """A command stopped by a signal exits with 128 + its number, as a shell, ``timeout`` and SLURM report it."""
    import os

    import leakattack.cli as cli

    def terminated(a):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the command")

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # main() installs its handler only over the default
    try:
        monkeypatch.setattr(cli, "dispatch", terminated)
        assert cli.main(["run", "--iterations", "2"]) == 143
        monkeypatch.setattr(cli, "dispatch", lambda a: (_ for _ in ()).throw(KeyboardInterrupt))
        assert cli.main(["run", "--iterations", "2"]) == 130  # the next command starts afresh
    finally:
        signal.signal(signal.SIGTERM, before)
    assert capsys.readouterr().err.count("leakattack: interrupted") == 2
