"""A clipped message is the gradient times an unknown factor: the count rules fit it (labels.fitted_scale) where the
attacker knows the clip, and read the right labels; without a clip the fit keeps the scale of 1."""

import collections

import pytest
import torch

import defenses
import targets
from leakattack import Channel, ThreatModel, get_batch, get_dataset, get_sketch, observe
from leakattack.attacks.labels import recover_labels_by_rule, scale_unknown

COUNT_RULES = ("pooled", "llg-star", "bias", "ilrg")


def _share(read, true) -> float:
    return sum((collections.Counter(read) & collections.Counter(true)).values()) / len(true)


@pytest.fixture(scope="module")
def lenet():
    return targets.get_model("lenet", in_shape=(1, 28, 28), num_classes=10, seed=0).to(dtype=torch.float64)


@pytest.mark.parametrize("batch,index", [(1, 3), (4, 1), (8, 2)])
def test_count_rules_read_a_clipped_batch_at_its_fitted_scale(lenet, batch, index):
    digits = get_dataset("digits")
    x, y = get_batch(digits, index, batch_size=batch, draw="random")
    true = sorted(y.tolist())
    sketch = get_sketch("none", lenet.d, lenet.d, seed=1)
    for spec, knows in (("clip:C=1e-3", True), ("", False)):
        obs = observe(lenet, x.double(), y, Channel(sketch, defenses.build(spec)), ThreatModel(knows_clip=knows))
        assert scale_unknown(obs) is knows
        fitted = recover_labels_by_rule(lenet, obs.linear_map, obs.y, batch, rules=COUNT_RULES, scale_unknown=True)
        assert all(_share(v.tolist(), true) == 1.0 for v in fitted.values()), (spec, fitted, true)
    # the clipped message read as the gradient itself: the probes' predictions win, and the reading is wrong
    clipped = observe(lenet, x.double(), y, Channel(sketch, defenses.build("clip:C=1e-3")), ThreatModel())
    assert not scale_unknown(clipped)
    plain = recover_labels_by_rule(lenet, clipped.linear_map, clipped.y, batch, rules=("pooled",))
    assert _share(plain["pooled"].tolist(), true) < 1.0
