"""Label recovery through a uniform sample of the gradient: none, or only a few, of the head's coordinates kept."""

import math

import pytest
import torch
from torch import nn

import targets
from leakattack import cli
from leakattack.attacks import labels
from leakattack.errors import UserError
from leakattack.sketch import get_sketch


@pytest.fixture(scope="module")
def victim():
    """A sigmoid MLP of d = 323 weights whose head (20 -> 3 and its bias) holds 63 of them."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 20), nn.Sigmoid(), nn.Linear(20, 3)).double()
    return targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=3)


def head_kept(victim, sketch) -> int:
    """How many of the head's coordinates the sample keeps."""
    ws, bs = labels._head_slices(victim)
    mask = torch.zeros(victim.d, dtype=torch.float64)
    mask[ws], mask[bs] = 1.0, 1.0
    return int((sketch.apply(mask) != 0).sum())


def sample_keeping(victim, b: int, wanted) -> tuple:
    """The first uniform sketch of b coordinates (by seed) that keeps a number of head coordinates in ``wanted``."""
    for seed in range(200):
        sk = get_sketch("uniform", victim.d, b, seed=seed)
        if head_kept(victim, sk) in wanted:
            return sk
    raise AssertionError(f"no seed below 200 keeps {wanted} head coordinates with b = {b}")


def test_a_sample_that_keeps_none_of_the_head_is_one_sentence_naming_the_other_label_sources(victim):
    sk = sample_keeping(victim, 1, {0})
    x, y = torch.rand(1, 3, 2, 2, dtype=torch.float64), torch.tensor([1])
    message = sk.apply(targets.flat_gradient(victim, x, y))
    for read in (lambda: labels.recover_labels(victim, sk, message, 1),
                 lambda: labels.readings_to_compare(victim, sk, message, 1),
                 lambda: labels.recover_labels_by_rule(victim, sk, message, 1)):
        with pytest.raises(UserError, match=r"^the sketch keeps none of the classifier head's 63 coordinates "
                                            r"\(b = 1 of d = 323\).*use --labels given or --labels dlg "
                                            r"\(labels=.given. .*in Python\)$"):
            read()
    # nothing was read, so nothing stands out of the noise (it read infinitely sure before)
    assert labels.sign_rule_snr(victim, sk, message) == 0.0


def test_a_sample_that_keeps_a_few_head_coordinates_reads_them_without_bias(victim):
    """The readout scales what it keeps by (head size / kept): over draws of the sample its mean is the head's
    gradient (each draw keeps about 3 of the 63), and every draw gives finite labels in range."""
    x, y = torch.rand(2, 3, 2, 2, dtype=torch.float64), torch.tensor([0, 2])
    g = targets.flat_gradient(victim, x, y)
    ws, _ = labels._head_slices(victim)
    truth = g[ws].reshape(victim.head.weight.shape)
    total, draws, kept = torch.zeros_like(truth), 0, []
    for seed in range(1000):
        sk = get_sketch("uniform", victim.d, 16, seed=seed)
        if head_kept(victim, sk) == 0:  # refused above
            continue
        read = labels.read_head(victim, sk, sk.apply(g))
        assert math.isfinite(read.sigma) and bool(torch.isfinite(read.U).all())
        total += read.U
        draws += 1
        kept.append(head_kept(victim, sk))
    assert 2 < sum(kept) / len(kept) < 5
    # a standard error of about 0.14 of ||truth|| for these draws
    assert float((total / draws - truth).norm() / truth.norm()) < 0.3
    sk = sample_keeping(victim, 16, {1, 2})
    found = labels.recover_labels(victim, sk, sk.apply(g), 2)
    assert found.shape == (2,) and 0 <= int(found.min()) <= int(found.max()) < 3


def test_the_command_line_refuses_a_sample_that_misses_the_head_with_exit_code_2(tmp_path, capsys):
    """The default photo and LeNet (head: 7690 of d = 15826) through a uniform sample of b = 1 that misses it."""
    out = tmp_path / "run"
    argv = ["run", "--sketch", "uniform", "--sketch-dim", "1", "--seed", "1", "--iterations", "2", "--refine", "none",
            "--threads", "1", "--quiet", "--no-lpips", "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("leakattack: error: attack 'gradient-matching' cannot run here: the sketch keeps none of "
                          "the classifier head's 7690 coordinates")
    assert not out.exists()
    assert cli.main([*argv[:-1], str(tmp_path / "dlg"), "--labels", "dlg"]) == 0  # the named fallback runs


def test_a_sweep_refuses_the_point_whose_sample_misses_the_head_before_any_point_runs(tmp_path, capsys):
    """The attack's check asks whether the sample keeps any of the head, so a sweep names such a point up front
    (seed 1: a sample of b = 1 keeps none of LeNet's head, one of b = d/2 about half of it)."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('[base]\nsketch = "uniform"\nseed = 1\niterations = 2\nrefine = "none"\n'
                     '[grid]\nsketch_dim = [7913, 1]\n')
    assert cli.main(["sweep", str(sweep), "--dry-run", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the sketch keeps none of the classifier head's 7690 coordinates" in err and "'sketch_dim': 1" in err, err


def test_the_sign_rule_snr_of_a_victim_without_a_head_is_nan():
    """A regression has no classifier head whose rows the sign rule reads: no label to pick, and no crash."""
    victim = targets.get_model("linreg", num_classes=10, in_shape=(1, 4, 4), seed=0).to(dtype=torch.float64)
    assert victim.head is None
    sk = get_sketch("gaussian", victim.d, 4, seed=0)
    assert math.isnan(labels.sign_rule_snr(victim, sk, torch.rand(4, dtype=torch.float64)))
