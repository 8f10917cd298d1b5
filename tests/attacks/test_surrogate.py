"""The ReLU surrogate (--relu-surrogate): exact forward, sigmoid(z/tau) as ReLU's derivative, twice differentiable."""

import pytest
import torch
from torch import nn

from leakattack.attacks import GradientMatching, init_dummy
from leakattack.attacks.gradient_matching import distance_to_unit, match_loss, unit
from leakattack.attacks.surrogate import relu_modules, relu_surrogate, surrogate_relu
from leakattack.config import RunConfig
from leakattack.experiment import prepare


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 9), nn.ReLU(), nn.Linear(9, 4)).double()


def test_forward_is_exact_and_the_derivative_is_the_sigmoid():
    z = torch.linspace(-2, 2, 41, dtype=torch.float64, requires_grad=True)
    out = surrogate_relu(z, 0.3)
    assert torch.equal(out, torch.relu(z.detach()))
    g, = torch.autograd.grad(out.sum(), z)
    assert torch.allclose(g, torch.sigmoid(z.detach() / 0.3), rtol=0, atol=1e-15)


def test_the_block_swaps_relu_modules_and_puts_them_back():
    model = _mlp()
    x = torch.randn(3, 6, dtype=torch.float64)
    exact = model(x)
    with relu_surrogate(model, 0.1):
        assert all("forward" in vars(m) for m in relu_modules(model))
        assert torch.equal(model(x), exact)  # the forward pass is the model's own
    assert not any("forward" in vars(m) for m in relu_modules(model))
    with pytest.raises(RuntimeError):
        with relu_surrogate(model, 0.1):
            raise RuntimeError("inside")
    assert not any("forward" in vars(m) for m in relu_modules(model))
    with relu_surrogate(model, 0.0):  # tau 0: exact, nothing swapped
        assert not any("forward" in vars(m) for m in relu_modules(model))


def _weight_gradient(model, x, label):
    loss = nn.functional.cross_entropy(model(x), label)
    return torch.autograd.grad(loss, list(model.parameters()), create_graph=True)


def test_second_derivatives_match_the_smooth_formula():
    """d/dx of a scalar of grad_w F through the surrogate equals autograd through the closed form
    grad_W1 F = (sigmoid(z/tau) * W2^T (p - e)) x^T of a one-hidden-layer network, in which sigmoid(z/tau) is
    ReLU's derivative everywhere (also where p depends on x through the hidden layer)."""
    model, tau = _mlp(), 0.2
    W1, b1, W2 = model[0].weight.detach(), model[0].bias.detach(), model[2].weight.detach()
    x = torch.randn(1, 6, dtype=torch.float64, requires_grad=True)
    label = torch.tensor([2])
    v = torch.randn(9, 6, dtype=torch.float64)
    with relu_surrogate(model, tau):
        gW1 = _weight_gradient(model, x, label)[0]
    dx, = torch.autograd.grad((gW1 * v).sum(), x)

    z = x @ W1.T + b1
    p = torch.softmax(surrogate_relu(z, tau) @ W2.T + model[2].bias.detach(), -1)
    delta = torch.sigmoid(z / tau) * ((p - nn.functional.one_hot(label, 4)) @ W2)
    closed = delta.T @ x
    assert torch.allclose(gW1, closed, rtol=1e-12, atol=1e-14)
    dx_closed, = torch.autograd.grad((closed * v).sum(), x)
    assert torch.allclose(dx, dx_closed, rtol=1e-10, atol=1e-14)


def test_a_narrow_surrogate_is_the_exact_gradient():
    model = _mlp()
    x = torch.randn(5, 6, dtype=torch.float64)
    label = torch.tensor([0, 1, 2, 3, 0])
    exact = _weight_gradient(model, x, label)
    with relu_surrogate(model, 1e-9):
        narrow = _weight_gradient(model, x, label)
    for a, b in zip(exact, narrow):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def _obs(sketch="none"):
    """An untrained CIFAR ResNet-8 at 16 px, BatchNorm in eval mode, photo 0, float64, labels granted."""
    ratio = {} if sketch == "none" else {"sketch_ratio": 0.1}
    cfg = RunConfig(model="resnet_cifar", model_params={"depth": 8}, image_size=16, bn="eval", sketch=sketch,
                    dtype="float64", label_mode="given", threads=1, **ratio)
    return prepare(cfg).case.obs


