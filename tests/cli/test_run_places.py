"""Where a run writes, and the environment it starts in: a path the system cannot look up, the default run folder's
place, a current folder that is gone, an output that cannot spell a path and OMP_NUM_THREADS, each checked before the
attack or honoured, never a traceback or an attack whose folder cannot then be written."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_input import _refused  # tests/cli is on the path

from leakattack import cli

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips"]


def test_a_path_too_long_to_look_up_and_a_loop_of_links_are_one_sentence(tmp_path, capsys):
    """A path over PATH_MAX ended in an OSError traceback (File name too long), a loop of links in a RuntimeError."""
    long = tmp_path.joinpath(*["c" * 200] * 22)
    _refused([*RUN, "--out", str(long)], "cannot be looked up (File name too long): name a folder by another path",
             tmp_path, capsys)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    _refused([*RUN, "--out", str(tmp_path / "loop1")], "leads into a loop of symbolic links", tmp_path, capsys)


@pytest.mark.parametrize("place", ["a run folder", "a file named results"])
def test_the_default_run_folder_s_place_is_checked_before_the_attack(place, tmp_path, monkeypatch, capsys):
    """Without --out a run in an earlier run's folder wrote results/runs/ inside it, and one beside a file named
    results attacked, then could not write its folder."""
    here = tmp_path / "here"
    if place == "a run folder":
        shutil.copytree(ROOT / "results" / "reference" / "lenet-srht", here)
        needle = f"is inside the run folder '{here}'"
    else:
        here.mkdir()
        (here / "results").write_text("x")
        needle = "cannot be written: 'results' is not a writable folder"
    monkeypatch.chdir(here)
    _refused(RUN, needle, here, capsys)
    err_start = "the run folder under 'results/runs', where a run without --out writes,"
    assert cli.main(RUN) == 2 and err_start in capsys.readouterr().err


def test_a_current_folder_that_is_gone_is_one_sentence(monkeypatch, capsys):
    """torch's import failed there with "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so"."""
    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    assert cli.main(RUN) == 2
    assert capsys.readouterr().err == ("leakattack: error: the current folder no longer exists: change to a folder "
                                       "that does\n")


def test_a_path_the_output_cannot_spell_is_escaped(tmp_path):
    """With an ASCII stdout the summary line's path ended in a UnicodeEncodeError traceback, exit 1, after the run
    folder was written."""
    out = tmp_path / "asc_实验"
    proc = subprocess.run([sys.executable, "-m", "leakattack.cli", *RUN, "--out", str(out)], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"}, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"asc_\\u5b9e\\u9a8c" in proc.stdout and (out / "metrics.json").exists()


def test_omp_num_threads_caps_the_cores_a_run_takes(monkeypatch):
    """--threads auto took every core under OMP_NUM_THREADS=1, the usual cap on a shared machine or in a job."""
    from targets.victim import cpu_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    every = cpu_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_cores() == 1
    for ignored in ("abc", "0", "", "-3"):
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert cpu_cores() == every
