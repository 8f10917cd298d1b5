"""A sweep refused after its points were checked (a bad --jobs, a bad SLURM option, a folder another sweep holds)
prints its refusal alone, without the run warnings of its points; and a [grid] placeholder named like a column that
summary.csv computes, or holding lists or tables, is refused in one sentence before anything is written."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from leakattack import cli
from leakattack.sweep import runner
from leakattack.sweep.lock import LOCK_NAME

#: a sweep whose points warn (a noise of std 0 changes nothing) when they are checked
WARNS = """
[base]
model = "lenet"
dataset = "digits"
iterations = 2
defense = "gaussian:sigma=0.0@before_sketch"
[grid]
image_index = [0]
"""


@pytest.fixture
def no_attack(monkeypatch):
    monkeypatch.setattr(runner, "run_point", lambda *a, **k: pytest.fail("a point ran before the sweep was refused"))


def files_under(folder: Path) -> set:
    return {p.relative_to(folder) for p in folder.rglob("*")}


def refused(tmp_path, capsys, text, *args) -> str:
    cfg = tmp_path / "s.toml"
    cfg.write_text(text)
    before = files_under(tmp_path)
    rc = cli.main(["sweep", str(cfg), "--quiet", *args])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and out == "", (rc, err)
    assert "warning" not in lines[0] and "Traceback" not in err
    assert files_under(tmp_path) == before
    return lines[0]


def test_the_points_warn_when_the_sweep_is_not_refused(tmp_path, capsys, no_attack):
    (tmp_path / "s.toml").write_text(WARNS)
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--quiet", "--dry-run"]) == 0
    assert "changes nothing" in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--backend", "slurm", "--time", "0"], "--time"),
    (["--backend", "slurm", "--mem", "-1"], "--mem"),
])
def test_a_bad_option_is_refused_without_the_points_warnings(tmp_path, capsys, monkeypatch, no_attack, args, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in refused(tmp_path, capsys, WARNS, "--out", str(tmp_path / "out"), *args)


def test_a_folder_another_sweep_holds_is_refused_without_the_points_warnings(tmp_path, capsys, no_attack):
    out = tmp_path / "out"
    out.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(f"{owner.pid} {socket.gethostname()}\n")
        assert f"in use by another sweep (process {owner.pid}" in refused(tmp_path, capsys, WARNS, "--out", str(out))
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.parametrize("name", ["n", "d", "b", "m", "b_over_m", "psnr_mean", "ssim_std", "rebuilt",
                                  "failed_search"])
def test_a_placeholder_named_like_a_summary_column_is_refused(tmp_path, capsys, monkeypatch, no_attack, name):
    monkeypatch.chdir(tmp_path)
    text = WARNS.replace("sigma=0.0", f"sigma={{{name}}}").replace("image_index = [0]", f"{name} = [0.0, 0.1]")
    line = refused(tmp_path, capsys, text, "--out", str(tmp_path / "out"))
    assert f"[grid] {name}" in line and "summary.csv" in line


@pytest.mark.parametrize("value", ["[1, 2]", "{a = 1}"])
def test_a_placeholder_value_that_is_a_list_or_table_is_refused_naming_it(tmp_path, capsys, monkeypatch, no_attack,
                                                                          value):
    monkeypatch.chdir(tmp_path)
    text = WARNS.replace("sigma=0.0", "sigma={s}").replace("image_index = [0]", f"s = [0.1, {value}]")
    line = refused(tmp_path, capsys, text, "--out", str(tmp_path / "out"))
    assert "[grid] s" in line and "placeholder" in line
