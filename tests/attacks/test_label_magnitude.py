"""One example's label behind features of both signs (tanh, LayerNorm), where no row-sum rule applies.

The head's gradient of one example is (p - onehot_y) [h, 1]: rank one, with the true class's row the largest
whatever the sign of h (``magnitude``).  Through a sketch whose noise drowns that row, gradient matching scores the
first classes in its order by short runs (``choose_labels``), as it scores differing readings.
"""

from __future__ import annotations

import math

import pytest
import torch

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
        order, signal, _ = labels.one_example_classes(victim, none, g)
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


def _digit(index: int):
    return prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=0.5, image_index=index,
                             threads=1, iterations=600, model_params=TANH))


def test_within_the_sketch_noise_the_short_runs_score_the_first_classes_in_magnitude_order():
    """Untrained tanh LeNet through srht b/d = 0.5: the head's signal is 1.2-1.5 times the noise's edge (below
    HEAD_SIGNAL_DOUBT), and the readings of digit 0 differ (pooled [0], magnitude [3]); the 150-step runs with the ten
    classes end within 1.2 times of each other (2.9e3 against 3.4e3, in the objective's units), so none decides, and
    pooled's reading, which is not the probes' class, is kept: the truth."""
    p = _digit(0)
    order, signal, prior = labels.one_example_classes(p.obs.victim, p.obs.linear_map, p.obs.y)
    assert signal < gm.HEAD_SIGNAL_DOUBT
    chosen, choice = p.attack.choose_labels(p.obs)
    candidates = choice["candidates"]
    assert len(candidates) == gm.LABEL_CANDIDATES == len({c[0] for c in candidates})  # the ten classes, once each
    assert candidates[:2] == [choice["readings"]["pooled"], choice["readings"]["magnitude"]]
    assert [c[0] for c in candidates[2:]] == [c for c in order if [c] not in candidates[:2]][:8]  # in its order
    assert choice["head_signal"] == pytest.approx(signal) and choice["probes_class"] == prior
    assert len(choice["probe_losses"]) == 10
    first, second = sorted(choice["probe_compared"])[:2]
    assert second < gm.LABEL_DECISIVE * first and choice["undecided"]  # measured 1.17
    assert chosen.tolist() == choice["readings"]["pooled"] == p.labels.tolist() != [prior]
    line = label_choice_line(choice)
    assert "within the sketch noise (its signal" in line and "so 10 classes in magnitude's order were compared" in line
    assert f"times as well as with every other (loss {first:.3g} against {second:.3g}), so pooled's reading, [0], " \
        "was kept" in line


def test_a_run_that_stands_out_decides(monkeypatch):
    monkeypatch.setattr(gm, "LABEL_DECISIVE", 1.0)  # any run below every other stands out
    p = _digit(0)
    chosen, choice = p.attack.choose_labels(p.obs)
    best = min(range(10), key=lambda i: choice["probe_compared"][i])
    assert not choice["undecided"] and chosen.tolist() == choice["candidates"][best]


def test_where_pooled_reads_the_probes_class_and_no_run_decides_magnitude_is_kept(monkeypatch):
    """pooled's counts fall back on the probes' class where the message's part drowns (a trained model's confident
    image): its reading is then no evidence, and magnitude's is kept."""
    p = _digit(0)
    prior = labels.one_example_classes(p.obs.victim, p.obs.linear_map, p.obs.y)[2]
    other = (prior + 1) % 10
    monkeypatch.setattr(gm, "readings_to_compare", lambda *a, **k: {"pooled": torch.tensor([prior]),
                                                                     "magnitude": torch.tensor([other])})
    chosen, choice = p.attack.choose_labels(p.obs)
    assert choice["undecided"] and chosen.tolist() == [other]
    assert f"so magnitude's reading, as pooled's is the class the model gives random probes, [{other}], was kept" \
        in label_choice_line(choice)


def test_a_clear_head_signal_adds_no_run(monkeypatch):
    """Where the head stands out of the noise, one example's agreeing readings are kept without a run."""
    p = _digit(3)
    readings = labels.readings_to_compare(p.obs.victim, p.obs.linear_map, p.obs.y, 1)
    assert readings["pooled"].tolist() == readings["magnitude"].tolist() == p.labels.tolist()
    monkeypatch.setattr(gm, "HEAD_SIGNAL_DOUBT", 0.0)  # any signal is clear
    chosen, choice = p.attack.choose_labels(p.obs)
    assert choice is None and chosen.tolist() == p.labels.tolist()
    monkeypatch.setattr(gm, "HEAD_SIGNAL_DOUBT", 2.0)
    chosen, choice = p.attack.choose_labels(p.obs)  # measured signal 1.3: in doubt though they agree
    assert len(choice["candidates"]) == 10 and chosen.tolist() == p.labels.tolist()


def test_a_time_limit_note_names_the_classes_the_short_runs_scored():
    p = _digit(0)
    p.attack.time_limit = p.attack.stated_limit = 4.0  # the ten runs share a quarter of it: at least a tenth
    result = p.attack.reconstruct(p.obs)
    assert result.label_choice["candidates"] and "and a short run of each class)" in result.message, result.message


def test_a_choice_in_doubt_reads_the_head_and_runs_the_probes_once(monkeypatch):
    """The readings and the head's signal come from one readout of the message (an adjoint of the sketch) and one
    probe pass through the victim, not two of each."""
    calls = {"read_head": 0, "probe": 0}
    for name in calls:
        real = getattr(labels, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(labels, name, counted)
    monkeypatch.setattr(gm, "LABEL_PROBE_STEPS", 2)  # the short runs are not what is counted
    p = _digit(0)
    calls.update(read_head=0, probe=0)
    chosen, choice = p.attack.choose_labels(p.obs)
    assert choice["candidates"] and calls == {"read_head": 1, "probe": 1}
    alone = labels.one_example_classes(p.obs.victim, p.obs.linear_map, p.obs.y)
    assert choice["head_signal"] == alone[1] and choice["probes_class"] == alone[2]
