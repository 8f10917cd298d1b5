"""APRIL: a ViT's patches in closed form from its position-embedding and patch-embedding gradients; refusals in one
sentence."""

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack import cli, metrics
from leakattack.attacks import April, AttackError, get_attack, list_attacks
from leakattack.attacks.april import fold_patches, solve_patches
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch
from targets.models.vit import ViT

pytestmark = pytest.mark.usefixtures("one_thread")  # the attack runs on one thread


def _photos(index=0, count=1, shape=(32, 32)):
    data = get_dataset("photos")
    x = data.images[index:index + count].double()
    if tuple(x.shape[-2:]) != shape:
        x = F.interpolate(x, size=shape, mode="bilinear", align_corners=False)
    return x, data.labels[index:index + count]


def _observe(victim, x, labels, kind="none", b=None, threat=ThreatModel()):
    victim = victim.to(dtype=x.dtype)
    return observe(victim, x, labels, Channel(make_sketch(kind, victim.d, b or victim.d, seed=1)), threat)


def _tiny_vit(in_shape=(3, 8, 12), **kw):
    """A one-block ViT of dim 8 (6 patches of 4x4 on 8x12 images, d = 963): small enough for a dense square sketch."""
    torch.manual_seed(0)
    model = ViT(in_shape, num_classes=3, patch=4, dim=8, depth=1, heads=2, mlp=8)
    return targets.Victim.from_module(model, input_shape=in_shape, num_classes=3, name="tiny-vit", **kw)


def _psnr(result, x):
    return float(metrics.psnr(result.x.clamp(0, 1), x).mean())


