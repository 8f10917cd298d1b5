"""Image identifiability (Yin et al. 2021): the rank of each truth among the data set's images by pixel distance to
its reconstruction, the share of rank 1 (IIP) beside the baselines', in assess, a run's metrics.json, its notes and
its report."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import targets
from leakattack import cli
from leakattack.attacks import Attack, AttackResult, register_attack
from leakattack.data import get_dataset
from leakattack.metrics import assess, identification, identified_line
from leakattack.metrics.identify import IDENTIFY_SAMPLE, candidates, feature_identification, features
from leakattack.results import summarize


def _result(x_hat, x0):
    return AttackResult(x=x_hat, labels=None, x0=x0, losses=[1.0, 0.5], iterations=1, best_step=1)


def test_a_reconstruction_equal_to_its_truth_has_rank_1_and_one_equal_to_another_image_does_not():
    photos = get_dataset("photos")
    x = photos.images[[3, 7]].clone()
    other = photos.images[[20, 7]].clone()  # the first is another photo of the set, the second the truth itself
    found = identification(other, {"start": None, "mean": x.mean(0, keepdim=True).expand_as(x)}, x, photos, [3, 7])
    assert found["identified_among"] == len(photos)
    assert found["identified_each"][1] == 1 and found["identified_each"][0] > 1  # photo 20 is nearest to itself
    assert found["iip"] == 0.5 and found["baseline_start_iip"] is None


def test_the_truths_are_found_by_their_pixels_without_positions_and_a_set_without_them_measures_nothing():
    photos, digits = get_dataset("photos"), get_dataset("digits")
    x = photos.images[[5]].clone()
    assert identification(x.clone(), {}, x, photos)["identified_each"] == [1]
    assert identification(x.clone(), {}, x, photos, [6]) == {}  # the image at position 6 is not the truth
    noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
    assert identification(x.clone(), {}, noise, photos) == {}  # no image of the set is that truth
    assert identification(x.clone(), {}, x, digits) == {}  # images of another shape


def test_a_reconstruction_that_is_not_a_number_ranks_nothing():
    photos = get_dataset("photos")
    x = photos.images[[0]].clone()
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")
    judged = assess(_result(bad, torch.rand(x.shape)), x, dataset=photos, with_lpips=False)
    assert judged["identified_each"] == [None] and judged["iip"] is None


def test_a_large_set_compares_an_evenly_spaced_sample_with_the_truths_always_in_it():
    pool = candidates(10 * IDENTIFY_SAMPLE, [5, 12345])
    assert IDENTIFY_SAMPLE <= pool.numel() <= IDENTIFY_SAMPLE + 2
    assert {5, 12345} <= set(pool.tolist())
    assert candidates(40, [3]).tolist() == list(range(40))


def test_without_positions_a_large_set_finds_its_truths_before_sampling_its_candidates():
    """A set of more than IDENTIFY_SAMPLE images compares an evenly spaced sample of them; without the truths'
    positions (assess, from Python) the truths are found by their pixels in the whole set first and added to it (the
    sample alone missed truths that fell between its images, and IIP was left out or counted fewer truths)."""
    from leakattack.data.base import ImageSet

    gen = torch.Generator().manual_seed(0)
    images = torch.rand(IDENTIFY_SAMPLE + 976, 1, 8, 8, generator=gen)
    big = ImageSet("big", images, torch.zeros(images.shape[0], dtype=torch.long), 10, [str(c) for c in range(10)],
                   "random")
    spaced = set(candidates(len(big), None).tolist())
    truths = [i for i in range(1, 40) if i not in spaced][:3]
    assert len(truths) == 3
    x = images[truths].clone()
    found = identification(x.clone(), {}, x, big)
    assert found["identified_each"] == [1, 1, 1] and found["iip"] == 1.0
    assert found["identified_among"] == IDENTIFY_SAMPLE + 3


def test_assess_ranks_the_baselines_beside_the_reconstruction():
    photos = get_dataset("photos")
    x = photos.images[[0, 1, 2, 3]].clone()
    x0 = torch.rand(x.shape, generator=torch.Generator().manual_seed(1))
    judged = assess(_result(x.flip(0), x0), x, dataset=photos, with_lpips=False)  # matched back to their truths
    assert judged["identified_each"] == [1, 1, 1, 1] and judged["iip"] == 1.0
    assert judged["baseline_start_iip"] < 1.0 and judged["baseline_mean_iip"] < 1.0
    assert "identified_each" not in assess(_result(x.clone(), x0), x, with_lpips=False)  # no data set: not measured


def test_the_note_names_a_reconstruction_that_identifies_more_images_than_the_baselines():
    m = {"iip": 0.5, "identified_each": [1, 7], "identified_among": 50, "baseline_start_iip": 0.0,
         "baseline_mean_iip": 0.0}
    line = identified_line(m)
    assert line is not None and ("by pixel distance, the truth is its nearest of 50 images of the data set for 1 of "
                                 "2, where the baselines' best is 0%") in line
    assert "features" not in line
    assert identified_line({**m, "baseline_mean_iip": 0.5}) is None  # no more than the mean image does
    assert identified_line({**m, "iip": 0.0, "identified_each": [3, 7]}) is None
    assert identified_line({}) is None  # a run written before the keys existed
    by_features = {**m, "iip": 0.0, "identified_each": [3, 7], "iip_features": 1.0, "identified_features_each": [1, 1],
                   "identified_features_among": 50, "baseline_start_iip_features": 0.5}
    line = identified_line(by_features)
    assert line is not None and ("by the victim's features, the truth is its nearest of 50 images of the data set "
                                 "for 2 of 2, where the baselines' best is 50%") in line
    assert "pixel" not in line


def test_a_run_records_identifiability_and_its_report_states_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--sketch", "srht", "--iterations", "1", "--refine", "none",
                     "--no-lpips", "--quiet", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["identified_among"] == 50 and len(m["identified_each"]) == 1 and 1 <= m["identified_each"][0] <= 50
    assert {"iip", "baseline_start_iip", "baseline_mean_iip"} <= m.keys()
    assert cli.main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0
    text = (tmp_path / "report.html").read_text()
    assert "Identifiability (Yin et al. 2021)" in text and "by the victim&#x27;s features among 50 images" in text
    assert f"the truth&#x27;s rank: {m['identified_each'][0]}" in text
    assert m["identified_features_among"] == 50 and {"iip_features", "baseline_mean_iip_features"} <= m.keys()
    assert "<th>rank of its truth among 50 by pixels</th><th>rank of its truth among 50 by features</th>" in text


class Noisy(Attack):
    """Returns photo 0 of the embedded photos under Gaussian noise of standard deviation 0.5 (seeded): an image
    below the mean image's PSNR that is still nearer to its photograph than to any other of the set."""

    name = "noisy"

    def __init__(self, **settings):  # gradient matching's settings, which the run passes an optimising attack
        self.settings = settings

    def reconstruct(self, obs, *, monitor=None, monitor_every=10, progress=False):
        g = torch.Generator().manual_seed(0)
        truth = get_dataset("photos").images[:1].to(torch.float64)
        x = truth + 0.5 * torch.randn(truth.shape, generator=g, dtype=torch.float64)
        x0 = torch.rand(truth.shape, generator=g, dtype=torch.float64)
        return AttackResult(x=x, labels=None, x0=x0, losses=[1.0, 0.5], iterations=1, best_step=1)


