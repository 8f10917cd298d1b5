"""Uniform sampling sketch (Definition D.8): R = sqrt(d/b) S D."""

from __future__ import annotations

import math

import numpy as np
import torch

from leakattack.sketch import make_sketch


def test_exactly_one_nonzero_per_row_at_distinct_columns_with_value_pm_sqrt_d_over_b():
    d, b = 200, 60
    R = make_sketch("uniform", d, b, 0).to_dense()
    assert torch.equal((R != 0).sum(1), torch.ones(b, dtype=torch.long))
    assert int((R != 0).sum(0).max()) == 1  # sampling without replacement
    val = float(np.float32(math.sqrt(d / b)))
    assert set(R[R != 0].unique().tolist()) == {-val, val}


def test_b_equal_d_is_a_signed_permutation():
    R = make_sketch("uniform", 30, 30, 1).to_dense()
    torch.testing.assert_close(R.T @ R, torch.eye(30, dtype=torch.float64), rtol=0, atol=1e-12)


def test_each_coordinate_is_sampled_with_probability_b_over_d():
    """Over 3000 seeds (d = 10, b = 3): inclusion frequency 0.3 within 4.5 se for every coordinate."""
    d, b, n = 10, 3, 3000
    counts = np.zeros(d)
    for s in range(n):
        counts[make_sketch("uniform", d, b, s).idx.numpy()] += 1
    p = b / d
    assert np.all(np.abs(counts / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n))
