"""Label rules refuse, in one sentence, calls they cannot read: no classification head, a batch size that is not
a positive integer, a message that is not one vector of the map's b numbers, a bias rule on a head without one."""

from __future__ import annotations

import pytest
import torch

import targets
from leakattack import data
from leakattack.attacks import labels
from leakattack.errors import UserError
from leakattack.sketch import make_sketch


@pytest.fixture(scope="module")
def lenet_message():
    ds = data.get_dataset("digits")
    victim = targets.get_model("lenet", num_classes=10, in_shape=ds.in_shape, seed=0)
    x, y = data.get_batch(ds, 0, 2)
    sk = make_sketch("srht", victim.d, victim.d // 2, seed=1)
    return victim, sk, sk.apply(targets.flat_gradient(victim, x, y))


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
@pytest.mark.parametrize("rule", labels.LABEL_RULES)
def test_a_batch_size_that_is_not_a_positive_integer_is_one_sentence(lenet_message, batch_size, rule):
    victim, sk, y = lenet_message
    with pytest.raises(UserError, match="batch size must be a positive integer"):
        labels.recover_labels(victim, sk, y, batch_size, rule=rule)


def test_a_message_that_is_not_one_vector_of_b_numbers_is_one_sentence(lenet_message):
    victim, sk, y = lenet_message
    for bad in (y[None], y[:-1], y.long()):
        with pytest.raises(UserError, match="one floating-point vector of the map's b"):
            labels.recover_labels(victim, sk, bad, 2)
    with pytest.raises(UserError, match="one floating-point vector"):
        labels.readings_to_compare(victim, sk, y[None], 2)


def test_a_regression_victim_has_no_labels_to_read():
    ds = data.get_dataset("digits")
    victim = targets.get_model("linreg", num_classes=10, in_shape=ds.in_shape, seed=0)
    sk = make_sketch("none", victim.d, None)
    y = torch.zeros(victim.d)
    for call in (lambda: labels.recover_labels(victim, sk, y, 1),
                 lambda: labels.recover_labels(victim, sk, y, 1, rule="sign"),
                 lambda: labels.readings_to_compare(victim, sk, y, 1)):
        with pytest.raises(UserError, match="no trainable classification head") as err:
            call()
        # a regression's targets are real numbers: the sentence points to given labels, not to soft class labels
        assert "--labels given" in str(err.value) and "dlg" not in str(err.value)


def test_the_bias_rules_refuse_a_head_without_bias_in_one_sentence_and_the_others_read_it():
    from torch import nn
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10, bias=False))
    victim = targets.Victim(model, num_classes=10, input_shape=(1, 8, 8), head=model[3])
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    g = targets.flat_gradient(victim, x, torch.tensor([3, 5]))
    sk = make_sketch("none", victim.d, None)
    for rule in ("bias", "ilrg"):
        with pytest.raises(UserError, match="head has no bias"):
            labels.recover_labels(victim, sk, g, 2, rule=rule)
    assert labels.recover_labels(victim, sk, g, 2, rule="pooled").tolist() == [3, 5]


class _Tempered(torch.nn.Module):
    """A classifier whose scores are its head's divided by a temperature (``scores``: or its log-softmax)."""

    def __init__(self, scores="temperature"):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(64, 10)
        self.scores = scores

    def forward(self, x):
        z = self.fc(torch.tanh(self.c1(x)).flatten(1))
        return z / 0.2 if self.scores == "temperature" else torch.log_softmax(z, 1) if self.scores == "log" else z


@pytest.mark.parametrize("scores", ["temperature", "log", "plain"])
def test_scores_that_are_not_the_heads_own_are_warned_before_the_labels_are_read(scores):
    """A temperature after the head read half of a batch of 8 wrong, unwarned: the count rules take the head's
    gradients as cross-entropy's on its own scores.  A log-softmax after it changes nothing, and is not warned."""
    import warnings

    from leakattack.attacks import recover_labels
    from leakattack.errors import SettingWarning
    from leakattack.sketch import get_sketch

    torch.manual_seed(0)
    victim = targets.Victim.from_module(_Tempered(scores), input_shape=(3, 8, 8), num_classes=10)
    y = torch.randn(victim.d)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        recover_labels(victim, get_sketch("none", victim.d, victim.d), y, 4)
    said = [str(w.message) for w in seen if issubclass(w.category, SettingWarning)]
    assert (len(said) == 1 and "are not the softmax of its head's scores" in said[0]) == (scores == "temperature"), said
    if scores != "temperature":
        assert not said


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_message_with_a_value_that_is_not_finite_is_one_sentence(lenet_message, bad):
    """A NaN or an infinity in the message gave made-up labels by some rules ([0, 0] by pooled, [9, 9] by bias), a
    raw linalg error by magnitude and a math domain error by pooled on inf; it is one sentence naming the first."""
    victim, sk, y = lenet_message
    y = y.clone()
    y[5] = bad
    calls = [lambda r=r: labels.recover_labels(victim, sk, y, 2, rule=r) for r in labels.LABEL_RULES]
    calls += [lambda: labels.recover_labels_by_rule(victim, sk, y, 2),
              lambda: labels.readings_to_compare(victim, sk, y, 2),
              lambda: labels.head_and_probes(victim, sk, y, 2), lambda: labels.one_example_classes(victim, sk, y)]
    for call in calls:
        with pytest.raises(UserError, match=rf"non-finite number \({bad}\) at index 5, and no label rule can read it"):
            call()
    assert labels.sign_rule_snr(victim, sk, y) != labels.sign_rule_snr(victim, sk, y)  # NaN: nothing is read
