"""Victim models and the gradient oracle."""

import re

import pytest
import torch
from torch import nn

import targets
from targets.victim import last_linear, output_linear


def test_lenet_is_the_dlg_architecture():
    v = targets.get_model("lenet", num_classes=10, in_shape=(3, 32, 32))
    m = v.model
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert ([(c.in_channels, c.out_channels, c.kernel_size) for c in convs]
            == [(3, 12, (5, 5)), (12, 12, (5, 5)), (12, 12, (5, 5))])
    assert isinstance(m.act, nn.Sigmoid)
    assert m.fc.in_features == 768 and m.fc.out_features == 10
    assert v.d == targets.num_params(v) == 15826
    assert v.head is m.fc and v.task == "classification" and v.input_shape == (3, 32, 32)
    assert not any(targets.get_model(name).has_batchnorm for name in ("lenet", "mlp", "logreg", "linreg"))


def test_lenet_default_weights_are_uniform_half_interval():
    w = targets.flat_params(targets.get_model("lenet", seed=3))
    assert w.min() >= -0.5 and w.max() <= 0.5
    # U(-0.5, 0.5): variance 1/12 (tolerance 5 % for 15826 draws)
    assert abs(w.var().item() - 1 / 12) < 0.05 / 12


def test_same_seed_same_weights_other_seed_other_weights():
    a = targets.flat_params(targets.get_model("mlp", seed=1))
    b = targets.flat_params(targets.get_model("mlp", seed=1))
    c = targets.flat_params(targets.get_model("mlp", seed=2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_other_inits_are_selectable():
    for init in targets.INITS:
        w = targets.flat_params(targets.get_model("lenet", init=init))
        assert torch.isfinite(w).all()


def test_linreg_gradient_is_residual_times_input():
    m = targets.get_model("linreg", in_shape=(1, 4, 4), seed=0).to(dtype=torch.float64)
    assert m.task == "regression" and m.head is None
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64)
    y = torch.tensor([2.0], dtype=torch.float64)
    w = m.model.fc.weight.detach().flatten()
    expected = (w @ x.flatten() - y) * x.flatten()
    assert torch.allclose(targets.flat_gradient(m, x, y), expected, atol=1e-12)


def test_oracle_matches_autograd_and_supports_second_derivatives():
    m = targets.get_model("lenet", in_shape=(1, 28, 28), seed=0)
    x = torch.rand(2, 1, 28, 28, requires_grad=True)
    y = torch.tensor([3, 7])
    g = targets.flat_gradient(m, x, y, create_graph=True)
    assert g.shape == (targets.num_params(m),)
    m.model.zero_grad()
    m.loss(m.model(x.detach()), y).backward()
    ref = torch.cat([p.grad.flatten() for p in m.model.parameters()])
    assert torch.allclose(g.detach(), ref, atol=1e-6)
    (gx,) = torch.autograd.grad(g.pow(2).sum(), x)
    assert gx.abs().sum() > 0


def _nodes(root, name: str) -> int:
    """How many autograd nodes called ``name`` the graph of ``root`` holds."""
    seen, todo, count = set(), [root.grad_fn], 0
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        count += type(node).__name__ == name
        todo += [nxt for nxt, _ in node.next_functions]
    return count


def test_the_flat_gradient_is_torch_cat_in_value_and_derivatives_and_its_backward_splits_once():
    """flat_gradient's concatenation (targets.oracle.joined) against torch.cat: the same vector, the same
    x-gradient of <v, g> and the same third-order product (J e through the graph of h = J^T v, as Gauss-Newton's
    products take it), bit for bit in float64; and h's graph holds one split where torch.cat's backward narrows
    each parameter (whose derivative writes a d-long zero vector per parameter)."""
    torch.manual_seed(0)
    m = targets.get_model("lenet", in_shape=(1, 12, 12), seed=0)
    m.model.double()
    x, y = torch.rand(1, 1, 12, 12, dtype=torch.float64), torch.tensor([3])
    wrt = [p for p in m.model.parameters() if p.requires_grad]

    def third(join):
        xr = x.clone().requires_grad_(True)
        grads = torch.autograd.grad(m.loss(m.model(xr), y), wrt, create_graph=True)
        g = join(grads)
        v = torch.randn(g.shape, dtype=g.dtype, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        h, = torch.autograd.grad(g, xr, grad_outputs=v, create_graph=True)
        e = torch.zeros_like(h)
        e.view(-1)[5] = 1
        je, = torch.autograd.grad(h, v, grad_outputs=e)
        return g.detach(), h.detach(), je, h

    ours, ref = third(targets.oracle.joined), third(lambda gs: torch.cat([t.reshape(-1) for t in gs]))
    for a, b in zip(ours[:3], ref[:3]):
        assert torch.equal(a, b)
    assert ref[2].abs().sum() > 0
    assert _nodes(ref[3], "SliceBackward0") >= len(wrt) and _nodes(ours[3], "SliceBackward0") == 0
    assert _nodes(ours[3], "SplitWithSizesBackward0") == 1
    gx = targets.flat_gradient(m, x, y)
    assert torch.equal(gx, ours[0])


def test_the_flat_gradient_s_concatenation_goes_under_torch_func_transforms_as_torch_cat():
    a, b = torch.randn(7, 3, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)

    def ours(t):
        return targets.oracle.joined([t * 2, b]).pow(3).sum()

    def cat(t):
        return torch.cat([(t * 2).reshape(-1), b]).pow(3).sum()

    assert torch.equal(torch.func.grad(ours)(a[0]), torch.func.grad(cat)(a[0]))
    assert torch.equal(torch.func.vmap(torch.func.grad(ours))(a), torch.func.vmap(torch.func.grad(cat))(a))
    assert torch.equal(torch.func.vmap(lambda t: targets.oracle.joined([t, b]))(a),
                       torch.func.vmap(lambda t: torch.cat([t.reshape(-1), b]))(a))


def test_oracle_at_other_weights_equals_loading_them():
    m = targets.get_model("mlp", in_shape=(1, 8, 8), seed=0)
    other = targets.get_model("mlp", in_shape=(1, 8, 8), seed=5)
    x, y = torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2])
    params = targets.unflatten(m, targets.flat_params(other))
    assert torch.allclose(targets.flat_gradient(m, x, y, params=params), targets.flat_gradient(other, x, y), atol=1e-6)


