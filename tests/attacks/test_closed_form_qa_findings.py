"""The analytic attack's refusals of a first layer it cannot read (called twice, a frozen weight) and its stop reason
for a message that is not the exact gradient of its examples (noise, pruning): stalled, never a match that would
read as "another image gives the message"."""

import json

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack import cli
from leakattack.attacks.analytic import Analytic
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(size):
    data = get_dataset("digits")
    return F.avg_pool2d(data.images[:size].double(), 4), data.labels[:size]


def _obs(module, x, labels, defense=None):
    torch.manual_seed(0)
    victim = targets.Victim.from_module(module.double(), input_shape=tuple(x.shape[1:]), num_classes=10)
    return observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d), defense), ThreatModel())


class _Twice(torch.nn.Module):
    """fc2(sigmoid(fc1(sigmoid(fc1(x))))): the first layer called twice."""

    def __init__(self, m=49):
        super().__init__()
        self.flat, self.fc1, self.act, self.fc2 = (torch.nn.Flatten(), torch.nn.Linear(m, m), torch.nn.Sigmoid(),
                                                   torch.nn.Linear(m, 10))

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.act(self.fc1(self.flat(x))))))


def _mlp(m=49, hidden=16):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(m, hidden), torch.nn.Sigmoid(),
                               torch.nn.Linear(hidden, 10))


def test_analytic_refuses_a_first_layer_called_twice():
    x, labels = _batch(1)
    reason = Analytic().supports(_obs(_Twice(), x, labels))
    assert reason is not None and "calls its first layer 2 times" in reason and reason.count(". ") == 0


def test_analytic_refuses_a_first_layer_with_a_frozen_weight():
    x, labels = _batch(1)
    model = _mlp()
    model[1].weight.requires_grad_(False)
    reason = Analytic().supports(_obs(model, x, labels))
    assert reason is not None and "frozen weight" in reason and reason.count(". ") == 0


def test_analytic_exact_gradient_still_meets_its_tolerance():
    x, labels = _batch(1)
    result = Analytic().reconstruct(_obs(_mlp(), x, labels))
    assert result.stop_reason == "tolerance" and float((result.x - x).abs().max()) < 1e-9


@pytest.mark.parametrize("defense", ["gaussian:sigma=1e-2", "prune:p=0.5", "prune:p=0.999"])
def test_analytic_stalls_where_the_block_is_not_one_examples_gradient(defense):
    x, labels = _batch(1)
    result = Analytic().reconstruct(_obs(_mlp(), x, labels, defense))
    assert result.stop_reason == "stalled"
    assert "not the exact gradient of one example" in result.message
    assert result.losses[-1] > 1e-3  # the reported residual says how far off the block is, not 0


def test_analytic_relu_batch_with_noise_stalls():
    x, labels = _batch(4)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(49, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    clean = Analytic().reconstruct(_obs(model, x, labels))
    assert clean.stop_reason == "tolerance"
    noisy = Analytic().reconstruct(_obs(model, x, labels, "gaussian:sigma=1e-3"))
    assert noisy.stop_reason == "stalled" and "not of rank 4" in noisy.message


def test_a_noisy_analytic_run_does_not_claim_another_image_gives_the_message(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "mlp", "--dataset", "digits", "--attack", "analytic", "--sketch", "none",
                     "--defense", "prune:p=0.99", "--no-lpips", "--threads", "1", "--quiet", "--out", str(out)]) == 0
    said = capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stop_reason"] == "stalled" and metrics["unique"] is not False
    assert "a different image matches the message" not in said.out + said.err


def test_imprint_puts_granted_labels_in_the_images_order():
    from leakattack.attacks import get_attack
    data = get_dataset("digits")
    x, labels = data.images[:4].double(), data.labels[:4]
    victim = targets.get_model("lenet", in_shape=(1, 28, 28), seed=0)
    attack = get_attack("imprint", bins=128)
    attack.modify(victim, data)
    victim.to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d), None),
                  ThreatModel(knows_labels=True))
    result = attack.reconstruct(obs)
    assert result.stop_reason == "tolerance"
    # each returned image is one of the batch's; its label is that image's own
    for xi, yi in zip(result.x, result.labels):
        j = int((x - xi).flatten(1).norm(dim=1).argmin())
        assert float((x[j] - xi).abs().max()) < 1e-6 and int(yi) == int(labels[j])


def test_a_batch_through_a_classifier_whose_head_is_frozen_is_refused_for_its_head_not_as_no_classifier():
    """It said the model 'is not a classifier'."""
    x, labels = _batch(4)
    model = _mlp()
    model[3].weight.requires_grad_(False)
    model[3].bias.requires_grad_(False)
    reason = Analytic().supports(_obs(model, x, labels))
    assert reason is not None and "has no head whose gradient the solve reads each example's label from" in reason
    assert "not a classifier" not in reason


def test_a_closed_form_refuses_a_message_of_nan_or_infinite_values_in_one_sentence(tmp_path, capsys):
    """Noise beyond float32's range makes every value of the message infinite: the analytic attack ended in a
    LinAlgError traceback from its SVD; it is now refused before it runs, and names gradient-matching."""
    out = tmp_path / "run"
    assert cli.main(["run", "--attack", "analytic", "--model", "logreg", "--dataset", "digits", "--defense",
                     "gaussian:sigma=1e300", "--dtype", "float32", "--no-lpips", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leakattack: error: attack 'analytic' cannot run here: 3925 of the message's 3925 values are NaN or "
                   "infinite, and this closed form solves nothing through them; gradient-matching runs and records "
                   "what such a message gives"], err
    assert not out.exists()


def test_april_refuses_a_message_of_infinite_values_and_rgap_records_it(tmp_path, capsys):
    """APRIL's SVD ended in a LinAlgError traceback there too; R-GAP runs and records what the message gives."""
    out = tmp_path / "april"
    assert cli.main(["run", "--attack", "april", "--model", "vit_small", "--sketch", "none", "--defense",
                     "gaussian:sigma=1e300", "--dtype", "float32", "--no-lpips", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakattack: error: attack 'april' cannot run here: ") and \
        "values are NaN or infinite, and this closed form solves nothing through them" in err[0], err
    assert not out.exists()
    out = tmp_path / "rgap"
    assert cli.main(["run", "--attack", "rgap", "--model", "logreg", "--dataset", "digits", "--sketch", "none",
                     "--defense", "gaussian:sigma=1e300", "--dtype", "float32", "--no-lpips", "--quiet", "--out",
                     str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["message_nonfinite"] == 7850
