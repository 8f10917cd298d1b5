"""Progress bars draw only on a terminal (or when forced): a run whose stderr goes to a pipe or a log gets none."""

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from leakattack import progress
from leakattack.progress import FORCE_ENV, progress_bar, show_progress


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.fixture(autouse=True)
def no_force(monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)


def test_a_bar_shows_on_a_terminal_only_when_asked_for():
    assert show_progress(True, Stream(tty=True)) is True
    assert show_progress(False, Stream(tty=True)) is False
    assert show_progress(True, Stream(tty=False)) is False


@pytest.mark.parametrize("value,shown", [("1", True), ("yes", True), ("0", False), ("off", False)])
def test_the_environment_variable_forces_bars_on_or_off(monkeypatch, value, shown):
    monkeypatch.setenv(FORCE_ENV, value)
    assert show_progress(True, Stream(tty=not shown)) is shown
    assert show_progress(False, Stream(tty=True)) is False  # --quiet still wins


def test_streams_without_a_terminal_test_or_closed_count_as_no_terminal():
    closed = io.StringIO()
    closed.close()  # its isatty() raises ValueError
    assert show_progress(True, object()) is False and show_progress(True, closed) is False


def test_a_disabled_bar_accepts_every_call_and_writes_nothing(capsys):
    bar = progress_bar(10, "attack", "it")  # pytest's stderr is not a terminal
    bar.update(3)
    bar.set_postfix_str("L_R=1")
    bar.close()
    assert bar.disable and capsys.readouterr().err == ""


def test_the_progress_module_imports_nothing_of_ours():
    code = "import sys, leakattack.progress; print(sorted(m for m in sys.modules if m.startswith('leakattack')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["leakattack", "leakattack.progress"] and progress.__name__ == "leakattack.progress"


def run_cli(cwd, extra_env=None):
    root = cwd / "data"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            rgb = np.random.default_rng(i).integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(rgb).save(root / c / f"{i}.png")
    env = {k: v for k, v in os.environ.items() if k != FORCE_ENV}
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--iterations", "50", "--no-lpips",
                           "--dataset", "imagefolder", "--data-root", "data", "--image-size", "16",
                           "--defense", "clip:C=1,gaussian:z=0.5@after_sketch"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_run_with_stderr_to_a_pipe_writes_no_bar_and_one_summary_line(tmp_path):
    proc = run_cli(tmp_path)
    assert proc.returncode == 0, proc.stderr
    # notes and warnings are not bars (this defense's noise draws the warning of an attack without an image prior)
    bars = "".join(ln for ln in proc.stderr.splitlines(True) if not ln.startswith(("note: ", "leakattack: warning: ")))
    assert "it/s" not in bars and "attack" not in bars and "%|" not in bars, proc.stderr[:300]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(("rebuilt | PSNR ", "not rebuilt ("))
    # the default run folder names model, sketch, data set and defense
    (folder,) = (tmp_path / "results" / "runs").iterdir()
    assert re.fullmatch(r"\d{8}-\d{6}-lenet-srht-imagefolder-clip1-gaussz0\.5", folder.name), folder.name
    assert lines[0].endswith(f"results/runs/{folder.name}") and (folder / "metrics.json").is_file()


def test_forcing_bars_draws_the_attack_bar_into_the_pipe(tmp_path):
    proc = run_cli(tmp_path, {FORCE_ENV: "1"})
    assert proc.returncode == 0, proc.stderr
    assert "attack:" in proc.stderr and "50/50" in proc.stderr
