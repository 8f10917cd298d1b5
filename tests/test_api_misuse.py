"""What a hurried user of the Python API gets wrong is one sentence: images that are not in [0, 1], a loss that
does not reduce, a module that answers with a dict, data on another device, a dtype passed as nn.Module.to takes it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import targets
from leakattack import Channel, metrics, observe
from leakattack.errors import SettingWarning, UserError
from leakattack.sketch import get_sketch


def grey_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Sigmoid(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10))


class Scores(nn.Module):
    """Answers with a dict of scores, as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return {"logits": self.fc(x)}


def test_victim_to_takes_a_dtype_in_the_first_place_as_nn_module_to_does():
    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10)
    assert victim.to(torch.float64) is victim and victim.dtype == torch.float64
    assert victim.to("cpu", torch.float32).dtype == torch.float32
    with pytest.raises(TypeError, match="two dtypes"):
        victim.to(torch.float64, torch.float32)


@pytest.mark.parametrize("loss,needle", [
    (nn.CrossEntropyLoss, r"got the class CrossEntropyLoss itself: CrossEntropyLoss\(\)$"),
    (nn.CrossEntropyLoss(reduction="none"), r"returns a tensor of shape \(2,\) for a batch of 2, not one real number"),
    (nn.MSELoss(), r"fails on its scores and integer class labels \(RuntimeError: "),
])
def test_a_loss_that_cannot_score_a_batch_is_refused_when_the_module_is_wrapped(loss, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's broadcasting warning is not passed on
        with pytest.raises(UserError, match=needle):
            targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10, loss=loss)


def test_a_dict_output_is_told_to_return_the_scores_tensor():
    with pytest.raises(UserError, match=r"returns a dict for a batch of 2, not a tensor of \(2, 3\) class scores: wrap "
                                        r"it in a module whose forward returns that tensor"):
        targets.Victim.from_module(Scores(), input_shape=(12,), num_classes=3)


def test_a_grey_image_shape_gets_no_batch_dimension_hint_and_a_batched_one_does():
    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10)
    channel = Channel(get_sketch("none", victim.d, victim.d))
    with pytest.raises(UserError) as err:
        observe(victim, torch.rand(1, 28, 28), torch.tensor([3]), channel)
    assert "without the batch dimension" in str(err.value) and "input_shape=(28, 28)" not in str(err.value)
    assert targets.victim.batch_in_shape((1, 3, 32, 32)) and targets.victim.batch_in_shape((1, 784))
    assert not targets.victim.batch_in_shape((1, 28, 28))


def test_data_on_another_device_than_the_victim_is_one_sentence():
    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10)
    channel = Channel(get_sketch("none", victim.d, victim.d))
    with pytest.raises(UserError, match=r"^x is on meta, the labels on cpu and the victim on cpu: put them on one "):
        observe(victim, torch.empty(1, 1, 28, 28, device="meta"), torch.tensor([3]), channel)


@pytest.mark.parametrize("scale,shift", [(255.0, 0.0), (4.0, -2.0)])
def test_images_outside_0_1_are_warned_of_and_the_metrics_refuse_such_a_truth(scale, shift):
    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10)
    channel = Channel(get_sketch("none", victim.d, victim.d))
    x = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(0)) * scale + shift
    with pytest.warns(SettingWarning, match=r"^x holds values from .* and leakattack takes images in \[0, 1\]"):
        observe(victim, x, torch.tensor([3]), channel)
    with pytest.raises(metrics.MetricsError, match=r"^the truth holds values from .*the metrics take images in "):
        metrics.score(x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # images in [0, 1]: no word
        observe(victim, x.clamp(0, 1), torch.tensor([3]), channel)
    assert metrics.score(x.clamp(0, 1), x.clamp(0, 1))["psnr"] == pytest.approx(200.0)


def test_images_that_require_grad_are_observed_and_scored_without_a_word_and_keep_no_gradient():
    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10)
    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's own "Converting a tensor with requires_grad=True to a scalar" too
        obs = observe(victim, x, torch.tensor([3, 5]), Channel(get_sketch("none", victim.d, victim.d)))
        assert metrics.score(x.detach().flip(0), x, with_lpips=False)["match"] == [1, 0]
    assert not obs.y.requires_grad and x.grad is None


