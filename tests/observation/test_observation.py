"""The observation: y = R g without a defense; defended messages are seeded, placed and clipped as specified."""

import pytest
import torch

import defenses
import targets
from leakattack.channel import Channel
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch


@pytest.fixture(scope="module")
def victim():
    model = targets.get_model("logreg", in_shape=(1, 8, 8), seed=0).to(dtype=torch.float64)
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    labels = torch.tensor([0, 3, 7])
    sketch = make_sketch("srht", model.d, 300, seed=1)
    return model, x, labels, sketch


def _obs(model, x, labels, sketch, defense="", noise_seed=0, **threat):
    return observe(model, x, labels, Channel(sketch, defense), ThreatModel(**threat), noise_seed=noise_seed)


def test_undefended_observation_is_the_sketched_gradient(victim):
    model, x, labels, sketch = victim
    obs = _obs(model, x, labels, sketch)
    assert torch.allclose(obs.y, sketch.apply(targets.flat_gradient(model, x, labels)))
    assert obs.defense == "" and obs.noise_seed is None
    assert obs.d == model.d and obs.b == 300 and obs.input_shape == (3, 1, 8, 8)


def test_labels_reach_the_attacker_only_when_the_threat_model_grants_them(victim):
    model, x, labels, sketch = victim
    assert _obs(model, x, labels, sketch).labels is None
    assert _obs(model, x, labels, sketch, knows_labels=True).labels.tolist() == labels.tolist()


def test_noise_is_reproducible_from_its_seed_and_changes_with_it(victim):
    model, x, labels, sketch = victim
    a = _obs(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=5).y
    b = _obs(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=5).y
    c = _obs(model, x, labels, sketch, "gaussian:sigma=0.01", noise_seed=6).y
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_noise_after_the_sketch_has_sigma_per_sketch_entry(victim):
    model, x, labels, sketch = victim
    clean = _obs(model, x, labels, sketch).y
    y = _obs(model, x, labels, sketch, "gaussian:sigma=2@after_sketch", noise_seed=0).y
    # 300 entries: the sample std of N(0, 4) is within 15 % of 2 (about 3.5 standard errors)
    assert (y - clean).std().item() == pytest.approx(2.0, rel=0.15)


def test_per_example_clip_of_one_example_equals_the_whole_update_clip(victim):
    model, x, labels, sketch = victim
    a = _obs(model, x[:1], labels[:1], sketch, "per_example:C=0.01").y
    b = _obs(model, x[:1], labels[:1], sketch, "clip:C=0.01").y
    assert torch.allclose(a, b, atol=1e-14)


def test_per_example_clip_bounds_the_averaged_update(victim):
    model, x, labels, _ = victim
    eye = make_sketch("none", model.d, model.d)
    y = _obs(model, x, labels, eye, "per_example:C=0.01").y
    assert y.norm() <= 0.01 + 1e-12


def test_pipeline_steps_run_in_the_order_written(victim):
    model, x, labels, sketch = victim
    y = _obs(model, x, labels, sketch, "gaussian:sigma=1,clip:C=0.5").y
    eye_norm = _obs(model, x, labels, make_sketch("none", sketch.d, sketch.d), "gaussian:sigma=1,clip:C=0.5").y.norm()
    assert eye_norm == pytest.approx(0.5, rel=1e-9)  # clipped last, after the noise
    assert defenses.build("gaussian:sigma=1,clip:C=0.5").steps[1].name == "clip" and y.shape == (300,)


@pytest.mark.parametrize("spec", ["clip:C=0.01", "per_example:C=0.01", "gaussian:sigma=0,clip:C=0.01@after_sketch",
                                  "per_example:C=1,clip:C=0.5", "per_example:C=0.02,clip:C=0.01@after_sketch"])
def test_attacker_who_knows_the_clip_reproduces_the_clipped_message_exactly(victim, spec):
    # one implementation of the pipeline for both sides: per_example followed by clip clips the
    # sum and divides by B on the client, and the attacker's model does the same
    model, x, labels, sketch = victim
    obs = _obs(model, x, labels, sketch, spec, knows_clip=True)
    assert torch.allclose(obs.forward(x, labels), obs.y, atol=1e-14), spec


def test_attacker_blind_to_the_clip_models_the_plain_sketched_gradient(victim):
    model, x, labels, sketch = victim
    obs = _obs(model, x, labels, sketch, "clip:C=0.01")
    assert torch.allclose(obs.forward(x, labels), sketch.apply(targets.flat_gradient(model, x, labels)), atol=1e-14)


