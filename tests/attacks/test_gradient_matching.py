"""Gradient matching behind the Attack contract: objective, optimisers, stopping, divergence, restarts."""

import dataclasses
import math

import pytest
import torch

import targets
from leakattack.attacks import (
    AttackError,
    GradientMatching,
    get_attack,
    get_optimizer,
    get_prior,
    init_dummy,
    list_attacks,
    list_optimizers,
    list_priors,
    match_loss,
)
from leakattack.attacks.priors import total_variation
from leakattack.channel import Channel
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch


def _problem(kind="srht", ratio=0.5, shape=(1, 8, 8), seed=0, model="lenet", labels=(3,), threat=ThreatModel()):
    victim = targets.get_model(model, in_shape=shape, seed=seed)
    d = victim.d
    sk = make_sketch(kind, d, None if kind == "none" else max(1, round(ratio * d)), seed=1)
    x = torch.rand((len(labels), *shape), generator=torch.Generator().manual_seed(5))
    lab = torch.tensor(labels, dtype=torch.float32 if victim.task == "regression" else torch.long)
    obs = observe(victim, x, lab, Channel(sk), threat)
    return victim, obs, x, lab


def _gm(**kw):
    return GradientMatching(**{"labels": "given", **kw})


def test_objective_is_zero_at_the_truth_and_positive_elsewhere():
    _, obs, x, labels = _problem()
    assert match_loss(obs.forward(x, labels), obs.y, "l2").item() < 1e-10
    assert match_loss(obs.forward(torch.rand_like(x), labels), obs.y, "l2").item() > 1e-4
    assert match_loss(obs.forward(x, labels), obs.y, "cosine").item() < 1e-6


def test_lbfgs_reconstructs_a_small_image_through_srht():
    _, obs, x, labels = _problem()
    r = _gm(optimizer="lbfgs", iterations=150, lr=1.0).run(obs, init_dummy(x.shape, "uniform", 2), labels)
    assert r.losses[r.best_step] < 1e-6 * r.losses[0]
    assert (r.x - x).pow(2).mean().item() < 1e-4


def test_losses_are_recorded_every_step_and_best_iterate_is_lowest():
    _, obs, x, labels = _problem()
    r = _gm(optimizer="adam", iterations=20, lr=0.05, tol=0).run(obs, init_dummy(x.shape, "gaussian", 2), labels)
    assert len(r.losses) == 21 and r.iterations == 20
    assert r.losses[r.best_step] == min(r.losses)


def test_tolerance_stops_early():
    _, obs, x, labels = _problem()
    r = _gm(iterations=50, tol=1e-6).run(obs, x.clone(), labels)
    assert r.stop_reason == "tolerance" and r.iterations == 0


def test_divergence_ends_cleanly_with_the_best_iterate():
    # linreg's gradient (w^T x - y) x grows cubically in x: a huge step overflows float32
    _, obs, x, labels = _problem(model="linreg", ratio=0.5, labels=(3.0,))
    r = _gm(optimizer="gd", iterations=100, lr=1e6).run(obs, init_dummy(x.shape, "uniform", 2), labels)
    assert r.stop_reason == "diverged"
    assert "diverged" in r.message
    assert torch.isfinite(r.x).all() and math.isfinite(r.losses[r.best_step])


def test_gd_with_a_small_step_decreases_the_loss():
    _, obs, x, labels = _problem()
    r = _gm(optimizer="gd", iterations=30, lr=0.05).run(obs, init_dummy(x.shape, "uniform", 2), labels)
    assert r.losses[-1] < r.losses[0]


def test_box_keeps_iterates_in_unit_interval():
    _, obs, x, labels = _problem()
    r = _gm(optimizer="adam", iterations=10, lr=0.5, box=True).run(obs, init_dummy(x.shape, "gaussian", 2), labels)
    assert r.x.min() >= 0 and r.x.max() <= 1


def test_tv_prior_smooths_the_reconstruction_of_an_underdetermined_message():
    # b = 0.05 d < m unknowns: without a prior the dummy stays noisy; a TV prior lowers its total variation
    _, obs, x, labels = _problem(ratio=0.05)
    x0 = init_dummy(x.shape, "uniform", 2)
    plain = _gm(optimizer="adam", iterations=60, lr=0.05).run(obs, x0, labels)
    smooth = _gm(optimizer="adam", iterations=60, lr=0.05, priors={"tv": 1.0}).run(obs, x0, labels)
    assert total_variation(smooth.x) < 0.8 * total_variation(plain.x)


