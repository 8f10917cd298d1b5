"""BatchNorm modes: batch statistics (train) or running ones (eval), buffers never moved, per-example gradients."""

import copy
import warnings

import pytest
import torch
from torch import nn

import targets
from leakattack.errors import SettingWarning, UserError

SMALL = dict(in_shape=(3, 8, 8), width=4)  # a ResNet-20 small enough for float64 per-example checks


def buffers(victim):
    return {k: v.clone() for k, v in victim.model.state_dict().items() if "running" in k or "num_batches" in k}


def test_train_and_eval_modes_give_different_outputs_on_a_batch():
    x = torch.rand(4, 3, 8, 8)
    train = targets.get_model("resnet20", seed=0, **SMALL)
    evaluation = targets.get_model("resnet20", seed=0, bn_mode="eval", **SMALL)
    assert train.bn_mode == "train" and train.batch_statistics and not evaluation.batch_statistics
    with torch.no_grad():
        assert not torch.allclose(train(x), evaluation(x), atol=1e-3)
        # eval mode: an example's output does not depend on its batch; train mode: it does
        assert torch.allclose(evaluation(x)[:1], evaluation(x[:1]), atol=1e-5)
        assert not torch.allclose(train(x)[:1], train(torch.cat([x[:1], x[1:].flip(0) * 2]))[:1], atol=1e-3)


def test_train_mode_forwards_and_gradients_leave_the_running_statistics_bit_identical():
    v = targets.get_model("resnet20", seed=0, **SMALL)
    for name, buf in v.model.named_buffers():  # statistics as a loaded checkpoint would have them
        if "running" in name:
            buf.copy_(torch.rand_like(buf) + 0.5)
    before = buffers(v)
    x, y = torch.rand(2, 3, 8, 8, requires_grad=True), torch.tensor([0, 1])
    for _ in range(4):
        with torch.no_grad():
            v(x)
    for _ in range(3):
        targets.flat_gradient(v, x.detach(), y)
    for _ in range(3):
        g = targets.flat_gradient(v, x, y, create_graph=True)
        torch.autograd.grad(g.pow(2).sum(), x)
    targets.flat_gradient(v, x.detach(), y, params=targets.unflatten(v, targets.flat_params(v) * 1.1))
    after = buffers(v)
    assert before.keys() == after.keys() and any("num_batches" in k for k in after)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_train_mode_normalises_exactly_as_pytorchs_training_mode():
    v = targets.get_model("resnet20", seed=0)
    plain = copy.deepcopy(v.model).train()
    for m in plain.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.track_running_stats = True
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(v(x), plain(x))


def test_set_mode_switches_between_batch_and_running_statistics():
    v = targets.get_model("resnet20", seed=0)
    v.set_mode("eval")
    assert v.bn_mode == "eval" and not v.batch_statistics
    assert all(not m.training for m in v.model.modules())
    v.set_mode("train")
    assert v.batch_statistics
    with pytest.raises(ValueError, match="unknown BatchNorm mode 'frozen'"):
        v.set_mode("frozen")


@pytest.mark.parametrize("create_graph", [False, True])
def test_per_example_gradients_refuse_batchnorm_in_train_mode(create_graph):
    v = targets.get_model("resnet20", seed=0, **SMALL)
    x, y = torch.rand(2, 3, 8, 8, requires_grad=create_graph), torch.tensor([0, 1])
    with pytest.raises(UserError, match="needs per-example gradients, which BatchNorm in train mode .* does not "
                                        "have: use --bn eval or a model with GroupNorm") as err:
        targets.per_example_gradients(v, x, y, create_graph=create_graph)
    assert "\n" not in str(err.value)


def test_a_batchnorm_without_running_statistics_has_no_per_example_gradients_in_eval_mode_either():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, track_running_stats=False), nn.Flatten(), nn.Linear(8, 2))
    v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=2, bn_mode="eval")
    assert v.batch_statistics
    with pytest.raises(UserError, match="per-example gradients"):
        targets.per_example_gradients(v, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]))


