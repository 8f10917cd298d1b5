"""The sensitivity Delta a defense pipeline bounds for its Gaussian noise, from the clips and the sketch between
them."""

import json
import math
import re

import pytest

import defenses
from defenses.accounting import accountant_epsilon, message_privacy
from defenses.accounting.analysis import (
    clip_sensitivity,
    l1_from_l2_sensitivity,
    laplace_epsilon,
    linear_map_sensitivity,
    pure_composition,
)
from leakattack import cli
from leakattack.sketch import get_sketch
from targets.protocols import round_seed

#: ||R||_op of SRHT at d = 13426 (lenet on 1x28x28), b = d/2: sqrt(n/b) with n = 16384
SRHT_LENET = math.sqrt(16384 / 6713)
NORMS = [0.5, 1.0, SRHT_LENET, 7.0]


def test_clip_and_linear_map_sensitivity_by_hand():
    assert clip_sensitivity(0.5, None, inside_sum=False) == 0.5
    assert clip_sensitivity(0.5, 1.0, inside_sum=True) == 1.0  # min(1, 2 * 0.5)
    assert clip_sensitivity(0.2, 1.0, inside_sum=True) == pytest.approx(0.4)
    assert clip_sensitivity(2.0, 1.0, inside_sum=False) == 1.0
    assert linear_map_sensitivity(2.0, 1.5) == 3.0


@pytest.mark.parametrize("spec,expected", [
    ("per_example:C=1,clip:C=0.5,gaussian:z=1", 1.0),  # min(C1, 2 * C2) = min(1, 1)
    ("per_example:C=1,clip:C=0.2,gaussian:z=1", 0.4),  # min(1, 2 * 0.2)
    ("per_example:C=1,clip:C=3,gaussian:z=1", 1.0),
    ("per_example:C=1.5,gaussian:z=1", 1.5),
    ("clip:C=2,gaussian:z=1", 2.0),
    ("clip:C=2,clip:C=0.5,gaussian:z=1", 0.5),  # one client's update: its norm, the smaller clip
])
def test_clips_on_the_same_side_as_the_noise_bound_delta(spec, expected):
    assert defenses.build(spec).sensitivity() == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("spec,C", [("clip:C=1,gaussian:z=1.1", 1.0), ("per_example:C=0.3,gaussian:sigma=0.1", 0.3),
                                    ("clip:C=2,gaussian:z=1,quantize:bits=4", 2.0)])
def test_noise_before_the_sketch_has_delta_c_whatever_the_sketch(norm, spec, C):
    pipe = defenses.build(spec)
    assert pipe.sensitivity(norm) == C and not pipe.needs_sketch_norm


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("spec", ["clip:C=1@after_sketch,gaussian:z=1@after_sketch",
                                  "clip:C=5,clip:C=1@after_sketch,gaussian:sigma=2@after_sketch"])
def test_clip_after_the_sketch_bounds_noise_after_it_with_delta_c(norm, spec):
    pipe = defenses.build(spec)
    assert pipe.sensitivity(norm) == pytest.approx(min(1.0, 5 * norm) if "C=5" in spec else 1.0)


@pytest.mark.parametrize("norm", NORMS)
def test_clip_before_the_sketch_and_noise_after_it_has_delta_norm_times_c(norm):
    pipe = defenses.build("clip:C=2,gaussian:z=1.1@after_sketch")
    assert pipe.needs_sketch_norm
    assert pipe.sensitivity(norm) == pytest.approx(2 * norm, rel=1e-15)
    # a clip after the sketch as well: the smaller of the two bounds
    assert defenses.build("clip:C=2,clip:C=3@after_sketch,gaussian:z=1@after_sketch").sensitivity(norm) == \
        pytest.approx(min(2 * norm, 3.0), rel=1e-15)


def test_per_example_sum_clipped_then_sketched_then_noised_has_delta_norm_times_min_c1_2c2():
    pipe = defenses.build("per_example:C=1,clip:C=0.2,gaussian:z=1@after_sketch")
    assert pipe.sensitivity(SRHT_LENET) == pytest.approx(0.4 * SRHT_LENET, rel=1e-15)


