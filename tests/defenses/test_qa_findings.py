"""Extreme but valid noise scales and clips: an epsilon (or one sentence refusing the spec), never a
ZeroDivisionError from the accountant or an infinite noise scale found only after the attack has run."""

import json
import math

import pytest

import defenses
from defenses.accounting import accountant_epsilon, message_privacy
from defenses.accounting.accountants import Z_MAX
from leakattack import cli

COMMON = ["--model", "logreg", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips"]


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
@pytest.mark.parametrize("z", [1e-300, 1e-200, 5e-324])
def test_a_noise_multiplier_whose_square_underflows_gives_an_infinite_epsilon(accountant, z):
    # Opacus divides by 2 z**2, which is 0.0 below about 1e-154
    assert accountant_epsilon(z, 1.0, 1, 1e-5, accountant=accountant) == math.inf
    assert accountant_epsilon(z, 0.01, 10, 1e-5, accountant=accountant) == math.inf


def test_a_tiny_noise_multiplier_in_a_pipeline_gives_an_infinite_epsilon():
    out = message_privacy(defenses.build("clip:C=1,gaussian:z=1e-300"), 1e-5)
    assert out["epsilon"] == math.inf and out["noise_multiplier"] == pytest.approx(1e-300)
    assert out["sensitivity"] == 1.0


def test_a_run_with_a_tiny_noise_multiplier_finishes_and_records_no_epsilon(tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", *COMMON, "--defense", "clip:C=1,gaussian:z=1e-300", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["epsilon"] is None and m["sensitivity"] == 1.0  # inf is written as null


def test_z_times_c_beyond_the_largest_float_is_refused_in_one_sentence():
    with pytest.raises(defenses.DefenseError, match="sigma = inf") as err:
        defenses.build("clip:C=1e300,gaussian:z=1e300")
    assert "\n" not in str(err.value)
    with pytest.raises(defenses.DefenseError, match="sigma = inf"):
        defenses.build("per_example:C=1e200,gaussian:z=1e200@after_sketch")
    assert defenses.build("clip:C=1e300,gaussian:z=1").steps[-1].sigma == 1e300  # finite: still taken


def test_an_overflowing_noise_scale_is_refused_before_a_run_writes_anything(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", *COMMON, "--defense", "clip:C=1e300,gaussian:z=1e300", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "sigma = inf" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_noise_multiplier_that_overflows_gives_the_accountants_floor():
    # sigma / Delta = 1e300 / 1e-300 is inf as a float: the epsilon is the one at Z_MAX, not a refusal
    out = message_privacy(defenses.build("clip:C=1e-300,gaussian:sigma=1e300"), 1e-5)
    assert out["noise_multiplier"] == math.inf
    assert out["epsilon"] == pytest.approx(accountant_epsilon(Z_MAX, 1.0, 1, 1e-5))
    assert 0 < out["epsilon"] < 1


def test_a_sensitivity_that_underflows_to_zero_gives_an_epsilon():
    # C / B = 5e-324 / 4 is 0.0: the noise after the sketch is added to a vector that does not depend on the data
    pipe = defenses.build("per_example:C=5e-324,gaussian:sigma=1@after_sketch")
    out = message_privacy(pipe, 1e-5, batch_size=4)
    assert out["sensitivity"] == 0.0 and out["noise_multiplier"] == math.inf
    assert out["epsilon"] == pytest.approx(accountant_epsilon(Z_MAX, 1.0, 1, 1e-5))
    lap = message_privacy(defenses.build("per_example:C=5e-324,laplace:b=1@after_sketch"), 1e-5, batch_size=4,
                          d=10, b=5)
    assert lap["epsilon"] == 0.0 and lap["sensitivity"] == 0.0
    # two noises, the later one on a zero sensitivity: both have an infinite sigma / Delta, and one is counted
    two = defenses.build("per_example:C=5e-324,gaussian:sigma=1e-3,gaussian:sigma=1@after_sketch")
    out = message_privacy(two, 1e-5, batch_size=4)
    assert out["epsilon"] == pytest.approx(accountant_epsilon(Z_MAX, 1.0, 1, 1e-5))
    assert "1 later noise step(s) not counted" in out["privacy_note"]


def test_a_pipeline_of_steps_made_one_by_one_scales_z_by_its_clip():
    clip, noise = defenses.get_defense("clip", {"C": 2.0}), defenses.get_defense("gaussian", {"z": 1.5})
    pipe = defenses.Pipeline([clip, noise])
    assert noise.sigma == 3.0 and pipe.noise_bound().sigma == 3.0
    assert message_privacy(pipe, 1e-5)["noise_multiplier"] == pytest.approx(1.5)


def test_a_z_step_without_a_clip_is_one_sentence_not_a_type_error():
    noise = defenses.get_defense("gaussian", {"z": 1.0})
    with pytest.raises(defenses.DefenseError, match="needs a clip|no clip"):
        noise.sigma
    with pytest.raises(defenses.DefenseError, match="needs a clip"):
        defenses.Pipeline([noise])
