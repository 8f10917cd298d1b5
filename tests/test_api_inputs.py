"""The Python API refuses inputs that do not fit in one sentence, and takes the ones that do as they are meant."""

import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import targets
from leakattack import Channel, ThreatModel, observe
from leakattack.attacks import AttackResult
from leakattack.attacks.base import check_result
from leakattack.errors import UserError
from leakattack.sketch import get_sketch


def regression(loss=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 1)).double()  # one output column: (B, 1)
    return targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=1, task="regression", loss=loss)


def test_a_regression_output_of_one_column_meets_each_examples_own_target():
    x = torch.rand(3, 3, 2, 2, dtype=torch.float64)
    t = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    for loss, per_row in ((None, lambda out: 0.5 * (out.squeeze(1) - t).pow(2).mean()),
                          (nn.MSELoss(), lambda out: (out.squeeze(1) - t).pow(2).mean()),
                          (nn.L1Loss(), lambda out: (out.squeeze(1) - t).abs().mean())):
        v = regression(loss)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns where a loss broadcasts targets of another shape
            got = targets.loss_at(v, x, v.target(t))
            g = targets.flat_gradient(v, x, v.target(t))
            rows = targets.per_example_gradients(v, x, v.target(t))
        assert float(got.detach()) == pytest.approx(float(per_row(v.model(x).detach())), rel=1e-12)
        assert torch.allclose(rows.mean(0), g)
    v = regression()
    with pytest.raises(UserError, match=re.escape("the regression targets have shape (3, 2) and the model's outputs "
                                                  "(3, 1): give one target per output")):
        targets.loss_at(v, x, torch.zeros(3, 2, dtype=torch.float64))


def test_regression_targets_that_are_not_one_finite_row_per_example_are_one_sentence():
    v, x = regression(), torch.rand(3, 3, 2, 2, dtype=torch.float64)
    for bad, said in ((torch.tensor([0.3, float("nan"), 1.0]), "the regression targets hold values that are NaN"),
                      (torch.tensor([0.3, 1.0]), "labels must give one label per example: x holds 3")):
        with pytest.raises(UserError, match="^" + re.escape(said)):
            observe(v, x, bad.double(), Channel(get_sketch("none", v.d, v.d)))


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3)).double()
    return targets.Victim.from_module(net, input_shape=(3, 2, 2), num_classes=3)


@pytest.fixture
def case():
    v = classifier()
    x = torch.rand(2, 3, 2, 2, dtype=torch.float64)
    return v, x, Channel(get_sketch("none", v.d, v.d))


def test_class_indices_of_any_integer_dtype_give_the_gradient_of_long_ones(case):
    v, x, ch = case
    want = observe(v, x, torch.tensor([0, 2]), ch, ThreatModel(knows_labels=True))
    for dtype in (torch.int32, torch.int16, torch.uint8):
        got = observe(v, x, torch.tensor([0, 2], dtype=dtype), ch, ThreatModel(knows_labels=True))
        assert torch.equal(got.y, want.y) and got.labels.dtype == torch.long


@pytest.mark.parametrize("labels,said", [
    (torch.tensor([1.7, 0.0]), "labels must be integer class indices (a tensor of dtype torch.long), got float32 "
                               "values [1.7, 0]"),
    (torch.tensor([1.0, 0.0]), "labels must be integer class indices"),
    (torch.tensor([True, False]), "labels must be class indices or real targets, not bool"),
    (torch.tensor([[0], [1]]), "labels must be one class index per example, a tensor of shape (2,), got shape (2, 1)"),
    (torch.tensor([0, 1, 2]), "labels must give one label per example: x holds 2 example(s), and labels has shape"),
    (torch.tensor(1), "labels must give one label per example"),
    (torch.tensor([0, 3]), "labels must lie in [0, 2] for the victim's 3 classes, got [0, 3]"),
    (torch.tensor([-1, 0]), "labels must lie in [0, 2]"),
])
def test_labels_that_are_not_class_indices_of_the_batch_are_one_sentence(case, labels, said):
    v, x, ch = case
    with pytest.raises(UserError, match="^" + re.escape(said)):
        observe(v, x, labels, ch)


