"""`leakattack collect` gathers run folders into one table; `leakattack --version` names the version."""

import csv
import json
from pathlib import Path

import pytest

from leakattack import __version__, cli


def _run_folder(folder: Path, sketch: str, b: int, psnr: float) -> None:
    """A run folder with planted settings and metrics (no attack runs: the row must carry what collect read)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"run": {"model": "lenet", "sketch": sketch, "defense": ""},
                                                    "derived": {"dataset": "photos"}}))
    (folder / "metrics.json").write_text(json.dumps({"psnr": psnr, "b": b, "stop_reason": "stalled"}))


def test_collect_writes_one_row_per_run_folder_with_settings_and_metrics(tmp_path, capsys):
    _run_folder(tmp_path / "runs" / "a" / "lenet-srht", "srht", 7913, 12.3456789012345)
    _run_folder(tmp_path / "runs" / "lenet-none", "none", 15826, 40.5)
    (tmp_path / "runs" / "unfinished").mkdir()  # no metrics.json: not a run
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["sketch"] for r in rows) == ["none", "srht"]
    srht = next(r for r in rows if r["sketch"] == "srht")
    assert srht["model"] == "lenet" and srht["dataset"] == "photos" and srht["stop_reason"] == "stalled"
    assert float(srht["psnr"]) == pytest.approx(12.3456789012345, rel=1e-9) and srht["b"] == "7913"
    assert "2 runs" in capsys.readouterr().out


def test_collect_without_any_run_is_one_sentence(tmp_path, capsys):
    assert cli.main(["collect", str(tmp_path), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run folder" in err[0] and not (tmp_path / "t.csv").exists()


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"leakattack {__version__}"
