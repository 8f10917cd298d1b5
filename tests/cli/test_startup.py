"""The command line builds its parser, prints every help, lists the registries and names its commands without importing
torch."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from leakattack.cli import build_parser

#: runs main(argv) and fails when torch (or anything importing it) was loaded on the way
_PROBE = """
import sys
from leakattack.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as stop:
    rc = stop.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "targets", "defenses"))
assert not heavy, heavy[:5]
sys.exit(rc)
"""


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = sorted(_subparsers())


def test_every_command_is_declared():
    assert set(COMMANDS) == {"run", "list", "check", "train", "sweep", "figures", "collect", "report", "reproduce"}


@pytest.mark.parametrize("argv,rc", [([], 2), (["--help"], 0), (["--version"], 0)]
                         + [([c, "--help"], 0) for c in COMMANDS])
def test_help_and_version_import_no_torch(argv, rc):
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == rc, proc.stderr
    assert proc.stdout.startswith("usage: leakattack") or proc.stdout.startswith("leakattack ")


def test_list_imports_no_torch():
    proc = subprocess.run([sys.executable, "-c", _PROBE, "list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("models:") and "countsketch" in proc.stdout


def test_run_help_lists_the_registries_names():
    text = _subparsers()["run"].format_help()
    for name in ("resnet18", "countsketch", "analytic", "lbfgs", "cifar10", "compsgd"):
        assert name in text


def test_run_help_names_the_attacks_own_flags_without_importing_torch():
    """The attacks' option flags are added once the attacks are imported; --help, which imports no torch, still
    names each (it once left --sweeps, --bins and --query out)."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, "run", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--sweeps (analytic); --bins, --query (imprint)" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_a_function_that_carries_it_out(command):
    target = _subparsers()[command].get_default("target")
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(f"leakattack.cli.{module}"), function))


def test_python_m_leakattack_is_the_command_and_passes_its_exit_code_on(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "leakattack", "--version"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("leakattack ")
    bad = subprocess.run([sys.executable, "-m", "leakattack", "collect", str(tmp_path / "nowhere"), "--out",
                          str(tmp_path / "t.csv")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("leakattack: error: ") and "does not exist" in bad.stderr


#: the command's entry point, then a Ctrl-C and a SIGTERM once it has returned (as when one lands during the
#: interpreter's shutdown)
_LATE_SIGNALS = """
import os, signal, sys
from leakattack.cli import entry
sys.argv = ["leakattack", "list"]
code = entry()
os.kill(os.getpid(), signal.SIGINT)
os.kill(os.getpid(), signal.SIGTERM)
sys.exit(code)
"""


def test_a_signal_after_the_command_finished_keeps_its_exit_code():
    """A finished command is not reported as interrupted (130) by a Ctrl-C that arrives while the process exits."""
    done = subprocess.run([sys.executable, "-c", _LATE_SIGNALS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sketches:" in done.stdout and "Traceback" not in done.stderr