def test_inputs_without_a_batch_dimension_or_not_finite_are_one_sentence(case):
    v, x, ch = case
    with pytest.raises(UserError, match=re.escape("x has the shape of one example, (3, 2, 2), without the batch "
                                                  "dimension: give a batch of shape (B, 3, 2, 2)")):
        observe(v, x[0], torch.tensor([0]), ch)
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[1, 0, 0, 0] = bad
        with pytest.raises(UserError, match=r"^x holds 1 value\(s\) that are NaN or infinite"):
            observe(v, y, torch.tensor([0, 1]), ch)
    with pytest.raises(UserError, match="^x holds no example"):
        observe(v, x[:0], torch.tensor([], dtype=torch.long), ch)


def test_a_victim_threat_model_or_channel_of_another_type_is_one_sentence(case):
    v, x, ch = case
    labels = torch.tensor([0, 1])
    with pytest.raises(UserError, match="^the threat model must be a leakattack.ThreatModel .*got NoneType"):
        observe(v, x, labels, ch, None)
    with pytest.raises(UserError, match="^the threat model must be a leakattack.ThreatModel .*got str"):
        observe(v, x, labels, ch, "labels")
    with pytest.raises(UserError, match="^the victim must be a targets.Victim .*got str"):
        observe("lenet", x, labels, ch)
    with pytest.raises(UserError, match="^a Channel takes a sketch, .*got str 'srht'"):
        Channel("srht")
    with pytest.raises(UserError, match="^ThreatModel's knows_labels must be True or False, got 'no'"):
        ThreatModel(knows_labels="no")
    with pytest.raises(UserError, match="^ThreatModel's knows_clip must be True or False, got 1"):
        ThreatModel(knows_clip=1)


def test_cross_entropy_refuses_real_targets_that_are_not_class_probabilities():
    logits = torch.zeros(2, 3)
    with pytest.raises(UserError, match=re.escape("cross-entropy takes integer class indices or class probabilities "
                                                  "of the scores' shape (2, 3), got float32 targets of shape (2,)")):
        targets.cross_entropy(logits, torch.tensor([1.0, 2.0]))
    soft = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert float(targets.cross_entropy(logits, soft)) == pytest.approx(float(targets.cross_entropy(
        logits, torch.tensor([1, 2], dtype=torch.int32))))


def test_wrapping_refuses_a_loss_that_is_no_callable_and_a_head_that_is_not_the_models_own():
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    wrap = dict(input_shape=(3, 2, 2), num_classes=3)
    with pytest.raises(UserError, match="^a victim's loss must be a callable F\\(output, target\\).*got str 'mse'"):
        targets.Victim.from_module(net, loss="mse", **wrap)
    with pytest.raises(UserError, match="^the classifier head of model 'custom' must be one of the model's own "
                                        "modules, and Linear\\(in_features=3"):
        targets.Victim.from_module(net, head=nn.Linear(3, 3), **wrap)
    with pytest.raises(UserError, match="^the classifier head of model 'custom' must be one of the model's "
                                        "nn.Linear layers"):
        targets.Victim.from_module(net, head=net[0], **wrap)
    wide = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.Tanh(), nn.Linear(5, 3))
    with pytest.raises(UserError, match="scores the classes, and Linear.* has 5 outputs for num_classes = 3"):
        targets.Victim.from_module(wide, head=wide[1], **wrap)
    for model in ("hello", None):
        with pytest.raises(UserError, match="^a victim's model must be a torch.nn.Module, got"):
            targets.Victim.from_module(model, **wrap)


