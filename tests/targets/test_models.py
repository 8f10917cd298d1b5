"""Victim models and the gradient oracle."""

import torch
from torch import nn

import targets


def test_registry_lists_the_required_models():
    assert {"lenet", "mlp", "linreg", "logreg"} <= set(targets.list_models())


def test_lenet_is_the_dlg_architecture():
    m = targets.get_model("lenet", num_classes=10, in_shape=(3, 32, 32))
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [(3, 12, (5, 5)), (12, 12, (5, 5)), (12, 12, (5, 5))]
    assert isinstance(m.act, nn.Sigmoid)
    assert m.fc.in_features == 768 and m.fc.out_features == 10
    assert targets.num_params(m) == 15826
    assert not any(isinstance(c, nn.modules.batchnorm._BatchNorm) for name in targets.list_models()
                   for c in targets.get_model(name).modules())


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
    m = targets.get_model("linreg", in_shape=(1, 4, 4), seed=0).double()
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64)
    y = torch.tensor([2.0], dtype=torch.float64)
    w = m.fc.weight.detach().flatten()
    expected = (w @ x.flatten() - y) * x.flatten()
    assert torch.allclose(targets.flat_gradient(m, x, y), expected, atol=1e-12)


def test_oracle_matches_autograd_and_supports_second_derivatives():
    m = targets.get_model("lenet", in_shape=(1, 28, 28), seed=0)
    x = torch.rand(2, 1, 28, 28, requires_grad=True)
    y = torch.tensor([3, 7])
    g = targets.flat_gradient(m, x, y, create_graph=True)
    assert g.shape == (targets.num_params(m),)
    m.zero_grad()
    m.loss(m(x.detach()), y).backward()
    ref = torch.cat([p.grad.flatten() for p in m.parameters()])
    assert torch.allclose(g.detach(), ref, atol=1e-6)
    (gx,) = torch.autograd.grad(g.pow(2).sum(), x)
    assert gx.abs().sum() > 0


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
    m = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0).double()
    x, y = torch.rand(3, 1, 8, 8, dtype=torch.float64), torch.tensor([1, 4, 4])
    rows = targets.per_example_gradients(m, x, y)  # vmap path
    assert rows.shape == (3, targets.num_params(m))
    assert torch.allclose(rows.mean(0), targets.flat_gradient(m, x, y), atol=1e-12)
    graph_rows = targets.per_example_gradients(m, x.requires_grad_(True), y, create_graph=True)
    assert torch.allclose(graph_rows.detach(), rows, atol=1e-12) and graph_rows.requires_grad
