"""A closed form's note on a message that is not the exact gradient names what in the run's channel changes it (the
defense by its spec, a sketch, several local steps), not a list of causes the run does not have: under a pruning
alone, R-GAP's and the analytic attack's notes named "noise, a sketch with a null space, or several local steps"."""

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack.attacks import get_attack
from leakattack.attacks.base import NO_CAUSE, inexact_causes
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


def _example(size=16):
    data = get_dataset("photos")
    return F.adaptive_avg_pool2d(data.images[3:4].double(), size), data.labels[3:4]


def _observe(module_or_victim, x, labels, defense=None, kind="none", b=None):
    victim = module_or_victim if isinstance(module_or_victim, targets.Victim) else targets.Victim.from_module(
        module_or_victim.double(), input_shape=tuple(x.shape[1:]), num_classes=10)
    victim = victim.to(dtype=torch.float64)
    torch.manual_seed(0)
    return observe(victim, x, labels, Channel(make_sketch(kind, victim.d, b or victim.d, seed=1), defense),
                   ThreatModel())


def _lenet(x):
    return targets.get_model("lenet", in_shape=tuple(x.shape[1:]), seed=0)


def _mlp(m, hidden=16):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(m, hidden), torch.nn.Sigmoid(),
                               torch.nn.Linear(hidden, 10))


def test_nothing_in_a_plain_channel_is_named_a_cause():
    x, labels = _example()
    obs = _observe(_lenet(x), x, labels)
    assert inexact_causes(obs) is None
    obs.extra["local_steps"] = 3
    assert inexact_causes(obs) == "3 local steps"


def test_the_defense_and_a_sketch_are_named_as_the_run_has_them():
    x, labels = _example()
    lenet = _lenet(x)
    said = inexact_causes(_observe(lenet, x, labels, "prune:p=0.5"))
    assert said is not None and "prune:p=0.5" in said and "null space" not in said and "noise" not in said
    d = lenet.d
    said = inexact_causes(_observe(lenet, x, labels, "gaussian:sigma=1e-3", kind="srht", b=d // 2))
    assert said is not None and "gaussian:sigma=0.001" in said and f"b = {d // 2} < d = {d}" in said


@pytest.mark.parametrize("attack", ["rgap", "analytic"])
def test_a_pruned_message_is_blamed_on_the_pruning(attack):
    x, labels = _example(size=8 if attack == "analytic" else 16)
    victim = _lenet(x) if attack == "rgap" else _mlp(3 * 8 * 8)
    result = get_attack(attack).reconstruct(_observe(victim, x, labels, "prune:p=0.5"))
    assert result.stop_reason == "stalled"
    assert "not the exact gradient of one example" in result.message and "prune:p=0.5" in result.message
    assert "noise" not in result.message and "null space" not in result.message and "local steps" not in result.message


def test_a_square_srht_with_padding_still_names_the_sketch_and_no_defense():
    x, labels = _example()
    obs = _observe(_lenet(x), x, labels, kind="srht")  # lenet's d is no power of two: the square SRHT pads g
    result = get_attack("rgap").reconstruct(obs)
    assert result.stop_reason == "stalled" and "a sketch with a null space, if this" in result.message
    assert "defense" not in result.message and NO_CAUSE not in result.message


def test_a_clip_that_only_rescales_is_no_cause_and_an_update_files_local_steps_are():
    """A closed form reads the gradient up to a positive factor: clip:C=1e9 (which changes nothing) and clip:C=0.01
    were named as causes.  An update message file of 3 local steps keeps its count in its map, not in the
    observation's extra: its note said "one local step"."""
    from targets.protocols.base import MessageMap

    x, labels = _example()
    lenet = _lenet(x)
    for spec in ("clip:C=1e9", "clip:C=0.01", "per_example:C=0.01"):
        assert inexact_causes(_observe(lenet, x, labels, spec)) is None, spec
    said = inexact_causes(_observe(lenet, x, labels, "clip:C=0.01,gaussian:sigma=1e-3"))
    assert said == "the defense gaussian:sigma=0.001@before_sketch", said
    obs = _observe(lenet, x, labels)
    obs.linear_map = MessageMap(obs.linear_map, 0.1, {"kind": "message:update", "local_steps": 3, "local_lr": 0.1})
    assert inexact_causes(obs) == "3 local steps"
    assert "no noise, pruning or rounding, no sketch, one local step" in NO_CAUSE
