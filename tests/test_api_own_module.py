"""A researcher's own nn.Module through the Python API: a weight the forward pass never uses, the module's modes
given back after the attack (also when it was wrapped twice or refused), a closed-form attack judged as one, a
regression's targets, a data set of another shape, the example models at images of any size."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import targets
from leakattack import Channel, ThreatModel, assess, get_attack, get_dataset, get_sketch, metrics, observe
from leakattack.errors import UserError


class Unused(nn.Module):
    """A model with a layer its forward pass never calls (an auxiliary head left in the module)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 4)
        self.extra = nn.Linear(5, 5)

    def forward(self, x):
        return self.fc(torch.sigmoid(x.flatten(1)))


def test_a_weight_the_forward_pass_never_uses_has_a_zero_gradient_and_the_attack_runs(monkeypatch):
    from leakattack.attacks import gradient_matching

    monkeypatch.setattr(gradient_matching, "SLOWER", math.inf)  # the batch is kept by agreement, not by a timing
    torch.manual_seed(0)
    net = Unused().double()
    victim = targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=4, head=net.fc)
    x, labels = torch.rand(1, 3, 4, 4, dtype=torch.float64), torch.tensor([2])
    g = targets.flat_gradient(victim, x, labels)
    assert g.shape == (victim.d,) == (48 * 4 + 4 + 5 * 5 + 5,)
    assert torch.equal(g[-30:], torch.zeros(30, dtype=torch.float64)) and g[:-30].abs().max() > 0
    obs = observe(victim, x, labels, Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1)))
    result = get_attack("gradient-matching", iterations=30, init_seed=2).reconstruct(obs)
    assert result.final_loss < result.losses[0]
    batched = get_attack("gradient-matching", iterations=3, init_seed=2, restarts=2, optimizer="adam",
                         refine="none").reconstruct(obs)
    assert batched.restart_path == "batched"


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.drop(torch.sigmoid(self.bn(self.conv(x)))).flatten(1))


@pytest.mark.parametrize("bn_mode", ["train", "eval"])
def test_release_gives_the_module_back_in_the_modes_it_came_in(bn_mode):
    torch.manual_seed(0)
    net = BNNet().train()
    before = {name: m.training for name, m in net.named_modules()}
    state = {k: v.clone() for k, v in net.state_dict().items()}
    with targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10, bn_mode=bn_mode) as victim:
        assert not net.drop.training  # the client's mode: no dropout
        assert net.bn.track_running_stats is (bn_mode == "eval")
        obs = observe(victim, torch.rand(2, 3, 8, 8), torch.tensor([1, 3]), Channel(get_sketch("none", victim.d, None)),
                      ThreatModel(knows_labels=True))
        get_attack("gradient-matching", iterations=2, labels="given", optimizer="adam").reconstruct(obs)
    assert {name: m.training for name, m in net.named_modules()} == before
    assert net.bn.track_running_stats
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())  # the attack moved no buffer
    net(torch.rand(8, 3, 8, 8))  # the user's own training step tracks the running statistics again
    assert not torch.equal(net.bn.running_mean, state["bn.running_mean"])
    assert victim.release() is net


def modes(net: nn.Module) -> list:
    """Each module's training flag and, for a BatchNorm, whether it tracks running statistics."""
    return [(name, m.training, getattr(m, "track_running_stats", None)) for name, m in net.named_modules()]


@pytest.mark.parametrize("bn_mode", ["train", "eval"])
def test_a_module_wrapped_twice_goes_back_to_the_modes_it_had_before_the_first_victim(bn_mode):
    net = BNNet().train()
    before = modes(net)
    first = targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10, bn_mode=bn_mode)
    again = targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10, bn_mode=bn_mode)  # a cell re-run
    assert modes(net) != before
    again.release()
    assert modes(net) == before
    first.set_mode()  # the first victim's next observe or attack takes the module again
    first.release()
    assert modes(net) == before


def test_a_module_refused_when_wrapped_is_given_back_in_the_modes_it_came_in():
    net = BNNet().train()
    before = modes(net)
    with pytest.raises(UserError, match="fails on a batch"):
        targets.Victim.from_module(net, input_shape=(3, 9, 9), num_classes=10)
    assert modes(net) == before
    targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10).release()
    assert modes(net) == before


