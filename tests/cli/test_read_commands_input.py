"""figures, report and collect on bad input: one sentence on stderr, exit code 2, nothing written; a sweep folder
with torn or no points is named in one warning."""

import json
import shutil
from pathlib import Path

import pytest
from test_bad_input import _refused  # tests/cli is on the path

from leakattack import cli
from leakattack.cli import figures as figures_cli
from leakattack.cli.report import MARK, _is_report
from leakattack.errors import UserError
from leakattack.sweep.runner import finalize

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "reference" / "lenet-srht"
POINT = {"key": "k1", "index": 0, "grid": {"image_index": 0}, "params": {"model": "lenet", "sketch": "srht"},
         "metrics": {"psnr": 10.0}}




def _sweep(folder: Path, text: str) -> Path:
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a.png").write_bytes(b"png")
    (folder / "summary.csv").write_text("setting,psnr_mean\nx,10\n")
    (folder / "results.jsonl").write_text(text)
    return folder


def test_figures_names_a_missing_folder_a_file_and_an_empty_results_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    _refused(["figures", str(tmp_path / "nonexist")], "does not exist", tmp_path, capsys)
    _refused(["figures", str(tmp_path / "afile")], "is a file, not a sweep folder", tmp_path, capsys)
    sweep = _sweep(tmp_path / "sweep", "")
    _refused(["figures", str(sweep)], "results.jsonl' is empty: nothing to draw, and summary.csv and figures/ are "
             "left as they are", tmp_path, capsys)
    (tmp_path / "folder" / "results.jsonl").mkdir(parents=True)
    _refused(["figures", str(tmp_path / "folder")], "results.jsonl' is a folder, not the file a sweep writes there",
             tmp_path, capsys)


