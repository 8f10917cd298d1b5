"""targets.victim.same_values: the one comparison of a buffer before and after a call, NaN equal to NaN."""

import math

import torch

from targets.victim import same_values


def test_same_values_takes_nan_as_equal_and_tells_shape_and_dtype_apart():
    a = torch.tensor([1.0, math.nan, 3.0])
    assert same_values(a, a.clone())
    assert not same_values(a, torch.tensor([1.0, math.nan, 4.0]))
    assert not same_values(a, a.double())  # the same numbers in another dtype: a buffer that changed its dtype
    assert not same_values(torch.ones(2, 2), torch.ones(4))
    assert same_values(torch.arange(3), torch.arange(3)) and not same_values(torch.arange(3), torch.arange(3.0))
    assert same_values(torch.empty(0), torch.empty(0))
