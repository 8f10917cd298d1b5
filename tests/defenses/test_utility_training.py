"""`--utility` trains through the sketched protocol: one round of it is one round of ``Sketched``, R_t from the shared
seed, the defense where the channel puts it."""

import dataclasses
import warnings

import pytest
import torch

import targets
from leakattack import data
from leakattack.channel import Channel
from leakattack.config import RunConfig
from leakattack.seeds import torch_generator
from leakattack.sketch import get_sketch, sketch_dim
from leakattack.utility import UtilitySettings, sketched_protocol, sketched_training
from targets.protocols import get_protocol, round_seed


@pytest.fixture(scope="module")
def digits_split():
    return data.train_test_split(data.get_dataset("digits"), 0.2, seed=0)


def settings(**run) -> UtilitySettings:
    return UtilitySettings.of(RunConfig(model="logreg", utility=True, utility_steps=1, **run))


def victim_of(s: UtilitySettings, train) -> targets.Victim:
    return targets.get_model(s.model, 10, train.in_shape, seed=s.model_seed, init=s.weight_init).to(
        dtype=torch.float64)


def first_batch(s: UtilitySettings, train):
    """The round-1 batch and the generator after drawing it, as the training draws them."""
    gen = torch_generator(s.noise_seed + 1)
    x, y = train.rows(torch.randperm(len(train), generator=gen)[:s.batch])
    return (x.to(torch.float64), y), gen


def test_settings_are_read_from_the_run_config():
    s = UtilitySettings.of(RunConfig(model="lenet", seed=4, sketch="countsketch", sketch_dim=100, defense="clip:C=1",
                                     utility_steps=7, utility_batch=16, utility_lr=0.25, noise_seed=9))
    assert (s.split_seed, s.model_seed, s.sketch_seed, s.noise_seed) == (4, 4, 5, 9)
    assert (s.sketch, s.sketch_dim, s.defense, s.steps, s.batch, s.lr) == ("countsketch", 100, "clip:C=1", 7, 16, 0.25)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps = 3  # type: ignore[misc]


@pytest.mark.parametrize("run,b", [({"sketch_dim": 101}, 101), ({"sketch_ratio": 0.25}, 1963),
                                   ({"sketch": "none"}, 7850)])
def test_the_protocol_sketches_to_the_run_s_b(digits_split, run, b):
    train, _ = digits_split
    s = settings(**run)
    p = sketched_protocol(s, victim_of(s, train), train, torch_generator(0))
    assert p.operator(1).b == b and p.operator(1).kind == s.sketch


def test_one_utility_round_is_one_round_of_the_sketched_protocol(digits_split):
    """Identity sketch, no defense: w^2 = the Sketched server's update of the client's one step = plain SGD."""
    train, _ = digits_split
    s = settings(sketch="none")
    victim = victim_of(s, train)
    w1 = targets.flat_params(victim)
    w2, norm = sketched_training(s, victim, train, torch_generator(s.noise_seed + 1))
    assert norm is None
    (x, y), _ = first_batch(s, train)
    p = get_protocol("sketched", victim, train, clients=1, local_lr=s.lr, sketch="none")
    dw = p.client_update(w1, x, y, 1, 0)
    torch.testing.assert_close(w2, p.server(w1, 1, {0: dw}, {0: p.encode(dw, 1)}), rtol=0, atol=1e-12)
    torch.testing.assert_close(w2, w1 - s.lr * targets.flat_gradient(victim, x, y), rtol=0, atol=1e-12)


