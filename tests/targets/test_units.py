"""Units whose derivative jumps (ReLU's family, max pooling), found on the meta device, and the recipe they choose
for a model without one of its own."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import targets
from leakattack.config import RunConfig
from leakattack.data import input_shape
from leakattack.errors import UserError
from targets.models.units import piecewise_units

NETS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Smooth(nn.Module):
    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__()
        self.conv = nn.Conv2d(in_shape[0], 4, 3, padding=1)
        self.fc = nn.Linear(4 * in_shape[1] * in_shape[2], num_classes)

    def forward(self, x):
        return self.fc(F.gelu(torch.tanh(self.conv(x))).flatten(1).softmax(-1))


class Functional(Smooth):
    def forward(self, x):  # ReLU by a call, no module
        return self.fc(F.relu(self.conv(x)).flatten(1))


class Pooled(Smooth):
    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__(num_classes, (in_shape[0], in_shape[1] // 2, in_shape[2] // 2))

    def forward(self, x):
        return self.fc(F.max_pool2d(torch.sigmoid(self.conv(x)), 2).flatten(1))


class Digits(nn.Module):  # built for 1x28x28 only: its forward fails on any other shape
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes)

    def forward(self, x):
        return self.fc(x.view(x.shape[0], 28 * 28).relu())


class Opaque(Smooth):  # needs real values: its forward fails on the meta device
    def forward(self, x):
        if float(x.sum()) > 0:
            x = x * 2
        return self.fc(F.relu(self.conv(x)).flatten(1))


class OpaqueModule(Opaque):
    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__(num_classes, in_shape)
        self.act = nn.ReLU()


class Named(Functional):
    leakattack_recipe = "dlg"


class Clamped(Smooth):
    def forward(self, x):  # a ReLU written as a clamp
        return self.fc(self.conv(x).clamp(min=0).flatten(1))


class Maximum(Smooth):
    def forward(self, x):  # a ReLU written as an elementwise maximum
        h = self.conv(x)
        return self.fc(torch.maximum(h, torch.zeros_like(h)).flatten(1))


class Absolute(Smooth):
    def forward(self, x):  # abs: its derivative jumps at 0
        return self.fc(self.conv(x).abs().flatten(1))


class Gated(Smooth):
    def forward(self, x):  # a ReLU written as a gate
        h = self.conv(x)
        return self.fc(torch.where(h > 0, h, 0.0).flatten(1))


class Masked(Smooth):
    def forward(self, x):  # a ReLU written as a product with its own mask
        h = self.conv(x)
        return self.fc((h * (h >= 0)).flatten(1))


class GlobalMax(Smooth):
    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__(num_classes, (in_shape[0], 1, 1))

    def forward(self, x):  # a global max pooling written out
        return self.fc(torch.sigmoid(self.conv(x)).amax(dim=(2, 3)))


class FixedMask(Smooth):
    def __init__(self, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__(num_classes, in_shape)
        self.register_buffer("keep", torch.ones(4, in_shape[1], in_shape[2]))

    def forward(self, x):  # comparisons of a fixed mask, not of an activation: smooth
        h = torch.tanh(self.conv(x)).masked_fill(self.keep == 0, 0.0) * (self.keep > 0.5)
        return self.fc(h.flatten(1))
'''


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    path = tmp_path_factory.mktemp("units") / "nets.py"
    path.write_text(NETS)
    return lambda name: f"{path}:{name}"


def test_modules_and_calls_whose_derivative_jumps_are_found_and_smooth_ones_are_not():
    with torch.device("meta"):
        smooth = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sigmoid(), nn.SiLU(), nn.ELU(), nn.GELU(), nn.Softplus(),
                               nn.Flatten(), nn.Linear(4 * 30 * 30, 10), nn.Softmax(-1))
        pooled = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 15 * 15, 10))
        leaky = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 8), nn.LeakyReLU(), nn.Linear(8, 10))
    assert piecewise_units(smooth, (3, 32, 32)) == []
    assert piecewise_units(pooled) == ["MaxPool2d"] == piecewise_units(pooled, (3, 32, 32))  # modules answer first
    assert piecewise_units(leaky, (3, 32, 32)) == ["LeakyReLU"]
    with torch.device("meta"):
        called = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
        called.forward = lambda x: nn.functional.hardtanh(x).flatten(1) @ torch.ones(3 * 32 * 32, 10, device=x.device)
    assert piecewise_units(called) == [] and piecewise_units(called, (3, 32, 32)) == ["hardtanh"]


def test_a_forward_pass_on_the_meta_device_sees_calls_that_no_module_shows(nets):
    assert targets.units_of(nets("Smooth")) == []
    assert targets.units_of(nets("Functional")) == ["relu"]
    assert targets.units_of(nets("Pooled")) == ["max_pool2d"]
    assert targets.units_of(nets("Clamped")) == ["clamp"]  # was [], and the model took dlg
    assert targets.units_of(nets("Maximum")) == ["maximum"] and targets.units_of(nets("Absolute")) == ["abs"]
    # a comparison or selection of an activation (were: [], and the model took dlg), not one of a fixed mask
    assert targets.units_of(nets("Gated")) == ["gt"] and targets.units_of(nets("Masked")) == ["ge"]
    assert targets.units_of(nets("GlobalMax")) == ["amax"] and targets.units_of(nets("FixedMask")) == []
    # a forward that needs real values leaves the modules' answer
    assert targets.units_of(nets("Opaque")) == []
    assert targets.units_of(nets("OpaqueModule")) == ["ReLU"]


def test_a_registered_models_units_are_read_from_its_modules_without_a_forward_pass():
    import subprocess
    import sys
    code = ("import sys, targets; print(targets.recipe_of('lenet'), targets.recipe_of('lenet', act='relu'), "
            "'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["dlg", "ig", "False"], out.stdout + out.stderr


def test_a_model_without_a_recipe_of_its_own_takes_ig_for_jumping_units_and_dlg_for_smooth_ones(nets):
    assert targets.own_recipe("lenet") is None and targets.own_recipe("resnet18") == "ig"
    assert targets.recipe_of("lenet") == "dlg" and targets.recipe_of("lenet", act="relu") == "ig"
    assert targets.recipe_of("logreg") == "dlg"
    assert targets.recipe_of("mlp", act="relu") == "dlg"  # measured: dlg beats ig on the ReLU MLP (docs)
    assert targets.recipe_of(nets("Smooth")) == "dlg"
    assert targets.recipe_of(nets("Functional")) == "ig" and targets.recipe_of(nets("Pooled")) == "ig"
    assert targets.recipe_of(nets("Clamped")) == "ig"
    assert targets.recipe_of(nets("Named")) == "dlg"  # the class's own recipe wins
    assert targets.recipe_of(nets("Opaque")) == "dlg"  # nothing seen: the smooth models' recipe
    # measured recipes stay: resnet18 with a smooth activation is still ig, vit_small (GELU) dlg
    assert targets.recipe_of("resnet18", act="sigmoid") == "ig" and targets.recipe_of("vit_small") == "dlg"


def test_the_configuration_asks_with_its_data_sets_image_shape(nets):
    assert RunConfig(model="lenet", model_params={"act": "relu"}).derived().recipe == "ig"
    assert RunConfig(model="lenet").derived().recipe == "dlg"
    # Digits' forward runs only on 1x28x28: its ReLU call is seen for the digits, not for the 3x32x32 photos
    assert RunConfig(model=nets("Digits"), dataset="digits").derived().recipe == "ig"
    assert RunConfig(model=nets("Digits"), dataset="photos").derived().recipe == "dlg"
    assert RunConfig(model=nets("Functional"), recipe="dlg").derived().optimizer == "lbfgs"  # a named recipe wins


def test_image_shapes_are_known_without_loading_the_data_set():
    assert input_shape("photos") == (3, 32, 32) and input_shape("photos", 64) == (3, 64, 64)
    assert input_shape("digits") == (1, 28, 28) and input_shape("mnist") == (1, 28, 28)
    assert input_shape("cifar100") == (3, 32, 32) and input_shape("imagefolder", 96) == (3, 96, 96)
    assert input_shape("digits", 64) == (1, 28, 28)  # a fixed size stays
    assert input_shape("nowhere") is None


def test_a_built_victim_takes_the_recipe_the_command_line_gives_its_model():
    assert targets.victim_recipe(targets.get_model("lenet")) == "dlg"
    assert targets.victim_recipe(targets.get_model("lenet", act="relu")) == "ig"
    assert targets.victim_recipe(targets.get_model("mlp", act="relu")) == "dlg"
    assert targets.victim_recipe(targets.get_model("resnet20")) == "ig"


class _Called(nn.Module):  # ReLU only by a call, beside a BatchNorm in train mode
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def test_a_wrapped_module_is_run_forward_once_and_left_as_it_was():
    net = _Called()
    victim = targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10)
    buffers = [b.clone() for b in net.buffers()]
    assert targets.victim_recipe(victim) == "ig"
    assert all(torch.equal(a, b) for a, b in zip(buffers, net.buffers(), strict=True))  # running statistics kept
    smooth = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sigmoid(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
    assert targets.victim_recipe(targets.Victim.from_module(smooth, input_shape=(3, 8, 8), num_classes=10)) == "dlg"
    net.leakattack_recipe = "dlg"  # an instance attribute is not the class's: the units still decide
    assert targets.victim_recipe(victim) == "ig"
    _Called.leakattack_recipe = "dlg"
    try:
        assert targets.victim_recipe(victim) == "dlg"
    finally:
        del _Called.leakattack_recipe


def test_recipe_options_build_the_attack_the_command_line_runs():
    from leakattack.attacks import get_attack, get_recipe, recipe_options
    from leakattack.experiment import attack_of

    for name in ("dlg", "ig"):
        api = get_attack("gradient-matching", **recipe_options(name))
        cli = attack_of(RunConfig(model="lenet", recipe=name, device="cpu"))
        fields = ("optimizer", "iterations", "lr", "objective", "schedule", "signed", "priors", "box", "time_limit",
                  "surrogate")
        assert {f: getattr(api, f) for f in fields} == {f: getattr(cli, f) for f in fields}
    # a batch that BatchNorm normalises by its own statistics takes the recipe's TV weight for it, as the CLI does
    victim = targets.get_model("resnet20", num_classes=10, in_shape=(3, 32, 32), seed=0, bn_mode="train")
    api = get_attack("gradient-matching", **recipe_options("ig", batch_size=4, victim=victim))
    cli = attack_of(RunConfig(model="resnet20", batch_size=4, device="cpu"))
    assert api.priors == cli.priors == {"tv": get_recipe("ig").tv_for(4, batch_statistics=True)} != {"tv": 0.02}


@pytest.mark.parametrize("kwargs,said", [({"batch_size": 0}, "batch_size must be an integer of at least 1"),
                                         ({"batch_size": 4.5}, "got float 4.5"),
                                         ({"batch_size": "4"}, "got str '4'"),
                                         ({"victim": "resnet20"}, "victim must be the targets.Victim")])
def test_recipe_options_refuse_a_batch_size_or_victim_they_cannot_read_in_one_sentence(kwargs, said):
    from leakattack.attacks import recipe_options

    victim = targets.get_model("resnet20", num_classes=10, in_shape=(3, 32, 32), seed=0, bn_mode="train")
    with pytest.raises(UserError, match=said):
        recipe_options("ig", **{"batch_size": 4, "victim": victim, **kwargs})


def test_list_says_a_class_needing_parameters_takes_its_recipe_once_built(tmp_path, capsys):
    """`list --model file.py:Args` said "recipe dlg (its class cannot be built on the meta device)" for a ReLU class
    that needs --model-param width, which a run with it attacks with ig."""
    from leakattack import cli

    path = tmp_path / "args.py"
    path.write_text(NETS + '''

class Args(Functional):
    def __init__(self, width, num_classes=10, in_shape=(3, 32, 32)):
        super().__init__(num_classes, in_shape)
''')
    assert cli.main(["list", "--model", f"{path}:Args"]) == 0
    out = capsys.readouterr().out
    assert "recipe by its units, seen once it is built with its parameters (a run giving --model-param width=..." \
        in out and "recipe dlg" not in out, out
    assert RunConfig(model=f"{path}:Args", model_params={"width": 4}).derived().recipe == "ig"
