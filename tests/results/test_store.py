"""The sweep store: torn lines dropped, records ordered by plan, one grouping for summary and figures."""

import csv
import json
import os
import warnings
from types import SimpleNamespace

import pytest

from leakattack.errors import SettingWarning
from leakattack.results import (
    aggregate,
    append_line,
    default_strength,
    load_records,
    mean_std,
    planned_keys,
    read_results,
    series_keys,
    series_label,
    series_of,
    setting_of,
    summarize,
    unplanned,
    write_csv,
)


def rec(i, sigma, image, psnr, sketch="srht"):
    return {"key": f"k{i:03d}", "index": i, "grid": {"sketch": sketch, "sigma": sigma, "image_index": image},
            "params": {"model": "logreg", "sketch": sketch, "sigma": sigma, "image_index": image},
            "metrics": {"psnr": psnr, "ssim": 0.5, "d": 100, "b": 25, "m": 64}}


RECORDS = [rec(0, 0.0, 0, 30.0), rec(1, 0.0, 1, 34.0), rec(2, 0.1, 0, 10.0), rec(3, 0.1, 1, 12.0), rec(4, 1.0, 0, 5.0)]


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_torn_and_foreign_lines_are_dropped_and_repair_removes_them(tmp_path):
    path = tmp_path / "results.jsonl"
    write_lines(path, RECORDS[:2])
    with open(path, "ab") as fh:
        fh.write(b'["not a record"]\n{"key": "torn", "metrics": {"ps')
    assert [r["key"] for r in read_results(path)] == ["k000", "k001"]
    assert b"torn" in path.read_bytes()  # reading alone never rewrites
    with pytest.warns(SettingWarning, match="^1 line of .* was not a finished point of a sweep") as caught:
        assert [r["key"] for r in read_results(path, repair=True)] == ["k000", "k001"]
    assert len(caught) == 1  # the foreign line is counted, the torn last one (a kill mid-append) is not
    assert path.read_bytes() == b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS[:2])
    assert read_results(tmp_path / "missing.jsonl") == []


def test_repairing_only_a_torn_last_line_says_nothing(tmp_path):
    path = tmp_path / "results.jsonl"
    write_lines(path, RECORDS[:2])
    with open(path, "ab") as fh:
        fh.write(b'{"key": "torn", "metrics": {"ps')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["key"] for r in read_results(path, repair=True)] == ["k000", "k001"]
    assert path.read_bytes() == b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS[:2])


def test_a_line_that_is_not_utf8_is_dropped_and_repaired_like_a_torn_one(tmp_path):
    path = tmp_path / "results.jsonl"
    write_lines(path, RECORDS[:1])
    with open(path, "ab") as fh:
        fh.write(b'{"key": "bad\xff\xfe", "metrics": {}}\n')
    write_lines(tmp_path / "tail.jsonl", RECORDS[1:2])
    with open(path, "ab") as fh:
        fh.write((tmp_path / "tail.jsonl").read_bytes())
    with pytest.warns(SettingWarning, match="^1 line of "):
        assert [r["key"] for r in read_results(path, repair=True)] == ["k000", "k001"]
    assert path.read_bytes() == b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS[:2])


def test_the_std_of_a_single_sample_is_undefined_and_its_csv_cell_empty(tmp_path):
    assert mean_std([3.0]) == (3.0, None)
    assert mean_std([1.0, 3.0]) == (2.0, 2 ** 0.5)
    rows = summarize([rec(0, 0.0, 0, 30.0)])
    write_csv(tmp_path / "summary.csv", rows)
    row = next(csv.DictReader(open(tmp_path / "summary.csv")))
    assert row["n"] == "1" and row["psnr_mean"] == "30.0" and row["psnr_std"] == "" and row["ssim_std"] == ""
    _, _, std, n, _ = aggregate([rec(0, 0.0, 0, 30.0)], lambda r: 0.0, "psnr")["srht"][0]
    assert (std, n) == (None, 1)


def test_a_list_or_dict_cell_is_written_as_json(tmp_path):
    """A grid value such as priors = ["tv:0.1"] was written as Python's text, ['tv:0.1']."""
    write_csv(tmp_path / "s.csv", [{"priors": ["tv:0.1"], "model_params": {"act": "relu", "hidden": 256},
                                    "psnr_mean": 1.5, "note": None}])
    row = next(csv.DictReader(open(tmp_path / "s.csv")))
    assert json.loads(row["priors"]) == ["tv:0.1"] and json.loads(row["model_params"]) == {"act": "relu",
                                                                                            "hidden": 256}
    assert row["psnr_mean"] == "1.5" and row["note"] == ""