def test_eval_mode_on_a_batchnorm_without_running_statistics_is_warned_of_and_recorded(tmp_path, monkeypatch,
                                                                                       capsys):
    """Such a layer normalises by the batch in eval mode too: --bn eval and train gave the same run, only train
    warned of one image's own statistics, and config.json said eval."""
    from leakattack import Channel, cli, get_sketch, observe

    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, track_running_stats=False), nn.Flatten(), nn.Linear(8, 2))
    v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=2, bn_mode="eval")
    channel = Channel(get_sketch("none", v.d, v.d))
    with pytest.warns(SettingWarning, match=r"^BatchNorm layer '1' of the victim keeps no running statistics "
                                            r"\(track_running_stats=False\), so eval mode \(--bn eval, or auto\) does "
                                            r"not apply to it: it normalises one image by its own statistics"):
        observe(v, torch.rand(1, 1, 4, 4), torch.tensor([1]), channel)
    with pytest.warns(SettingWarning, match=r"it normalises the batch by its own statistics, as train mode does$"):
        observe(v, torch.rand(2, 1, 4, 4), torch.tensor([1, 0]), channel)
    with_stats = targets.Victim.from_module(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(),
                                                          nn.Linear(8, 2)), input_shape=(1, 4, 4), num_classes=2,
                                            bn_mode="eval")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        observe(with_stats, torch.rand(1, 1, 4, 4), torch.tensor([1]), channel)
    (tmp_path / "bnnet.py").write_text(
        "import torch.nn as nn\n"
        "class NoRS(nn.Sequential):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU(),\n"
        "                         nn.Flatten(), nn.Linear(4 * 30 * 30, num_classes))\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--model", "bnnet.py:NoRS", "--bn", "eval", "--iterations", "1", "--quiet",
                     "--no-lpips", "--out", "r"]) == 0
    assert "leakattack: warning: BatchNorm layer '1' of the victim keeps no running statistics" in \
        capsys.readouterr().err
    import json
    derived = json.loads((tmp_path / "r" / "config.json").read_text())["derived"]
    assert derived["bn_mode"] == "eval" and derived["bn_batch_statistics"] == ["1"]
    # a message file's run, which observe does not make: the same warning
    from leakattack.results.message import write_message

    torch.manual_seed(0)
    norm = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 30 * 30, 10))  # NoRS's layers, as the file builds them
    client = targets.Victim.from_module(norm, input_shape=(3, 32, 32), num_classes=10, bn_mode="eval")
    write_message(tmp_path / "m.pt", targets.flat_gradient(client, torch.rand(1, 3, 32, 32), torch.tensor([3])),
                  batch_size=1, input_shape=(3, 32, 32), num_classes=10)
    capsys.readouterr()
    assert cli.main(["run", "--model", "bnnet.py:NoRS", "--bn", "eval", "--message", "m.pt", "--iterations", "1",
                     "--quiet", "--no-lpips", "--out", "m"]) == 0
    assert "BatchNorm layer '1' of the victim keeps no running statistics" in capsys.readouterr().err


def test_per_example_gradients_in_eval_mode_equal_autograd_example_by_example():
    v = targets.get_model("resnet20", seed=0, bn_mode="eval", **SMALL).to(dtype=torch.float64)
    for name, buf in v.model.named_buffers():
        if "running" in name:
            buf.copy_(torch.rand_like(buf) + 0.5)
    x, y = torch.rand(3, 3, 8, 8, dtype=torch.float64), torch.tensor([2, 5, 5])
    rows = targets.per_example_gradients(v, x, y)
    for i in range(3):
        v.model.zero_grad()
        v.loss(v.model(x[i:i + 1]), y[i:i + 1]).backward()
        ref = torch.cat([p.grad.flatten() for p in v.model.parameters()])
        assert torch.allclose(rows[i], ref, atol=1e-12)
    graph_rows = targets.per_example_gradients(v, x.requires_grad_(True), y, create_graph=True)
    assert torch.allclose(graph_rows.detach(), rows, atol=1e-12)
    assert torch.allclose(rows.mean(0), targets.flat_gradient(v, x.detach(), y), atol=1e-12)


