"""Tests for leakattack.metrics: PSNR/SSIM against references, matching, LPIPS wiring, score."""

import math
import re

import numpy as np
import pytest
import torch
from skimage import data as skdata
from skimage.metrics import structural_similarity
from skimage.transform import resize

from leakattack import metrics
from leakattack.errors import UserError
from leakattack.metrics import (
    MetricsError,
    label_accuracy,
    label_overlap,
    lpips_distance,
    match,
    mse,
    psnr,
    score,
    ssim,
)
from leakattack.metrics import lpips as lpips_metric
from leakattack.metrics.image import gaussian_window


def _real_images(size, channels):
    """Two real photographs (B=2) resized to size x size, as (2, C, H, W) float64 in [0, 1]."""
    if channels == 3:
        srcs = [skdata.astronaut(), skdata.coffee()]
    else:
        srcs = [skdata.camera(), skdata.coins()]
    out = []
    for img in srcs:
        img = np.asarray(img, dtype=np.float64) / 255.0
        side = min(img.shape[:2])
        img = img[:side, :side]
        img = resize(img, (size, size), anti_aliasing=True)
        out.append(img if img.ndim == 3 else img[:, :, None])
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()


def _noisy(x, level, seed):
    """x plus Gaussian noise of std ``level``, clipped to [0, 1] (fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    return (x + level * torch.randn(x.shape, generator=g, dtype=x.dtype)).clamp(0, 1)


def test_mse_and_psnr_of_known_constant_offset():
    """An offset of 0.1 everywhere gives mse 0.01 and PSNR 20 dB (tolerance 1e-5)."""
    x = torch.full((2, 3, 8, 8), 0.5)
    y = x + 0.1
    assert mse(y, x).shape == (2,)
    torch.testing.assert_close(mse(y, x), torch.full((2,), 0.01), atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(psnr(y, x), torch.full((2,), 20.0), atol=1e-4, rtol=0)
    # data_range 255 on the same mse: 10 log10(255^2 / 0.01)
    torch.testing.assert_close(psnr(y, x, data_range=255.0),
                               torch.full((2,), 10 * math.log10(255.0 ** 2 / 0.01)), atol=1e-3, rtol=0)


def test_psnr_of_identical_images_is_finite_200db():
    """mse is clamped at 1e-20, so identical images give 200 dB, not inf."""
    x = torch.rand(2, 1, 12, 12, generator=torch.Generator().manual_seed(0))
    p = psnr(x, x.clone())
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.full((2,), 200.0, dtype=p.dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_psnr_of_half_precision_images_is_scored_in_float32(dtype):
    """float16 gave inf for identical images (its floor 1e-20 is 0 there) and above 48 dB (1 / mse overflows), which
    the score then stored as null and judged not rebuilt; the differences are squared in float32 now."""
    x = torch.rand(2, 1, 12, 12, generator=torch.Generator().manual_seed(0))
    same = psnr(x.to(dtype), x.to(dtype))
    torch.testing.assert_close(same, torch.full((2,), 200.0))
    close = psnr((x + 1e-3).to(dtype), x.to(dtype))
    assert torch.isfinite(close).all() and (close > 50).all(), close


@pytest.mark.parametrize("size", [32, 28])
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("level", [0.02, 0.1, 0.3])
def test_ssim_matches_skimage(size, channels, level):
    """Per-image SSIM equals skimage's Gaussian SSIM (sigma 1.5, population covariance) within 1e-3."""
    x = _real_images(size, channels)
    y = _noisy(x, level, seed=int(level * 1000) + size + channels)
    ours = ssim(y.float(), x.float())
    assert ours.shape == (2,)
    for i in range(2):
        ref = structural_similarity(
            y[i].permute(1, 2, 0).numpy(), x[i].permute(1, 2, 0).numpy(),
            gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
            data_range=1, channel_axis=2)
        assert abs(float(ours[i]) - ref) < 1e-3, (float(ours[i]), ref)
    # in float64 the two computations agree to rounding error
    torch.testing.assert_close(ssim(y, x)[1], torch.tensor(ref, dtype=torch.float64), atol=1e-9, rtol=0)


