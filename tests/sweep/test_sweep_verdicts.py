"""A sweep's outputs say which points were rebuilt: the summary line counts them and says what a point not rebuilt
means, the figures mark those points and cells, and summary.csv writes an epsilon without a bound as inf (a missing
one stays empty).  Every sweep here is written by hand; no attack runs."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from leakattack.cli.figures import FAILURE_NOT_PRIVACY, verdicts_text
from leakattack.cli.sweep import best_text
from leakattack.figures import sweep as sweep_figures_module
from leakattack.figures.report import stored_summary
from leakattack.rebuilt import batch_images
from leakattack.results import summarize, write_csv
from leakattack.sweep import runner

SIGMAS = (0.0, 1e-2, 1.0)
NOTE = "Delta = ||R||_op * C (clip before the sketch, noise after it)"


def privacy(sigma: float) -> dict:
    """The privacy keys a run under ``clip:C=1,gaussian:sigma=S@after_sketch`` records (message_privacy)."""
    if sigma == 0:  # no Gaussian noise: no bound, and no delta
        return {"epsilon": None, "delta": None, "epsilon_paper": None, "privacy_note": "no Gaussian noise: no DP "
                "guarantee"}
    return {"epsilon": 8.0 / sigma, "delta": 1e-5, "epsilon_paper": 7.5 / sigma, "privacy_note": NOTE}


def record(i: int, sigma: float, image: int, verdict: str | None = "not rebuilt", **metrics) -> dict:
    m = {"d": 100, "b": 50, "m": 64, "mse": 0.2, "psnr": 7.0 - sigma - image, "ssim": 0.1, "baseline_psnr": 13.8,
         "baseline_ssim": 0.29, "defense": f"clip:C=1.0@before_sketch,gaussian:sigma={sigma}@after_sketch",
         **privacy(sigma), **metrics}
    if verdict is not None:
        m["verdict"] = verdict
    return {"key": f"{i:012d}", "index": i, "grid": {"sigma": sigma, "image_index": image},
            "params": {"model": "lenet", "dataset": "digits", "sketch": "srht", "image_index": image}, "metrics": m}


def sweep(verdict_of=lambda sigma, image: "not rebuilt") -> list[dict]:
    return [record(2 * j + image, s, image, verdict_of(s, image)) for j, s in enumerate(SIGMAS) for image in (0, 1)]


def write_sweep(folder: Path, records: list[dict]) -> None:
    (folder / "points").mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps({"strength": "sigma"}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for r in records:
        x = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(r["index"]))
        torch.save({"recon": x, "truth": x}, folder / "points" / f"{r['key']}.pt")



# --- summary.csv: an epsilon without a bound is inf ------------------------------------------------------------

def test_summary_csv_writes_an_unbounded_epsilon_as_inf_and_a_missing_one_empty(tmp_path):
    records = sweep()
    unclipped = record(6, 0.5, 0, epsilon=None, epsilon_paper=None)  # noise with nothing bounding it: delta is set
    undefended = record(7, 0.7, 0)
    for key in ("epsilon", "delta", "epsilon_paper", "privacy_note"):  # stored without a privacy report
        undefended["metrics"].pop(key)
    rows = summarize([*records, unclipped, undefended])
    by = {r["sigma"]: r for r in rows}
    assert by[0.0]["epsilon_mean"] == math.inf and by[0.0]["epsilon_std"] is None
    assert by[0.0]["epsilon_paper_mean"] == math.inf
    assert by[0.5]["epsilon_mean"] == math.inf and by[0.5]["epsilon_paper_mean"] == math.inf
    assert by[1.0]["epsilon_mean"] == pytest.approx(8.0) and by[1.0]["epsilon_std"] == 0.0
    assert by[0.7]["epsilon_mean"] is None  # not recorded: left empty, not inf
    write_csv(tmp_path / "summary.csv", rows)
    with open(tmp_path / "summary.csv", newline="") as fh:
        cells = {row["sigma"]: row for row in csv.DictReader(fh)}
    assert cells["0.0"]["epsilon_mean"] == "inf" and cells["0.0"]["epsilon_std"] == ""
    assert cells["0.7"]["epsilon_mean"] == "" and float(cells["1.0"]["epsilon_mean"]) == pytest.approx(8.0)
    # the report reads it back: inf as a number, the missing cell as None
    stored = {r["sigma"]: r for r in stored_summary(tmp_path)}
    assert stored[0.0]["epsilon_mean"] == math.inf and stored[0.7]["epsilon_mean"] is None


# --- the summary line ------------------------------------------------------------------------------------------

def test_the_summary_line_counts_the_points_rebuilt_and_names_the_baseline(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.figures, "sweep_figures", lambda out, records, notes=None: [])
    write_sweep(tmp_path, sweep())
    res = runner.finalize(tmp_path)
    assert (res["points"], res["judged"], res["rebuilt"]) == (6, 6, 0)
    assert best_text(res["rows"]) == "best mean PSNR 6.50 dB (baseline 13.80 dB)"
    assert verdicts_text(res) == [f"0 of 6 points rebuilt: {FAILURE_NOT_PRIVACY}"]
    assert "not evidence of privacy" in FAILURE_NOT_PRIVACY


def test_the_summary_line_says_nothing_of_failure_when_every_point_was_rebuilt():
    assert verdicts_text({"points": 6, "judged": 6, "rebuilt": 6}) == ["6 of 6 points rebuilt"]
    some = verdicts_text({"points": 6, "judged": 4, "rebuilt": 1})
    assert some == [f"1 of 4 points rebuilt (2 stored without a verdict): {FAILURE_NOT_PRIVACY}"]
    assert verdicts_text({"points": 6, "judged": 0, "rebuilt": 0}) == []  # stored before verdicts existed
    assert best_text([{"psnr_mean": 20.0}]) == "best mean PSNR 20.00 dB"  # no baseline recorded
    assert best_text([]) == "best mean PSNR n/a"


# --- the figures -----------------------------------------------------------------------------------------------

def _hollow(ax) -> list:
    return [ln for ln in ax.get_lines() if ln.get_label() == "_none"]


def test_metrics_vs_strength_draws_points_not_rebuilt_hollow_and_counts_them(tmp_path, drawn):
    records = sweep(lambda s, image: "rebuilt" if s == 0 or (s == 1e-2 and image == 0) else "not rebuilt")
    sweep_figures_module.metrics_vs_strength(tmp_path, records, "sigma")
    fig = drawn["metrics_vs_strength"]
    psnr_ax = fig.axes[0]
    (hollow,) = _hollow(psnr_ax)
    assert list(hollow.get_xdata()) == [1.0] and hollow.get_markerfacecolor() == "white"
    (half,) = [ln for ln in psnr_ax.get_lines() if ln.get_label() == "_some"]
    assert list(half.get_xdata()) == [1e-2] and half.get_fillstyle() == "left"
    legend = [t.get_text() for t in fig.legends[0].texts] if fig.legends else \
        [t.get_text() for t in psnr_ax.get_legend().texts]
    assert sweep_figures_module.NOT_REBUILT_LABEL in legend and sweep_figures_module.SOME_REBUILT_LABEL in legend
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "3 of 6 points rebuilt; not rebuilt is a failure of the attack" in title


def test_a_batch_point_is_marked_by_its_images_on_their_own(tmp_path, drawn):
    """Batches of two: rebuilt on the means with one image not (half filled), rebuilt on the means with no image on
    its own (hollow), both images rebuilt (filled)."""
    each = {0.0: ["rebuilt", "rebuilt"], 1e-2: ["rebuilt", "not rebuilt"], 1.0: ["not rebuilt", "not rebuilt"]}
    records = [record(j, s, 0, "rebuilt", verdict_each=each[s]) for j, s in enumerate(each)]
    assert sweep_figures_module._verdict_state(records[1:2]) == "some"
    sweep_figures_module.metrics_vs_strength(tmp_path, records, "sigma")
    psnr_ax = drawn["metrics_vs_strength"].axes[0]
    (hollow,) = _hollow(psnr_ax)
    (half,) = [ln for ln in psnr_ax.get_lines() if ln.get_label() == "_some"]
    assert list(hollow.get_xdata()) == [1.0] and list(half.get_xdata()) == [1e-2]
    older = [record(j, s, 0, "rebuilt") for j, s in enumerate(each)]  # no per-image verdicts: the point's own
    assert all(sweep_figures_module._verdict_state([r]) is None for r in older)
    title = drawn["metrics_vs_strength"]._suptitle.get_text().replace("\n", " ")
    assert "3 of 3 points rebuilt (3 of 6 images rebuilt on their own)" in title
    res = finalize_like(records)
    assert res["images"] == (3, 6)
    assert verdicts_text(res) == ["3 of 3 points rebuilt (3 of 6 images rebuilt on their own)"]
    assert finalize_like(older)["images"] is None and verdicts_text(finalize_like(older)) == ["3 of 3 points rebuilt"]


def test_the_report_headline_of_a_sweep_of_batches_counts_their_images():
    """Every point rebuilt on its means, half of the images on their own: the headline and the tag say so, and the
    tag is mixed, not rebuilt."""
    from leakattack.figures.report.sweep_section import _sweep_headline

    each = {0.0: ["rebuilt", "rebuilt"], 1e-2: ["rebuilt", "not rebuilt"], 1.0: ["not rebuilt", "not rebuilt"]}
    records = [record(j, s, 0, "rebuilt", verdict_each=each[s]) for j, s in enumerate(each)]
    tag, cls, sentence = _sweep_headline(records)
    assert tag == "rebuilt (3 of 6 images)" and cls == "mixed"
    assert sentence == "Rebuilt at every judged point (3 of 3 judged; 3 of 6 images rebuilt on their own)."
    # some points rebuilt: the tag counts points and images in words, not as two bare fractions
    failed = record(3, 2.0, 0, "not rebuilt", verdict_each=["not rebuilt", "not rebuilt"])
    tag, cls, sentence = _sweep_headline(records + [failed])
    assert tag == "rebuilt at 3 of 4 points (3 of 8 images)" and cls == "mixed"
    assert sentence.startswith("Rebuilt at 3 of 4 judged points; not rebuilt at 1 at this budget (a failure of this "
                               "attack, not evidence of privacy; 3 of 8 images rebuilt on their own).")
    # nothing rebuilt, neither a point nor an image: no count of images that says nothing more, no doubled brackets
    tag, cls, sentence = _sweep_headline([failed, {**failed, "key": "other"}])
    assert (tag, cls) == ("not rebuilt", "failed") and "images" not in sentence and ") (" not in sentence
    tag, cls, sentence = _sweep_headline([record(0, 0.0, 0, "rebuilt", verdict_each=["rebuilt", "rebuilt"])])
    assert (tag, cls) == ("rebuilt", "rebuilt") and "images" not in sentence


def finalize_like(records: list[dict]) -> dict:
    """The counts :func:`leakattack.sweep.finalize` returns, from the records alone."""
    verdicts = [r["metrics"]["verdict"] for r in records]
    return {"points": len(records), "judged": len(verdicts), "rebuilt": verdicts.count("rebuilt"),
            "images": batch_images(r["metrics"] for r in records)}


def test_a_sweep_whose_points_all_were_rebuilt_or_have_no_verdict_marks_none(tmp_path, drawn):
    sweep_figures_module.metrics_vs_strength(tmp_path, sweep(lambda s, image: "rebuilt"), "sigma")
    fig = drawn.pop("metrics_vs_strength")
    assert not _hollow(fig.axes[0]) and "6 of 6 points rebuilt" in fig._suptitle.get_text()
    assert "failure" not in fig._suptitle.get_text()
    sweep_figures_module.metrics_vs_strength(tmp_path, sweep(lambda s, image: None), "sigma")
    fig = drawn["metrics_vs_strength"]
    assert not _hollow(fig.axes[0]) and "rebuilt" not in fig._suptitle.get_text()
    legend = fig.axes[0].get_legend()
    assert legend is None or sweep_figures_module.NOT_REBUILT_LABEL not in [t.get_text() for t in legend.texts]


def test_the_reconstruction_grid_says_each_cells_verdict(tmp_path, drawn):
    records = sweep(lambda s, image: "rebuilt" if s == 0 else "not rebuilt")
    write_sweep(tmp_path, records)
    sweep_figures_module.reconstruction_grid(tmp_path, records, "sigma")
    fig = drawn["reconstruction_grid"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["image 0", "image 1"]
    assert titles[2:4] == ["7.0 dB, SSIM 0.10\nrebuilt", "6.0 dB, SSIM 0.10\nrebuilt"]
    assert titles[4] == "7.0 dB, SSIM 0.10\nnot rebuilt" and sum(t.endswith("\nnot rebuilt") for t in titles) == 4
    framed = [ax for ax in fig.axes if ax.spines["top"].get_linestyle() == "--"]
    assert len(framed) == 4  # the cells not rebuilt, framed dashed
    assert "2 of 6 points rebuilt" in fig._suptitle.get_text().replace("\n", " ")
    assert sweep_figures_module.cell_label({"psnr": None, "ssim": 0.5}) == "n/a, SSIM 0.50"  # no verdict: no line
    # a cell whose PSNR is short while its SSIM is clearly above the baseline says so: the digit may show
    visible = {"psnr": 13.7, "ssim": 0.59, "baseline_psnr": 13.9, "baseline_ssim": 0.28, "verdict": "not rebuilt"}
    assert sweep_figures_module.cell_label(visible) == "13.7 dB, SSIM 0.59\nnot rebuilt (PSNR); SSIM +0.31"
    blurred = {**visible, "psnr": 16.2, "ssim": 0.30}
    assert sweep_figures_module.cell_label(blurred) == "16.2 dB, SSIM 0.30\nnot rebuilt (SSIM); PSNR +2.3 dB"


def test_figures_redrawn_from_stored_results_count_the_points_rebuilt(tmp_path, capsys, drawn):
    from leakattack import cli

    write_sweep(tmp_path, sweep(lambda sigma, image: "rebuilt" if sigma == 0 else "not rebuilt"))
    assert cli.main(["figures", str(tmp_path)]) == 0
    assert f"| 2 of 6 points rebuilt: {FAILURE_NOT_PRIVACY}" in capsys.readouterr().out


# --- a point not rebuilt with one metric clearly ahead, and the training's epsilon ---------------------------------

def test_summary_csv_and_the_report_count_points_not_rebuilt_whose_other_metric_is_clearly_ahead(tmp_path):
    """PSNR within its margin while SSIM is 0.31 above its baseline: the digit may show, and the summary says so
    beside its verdict (the grid figure already did)."""
    from leakattack.figures.report import build_report

    records = [record(0, 1e-3, 0, psnr=13.7, ssim=0.59, baseline_psnr=13.9, baseline_ssim=0.28),
               record(1, 1e-3, 1, psnr=7.0, ssim=0.1), record(2, 1.0, 0), record(3, 1.0, 1)]
    by = {r["sigma"]: r for r in summarize(records)}
    assert by[1e-3]["rebuilt"] == 0.0 and by[1e-3]["one_metric_ahead"] == 0.5 and by[1.0]["one_metric_ahead"] == 0.0
    write_sweep(tmp_path, records)
    write_csv(tmp_path / "summary.csv", summarize(records))
    html = build_report([tmp_path])
    assert "0%<br>50% one metric ahead" in html and "parts of the image may show" in html
    assert "(PSNR); SSIM +0.31</div>" in html  # the grid cell beside its verdict


def test_summary_csv_carries_the_trainings_epsilon_beside_the_messages():
    trained = [record(i, 1.0, i, utility_acc=0.8, utility_epsilon=400.0 + i, utility_epsilon_paper=145.0)
               for i in (0, 1)]
    untrained = [record(2, 0.0, 0, utility_acc=0.85, utility_epsilon=None, utility_epsilon_paper=None)]
    by = {r["sigma"]: r for r in summarize(trained + untrained)}
    assert by[1.0]["utility_epsilon_mean"] == 400.5 and by[1.0]["epsilon_mean"] == 8.0
    assert by[0.0]["utility_epsilon_mean"] == math.inf  # no Gaussian noise: no bound for the training either


def test_points_whose_psnr_is_not_a_number_are_counted_beside_the_mean_that_leaves_them_out(tmp_path):
    """A non-finite reconstruction stores a null PSNR: the setting's mean is over the other points, and summary.csv
    says how many of its n those are; a sweep without such a point has no such column."""
    def point(image, psnr):
        return {"key": f"p{image}", "index": image, "grid": {"sketch": "srht", "image_index": image},
                "params": {"model": "lenet", "sketch": "srht"},
                "metrics": {"psnr": psnr, "ssim": 0.3, "d": 10, "b": 5}}

    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(p) + "\n" for p in
                                                  (point(0, 12.0), point(1, math.nan), point(2, 14.0))))
    from leakattack.results.store import checked_points
    rows = summarize(checked_points(folder, [json.loads(line) for line in
                                              (folder / "results.jsonl").read_text().splitlines()]))
    assert len(rows) == 1 and rows[0]["n"] == 3 and rows[0]["psnr_unscored"] == 1
    assert rows[0]["psnr_mean"] == pytest.approx(13.0)
    assert "psnr_unscored" not in summarize([point(0, 12.0), point(2, 14.0)])[0]


def test_the_report_says_what_psnr_unscored_counts(tmp_path):
    from leakattack.figures.report.sweep_section import _summary_table

    def point(image, psnr):
        return {"key": f"p{image}", "index": image, "grid": {"sketch": "srht", "image_index": image},
                "params": {"model": "lenet", "sketch": "srht"},
                "metrics": {"psnr": psnr, "ssim": 0.3, "d": 10, "b": 5}}

    html = _summary_table([point(0, 12.0), point(1, None), point(2, 14.0)], {}, None)
    assert "psnr_unscored: the repetitions whose PSNR is not a number" in html
    assert "psnr_unscored" not in _summary_table([point(0, 12.0), point(2, 14.0)], {}, None)