def test_unknown_sketch_norm_leaves_a_crossing_delta_unbounded():
    pipe = defenses.build("clip:C=1,gaussian:z=1@after_sketch")
    assert pipe.sensitivity(None) is None
    assert defenses.build("clip:C=1,gaussian:z=1").sensitivity(None) == 1.0


@pytest.mark.parametrize("spec", ["gaussian:sigma=0.1", "gaussian:sigma=0.1,clip:C=1@after_sketch",
                                  "clip:C=1,quantize:bits=4@before_sketch,gaussian:z=1",
                                  "per_example:C=1,prune:p=0.5,gaussian:z=1"])
def test_noise_without_a_tracked_clip_before_it_has_no_sensitivity(spec):
    assert defenses.build(spec).sensitivity() is None
    p = message_privacy(defenses.build(spec), 1e-5)
    assert p["epsilon"] is None and p["delta"] == 1e-5 and "epsilon = inf" in p["privacy_note"]


def test_pruning_keeps_the_bound_on_a_clients_update():
    assert defenses.build("clip:C=1,prune:p=0.5,gaussian:z=1").sensitivity() == 1.0


@pytest.mark.parametrize("spec", ["clip:C=1,laplace:b=0.1,gaussian:z=1",
                                  "clip:C=1,laplace:b=0.1@after_sketch,gaussian:z=1@after_sketch"])
def test_laplace_noise_keeps_the_bound_it_is_drawn_without_the_data(spec):
    """Adding noise drawn without the data is post-processing of the Gaussian's release: epsilon is the Gaussian's."""
    alone = message_privacy(defenses.build(spec.replace("laplace:b=0.1,", "").replace(
        "laplace:b=0.1@after_sketch,", "")), 1e-5, sketch_norm=1.5)
    p = message_privacy(defenses.build(spec), 1e-5, sketch_norm=1.5)
    assert p["epsilon"] == alone["epsilon"] and p["sensitivity"] == alone["sensitivity"] > 0


def test_the_laplace_formulas_by_hand():
    assert l1_from_l2_sensitivity(2.0, 16) == 8.0  # ||v||_1 <= sqrt(k) ||v||_2
    assert laplace_epsilon(0.5, 8.0) == 16.0 and laplace_epsilon(0.0, 1.0) == math.inf
    assert pure_composition(1.5, 4) == 6.0


def test_the_l1_bound_holds_for_every_neighbour_and_an_evenly_spread_difference_attains_it():
    """The Laplace mechanism's privacy loss at y is (||y - v'||_1 - ||y - v||_1) / b <= ||v - v'||_1 / b: for
    differences of L2 norm C it never exceeds sqrt(k) C / b, and a difference of C / sqrt(k) in every entry reaches
    it, so the sqrt(k) is the price of knowing only the L2 norm, not slack in the bound."""
    torch = pytest.importorskip("torch")
    k, C, b = 64, 1.0, 0.1
    eps = laplace_epsilon(b, l1_from_l2_sensitivity(C, k))
    gen = torch.Generator().manual_seed(0)
    diffs = torch.randn(1000, k, generator=gen, dtype=torch.float64)
    diffs = C * diffs / diffs.norm(dim=1, keepdim=True)
    v = torch.randn(k, generator=gen, dtype=torch.float64)
    y = v + b * torch.randn(1000, k, generator=gen, dtype=torch.float64)
    loss = ((y - (v + diffs)).abs().sum(1) - (y - v).abs().sum(1)) / b
    assert float(loss.max()) <= eps * (1 + 1e-12)
    even = torch.full((k,), C / math.sqrt(k), dtype=torch.float64)
    far = v - 100 * torch.sign(even)  # every entry beyond both means
    assert float(((far - (v + even)).abs().sum() - (far - v).abs().sum()) / b) == pytest.approx(eps, rel=1e-12)


SKETCH_NORM, D, B = 1.5, 100, 25