def test_ssim_window_is_scipy_gaussian_filter_impulse_response():
    """The 11-tap window equals scipy.ndimage.gaussian_filter1d (sigma 1.5, truncate 3.5) of a unit impulse, to
    1e-12."""
    from scipy.ndimage import gaussian_filter1d

    impulse = np.zeros(11)
    impulse[5] = 1.0
    ref = gaussian_filter1d(impulse, 1.5, truncate=3.5, mode="constant")
    g = gaussian_window(torch.float64, "cpu")
    assert g.shape == (11,) and float(g.sum()) == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(g.numpy(), ref, atol=1e-12, rtol=0)


def test_ssim_of_identical_images_is_one():
    """SSIM(x, x) = 1 for real images (tolerance 1e-6)."""
    x = _real_images(32, 3).float()
    torch.testing.assert_close(ssim(x, x.clone()), torch.ones(2), atol=1e-6, rtol=0)


def test_ssim_of_near_identical_float32_images_is_at_most_one():
    """Photographs 1e-7 to 1e-5 apart in float32 scored above 1 when the statistics were float32 (the variances'
    E[a^2] - mu^2 cancel); SSIM cannot exceed 1, and the score keeps the images' float32."""
    x = _real_images(32, 3).float()
    g = torch.Generator().manual_seed(0)
    for eps in (1e-7, 1e-6, 1e-5):
        s = ssim(x + eps * torch.randn(x.shape, generator=g), x)
        assert s.dtype == torch.float32 and bool((s <= 1).all()) and bool((s > 0.999).all()), (eps, s)
    assert ssim(x.half(), x).dtype == torch.float32 and bool((ssim(x.half(), x) <= 1).all())


def test_ssim_is_differentiable():
    """Gradients flow through SSIM to the reconstruction."""
    x = _real_images(28, 1).float()
    y = _noisy(x, 0.1, seed=3).requires_grad_(True)
    ssim(y, x).sum().backward()
    assert y.grad is not None and torch.isfinite(y.grad).all() and y.grad.abs().sum() > 0


def test_ssim_rejects_images_smaller_than_window():
    """Images under 11x11 raise MetricsError (a ValueError)."""
    x = torch.rand(1, 1, 8, 8)
    with pytest.raises(ValueError, match="at least 11x11"):
        ssim(x, x)


def test_mismatched_shapes_raise_metrics_error():
    """Shape mismatch is a user error: MetricsError, a UserError."""
    with pytest.raises(MetricsError) as info:
        mse(torch.rand(2, 3, 8, 8), torch.rand(1, 3, 8, 8))
    assert isinstance(info.value, UserError)


