"""Bad input to the privacy accounting is one UserError sentence naming the parameter, never an impossible epsilon,
a ZeroDivisionError, a math domain error or an AttributeError deep inside."""

import math

import numpy as np
import pytest

import defenses
from defenses.accounting import accountant_epsilon, analysis, gaussian_epsilon, gaussian_sigma, message_privacy
from leakattack.errors import UserError

GOOD = dict(noise_multiplier=1.1, sample_rate=0.5, steps=4, delta=1e-5)


@pytest.mark.parametrize("key, value", [
    ("delta", 2), ("delta", 1), ("delta", 0), ("delta", -1e-5), ("delta", math.nan), ("delta", "1e-5"),
    ("steps", -3), ("steps", 0), ("steps", True), ("steps", 2.5), ("steps", 4.0), ("steps", "4"),
    ("sample_rate", 2), ("sample_rate", 0), ("sample_rate", -0.1), ("sample_rate", math.nan), ("sample_rate", "1"),
    ("noise_multiplier", "1"), ("noise_multiplier", -1.0), ("noise_multiplier", math.nan),
    ("noise_multiplier", math.inf), ("noise_multiplier", True), ("noise_multiplier", None),
])
def test_accountant_epsilon_refuses_a_bad_argument_naming_it(key, value):
    with pytest.raises(UserError, match=key) as err:
        accountant_epsilon(**{**GOOD, key: value})
    assert "\n" not in str(err.value) and repr(value) in str(err.value)


def test_accountant_epsilon_still_takes_valid_arguments():
    eps = accountant_epsilon(**GOOD)
    assert 0 < eps < math.inf
    assert accountant_epsilon(np.float64(1.1), np.float32(0.5), np.int64(4), 1e-5) == pytest.approx(eps)
    assert accountant_epsilon(1.1, 1, 1, 1e-5) > 0  # sample_rate 1 (an int) is the closed end of (0, 1]
    assert accountant_epsilon(0.0, 0.5, 4, 1e-5) == math.inf  # no noise
    with pytest.raises(UserError, match="unknown accountant"):
        accountant_epsilon(**GOOD, accountant="moments")


def _pipe():
    return defenses.build("clip:C=1,gaussian:z=1.1")


@pytest.mark.parametrize("kwargs, name", [
    (dict(delta=0), "delta"), (dict(delta=1.5), "delta"), (dict(delta="1e-5"), "delta"),
    (dict(delta=1e-5, steps=0), "steps"), (dict(delta=1e-5, steps=-2), "steps"),
    (dict(delta=1e-5, steps=True), "steps"),
    (dict(delta=1e-5, sample_rate=0), "sample_rate"), (dict(delta=1e-5, sample_rate=1.5), "sample_rate"),
    (dict(delta=1e-5, sketch_norm=0), "sketch_norm"), (dict(delta=1e-5, sketch_norm=-1.0), "sketch_norm"),
])
def test_message_privacy_refuses_a_bad_argument_naming_it(kwargs, name):
    with pytest.raises(UserError, match=name) as err:
        message_privacy(_pipe(), **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["clip:C=1,gaussian:z=1.1", {"name": "prune", "p": 0.5}, ["clip:C=1"], 3])
def test_message_privacy_refuses_what_is_no_pipeline_saying_what_to_pass(spec):
    with pytest.raises(UserError, match=r"pipeline must be a defense Pipeline.*defenses\.build") as err:
        message_privacy(spec, 1e-5)
    assert type(spec).__name__ in str(err.value)


def test_message_privacy_still_takes_a_pipeline_or_none():
    p = message_privacy(_pipe(), 1e-5, steps=4, sample_rate=0.5)
    assert p["epsilon"] == pytest.approx(accountant_epsilon(1.1, 0.5, 4, 1e-5))
    assert message_privacy(None, 1e-5)["epsilon"] is None
    assert message_privacy(defenses.build(""), 1e-5)["epsilon"] is None


@pytest.mark.parametrize("kwargs, name", [
    (dict(epsilon=0), "epsilon"), (dict(epsilon=-1.0), "epsilon"), (dict(epsilon=math.inf), "epsilon"),
    (dict(epsilon="1"), "epsilon"), (dict(delta=0), "delta"), (dict(delta=2), "delta"),
    (dict(sensitivity=-1.0), "sensitivity"), (dict(sensitivity="1"), "sensitivity"),
])
def test_gaussian_sigma_refuses_a_bad_argument_naming_it(kwargs, name):
    with pytest.raises(UserError, match=name):
        gaussian_sigma(**{"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1.0, **kwargs})


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=-1.0), "sigma"), (dict(sigma="1"), "sigma"), (dict(delta=0), "delta"), (dict(delta=1.5), "delta"),
])
def test_gaussian_epsilon_refuses_a_bad_argument_naming_it(kwargs, name):
    with pytest.raises(UserError, match=name):
        gaussian_epsilon(**{"sigma": 1.0, "delta": 1e-5, "sensitivity": 1.0, **kwargs})


