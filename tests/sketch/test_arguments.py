"""get_sketch refuses a d, b or seed that is not a whole number, d < 1 and then b outside [1, d], each in one sentence
naming the bad value; the identity warns, as `--sketch none --sketch-dim B` does, that a b other than d changes
nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from leakattack.errors import SettingWarning, UserError
from leakattack.sketch import get_sketch


@pytest.mark.parametrize("args,kwargs,message", [
    (("gaussian", "100", 20), {}, "the gradient length d must be an integer, got '100' (str)"),
    (("gaussian", 100.5, 20), {}, "the gradient length d must be an integer, got 100.5 (float)"),
    (("gaussian", True, 1), {}, "the gradient length d must be an integer, got True (bool)"),
    (("srht", 100, 20.0), {}, "the sketch dimension b must be an integer, got 20.0 (float)"),
    (("gaussian", 100, 20), {"seed": 1.5}, "the sketch seed must be an integer, got 1.5 (float)"),
    (("gaussian", 100, 20), {"seed": False}, "the sketch seed must be an integer, got False (bool)"),
    (("srht", -5, 2), {}, "the gradient length d must be at least 1, got d = -5"),
    (("srht", 0, 0), {}, "the gradient length d must be at least 1, got d = 0"),
    (("srht", 100, -2), {}, "sketch dimension b must satisfy 1 <= b <= d = 100, got b = -2"),
    (("srht", 100, 200), {}, "sketch dimension b must satisfy 1 <= b <= d = 100, got b = 200"),
])
def test_get_sketch_refuses_d_then_b_then_seed_that_are_not_whole_numbers_or_out_of_range(args, kwargs, message):
    with pytest.raises(UserError) as err:
        get_sketch(*args, **kwargs)
    assert str(err.value) == message


def test_get_sketch_takes_numpy_integers_as_whole_numbers():
    s = get_sketch("srht", np.int64(16), np.int32(4), np.int64(3))
    assert (s.d, s.b, s.seed) == (16, 4, 3) and type(s.d) is int
    assert torch.equal(s.to_dense(), get_sketch("srht", 16, 4, 3).to_dense())
    # a family's whole-number parameter too: sparse's s
    sp = get_sketch("sparse", 16, 4, 3, s=np.int64(2))
    assert sp.s == 2 and type(sp.describe()["s"]) is int
    assert torch.equal(sp.to_dense(), get_sketch("sparse", 16, 4, 3, s=2).to_dense())
    with pytest.raises(ValueError, match=r"s must be an integer in \[1, min\(b, 64\)\], got np.True_"):
        get_sketch("sparse", 16, 4, 3, s=np.True_)


def test_the_identity_warns_as_the_cli_does_that_a_b_other_than_d_changes_nothing():
    """`--sketch none --sketch-dim 50` warns that the dimension changes nothing (tests/config/test_recipes.py); so
    does get_sketch, in the same category, and b = d or b left out is silent."""
    with pytest.warns(SettingWarning, match=r"^sketch 'none' sends the whole gradient \(b = d = 100\): "
                                            r"b = 50 changes nothing$"):
        s = get_sketch("none", 100, 50)
    assert s.b == 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_sketch("none", 100, 100).b == 100 and get_sketch("none", 100, None).b == 100