def test_soft_labels_equal_hard_labels_when_one_hot():
    m = targets.get_model("logreg", in_shape=(1, 8, 8))
    x, y = torch.rand(2, 1, 8, 8), torch.tensor([4, 9])
    soft = torch.nn.functional.one_hot(y, 10).float()
    assert torch.allclose(targets.flat_gradient(m, x, y), targets.flat_gradient(m, x, soft), atol=1e-6)


def test_per_example_gradients_average_to_the_batch_gradient_on_both_paths():
    m = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0).to(dtype=torch.float64)
    x, y = torch.rand(3, 1, 8, 8, dtype=torch.float64), torch.tensor([1, 4, 4])
    rows = targets.per_example_gradients(m, x, y)  # vmap path
    assert rows.shape == (3, targets.num_params(m))
    assert torch.allclose(rows.mean(0), targets.flat_gradient(m, x, y), atol=1e-12)
    graph_rows = targets.per_example_gradients(m, x.requires_grad_(True), y, create_graph=True)
    assert torch.allclose(graph_rows.detach(), rows, atol=1e-12) and graph_rows.requires_grad


def test_a_plain_module_becomes_a_victim_with_cross_entropy_and_its_output_layer_as_head():
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3)
    assert v.head is net[3] and v.task == "classification" and v.d == 16 * 8 + 8 + 8 * 3 + 3
    x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 2])
    g = targets.flat_gradient(v, x, y)
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    assert torch.allclose(g, torch.cat([p.grad.flatten() for p in net.parameters()]), atol=1e-7)
    from leakattack.errors import UserError

    with pytest.raises(UserError, match="the nn.Linear that computes the module's output has 3 outputs, and "
                                        "num_classes is 5"):
        targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=5)
    assert targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3, head=None).head is None
    with pytest.raises(UserError, match=r"returns \(2, 3\) for a batch of 2, not the \(2, 5\) class scores"):
        targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=5, head=None)


