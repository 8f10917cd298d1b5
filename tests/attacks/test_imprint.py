"""The imprint attack of a malicious server (Robbing the Fed): the block leaves the model's function nearly as it
was, every image alone in a bin comes back exactly, blends are said, and the refusals are one sentence."""

import json
import warnings

import pytest
import torch

import targets
from leakattack import cli
from leakattack.attacks import AttackError, Imprint, get_attack, list_attacks
from leakattack.attacks.imprint import hits
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.errors import SettingWarning
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch
from leakattack.sketch.srht import prefix_rows
from targets.models.imprint import GAIN, QUERIES, add_imprint, imprint_block, imprint_thresholds, make_query

pytestmark = pytest.mark.usefixtures("one_thread")


def _case(count=8, bins=32, kind="none", ratio=1.0, start=0, query="random"):
    data = get_dataset("photos")
    x = data.images[start:start + count].double()
    labels = data.labels[start:start + count]
    victim = targets.get_model("lenet", seed=0)
    attack = get_attack("imprint", bins=bins, query=query)
    attack.modify(victim, data)
    victim.to(dtype=torch.float64)
    sketch = make_sketch(kind, victim.d, max(1, int(ratio * victim.d)), seed=1)
    return attack, victim, x, observe(victim, x, labels, Channel(sketch), ThreatModel())


def _alone(victim, x) -> torch.Tensor:
    """Which images of x fall alone into a bin of the victim's imprint block (from the truth)."""
    bins = imprint_block(victim.model).bins_of(x)
    return torch.tensor([int((bins == b).sum()) == 1 for b in bins])