def test_hungarian_matching_recovers_shuffled_batch():
    """match() returns the inverse shuffle, and score of a shuffled batch equals score of the aligned one."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 3, 16, 16, generator=g)
    x_hat = (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)
    shuffle = torch.tensor([3, 0, 5, 1, 4, 2])
    shuffled = x_hat[shuffle]
    perm = match(shuffled, x)
    assert torch.equal(shuffled[perm], x_hat)
    aligned = score(x_hat, x, with_lpips=False)
    mixed = score(shuffled, x, with_lpips=False)
    assert aligned["match"] == list(range(6))
    for key in ("mse", "psnr", "ssim"):
        assert mixed[key] == pytest.approx(aligned[key], abs=1e-9)
    assert mixed["psnr_each"] == pytest.approx(aligned["psnr_each"], abs=1e-9)


def test_label_accuracy_counts_equal_positions():
    """3 of 4 equal labels -> 0.75."""
    assert label_accuracy(torch.tensor([1, 2, 3, 4]), [1, 2, 3, 0]) == 0.75
    assert label_accuracy([0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 9, 9]) == 5 / 7  # exact, as metrics.json stores it


def test_label_accuracy_is_computed_under_the_image_matching():
    """Labels are permuted with the images, so a consistently shuffled batch scores 1.0."""
    g = torch.Generator().manual_seed(2)
    x = torch.rand(4, 1, 12, 12, generator=g)
    y = torch.tensor([7, 1, 4, 9])
    shuffle = torch.tensor([2, 0, 3, 1])
    res = score(x[shuffle], x, labels_hat=y[shuffle], labels=y, with_lpips=False)
    assert res["label_acc_matched"] == 1.0 and res["label_acc"] == 1.0
    res_bad = score(x[shuffle], x, labels_hat=y, labels=y, with_lpips=False)
    assert res_bad["label_acc_matched"] == 0.0
    assert res_bad["label_acc"] == 1.0  # the right labels, on the wrong images: recovered as a multiset


def test_ties_of_the_matching_go_the_labels_way():
    """Two true images that are the same image, with different labels: whichever reconstruction stands for which
    leaves every image score as it is, so the labels settle it (label_acc_matched 1, not 0 by the tie's order).
    Identical reconstructions matched to different truths are settled the same way; per-image scores follow."""
    g = torch.Generator().manual_seed(3)
    a, c = torch.rand(2, 1, 1, 12, 12, generator=g)
    x = torch.cat([a, a, c])
    y = torch.tensor([4, 6, 1])
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0], [2, 0, 1]):
        o = torch.tensor(order)
        res = score(x[o], x, labels_hat=y[o], labels=y, with_lpips=False)
        assert res["label_acc_matched"] == 1.0, order
        assert [y[o][i] for i in res["match"]] == y.tolist(), order
    xh = torch.cat([c, a, a])  # the same reconstruction twice: one for each copy of the truth, labels either way
    res = score(xh, x, labels_hat=torch.tensor([1, 6, 4]), labels=y, with_lpips=False)
    assert res["label_acc_matched"] == 1.0 and res["match"] == [2, 1, 0]
    assert res["psnr_each"][2] == float("inf") or res["psnr_each"][2] > 100
    fixed = score(x, x, labels_hat=torch.tensor([9, 9, 9]), labels=y, with_lpips=False)
    assert fixed["label_acc_matched"] == 0.0 and fixed["match"] == [0, 1, 2]  # no label agrees: the order stays


def test_label_overlap_counts_a_multiset():
    """Repeated labels count as often as they occur in both lists; order does not matter."""
    assert label_overlap([3, 3, 1, 0], [0, 3, 1, 1]) == 0.75
    assert label_overlap([2, 2, 2, 2], [2, 0, 0, 0]) == 0.25
    assert label_overlap([5], [5]) == 1.0
    with pytest.raises(MetricsError):
        label_overlap([1, 2], [1])


def test_score_is_json_ready():
    """All values are plain floats/lists/str/None; label_acc None without predicted labels."""
    import json

    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    res = score(x, x.clone(), with_lpips=False)
    json.dumps(res, allow_nan=False)
    assert res["label_acc"] is None and res["lpips"] is None
    assert len(res["psnr_each"]) == 3 and len(res["ssim_each"]) == 3
    assert res["ssim"] == pytest.approx(1.0, abs=1e-6)


@pytest.fixture(scope="module")
def random_lpips():
    """The real lpips code path with a randomly initialised AlexNet backbone (seed 0)."""
    torch.manual_seed(0)
    return metrics.lpips_module(pnet_rand=True)


def test_lpips_wiring_identical_zero_and_grows_with_noise(random_lpips):
    """LPIPS wiring with a RANDOM AlexNet backbone, because the ImageNet weights cannot be
    downloaded here: this tests the plumbing (shape, zero for identical images, growth
    with noise), not the published LPIPS values."""
    x = _real_images(32, 3).float()
    with torch.no_grad():
        same = lpips_metric._lpips_with(random_lpips, x, x.clone())
        d = [lpips_metric._lpips_with(random_lpips, _noisy(x, lv, seed=5), x) for lv in (0.05, 0.15, 0.4)]
    assert same.shape == (2,)
    assert same.abs().max() <= 1e-6
    for lo, hi in zip(d, d[1:]):
        assert (hi > lo).all(), (lo, hi)


def test_lpips_wiring_accepts_28x28_greyscale(random_lpips):
    """1x28x28 images (random backbone, as above) are repeated to RGB and upsampled; shape (B,)."""
    x = _real_images(28, 1).float()
    with torch.no_grad():
        same = lpips_metric._lpips_with(random_lpips, x, x.clone())
        noisy = lpips_metric._lpips_with(random_lpips, _noisy(x, 0.2, seed=6), x)
    assert same.shape == (2,) and noisy.shape == (2,)
    assert same.abs().max() <= 1e-6 and (noisy > 0).all()


def test_lpips_without_cached_weights_returns_none_and_path(monkeypatch, tmp_path):
    """With an empty torch hub dir, lpips_distance returns (None, note naming the missing file) and downloads
    nothing."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    val, note = lpips_distance(x, x)
    assert val is None
    expected = str(tmp_path / "checkpoints" / "alexnet-owt-7be5be79.pth")
    assert expected in note and "LPIPS not computed" in note
    assert list(tmp_path.iterdir()) == []
    res = score(x, x, device="cpu")
    assert res["lpips"] is None and expected in res["lpips_note"]


def test_lpips_distance_uses_cached_backbone_file_without_download(monkeypatch, tmp_path):
    """With a (randomly initialised, seed 0) AlexNet state dict placed at the cache path, the
    pretrained code path loads it offline and returns values of shape (B,) with an empty note."""
    import torchvision

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(lpips_metric, "_LPIPS_CACHE", {})  # keep the fake backbone out of the real cache
    torch.manual_seed(0)
    (tmp_path / "checkpoints").mkdir()
    torch.save(torchvision.models.alexnet().state_dict(), metrics.alexnet_weights_path())
    x = _real_images(28, 1).float()
    val, note = lpips_distance(_noisy(x, 0.2, seed=8), x)
    assert note == "" and val.shape == (2,) and (val > 0).all()
    same, _ = lpips_distance(x, x.clone())
    assert same.abs().max() <= 1e-6
    assert list(lpips_metric._LPIPS_CACHE) == ["cpu"]
    res = score(_noisy(x, 0.2, seed=8), x)
    assert res["lpips_note"] == "" and res["lpips"] == pytest.approx(float(val.mean()), abs=1e-6)


def test_alexnet_weights_filename_matches_torchvision():
    """The checked file name is the basename of torchvision's AlexNet_Weights.IMAGENET1K_V1 url."""
    from torchvision.models import AlexNet_Weights

    assert metrics.ALEXNET_WEIGHTS_FILE == AlexNet_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[-1]


# --- the verdict against the baselines, the mean image, the Jacobian's rank ---------------------------------------

from leakattack import rebuilt as rebuilt_module  # noqa: E402


@pytest.mark.parametrize("psnr_, ssim_, expected", [
    (11.0, 0.9, "not rebuilt"),        # exactly 1 dB above the baseline: within 1 dB
    (11.01, 0.9, "rebuilt"),           # just beyond 1 dB, SSIM far above
    (9.0, 0.9, "not rebuilt"),         # below the baseline
    (30.0, 0.55, "not rebuilt"),       # SSIM exactly 0.05 above the baseline
    (30.0, 0.56, "rebuilt"),
    (30.0, 0.4, "not rebuilt"),        # SSIM below the baseline, PSNR far above
    (None, 0.9, "not rebuilt"),        # a non-finite PSNR is never rebuilt
    (30.0, None, "not rebuilt"),
])
def test_verdict_is_rebuilt_only_beyond_both_margins(psnr_, ssim_, expected):
    assert rebuilt_module.VERDICT_PSNR_MARGIN_DB == 1.0 and rebuilt_module.VERDICT_SSIM_MARGIN == 0.05
    assert metrics.verdict(psnr_, ssim_, 10.0, 0.5) == expected


def test_verdict_without_a_baseline_compares_only_what_is_there():
    assert metrics.verdict(5.0, 0.9, None, 0.5) == "rebuilt"
    assert metrics.verdict(5.0, 0.52, None, 0.5) == "not rebuilt"
    assert metrics.verdict(12.0, 0.0, 10.0, None) == "rebuilt"


def test_the_failed_part_is_the_labels_first_then_the_objective_or_the_search():
    at = {"truth": {"match": 0.0, "tv": 0.003, "total": 0.003}, "reconstruction": {"match": 0.1, "tv": 0.01,
                                                                                   "total": 0.11}}
    base = {"verdict": "not rebuilt", "label_mode": "idlg", "label_acc": 1.0, "objective_at": at}
    assert metrics.failed_kind(base) == "search" and "the search stopped short" in metrics.failed_part(base)
    # the summary line prints the matching term alone, the note the sum: it names both
    assert "(0.003 against 0.11; the matching term plus tv, the matching term alone 0 against 0.1)" in \
        metrics.failed_part(base)
    alone = {"truth": {"match": 0.0, "total": 0.0}, "reconstruction": {"match": 0.1, "total": 0.1}}
    assert "(0 against 0.1): the search" in metrics.failed_part({**base, "objective_at": alone})
    prefers = {**base, "objective_at": {**at, "truth": {"match": 0.0, "tv": 0.5, "total": 0.5}}}
    assert metrics.failed_kind(prefers) == "objective" and "tv 0.01 against 0.5" in metrics.failed_part(prefers)
    # labels read wrongly from the message: the truth, sent with its own labels, is not what the attack looked for
    wrong = {**base, "label_acc": 0.5}
    assert metrics.failed_kind(wrong) == "labels" and "label accuracy 0.50" in metrics.failed_part(wrong)
    assert metrics.failed_kind({**wrong, "objective_at": None}) == "labels"
    # optimised (DLG) or given labels are not read from the message; rebuilt runs did not fail; nothing recorded
    assert metrics.failed_kind({**wrong, "label_mode": "dlg", "objective_at": None}) is None
    assert metrics.failed_kind({**wrong, "verdict": "rebuilt"}) is None
    assert metrics.failed_part({**base, "objective_at": None}) is None
    # a seed search that took another seed than the client's: that is the cause, not the labels or the search
    missed = {"found": False, "found_seed": 52, "candidates": 256, "true_seed_rank": 111}
    for part in (wrong, base):
        said = metrics.failed_part({**part, "seed_search": missed})
        assert said.startswith("the seed search did not find the client's seed: it took seed 52 of 256 candidates "
                               "(the client's ranked 112)")
        assert metrics.failed_kind({**part, "seed_search": missed}) == "seed"  # no part of the attack, no budget
    assert metrics.failed_part({**base, "seed_search": {**missed, "found": True}}) == metrics.failed_part(base)
    from leakattack.rebuilt import not_the_budget

    assert not_the_budget({**base, "seed_search": missed}) and not not_the_budget(base)
    assert metrics.failed_counts([{**wrong, "seed_search": missed}, {**base, "prior_not_finite": "tv"}]) == \
        {"labels": 0, "objective": 0, "search": 0}
    # a message of zeros or of NaN holds nothing to read: its labels' misreading is no part that failed
    for unreadable in ({"message_zero": True}, {"message_nonfinite": 50, "b": 50}):
        assert metrics.failed_kind({**wrong, **unreadable}) is None and metrics.failed_part({**wrong, **unreadable}) \
            is None
    assert metrics.failed_kind({**wrong, "message_nonfinite": 3, "b": 50}) == "labels"  # some numbers still read
    # a tie: neither part is judged
    assert metrics.failed_kind({**base, "objective_at": {"truth": at["truth"], "reconstruction": at["truth"]}}) is None
    assert metrics.failed_counts([base, prefers, wrong, wrong, {**base, "verdict": "rebuilt"}]) == \
        {"labels": 2, "objective": 1, "search": 1}


def test_judge_takes_the_better_baseline_and_names_the_one_a_failure_is_no_better_than():
    start = {"psnr": 8.8, "ssim": 0.02, "lpips": 0.7}
    mean = {"psnr": 12.0, "ssim": 0.30, "lpips": 0.6}
    out = metrics.judge({"psnr": 8.2, "ssim": 0.01}, {"start": start, "mean": mean})
    assert out["baseline_psnr"] == 12.0 and out["baseline_ssim"] == 0.30 and out["baseline_lpips"] == 0.6
    assert out["baseline_start_psnr"] == 8.8 and out["baseline_mean_ssim"] == 0.30
    assert out["verdict"] == "not rebuilt" and out["verdict_baseline"] == "mean"
    # the PSNR clears both baselines, the SSIM does not clear the start's: the start is named
    out = metrics.judge({"psnr": 20.0, "ssim": 0.33},
                        {"start": {"psnr": 8.0, "ssim": 0.31}, "mean": {"psnr": 12.0, "ssim": 0.2}})
    assert out["verdict"] == "not rebuilt" and out["verdict_baseline"] == "start"
    out = metrics.judge({"psnr": 40.0, "ssim": 0.99}, {"start": None, "mean": mean})
    assert out["verdict"] == "rebuilt" and out["verdict_baseline"] is None and out["baseline_start_psnr"] is None


def test_nothing_attacked_when_the_start_is_not_finite_or_never_improved():
    assert "not finite" in metrics.nothing_attacked([float("nan")], 0)
    assert "never went below" in metrics.nothing_attacked([3.0, 3.0, float("nan")], 0)
    assert metrics.nothing_attacked([3.0, 2.0], 1) is None
    assert metrics.nothing_attacked([3.0], 0) is None  # a closed form in one step: nothing to compare
    # the losses are the matching term's: with TV or a prior in the objective it is not "the objective" that stayed
    plain = metrics.nothing_attacked([3.0, 4.0], 0, "cosine distance")
    assert plain.startswith("the objective never went below its start value (cosine distance = 3.000e+00)")
    added = metrics.nothing_attacked([3.0, 4.0], 0, "cosine distance", ("TV", "the bn prior"))
    assert added.startswith("the matching term never went below its start value (cosine distance") and \
        "the objective adds TV and the bn prior to it" in added


class _Set:
    """The two things mean_image asks of a data set (rows, in_shape) and its name, over a fixed tensor."""

    def __init__(self, images):
        self.images, self.name = images, "toy"

    @property
    def in_shape(self):
        return tuple(self.images.shape[1:])

    def __len__(self):
        return self.images.shape[0]

    def rows(self, index):
        return self.images[index], None


def test_mean_image_averages_the_set_and_falls_back_to_grey():
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(600, 1, 4, 4, generator=gen)
    stored = torch.rand(3, 1, 4, 4, generator=gen)  # a truth file's float32 images, attacked in float64
    truth = stored.double()
    mean, what = metrics.mean_image(_Set(images), truth)
    assert mean.shape == truth.shape and mean.dtype == torch.float64
    assert torch.equal(mean[0], mean[2])  # one image, repeated over the batch
    evenly = torch.linspace(0, 599, metrics.MEAN_IMAGE_SAMPLE).round().long()  # 256 evenly spaced of 600
    assert torch.allclose(mean[0], images[evenly].double().mean(0)) and evenly.unique().numel() == 256
    assert what == f"the mean of {metrics.MEAN_IMAGE_SAMPLE} of the 600 images of toy"
    grey, what = metrics.mean_image(_Set(images), torch.rand(1, 3, 4, 4))  # another shape
    assert torch.all(grey == 0.5) and "grey" in what
    grey, what = metrics.mean_image(_Set(stored), truth)  # the set is the truth itself
    assert torch.all(grey == 0.5) and "grey" in what
    assert "grey" in metrics.mean_image(None, truth)[1]


def test_jacobian_rank_of_a_linear_and_a_rank_deficient_map():
    gen = torch.Generator().manual_seed(1)
    A = torch.randn(10, 4, generator=gen, dtype=torch.float64) @ torch.randn(4, 6, generator=gen, dtype=torch.float64)
    x = torch.rand(1, 1, 2, 3, dtype=torch.float64, generator=gen)

    def forward(z, labels):
        return A @ z.reshape(-1) + (z.reshape(-1) ** 3).sum() * 0  # linear, through autograd

    assert torch.allclose(metrics.jacobian(forward, x, None), A)
    assert metrics.jacobian_rank(forward, x, None, d=10)[0] == 4
    full = torch.randn(10, 6, generator=gen, dtype=torch.float64)

    def square(z, labels):  # nonlinear: J = full * 2z
        return full @ z.reshape(-1).pow(2)

    assert torch.allclose(metrics.jacobian(square, x, None), full * 2 * x.reshape(1, -1))
    assert metrics.jacobian_rank(square, x, None, d=10)[0] == 6
    rank, note = metrics.jacobian_rank(square, x, None, d=metrics.JACOBIAN_MAX_WORK)
    assert rank is None and "not measured" in note
    wide = torch.rand(1, metrics.JACOBIAN_MAX_UNKNOWNS + 1, dtype=torch.float64)
    assert metrics.jacobian_rank(lambda z, labels: z.sum(1), wide, None, d=1)[0] is None  # too many columns


def test_a_jacobian_rank_whose_j_does_not_fit_in_memory_is_not_measured_and_says_why(monkeypatch):
    from leakattack.metrics import uniqueness

    def too_big(*args, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(uniqueness, "jacobian", too_big)
    rank, note = metrics.jacobian_rank(lambda z, labels: z.sum(), torch.zeros(1, 3), None, d=1)
    assert rank is None and note.startswith("not measured: J did not fit in memory (CUDA out of memory")


def test_assess_judges_a_result_against_its_start_and_the_mean_image():
    """assess: the scores, both baselines and the verdict of metrics.json; a closed form has no start to score."""
    import pytest
    import torch

    from leakattack.attacks import AttackResult
    from leakattack.metrics import MetricsError, assess

    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 1, 12, 12, generator=g)
    x0 = torch.rand(2, 1, 12, 12, generator=g)
    labels = torch.tensor([3, 1])
    exact = AttackResult(x=x.flip(0), labels=labels.flip(0), x0=x0, losses=[1.0, 0.0])
    judged = assess(exact, x, labels, with_lpips=False)
    assert judged["verdict"] == "rebuilt" and judged["label_acc"] == 1.0 and judged["match"] == [1, 0]
    assert judged["baseline_start_psnr"] is not None and "grey" in judged["baseline_mean_image"]
    stuck = AttackResult(x=x0, labels=labels, x0=x0, losses=[1.0])
    judged = assess(stuck, x, labels, with_lpips=False)
    assert judged["verdict"] == "not rebuilt" and judged["psnr"] == judged["baseline_start_psnr"]
    assert assess(exact, x, closed_form=True, with_lpips=False)["baseline_start_psnr"] is None
    with pytest.raises(MetricsError, match="AttackResult"):
        assess(x, x)
    for wrong in ("no", 0, [1]):  # "no" dropped the start's baseline, read as yes
        with pytest.raises(MetricsError, match="^closed_form must be True, False or None"):
            assess(exact, x, closed_form=wrong, with_lpips=False)


def test_score_clamps_the_reconstruction_as_assess_and_a_run_do():
    """score() took a reconstruction outside [0, 1] as it was (10.46 dB) where assess() and metrics.json clamp it
    (11.43 dB); the docs say reconstructions are clamped for scoring."""
    x = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = metrics.score(x + 0.3, x, with_lpips=False)
    assert out["psnr"] == pytest.approx(metrics.score((x + 0.3).clamp(0, 1), x, with_lpips=False)["psnr"], abs=1e-12)
    assert out["psnr"] > float(metrics.psnr(x + 0.3, x)[0]) + 0.1
    assert metrics.score(torch.full_like(x, math.nan), x, with_lpips=False)["psnr"] is None  # still n/a, not 0 dB


@pytest.mark.parametrize("truth,needle", [
    (torch.full((1, 1, 8, 8), math.nan), "the truth holds 64 value(s) that are NaN or infinite"),
    (torch.zeros(0, 1, 8, 8), "the images are empty (shape (0, 1, 8, 8))"),
])
def test_a_truth_with_nothing_to_score_against_is_one_sentence(truth, needle):
    with pytest.raises(metrics.MetricsError, match=re.escape(needle)):
        metrics.score(torch.zeros_like(truth), truth, with_lpips=False)


def test_inputs_that_are_not_images_are_named_as_such_not_as_two_different_shapes():
    """assess on a tabular victim said 'images must share one shape (B, C, H, W); got (1, 20) and (1, 20)'."""
    x = torch.rand(1, 20)
    with pytest.raises(metrics.MetricsError, match=re.escape("the metrics score images of shape (B, C, H, W), and "
                                                             "these inputs have shape (1, 20)")):
        metrics.score(x, x, with_lpips=False)


@pytest.mark.parametrize("kwargs,needle", [
    ({"device": "bogus"}, "device must name a torch device, such as 'cpu' or 'cuda', got 'bogus'"),
    ({"with_lpips": "no"}, "with_lpips must be True or False, got str 'no'"),
])
def test_scores_settings_that_are_not_what_they_name_are_one_sentence(kwargs, needle):
    """device='bogus' was taken unchecked where LPIPS was off, and with_lpips='no' read as True."""
    x = torch.rand(1, 1, 8, 8)
    with pytest.raises(metrics.MetricsError, match=re.escape(needle)):
        metrics.score(x, x, **{"with_lpips": False, **kwargs})


def test_score_given_an_attack_result_names_assess():
    """score(result, x, labels), as one calls assess, said the images were not tensors of shape (B, C, H, W)."""
    from leakattack.attacks import AttackResult

    x = torch.rand(1, 1, 16, 16)
    result = AttackResult(x=x.clone(), labels=None, x0=torch.zeros_like(x), losses=[1.0])
    with pytest.raises(metrics.MetricsError, match=re.escape("score takes the reconstructed images (result.x)")):
        metrics.score(result, x)
    assert metrics.score(result.x, x, with_lpips=False)["psnr"] > 100