def test_a_module_that_cannot_take_its_input_shape_is_refused_when_wrapped():
    """Victim.from_module runs the module once on a batch of 2 zeros: a wrong input shape or output is one sentence
    there, not a shape error from inside the first attack; the probe leaves BatchNorm's running statistics alone."""
    from leakattack.errors import UserError

    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 10))
    with pytest.raises(UserError, match=r"model 'mine' fails on a batch of shape \(2, 3, 32, 32\) \(RuntimeError: "):
        targets.Victim.from_module(net, input_shape=(3, 32, 32), num_classes=10, name="mine")
    flat = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 10), nn.Flatten(0))
    with pytest.raises(UserError, match=r"returns \(20,\) for a batch of 2, not the \(2, 10\) class scores"):
        targets.Victim.from_module(flat, input_shape=(3, 4, 4), num_classes=10)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 2 * 2, 10))
    with pytest.raises(UserError, match=r"shape \(2, 1, 3, 4, 4\) .*; input_shape is one example's shape without the "
                                        r"batch dimension: \(3, 4, 4\)\?$"):
        targets.Victim.from_module(conv, input_shape=(1, 3, 4, 4), num_classes=10)
    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 2 * 2, 10))
    with torch.no_grad():
        bn[1].running_mean.fill_(0.25)
    for mode in ("train", "eval"):
        targets.Victim.from_module(bn, input_shape=(3, 4, 4), num_classes=10, bn_mode=mode)
        assert torch.equal(bn[1].running_mean, torch.full((4,), 0.25)) and int(bn[1].num_batches_tracked) == 0


def test_model_parameters_are_checked_and_passed_to_the_builder():
    v = targets.get_model("mlp", in_shape=(1, 4, 4), hidden=5, act="relu")
    assert v.model.fc1.out_features == 5 and isinstance(v.model.act, nn.ReLU)
    assert "act" in targets.model_params("lenet") and "act" not in targets.model_params("logreg")
    with pytest.raises(ValueError, match="model 'logreg' has no parameter 'act'"):
        targets.get_model("logreg", act="relu")
    # Victim.from_module's name for the input's shape: the sentence names get_model's own
    with pytest.raises(ValueError, match=r"has no parameter 'input_shape'; allowed: act; one example's shape is "
                                         r"get_model's in_shape=\(C, H, W\)"):
        targets.get_model("lenet", input_shape=(1, 28, 28))
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        targets.get_model("mlp", act="swish")


def test_registering_a_model_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        targets.register_model("lenet", nn.Linear)


def test_wrapping_and_observing_refuse_what_does_not_fit_in_one_sentence():
    from leakattack import Channel, observe
    from leakattack.errors import UserError
    from leakattack.sketch import get_sketch

    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    for kw, said in ((dict(input_shape=16), "input_shape must be the shape of one example"),
                     (dict(num_classes=0), "num_classes must be an integer of at least 1, got 0"),
                     (dict(task="classify"), "unknown task 'classify'"),
                     (dict(bn_mode="evaluation"), "unknown BatchNorm mode 'evaluation'")):
        with pytest.raises(UserError, match=re.escape(said)):
            targets.Victim.from_module(net, **{"input_shape": (1, 4, 4), "num_classes": 3, **kw})
    with pytest.raises(UserError, match="has no trainable parameters"):
        targets.Victim.from_module(nn.Flatten(), input_shape=(1, 4, 4), num_classes=16, head=None)
    with pytest.raises(UserError, match="must be a torch.nn.Module, got function"):
        targets.Victim.from_module(lambda x: x, input_shape=(1, 4, 4), num_classes=3, head=None)
    v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3)
    x, channel = torch.rand(2, 1, 4, 4), Channel(get_sketch("none", v.d, v.d))
    for args, said in (((x, 1, channel), "x and labels must be torch tensors"),
                       ((x, torch.tensor([0, 1, 2]), channel), "labels must give one label per example: x holds 2"),
                       ((x, torch.tensor([0, 1]), channel.sketch), "the channel must be a leakattack.Channel")):
        with pytest.raises(UserError, match=re.escape(said)):
            observe(v, *args)


