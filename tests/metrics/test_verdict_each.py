"""Each image of a batch has its own verdict: a batch's verdict is taken on its means, and a mean can hide images
(two exact reconstructions of four carry the mean PSNR to about 100 dB; one of eight can stay within the margin)."""

import json
import re

import pytest
import torch

from leakattack import cli
from leakattack.attacks import AttackResult
from leakattack.cli.run import CAUSED_FAILURE_NOTE, CLOSED_FAILURE_NOTE, FAILURE_NOTE, partly_rebuilt, summary_line
from leakattack.data import get_dataset
from leakattack.metrics import RunMetrics, assess, images_words, rebuilt_images, score, verdict, verdict_each
from leakattack.metrics.matching import nearer_truths
from leakattack.rebuilt import image_scores, images_note


def _photos(n: int) -> torch.Tensor:
    return get_dataset("photos").images[:n].clone()


def test_half_a_batch_rebuilt_is_rebuilt_on_the_means_and_two_of_four_on_their_own():
    x = _photos(4)
    x0 = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
    half = x.clone()
    half[1], half[3] = x0[1], x0[3]  # images 1 and 3 never left the start
    judged = assess(AttackResult(x=half, labels=None, x0=x0, losses=[1.0, 0.5], iterations=1, best_step=1), x,
                    with_lpips=False)
    assert judged["verdict"] == "rebuilt" and judged["psnr"] > 90  # the mean of 200, ~8, 200 and ~8 dB
    assert judged["verdict_each"] == ["rebuilt", "not rebuilt", "rebuilt", "not rebuilt"]
    # each image's better baseline: the higher of its start's and the grey image's (no data set) scores of it
    start, grey = score(x0, x, with_lpips=False), score(torch.full_like(x, 0.5), x, with_lpips=False)
    for key in ("psnr", "ssim"):
        assert judged[f"baseline_{key}_each"] == [max(a, b) for a, b in zip(start[f"{key}_each"], grey[f"{key}_each"])]
    own = image_scores(judged, 1)
    assert own["verdict"] == "not rebuilt" and own["psnr"] == judged["psnr_each"][1]
    assert own["baseline_psnr"] == judged["baseline_psnr_each"][1] and own["psnr"] <= own["baseline_psnr"] + 1
    assert image_scores(judged, 4) is None and image_scores({"verdict": "rebuilt"}, 0) is None
    assert rebuilt_images(judged) == (2, 4) and images_words(judged) == "2 of 4 images"
    assert images_note(judged).startswith("on their own, images 0 and 2 of the batch (in the truth's order) are "
                                          "rebuilt, images 1 and 3 are not; the batch's verdict")


def test_one_image_rebuilt_in_a_batch_that_is_not_is_named():
    x = _photos(8)
    x0 = torch.rand(x.shape, generator=torch.Generator().manual_seed(1))
    one = x0.clone()
    one[5] = x[5] + 0.01 * (x0[5] - 0.5)  # image 5 rebuilt to about 40 dB, the others at their start
    judged = assess(AttackResult(x=one, labels=None, x0=x0, losses=[1.0, 0.5], iterations=1, best_step=1), x,
                    with_lpips=False)
    assert judged["verdict"] == "not rebuilt"
    assert judged["verdict_each"] == ["not rebuilt"] * 5 + ["rebuilt"] + ["not rebuilt"] * 2
    assert images_words(judged) == "1 of 8 images rebuilt"
    assert ("image 5 of the batch (in the truth's order) is rebuilt, images 0, 1, 2, 3, 4, 6 and 7 are not"
            in images_note(judged))
    assert judged["nearer_each"][5] is None
    # the failure note under the run speaks of the other seven: image 5 is what the message leaks
    for note in (FAILURE_NOTE, CLOSED_FAILURE_NOTE, CAUSED_FAILURE_NOTE):
        said = partly_rebuilt(note, judged)
        assert said.startswith(note[:-len("the input")]) and "rebuild the input" not in said
        assert said.endswith("rebuild the batch's other 7 images; 1 of its 8 is rebuilt on its own, which the "
                             "message leaks")
    two = dict(judged, verdict_each=["rebuilt", "not rebuilt"])
    assert partly_rebuilt(FAILURE_NOTE, two).endswith("the batch's other image; 1 of its 2 is rebuilt on its own, "
                                                      "which the message leaks")
    three = dict(judged, verdict_each=["rebuilt", "not rebuilt", "rebuilt"])
    assert partly_rebuilt(FAILURE_NOTE, three).endswith("other image; 2 of its 3 are rebuilt on their own, which the "
                                                        "message leaks")
    none = dict(judged, verdict_each=["not rebuilt"] * 8)
    assert partly_rebuilt(FAILURE_NOTE, none) == FAILURE_NOTE  # nothing rebuilt: the note as it was
    assert partly_rebuilt(FAILURE_NOTE, {"verdict": "not rebuilt"}) == FAILURE_NOTE  # no per-image verdicts


