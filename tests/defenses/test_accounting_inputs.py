"""Bad input to the privacy accounting is one UserError sentence naming the parameter, never an impossible epsilon,
a ZeroDivisionError, a math domain error or an AttributeError deep inside."""

import math

import numpy as np
import pytest

import defenses
from defenses.accounting import accountant_epsilon, gaussian_epsilon, gaussian_sigma, message_privacy
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
