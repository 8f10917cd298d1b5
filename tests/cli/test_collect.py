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
    (folder / "metrics.json").write_text(json.dumps({"psnr": psnr, "ssim": 0.5, "iterations": 5,
                                                     "stop_reason": "stalled", "d": 15826, "b": b}))


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



def test_collect_writes_inf_for_an_epsilon_without_a_dp_bound(tmp_path):
    """A defended run whose privacy report has no bound (noise without a clip before it) stores epsilon null, which
    its summary line shows as ε ∞ and a sweep's summary.csv as inf; the table left the cell empty, as for a run
    without a defense."""
    runs = tmp_path / "runs"
    _run_folder(runs / "unbounded", "srht", 7913, 10.0)
    _run_folder(runs / "bounded", "srht", 7913, 10.0)
    _run_folder(runs / "undefended", "srht", 7913, 10.0)
    for name, extra in (("unbounded", {"epsilon": None, "epsilon_paper": None,
                                       "privacy_note": "no clip before the noise: sensitivity unbounded"}),
                        ("bounded", {"epsilon": 4.73, "epsilon_paper": 4.84, "privacy_note": "Delta = C = 1.0"})):
        path = runs / name / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "defense": "gaussian", **extra}))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert rows["unbounded"]["epsilon"] == rows["unbounded"]["epsilon_paper"] == "inf"
    assert float(rows["bounded"]["epsilon"]) == pytest.approx(4.73)
    assert rows["undefended"]["epsilon"] == ""


def test_collect_leaves_a_laplace_runs_paper_epsilon_empty_with_or_without_a_bound(tmp_path):
    """The paper has no Laplace formula: its epsilon was written inf beside a Laplace run without a clip, where the
    report shows none and a bounded Laplace run's cell is empty."""
    runs = tmp_path / "runs"
    for name, defense in (("lap", "laplace:b=1e-3"), ("lapc", "clip:C=1,laplace:b=1e-2")):
        assert cli.main(["run", "--iterations", "1", "--quiet", "--no-lpips", "--defense", defense,
                         "--out", str(runs / name)]) == 0
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert rows["lap"]["epsilon"] == "inf" and float(rows["lapc"]["epsilon"]) > 0  # unbounded, and pure DP's bound
    assert rows["lap"]["epsilon_paper"] == rows["lapc"]["epsilon_paper"] == ""
    assert rows["lap"]["delta"] == rows["lapc"]["delta"] == "0.0"


def test_collect_writes_a_dp_protocols_own_noise_and_epsilon(tmp_path):
    """sketched-dp's and privsgd's noise and ε over rounds 1..T are in config.json, not metrics.json: their rows read
    as an undefended fedavg run's, with no ε at all."""
    runs = tmp_path / "runs"
    noise = {"sketched-dp": {"sigma": 9.69, "epsilon_paper": 0.5, "delta_paper": 1e-05, "epsilon_rdp": 0.103},
             "privsgd": {"sigma": 2.0, "epsilon_paper": 3.0, "delta_paper": 1e-05, "epsilon_rdp": None,
                         "epsilon_rdp_normalised": 7.5, "rounds_covered": 100},
             "fedavg": None}
    for protocol, privacy in noise.items():
        encoder = {"kind": "srht", "d": 13426, "b": 6713, "seed": 7}
        _protocol_folder(runs / protocol, protocol, encoder, 1, 0)
        if privacy is not None:
            path = runs / protocol / "config.json"
            config = json.loads(path.read_text())
            config["derived"]["sketch"]["privacy"] = privacy
            path.write_text(json.dumps(config))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    dp = rows["sketched-dp"]
    assert float(dp["protocol_sigma"]) == 9.69 and float(dp["protocol_epsilon_rdp"]) == 0.103
    assert float(dp["protocol_epsilon_paper"]) == 0.5 and float(dp["protocol_delta_paper"]) == 1e-05
    assert rows["privsgd"]["protocol_epsilon_rdp"] == "inf"  # null: its delta reached 1, no bound
    assert float(rows["privsgd"]["protocol_epsilon_rdp_normalised"]) == 7.5
    assert rows["privsgd"]["protocol_rounds_covered"] == "100"
    assert all(rows["fedavg"][k] == "" for k in ("protocol_sigma", "protocol_epsilon_rdp"))  # no noise of its own


