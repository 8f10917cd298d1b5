"""One example's label behind features of both signs (tanh, LayerNorm), where no row-sum rule applies.

The head's gradient of one example is (p - onehot_y) [h, 1]: rank one, with the true class's row the largest
whatever the sign of h (``magnitude``).  Through a sketch whose noise drowns that row, gradient matching scores the
first classes in its order by short runs (``choose_labels``), as it scores differing readings.
"""

from __future__ import annotations

import math

import pytest

import leakattack.attacks.gradient_matching as gm
import targets
from leakattack import get_sketch
from leakattack.attacks import labels
from leakattack.cli.run import label_choice_line
from leakattack.config import RunConfig
from leakattack.data import get_dataset
from leakattack.experiment import prepare

TANH = {"act": "tanh"}


def test_magnitude_reads_one_example_exactly_where_the_features_take_both_signs():
    photos = get_dataset("photos")
    victim = targets.get_model("lenet", in_shape=photos.in_shape, num_classes=10, seed=0, act="tanh")
    none = get_sketch("none", victim.d, victim.d)
    signs = 0
    for i in range(10):
        x, y = photos.images[i:i + 1], photos.labels[i:i + 1]
        g = targets.flat_gradient(victim, x, y).detach()
        read = labels.recover_labels_by_rule(victim, none, g, 1, rules=("magnitude", "sign"))
        assert read["magnitude"].tolist() == y.tolist()
        signs += read["sign"].tolist() == y.tolist()
        order, signal = labels.one_example_classes(victim, none, g)
        assert order[0] == int(y) and signal == math.inf  # no sketch: no noise to stand out of
    assert signs < 10  # the row sums' signs do not carry the label behind tanh (measured: 8 of 10 right)


def test_magnitude_is_read_beside_pooled_for_one_example_of_signed_features_only():
    one = prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.5, threads=1,
                            model_params=TANH))
    obs = one.obs
    assert set(labels.readings_to_compare(obs.victim, obs.linear_map, obs.y, 1)) == {"pooled", "magnitude"}
    two = prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.5, threads=1,
                            model_params=TANH, batch_size=2))
    assert set(labels.readings_to_compare(two.obs.victim, two.obs.linear_map, two.obs.y, 2)) == {"pooled"}


def test_within_the_sketch_noise_the_short_runs_score_the_first_classes_and_find_the_label():
    """Untrained tanh LeNet through srht b/d = 0.5: the head's signal is 1.3-1.5 times the noise's edge (below
    HEAD_SIGNAL_DOUBT), and the readings of digit 0 differ (pooled [0], magnitude [3]); 150-step runs with each of
    the ten classes chose [0] (loss 2.9e3 against 3.4e3 and more, in the objective's units)."""
    p = prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.5, image_index=0,
                          threads=1, iterations=600, model_params=TANH))
    order, signal = labels.one_example_classes(p.obs.victim, p.obs.linear_map, p.obs.y)
    assert signal < gm.HEAD_SIGNAL_DOUBT
    chosen, choice = p.attack.choose_labels(p.obs)
    assert chosen.tolist() == p.labels.tolist() == choice["chosen"]
    candidates = choice["candidates"]
    assert len(candidates) == gm.LABEL_CANDIDATES == len({c[0] for c in candidates})  # the ten classes, once each
    assert [c[0] for c in candidates[2:]] == [c for c in order if [c] not in candidates[:2]][:8]  # in its order
    assert choice["head_signal"] == pytest.approx(signal)
    assert len(choice["probe_losses"]) == 10
    first, second = sorted(choice["probe_compared"])[:2]
    assert first < 0.95 * second  # measured 0.85
    assert ("within the sketch noise (its signal" in label_choice_line(choice)
            and "so 10 classes in magnitude's order were compared" in label_choice_line(choice))


def test_a_clear_head_signal_adds_no_run(monkeypatch):
    """Where the head stands out of the noise, one example's agreeing readings are kept without a run."""
    p = prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.5, image_index=3,
                          threads=1, iterations=600, model_params=TANH))
    readings = labels.readings_to_compare(p.obs.victim, p.obs.linear_map, p.obs.y, 1)
    assert readings["pooled"].tolist() == readings["magnitude"].tolist() == p.labels.tolist()
    monkeypatch.setattr(gm, "HEAD_SIGNAL_DOUBT", 0.0)  # any signal is clear
    chosen, choice = p.attack.choose_labels(p.obs)
    assert choice is None and chosen.tolist() == p.labels.tolist()
    monkeypatch.setattr(gm, "HEAD_SIGNAL_DOUBT", 2.0)
    chosen, choice = p.attack.choose_labels(p.obs)  # measured signal 1.3: in doubt though they agree
    assert len(choice["candidates"]) == 10 and chosen.tolist() == p.labels.tolist()