def test_batch_statistics_on_a_one_by_one_map_of_one_example_is_one_sentence():
    v = targets.get_model("resnet50", in_shape=(3, 32, 32))  # layer4 works on a 1x1 map at 32 px
    with pytest.raises(UserError, match="BatchNorm in train mode needs more than one value per channel") as err:
        targets.flat_gradient(v, torch.rand(1, 3, 32, 32), torch.tensor([0]))
    assert "\n" not in str(err.value) and "(--bn eval; bn_mode='eval' in Python)" in str(err.value)
    v.set_mode("eval")
    assert targets.flat_gradient(v, torch.rand(1, 3, 32, 32), torch.tensor([0])).shape == (v.d,)


def test_auto_batchnorm_mode_is_eval_for_one_example_and_train_for_a_batch():
    from leakattack.config import RunConfig
    from leakattack.experiment import prepare
    from targets import resolve_bn_mode

    assert resolve_bn_mode("auto", 1) == "eval" and resolve_bn_mode("auto", 4) == "train"
    assert resolve_bn_mode("train", 1) == "train" and resolve_bn_mode("eval", 8) == "eval"
    for batch, bn, mode in ((1, "auto", "eval"), (2, "auto", "train"), (1, "train", "train")):
        p = prepare(RunConfig(model="resnet20", batch_size=batch, bn=bn, iterations=1))
        assert p.victim.bn_mode == mode, (batch, bn)


def test_test_accuracy_reads_the_running_statistics_whatever_the_chunk():
    """A training run's test loss and accuracy normalise by BatchNorm's running statistics (a deployed model's), so
    they do not depend on how many test images are put through at once; the layers stay in train mode after."""
    from targets.oracle import flat_params
    from targets.protocols.base import evaluate

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(4, 3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    victim = targets.Victim.from_module(net, input_shape=(1, 8, 8), num_classes=3)
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.rand(20, 1, 8, 8, generator=gen), torch.randint(0, 3, (20,), generator=gen)
    w = flat_params(victim)
    whole, one = evaluate(victim, w, images, labels, chunk=512), evaluate(victim, w, images, labels, chunk=1)
    assert whole[0] == pytest.approx(one[0], rel=1e-5) and whole[1] == one[1]
    assert victim.model[1].training
    net.eval()
    with torch.no_grad():
        out = net(images)
    assert whole[0] == pytest.approx(float(nn.functional.cross_entropy(out, labels)), rel=1e-5)
    assert whole[1] == int((out.argmax(1) == labels).sum()) / 20


def test_a_gradient_that_overflows_under_initial_eval_statistics_names_bn_train():
    """BatchNorm in eval mode at its initial statistics normalises nothing: a model whose activations then overflow
    is told to run --bn train or load trained weights, not to look for broken weights."""
    from leakattack import Channel, ThreatModel, observe
    from leakattack.sketch import get_sketch

    class Blowup(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.fc = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(2, 3)

        def forward(self, x):
            h = self.bn(self.conv(x)) * 1e30
            return self.fc((h * h).mean((2, 3)))

    torch.manual_seed(0)
    victim = targets.Victim.from_module(Blowup(), input_shape=(1, 8, 8), num_classes=3, bn_mode="eval")
    x = torch.rand(1, 1, 8, 8)
    with pytest.raises(UserError, match="its BatchNorm layers run in eval mode at their initial statistics .* give "
                                        "--bn train or trained weights"):
        observe(victim, x, torch.tensor([0]), Channel(get_sketch("none", victim.d, victim.d)), ThreatModel())


@pytest.mark.parametrize("bn_mode", ["train", "eval"])
def test_an_instancenorm_tracking_running_statistics_is_warned_of_in_train_mode(bn_mode):
    """It normalises by its running statistics in eval mode, where a training client uses each example's own; the
    victim cannot run it in train mode (torch updates its running statistics in every such pass), so it says so."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
                          nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        victim = targets.Victim.from_module(model, input_shape=(1, 6, 6), num_classes=3, bn_mode=bn_mode)
    said = [str(w.message) for w in seen if issubclass(w.category, SettingWarning)]
    assert len(said) == (bn_mode == "train")
    if said:
        assert "InstanceNorm that tracks running statistics (1)" in said[0] and "track_running_stats=False" in said[0]
    assert not victim.model[1].training
    untracked = nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2, affine=True), nn.Flatten(), nn.Linear(32, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        targets.Victim.from_module(untracked, input_shape=(1, 6, 6), num_classes=3, bn_mode=bn_mode)