def test_imprint_is_registered_and_listed_with_its_option(capsys):
    assert "imprint" in list_attacks() and isinstance(get_attack("imprint"), Imprint)
    assert Imprint.modifies_model and Imprint.closed_form
    assert cli.main(["list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("attacks:"))
    assert "imprint" in line.replace(",", " ").split()


@pytest.mark.parametrize("query", QUERIES)
def test_thresholds_increase_from_below_every_image(query):
    images = get_dataset("photos").images
    v = make_query(images.shape[1:], query)
    c = imprint_thresholds(images, v, 16)
    assert c.shape == (16,) and bool((c[1:] > c[:-1]).all())
    assert float(c[0]) < float(v.clamp(max=0).sum())  # below <v, x> for any x in [0, 1]


def test_the_block_moves_the_input_by_at_most_its_gain_and_keeps_the_model_close():
    data = get_dataset("photos")
    x = data.images[:4].double()
    plain = targets.get_model("lenet", seed=0).to(dtype=torch.float64)
    with torch.no_grad():
        before = plain(x)
    victim = targets.get_model("lenet", seed=0)
    Imprint(bins=64).modify(victim, data)
    victim.to(dtype=torch.float64)
    block = imprint_block(victim.model)
    with torch.no_grad():
        moved = block(x) - x
        after = victim(x)
    top = float((x.reshape(4, -1) @ block.query).max() - block.thresholds[0])
    assert float(moved.abs().max()) <= GAIN * top * (1 + 1e-12)
    assert float(moved.abs().max()) > 0
    assert float((after - before).abs().max()) < 1e-2 * float(before.abs().max())


def test_hits_read_each_bin_from_neighbouring_rows():
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(3, 5, generator=gen, dtype=torch.float64)
    delta = torch.tensor([0.7, -1.3, 2.1], dtype=torch.float64)
    bins = [1, 3, 3]  # image 0 alone in bin 1; images 1 and 2 share bin 3
    K = 5
    dW = torch.zeros(K, 5, dtype=torch.float64)
    db = torch.zeros(K, dtype=torch.float64)
    for img, dl, b in zip(images, delta, bins):
        dW[:b + 1] += dl * img  # rows 0..b are active for an image of bin b
        db[:b + 1] += dl
    found, read, diffs = hits(dW, db)
    assert found.tolist() == [1, 3]
    assert torch.allclose(read[0], images[0], atol=1e-14)
    blend = (delta[1] * images[1] + delta[2] * images[2]) / (delta[1] + delta[2])
    assert torch.allclose(read[1], blend, atol=1e-14)
    assert torch.allclose(diffs, torch.stack([delta[0], delta[1] + delta[2]]))


@pytest.mark.parametrize("query", QUERIES)
def test_every_image_alone_in_its_bin_comes_back_exactly(query):
    attack, victim, x, obs = _case(count=8, bins=32, query=query)
    alone = _alone(victim, x)
    result = attack.reconstruct(obs)
    assert result.iterations == 0 and result.x.shape == x.shape
    # match each true image to its nearest reconstruction
    dist = torch.cdist(x.reshape(8, -1), result.x.reshape(8, -1))
    exact = dist.min(1).values < 1e-9
    assert torch.equal(exact, alone), (exact, alone)
    assert int(alone.sum()) >= 4  # the photos spread over enough bins for the check to mean something
    assert "of 32 bins held images of the batch of 8" in result.message


def test_a_batch_with_images_sharing_bins_says_so():
    attack, victim, x, obs = _case(count=8, bins=4)
    alone = _alone(victim, x)
    assert int(alone.sum()) < 8
    with pytest.warns(SettingWarning, match="^imprint's block has 4 bins for a batch of 8"):
        result = attack.reconstruct(obs)
    assert result.stop_reason == "stalled" and "shared a bin" in result.message


def test_fewer_bins_than_images_are_warned_of_before_the_block_is_read():
    """Two bins for a batch of four ran without a word until the note after the attack."""
    attack, victim, x, obs = _case(count=4, bins=2)
    with pytest.warns(SettingWarning, match=r"^imprint's block has 2 bins for a batch of 4: some of its images share "
                                            r"a bin, and come back as one blend, or fall in none; give --bins 4 or "
                                            r"more \(the default is 128\)$"):
        attack.reconstruct(obs)
    attack, victim, x, obs = _case(count=4, bins=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        attack.reconstruct(obs)


def test_refusals_are_one_sentence():
    data = get_dataset("photos")
    x, labels = data.images[:1].double(), data.labels[:1]
    plain = targets.get_model("lenet", seed=0).to(dtype=torch.float64)
    obs = observe(plain, x, labels, Channel(make_sketch("none", plain.d, plain.d)), ThreatModel())
    with pytest.raises(AttackError, match="has none"):
        get_attack("imprint").reconstruct(obs)
    _, victim, _, sketched = _case(count=8, bins=8, kind="srht", ratio=0.5)
    need = 8 * (victim.unknowns_per_example + 1)
    with pytest.raises(AttackError, match=f"8 x 3073 = {need} numbers, and a message of b = {sketched.linear_map.b} "
                                          "numbers holds fewer"):
        get_attack("imprint", bins=8).reconstruct(sketched)


def _wide_victim():
    """8x8 grey images through a wide MLP (d = 153,610; 154,650 with a block of 16 bins, 1,040 numbers)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    return targets.Victim.from_module(net, input_shape=(1, 8, 8), num_classes=10, name="wide-mlp")


def _imprinted(batch: int):
    """The wide victim behind a 16-bin imprint block fitted to 200 random images, in float64, and a batch of random
    images: (victim, attack, x)."""
    gen = torch.Generator().manual_seed(0)
    victim = _wide_victim()
    attack = get_attack("imprint", bins=16)
    attack.modify(victim, torch.rand(200, 1, 8, 8, generator=gen, dtype=torch.float64))
    victim.to(dtype=torch.float64)
    return victim, attack, torch.rand(batch, 1, 8, 8, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("b", [None, 1500])
def test_through_a_sketch_the_block_is_read_by_least_squares_and_the_labels_from_the_rest(b):
    # b = d/2: least squares over the block's 1,040 numbers, whose columns the SRHT sees through all 2,048 distinct
    # rows there can be; b = 1500 < 2 x 1,040: the rows that hold images, one by one (the SRHT's rows take 1,068
    # distinct values on the block's columns, about as many as the columns)
    gen = torch.Generator().manual_seed(0)
    public = torch.rand(200, 1, 8, 8, generator=gen, dtype=torch.float64)
    x = torch.rand(4, 1, 8, 8, generator=gen, dtype=torch.float64)
    labels = torch.tensor([3, 1, 4, 1])
    victim = _wide_victim()
    attack = get_attack("imprint", bins=16)
    attack.modify(victim, public)
    victim.to(dtype=torch.float64)
    alone = _alone(victim, x)
    assert int(alone.sum()) >= 2
    sketch = make_sketch("srht", victim.d, b or victim.d // 2, seed=1)
    assert prefix_rows(victim.d, sketch.b, 1, 1040) == (1068 if b else 2048)
    obs = observe(victim, x, labels, Channel(sketch), ThreatModel())
    result = attack.reconstruct(obs)
    error = torch.cdist(x.reshape(4, -1), result.x.reshape(4, -1)).min(1).values
    assert bool((error[alone] < 1e-3).all()), error  # the rest of g, 1e-5 of the block, as noise
    if b is None:
        assert sorted(result.labels.tolist()) == [1, 1, 3, 4]


def test_the_command_line_rebuilds_a_batch_and_records_the_bins(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--attack", "imprint", "--bins", "64", "--sketch", "none",
                   "--batch-size", "4", "--no-lpips", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["psnr"] > 100 and m["verdict"] == "rebuilt"
    assert m["label_acc_matched"] == 1.0  # each image's label from its bin's delta (LeNet: no batch coupling)
    assert "of 64 bins held images of the batch of 4" in captured.err
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["attack_params"]["bins"] == 64


def test_a_pruned_batch_names_the_defense_among_the_causes_of_fewer_bins(tmp_path, capsys):
    """prune:p=0.999 left 2 of 128 bins for 4 images, each alone in its bin without it: the note blamed images
    sharing bins alone."""
    rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--sketch", "none",
                   "--batch-size", "4", "--defense", "prune:p=0.999", "--no-lpips", "--quiet",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 0 and "fewer bins than images, which images sharing a bin or the defense's prune:p=0.999" in err


@pytest.mark.parametrize("args,words", [
    (["--protocol", "fedavg"], "changes the model the server sends"),
    (["--sketch", "srht", "--sketch-ratio", "0.005", "--batch-size", "2"], "holds fewer"),
    (["--bins", "1"], "imprint bins"),
])
def test_the_command_line_refuses_with_one_line_and_exit_2(tmp_path, capsys, args, words):
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--attack", "imprint", *args, "--no-lpips", "--quiet",
                   "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and words in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("sigma", ["1e308", "1e306"])
def test_a_message_drowned_in_noise_through_a_sketch_runs_and_records_it(tmp_path, capsys, sigma):
    """Noise past float64's range (NaN and inf), or within it where the least squares overflow: no bin is read and
    the run says so; it ended in a traceback from an empty batch's reshape (exit 1)."""
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--attack", "imprint", "--dataset", "digits", "--defense",
                   f"gaussian:sigma={sigma}", "--threads", "1", "--no-lpips", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0 and "Traceback" not in captured.err and captured.out.startswith("not rebuilt")
    assert json.loads((out / "metrics.json").read_text())["verdict"] == "not rebuilt"


def test_a_least_squares_fit_that_overflows_reads_its_labels_from_the_finite_values(monkeypatch):
    """A fit of the block that is not finite reads no bin, and the label rules (which refuse a message that is not
    finite) read the finite values of the fitted rest."""
    from leakattack.attacks import imprint

    victim, attack, x = _imprinted(1)
    obs = observe(victim, x, torch.tensor([3]), Channel(make_sketch("srht", victim.d, victim.d // 2, seed=1)),
                  ThreatModel())
    for name in ("_fit_block", "_fit_rows"):
        real = getattr(imprint, name)
        monkeypatch.setattr(imprint, name, lambda *a, real=real: tuple(t * float("inf") for t in real(*a)))
    result = attack.reconstruct(obs)
    assert result.labels.shape == (1,) and result.message.startswith(
        "the block's gradient read from the message is not finite (NaN or infinite values): 0 of 16 bins held images")
    assert "shared a bin" not in result.message


def test_no_image_has_no_bin():
    """bins_of of an empty batch (no bin read) is empty; it failed on reshaping zero elements."""
    victim = targets.get_model("lenet", num_classes=10, in_shape=(1, 8, 8), seed=0)
    add_imprint(victim, 8, torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0)))
    block = imprint_block(victim.model)
    assert block.bins_of(torch.zeros(0, 64)).shape == (0,)


def test_hits_stand_out_of_noise_and_fall_back_to_the_largest_bins():
    gen = torch.Generator().manual_seed(1)
    K, m = 64, 5
    images = torch.rand(3, m, generator=gen, dtype=torch.float64)
    dW = torch.zeros(K, m, dtype=torch.float64)
    db = torch.zeros(K, dtype=torch.float64)
    for img, b in zip(images, (5, 20, 40)):
        dW[:b + 1] += img
        db[:b + 1] += 1.0
    noisy_W = dW + 1e-6 * torch.randn(K, m, generator=gen, dtype=torch.float64)
    noisy_b = db + 1e-6 * torch.randn(K, generator=gen, dtype=torch.float64)
    assert hits(noisy_W, noisy_b)[0].numel() > 3  # without the batch size every bin clears the relative floor
    found, read, _ = hits(noisy_W, noisy_b, batch=3)
    assert found.tolist() == [5, 20, 40] and torch.allclose(read, images, atol=1e-4)
    pure = 1e-6 * torch.randn(K, generator=gen, dtype=torch.float64)
    assert hits(noisy_W, pure, batch=3)[0].numel() == 3  # only noise: the three largest, as a guess


def test_labels_follow_their_images_under_a_clip_of_the_whole_update(tmp_path):
    # the clip scales every bin's bias difference by C / ||g||, which the label match fits: LeNet read 2 of 8 digits'
    # labels on their images when it took the differences at the gradient's own size
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--sketch", "none",
                   "--batch-size", "8", "--bins", "64", "--labels", "given", "--defense", "clip:C=1e-3",
                   "--no-lpips", "--quiet", "--out", str(out)])
    m = json.loads((out / "metrics.json").read_text())
    assert rc == 0 and m["psnr"] > 100 and m["label_acc"] == 1.0
    assert m["label_acc_matched"] == 1.0


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_labels_follow_their_images_whether_the_loss_sums_or_averages(reduction):
    gen = torch.Generator().manual_seed(0)
    public = torch.rand(200, 1, 8, 8, generator=gen, dtype=torch.float64)
    x = torch.rand(6, 1, 8, 8, generator=gen, dtype=torch.float64)
    labels = torch.tensor([3, 1, 4, 1, 5, 9])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.Sigmoid(), torch.nn.Linear(32, 10))
    victim = targets.Victim.from_module(net, input_shape=(1, 8, 8), num_classes=10,
                                        loss=torch.nn.CrossEntropyLoss(reduction=reduction))
    assert victim.loss_reduction == reduction
    attack = get_attack("imprint", bins=256)
    attack.modify(victim, public)
    victim.to(dtype=torch.float64)
    alone = _alone(victim, x)
    assert int(alone.sum()) == 6
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)), ThreatModel(knows_labels=True))
    result = attack.reconstruct(obs)
    nearest = torch.cdist(x.reshape(6, -1), result.x.reshape(6, -1)).argmin(1)
    assert torch.cdist(x.reshape(6, -1), result.x.reshape(6, -1)).min(1).values.max() < 1e-9
    assert result.labels[nearest].tolist() == labels.tolist()