def test_total_variation_of_a_constant_image_is_zero():
    assert total_variation(torch.full((1, 3, 8, 8), 0.3)).item() == 0
    assert total_variation(torch.rand(1, 3, 8, 8)).item() > 0


def test_dlg_mode_optimises_labels_jointly_and_finds_the_true_label():
    _, obs, x, labels = _problem(kind="none")
    r = GradientMatching(labels="dlg", iterations=100).run(obs, init_dummy(x.shape, "uniform", 2), None)
    assert r.labels.shape == (1,) and r.labels.tolist() == labels.tolist()
    assert r.losses[r.best_step] < 1e-3 * r.losses[0]


def test_attack_is_invariant_to_the_scale_of_the_message():
    # torch's L-BFGS drops curvature pairs with s^T y <= 1e-10 (absolute); the attack
    # optimises a normalised L_R so a tiny message (a trained model's) is attacked alike
    _, obs, x, labels = _problem()
    tiny_obs = dataclasses.replace(obs, y=1e-4 * obs.y, forward=lambda a, b: 1e-4 * obs.forward(a, b))
    x0 = init_dummy(x.shape, "uniform", 2)
    big = _gm(iterations=60).run(obs, x0, labels)
    tiny = _gm(iterations=60).run(tiny_obs, x0, labels)
    # float rounding differs, so the trajectories are not identical: both must converge
    assert (big.x - x).pow(2).mean().item() < 1e-5
    assert (tiny.x - x).pow(2).mean().item() < 1e-5


def test_reconstruct_keeps_the_restart_with_the_lowest_loss():
    _, obs, x, labels = _problem(threat=ThreatModel(knows_labels=True))
    r = _gm(optimizer="adam", iterations=15, lr=0.05, restarts=3, init_seed=7).reconstruct(obs)
    assert len(r.restart_losses) == 3 and r.final_loss == min(r.restart_losses)
    one = _gm(optimizer="adam", iterations=15, lr=0.05, restarts=1, init_seed=7).reconstruct(obs)
    # the restarts are evaluated in one batched pass: equal to the single start up to float32 round-off
    assert one.restart_losses == pytest.approx(r.restart_losses[:1], rel=1e-5)


def test_reconstruct_recovers_labels_by_the_sign_rule_when_not_given():
    _, obs, x, labels = _problem(kind="none")
    r = GradientMatching(labels="idlg", iterations=5).reconstruct(obs)
    assert r.labels.tolist() == labels.tolist()


def test_given_labels_that_the_threat_model_withholds_are_refused_in_one_sentence():
    _, obs, _, _ = _problem()
    with pytest.raises(AttackError, match="does not grant them"):
        _gm(iterations=1).reconstruct(obs)


def test_registries_list_and_build_attacks_optimizers_and_priors():
    assert "gradient-matching" in list_attacks()
    assert isinstance(get_attack("gradient-matching", iterations=3), GradientMatching)
    assert list_optimizers() == ["lbfgs", "adam", "gd"]
    assert get_optimizer("adam", 0.1).lr == 0.1 and get_optimizer("gd").lr == 0.01
    assert "tv" in list_priors() and get_prior("tv", 2.0)(torch.full((1, 1, 4, 4), 0.5)).item() == 0


def test_an_unknown_optimizer_is_an_error_not_sgd():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd2'; choose one of"):
        get_optimizer("sgd2")


def test_a_loss_that_rises_without_overflowing_is_reported_with_the_best_step():
    # lenet with gd at a huge step saturates its sigmoids: the loss rises but stays finite
    _, obs, x, labels = _problem()
    r = _gm(optimizer="gd", iterations=20, lr=1e6).run(obs, init_dummy(x.shape, "uniform", 2), labels)
    assert r.losses[-1] > r.losses[0] and all(math.isfinite(v) for v in r.losses)
    assert "the matching term rose" in r.message and f"from step {r.best_step}" in r.message
    assert "(step size too large?)" in r.message
    r = _gm(optimizer="gd", iterations=20, lr=1e6, priors={"tv": 1e-2}).run(obs, init_dummy(x.shape, "uniform", 2),
                                                                          labels)
    # the steps follow TV too: the rise is not only the step size's
    assert "(the objective also holds TV, which may outweigh it, or the step size is too large)" in r.message, \
        r.message