def _protocol_folder(folder: Path, protocol: str, encoder: dict, round_: int, client: int) -> None:
    """A protocol run's folder as `leakattack run --protocol` writes it: the --sketch flag (srht) under ``run``, the
    encoder the protocol really sent with under ``derived.sketch.encoder``."""
    folder.mkdir(parents=True)
    run = {"model": "lenet", "sketch": "srht", "sketch_ratio": 0.5, "defense": "", "attack": "gradient-matching",
           "protocol": protocol, "protocol_round": round_, "protocol_client": client, "batch_size": 1}
    derived = {"dataset": "digits", "d": 13426, "b": encoder["b"],
               "sketch": {"kind": f"protocol:{protocol}", "round": round_, "client": client, "encoder": encoder}}
    (folder / "config.json").write_text(json.dumps({"run": run, "derived": derived}))
    (folder / "metrics.json").write_text(json.dumps({"psnr": 10.0, "ssim": 0.5, "iterations": 5,
                                                     "stop_reason": "iterations", "d": 13426, "b": encoder["b"]}))


def test_collect_names_the_sketch_a_protocol_really_sent_and_its_round_and_client(tmp_path):
    """The sketch column held the --sketch flag (srht) for fedavg, which sends unsketched, and for FedSketch, which
    sends a count-sketch table; protocol runs had no round or client column."""
    runs = tmp_path / "runs"
    _protocol_folder(runs / "fedavg", "fedavg", {"kind": "none", "d": 13426, "b": 13426, "seed": 0}, 1, 0)
    _protocol_folder(runs / "privix", "fedsketch-privix", {"kind": "countsketch-table", "d": 13426, "b": 800,
                                                           "rows": 20, "buckets": 40, "seed": 7}, 3, 2)
    _run_folder(runs / "plain", "gaussian", 7913, 12.0)
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert (rows["fedavg"]["sketch"], rows["fedavg"]["round"], rows["fedavg"]["client"]) == ("none", "1", "0")
    assert (rows["privix"]["sketch"], rows["privix"]["b"]) == ("countsketch-table", "800")
    assert (rows["privix"]["round"], rows["privix"]["client"]) == ("3", "2")
    assert (rows["plain"]["sketch"], rows["plain"]["protocol"], rows["plain"]["round"], rows["plain"]["client"]) == \
        ("gaussian", "", "", "")


def test_collect_names_an_unsketched_message_files_sketch_none_not_its_kind(tmp_path):
    """A message file's description holds its kind (gradient or update) and its encoder: an unsketched file (encoder
    None) read 'gradient' in the sketch column."""
    from leakattack.cli.collect import sent_sketch

    message = {"file": "plain.pt", "kind": "gradient", "numbers": 10066, "batch_size": 1, "encoder": None}
    assert sent_sketch({"run": {"sketch": "none"}, "derived": {"sketch": message}}) == "none"
    sketched = {**message, "encoder": {"kind": "srht", "d": 10066, "b": 5033, "seed": 1}}
    assert sent_sketch({"run": {"sketch": "srht"}, "derived": {"sketch": sketched}}) == "srht"
    assert sent_sketch({"run": {"sketch": "srht"}, "derived": {"sketch": {"kind": "gaussian"}}}) == "gaussian"


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


def test_collect_counts_a_batchs_images_rebuilt_on_their_own(tmp_path):
    runs = tmp_path / "runs"
    for name, each in [("batch", ["rebuilt", "not rebuilt", "rebuilt"]), ("one", ["rebuilt"]), ("older", None)]:
        _run_folder(runs / name, "srht", 7913, 20.0)
        m = json.loads((runs / name / "metrics.json").read_text())
        m.update(verdict="rebuilt", **({"verdict_each": each} if each else {}))
        (runs / name / "metrics.json").write_text(json.dumps(m))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    rows = {Path(r["run"]).name: r for r in csv.DictReader(out.open())}
    assert {k: r["images_rebuilt"] for k, r in rows.items()} == {"batch": "2", "one": "", "older": ""}


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