def test_a_square_srht_whose_padding_spoils_g_reads_the_block_by_least_squares(tmp_path, capsys):
    """Through srht at b = d (LeNet's d on digits is no power of two: the SRHT pads it), imprint read g first and
    rebuilt 1 of 4 images (10.2 dB), where b = d/2, read on the block by least squares, rebuilt them all."""
    from leakattack import cli

    out = tmp_path / "o"
    assert cli.main(["run", "--model", "lenet", "--attack", "imprint", "--dataset", "digits", "--sketch", "srht",
                     "--sketch-ratio", "1.0", "--batch-size", "4", "--bins", "32", "--quiet", "--no-lpips",
                     "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["verdict"] == "rebuilt" and min(m["psnr_each"]) > 60 and m["label_acc"] == 1.0, m


@pytest.mark.parametrize("defense", ["clip:C=1e-3", "per_example:C=1e-3"])
def test_recovered_labels_follow_their_images_under_a_clip(tmp_path, defense):
    # the label rules read the clipped head at the wrong scale (1 of 4 digits' labels, with or without
    # --attacker-knows-clip); with the images read, the head's gradient gives their labels at any scale, one per
    # example under a per-example clip
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--sketch", "none",
                   "--batch-size", "4", "--defense", defense, "--no-lpips", "--quiet", "--out", str(out)])
    m = json.loads((out / "metrics.json").read_text())
    assert rc == 0 and m["psnr"] > 100 and m["label_acc"] == 1.0 and m["label_acc_matched"] == 1.0