def test_series_are_the_other_varying_grid_keys_and_their_labels_name_them():
    recs = [{"grid": {"sketch": k, "batch_size": b, "sigma": s, "image_index": i, "model": "lenet"}}
            for k in ("srht", "none") for b in (1, 4) for s in (0.0, 1e-4) for i in (0, 1)]
    for r in recs:
        r["grid"]["model"] = "lenet"  # constant: never a series key
    keys = series_keys(recs, exclude=("sigma",))
    assert keys == ["sketch", "batch_size"]
    series = list(dict.fromkeys(series_of(r, keys) for r in recs))
    assert [series_label(s) for s in series] == ["sketch=srht, batch_size=1", "sketch=srht, batch_size=4",
                                                 "sketch=none, batch_size=1", "sketch=none, batch_size=4"]
    assert series_label(series_of({"grid": {"sigma": 1e-4}}, ["sigma"])) == "sigma=0.0001"
    # a list of names reads as they are typed; no list at all and an empty one read alike
    labels = [series_label(series_of({"grid": g}, ["priors"])) for g in
              ({"priors": ["tv:0.1", "bn"]}, {"priors": []}, {})]
    assert labels == ["priors=tv:0.1+bn", "priors=none", "priors=none"]
    assert series_label(series_of({"grid": {"grid": [1, 2]}}, ["grid"])) == "grid=[1, 2]"


def test_append_line_writes_one_whole_line_per_record(tmp_path):
    path = tmp_path / "results.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        append_line(fd, {**RECORDS[0], "metrics": {**RECORDS[0]["metrics"], "epsilon": float("inf")}})
        append_line(fd, RECORDS[1])
    finally:
        os.close(fd)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["metrics"]["epsilon"] is None


def test_load_records_deduplicates_and_follows_the_plan_order(tmp_path):
    write_lines(tmp_path / "results.jsonl", [RECORDS[2], RECORDS[0], RECORDS[2]])
    assert [r["key"] for r in load_records(tmp_path)] == ["k000", "k002"]  # stored index order
    plan = SimpleNamespace(points=[{"key": "k002"}, {"key": "k001"}, {"key": "k000"}])
    got = load_records(tmp_path, plan)
    assert [(r["key"], r["index"]) for r in got] == [("k002", 0), ("k000", 2)]
    # a key function recomputes the key from the stored parameters (records written under older defaults)
    renamed = load_records(tmp_path, SimpleNamespace(points=[{"key": "new-0.1"}]),
                           key_of=lambda params: f"new-{params['sigma']}")
    assert [r["key"] for r in renamed] == ["k002"]


def test_a_folder_keeps_to_the_plan_its_sweep_last_ran(tmp_path):
    """Points stored by an earlier, larger plan stay in results.jsonl but out of what the folder's readers load; a
    sweep.json without keys (written before they were recorded) loads every point."""
    write_lines(tmp_path / "results.jsonl", [RECORDS[0], RECORDS[1], RECORDS[2]])
    (tmp_path / "sweep.json").write_text(json.dumps({"points": 2, "keys": ["k002", "k000"]}))
    assert planned_keys(tmp_path) == ["k002", "k000"]
    got = load_records(tmp_path)
    assert [(r["key"], r["index"]) for r in got] == [("k002", 0), ("k000", 1)]
    assert unplanned(tmp_path, got) == 1
    (tmp_path / "sweep.json").write_text(json.dumps({"points": 2}))
    assert planned_keys(tmp_path) is None and len(load_records(tmp_path)) == 3


def test_a_record_without_its_parameters_is_dropped_like_a_torn_line(tmp_path):
    """A hand-edited line with the key and metrics but no model or sketch would break every reader: dropped."""
    broken = {"key": "a", "index": 0, "grid": {"x": 1}, "params": {"model": "lenet"}, "metrics": {"psnr": 1}}
    write_lines(tmp_path / "results.jsonl", [RECORDS[0], broken])
    assert [r["key"] for r in read_results(tmp_path / "results.jsonl")] == [RECORDS[0]["key"]]


def test_summary_has_one_row_per_setting_with_mean_and_sample_std():
    rows = summarize(RECORDS)
    assert [(r["sigma"], r["n"]) for r in rows] == [(0.0, 2), (0.1, 2), (1.0, 1)]
    assert rows[0]["psnr_mean"] == 32.0 and rows[0]["psnr_std"] == pytest.approx(8 ** 0.5, rel=1e-12)
    assert rows[2]["psnr_std"] is None and rows[0]["b_over_m"] == 25 / 64  # one sample: no std
    assert "image_index" not in rows[0] and "label_acc_mean" not in rows[0]