def test_a_closed_form_reconstruction_is_judged_without_a_start_and_reads_rebuilt():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(432, 8), nn.Sigmoid(), nn.Linear(8, 4)).double()
    victim = targets.Victim.from_module(net, input_shape=(3, 12, 12), num_classes=4)
    x = torch.rand(1, 3, 12, 12, dtype=torch.float64)
    obs = observe(victim, x, torch.tensor([1]), Channel(get_sketch("none", victim.d, None)), ThreatModel())
    result = get_attack("analytic").reconstruct(obs)
    assert result.closed_form
    judged = assess(result, x, torch.tensor([1]), with_lpips=False)
    assert judged["psnr"] > 100 and judged["verdict"] == "rebuilt" and judged["baseline_start_psnr"] is None
    # a result of gradient matching keeps its start as a baseline
    result = get_attack("gradient-matching", iterations=2, init_seed=2).reconstruct(obs)
    assert not result.closed_form
    assert assess(result, x, torch.tensor([1]), with_lpips=False)["baseline_start_psnr"] is not None


def test_a_regressions_targets_are_not_scored_as_labels():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(432, 6), nn.Sigmoid(), nn.Linear(6, 1))
    victim = targets.Victim.from_module(net, input_shape=(3, 12, 12), num_classes=1, task="regression")
    x, t = torch.rand(1, 3, 12, 12), torch.tensor([0.7])
    obs = observe(victim, x, t, Channel(get_sketch("none", victim.d, None)), ThreatModel(knows_labels=True))
    result = get_attack("gradient-matching", iterations=3, labels="given", optimizer="adam").reconstruct(obs)
    judged = assess(result, x, t, with_lpips=False)
    assert judged["label_acc"] is None and judged["verdict"] in ("rebuilt", "not rebuilt")


def test_the_label_rules_refusal_names_the_python_spelling_too():
    net = nn.Sequential(nn.Flatten(), nn.Linear(48, 6), nn.Sigmoid(), nn.Linear(6, 1))
    victim = targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=1, task="regression")
    obs = observe(victim, torch.rand(1, 3, 4, 4), torch.tensor([0.7]), Channel(get_sketch("none", victim.d, None)),
                  ThreatModel(knows_labels=False))
    # a regression's targets are real numbers, which dlg's soft class labels cannot be: given labels alone
    with pytest.raises(Exception, match=r"use --labels given \(labels='given' with "
                                        r"ThreatModel\(knows_labels=True\) in Python\)$"):
        get_attack("gradient-matching", iterations=2).reconstruct(obs)


def test_assess_refuses_a_data_set_of_another_shape_in_one_sentence():
    x = torch.rand(1, 3, 32, 32)

    class Result:
        x0 = x
        labels = None

    Result.x = x
    with pytest.raises(metrics.MetricsError, match=r"^dataset 'digits' holds 1x28x28 images and the truth is "
                                                   r"3x32x32: give the data set the truth comes from"):
        assess(Result(), x, dataset=get_dataset("digits"), with_lpips=False)


def test_a_match_with_fewer_numbers_than_unknowns_says_from_python_too_that_it_is_not_unique():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(432, 8), nn.Sigmoid(), nn.Linear(8, 4)).double()
    victim = targets.Victim.from_module(net, input_shape=(3, 12, 12), num_classes=4)
    x = torch.rand(1, 3, 12, 12, dtype=torch.float64)
    obs = observe(victim, x, torch.tensor([1]), Channel(get_sketch("gaussian", victim.d, 100, seed=1)),
                  ThreatModel(knows_labels=True))
    result = get_attack("gradient-matching", iterations=300, init_seed=2, labels="given").reconstruct(obs)
    assert result.stop_reason == "tolerance"
    assert result.message.endswith("but with b = 100 numbers for m*B = 432 unknowns another input matches as well: "
                                   "the match is not unique")
    assert assess(result, x, torch.tensor([1]), with_lpips=False)["verdict"] == "not rebuilt"