@pytest.mark.parametrize("args", [["--defense", "clip:C=1"], ["--defense", "per_example:C=1e-3"],
                                  ["--batch-draw", "random"]])
def test_labels_read_through_a_sketch_follow_the_misfit_one_label_at_a_time(tmp_path, args):
    # through srht b/d = 0.5 the head's gradient is read with noise: the least squares' smallest entry put 2 of 8
    # digits' labels on another class, and under a clip the rules' reading (at the wrong scale) was worse still (6 of
    # 8 under clip:C=1, 5 under per_example:C=1e-3); a batch with repeated labels keeps its 8 of 8 (changed one at a
    # time at one scale per example, it read 6: a swap of two labels fitted the noise closer)
    out = tmp_path / "run"
    rc = cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--batch-size", "8",
                   *args, "--no-lpips", "--quiet", "--out", str(out)])
    m = json.loads((out / "metrics.json").read_text())
    assert rc == 0 and min(m["psnr_each"]) > 50 and m["label_acc"] == 1.0 and m["label_acc_matched"] == 1.0, m


def _noisy_head(B, C, h, per_example, seed=0):
    gen = torch.Generator().manual_seed(seed)
    P = torch.softmax(torch.randn(B, C, generator=gen, dtype=torch.float64), 1)
    H = torch.rand(B, h, generator=gen, dtype=torch.float64)
    y = torch.randint(0, C, (B,), generator=gen)
    scale = torch.ones(B, dtype=torch.float64)
    if per_example:
        scale = 0.5 + torch.rand(B, generator=gen, dtype=torch.float64)
    Y = ((P - torch.nn.functional.one_hot(y, C).double()) * scale[:, None]).T @ H / B
    Y = Y + 0.3 * Y.norm() / Y.numel() ** 0.5 * torch.randn(Y.shape, generator=gen, dtype=torch.float64)
    return P, H, Y, y