def test_summary_counts_the_part_that_failed_per_setting_where_points_tell_it():
    recs = [rec(i, sigma, i, 10.0) for i, sigma in enumerate([0.0, 0.0, 0.0, 0.1, 0.1, 1.0])]
    truths = [1.0, 5.0, None, 1.0, 1.0, None]  # objective at the truth; the reconstruction scores 2.0
    for r, truth, verdict in zip(recs, truths, ["not rebuilt"] * 2 + ["rebuilt"] + ["not rebuilt"] * 3):
        r["metrics"].update(verdict=verdict, label_mode="idlg", label_acc=1.0)
        if truth is not None:
            r["metrics"]["objective_at"] = {"truth": {"match": 0.0, "total": truth},
                                            "reconstruction": {"match": 0.5, "total": 2.0}}
    recs[4]["metrics"]["label_acc"] = 0.5  # labels read wrongly: they failed, whatever the objective says
    rows = summarize(recs)
    counts = [tuple(r.get(f"failed_{part}") for part in ("labels", "objective", "search")) for r in rows]
    assert counts == [(0, 1, 1), (1, 0, 1), (None, None, None)]
    assert "failed_search" not in summarize(RECORDS)[0]  # no verdicts, no objective_at


def test_summary_gives_the_share_of_a_batchs_images_rebuilt_on_their_own():
    recs = [rec(i, sigma, i, 10.0) for i, sigma in enumerate([0.0, 0.0, 0.1])]
    each = [["rebuilt", "not rebuilt"], ["rebuilt", "rebuilt"], ["not rebuilt", "not rebuilt"]]
    for r, e, verdict in zip(recs, each, ["rebuilt", "rebuilt", "not rebuilt"]):
        r["metrics"].update(verdict=verdict, verdict_each=e)
    rows = summarize(recs)
    assert [(r["rebuilt"], r["rebuilt_images"]) for r in rows] == [(1.0, 0.75), (0.0, 0.0)]
    single = rec(0, 0.0, 0, 10.0)
    single["metrics"].update(verdict="rebuilt", verdict_each=["rebuilt"])
    assert "rebuilt_images" not in summarize([single])[0]  # one image: the point's own verdict says it
    assert "rebuilt_images" not in summarize(RECORDS)[0]  # older results: no per-image verdicts


def test_figures_aggregate_over_the_same_settings_as_the_summary():
    recs = RECORDS + [rec(5, 0.0, 0, 20.0, sketch="gaussian")]
    lines = aggregate(recs, lambda r: r["grid"]["sigma"], "psnr")
    rows = {(r["sketch"], r["sigma"]): r for r in summarize(recs)}
    assert list(lines) == ["srht", "gaussian"]
    for line, pts in lines.items():
        assert [p[0] for p in pts] == sorted(p[0] for p in pts)
        for x, mean, std, n, part in pts:
            row = rows[(line, x)]
            assert (mean, std, n) == (row["psnr_mean"], row["psnr_std"], row["n"])
            assert {setting_of(r) for r in part} == {setting_of(part[0])}
    # records whose x or metric is missing are left out
    assert aggregate(recs, lambda r: None, "psnr") == {} and aggregate(recs, lambda r: 1.0, "lpips") == {}


def test_the_default_strength_is_the_first_grid_key_that_is_not_a_repetition():
    assert default_strength(["seed", "sketch", "sigma", "C"]) == "sigma"
    assert default_strength(["image_index", "model"]) is None


def test_summary_columns_keep_their_order_when_the_first_setting_lacks_a_metric():
    """A setting whose points store PSNR and SSIM as null (a run stores a score that is not finite so) comes first:
    its metrics keep their place before the shares, as in a sweep where every point has them."""
    recs = [rec(i, sigma, 0, 10.0) for i, sigma in enumerate([0.0, 0.1])]
    for r in recs:
        r["metrics"].update(verdict="not rebuilt")
    whole = list(summarize(recs)[0])
    recs[0]["metrics"].update(psnr=None, ssim=None)
    rows = summarize(recs)
    # the same columns, with the count of points whose PSNR is not a number after n
    counted = whole[:whole.index("n") + 1] + ["psnr_unscored"] + whole[whole.index("n") + 1:]
    assert all(list(r) == counted for r in rows), [list(r) for r in rows]
    assert rows[0]["psnr_mean"] is None and rows[1]["psnr_mean"] == 10.0
    assert [r["psnr_unscored"] for r in rows] == [1, 0]
    assert whole.index("psnr_mean") < whole.index("rebuilt") and whole[-2:] == ["rebuilt", "one_metric_ahead"]