@pytest.mark.parametrize("spec,delta_1", [
    ("clip:C=2,laplace:b=0.5", math.sqrt(D) * 2),  # noise on g: k = d
    ("clip:C=2,laplace:b=0.5@after_sketch", math.sqrt(B) * SKETCH_NORM * 2),  # on y = R clip(g): k = b, ||R||_op C
    ("clip:C=2@after_sketch,laplace:b=0.5@after_sketch", math.sqrt(B) * 2),
    ("per_example:C=2,laplace:b=0.5@after_sketch", math.sqrt(B) * SKETCH_NORM * 2 / 4),  # R (sum / B), B = 4
    ("clip:C=2,laplace:b=5,laplace:b=0.5", math.sqrt(D) * 2),  # the larger b counted, the other post-processing
])
def test_laplace_noise_after_a_clip_gets_a_pure_epsilon_from_sqrt_k_times_the_l2_sensitivity(spec, delta_1):
    p = message_privacy(defenses.build(spec), 1e-5, sketch_norm=SKETCH_NORM, batch_size=4, d=D, b=B)
    scale = 5.0 if "laplace:b=5,laplace:b=0.5" in spec else 0.5
    assert p["epsilon"] == pytest.approx(delta_1 / scale, rel=1e-12) and p["delta"] == 0.0
    assert p["sensitivity"] == pytest.approx(delta_1, rel=1e-12)
    assert p["epsilon_paper"] is None and p["delta_paper"] is None and p["noise_multiplier"] is None
    assert p["sketch_norm"] == (SKETCH_NORM if "C=2,laplace:b=0.5@after" in spec or "per_example" in spec else None)
    assert p["privacy_note"].startswith("Laplace noise, pure DP: epsilon = Delta_1 / b")
    assert "Delta_1 <= sqrt(k) * Delta_2" in p["privacy_note"]
    # releases compose linearly, with no amplification by a sample rate
    many = message_privacy(defenses.build(spec), 1e-5, sketch_norm=SKETCH_NORM, batch_size=4, d=D, b=B, steps=30,
                           sample_rate=0.1)
    assert many["epsilon"] == pytest.approx(30 * p["epsilon"], rel=1e-12) and "30 releases composed linearly" in \
        many["privacy_note"]
    assert defenses.build(spec).needs_sketch_norm == ("C=2,laplace:b=0.5@after" in spec or "per_example" in spec)


def test_laplace_noise_without_a_bound_on_its_l1_sensitivity_has_no_epsilon():
    no_clip = message_privacy(defenses.build("laplace:b=0.1"), 1e-5, d=D, b=B)
    assert no_clip["epsilon"] is None and no_clip["delta"] == 0.0
    assert no_clip["privacy_note"] == "Laplace noise: no clip before the noise: sensitivity unbounded, epsilon = inf"
    unknown = message_privacy(defenses.build("clip:C=1,laplace:b=0.1"), 1e-5)  # no length k
    assert unknown["epsilon"] is None and "length of the vector the Laplace noise is added to is not known" in \
        unknown["privacy_note"]
    assert message_privacy(defenses.build("clip:C=1,laplace:b=0.1@after_sketch"), 1e-5, d=D, b=B,
                           sketch_norm=None)["epsilon"] is None  # ||R||_op not known
    assert message_privacy(defenses.build("clip:C=1"), 1e-5)["privacy_note"] == "no Gaussian noise: no DP guarantee"


def test_with_gaussian_noise_as_well_the_gaussian_is_counted_and_the_laplace_is_named():
    mixed = message_privacy(defenses.build("clip:C=1,laplace:b=0.1,gaussian:z=1"), 1e-5, d=D, b=B)
    alone = message_privacy(defenses.build("clip:C=1,gaussian:z=1"), 1e-5, d=D, b=B)
    assert mixed["epsilon"] == alone["epsilon"] and mixed["delta"] == 1e-5
    assert mixed["privacy_note"] == alone["privacy_note"] + "; 1 Laplace step(s) not counted (the Gaussian noise is)"


def test_no_noise_has_no_sensitivity():
    assert defenses.build("clip:C=1,prune:p=0.5").sensitivity() is None
    assert defenses.build("clip:C=1,gaussian:sigma=0").sensitivity() is None


def test_one_run_of_gaussian_steps_is_counted_the_others_are_post_processing():
    """Noise after noise is post-processing: here the first run of Gaussian steps has the larger sigma/Delta."""
    bound = defenses.build("clip:C=1,gaussian:sigma=2,gaussian:sigma=3@after_sketch").noise_bound(SRHT_LENET)
    assert bound.sigma == 2 and bound.sensitivity == 1.0 and bound.later_noise == 1 and bound.earlier_noise == 0
    bound = defenses.build("clip:C=1,gaussian:sigma=3,gaussian:sigma=4").noise_bound()
    assert bound.sigma == pytest.approx(5.0)


