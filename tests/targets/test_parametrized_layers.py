"""Layers whose weight is computed from parameters of their own (weight_norm, spectral_norm, orthogonal, the older
``torch.nn.utils.weight_norm``): the message holds the gradients of those parameters, not of the weight, so the label
rules and the analytic attack cannot read such a head or first layer, and say so in one sentence."""

import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations

import targets
from leakattack import Channel, ThreatModel, cli, get_attack, get_sketch, observe
from leakattack.errors import SettingWarning

WRAPS = {
    "weight_norm": parametrizations.weight_norm,
    "spectral_norm": parametrizations.spectral_norm,
    "orthogonal": parametrizations.orthogonal,
    "old weight_norm": lambda layer: torch.nn.utils.weight_norm(layer),
}


def net(wrap, where: str) -> nn.Module:
    torch.manual_seed(0)
    first, head = nn.Linear(16, 8), nn.Linear(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the older weight_norm is deprecated
        if where == "head":
            head = wrap(head)
        else:
            first = wrap(first)
    return nn.Sequential(nn.Flatten(), first, nn.Tanh(), head)


@pytest.mark.parametrize("kind", WRAPS)
def test_a_parametrized_head_is_no_head_for_the_label_rules_with_a_warning(kind):
    with pytest.warns(SettingWarning, match=r"computes its weight from parameters of its own .*no label rule reads it"):
        victim = targets.Victim.from_module(net(WRAPS[kind], "head"), input_shape=(1, 4, 4), num_classes=3)
    assert victim.head is None
    x, y = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([2])
    obs = observe(victim, x, y, Channel(get_sketch("srht", victim.d, victim.d // 2, seed=0)), ThreatModel())
    reason = get_attack("gradient-matching", iterations=2).supports(obs)
    assert reason is not None and "no trainable classifier head" in reason and "--labels given" in reason
    attack = get_attack("gradient-matching", iterations=2, labels="dlg")
    assert attack.supports(obs) is None
    assert torch.isfinite(attack.reconstruct(obs).x).all()


def test_a_head_parametrized_after_wrapping_is_refused_at_the_attack():
    victim = targets.Victim.from_module(net(lambda m: m, "head"),
                                        input_shape=(1, 4, 4), num_classes=3)
    assert victim.head is victim.model[3]
    x, y = torch.rand(1, 1, 4, 4), torch.tensor([0])
    obs = observe(victim, x, y, Channel(get_sketch("none", victim.d, victim.d, seed=0)), ThreatModel())
    parametrizations.weight_norm(victim.model[3])
    assert "no trainable classifier head" in get_attack("gradient-matching", iterations=2).supports(obs)


@pytest.mark.parametrize("kind", WRAPS)
def test_the_analytic_attack_refuses_a_parametrized_first_layer_naming_it(kind):
    victim = targets.Victim.from_module(net(WRAPS[kind], "first"), input_shape=(1, 4, 4), num_classes=3)
    obs = observe(victim, torch.rand(1, 1, 4, 4), torch.tensor([1]),
                  Channel(get_sketch("none", victim.d, victim.d, seed=0)), ThreatModel())
    reason = get_attack("analytic").supports(obs)
    assert reason is not None and reason.startswith("custom's first layer (1) is parametrized (weight_norm")
    assert reason.endswith("use gradient-matching")


MODEL = """
import torch
from torch import nn
from torch.nn.utils import parametrizations


class Net(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], 8), nn.Tanh())
        self.fc = parametrizations.weight_norm(nn.Linear(8, num_classes))

    def forward(self, x):
        return self.fc(self.body(x))
"""


def test_the_command_line_says_one_sentence_for_a_parametrized_head_and_runs_with_dlg_labels(tmp_path, capsys):
    path = tmp_path / "wn.py"
    path.write_text(MODEL)
    run = ["run", "--model", f"{path}:Net", "--sketch", "srht", "--iterations", "3", "--no-lpips", "--quiet",
           "--threads", "1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingWarning)
        assert cli.main([*run, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no trainable classifier head" in err and "--labels dlg" in err
    assert not (tmp_path / "a" / "metrics.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingWarning)
        assert cli.main([*run, "--labels", "dlg", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "metrics.json").exists()
