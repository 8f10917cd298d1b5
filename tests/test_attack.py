"""The gradient-matching attack loop: objective, optimisers, stopping, divergence."""

import math

import torch

import targets
from leakattack import attack
from leakattack.sketch import make_sketch


def _problem(kind="srht", ratio=0.5, shape=(1, 8, 8), seed=0):
    torch.manual_seed(0)
    model = targets.get_model("lenet", in_shape=shape, seed=seed)
    d = targets.num_params(model)
    sk = make_sketch(kind, d, max(1, round(ratio * d)), seed=1)
    gen = torch.Generator().manual_seed(5)
    x = torch.rand((1, *shape), generator=gen)
    labels = torch.tensor([3])
    y = sk.apply(targets.flat_gradient(model, x, labels)).detach()
    return model, sk, x, labels, y


def test_objective_is_zero_at_the_truth_and_positive_elsewhere():
    model, sk, x, labels, y = _problem()
    sim = attack.gradient_simulator(model, sk)
    assert attack.match_loss(sim(x, labels), y, "l2").item() < 1e-10
    assert attack.match_loss(sim(torch.rand_like(x), labels), y, "l2").item() > 1e-4
    assert attack.match_loss(sim(x, labels), y, "cosine").item() < 1e-6


def test_lbfgs_reconstructs_a_small_image_through_srht():
    model, sk, x, labels, y = _problem()
    x0 = attack.init_dummy(x.shape, "uniform", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, labels, optimizer="lbfgs", iterations=150, lr=1.0)
    assert r.losses[r.best_step] < 1e-6 * r.losses[0]
    assert (r.x - x).pow(2).mean().item() < 1e-4


def test_losses_are_recorded_every_step_and_best_iterate_is_lowest():
    model, sk, x, labels, y = _problem()
    x0 = attack.init_dummy(x.shape, "gaussian", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, labels, optimizer="adam", iterations=20, lr=0.05, tol=0)
    assert len(r.losses) == 21 and r.iterations == 20
    assert r.losses[r.best_step] == min(r.losses)


def test_tolerance_stops_early():
    model, sk, x, labels, y = _problem()
    r = attack.run(attack.gradient_simulator(model, sk), y, x.clone(), labels, iterations=50, tol=1e-6)
    assert r.stop_reason == "tolerance" and r.iterations == 0


def test_divergence_ends_cleanly_with_the_best_iterate():
    # linreg's gradient (w^T x - y) x grows cubically in x: a huge step overflows float32
    model = targets.get_model("linreg", in_shape=(1, 8, 8), seed=0)
    sk = make_sketch("srht", 64, 32, seed=1)
    x, labels = torch.rand(1, 1, 8, 8), torch.tensor([3.0])
    y = sk.apply(targets.flat_gradient(model, x, labels)).detach()
    x0 = attack.init_dummy(x.shape, "uniform", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, labels, optimizer="gd", iterations=100, lr=1e6)
    assert r.stop_reason == "diverged"
    assert "diverged" in r.message
    assert torch.isfinite(r.x).all() and math.isfinite(r.losses[r.best_step])


def test_gd_with_a_small_step_decreases_the_loss():
    model, sk, x, labels, y = _problem()
    x0 = attack.init_dummy(x.shape, "uniform", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, labels, optimizer="gd", iterations=30, lr=0.05)
    assert r.losses[-1] < r.losses[0]


def test_box_keeps_iterates_in_unit_interval_and_tv_prior_runs():
    model, sk, x, labels, y = _problem()
    x0 = attack.init_dummy(x.shape, "gaussian", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, labels, optimizer="adam", iterations=10,
                   lr=0.5, box=True, tv=1e-3)
    assert r.x.min() >= 0 and r.x.max() <= 1


def test_total_variation_of_a_constant_image_is_zero():
    assert attack.total_variation(torch.full((1, 3, 8, 8), 0.3)).item() == 0
    assert attack.total_variation(torch.rand(1, 3, 8, 8)).item() > 0


def test_dlg_mode_optimises_labels_jointly():
    model, sk, x, labels, y = _problem(kind="none")
    x0 = attack.init_dummy(x.shape, "uniform", 2, "cpu")
    r = attack.run(attack.gradient_simulator(model, sk), y, x0, None, num_classes=10, iterations=100)
    assert r.labels.shape == (1,)
    assert r.losses[r.best_step] < 1e-3 * r.losses[0]


def test_attack_is_invariant_to_the_scale_of_the_message():
    # torch's L-BFGS drops curvature pairs with s^T y <= 1e-10 (absolute); the attack
    # optimises a normalised L_R so a tiny message (a trained model's) is attacked alike
    model, sk, x, labels, y = _problem()
    sim = attack.gradient_simulator(model, sk)
    x0 = attack.init_dummy(x.shape, "uniform", 2, "cpu")
    big = attack.run(sim, y, x0, labels, iterations=60)
    tiny = attack.run(lambda a, b: 1e-4 * sim(a, b), 1e-4 * y, x0, labels, iterations=60)
    # float rounding differs, so the trajectories are not identical: both must converge
    assert (big.x - x).pow(2).mean().item() < 1e-5
    assert (tiny.x - x).pow(2).mean().item() < 1e-5