@pytest.mark.parametrize("per_example", [False, True])
def test_label_descent_ends_where_no_single_change_or_swap_fits_closer(per_example):
    from leakattack.attacks.labels import _descend, _misfit

    P, H, Y, y = _noisy_head(12, 6, 40, per_example)
    start = (y + torch.arange(12) % 3) % 6  # 8 of 12 wrong
    out = _descend(P, H, Y, start, [list(range(6))] * 12, per_example)
    assert out.tolist() == y.tolist()  # the truth, from a third right
    end = _misfit(P, H, Y, out, per_example)
    assert end < _misfit(P, H, Y, start, per_example)
    # its misfit is updated move by move, not recomputed: the end is a local minimum of the misfit computed whole
    for i in range(12):
        for c in range(6):
            trial = out.clone()
            trial[i] = c
            assert _misfit(P, H, Y, trial, per_example) >= end * (1 - 1e-9)
        for j in range(i + 1, 12):
            trial = out.clone()
            trial[i], trial[j] = out[j], out[i]
            assert _misfit(P, H, Y, trial, per_example) >= end * (1 - 1e-9)


def _bn_case():
    gen = torch.Generator().manual_seed(0)
    public = torch.rand(200, 1, 8, 8, generator=gen, dtype=torch.float64)
    x = torch.rand(6, 1, 8, 8, generator=gen, dtype=torch.float64)
    labels = torch.tensor([3, 1, 4, 1, 5, 9])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(512, 10))
    victim = targets.Victim.from_module(net, input_shape=(1, 8, 8), num_classes=10)
    attack = get_attack("imprint", bins=256)
    attack.modify(victim, public)
    victim.to(dtype=torch.float64)
    return attack, victim, x, labels