def test_collect_writes_its_columns_in_one_order_whatever_runs_it_collects(tmp_path):
    """The columns after the leading ones came in the order first seen in the sorted runs, so a defended run's
    epsilon stood before the objective's totals in its own table and after them once a run sorted before it had
    recorded its objective: tables of different runs did not line up."""
    runs = tmp_path / "runs"
    at = {"truth": {"match": 0.0, "total": 0.002}, "reconstruction": {"match": 0.1, "total": 0.1}}
    for name, extra in (("a-batch", {"objective_at": at, "peak_memory": {"rss_gb": 0.9}, "verdict": "not rebuilt",
                                     "verdict_each": ["rebuilt", "not rebuilt"]}),
                        ("b-defended", {"peak_memory": {"rss_gb": 0.9}, "objective_at": at, "defense": "gaussian",
                                        "noise_seed": 3, "epsilon": None, "privacy_note": "no clip",
                                        "verdict": "not rebuilt"})):
        _run_folder(runs / name, "srht", 7913, 10.0)
        path = runs / name / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **extra}))
    headers = []
    for given in ([runs / "b-defended"], [runs]):
        out = tmp_path / f"{len(given)}-{len(headers)}.csv"
        assert cli.main(["collect", *map(str, given), "--out", str(out)]) == 0
        headers.append(out.read_text().splitlines()[0].split(","))
    alone, both = headers
    assert [c for c in both if c in alone] == alone
    # metrics.json's keys in the file's order, then collect's own, then the keys whose set varies, by name
    assert both.index("verdict") < both.index("peak_memory.rss_gb") < both.index("objective_truth") \
        < both.index("images_rebuilt") < both.index("failed") < both.index("epsilon") < both.index("noise_seed") \
        < both.index("privacy_note")


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
        _run_folder(run, "srht", 7913, 10.0)
        (run / name).write_text("[1, 2]")
        assert cli.main(["collect", str(run), "--out", str(tmp_path / "t.csv")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}' holds a JSON list, not the object" in err[0], err
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("command", ["collect", "report"])
@pytest.mark.parametrize("edit, words", [
    ({"run": [1]}, "its run is [1], not the object a run writes"),
    ({"derived": "photos"}, 'its derived is "photos", not the object a run writes'),
    ({"environment": 3}, "its environment is 3, not the object a run writes"),
    ({"run": {"model": 5}}, "its run.model is 5, not the text a run writes"),
    ({"run": {"sketch": ["srht"]}}, 'its run.sketch is ["srht"], not the text a run writes'),
    ({"run": {"iterations": "many"}}, 'its run.iterations is "many", not the whole number a run writes'),
    ({"run": {"batch_size": True}}, "its run.batch_size is true, not the whole number a run writes"),
    ({"run": {"batch_size": 2.5}}, "its run.batch_size is 2.5, not the whole number a run writes"),
])
def test_a_config_file_with_a_part_or_setting_of_another_type_is_one_sentence(tmp_path, capsys, command, edit, words):
    """A hand-edited config.json whose run, derived or environment is not an object, or whose printed settings are of
    another type than a run writes, is refused by collect as by report, in one sentence naming the key."""
    run = tmp_path / "run"
    _run_folder(run, "srht", 7913, 10.0)
    config = json.loads((run / "config.json").read_text())
    for part, value in edit.items():
        config[part] = {**config[part], **value} if isinstance(value, dict) else value
    (run / "config.json").write_text(json.dumps(config))
    out = tmp_path / ("t.csv" if command == "collect" else "t.html")
    assert cli.main([command, str(run), "--out", str(out)]) == 2
    error = _one_error(capsys)
    assert f"config.json' is unreadable: {words}" in error, error
    assert not out.exists()


def _one_error(capsys) -> str:
    """The one line a refused command printed on stderr."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakattack: error: "), err
    return err[0]


def _sweep_folder(folder: Path) -> None:
    """A sweep folder as `leakattack sweep` leaves it: its plan, its points' records and summary, their tensors."""
    (folder / "points").mkdir(parents=True)
    (folder / "sweep.json").write_text("{}")
    (folder / "results.jsonl").write_text(json.dumps({"key": "k1", "metrics": {"psnr": 9.9}}) + "\n")
    (folder / "summary.csv").write_text("model,sketch,psnr_mean\nlenet,srht,9.9\n")
    (folder / "points" / "k1.pt").write_bytes(b"")


@pytest.mark.parametrize("name", ["table.txt", "table", "report.html", "sweep.toml"])
def test_collect_out_must_name_a_csv_file(tmp_path, capsys, name):
    _run_folder(tmp_path / "runs" / "r1", "srht", 7913, 10.0)
    out = tmp_path / name
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "must name a .csv file" in _one_error(capsys) and not out.exists()


@pytest.mark.parametrize("inside", ["runs/r1/table.csv", "runs/r1/trace.csv", "sw1/table.csv",
                                    "sw1/summary.csv", "sw1/points/table.csv"])
def test_collect_refuses_an_out_inside_a_run_or_sweep_folder(tmp_path, capsys, inside):
    _run_folder(tmp_path / "runs" / "r1", "srht", 7913, 10.0)
    (tmp_path / "runs" / "r1" / "trace.csv").write_text("step,loss,psnr\n")
    _sweep_folder(tmp_path / "sw1")
    out = tmp_path / inside
    before = out.read_bytes() if out.exists() else None
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 2
    kind = "run" if inside.startswith("runs") else "sweep"
    assert f"is inside the {kind} folder" in _one_error(capsys)
    assert (out.read_bytes() if out.exists() else None) == before


@pytest.mark.parametrize("text", ["model,sketch,psnr_mean\nlenet,srht,9.9\n", "step,loss,psnr\n0,1.5,9.0\n",
                                  "run,model\nruns/r1,lenet\n", '{"psnr": 1}'])
def test_collect_does_not_replace_a_file_that_is_not_its_own_table(tmp_path, capsys, text):
    _run_folder(tmp_path / "runs" / "r1", "srht", 7913, 10.0)
    out = tmp_path / "kept.csv"  # a copied summary.csv, a trace.csv, a table with other columns, JSON
    out.write_text(text)
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "is not a table written by collect" in _one_error(capsys) and out.read_text() == text


def test_collect_replaces_an_empty_file_and_an_earlier_table_of_its_own(tmp_path, capsys):
    _run_folder(tmp_path / "runs" / "r1", "srht", 7913, 10.0)
    out = tmp_path / "table.csv"
    out.write_text("")
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 0
    _run_folder(tmp_path / "runs" / "r2", "none", 15826, 40.5)
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert [Path(r["run"]).name for r in csv.DictReader(out.open())] == ["r1", "r2"]
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 runs |")


def test_collect_skips_the_hidden_folders_a_run_is_staged_in(tmp_path):
    runs = tmp_path / "runs"
    _run_folder(runs / "r1", "srht", 7913, 10.0)
    _run_folder(runs / ".r1.abc123.tmp", "srht", 7913, 11.0)  # written, not yet renamed into place
    _run_folder(runs / ".r1.def456.old" / "r1", "srht", 7913, 12.0)  # the earlier run, moved aside
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(runs), "--out", str(out)]) == 0
    assert [r["run"] for r in csv.DictReader(out.open())] == [str(runs / "r1")]