def test_the_srht_update_of_a_utility_round_lies_in_the_row_space_of_r_t(digits_split):
    """w^2 - w^1 = R_1^T (message), R_1 drawn from the shared seed for round 1: it lies in range(R_1^T), which a
    generic vector does not (b/d = 0.05)."""
    train, _ = digits_split
    s = settings(sketch="srht", sketch_ratio=0.05)
    victim = victim_of(s, train)
    w1 = targets.flat_params(victim)
    w2, _ = sketched_training(s, victim, train, torch_generator(s.noise_seed + 1))
    R = get_sketch("srht", victim.d, sketch_dim(0.05, victim.d), seed=round_seed(s.sketch_seed, 1))
    rows = R.adjoint(torch.eye(R.b, dtype=torch.float64))  # (b, d): R itself

    def off_range(v):
        coef = torch.linalg.lstsq(rows.T, v.unsqueeze(1)).solution
        return float((rows.T @ coef).squeeze(1).sub(v).norm() / v.norm())

    step = w2 - w1
    assert step.norm() > 0 and off_range(step) < 1e-10
    assert off_range(torch.randn(victim.d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)) > 0.9
    (x, y), _ = first_batch(s, train)
    g = targets.flat_gradient(victim, x, y)
    torch.testing.assert_close(w2, w1 - s.lr * R.adjoint(R.apply(g)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("defense", ["per_example:C=0.5,gaussian:z=0.3@after_sketch", "clip:C=1,gaussian:sigma=0.01",
                                     "clip:C=0.2,laplace:b=0.01@after_sketch"])
def test_a_utility_round_sends_what_the_channel_sends(digits_split, defense):
    """The defense acts where the channel puts it: w^2 = w^1 - eta R_1^T send(g), with the same batch and noise draws
    (one generator for both), and ||R_1|| is the norm the sensitivity needs."""
    train, _ = digits_split
    s = settings(sketch="srht", sketch_ratio=0.3, defense=defense)
    victim = victim_of(s, train)
    w1 = targets.flat_params(victim)
    w2, norm = sketched_training(s, victim, train, torch_generator(s.noise_seed + 1))
    (x, y), gen = first_batch(s, train)
    R = get_sketch("srht", victim.d, sketch_dim(0.3, victim.d), seed=round_seed(s.sketch_seed, 1))
    channel = Channel(R, defense)
    g = (targets.per_example_gradients if channel.per_example else targets.flat_gradient)(victim, x, y)
    expect = w1 - s.lr * channel.sketch.adjoint(channel.send(g, gen))
    torch.testing.assert_close(w2, expect, rtol=0, atol=1e-12)
    assert norm == (channel.sketch.operator_norm() if channel.pipeline.needs_sketch_norm else None)


def test_a_training_that_ends_near_chance_says_it_did_not_learn_and_one_that_learns_does_not():
    """lenet at the default step size 0.5 through srht b/d = 0.5 without a defense ended at 0.136 on digits (its
    first steps saturate the sigmoids), where a clip read 0.944: the undefended point read as the worst, silently."""
    from leakattack.errors import SettingWarning
    from leakattack.utility import train_under_defense
    said = (r"--utility's training did not learn: test accuracy 0\.100 after 3 steps of size 1e-06 \(chance 0\.10; "
            r"test loss .* at its start, .* at its end\)")
    with pytest.warns(SettingWarning, match=said):
        out = train_under_defense(UtilitySettings.of(RunConfig(model="logreg", utility=True, utility_steps=3,
                                                               utility_lr=1e-6)))
    assert out["utility_acc"] < 0.2 and out["utility_note"].startswith("--utility's training did not learn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        out = train_under_defense(UtilitySettings.of(RunConfig(model="logreg", utility=True, utility_steps=30)))
    assert out["utility_acc"] > 0.5 and "utility_note" not in out


@pytest.mark.parametrize("defense, said, unsaid", [
    ("clip:C=1,gaussian:z=1.1@after_sketch", "measures the defense's noise or the training's step size or length",
     "a clip bounds the steps"),
    ("clip:C=1", "measures the training's step size or length more than the defense; a smaller", "noise"),
    ("", "more than the defense (a clip bounds the steps and may read higher); a smaller", "noise"),
])
def test_a_training_that_did_not_learn_names_the_causes_its_defense_allows(defense, said, unsaid):
    """clip:C=1,gaussian:z=1.1@after_sketch (noise 90 times the clipped message) was told that its step size or
    length was the cause and that a clip, which it had, may read higher."""
    from leakattack.errors import SettingWarning
    from leakattack.utility import train_under_defense

    with pytest.warns(SettingWarning, match="did not learn") as caught:
        out = train_under_defense(UtilitySettings.of(RunConfig(model="logreg", utility=True, utility_steps=3,
                                                               utility_lr=1e-6, defense=defense or None)))
    note = out["utility_note"]
    assert said in note and unsaid not in note.split("(chance")[1], note
    assert any(str(w.message) == note for w in caught)
