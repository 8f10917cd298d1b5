"""AMS sketch (Definition D.4): entries exactly +-1/sqrt(b), independent signs."""

from __future__ import annotations

import math

import numpy as np
import torch

from leakattack.sketch import make_sketch
from leakattack.sketch.ams import sign_table


def test_entries_are_exactly_plus_or_minus_inv_sqrt_b():
    d, b = 300, 50
    R = make_sketch("ams", d, b, 0).to_dense()
    val = float(np.float32(1 / math.sqrt(b)))
    assert set(R.unique().tolist()) == {-val, val}


def test_large_path_entries_are_exactly_plus_or_minus_inv_sqrt_b():
    d, b = 8192, 2049  # b*d > 2**24 and 67 MB > a 10 MB budget: regenerated blocks
    sk = make_sketch("ams", d, b, 1, memory_gb=0.01)
    assert sk._dense is None
    cols = sk.apply(torch.eye(d)[[0, 4000, d - 1]])
    assert sk._dense is None
    val = float(np.float32(1 / math.sqrt(b)))
    assert set(cols.unique().tolist()) == {-val, val}


def test_signs_are_balanced_and_pairwise_and_four_wise_uncorrelated():
    """Entries of one row act as independent signs: means and products within 5 se of 0."""
    d, b = 2000, 400
    S = torch.sign(make_sketch("ams", d, b, 2).to_dense())
    se = 1 / math.sqrt(b)  # a column-product mean averages b independent +-1 values
    assert abs(S.mean().item()) <= 5 / math.sqrt(S.numel())
    assert abs((S[:, 0] * S[:, 1]).mean().item()) <= 5 * se
    assert abs((S[:, 3] * S[:, 10] * S[:, 100] * S[:, 1999]).mean().item()) <= 5 * se
    gram = (S.T @ S) / b  # off-diagonal entries are means of b independent +-1 products
    off = gram[~torch.eye(d, dtype=torch.bool)]
    assert abs(off.var().item() * b - 1) < 0.05


def test_sign_table_unpacks_bytes_most_significant_bit_first():
    t = sign_table(0.5)
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)
    assert t.dtype == np.float32 and np.array_equal(t, np.where(bits == 1, 0.5, -0.5))