def test_the_noise_with_the_largest_multiplier_is_counted_even_after_weaker_noise():
    """Small noise the client adds first does not hide a clip and larger noise after it: noise drawn without the data
    is the same on both sides of the neighbouring pair, so the later Gaussian is a mechanism of its own (epsilon was
    inf for the first spec, and 5.5e5 from the weak first noise for the second)."""
    p = message_privacy(defenses.build("gaussian:sigma=1e-3,clip:C=1@after_sketch,gaussian:z=1@after_sketch"), 1e-5,
                        sketch_norm=SRHT_LENET)
    assert p["sensitivity"] == 2.0 and p["noise_multiplier"] == 0.5  # a clip after noise: its diameter 2C
    assert p["epsilon"] < 20 and p["epsilon"] == pytest.approx(accountant_epsilon(0.5, 1.0, 1, 1e-5))
    assert "1 earlier noise step(s) not counted" in p["privacy_note"]
    p = message_privacy(defenses.build("clip:C=1,gaussian:sigma=1e-3,gaussian:z=1@after_sketch"), 1e-5,
                        sketch_norm=SRHT_LENET)
    assert p["sensitivity"] == pytest.approx(SRHT_LENET) and p["sketch_norm"] == SRHT_LENET
    assert p["epsilon"] < 10 and p["epsilon"] == pytest.approx(accountant_epsilon(1 / SRHT_LENET, 1.0, 1, 1e-5))
    assert defenses.build("clip:C=1,gaussian:sigma=1e-3,gaussian:z=1@after_sketch").needs_sketch_norm


def test_a_clip_after_noise_bounds_delta_by_its_diameter():
    """The neighbour (the update replaced by zero) draws the same noise L, so it sends clip(L), not zero:
    ||clip(g + L) - clip(L)|| reaches 2C for g = -3L, and Delta = C would understate it."""
    torch = pytest.importorskip("torch")
    L = torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    clip = defenses.build("clip:C=1").steps[0]
    gap = float((clip(-3 * L + L, None) - clip(L, None)).norm())
    assert gap == pytest.approx(2.0)
    assert defenses.build("laplace:b=0.1,clip:C=1,gaussian:z=1").sensitivity() == 2.0 >= gap
    assert defenses.build("gaussian:sigma=0.1,clip:C=1,gaussian:z=1").sensitivity() == 2.0
    assert defenses.build("laplace:b=0,clip:C=1,gaussian:z=1").sensitivity() == 1.0  # no noise: the neighbour sends 0


def test_pruning_after_noise_leaves_delta_untracked():
    """prune(clip(g) + L) against prune(L): which entries survive depends on the data, so nothing bounds the
    difference by C."""
    bound = defenses.build("clip:C=1,laplace:b=0.1,prune:p=0.5,gaussian:z=1").noise_bound()
    assert bound.sensitivity is None
    assert bound.reason == ("'prune:p=0.5@before_sketch' runs after noise, between the clip and the noise: "
                            "sensitivity not tracked")


def test_message_privacy_names_the_delta_it_used_for_noise_after_the_sketch():
    p = message_privacy(defenses.build("clip:C=1,gaussian:z=1.1@after_sketch"), 1e-5, sketch_norm=SRHT_LENET)
    assert p["sensitivity"] == pytest.approx(SRHT_LENET) and p["sketch_norm"] == SRHT_LENET
    assert p["privacy_note"].startswith("Delta = ||R||_op * C = 1.562 * 1.0 = 1.562 "
                                        "(clip before the sketch, noise after it")
    assert "exact only if" not in p["privacy_note"]
    same_side = message_privacy(defenses.build("clip:C=1,gaussian:z=1.1"), 1e-5, sketch_norm=SRHT_LENET)
    assert same_side["sketch_norm"] is None and same_side["privacy_note"].startswith("Delta = C = 1.0 (clip and noise")


