"""Gradient matching's settings in combination: a ReLU surrogate on a victim without ReLUs, the deep image prior
beside Gauss-Newton steps, and settings that must be finite numbers."""

import math

import pytest
import torch

import targets
from leakattack.attacks import GradientMatching
from leakattack.channel import Channel
from leakattack.errors import UserError
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


def _obs(act: str | None = None):
    """A small float64 LeNet on one 1x8x8 image through srht b/d = 0.5, labels given."""
    params = {} if act is None else {"act": act}
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0, **params).to(dtype=torch.float64)
    x = torch.rand((1, 1, 8, 8), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sketch = make_sketch("srht", victim.d, victim.d // 2, seed=1)
    return observe(victim, x, torch.tensor([3]), Channel(sketch, ""), ThreatModel(knows_labels=True))


def test_a_relu_surrogate_without_relus_keeps_the_gauss_newton_steps():
    # the surrogate acts on nn.ReLU modules only; LeNet's sigmoid victim has none, so its objective is L_R alone
    # and the steps that follow L-BFGS (auto) or are asked for by name (gauss-newton) are the same as without it
    smooth = _obs()
    assert GradientMatching(surrogate=0.1).refinement(smooth, "tolerance") is None
    assert GradientMatching(surrogate=0.1, refine="gauss-newton", labels="given").supports(smooth) is None
    # where the victim has ReLUs the surrogate changes the derivative, and the steps stay out
    relu = _obs(act="relu")
    assert "surrogate" in GradientMatching(surrogate=0.1).refinement(relu, "tolerance")
    refused = GradientMatching(surrogate=0.1, refine="gauss-newton", labels="given").supports(relu)
    assert refused is not None and "surrogate" in refused


def test_a_surrogate_without_relus_reaches_the_input_as_the_exact_attack_does():
    obs = _obs()
    runs = [GradientMatching(iterations=40, labels="given", surrogate=tau).reconstruct(obs) for tau in (0.0, 0.1)]
    for run in runs:
        assert run.gauss_newton is not None and run.gauss_newton["kept"]
    assert runs[1].stop_reason == runs[0].stop_reason == "tolerance"
    assert runs[1].final_loss == pytest.approx(runs[0].final_loss, rel=1e-6, abs=1e-20)


def test_the_deep_image_prior_is_not_called_an_added_term_when_gauss_newton_steps_are_refused():
    reason = GradientMatching(priors={"dip": 1.0}, refine="gauss-newton", labels="given").supports(_obs())
    assert reason is not None and "re-parametrises" in reason and "added" not in reason
    # an additive prior is still named as one
    added = GradientMatching(priors={"tv": 1e-3}, refine="gauss-newton", labels="given").supports(_obs())
    assert added is not None and "a prior (tv) is added" in added


@pytest.mark.parametrize("option, word", [
    ({"tol": math.inf}, "tol"),
    ({"surrogate": math.inf}, "surrogate"),
    ({"priors": {"tv": math.inf}}, "prior 'tv'"),
    ({"priors": {"bn": math.inf}}, "prior 'bn'"),
])
def test_infinite_settings_are_refused_in_one_sentence(option, word):
    # the command line refuses them (--tol inf, --relu-surrogate inf, --prior tv:inf); the attack's own
    # constructor does the same, at once rather than at the first evaluation
    with pytest.raises(UserError, match="finite") as err:
        GradientMatching(**option)
    assert word in str(err.value) and "\n" not in str(err.value)


def test_soft_labels_are_refused_for_a_regression():
    # DLG's soft labels are a softmax over the outputs: for one output always 1, whatever the real target, so the
    # attack would match the message against a target the client never had
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 6), torch.nn.Sigmoid(), torch.nn.Linear(6, 1))
    victim = targets.Victim.from_module(net, input_shape=(3, 4, 4), num_classes=1, task="regression")
    x, t = torch.rand(1, 3, 4, 4), torch.tensor([0.7])
    sketch = make_sketch("none", victim.d, victim.d, seed=0)
    obs = observe(victim, x, t, Channel(sketch, ""), ThreatModel(knows_labels=True))
    reason = GradientMatching(labels="dlg", iterations=2).supports(obs)
    assert reason is not None and "regression" in reason and "labels='given'" in reason and "\n" not in reason
    with pytest.raises(UserError, match="regression"):
        GradientMatching(labels="dlg", iterations=2).reconstruct(obs)
    assert GradientMatching(labels="given", iterations=2).supports(obs) is None


def test_the_starts_losses_hold_the_kept_gauss_newton_steps():
    # the run's final L_R is the lowest of its starts' final losses also where Gauss-Newton steps took the best
    # start further than its first phase
    obs = _obs()
    for restarts in (1, 2):
        result = GradientMatching(iterations=40, labels="given", restarts=restarts).reconstruct(obs)
        assert result.gauss_newton is not None and result.gauss_newton["kept"]
        assert len(result.restart_losses) == restarts
        assert result.final_loss == min(result.restart_losses) < result.gauss_newton["loss_before"]
        kept = result.restart_losses.index(result.final_loss)
        assert result.restart_stops[kept] == result.stop_reason == "tolerance"