def test_a_run_not_rebuilt_that_singles_its_photo_out_says_so(fresh_registries, tmp_path, capsys):
    register_attack("noisy", Noisy)
    out = tmp_path / "run"
    assert cli.main(["run", "--attack", "noisy", "--model", "lenet", "--sketch", "none", "--no-lpips", "--quiet",
                     "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["verdict"] == "not rebuilt" and 8.5 < m["psnr"] < 9.8 < m["baseline_psnr"]  # 9.18 dB against 10.54
    assert m["identified_each"] == [1] and m["iip"] == 1.0 and m["baseline_mean_iip"] == 0.0
    err = capsys.readouterr().err
    assert ("note: the reconstruction identifies images: by pixel distance, the truth is its nearest of 50 images of "
            "the data set for 1 of 1") in err
    assert cli.main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0
    text = (tmp_path / "report.html").read_text()
    assert "The reconstruction identifies images: by pixel distance, the truth is its nearest" in text  # headline


def test_a_sweeps_summary_averages_iip_over_a_settings_points():
    def point(image, share):
        return {"key": f"p{image}", "index": image, "grid": {"sketch": "srht", "image_index": image},
                "params": {"model": "lenet", "sketch": "srht"},
                "metrics": {"psnr": 12.0, "ssim": 0.3, "d": 10, "b": 5, "iip": share}}

    rows = summarize([point(0, 1.0), point(1, 0.0), point(2, 1.0)])
    assert len(rows) == 1 and rows[0]["iip_mean"] == pytest.approx(2 / 3) and rows[0]["n"] == 3
    assert "iip_mean" not in summarize([{**point(0, 1.0), "metrics": {"psnr": 12.0, "d": 10, "b": 5}}])[0]


def test_the_feature_score_ranks_by_the_victims_head_inputs_and_leaves_the_model_as_it_was():
    photos = get_dataset("photos")
    victim = targets.get_model("resnet20", num_classes=10, in_shape=photos.in_shape, seed=0)
    victim.model.train()
    bn = [m for m in victim.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    bn[0].eval()  # modes mixed as --bn eval leaves them: each is given back as it was
    modes = [m.training for m in victim.model.modules()]
    before = {k: v.clone() for k, v in victim.model.state_dict().items()}
    x = photos.images[[2, 4]].clone()
    found = feature_identification(victim, x.clone(), {"start": None, "mean": None}, x, photos, [2, 4])
    assert found["identified_features_each"] == [1, 1] and found["iip_features"] == 1.0
    assert found["identified_features_among"] == 50 and found["baseline_start_iip_features"] is None
    assert [m.training for m in victim.model.modules()] == modes  # the modes given back, the statistics untouched
    assert all(torch.equal(before[k], v) for k, v in victim.model.state_dict().items())
    feats = features(victim, x)
    assert feats is not None and feats.shape == (2, victim.head.in_features)
    headless = targets.get_model("linreg", num_classes=1, in_shape=photos.in_shape, seed=0)
    assert headless.head is None  # a regression has no classifier head to read features at
    assert feature_identification(headless, x, {}, x, photos, [2, 4]) == {} and features(headless, x) is None


def test_the_reports_sweep_table_names_the_identified_shares(tmp_path):
    sweep = Path(__file__).parents[2] / "results" / "sweeps" / "defense_sweep"  # the reference, which records them
    assert cli.main(["report", str(sweep), "--out", str(tmp_path / "r.html")]) == 0
    text = (tmp_path / "r.html").read_text()
    assert "identified (IIP, pixels)" in text and "identified (IIP, features)" in text
    # the dlg points: one at sigma 1e-2, five at 3e-2, two at 0.1; the ig points: four at 0.1
    assert "12 of the 18 not rebuilt still single out images" in text


def test_the_sweep_line_counts_the_points_not_rebuilt_that_still_single_out_images(tmp_path, capsys):
    sweep = Path(__file__).parents[2] / "results" / "sweeps" / "defense_sweep"
    copy = tmp_path / "defense_sweep"
    shutil.copytree(sweep, copy)
    assert cli.main(["figures", str(copy)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.endswith("66 of 84 points rebuilt: a point not rebuilt is a failure of the attack at its budget, not "
                         "evidence of privacy | 12 of the 18 not rebuilt still single out images "
                         "(image identifiability)")


def test_the_reports_identifiability_sentence_never_rounds_a_baseline_share_up_to_all():
    from leakattack.figures.report.run_section import _identifiability

    m = {"iip": 0.5, "identified_each": [1, 3], "identified_among": 1000, "baseline_start_iip": 0.999,
         "baseline_mean_iip": 0.125}
    text = _identifiability(m)  # type: ignore[arg-type]
    assert "baselines: the start 99.9%, the mean image 12.5%" in text and "among 1,000 images" in text, text