def test_the_gaussian_formulas_still_take_valid_arguments():
    assert gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.844805, abs=1e-5)
    assert gaussian_epsilon(0.0, 1e-5, 1.0) == math.inf
    assert gaussian_epsilon(gaussian_sigma(0.5, 1e-3, 2.0), 1e-3, 2.0) == pytest.approx(0.5)


def test_a_subnormal_delta_gives_a_finite_epsilon_and_sigma():
    """1.25 / 1e-320 overflowed to inf: epsilon inf and sigma inf for a delta the flags accept."""
    eps = gaussian_epsilon(1.0, 1e-320, 1.0)
    assert math.isfinite(eps) and eps == pytest.approx(math.sqrt(2 * (math.log(1.25) - math.log(1e-320))), rel=1e-9)
    assert gaussian_sigma(eps, 1e-320, 1.0) == pytest.approx(1.0, rel=1e-12)
    assert gaussian_epsilon(1.0, 1e-5, 1.0) == pytest.approx(math.sqrt(2 * math.log(1.25e5)), rel=1e-12)


@pytest.mark.parametrize("call, name, value", [
    (lambda v: analysis.laplace_epsilon(v, 1.0), "scale", -1.0),
    (lambda v: analysis.laplace_epsilon(v, 1.0), "scale", math.nan),
    (lambda v: analysis.laplace_epsilon(1.0, v), "l1_sensitivity", -2.0),
    (lambda v: analysis.laplace_epsilon(1.0, v), "l1_sensitivity", "1"),
    (lambda v: analysis.pure_composition(v, 3), "epsilon", -0.5),
    (lambda v: analysis.pure_composition(v, 3), "epsilon", math.nan),
    (lambda v: analysis.pure_composition(1.0, v), "releases", 0),
    (lambda v: analysis.pure_composition(1.0, v), "releases", 2.5),
    (lambda v: analysis.paper_composition(v, 1e-5, 2, 3), "eps_hat", -1.0),
    (lambda v: analysis.paper_composition(0.1, v, 2, 3), "delta_hat", 2.0),
    (lambda v: analysis.paper_composition(0.1, 1e-5, v, 3), "T", -2),
    (lambda v: analysis.paper_composition(0.1, 1e-5, 2, v), "K", math.nan),
    (lambda v: analysis.l1_from_l2_sensitivity(v, 4), "sensitivity", -1.0),
    (lambda v: analysis.l1_from_l2_sensitivity(1.0, v), "length", -4),
    (lambda v: analysis.linear_map_sensitivity(v, 2.0), "sensitivity", math.nan),
    (lambda v: analysis.linear_map_sensitivity(1.0, v), "operator_norm", -2.0),
    (lambda v: analysis.clip_sensitivity(v, None, inside_sum=False), "the clip bound C", -1.0),
    (lambda v: analysis.clip_sensitivity(1.0, v, inside_sum=False), "the sensitivity before the clip", -3.0),
    (lambda v: analysis.paper_epsilon_holds(v), "epsilon_paper", math.nan),
])
def test_the_public_accounting_helpers_refuse_a_bad_argument_naming_it(call, name, value):
    """Each public helper of defenses.accounting.analysis refuses a negative, NaN, non-numeric or non-integer
    argument in one sentence naming it, where it returned a negative or NaN epsilon or sensitivity."""
    with pytest.raises(UserError, match=name) as err:
        call(value)
    assert "\n" not in str(err.value) and repr(value) in str(err.value)


def test_the_public_accounting_helpers_still_take_their_edge_values():
    assert analysis.laplace_epsilon(0.0, 1.0) == math.inf and analysis.laplace_epsilon(math.inf, 1.0) == 0
    assert analysis.laplace_epsilon(2.0, 1.0) == 0.5
    assert analysis.pure_composition(math.inf, 3) == math.inf and analysis.pure_composition(0.5, np.int64(3)) == 1.5
    assert analysis.paper_composition(math.inf, 1e-5, 2, 2) == (math.inf, 4e-5)
    assert analysis.paper_composition(0.1, 1e-5, 4, 1) == pytest.approx((0.2, 4e-5))
    assert analysis.l1_from_l2_sensitivity(1.0, 4) == 2.0 and analysis.linear_map_sensitivity(0.0, 3.0) == 0
    assert analysis.clip_sensitivity(1.0, math.inf, inside_sum=True) == 2.0
    assert analysis.clip_sensitivity(1.0, 0.5, inside_sum=False) == 0.5
    assert analysis.paper_epsilon_holds(math.inf) is False and analysis.paper_epsilon_holds(0.5) is True


def test_a_gaussian_step_given_both_sigma_and_z_is_refused_when_made_alone():
    """get_defense refused sigma= with z= only once the step was built into a pipeline; now where it is made."""
    with pytest.raises(UserError, match="exactly one of sigma= or z=") as err:
        defenses.get_defense("gaussian", {"sigma": 1, "z": 5})
    assert "\n" not in str(err.value)
    assert defenses.get_defense("gaussian", {"sigma": 1}).sigma == 1.0