def test_recovered_labels_follow_their_images_under_batchnorm_on_batch_statistics():
    # each bin's bias difference depends on every label of such a batch, so the multiset cannot be matched to the
    # images by it; the head's gradient, read at the images, gives each image its own label
    attack, victim, x, labels = _bn_case()
    assert victim.batch_statistics and int(_alone(victim, x).sum()) == 6
    result = attack.reconstruct(observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)),
                                        ThreatModel()))
    dist = torch.cdist(x.reshape(6, -1), result.x.reshape(6, -1))
    assert dist.min(1).values.max() < 1e-8
    assert result.labels[dist.argmin(1)].tolist() == labels.tolist()


def test_labels_at_images_do_not_depend_on_the_message_scale_and_need_rows_apart():
    from leakattack.attacks.labels import head_from_gradient, head_misfit, labels_at_images

    _, victim, x, labels = _bn_case()
    g = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d)), ThreatModel()).y
    for scale in (1.0, 1e-4, 37.0):
        head = head_from_gradient(victim, scale * g)
        assert labels_at_images(victim, head, x).tolist() == labels.tolist()
        assert head_misfit(victim, head, x, labels) < 1e-6  # its normal equations: the square root of round-off
        assert head_misfit(victim, head, x, labels.roll(1)) > 0.1
    assert head_misfit(victim, head_from_gradient(victim, -g), x, labels) == 1.0  # no positive scale fits
    assert labels_at_images(victim, head_from_gradient(victim, g), torch.cat([x, x[:1]])) is None  # a repeated row


@pytest.mark.parametrize("slow, warned", [(0.0, True), (1e9, False)])
def test_a_least_squares_reading_estimated_to_be_slow_is_warned_of_once(monkeypatch, slow, warned):
    """A dense sketch of a large victim (ams at 16 px: 1.5 s a product, four minutes in all) read the block for
    minutes with nothing said; after its first products the solve's most products are estimated, and where they pass
    SLOW_SOLVE_SECONDS one line says so."""
    import warnings

    from leakattack.attacks import imprint
    from leakattack.errors import SettingWarning

    monkeypatch.setattr(imprint, "SLOW_SOLVE_SECONDS", slow)
    victim, attack, x = _imprinted(1)
    obs = observe(victim, x, torch.tensor([3]), Channel(make_sketch("srht", victim.d, 1500, seed=1)), ThreatModel())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        attack.reconstruct(obs)
    slow_notes = [str(w.message) for w in said if "reads its block through the srht sketch" in str(w.message)]
    most = imprint._most_products(16, 1, False)  # b = 1500 < 2 x 1,040: the rows' rounds only, two for one
    assert len(slow_notes) == (1 if warned else 0)
    if warned:
        assert slow_notes[0].startswith(f"imprint reads its block through the srht sketch by least squares: up to "
                                        f"{most} products with R, about ") and issubclass(said[0].category, Warning)
        assert all(w.category is SettingWarning for w in said if "reads its block" in str(w.message))


@pytest.mark.parametrize("b", [None, 1500])
def test_the_most_products_bound_the_products_taken(monkeypatch, b):
    """The estimate is an upper bound: with CGLS's steps cut to 2, every step taken, the products counted stay within
    it (it left out CGLS's products before its steps and the fits' own)."""
    from leakattack.attacks import imprint

    monkeypatch.setattr(imprint, "BLOCK_CGLS_STEPS", 2)
    monkeypatch.setattr(imprint, "ROW_CGLS_STEPS", 2)
    counted = []

    class Counting(imprint._Pace):
        def __init__(self, most, kind):
            super().__init__(most, kind)
            counted.append(self)

    monkeypatch.setattr(imprint, "_Pace", Counting)
    victim, attack, x = _imprinted(2)
    sketch = make_sketch("srht", victim.d, b or victim.d // 2, seed=1)
    attack.reconstruct(observe(victim, x, torch.tensor([3, 1]), Channel(sketch), ThreatModel()))
    assert len(counted) == 1 and 0 < counted[0].calls <= counted[0].most, (counted[0].calls, counted[0].most)