def test_integer_images_are_refused_by_the_metrics():
    x = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8)
    with pytest.raises(metrics.MetricsError, match=r"^the reconstruction is uint8; the metrics take floating-point "):
        metrics.score(x, x.float() / 255)
    with pytest.raises(metrics.MetricsError, match=r"^the truth is uint8"):
        metrics.score(x.float() / 255, x)


def test_a_channels_last_in_shape_is_warned_of_and_a_channels_first_one_is_not():
    with pytest.warns(SettingWarning, match=r"^model 'lenet' is built for 32 input channels of 32 x 3 pixels: .*"
                                            r"\(3, 32, 32\) may be what was meant"):
        targets.get_model("lenet", in_shape=(32, 32, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        targets.get_model("lenet", in_shape=(3, 32, 32))
        targets.get_model("lenet", in_shape=(1, 28, 28))


@pytest.mark.parametrize("size", [0, 28.5, True, 5000])
def test_an_image_size_that_is_no_pixel_count_is_one_sentence(size):
    from leakattack.data import DataError, get_dataset

    with pytest.raises(DataError, match=r"^image_size must be a whole number of pixels from 1 to 1024, got "):
        get_dataset("photos", image_size=size)


def test_images_too_small_to_score_are_warned_of_before_any_attack():
    """Below SSIM's window (11 px) assess refuses the reconstruction: said when the images are cut, not after."""
    import warnings

    from leakattack.data import SCORED_IMAGE_SIZE, get_dataset
    from leakattack.metrics import SSIM_WIN

    assert SCORED_IMAGE_SIZE == SSIM_WIN
    with pytest.warns(UserWarning, match=r"^images of 10x10 pixels cannot be scored: SSIM, and so assess\(\), needs "
                                         r"at least 11x11$"):
        assert get_dataset("photos", image_size=10).in_shape == (3, 10, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_dataset("photos", image_size=SCORED_IMAGE_SIZE)


def test_an_observation_whose_victim_changed_since_is_refused_by_every_attack():
    from leakattack import get_attack

    victim = targets.Victim.from_module(grey_net(), input_shape=(1, 28, 28), num_classes=10).to(torch.float64)
    x, labels = torch.rand(1, 1, 28, 28, dtype=torch.float64), torch.tensor([3])
    channel = Channel(get_sketch("none", victim.d, victim.d))
    attack = get_attack("gradient-matching", iterations=2, threads=1)
    obs = observe(victim, x, labels, channel)
    attack.reconstruct(obs)
    attack.reconstruct(obs)  # attacking leaves the weights as they were
    with torch.no_grad():
        next(victim.model.parameters()).add_(0.1)  # an optimiser's step
    with pytest.raises(UserError, match=r"^the victim's weights are not those this observation's message was made at "
                                        r"\(they were changed in place"):
        attack.reconstruct(obs)
    obs = observe(victim, x, labels, channel)
    # the same weights loaded again (a Flower client's load of the global model it already holds): written, not changed
    victim.model.load_state_dict({k: t.clone() for k, t in victim.model.state_dict().items()})
    attack.reconstruct(obs)
    with torch.no_grad():
        next(victim.model.parameters()).view(-1)[0] += 1e-12  # one weight, by 1e-12
    with pytest.raises(UserError, match=r"\(they were changed in place"):
        attack.reconstruct(obs)
    obs = observe(victim, x, labels, channel)
    next(victim.model.parameters()).requires_grad_(False)
    with pytest.raises(UserError, match=r"\(which weights are trainable changed since observe\)"):
        get_attack("rgap").reconstruct(obs)


def test_the_metrics_refuse_probabilities_as_labels_and_assess_names_what_it_takes():
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with pytest.raises(metrics.MetricsError, match=r"^the predicted labels must be class indices, got float32 values "
                                                   r"such as 0\.9 \(probabilities"):
        metrics.score(x, x, labels_hat=torch.tensor([1.0, 0.9]), labels=torch.tensor([1, 0]))
    assert metrics.score(x, x, labels_hat=torch.tensor([1.0, 0.0]), labels=torch.tensor([1, 0]))["label_acc"] == 1.0

    class Result:
        x = x0 = torch.rand(2, 3, 16, 16)
        labels = None

    with pytest.raises(metrics.MetricsError, match=r"^assess takes the truth x as a torch tensor .*got ndarray"):
        metrics.assess(Result(), x.numpy())
    with pytest.raises(metrics.MetricsError, match=r"^dataset must be the image set the truth comes from \(leakattack"
                                                   r"\.get_dataset\(name\)\) or None, got str 'photos'"):
        metrics.assess(Result(), x, dataset="photos")

    class NumpyResult:  # the reconstruction as a numpy array was an AttributeError ('detach') deep in scoring
        x, x0, labels = np.random.default_rng(0).random((2, 3, 16, 16)), torch.rand(2, 3, 16, 16), None

    with pytest.raises(metrics.MetricsError, match=r"^assess takes the result's x as a torch tensor of the truth's "
                                                   r"shape \(2, 3, 16, 16\), got ndarray$"):
        metrics.assess(NumpyResult(), x, with_lpips=False)


def test_a_module_whose_init_skips_super_init_is_one_sentence():
    class Bare(nn.Module):
        def __init__(self):
            self.width = 3

    with pytest.raises(UserError, match=r"^model Bare is an nn.Module whose __init__ at .*test_api_misuse.py:\d+ does "
                                        r"not call super\(\).__init__\(\) first"):
        targets.Victim.from_module(Bare(), input_shape=(3,), num_classes=2)


def test_running_statistics_changed_since_observe_are_refused_and_a_probe_that_restores_them_is_not():
    """The gradient of a BatchNorm in eval mode reads its running statistics: the message was made with those."""
    from leakattack import get_attack

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    victim = targets.Victim.from_module(model, input_shape=(3, 8, 8), num_classes=3, bn_mode="eval")
    channel = Channel(get_sketch("none", victim.d, victim.d, seed=0))
    obs = observe(victim, torch.rand(1, 3, 8, 8), torch.tensor([1]), channel)
    attack = get_attack("gradient-matching", iterations=2, threads=1)
    attack.reconstruct(obs)
    attack.reconstruct(obs)  # its probes restore the buffers they move
    model.train()
    model(torch.rand(4, 3, 8, 8))  # a training step's forward pass moves the running statistics
    with pytest.raises(UserError, match=r"^the victim's weights are not those this observation's message was made at "
                                        r"\(its buffers .1\.running_mean., .1\.running_var., .1\.num_batches_tracked. "
                                        r"changed in place \(BatchNorm's running statistics"):
        attack.reconstruct(obs)
    assert attack.reconstruct(observe(victim, torch.rand(1, 3, 8, 8), torch.tensor([1]), channel)) is not None


@pytest.mark.parametrize("given,words", [(nn.Linear(3, 2), "the module Linear"), (nn.Linear, "the class Linear")])
def test_get_model_given_a_module_points_to_from_module(given, words):
    with pytest.raises(UserError, match=rf"^get_model takes a model's name, got {words}: wrap a module you built with "
                                        r"Victim\.from_module\(module, input_shape=\.\.\., num_classes=\.\.\.\)$"):
        targets.get_model(given)


def test_dir_lists_the_entry_points_resolved_on_first_use():
    """dir(leakattack), and with it a notebook's tab completion, listed none of the README's entry points (they are
    resolved on first use) and listed the module's own import of importlib."""
    import leakattack

    names = dir(leakattack)
    assert set(leakattack.__all__) <= set(names)
    assert {"get_attack", "observe", "Channel", "assess", "get_sketch", "__version__"} <= set(names)
    assert "importlib" not in names and names == sorted(names)
    for name in leakattack.__all__:
        assert getattr(leakattack, name) is not None