def test_an_attack_that_returns_no_attack_result_is_one_sentence_naming_it():
    shape = (1, 3, 2, 2)
    with pytest.raises(UserError, match="^attack 'grey' returned None from reconstruct, not the "
                                        "leakattack.attacks.AttackResult every attack returns$"):
        check_result("grey", None, shape)
    with pytest.raises(UserError, match="^attack 'grey' returned a dict from reconstruct"):
        check_result("grey", {"x": torch.zeros(shape)}, shape)
    x = torch.zeros(shape)
    with pytest.raises(UserError, match=re.escape("attack 'grey' returned a reconstruction x of shape (3, 2, 2), not "
                                                  "the batch of shape (1, 3, 2, 2) it attacks")):
        check_result("grey", AttackResult(x=x[0], labels=None, x0=x, losses=[1.0]), shape)
    for dtype in (torch.int64, torch.uint8, torch.bool):  # an int64 x of 0.6s was scored as an image of zeros
        with pytest.raises(UserError, match=f"^attack 'grey' returned a reconstruction x of {str(dtype)[6:]} values, "
                                            "not floating-point images like the batch it attacks$"):
            check_result("grey", AttackResult(x=x.to(dtype), labels=None, x0=x, losses=[1.0]), shape)
    check_result("grey", AttackResult(x=x.half(), labels=None, x0=x, losses=[1.0]), shape)  # scored in float32
    with pytest.raises(UserError, match="^attack 'grey' returned no losses"):
        check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[]), shape)
    check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[1.0]), shape)
    # a tensor of losses raised torch's "Boolean value of Tensor ... is ambiguous"; one of a single value, or an array,
    # passed as losses and as 0 steps
    for losses, kind in ((torch.tensor([1.0, 0.5]), "Tensor"), (torch.tensor([1.0]), "Tensor"),
                         (np.array([1.0, 0.5]), "ndarray")):
        with pytest.raises(UserError, match=f"^attack 'grey' returned losses as an? {kind}, not the list of "
                                            "floats AttackResult.losses holds"):
            check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=losses), shape)
    with pytest.raises(UserError, match="^attack 'grey' returned a loss at step 1 that is not a number"):
        check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[1.0, "low"]), shape)
    with pytest.raises(UserError, match="^attack 'grey' returned a loss at step 0 that is not a number"):
        check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[torch.ones(2)]), shape)
    check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[torch.tensor(1.0), np.float32(0.5), 1]), shape)
    # a null step count ran and wrote "iterations": null, which report and collect then refused
    for key, value, said in (("iterations", None, "iterations = None, not a whole number of at least 0"),
                             ("iterations", 2.5, "iterations = 2.5, not a whole number"),
                             ("best_step", -2, "best_step = -2, not a whole number"),
                             ("best_step", 3, "best_step = 3, past its 2 losses"),
                             ("stop_reason", None, "stop_reason = None, not a text naming why it stopped")):
        with pytest.raises(UserError, match=f"^attack 'grey' returned {re.escape(said)}"):
            check_result("grey", AttackResult(x=x, labels=None, x0=x, losses=[1.0, 0.5], **{key: value}), shape)
    taken = AttackResult(x=x, labels=None, x0=x, losses=[1.0, 0.5], iterations=np.int64(1))
    check_result("grey", taken, shape)
    assert type(taken.iterations) is int and taken.iterations == 1 and taken.best_step == 1


def test_an_attacks_result_is_checked_when_called_from_python_as_the_run_checks_it():
    """From Python, reconstruct returned a label outside the classes or a reconstruction of another shape, and assess
    scored it; leakattack run refused it in one sentence."""
    from leakattack.attacks.base import Attack

    class Wrong(Attack):
        name = "wrong"
        closed_form = True

        def __init__(self, label=42, shape=None):
            self.label, self.shape = label, shape

        def reconstruct(self, obs, **kwargs):
            x = torch.zeros(self.shape or obs.input_shape, dtype=obs.y.dtype)
            return AttackResult(x=x, labels=torch.tensor([self.label]), x0=None, losses=[0.0])

    victim = targets.get_model("logreg", num_classes=10, in_shape=(1, 4, 4), seed=0)
    obs = observe(victim, torch.rand(1, 1, 4, 4), torch.tensor([3]), Channel(get_sketch("none", victim.d, victim.d)))
    with pytest.raises(UserError, match="^attack 'wrong' returned label 42, outside the classes 0..9$"):
        Wrong().reconstruct(obs)
    with pytest.raises(UserError, match=re.escape("attack 'wrong' returned a reconstruction x of shape (3, 5), not "
                                                  "the batch of shape (1, 1, 4, 4) it attacks")):
        Wrong(label=1, shape=(3, 5)).reconstruct(obs)
    assert Wrong(label=1).reconstruct(obs).labels.tolist() == [1]


def test_a_name_where_a_built_object_belongs_is_one_sentence_naming_what_to_build():
    """get_batch('photos', 0), victim_recipe('lenet') and run_attack({...}) were AttributeErrors deep inside."""
    from leakattack.data import get_dataset
    from leakattack.data.base import get_batch
    from leakattack.experiment import run_attack

    with pytest.raises(UserError, match=re.escape("get_batch takes an ImageSet, got str 'photos': load it first, "
                                                  "get_batch(get_dataset('photos'), ...)")):
        get_batch("photos", 0)
    with pytest.raises(UserError, match="victim_recipe takes a built victim, .* got str 'lenet'$"):
        targets.victim_recipe("lenet")
    with pytest.raises(UserError, match=re.escape("run_attack takes a RunConfig, got dict {'iterations': 1}: make one "
                                                  "with RunConfig(**settings)")):
        run_attack({"iterations": 1})
    assert get_batch(get_dataset("photos"), 0)[0].shape == (1, 3, 32, 32)
