"""`leakattack collect` gathers run folders into one table; `leakattack --version` names the version."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from leakattack import __version__, cli

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"


def test_collect_writes_one_row_per_run_folder_with_settings_and_metrics(tmp_path, capsys):
    shutil.copytree(REFERENCE, tmp_path / "runs" / "reference")
    # a planted value, not a measured one: the row must carry what collect read, whatever the CPU
    stored = tmp_path / "runs" / "reference" / "lenet-srht" / "metrics.json"
    stored.write_text(json.dumps({**json.loads(stored.read_text()), "psnr": 12.3456789012345}))
    (tmp_path / "runs" / "unfinished").mkdir()  # no metrics.json: not a run
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["sketch"] for r in rows) == ["none", "srht"]
    srht = next(r for r in rows if r["sketch"] == "srht")
    assert srht["model"] == "lenet" and srht["dataset"] == "photos"
    read = json.loads(stored.read_text())
    assert read["psnr"] == 12.3456789012345
    assert float(srht["psnr"]) == pytest.approx(read["psnr"], rel=1e-9) and srht["b"] == "7913"
    assert "2 runs" in capsys.readouterr().out


def test_collect_without_any_run_is_one_sentence(tmp_path, capsys):
    assert cli.main(["collect", str(tmp_path), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run folder" in err[0] and not (tmp_path / "t.csv").exists()


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"leakattack {__version__}"
