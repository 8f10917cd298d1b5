"""scripts/train_photo_victim.py: its checkpoint loads with `leakattack run --weights`, carries the BatchNorm
running statistics of photo crops, and those statistics reach the bn prior's objective."""

import importlib.util
from pathlib import Path

import pytest
import torch

import targets
from leakattack.attacks import get_prior
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.sketch import make_sketch
from targets.victim import batchnorm_layers
from targets.weights import load_weights

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_photo_victim.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("train_photo_victim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_crops_are_images_of_the_photos_shape_with_photo_labels():
    recipe = _recipe()
    photos = [torch.rand(3, 40 + 7 * k, 50) for k in range(10)]
    x, y = recipe.random_crops(photos, 6, 32, torch.Generator().manual_seed(1))
    assert x.shape == (6, 3, 32, 32) and y.shape == (6,)
    assert x.min() >= 0 and x.max() <= 1 and set(y.tolist()) <= set(range(10))


@pytest.mark.slow
def test_trained_checkpoint_loads_and_its_running_statistics_change_the_bn_prior(tmp_path):
    recipe = _recipe()
    net, info = recipe.train_photo_victim("resnet20", steps=12, batch=16)
    assert info["steps"] == 12 and info["loss"] == info["loss"]  # finite
    layers = batchnorm_layers(net)
    # training moved the running statistics away from their initial 0 and 1 (the victim's own train mode
    # freezes them; the recipe must switch tracking back on)
    assert all(int(m.num_batches_tracked) == 12 for m in layers)
    assert max(float(m.running_mean.abs().max()) for m in layers) > 0.05
    assert max(float((m.running_var - 1).abs().max()) for m in layers) > 0.05
    path = tmp_path / "resnet20_photos.pt"
    torch.save(net.state_dict(), path)

    ds = get_dataset("photos")
    fresh = targets.get_model("resnet20", num_classes=10, in_shape=ds.in_shape, seed=0, bn_mode="eval")
    trained = load_weights(targets.get_model("resnet20", num_classes=10, in_shape=ds.in_shape, seed=0,
                                             bn_mode="eval"), path)
    for a, b in zip(batchnorm_layers(trained.model), layers):
        assert torch.equal(a.running_mean, b.running_mean) and torch.equal(a.running_var, b.running_var)

    x, labels = ds.images[3:4].to(trained.dtype), ds.labels[3:4]
    values = []
    for victim in (fresh, trained):
        obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d, seed=1)), ThreatModel())
        assert obs.bn_stats is None  # the prior pulls towards the running statistics the attacker holds
        prior = get_prior("bn", 1.0, obs=obs)
        granted = prior.granted()
        assert all(torch.equal(g[0], m.running_mean) for g, m in zip(granted, batchnorm_layers(victim.model)))
        values.append(prior(x).item())
    # the same image, the same prior: a different objective once the running statistics are the trained ones
    assert abs(values[1] - values[0]) > 0.01 * max(values)
