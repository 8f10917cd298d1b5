"""The observation: y = R g without a defense; defended messages are seeded, placed and clipped as specified."""

import pytest
import torch

import defenses
import targets
from leakattack.observation import observe, per_example_gradients
from leakattack.sketch import make_sketch


@pytest.fixture(scope="module")
def victim():
    torch.manual_seed(0)
    model = targets.get_model("logreg", in_shape=(1, 8, 8), seed=0).double()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    labels = torch.tensor([0, 3, 7])
    sketch = make_sketch("srht", targets.num_params(model), 300, seed=1)
    return model, x, labels, sketch


def test_undefended_observation_is_the_sketched_gradient(victim):
    model, x, labels, sketch = victim
    obs = observe(model, x, labels, sketch)
    assert torch.allclose(obs.y, sketch.apply(targets.flat_gradient(model, x, labels)))
    assert obs.defense == "" and obs.noise_seed is None


def test_per_example_gradients_average_to_the_batch_gradient(victim):
    model, x, labels, _ = victim
    G = per_example_gradients(model, x, labels)
    assert G.shape == (3, targets.num_params(model))
    assert torch.allclose(G.mean(0), targets.flat_gradient(model, x, labels), atol=1e-12)


def test_noise_is_reproducible_from_its_seed_and_changes_with_it(victim):
    model, x, labels, sketch = victim
    a = observe(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=5).y
    b = observe(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=5).y
    c = observe(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=6).y
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_noise_after_the_sketch_has_sigma_per_sketch_entry(victim):
    model, x, labels, sketch = victim
    clean = observe(model, x, labels, sketch).y
    y = observe(model, x, labels, sketch, "gaussian:sigma=2@after_sketch", noise_seed=0).y
    # 300 entries: the sample std of N(0, 4) is within 15 % of 2 (about 3.5 standard errors)
    assert (y - clean).std().item() == pytest.approx(2.0, rel=0.15)


def test_per_example_clip_of_one_example_equals_the_whole_update_clip(victim):
    model, x, labels, sketch = victim
    a = observe(model, x[:1], labels[:1], sketch, "per_example:C=0.01").y
    b = observe(model, x[:1], labels[:1], sketch, "clip:C=0.01").y
    assert torch.allclose(a, b, atol=1e-14)


def test_per_example_clip_bounds_the_averaged_update(victim):
    model, x, labels, _ = victim
    eye = make_sketch("none", targets.num_params(model), targets.num_params(model))
    y = observe(model, x, labels, eye, "per_example:C=0.01").y
    assert y.norm() <= 0.01 + 1e-12


def test_pipeline_steps_run_in_the_order_written(victim):
    model, x, labels, sketch = victim
    y = observe(model, x, labels, sketch, "gaussian:sigma=1,clip:C=0.5", noise_seed=0).y
    eye_norm = observe(model, x, labels, make_sketch("none", sketch.d, sketch.d), "gaussian:sigma=1,clip:C=0.5",
                       noise_seed=0).y.norm()
    assert eye_norm == pytest.approx(0.5, rel=1e-9)  # clipped last, after the noise
    assert defenses.build("gaussian:sigma=1,clip:C=0.5").steps[1].name == "clip" and y.shape == (300,)


def test_attacker_who_knows_the_clip_reproduces_the_clipped_message_exactly(victim):
    from leakattack.observation import attacker_simulator

    model, x, labels, sketch = victim
    for spec in ("clip:C=0.01", "per_example:C=0.01", "clip:C=0.01@after_sketch,gaussian:sigma=0"):
        y = observe(model, x, labels, sketch, spec).y
        assert torch.allclose(attacker_simulator(model, sketch, spec)(x, labels), y, atol=1e-14), spec
    blind = attacker_simulator(model, sketch, "")(x, labels)
    assert torch.allclose(blind, observe(model, x, labels, sketch).y)