def test_the_cosine_distance_keeps_its_precision_when_the_directions_nearly_agree():
    """1 - cos as half the squared distance of the unit vectors: equal to 1 - cos, and in float32 still accurate at
    1e-8, where 1 - F.cosine_similarity has cancelled to rounding noise (it reads 0 or below for a near match)."""
    from leakattack.attacks.gradient_matching import cosine_distance, match_loss

    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 1000, generator=g, dtype=torch.float64)
    b = torch.randn(1000, generator=g, dtype=torch.float64)
    assert cosine_distance(a, b) == pytest.approx(1 - torch.nn.functional.cosine_similarity(a, b[None], dim=1),
                                                  rel=1e-12)
    y = torch.randn(2_000_000, generator=g, dtype=torch.float64)
    x = y + 1e-4 * torch.randn(2_000_000, generator=g, dtype=torch.float64)
    exact = float(cosine_distance(x, y))
    assert 1e-9 < exact < 1e-8
    assert float(match_loss(x.float(), y.float(), "cosine")) == pytest.approx(exact, rel=0.05)
    assert float(cosine_distance(x.float(), y.float())) >= 0


@pytest.mark.parametrize("objective, fit", [("l2", "L_R/||y||^2"), ("cosine", "the cosine distance")])
def test_the_tolerance_stop_names_the_quantity_it_compared(objective, fit):
    _, obs, x, labels = _problem(threat=ThreatModel(knows_labels=True))
    result = _gm(objective=objective, optimizer="adam", lr=0.01, iterations=50, tol=10.0).reconstruct(obs)
    assert result.stop_reason == "tolerance" and result.message.startswith("converged at step "), result.message
    assert f": {fit} = " in result.message


@pytest.mark.parametrize("objective, name", [("cosine", "cosine distance"), ("l2", "L_R")])
def test_a_stalled_start_names_the_matching_term_it_was_stopped_by(objective, name):
    # a step size too small to move: the lowest matching term stops falling within the window
    _, obs, x, labels = _problem()
    r = _gm(optimizer="adam", objective=objective, iterations=200, lr=1e-9, tol=0, stall_window=10,
            stall_gain=0.5).run(obs, init_dummy(x.shape, "gaussian", 2), labels)
    assert r.stop_reason == "stalled" and f"the lowest {name} fell by less than 50%" in r.message, r.message


def test_with_the_box_a_start_that_stays_best_is_returned_inside_it():
    # signed Adam at a step of 5 leaves LeNet's cosine distance above the start's: the best iterate is the start,
    # which a Gaussian draw N(0.5, 0.25^2) puts partly outside [0, 1]
    torch.manual_seed(0)
    victim = targets.get_model("lenet")
    x = torch.rand(1, 3, 32, 32)
    obs = observe(victim, x, torch.tensor([1]), Channel(make_sketch("none", victim.d, victim.d)),
                  ThreatModel(knows_labels=True))
    attack = GradientMatching(optimizer="adam", lr=5.0, iterations=3, objective="cosine", box=True, signed=True,
                              labels="given")
    x0 = init_dummy((1, 3, 32, 32), "gaussian", 0)
    assert float(x0.min()) < 0 and float(x0.max()) > 1
    result = attack.run(obs, x0, obs.labels)
    assert result.best_step == 0 and float(result.x.min()) >= 0 and float(result.x.max()) <= 1
    assert torch.equal(result.x, x0.clamp(0, 1))
    fit = GradientMatching(objective="cosine", labels="given").objective_terms(obs, x0.clamp(0, 1), obs.labels)
    assert result.losses[0] == pytest.approx(fit["match"], rel=1e-5)
    assert min(result.losses[1:]) > result.losses[0]


def test_a_time_limit_set_after_the_attack_was_built_stops_it():
    _, obs, x, labels = _problem()
    attack = _gm(optimizer="adam", iterations=20000, lr=0.01, tol=0, stall_window=0)
    attack.time_limit = 0.3
    result = attack.run(obs, init_dummy(x.shape, "gaussian", 2), labels)
    assert result.stop_reason == "time-limit" and result.iterations < 20000