@pytest.mark.parametrize("model", ["relu_models.py:ReluCNN", "relu_models.py:PooledCNN", "client_model.py:ClientNet"])
@pytest.mark.parametrize("in_shape", [(3, 32, 32), (1, 28, 28), (3, 30, 30), (1, 13, 11)])
def test_the_example_models_take_images_of_any_size(model, in_shape):
    examples = Path(__file__).resolve().parents[1] / "examples"
    victim = targets.get_model(f"{examples / model}", in_shape=in_shape, num_classes=4)  # as --model FILE:CLASS
    assert victim.model(torch.rand(2, *in_shape)).shape == (2, 4)


class Gated(nn.Module):
    """MobileNetV3's units: a convolution with hard-swish, a squeeze-and-excitation gate through nn.Hardsigmoid (both
    in place, as torchvision builds them), and F.hardsigmoid called in forward."""

    def __init__(self, functional: bool = False):
        super().__init__()
        self.functional = functional
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.Hardswish(inplace=True)
        self.squeeze, self.excite = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.gate = nn.Hardsigmoid(inplace=True)
        self.fc = nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):
        a = self.act(self.conv(x))
        s = self.excite(torch.relu(self.squeeze(a.mean((2, 3), keepdim=True))))
        s = torch.nn.functional.hardsigmoid(s) if self.functional else self.gate(s)
        return self.fc((a * s).flatten(1))


@pytest.mark.parametrize("functional", [False, True])
def test_a_hardsigmoid_gate_is_differentiated_twice_and_its_gradient_is_autograds(functional):
    torch.manual_seed(0)
    net = Gated(functional).double()
    victim = targets.Victim.from_module(net, input_shape=(3, 6, 6), num_classes=4)
    x, labels = torch.rand(2, 3, 6, 6, dtype=torch.float64), torch.tensor([1, 3])
    params = [p for p in net.parameters() if p.requires_grad]
    expected = torch.cat([t.reshape(-1) for t in torch.autograd.grad(
        torch.nn.functional.cross_entropy(net(x), labels), params)])
    assert victim.d == sum(p.numel() for p in params) == expected.numel()
    # torch's float64 hardsigmoid kernel scales its derivative by 1/6 rounded to float32: 3e-8 apart
    assert torch.allclose(targets.flat_gradient(victim, x, labels), expected, rtol=1e-6, atol=1e-12)
    obs = observe(victim, x, labels, Channel(get_sketch("none", victim.d, None)), ThreatModel(knows_labels=True))
    result = get_attack("gradient-matching", iterations=4, labels="given", init_seed=1).reconstruct(obs)
    assert math.isfinite(result.final_loss) and result.final_loss < result.losses[0]


def test_a_zero_initialised_head_is_no_zero_derivative():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(48, 8), nn.Tanh(), nn.Linear(8, 4))
    nn.init.zeros_(net[3].weight)  # torchvision's ViT starts so: a constant output, and a gradient that is not
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=4)


class _Back(torch.autograd.Function):
    """A backward pass, 2 x g, whose own derivative is missing (as a kernel without double backward)."""

    @staticmethod
    def forward(ctx, x, g):
        return 2 * x * g

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("derivative for square_backward is not implemented")


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return _Back.apply(x, g)


class OnceDifferentiable(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.fc = nn.Linear(12, 6), nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(_Square.apply(self.a(x)))


def test_a_gradient_autograd_cannot_differentiate_again_is_refused_in_one_sentence():
    net = OnceDifferentiable()
    with pytest.raises(UserError, match=r"^the gradient of model 'custom' cannot be differentiated in its input "
                                        r"\(RuntimeError: derivative for square_backward is not implemented\)") as err:
        targets.Victim.from_module(net, input_shape=(12,), num_classes=3)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("dtype,digits", [(torch.float16, 3), (torch.bfloat16, 2)])
def test_a_half_precision_model_is_refused_in_one_sentence(dtype, digits):
    net = nn.Sequential(nn.Flatten(), nn.Linear(48, 8), nn.Tanh(), nn.Linear(8, 4))
    said = rf"^model 'custom' holds {str(dtype)[6:]} weights, .* {digits} significant digits .*\(model\.float\(\)\)"
    with pytest.raises(UserError, match=said):
        targets.Victim.from_module(net.to(dtype), input_shape=(3, 4, 4), num_classes=4)
    victim = targets.Victim.from_module(net.float(), input_shape=(3, 4, 4), num_classes=4)
    with pytest.raises(UserError, match=said):
        victim.to(dtype)
    assert victim.dtype == torch.float32
    net.to(dtype)  # the module moved behind the victim's back: observing it says the same
    with pytest.raises(UserError, match=said[1:]):
        observe(victim, torch.rand(1, 3, 4, 4, dtype=dtype), torch.tensor([1]),
                Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1)))


