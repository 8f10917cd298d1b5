"""`leakattack collect` gathers run folders into one table; `leakattack --version` names the version."""

import csv
import json
from pathlib import Path

import pytest

from leakattack import __version__, cli


def _run_folder(folder: Path, sketch: str, b: int, psnr: float) -> None:
    """A run folder with planted settings and metrics (no attack runs: the row must carry what collect read)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"run": {"model": "lenet", "sketch": sketch, "defense": "",
                                                            "attack": "rgap", "protocol": "", "batch_size": 2},
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
    assert srht["attack"] == "rgap" and srht["protocol"] == "" and srht["batch_size"] == "2"
    assert float(srht["psnr"]) == pytest.approx(12.3456789012345, rel=1e-9) and srht["b"] == "7913"
    assert "2 runs" in capsys.readouterr().out
    assert "failed" not in srht  # no run recorded its objective at the truth


def test_collect_says_which_part_of_a_failed_run_failed(tmp_path):
    runs = tmp_path / "runs"
    for name, verdict, truth, acc in [("search", "not rebuilt", 0.002, 1.0), ("objective", "not rebuilt", 6.0, 1.0),
                                      ("labels", "not rebuilt", 0.002, 0.5), ("rebuilt", "rebuilt", 0.002, 1.0)]:
        _run_folder(runs / name, "srht", 2697, 10.0)
        m = json.loads((runs / name / "metrics.json").read_text())
        m.update(verdict=verdict, label_mode="idlg", label_acc=acc,
                 objective_at={"truth": {"match": 0.0, "bn": truth, "total": truth},
                               "reconstruction": {"match": 0.1, "bn": 3.8, "total": 3.9}})
        (runs / name / "metrics.json").write_text(json.dumps(m))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert {k: r["failed"] for k, r in rows.items()} == {"search": "search", "objective": "objective",
                                                         "labels": "labels", "rebuilt": ""}
    objective = rows["objective"]
    assert float(objective["objective_truth"]) == 6.0 and float(objective["objective_reconstruction"]) == 3.9


def test_collect_names_the_scalars_of_nested_records_by_dotted_paths(tmp_path):
    runs = tmp_path / "runs"
    _run_folder(runs / "a", "srht", 2697, 10.0)
    m = json.loads((runs / "a" / "metrics.json").read_text())
    m.update(peak_memory={"rss_gb": 0.93}, restart_losses=[0.1, 0.2],
             gauss_newton={"after_step": 1000, "kept": True, "first_attempt": {"steps": 4}},
             objective_at={"truth": {"match": 0.0, "total": 0.002}, "reconstruction": {"match": 0.1, "total": 0.1}})
    (runs / "a" / "metrics.json").write_text(json.dumps(m))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    row, = csv.DictReader(out.open())
    assert float(row["peak_memory.rss_gb"]) == 0.93 and row["gauss_newton.after_step"] == "1000"
    assert row["gauss_newton.kept"] == "True" and row["gauss_newton.first_attempt.steps"] == "4"
    assert not any(k.startswith(("restart_losses", "objective_at")) for k in row)  # lists; totals have own columns
    assert float(row["objective_truth"]) == 0.002


def test_collect_without_any_run_is_one_sentence(tmp_path, capsys):
    assert cli.main(["collect", str(tmp_path), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run folder" in err[0] and not (tmp_path / "t.csv").exists()


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"leakattack {__version__}"


def test_a_metrics_or_config_file_that_is_json_but_no_object_is_one_sentence(tmp_path, capsys):
    for name in ("metrics.json", "config.json"):
        run = tmp_path / name.split(".")[0]
        run.mkdir()
        (run / "metrics.json").write_text("{}")
        (run / name).write_text("[1, 2]")
        assert cli.main(["collect", str(run), "--out", str(tmp_path / "t.csv")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}' holds a JSON list, not the object" in err[0], err
    assert not (tmp_path / "t.csv").exists()