def test_a_copy_of_one_image_matched_to_another_truth_rebuilds_only_the_image_it_shows(tmp_path, capsys):
    """The imprint attack with 4 bins for 8 photos returns one blend per bin, repeated to fill the batch: the copy of
    the teacup's blend matched to the astronaut's face clears the face's baselines by PSNR and SSIM, but it is nearer
    to the teacup (image 2), so the face is not rebuilt; only the images that came back count."""
    out = tmp_path / "imp8"
    assert cli.main(["run", "--model", "lenet", "--attack", "imprint", "--sketch", "none", "--batch-size", "8",
                     "--bins", "4", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    line, err = capsys.readouterr()
    m = json.loads((out / "metrics.json").read_text())
    copies = [i for i, j in enumerate(m["nearer_each"]) if j is not None]
    assert copies and all(m["verdict_each"][i] == "not rebuilt" for i in copies)
    cleared = [i for i in copies if verdict(m["psnr_each"][i], m["ssim_each"][i], m["baseline_psnr_each"][i],
                                            m["baseline_ssim_each"][i]) == "rebuilt"]
    assert cleared  # the baselines alone would have counted it: the nearer image decides
    k = m["verdict_each"].count("rebuilt")
    assert m["verdict"] == "rebuilt" and 0 < k < 8 and f"rebuilt ({k} of 8 images) | " in line
    for i in cleared:
        assert f"the reconstruction matched to image {i} is nearer to image {m['nearer_each'][i]}" in err


def test_a_batch_rebuilt_on_its_means_with_no_image_on_its_own_says_so():
    m = {"verdict": "rebuilt", "verdict_each": ["not rebuilt", "not rebuilt"], "nearer_each": [None, None]}
    assert images_words(m) == "no image on its own"
    assert images_note(m).startswith("on their own, none of the batch's images is rebuilt; the batch's verdict")
    every = {"verdict": "not rebuilt", "verdict_each": ["rebuilt", "rebuilt"]}  # a file no run writes
    assert images_words(every) is None and images_note(every) is None


def test_the_nearer_truth_is_the_nearest_other_image_where_it_is_nearer_than_the_own():
    x = torch.stack([torch.full((1, 2, 2), v) for v in (0.0, 0.5, 1.0)])
    recon = torch.stack([torch.full((1, 2, 2), v) for v in (0.9, 0.5, 0.75)])  # nearer to 1.0; own; a tie 0.5/1.0
    assert nearer_truths(recon, x) == [2, None, None]  # a tie is not nearer
    recon[1, 0, 0, 0] = float("nan")
    assert nearer_truths(recon, x)[1] is None  # not finite: no nearer image claimed


def test_per_image_verdicts_agree_with_the_batch_where_the_images_do():
    x = _photos(2)
    x0 = torch.rand(x.shape, generator=torch.Generator().manual_seed(2))
    for recon, each in ((x.flip(0), ["rebuilt"] * 2), (x0, ["not rebuilt"] * 2)):
        judged = assess(AttackResult(x=recon, labels=None, x0=x0, losses=[1.0]), x, with_lpips=False)
        assert judged["verdict_each"] == each and images_words(judged) is None and images_note(judged) is None
    one = assess(AttackResult(x=x[:1], labels=None, x0=x0[:1], losses=[1.0, 0.0], best_step=1), x[:1],
                 with_lpips=False)
    assert one["verdict_each"] == [one["verdict"]] == ["rebuilt"] and images_words(one) is None


def test_a_non_finite_image_is_not_rebuilt_and_a_missing_baseline_is_not_compared():
    scores = {"psnr_each": [None, 30.0], "ssim_each": [None, 0.9]}
    start = {"psnr_each": [10.0, 10.0], "ssim_each": [0.1, 0.1]}
    assert verdict_each(scores, {"start": start, "mean": None}) == ["not rebuilt", "rebuilt"]
    assert verdict_each(scores, {"start": None, "mean": None}) == ["not rebuilt", "rebuilt"]
    assert verdict_each({}, {"start": start}) is None


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("batch") / "r"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--batch-size", "2", "--iterations", "1",
                     "--quiet", "--no-lpips", "--out", str(out)]) == 0
    return out