def test_run_with_noise_after_the_sketch_reports_epsilon_for_delta_norm_times_c(tmp_path):
    """lenet on digits, SRHT at b = d/2: Delta = sqrt(16384/6713) = 1.5623, RDP epsilon = 7.11 (not 4.24 for
    Delta = C)."""
    out = tmp_path / "run"
    assert cli.main(["run", "--dataset", "digits", "--defense", "clip:C=1,gaussian:z=1.1@after_sketch",
                     "--iterations", "5", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["d"], m["b"]) == (13426, 6713)
    assert m["sensitivity"] == pytest.approx(SRHT_LENET, rel=1e-12) and m["sketch_norm"] == m["sensitivity"]
    assert m["noise_multiplier"] == pytest.approx(1.1 / SRHT_LENET, rel=1e-12)
    assert m["epsilon"] >= 7.0 and m["epsilon"] == pytest.approx(accountant_epsilon(1.1 / SRHT_LENET, 1.0, 1, 1e-5))
    assert m["epsilon"] < m["epsilon_paper"] * 1.5


def test_training_under_the_defense_uses_the_largest_norm_of_its_fresh_sketches(tmp_path):
    """Count-sketch norms (sqrt of the largest bucket load) differ across R_t: the composed Delta takes their
    maximum."""
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "logreg", "--dataset", "digits", "--sketch", "countsketch",
                     "--defense", "clip:C=1,gaussian:z=1.1@after_sketch", "--iterations", "2", "--quiet",
                     "--no-lpips", "--utility", "--utility-steps", "4", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    d, b = m["d"], m["b"]
    # R_t of the sketched protocol's rounds t = 1..4, from the shared seed sketch_seed = 1
    norms = [get_sketch("countsketch", d, b, seed=round_seed(1, t)).operator_norm() for t in range(1, 5)]
    assert len(set(norms)) > 1
    assert m["utility_sketch_norm"] == max(norms) and m["utility_sensitivity"] == max(norms)
    assert m["sketch_norm"] == get_sketch("countsketch", d, b, seed=1).operator_norm()


def test_a_run_with_laplace_noise_after_a_clip_records_its_pure_epsilon_for_the_message_and_the_training(tmp_path):
    """logreg on digits, SRHT, noise after the sketch: epsilon = sqrt(b) ||R||_op C / b_L for the message, and the
    training's utility_steps releases composed linearly."""
    out = tmp_path / "run"
    assert cli.main(["run", "--model", "logreg", "--dataset", "digits", "--defense",
                     "clip:C=1,laplace:b=0.5@after_sketch", "--iterations", "2", "--quiet", "--no-lpips", "--utility",
                     "--utility-steps", "3", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["sketch_norm"] > 1 and m["delta"] == 0.0 and m["epsilon_paper"] is None
    assert m["epsilon"] == pytest.approx(math.sqrt(m["b"]) * m["sketch_norm"] / 0.5, rel=1e-12)
    assert m["utility_epsilon"] == pytest.approx(3 * math.sqrt(m["b"]) * m["utility_sketch_norm"] / 0.5, rel=1e-12)
    assert m["privacy_note"].startswith("Laplace noise, pure DP") and m["utility_epsilon_paper"] is None


@pytest.mark.parametrize("spec", ["clip:C=1@after_sketch,gaussian:z=1@before_sketch",
                                  "clip:C=2@after_sketch,clip:C=1,gaussian:z=1"])
def test_steps_written_out_of_the_order_they_run_are_refused(spec):
    """The client applies the @before_sketch steps, then the sketch, then the rest: a spec written otherwise would
    run in another order than it reads, and z= took its C from a clip that ran after the noise."""
    with pytest.raises(defenses.DefenseError, match="runs before the sketch, and 'clip:C=.*@after_sketch' written "
                                                    "before it runs after the sketch: write the steps in the order"):
        defenses.build(spec)


def test_a_noise_written_before_its_clip_out_of_order_is_refused_for_the_order():
    """A z= noise written @after_sketch before its clip was refused as needing a clip, where the spec writes one:
    the order is the fault, as for sigma=."""
    for noise in ("gaussian:z=1@after_sketch", "gaussian:sigma=1@after_sketch"):
        with pytest.raises(defenses.DefenseError, match=f"'{noise.replace('=1', '=1.0')}' written before it runs "
                                                        "after the sketch: write the steps in the order they run"):
            defenses.build(f"{noise},clip:C=1")
    with pytest.raises(defenses.DefenseError, match="needs a clip"):  # no clip at all: that is the fault
        defenses.build("gaussian:z=1@after_sketch")


def test_a_step_between_the_clip_and_the_noise_is_named_even_past_a_sketch_of_unknown_norm():
    """quantize runs after the sketch by default: the bound is lost there whatever ||R||_op, which the channel then
    does not compute; the note named the unknown norm instead of the step."""
    bound = defenses.build("clip:C=1,quantize:bits=4,gaussian:z=1@after_sketch").noise_bound(None)
    assert bound.sensitivity is None
    assert bound.reason.startswith("'quantize:bits=4@after_sketch' runs between the clip and the noise")
    assert defenses.build("clip:C=1,gaussian:z=1@after_sketch").noise_bound(None).reason == (
        "the sketch's operator norm is not known: sensitivity unbounded")


def test_none_among_steps_is_refused_as_standing_alone():
    with pytest.raises(defenses.DefenseError, match="defense 'none' stands alone \\(no defense\\), got it among the "
                                                    "steps of 'none,clip:C=1': leave it out"):
        defenses.build("none,clip:C=1")
    assert not defenses.build("none")


@pytest.mark.parametrize("spec", ["clip:C=1,,gaussian:sigma=1", "clip:C=1,", ",clip:C=1"])
def test_an_empty_step_is_named_as_one_not_as_an_unknown_defense(spec):
    """It read as "unknown defense ''"."""
    with pytest.raises(defenses.DefenseError, match=f"^defense '{re.escape(spec)}' has an empty step \\(two commas "
                                                    "in a row, or one at an end\\)"):
        defenses.build(spec)


def test_per_example_noise_after_the_sketch_is_added_to_the_mean_and_its_bound_is_divided_by_the_batch():
    """The channel divides the per-example sum by B before the sketch: noise after it protects R (sum / B), whose
    Delta is ||R||_op C / B; noise before it is added to the sum (Delta = C), whatever B."""
    after = defenses.build("per_example:C=1,gaussian:z=1@after_sketch")
    assert after.sensitivity(1.5, batch_size=4) == pytest.approx(1.5 / 4)
    assert after.sensitivity(1.5) == pytest.approx(1.5)  # B not given: the sum's bound, B times larger (valid)
    before = defenses.build("per_example:C=1,gaussian:z=1")
    assert before.sensitivity(1.5, batch_size=4) == before.sensitivity(1.5) == 1.0
    assert defenses.build("clip:C=1,gaussian:z=1@after_sketch").sensitivity(1.5, batch_size=4) == pytest.approx(1.5)
    p = message_privacy(after, 1e-5, sketch_norm=1.5, batch_size=4)
    assert p["noise_multiplier"] == pytest.approx(4 / 1.5) and "||R||_op * C / B = 1.5 * 1.0 / 4" in p["privacy_note"]
    assert p["epsilon"] < message_privacy(after, 1e-5, sketch_norm=1.5)["epsilon"]


def test_where_no_noise_is_bounded_each_ones_reason_is_named():
    """With a noise before any clip and another after a prune that follows noise, the note gave the first one's
    reason alone ("no clip before the noise") though the spec has a clip before the second."""
    spec = "gaussian:sigma=1e-3,clip:C=1,prune:p=0.1,gaussian:z=1"
    note = message_privacy(defenses.build(spec), 1e-5)["privacy_note"]
    assert note == ("no noise step has a bounded sensitivity: 'gaussian:sigma=0.001@before_sketch': no clip before "
                    "the noise: sensitivity unbounded; 'gaussian:z=1.0@before_sketch': 'prune:p=0.1@before_sketch' "
                    "runs after noise, between the clip and the noise: sensitivity not tracked, epsilon = inf")
    note = message_privacy(defenses.build("laplace:b=1,clip:C=1,prune:p=0.1,laplace:b=2"), 1e-5, d=10, b=5)
    assert "'laplace:b=1.0@before_sketch': no clip" in note["privacy_note"]
    assert "'laplace:b=2.0@before_sketch': 'prune:p=0.1@before_sketch' runs after noise" in note["privacy_note"]
    # one noise: its reason alone, as before
    assert message_privacy(defenses.build("gaussian:sigma=1"), 1e-5)["privacy_note"] == (
        "no clip before the noise: sensitivity unbounded, epsilon = inf")