def test_collect_counts_a_run_reached_more_than_once_once_under_its_first_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run_folder(tmp_path / "runs" / "r1", "srht", 7913, 10.0)
    _run_folder(tmp_path / "tree" / "a" / "r2", "none", 15826, 40.5)
    (tmp_path / "link").symlink_to(tmp_path / "runs" / "r1")
    out = tmp_path / "table.csv"
    assert cli.main(["collect", "runs/r1", "runs/r1", "./runs/r1", str(tmp_path / "runs" / "r1"), "link",
                     "tree", "tree/a/../a/r2", "--out", str(out)]) == 0
    assert [r["run"] for r in csv.DictReader(out.open())] == ["runs/r1", "tree/a/r2"]


def test_collect_warns_of_a_named_folder_that_holds_no_run(tmp_path, capsys, monkeypatch):
    """A folder named beside others that holds no run folder (a run whose metrics.json was lost) was left out of the
    table without a word."""
    monkeypatch.chdir(tmp_path)
    _run_folder(tmp_path / "runs" / "a", "srht", 7913, 10.0)
    (tmp_path / "lost" / "run").mkdir(parents=True)
    (tmp_path / "lost" / "run" / "config.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "runs" / "a")
    out = tmp_path / "table.csv"
    assert cli.main(["collect", "runs/a", "lost", "lost/", "link", "./runs", "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert said.err.strip() == ("leakattack: warning: 'lost' holds no run folder (a folder holding metrics.json) at "
                                "or below it: nothing of it is in the table")  # once, under its first spelling
    assert said.out.startswith("1 run | ") and [r["run"] for r in csv.DictReader(out.open())] == ["runs/a"]


@pytest.mark.parametrize("metrics, said", [
    ({"psnr": "high"}, "has no ssim, iterations, stop_reason, d or b, which every run's metrics.json holds"),
    ({"psnr": "high", "ssim": 0.5, "iterations": 5, "stop_reason": "stalled", "d": 10, "b": 5},
     'holds psnr = "high", not a number'),
    ({"psnr": None, "ssim": None, "iterations": None, "stop_reason": "stalled", "d": 10, "b": 5},
     "holds iterations = null, which every run's metrics.json records"),  # an empty cell in the table
])
def test_collect_refuses_a_metrics_json_that_report_refuses(tmp_path, capsys, metrics, said):
    _run_folder(tmp_path / "runs" / "good", "srht", 7913, 10.0)
    (tmp_path / "runs" / "bad").mkdir()
    (tmp_path / "runs" / "bad" / "metrics.json").write_text(json.dumps(metrics))
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = _one_error(capsys)
    assert str(tmp_path / "runs" / "bad" / "metrics.json") in err and said in err, err
    assert not out.exists()  # no table of the runs that could be read
    assert cli.main(["report", str(tmp_path / "runs" / "bad"), "--out", str(tmp_path / "r.html")]) == 2
    assert said in _one_error(capsys)  # report says the same


def test_collect_names_the_sweep_folders_it_finds_and_where_their_points_are(tmp_path, capsys):
    _sweep_folder(tmp_path / "sw1")
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(tmp_path / "sw1"), "--out", str(out)]) == 2
    err = _one_error(capsys)
    assert f"only the sweep folder '{tmp_path / 'sw1'}', whose points are in its summary.csv and results.jsonl" in err
    assert not out.exists()
    _run_folder(tmp_path / "r1", "srht", 7913, 10.0)  # a tree of a run and a sweep: the run's row, a note on the sweep
    assert cli.main(["collect", str(tmp_path), "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert said.err.strip() == (f"note: left out the sweep folder '{tmp_path / 'sw1'}', whose points are in its "
                                "summary.csv and results.jsonl")
    assert said.out.startswith("1 run | ")
    assert [r["run"] for r in csv.DictReader(out.open())] == [str(tmp_path / "r1")]


def test_collect_says_1_run_in_the_singular(tmp_path, capsys):
    _run_folder(tmp_path / "r1", "srht", 7913, 10.0)
    assert cli.main(["collect", str(tmp_path / "r1"), "--out", str(tmp_path / "table.csv")]) == 0
    assert capsys.readouterr().out.startswith("1 run | ")


def test_a_run_folder_without_config_json_is_collected_with_a_warning_naming_it(tmp_path, capsys):
    _run_folder(tmp_path / "runs" / "whole", "srht", 7913, 12.0)
    _run_folder(tmp_path / "runs" / "bare", "srht", 7913, 11.0)
    (tmp_path / "runs" / "bare" / "config.json").unlink()
    out = tmp_path / "table.csv"
    assert cli.main(["collect", str(tmp_path / "runs"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("holds no config.json") == 1 and "bare' holds no config.json" in err
    bare = next(r for r in csv.DictReader(out.open()) if r["run"].endswith("bare"))
    assert bare["model"] == "" and bare["psnr"] == "11.0"


def test_report_of_a_file_names_it_as_a_file(tmp_path, capsys):
    _run_folder(tmp_path / "run", "srht", 7913, 12.0)
    assert cli.main(["report", str(tmp_path / "run" / "metrics.json"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.json' is a file: name the run folder" in err[0]
    assert not (tmp_path / "r.html").exists()