def test_a_run_writes_its_images_verdicts_and_its_line_counts_them_where_they_differ(batch_run):
    m = json.loads((batch_run / "metrics.json").read_text())
    assert m["verdict"] == "not rebuilt" and m["verdict_each"] == ["not rebuilt", "not rebuilt"]
    keys = list(m)
    at = keys.index("verdict_baseline")
    assert keys[at + 1:at + 4] == ["baseline_psnr_each", "baseline_ssim_each", "verdict_each"]
    assert all(isinstance(v, float) for v in m["baseline_psnr_each"] + m["baseline_ssim_each"])
    line = summary_line(RunMetrics.from_dict(m), batch_run)
    assert line.startswith("not rebuilt (no better than ") and "images rebuilt" not in line
    mixed = RunMetrics.from_dict({**m, "verdict_each": ["rebuilt", "not rebuilt"]})
    line = summary_line(mixed, batch_run)
    assert line.startswith("not rebuilt (no better than ") and "; 1 of 2 images rebuilt) | PSNR " in line
    rebuilt = RunMetrics.from_dict({**m, "verdict": "rebuilt", "verdict_baseline": None,
                                    "verdict_each": ["not rebuilt", "rebuilt"]})
    faint = "; faint: SSIM below 0.3" if rebuilt.ssim < 0.3 else ""
    assert summary_line(rebuilt, batch_run).startswith(f"rebuilt (1 of 2 images{faint}) | PSNR ")
    older = {k: v for k, v in m.items() if k != "verdict_each"}  # a file written before per-image verdicts
    record = RunMetrics.from_dict(older)
    assert record.verdict_each is None and "verdict_each" not in record.to_dict()
    assert summary_line(record, batch_run) == summary_line(RunMetrics.from_dict(m), batch_run)


def test_a_run_that_attacked_nothing_does_not_score_labels_on_the_images_its_start_was_matched_to(batch_run,
                                                                                                   tmp_path):
    m = json.loads((batch_run / "metrics.json").read_text())
    assert "on the matched images" not in summary_line(RunMetrics.from_dict(m), batch_run)  # no image was found
    one = RunMetrics.from_dict({**m, "verdict_each": ["rebuilt", "not rebuilt"]})  # where one is, its label counts
    assert re.search(r"\| labels \d/2 \(idlg\), \d/2 on the matched images \|", summary_line(one, batch_run))
    out = tmp_path / "idle"  # a step that overflows: the run returns its start
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--batch-size", "2", "--optimizer", "adam",
                     "--lr", "1e308", "--iterations", "2", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    idle = RunMetrics.from_dict(json.loads((out / "metrics.json").read_text()))
    assert idle.attacked is False and idle.label_acc_matched is None
    line = summary_line(idle, out)
    assert line.startswith("nothing was attacked: ") and re.search(r"\| labels \d/2 \(idlg\) \|", line)
    assert "on the matched images" not in line


def test_a_batch_whose_mean_clears_one_baseline_with_no_image_on_its_own_says_so():
    from leakattack.rebuilt import why_not_rebuilt

    m = {"verdict": "not rebuilt", "psnr": 15.44, "ssim": 0.16, "baseline_psnr": 13.64, "baseline_ssim": 0.19,
         "baseline_mean_psnr": 13.64, "baseline_mean_ssim": 0.19, "verdict_baseline": "mean",
         "verdict_each": ["not rebuilt"] * 4}
    reason, ahead = why_not_rebuilt(m)
    assert reason == "SSIM no better than the data set's mean image"
    assert ahead.startswith("the batch's mean PSNR is 1.80 dB above the better baseline's (15.44 dB against 13.64 dB),"
                            " though none of its images clears its own baselines")
    one = {**m, "verdict_each": ["not rebuilt", "rebuilt", "not rebuilt", "not rebuilt"]}
    # it told a batch that one of its images was rebuilt, then not to read "the reconstruction" as nothing rebuilt
    assert why_not_rebuilt(one)[1] == ("the batch's mean PSNR is 1.80 dB above the better baseline's (15.44 dB against "
                                       "13.64 dB), and 1 of its 4 images clears its own baselines: look at "
                                       "reconstruction.png for it")
    assert why_not_rebuilt({**m, "verdict_each": ["not rebuilt"]})[1].startswith("the reconstruction's PSNR")


def test_a_score_or_baseline_that_is_not_finite_neither_rebuilds_nor_decides():
    from leakattack.metrics import judge

    nan = float("nan")
    assert verdict(nan, nan, 10.5, 0.11) == "not rebuilt"  # a NaN score compares false with the margin
    assert verdict(float("inf"), 1.0, 10.5, 0.11) == "not rebuilt"
    assert verdict(12.0, 0.5, nan, nan) == verdict(12.0, 0.5, None, None) == "rebuilt"
    mean = {"psnr": 10.5, "ssim": 0.11, "lpips": None, "psnr_each": [10.5], "ssim_each": [0.11]}
    start = {"psnr": nan, "ssim": nan, "lpips": None, "psnr_each": [nan], "ssim_each": [nan]}
    scores = {"psnr": 10.2, "ssim": 0.12, "psnr_each": [10.2], "ssim_each": [0.12]}
    for baselines in ({"start": start, "mean": mean}, {"mean": mean, "start": start}):  # whichever comes first
        out = judge(scores, baselines)
        assert (out["baseline_psnr"], out["baseline_ssim"]) == (10.5, 0.11)
        assert out["verdict"] == "not rebuilt" and out["verdict_each"] == ["not rebuilt"]
        assert out["verdict_baseline"] == "mean"