def test_a_laplace_settings_pure_epsilon_is_summarised_and_its_paper_epsilon_left_empty_not_infinite():
    """Laplace noise has an epsilon (the Laplace mechanism's, delta = 0) and no paper formula: summary.csv writes the
    epsilon and leaves the paper's empty; a setting with no bound at all reads inf in its epsilon, and its paper
    epsilon, which no formula of the paper gives, stays empty (it read inf)."""
    note = {"privacy_note": "Laplace noise, pure DP: ...", "epsilon_paper": None, "delta": 0.0}
    laplace = [{**r, "metrics": {**r["metrics"], **note, "epsilon": 40.0}} for r in RECORDS[2:4]]
    unbounded = [{**RECORDS[4], "metrics": {**RECORDS[4]["metrics"], **note, "epsilon": None,
                                            "privacy_note": "Laplace noise: no clip before the noise"}}]
    rows = summarize(laplace + unbounded)
    assert rows[0]["epsilon_mean"] == 40.0 and rows[0].get("epsilon_paper_mean") is None
    assert rows[1]["epsilon_mean"] == float("inf") and rows[1].get("epsilon_paper_mean") is None


def test_grid_tables_that_list_the_same_keys_in_another_order_give_one_setting():
    """Two [[grid]] tables of sketch and sigma in either order: one setting of n = 4 (two rows of n = 2 each,
    alike to the eye, with their own means), its columns in the first point's order."""
    a = [rec(i, 0.1, i, 10.0 + i) for i in range(2)]
    b = [{**r, "key": f"k1{i}", "grid": {"sigma": 0.1, "sketch": "srht", "image_index": 2 + i}}
         for i, r in enumerate([rec(2, 0.1, 2, 12.0), rec(3, 0.1, 3, 13.0)])]
    assert setting_of(a[0]) == setting_of(b[0])
    rows = summarize(a + b)
    assert len(rows) == 1 and rows[0]["n"] == 4 and rows[0]["psnr_mean"] == 11.5
    assert list(rows[0])[:2] == ["sketch", "sigma"]


def test_a_grid_defense_keeps_the_words_the_grid_gives():
    """The run records its defense normalised ("clip:C=1.0@before_sketch"): a grid's "clip:C=1" stays in the
    summary's defense column, which the report matches to results.jsonl (it had left summary.csv and the figures
    out as an earlier grid's)."""
    r = rec(0, 0.0, 0, 10.0)
    r = {**r, "grid": {"defense": "clip:C=1", "image_index": 0}, "metrics": {**r["metrics"],
                                                                           "defense": "clip:C=1.0@before_sketch"}}
    assert summarize([r])[0]["defense"] == "clip:C=1"
    from leakattack.figures.report.sweep_section import summary_matches

    assert summary_matches(summarize([r]), [r])
    assert summarize([{**r, "grid": {"image_index": 0}}])[0]["defense"] == "clip:C=1.0@before_sketch"


def test_a_protocols_points_are_summarised_with_the_protocols_sketch_and_noise():
    """A sweep over protocol = fedavg, sketched-dp said "sketch srht, no defense" of both: fedavg sends the whole
    update, and sketched-dp adds its own Gaussian noise."""
    from leakattack.results import as_ran

    def point(i, protocol, b):
        r = rec(i, 0.0, 0, 10.0)
        return {**r, "grid": {"protocol": protocol, "image_index": 0},
                "params": {**r["params"], "protocol": protocol, "sketch": "srht", "defense": ""},
                "metrics": {**r["metrics"], "d": 100, "b": b}}

    fedavg, dp = point(0, "fedavg", 100), point(1, "sketched-dp", 50)
    assert as_ran(fedavg)["sketch"] == "none" and as_ran(dp)["sketch"] == "srht"
    assert as_ran(dp)["defense"] == "sketched-dp's own Gaussian noise" and not as_ran(fedavg)["defense"]
    rows = summarize([fedavg, dp])
    assert [(r["sketch"], r["defense"]) for r in rows] == [("none", ""), ("srht", "sketched-dp's own Gaussian noise")]
    plain = rec(2, 0.0, 0, 10.0)
    assert as_ran(plain) is plain["params"]
    said_none = {**dp, "params": {**dp["params"], "defense": "none"}}  # "none" is no defense, as "" is
    assert as_ran(said_none)["defense"] == "sketched-dp's own Gaussian noise"