def test_a_text_model_that_takes_token_ids_is_refused_naming_its_embedding():
    net = nn.Sequential(nn.Embedding(100, 8), nn.Flatten(), nn.Linear(8 * 12, 4))
    with pytest.raises(UserError, match=r"its nn\.Embedding takes integer token ids, and an attack rebuilds "
                                        r"real-valued inputs .*input_shape=\(length, embedding dim\)\)$"):
        targets.Victim.from_module(net, input_shape=(12,), num_classes=4)


class Tied(nn.Module):
    """Two layers that share one weight matrix (tied weights): its gradient is the sum of both uses."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.fc = nn.Linear(48, 6), nn.Linear(6, 6), nn.Linear(6, 6), nn.Linear(6, 4)
        self.c.weight = self.b.weight

    def forward(self, x):
        return self.fc(torch.tanh(self.c(torch.tanh(self.b(torch.tanh(self.a(x.flatten(1))))))))


def test_a_tied_weight_takes_both_uses_in_the_gradient_and_in_the_batched_restarts():
    from targets.oracle import restart_gradients

    torch.manual_seed(0)
    net = Tied().double()
    victim = targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=4)
    assert victim.d == 48 * 6 + 6 + (36 + 6) + 6 + 6 * 4 + 4  # the shared matrix counted once
    xs, labels = torch.rand(3, 2, 3, 4, 4, dtype=torch.float64), torch.tensor([[1, 2], [0, 3], [2, 2]])
    params = list(net.parameters())
    for x, y in zip(xs, labels):
        expected = torch.autograd.grad(torch.nn.functional.cross_entropy(net(x), y), params)
        assert torch.allclose(targets.flat_gradient(victim, x, y), torch.cat([t.reshape(-1) for t in expected]),
                              rtol=1e-12, atol=1e-14)
    rows = torch.stack([targets.flat_gradient(victim, x, y) for x, y in zip(xs, labels)])
    assert torch.allclose(restart_gradients(victim, xs, labels), rows, rtol=1e-10, atol=1e-12)


class _GatedConv(torch.nn.Module):
    """A convolutional classifier whose only nn.Linear layers are a squeeze-and-excitation gate (16 outputs)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.se1, self.se2 = torch.nn.Linear(16, 4), torch.nn.Linear(4, 16)
        self.cls = torch.nn.Conv2d(16, 10, 1)

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        h = h * torch.sigmoid(self.se2(torch.tanh(self.se1(h.mean((2, 3))))))[:, :, None, None]
        return self.cls(h).mean((2, 3))


def test_linear_gates_behind_a_convolutional_head_are_no_head_and_a_warning():
    from leakattack.errors import SettingWarning

    with pytest.warns(SettingWarning, match="the last registered one its forward pass calls, 'se2', has 16 outputs, "
                                            "not the 10 classes: it has no classifier head for the label rules to "
                                            "read"):
        victim = targets.Victim.from_module(_GatedConv(), input_shape=(1, 8, 8), num_classes=10)
    assert victim.head is None


def test_head_takes_a_layers_name_as_leakattack_head_does():
    """Victim.from_module warned "(give head=)" for a class's leakattack_head = "fc", then refused head="fc" as not
    an nn.Linear: the name is read as the module's submodule."""
    net = Unused()
    assert targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=4, head="fc").head is net.fc
    with pytest.raises(UserError, match="^head= of model 'custom' names no submodule 'nope'; its nn.Linear layers: "
                                        "fc, extra$"):
        targets.Victim.from_module(Unused(), input_shape=(3, 4, 4), num_classes=4, head="nope")
    with pytest.raises(UserError, match="scores the classes, and Linear\\(in_features=5, out_features=5"):
        targets.Victim.from_module(Unused(), input_shape=(3, 4, 4), num_classes=4, head="extra")
