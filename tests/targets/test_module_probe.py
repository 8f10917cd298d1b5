"""A module of the user's is probed once when it is wrapped: a forward that changes a buffer, or an output that
autograd cannot follow back to the input, is refused in one sentence, and one whose output is random in eval mode is
warned of; the client's mode holds at every observation and attack, whatever the module was switched to since."""

import math
import warnings

import pytest
import torch
from torch import nn

import targets
from leakattack import Channel, ThreatModel, get_attack, get_sketch, observe
from leakattack.errors import SettingWarning, UserError


class RunningMean(nn.Module):
    """Subtracts a running mean of its inputs that every forward pass updates."""

    def __init__(self, guarded: bool = False):
        super().__init__()
        self.guarded = guarded
        self.register_buffer("ema", torch.zeros(()))
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        if self.training or not self.guarded:
            with torch.no_grad():
                self.ema.mul_(0.5).add_(0.5 * x.mean())
        return self.fc(x - self.ema)


class Tokens(nn.Module):
    """Casts its input to integer tokens and embeds them."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(256, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.emb((x * 255).long().clamp(0, 255)).mean(1))


class Rounded(nn.Module):
    """Rounds its input to 8 bits before a linear layer: a derivative of zero in the input everywhere."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(torch.round(x * 255) / 255)


def test_a_forward_that_updates_a_buffer_is_refused_naming_it():
    with pytest.raises(UserError, match=r"model 'custom' changes its buffer 'ema' in a forward pass.*self\.training"):
        targets.Victim.from_module(RunningMean(), input_shape=(12,), num_classes=3)
    net = RunningMean(guarded=True)  # the update the message asks for: only in training mode
    victim = targets.Victim.from_module(net, input_shape=(12,), num_classes=3)
    assert float(net.ema) == 0.0 and victim.d == 39


def test_an_output_autograd_cannot_follow_to_the_input_is_refused_and_a_zero_derivative_warned_of():
    with pytest.raises(UserError, match=r"^the output of model 'custom' does not depend on its input through "
                                        r"operations autograd differentiates \(\.detach\(\), torch\.no_grad\(\), "
                                        r"an integer cast") as err:
        targets.Victim.from_module(Tokens(), input_shape=(12,), num_classes=3)
    assert str(err.value).count(". ") == 0

    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.fc = nn.Linear(12, 4), nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(self.first(x).detach())

    with pytest.raises(UserError, match=r"does not depend on its input through operations autograd differentiates "
                                        r"\(\.detach\(\)"):
        targets.Victim.from_module(Detached(), input_shape=(12,), num_classes=3)

    class NoGradBackbone(Detached):
        def forward(self, x):
            with torch.no_grad():
                f = self.first(x)
            return self.fc(f)

    # the usual frozen backbone: the fix named is requires_grad_(False), where it said only "real-valued input"
    with pytest.raises(UserError, match=r"freeze a backbone with requires_grad_\(False\), not torch\.no_grad\(\)"):
        targets.Victim.from_module(NoGradBackbone(), input_shape=(12,), num_classes=3)
    with pytest.warns(SettingWarning, match="has a derivative of zero in its input at a random input"):
        targets.Victim.from_module(Rounded(), input_shape=(12,), num_classes=3)


class Centred(nn.Module):
    """Class scores centred to mean zero (cross-entropy unchanged): their plain sum is constant in the input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        out = self.fc(x)
        return out - out.mean(1, keepdim=True)


class ReadsNaN(nn.Module):
    """Reads, and never writes, a buffer that holds a NaN."""

    def __init__(self):
        super().__init__()
        self.register_buffer("m", torch.tensor([float("nan"), 2.0]))
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(x) * self.m[1]


class Noisy(nn.Module):
    """Adds fresh Gaussian noise to its input in every forward pass, eval mode included."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc(x + 0.01 * torch.randn_like(x))


def test_a_forward_that_gives_two_outputs_for_one_input_in_eval_mode_is_warned_of():
    with pytest.warns(SettingWarning, match=r"^model 'custom' gives two different outputs for the same input in "
                                            r"eval mode \(random noise or sampling in forward\?\)"):
        assert targets.Victim.from_module(Noisy(), input_shape=(12,), num_classes=3).d == 39


@pytest.mark.parametrize("module", [Centred, ReadsNaN])
def test_modules_that_are_attackable_are_wrapped_without_a_word(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert targets.Victim.from_module(module(), input_shape=(12,), num_classes=3).d == 39


def test_the_clients_mode_holds_after_the_module_is_switched_to_training():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 3)).double()
    victim = targets.Victim.from_module(net, input_shape=(12,), num_classes=3)
    x, labels = torch.rand(1, 12, dtype=torch.float64), torch.tensor([1])
    channel = Channel(get_sketch("none", victim.d, victim.d), defense="")
    first = observe(victim, x, labels, channel, ThreatModel())
    net.train()  # dropout on, as a user's training loop leaves it
    assert torch.equal(observe(victim, x, labels, channel, ThreatModel()).y, first.y)
    net.train()
    result = get_attack("gradient-matching", iterations=5, threads=1).reconstruct(first)
    assert not net.training and math.isfinite(result.final_loss)


def test_a_model_files_class_attributes_from_module_does_not_read_are_warned_of():
    """leakattack_loss = CrossEntropyLoss(label_smoothing=0.2) on the class was read by the command line and
    silently not by Victim.from_module, whose message came from plain cross-entropy."""

    class Smoothed(nn.Module):
        leakattack_loss = nn.CrossEntropyLoss(label_smoothing=0.2)
        leakattack_head = "fc"

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x):
            return self.fc(x)

    net = Smoothed()
    with pytest.warns(SettingWarning, match=r"model 'custom' defines leakattack_loss \(give loss=\), leakattack_head "
                                            r"\(give head=\), which Victim\.from_module does not read"):
        targets.Victim.from_module(net, input_shape=(12,), num_classes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        targets.Victim.from_module(net, input_shape=(12,), num_classes=3, loss=net.leakattack_loss, head=net.fc)
