"""get_model refuses an in_shape that is not a tuple of positive integers of the rank the model takes, and a
num_classes that is not an integer of at least 1, in one sentence before the model is built."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import targets
import targets.models
from leakattack.errors import UserError


@pytest.fixture
def fresh_models(monkeypatch):
    """The model registry, restored after the test."""
    registry = targets.models._MODELS
    monkeypatch.setattr(registry, "_items", dict(registry._items))
    monkeypatch.setattr(registry, "_meta", dict(registry._meta))


@pytest.mark.parametrize("kwargs,message", [
    ({"in_shape": (3, -32, 32)}, "in_shape must be the shape of one example, a tuple of positive integers such as "
                                 "(3, 32, 32), got (3, -32, 32)"),
    ({"in_shape": (3, 32.5, 32)}, "in_shape must be the shape of one example, a tuple of positive integers such as "
                                  "(3, 32, 32), got (3, 32.5, 32)"),
    ({"in_shape": "3x32x32"}, "in_shape must be the shape of one example, a tuple of positive integers such as "
                              "(3, 32, 32), got '3x32x32'"),
    ({"in_shape": (32, 32)}, "model 'lenet' takes an in_shape of 3 entries (channels, height, width), got (32, 32)"),
    ({"in_shape": (1, 3, 32, 32)}, "model 'lenet' takes an in_shape of 3 entries (channels, height, width), "
                                   "got (1, 3, 32, 32)"),
    ({"num_classes": "10"}, "num_classes must be an integer of at least 1, got '10'"),
    ({"num_classes": 0}, "num_classes must be an integer of at least 1, got 0"),
    ({"num_classes": True}, "num_classes must be an integer of at least 1, got True"),
    ({"num_classes": 2.5}, "num_classes must be an integer of at least 1, got 2.5"),
])
def test_get_model_refuses_a_bad_shape_or_class_count_in_one_sentence(kwargs, message):
    with pytest.raises(UserError) as err:
        targets.get_model("lenet", **{"num_classes": 10, "in_shape": (3, 32, 32), **kwargs})
    assert str(err.value) == message


def test_get_model_takes_any_rank_where_the_model_flattens_and_numpy_or_torch_sizes():
    assert targets.get_model("mlp", num_classes=2, in_shape=(6,), hidden=2).input_shape == (6,)
    victim = targets.get_model("logreg", num_classes=np.int64(3), in_shape=torch.Size([1, 2, 3]))
    assert victim.input_shape == (1, 2, 3) and victim.num_classes == 3 and type(victim.num_classes) is int


def test_an_unknown_model_is_named_before_its_arguments():
    with pytest.raises(UserError, match=r"^unknown model 'nope'; choose one of: "):
        targets.get_model("nope", in_shape=(3, -1, 2))


def test_register_model_declares_the_rank_its_model_takes(fresh_models):
    targets.register_model("flat2d", lambda in_shape, num_classes: torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(in_shape[0] * in_shape[1], num_classes)), in_rank=2)
    assert targets.get_model("flat2d", num_classes=2, in_shape=(2, 3)).d == 2 * 6 + 2
    with pytest.raises(UserError, match=r"^model 'flat2d' takes an in_shape of 2 entries, got \(1, 2, 3\)$"):
        targets.get_model("flat2d", num_classes=2, in_shape=(1, 2, 3))
    with pytest.raises(ValueError, match="in_rank of model 'bad' must be a positive integer or None, got 0"):
        targets.register_model("bad", lambda in_shape, num_classes: None, in_rank=0)


def test_a_one_class_classifier_under_cross_entropy_is_refused_as_sending_zeros():
    """Cross-entropy over one class is 0 at any weights: the message was all zeros and the attack said 'converged'."""
    with pytest.raises(UserError, match="classifier of num_classes = 1 under cross-entropy"):
        targets.get_model("lenet", num_classes=1)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 1))
    with pytest.raises(UserError, match="its gradient, and every message, is all zeros"):
        targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=1, loss=torch.nn.CrossEntropyLoss())
    # one score under a loss of one score (here as a regression on real targets) has a gradient: it is taken
    victim = targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=1, task="regression",
                                        loss=torch.nn.BCEWithLogitsLoss())
    assert victim.num_classes == 1
