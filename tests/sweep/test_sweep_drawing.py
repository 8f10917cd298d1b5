"""A sweep's summary.csv and figures: written figures first and summary.csv last (a summary that counts the results
vouches for the figures beside it), counted as figures rather than files, redrawn by ``leakattack figures`` only
where it may write and no sweep holds the folder; a sweep file that is a folder or not UTF-8 is one sentence."""

import os
import socket
import subprocess
import sys

import pytest

from leakattack import cli
from leakattack.sweep import runner
from leakattack.sweep.lock import LOCK_NAME

BASE = """
[base]
model = "lenet"
dataset = "digits"
iterations = 2

[grid]
sketch_ratio = [0.25, 0.5]
"""


@pytest.fixture
def swept(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    line = capsys.readouterr().out
    return cfg, out, line


def test_the_summary_line_counts_figures_not_their_png_and_pdf_files(swept):
    _, out, line = swept
    stems = {f.stem for f in (out / "figures").iterdir()}
    files = list((out / "figures").iterdir())
    assert len(files) == 2 * len(stems) and len(stems) >= 1
    assert f"{len(stems)} figure{'s' if len(stems) != 1 else ''} in" in line


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_drawing_cut_short_leaves_the_earlier_summary_which_no_longer_matches(swept, capsys, monkeypatch):
    cfg, out, _ = swept
    before = (out / "summary.csv").read_bytes()
    cfg.write_text(BASE.replace("[0.25, 0.5]", "[0.25, 0.5, 1.0]"))  # one more point, then Ctrl-C while drawing
    monkeypatch.setattr(runner.figures, "sweep_figures", _interrupt)
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "finished results are kept (3 of 3 points)" in err
    assert "summary.csv and the figures were being drawn and may be those of fewer points" in err
    assert (out / "summary.csv").read_bytes() == before  # counts 2 points: the report will not vouch for the figures
    monkeypatch.undo()
    assert cli.main(["figures", str(out)]) == 0
    assert "3 points" in capsys.readouterr().out and (out / "summary.csv").read_bytes() != before


def test_figures_wait_for_no_sweep_but_refuse_a_folder_one_holds(swept, capsys):
    _, out, _ = swept
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_NAME).write_text(f"{owner.pid} {socket.gethostname()}\n")
        summary = (out / "summary.csv").read_bytes()
        assert cli.main(["figures", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"in use by another sweep (process {owner.pid}" in err[0]
        assert (out / "summary.csv").read_bytes() == summary
    finally:
        owner.kill()
        owner.wait()


def test_figures_into_a_folder_it_cannot_write_is_one_sentence(swept, capsys, monkeypatch):
    _, out, _ = swept
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != os.fspath(out))  # a read-only mount
    assert cli.main(["figures", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: error: '{out}' is not a writable folder: figures rewrites the sweep's summary.csv "
                   "and figures/ in place"]


@pytest.mark.parametrize("kind", ["folder", "latin-1"])
def test_a_sweep_file_that_is_a_folder_or_not_utf8_is_one_sentence(tmp_path, capsys, kind):
    path = tmp_path / "s.toml"
    if kind == "folder":
        path.mkdir()
        needle = "is a folder: give the TOML file that describes the grid"
    else:
        path.write_bytes(b'[base]\nmodel = "l\xe9net"\n')
        needle = "is not UTF-8 text (byte 0xe9 at offset 17), which TOML requires"
    assert cli.main(["sweep", str(path), "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and not (tmp_path / "out").exists(), err


def test_figures_on_a_results_file_that_holds_no_point_is_one_sentence_and_keeps_the_folder(swept, capsys):
    _, out, _ = swept
    summary = (out / "summary.csv").read_bytes()
    (out / "results.jsonl").write_text("not json at all\n[1, 2]\n")
    assert cli.main(["figures", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 2 lines and none is a finished point of a sweep" in err[0], err
    assert (out / "summary.csv").read_bytes() == summary


def test_one_point_and_one_setting_are_said_in_the_singular(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE.replace("[0.25, 0.5]", "[0.5]"))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    line = capsys.readouterr().out
    assert "1/1 points | 1 setting |" in line
    assert cli.main(["figures", str(out)]) == 0
    assert capsys.readouterr().out.startswith("1 point |")


def test_another_sweep_file_into_a_sweep_folder_warns_that_its_points_are_left_out(swept, capsys):
    cfg, out, _ = swept
    cfg.write_text(BASE.replace("[0.25, 0.5]", "[0.5, 1.0]"))  # 0.25 is no longer in the grid
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: warning: {out} holds 1 finished point of another sweep file's grid: it stays in "
                   "results.jsonl and is left out of this sweep's summary.csv and figures (a new --out keeps the two "
                   "apart)"]
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0  # the same file again: a resume
    assert "another sweep file" in capsys.readouterr().err  # the earlier grid's point is still there
    cfg.write_text(BASE.replace("[0.25, 0.5]", "[0.25, 0.5, 1.0]"))  # a grid that grew: every stored point is in it
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