def test_the_attacker_view_never_models_noise(victim):
    model, x, labels, sketch = victim
    channel = Channel(sketch, "clip:C=1,gaussian:sigma=0.5")
    view = channel.attacker_view(ThreatModel(knows_clip=True))
    assert [t.name for t in view.pipeline.steps] == ["clip"]


def test_data_or_a_channel_that_do_not_fit_the_victim_are_one_sentence():
    from leakattack.errors import UserError

    victim = targets.get_model("lenet", in_shape=(3, 8, 8), seed=0)
    x, labels = torch.rand(1, 3, 8, 8), torch.tensor([2])
    fits = Channel(make_sketch("srht", victim.d, victim.d // 2, seed=1), "")
    assert observe(victim, x, labels, fits).b == victim.d // 2
    for args, needle in (
            ((torch.rand(1, 1, 8, 8), labels, fits),
             "x holds examples of shape (1, 8, 8), and the victim takes (3, 8, 8)"),
            ((x.double(), labels, fits), "x is float64 and the victim float32"),
            ((x, torch.tensor([12]), fits), "labels must lie in [0, 9] for the victim's 10 classes, got [12]"),
            ((x, labels, Channel(make_sketch("srht", 100, 50, seed=1), "")),
             f"the sketch maps d = 100 numbers, and the victim has d = {victim.d} weights")):
        with pytest.raises(UserError) as err:
            observe(victim, *args)
        assert str(err.value).startswith(needle), str(err.value)


def test_an_attacker_without_the_sketch_seed_models_the_client_with_another_r(victim):
    """ThreatModel(knows_sketch=False) was read only by the command line: from Python the attacker got the client's
    own R, an attacker of full knowledge. Now observe draws the attacker's R from another seed of the same family."""
    model, x, labels, sketch = victim
    known, blind = _obs(model, x, labels, sketch), _obs(model, x, labels, sketch, knows_sketch=False)
    assert torch.equal(known.y, blind.y)  # the client sends the same message
    assert known.linear_map is sketch and known.client_map is None
    assert blind.client_map is sketch and blind.sent_map is sketch
    assert blind.linear_map.kind == "srht" and (blind.linear_map.d, blind.linear_map.b) == (sketch.d, sketch.b)
    assert blind.linear_map.seed != sketch.seed
    target = model.target(labels)
    at_truth = [float((o.forward(x, target).detach() - o.y).norm() / o.y.norm()) for o in (known, blind)]
    assert at_truth[0] < 1e-12 and at_truth[1] > 0.5  # the truth matches only the client's own R
    identity = make_sketch("none", model.d, model.d)
    assert _obs(model, x, labels, identity, knows_sketch=False).linear_map is identity  # nothing drawn to withhold


def test_one_image_through_batchnorm_in_train_mode_is_warned_of_from_python():
    """The command line warned of it; a module wrapped after its own .eval() runs in train mode silently."""
    import warnings

    from leakattack.errors import SettingWarning

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)).eval()
    said = "on one image normalises it by its own statistics"
    for bn_mode, batch, warned in (("train", 1, True), ("train", 2, False), ("eval", 1, False)):
        v = targets.Victim.from_module(net, input_shape=(3, 8, 8), num_classes=10, bn_mode=bn_mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            observe(v, torch.rand(batch, 3, 8, 8), torch.arange(batch), Channel(make_sketch("none", v.d, v.d)))
        lines = [str(w.message) for w in caught if issubclass(w.category, SettingWarning) and said in str(w.message)]
        assert len(lines) == int(warned), (bn_mode, batch, lines)


def test_a_regenerated_dense_sketch_is_warned_of_from_python_once():
    """From Python a Gaussian R too large to hold ran minutes per iteration without a word; a run words it itself
    (with its iterations) and marks the sketch, which observe then does not repeat."""
    import warnings

    from leakattack.errors import SettingWarning
    from leakattack.sketch import get_sketch

    torch.manual_seed(0)
    v = targets.Victim.from_module(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)),
                                   input_shape=(1, 3, 4), num_classes=3)
    said = "so every product regenerates them: about 10 s for an apply and an adjoint"

    def lines(per, told=False):
        sketch = get_sketch("gaussian", v.d, v.d // 2, seed=1, memory_gb=0)
        sketch._regeneration_s, sketch.cost_told = per, told  # the measured estimate, as a large R would give
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            observe(v, torch.rand(1, 1, 3, 4), torch.tensor([1]), Channel(sketch))
        return [str(w.message) for w in caught if issubclass(w.category, SettingWarning)]

    warned = [m for m in lines(10.0) if said in m]
    assert len(warned) == 1 and "get_sketch('srht', d, b)" in warned[0], lines(10.0)
    assert not [m for m in lines(10.0, told=True) if "regenerates" in m]
    assert not [m for m in lines(1e-3) if "regenerates" in m]