def test_april_is_registered_and_listed(capsys):
    assert "april" in list_attacks() and isinstance(get_attack("april"), April)
    assert cli.main(["list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("attacks:"))
    assert "april" in line.replace(",", " ").split()


def test_patches_solve_and_fold_back_exactly():
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, 8, 12, generator=gen, dtype=torch.float64)
    P = F.unfold(image, 4, stride=4)[0].T  # 6 patches of 48 numbers, row-major, as a 4x4 convolution sees them
    G = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    solved, rank = solve_patches(G, G.T @ P)
    assert rank == 6 and torch.allclose(solved, P, atol=1e-12)
    assert torch.equal(fold_patches(P, (4, 4), (8, 12)), image)
    _, rank = solve_patches(torch.cat([G[:5], G[:1] + G[1:2]]), G.T @ P)  # two patches' rows dependent
    assert rank == 5


def test_vit_small_gives_photo_0_back_from_its_gradient():
    x, labels = _photos(0)
    obs = _observe(targets.get_model("vit_small", seed=0), x, labels)
    result = get_attack("april").reconstruct(obs)
    assert result.stop_reason == "tolerance", result.message
    assert _psnr(result, x) > 100  # float64: exact up to round-off (wrong patch order or offset gives < 15 dB)
    assert result.labels.tolist() == labels.tolist()  # iDLG on the head's bias
    assert len(result.losses) == 2 and max(result.losses) < 1e-10  # the weight and the bias systems


@pytest.mark.parametrize("index", [1, 2])
def test_vit_small_in_float32_gives_photos_back_above_40_db(index):
    x, labels = _photos(index)
    x = x.float()
    result = get_attack("april").reconstruct(_observe(targets.get_model("vit_small", seed=0), x, labels))
    assert result.stop_reason == "tolerance" and _psnr(result, x) > 40  # round-off through G's 4 decades


class _Margin(torch.nn.Module):
    """4x4 patches of 10x12 images (the built-in ViT refuses a patch that does not divide the image): a learnable
    position embedding for the 2x3 patches, tanh, mean over the tokens, a linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.pos = torch.nn.Parameter(0.1 * torch.randn(1, 6, 16))
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.embed(x).flatten(2).transpose(1, 2) + self.pos).mean(1))


def test_pixels_that_no_patch_covers_are_named_and_the_run_stalls():
    # two rows of 12 pixels lie below the last row of patches: the model never reads them
    x, labels = _photos(shape=(10, 12))
    victim = targets.Victim.from_module(_Margin(), input_shape=(3, 10, 12), num_classes=3)
    result = get_attack("april").reconstruct(_observe(victim, x, labels % 3))
    assert result.stop_reason == "stalled"
    assert "24 pixels of each channel lie in no patch (10x12 image, 4x4 patches)" in result.message
    assert bool((result.x[..., 8:, :] == 0).all())
    assert float(metrics.psnr(result.x[..., :8, :].clamp(0, 1), x[..., :8, :]).mean()) > 80


def test_a_square_gaussian_sketch_is_solved_for_g_then_inverted():
    x, _ = _photos(3, shape=(8, 12))
    victim = _tiny_vit()
    result = get_attack("april").reconstruct(_observe(victim, x, torch.tensor([2]), "gaussian"))
    assert result.stop_reason == "tolerance" and _psnr(result, x) > 80, result.message
    assert result.labels.tolist() == [2]


def test_granted_labels_are_returned():
    x, _ = _photos(0, shape=(8, 12))
    obs = _observe(_tiny_vit(), x, torch.tensor([1]), threat=ThreatModel(knows_labels=True))
    assert get_attack("april").reconstruct(obs).labels.tolist() == [1]


def test_a_noisy_message_is_rebuilt_roughly_and_reported_inconsistent():
    x, labels = _photos(0, shape=(8, 12))
    obs = _observe(_tiny_vit(), x, torch.tensor([0]))
    gen = torch.Generator().manual_seed(1)
    obs.y = obs.y + 1e-6 * obs.y.norm() / obs.y.numel() ** 0.5 * torch.randn(obs.y.shape, generator=gen,
                                                                              dtype=obs.y.dtype)
    result = get_attack("april").reconstruct(obs)
    assert result.stop_reason == "stalled" and "relative residual" in result.message
    assert 20 < _psnr(result, x) < 150


def test_a_square_sketch_with_a_null_space_is_named_among_the_causes():
    """A countsketch of b = d with empty buckets loses part of g: the note said "(noise, or several local steps)"
    of a run with neither; an unsketched noisy message does not name a sketch."""
    x, _ = _photos(0, shape=(8, 12))
    victim = _tiny_vit()
    result = get_attack("april").reconstruct(_observe(victim, x, torch.tensor([0]), "countsketch", b=victim.d))
    assert result.stop_reason == "stalled" and "a sketch with a null space" in result.message
    obs = _observe(_tiny_vit(), x, torch.tensor([0]))
    obs.y = obs.y * (1 + 1e-3 * torch.randn(obs.y.shape, generator=torch.Generator().manual_seed(1),
                                            dtype=obs.y.dtype))
    assert "null space" not in get_attack("april").reconstruct(obs).message


def _reason(obs):
    reason = April().supports(obs)
    assert reason is not None and reason.count(". ") == 0 and "gradient-matching" in reason
    with pytest.raises(AttackError, match="cannot run here"):
        April().reconstruct(obs)
    return reason


def test_refusals_name_what_is_missing_in_one_sentence():
    x, _ = _photos(0, shape=(8, 12))
    label = torch.tensor([0])
    fixed = _tiny_vit()  # a fixed table in place of the learnable embedding: no block of g holds dF/dz
    table = fixed.model.pos_embed.detach().clone()
    del fixed.model.pos_embed
    fixed.model.register_buffer("pos_embed", table)
    fixed = targets.Victim.from_module(fixed.model, input_shape=(3, 8, 12), num_classes=3, name="fixed-vit")
    assert "no learnable position embedding" in _reason(_observe(fixed, x, label))
    frozen = _tiny_vit()
    frozen.model.pos_embed.requires_grad_(False)
    frozen = targets.Victim.from_module(frozen.model, input_shape=(3, 8, 12), num_classes=3, name="frozen-vit")
    assert "no learnable position embedding" in _reason(_observe(frozen, x, label))
    zero_head = _tiny_vit()
    torch.nn.init.zeros_(zero_head.model.head.weight)
    assert "zero gradient at its patch embedding" in _reason(_observe(zero_head, x, label))
    xb, _ = _photos(0, count=2, shape=(8, 12))
    assert "batch of 2" in _reason(_observe(_tiny_vit(), xb, torch.tensor([0, 1])))
    lenet = targets.get_model("lenet", in_shape=(3, 8, 8), seed=0)
    assert "no patch embedding" in _reason(_observe(lenet, x[..., :8], label))
    victim = _tiny_vit()
    reason = _reason(_observe(victim, x, label, "srht", b=victim.d // 2))
    assert f"b = {victim.d // 2} numbers for d = {victim.d}" in reason and "-dimensional set" in reason


@pytest.mark.parametrize("args,words", [
    (["--model", "resnet18"], "no patch embedding"),
    (["--model", "vit_small", "--sketch", "srht", "--sketch-ratio", "0.5"], "does not determine them"),
])
def test_the_command_line_refuses_with_one_line_and_exit_2(tmp_path, capsys, args, words):
    out = tmp_path / "run"
    rc = cli.main(["run", *args, "--attack", "april", "--no-lpips", "--quiet", "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and words in lines[0], lines
    assert not out.exists()


@pytest.mark.slow
def test_torchvision_vit_b_16_is_found_and_inverted():
    # 86 M weights; its head is torchvision's zeros unless re-initialised
    x, labels = _photos(0)
    victim = targets.get_model("vit_b_16", in_shape=(3, 32, 32), seed=0, init="normal")
    result = get_attack("april").reconstruct(_observe(victim, x.float(), labels))
    assert result.stop_reason == "tolerance" and "encoder.pos_embedding" in result.message
    assert _psnr(result, x.float()) > 40


def test_experiment_passes_april_no_options_of_other_attacks():
    from leakattack.config import RunConfig
    from leakattack.experiment import attack_of

    assert isinstance(attack_of(RunConfig(model="vit_small", attack="april")), April)