def test_the_surrogate_smooths_the_objective_the_exact_derivative_misleads_on():
    """At a dummy start of a small BatchNorm ResNet, a step of 0.01 along the exact objective's descent direction
    raises it (a ReLU crossed its threshold: a jump the derivative cannot see); with the surrogate the objective's
    difference quotients are the same from h = 1e-6 to 1e-2 and its derivative has their sign and size."""
    obs = _obs()
    y_unit = unit(obs.y.flatten())
    x = init_dummy(obs.input_shape, "gaussian", 2, dtype=torch.float64).requires_grad_(True)

    def objective(z):
        return float(distance_to_unit(obs.forward(z, obs.labels).flatten(), y_unit).detach())

    def slope_and_direction():
        loss = distance_to_unit(obs.forward(x, obs.labels).flatten(), y_unit)
        g, = torch.autograd.grad(loss, x)
        return float(-g.norm()), -g / g.norm(), float(loss.detach())

    slope, d, start = slope_and_direction()
    assert slope < 0 and objective(x.detach() + 1e-2 * d) > start  # the exact objective rose along its descent
    with relu_surrogate(obs.victim.model, 0.05):
        slope, d, _ = slope_and_direction()

        def quotient(h):
            return (objective(x.detach() + h * d) - objective(x.detach() - h * d)) / (2 * h)

        assert quotient(1e-2) == pytest.approx(quotient(1e-6), rel=1e-2)
        # the derivative takes the forward activations' derivative as the sigmoid too: close, not equal
        assert slope == pytest.approx(quotient(1e-6), rel=0.25)


def test_the_attack_keeps_and_reports_the_exact_objective():
    obs = _obs("srht")
    attack = GradientMatching(optimizer="adam", iterations=60, lr=0.025, objective="cosine", signed=True,
                              schedule="step", box=True, labels="given", surrogate=0.1, init_seed=2, stall_window=0)
    result = attack.reconstruct(obs)
    exact = distance_to_unit(obs.forward(result.x, obs.labels).flatten(), unit(obs.y.flatten()))
    assert result.final_loss == pytest.approx(float(exact.detach()), rel=1e-9)
    assert not any("forward" in vars(m) for m in relu_modules(obs.victim.model))


def test_lbfgs_runs_on_the_surrogate_and_reports_the_exact_objective():
    # its line search reads the surrogate objective's values and derivative (the test above: within 25 %); without
    # the step schedule tau stays where it starts, so a narrow one is needed to come near the exact minimum
    obs = _obs("srht")
    attack = GradientMatching(optimizer="lbfgs", iterations=30, labels="given", surrogate=0.01, init_seed=2,
                              stall_window=0)
    result = attack.reconstruct(obs)
    exact = match_loss(obs.forward(result.x, obs.labels).flatten(), obs.y.flatten(), "l2")
    assert result.final_loss == pytest.approx(float(exact.detach()), rel=1e-9)
    assert result.final_loss < 0.5 * result.losses[0] and result.stop_reason != "stalled"


def test_surrogate_must_be_non_negative():
    with pytest.raises(ValueError, match="non-negative"):
        GradientMatching(surrogate=-1.0)


def test_a_surrogate_asked_for_on_a_victim_without_relu_modules_is_one_warning():
    from leakattack.errors import SettingWarning

    with pytest.warns(SettingWarning, match="--relu-surrogate changes nothing here: model 'lenet' has no nn.ReLU"):
        prepare(RunConfig(model="lenet", surrogate=0.1, iterations=1))


def test_a_surrogate_without_the_step_schedule_is_one_warning():
    from leakattack.errors import SettingWarning

    with pytest.warns(SettingWarning, match="--relu-surrogate without the step schedule keeps tau at 0.1"):
        prepare(RunConfig(model="resnet20", recipe="dlg", surrogate=0.1, iterations=1, device="cpu"))


def test_restarts_share_one_batched_pass_under_the_surrogate():
    """The per-layer batched gradients of two restarts agree with one-by-one evaluation under the surrogate (the
    attack keeps the batched path), and the kept start's loss is the exact objective at its image."""
    from leakattack.attacks.gradient_matching import _Problem

    obs = _obs("srht")
    attack = GradientMatching(optimizer="adam", iterations=30, lr=0.025, objective="cosine", signed=True,
                              schedule="step", box=True, labels="given", surrogate=0.1, init_seed=2, stall_window=0,
                              restarts=2)
    xs = torch.stack([init_dummy(obs.input_shape, "gaussian", 2 + 1000 * r, dtype=torch.float64) for r in range(2)])
    problem = _Problem(attack, obs, xs, obs.labels)
    problem.evaluate([0, 1], problem.z0)
    assert problem.batched is not None
    result = attack.reconstruct(obs)
    exact = distance_to_unit(obs.forward(result.x, obs.labels).flatten(), unit(obs.y.flatten()))
    assert result.final_loss == pytest.approx(float(exact.detach()), rel=1e-9)
    assert result.final_loss == min(result.restart_losses)