class _AuxAfterHead(nn.Module):
    """A classifier whose nn.Linear registered last is an auxiliary projection, not the layer that scores the
    classes; ``scores`` after the head: none, a log-softmax, or F.linear on the head's weight (no nn.Linear call)."""

    def __init__(self, scores="plain"):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU())
        self.fc = nn.Linear(8, 3)
        self.proj = nn.Linear(8, 3)  # as many outputs as the head, run after it, not returned
        self.scores = scores

    def forward(self, x):
        h = self.body(x)
        if self.scores == "functional":
            out = nn.functional.linear(h, self.fc.weight, self.fc.bias)
        else:
            out = self.fc(h)
        self.proj(h)
        return nn.functional.log_softmax(out, 1) if self.scores == "log_softmax" else out


@pytest.mark.parametrize("name", ["lenet", "logreg", "mlp", "resnet20", "resnet18", "vit_small"])
def test_every_zoo_model_s_head_is_the_linear_layer_that_computes_its_output(name):
    v = targets.get_model(name, seed=0)
    assert output_linear(v.model, v.input_shape) == (last_linear(v.model), True) and v.head is last_linear(v.model)


@pytest.mark.parametrize("scores", ["plain", "log_softmax"])
def test_the_head_found_is_the_linear_layer_that_computes_the_output_not_the_last_registered(scores):
    import warnings

    net = _AuxAfterHead(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3)
    assert v.head is net.fc and last_linear(net) is net.proj


def test_a_module_whose_output_no_linear_layer_computes_takes_the_last_registered_with_a_warning():
    from leakattack.errors import SettingWarning

    net = _AuxAfterHead("functional")
    with pytest.warns(SettingWarning, match="no nn.Linear of model 'custom' computes its output: the last registered "
                                            "nn.Linear its forward pass calls, 'proj', is taken as the classifier "
                                            "head"):
        v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3)
    assert v.head is net.proj
    assert targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3, head=net.fc).head is net.fc


class _LinearNeverRun(nn.Module):
    """A registered nn.Linear the forward pass never calls, and a convolutional head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.emb = nn.Linear(16, 3)  # registered, never called
        self.head = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.c1(x))).mean((2, 3))


def test_a_linear_layer_that_never_runs_is_no_head_and_a_named_one_is_one_sentence():
    """emb was taken as the head, and the label rules' hook on it never fired: IndexError in head_inputs."""
    from leakattack.errors import SettingWarning, UserError

    with pytest.warns(SettingWarning, match="no nn.Linear of model 'custom' runs in its forward pass"):
        v = targets.Victim.from_module(_LinearNeverRun(), input_shape=(1, 4, 4), num_classes=3)
    assert v.head is None
    net = _AuxAfterHead("functional")  # fc's weight used through F.linear: named as the head, it never runs
    v = targets.Victim.from_module(net, input_shape=(1, 4, 4), num_classes=3, head=net.fc)
    with pytest.raises(UserError, match="the classifier head 'fc' of model 'custom' does not run in its forward pass"):
        v.head_inputs(torch.zeros(2, 1, 4, 4))