def test_figures_warns_of_torn_lines(tmp_path, capsys, monkeypatch):
    sweep = _sweep(tmp_path / "sweep", json.dumps(POINT) + "\n" + '{"key": "k2", "met')
    monkeypatch.setattr(figures_cli, "finalize", lambda out: {"points": 1, "figures": [], "notes": []})
    assert cli.main(["figures", str(sweep)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 line of" in err[0], err
    assert "is not a finished point (torn, or edited) was left out" in err[0], err


def test_figures_and_a_resumed_sweep_refuse_a_point_whose_metric_is_not_a_number(tmp_path, capsys):
    """As report does: one sentence naming the point and the value, summary.csv and figures/ left as they were."""
    sweep = _sweep(tmp_path / "sweep", json.dumps({**POINT, "metrics": {"psnr": "high"}}) + "\n")
    _refused(["figures", str(sweep)], "results.jsonl' holds a point (k1) whose psnr is \"high\", not a number",
             tmp_path, capsys)
    with pytest.raises(UserError, match="whose verdict is \"maybe\""):  # what a resumed sweep draws from
        finalize(_sweep(tmp_path / "other", json.dumps({**POINT, "metrics": {"verdict": "maybe"}}) + "\n"))


def test_report_keeps_a_users_page_and_run_folders_and_marks_its_own(tmp_path, capsys):
    mine = tmp_path / "mine.html"
    mine.write_text("<!DOCTYPE html><html><body>my page</body></html>")
    _refused(["report", str(RUN), "--out", str(mine)], "is not an HTML page written by leakattack report", tmp_path,
             capsys)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    _refused(["report", str(RUN), "--out", str(run / "x.html")], "is inside the run folder", tmp_path, capsys)
    ours = tmp_path / "ours.html"
    ours.write_text(f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{MARK}\n<title>t</title>')
    assert _is_report(ours)
    old = tmp_path / "old.html"  # a report written before the mark
    old.write_text('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<meta name="viewport" content='
                   '"width=device-width, initial-scale=1">\n<link rel="icon" href="data:,">\n<title>t</title>')
    assert _is_report(old)
    (tmp_path / "empty.html").write_text("")
    assert _is_report(tmp_path / "empty.html") and not _is_report(mine)


@pytest.mark.parametrize("text,said", [("", "is empty"), ("garbage\n", "holds no finished point")])
def test_report_warns_of_a_sweep_without_points(tmp_path, capsys, text, said):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "results.jsonl").write_text(text)
    out = tmp_path / "r.html"
    assert cli.main(["report", str(sweep), "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "the report shows no point of that sweep" in err[0], err
    assert MARK in out.read_text()[:1024]
    assert cli.main(["report", str(sweep), "--out", str(out)]) == 0  # its own earlier report is replaced


def test_collect_refuses_an_empty_name_and_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(RUN, tmp_path / "runs" / "r")
    (tmp_path / "afile").write_text("x")
    _refused(["collect", "", "--out", "x.csv"], "a folder to collect must be named, got an empty string", tmp_path,
             capsys)
    _refused(["collect", "afile", "--out", "x.csv"], "'afile' is a file, not a folder of runs", tmp_path, capsys)


@pytest.mark.parametrize("strength", [5, "nosuch", ["sigma"]])
def test_figures_warn_of_a_sweep_json_strength_that_names_no_grid_key(strength):
    """An edited sweep.json's strength of 5 raised AttributeError ('int' object has no attribute 'replace'), and
    "nosuch" drew every point at a strength of null; the default key is drawn, in one warning."""
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.figures.sweep import _strength_key

    records = [{**POINT, "grid": {"sigma": s, "image_index": 0}} for s in (0.1, 1.0)]
    with pytest.warns(SettingWarning, match="strength .* is not a grid key of the sweep's points .*: the figures "
                                            "draw against sigma"):
        assert _strength_key(records, {"strength": strength}) == "sigma"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _strength_key(records, {"strength": "image_index"}) == "image_index"
        assert _strength_key(records, {}) == "sigma"


@pytest.mark.parametrize("damage", [{"truth": None}, {"recon": "zeros5"}])
def test_a_damaged_point_images_file_is_refused_in_one_sentence_by_report_and_figures(tmp_path, capsys, damage):
    """A point file without 'recon' raised KeyError in the report, one of the wrong shape ValueError."""
    import torch

    cfg = tmp_path / "s.toml"
    cfg.write_text("[sweep]\nlpips = false\n[base]\nmodel = 'lenet'\ndataset = 'digits'\niterations = 2\n"
                   "[grid]\nsketch_ratio = [0.25, 0.5]\nimage_index = [0]\n")
    out = tmp_path / "sw"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    pt = next((out / "points").glob("*.pt"))
    t = torch.load(pt, weights_only=True)
    if damage.get("recon") == "zeros5":
        t = {"recon": torch.zeros(5), "truth": torch.zeros(5)}
    else:
        t = {"truth": t["truth"]}
    torch.save(t, pt)
    capsys.readouterr()
    for argv in (["report", str(out), "--out", str(tmp_path / "r.html")], ["figures", str(out)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not a sweep point's images" in err[0] and "remove it" in err[0], err


@pytest.mark.parametrize("part,key,value", [("run", "model_params", [1, 2]), ("derived", "in_shape", 5),
                                            ("environment", "machine", "x"), ("derived", "sketch", "srht")])
def test_a_value_edited_inside_config_json_is_refused_in_one_sentence_by_report(tmp_path, capsys, part, key, value):
    """Each of these raised AttributeError or TypeError from the run section."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    config = json.loads((run / "config.json").read_text())
    config[part][key] = value
    (run / "config.json").write_text(json.dumps(config))
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a value in its config.json or metrics.json that is not what a run writes" in \
        err[0], err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("text,said", [('{"psnr": 1', "metrics.json' is not JSON"),
                                       ("", "metrics.json' is not JSON"),
                                       ("[1, 2]", "metrics.json' holds a JSON list, not the object")])
def test_a_metrics_file_cut_short_or_of_another_kind_is_said_as_the_reader_says_it(tmp_path, capsys, text, said):
    """report wrapped the reader's own sentence in 'a value ... not what a run writes (UserError: ...): a
    hand-edited file', naming the exception's class; it now says what collect says."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "metrics.json").write_text(text)
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "UserError" not in err[0] and "hand-edited" not in err[0], err
    assert not (tmp_path / "r.html").exists()


def test_report_names_torn_sweep_lines_and_a_run_without_config_as_figures_and_collect_do(tmp_path, capsys):
    """report left a line of results.jsonl that is no point out, and read a run without config.json, silently."""
    sweep = tmp_path / "sweep"
    shutil.copytree(ROOT / "results" / "sweeps" / "analytic_threshold", sweep)
    lines = (sweep / "results.jsonl").read_text().splitlines(keepends=True)
    (sweep / "results.jsonl").write_text("".join([lines[0], "garbage{\n", *lines[1:]]))
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "config.json").unlink()
    capsys.readouterr()
    assert cli.main(["report", str(sweep), str(run), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: warning: 1 line of '{sweep / 'results.jsonl'}' that is not a finished point (torn, or "
                   "edited) was left out", f"leakattack: warning: '{run}' holds no config.json: its section shows the "
                   "scores without the setting"], err
    assert (tmp_path / "r.html").is_file()
