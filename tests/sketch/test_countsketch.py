"""Count-sketch structure (Definition D.5): one +-1 per column, polynomial hash families."""

from __future__ import annotations

import math

import numpy as np
import torch

from leakattack.sketch import make_sketch
from leakattack.sketch.countsketch import PRIME, poly_hash


def test_exactly_one_nonzero_per_column_with_value_plus_or_minus_one():
    R = make_sketch("countsketch", 500, 37, 0).to_dense()
    assert torch.equal((R != 0).sum(0), torch.ones(500, dtype=torch.long))
    assert set(R[R != 0].unique().tolist()) == {-1.0, 1.0}


def test_storage_is_linear_in_d():
    sk = make_sketch("countsketch", 100_000, 50_000, 1)
    assert all(t.numel() <= 100_000 for t in vars(sk).values() if isinstance(t, torch.Tensor))
    assert int(sk.rows.min()) >= 0 and int(sk.rows.max()) < 50_000


def test_poly_hash_matches_exact_integer_arithmetic():
    rng = np.random.default_rng(0)
    coeffs = rng.integers(0, PRIME, size=4)
    x = np.concatenate([np.arange(50), rng.integers(0, PRIME, size=50), [PRIME - 1]])
    expected = [sum(int(c) * int(xi) ** k for k, c in enumerate(coeffs)) % PRIME for xi in x]
    assert poly_hash(coeffs, x).tolist() == expected


def test_bucket_collisions_are_pairwise_uniform_and_signs_four_wise_unbiased():
    """Over 2000 seeds: P[h(i) = h(j)] = 1/b and E[s_i s_j s_k s_l] = 0, E[s_i] = 0, each within 4.5 se."""
    d, b, n = 12, 8, 2000
    rows = np.empty((n, d), dtype=np.int64)
    signs = np.empty((n, d))
    for s in range(n):
        sk = make_sketch("countsketch", d, b, s)
        rows[s], signs[s] = sk.rows.numpy(), sk.signs.numpy()
    coll = (rows[:, :1] == rows[:, 1:]).mean(0)  # pairs (0, j)
    se = math.sqrt((1 / b) * (1 - 1 / b) / n)
    assert np.all(np.abs(coll - 1 / b) <= 4.5 * se)
    se1 = 1 / math.sqrt(n)  # +-1 variables
    assert np.all(np.abs(signs.mean(0)) <= 4.5 * se1)
    assert abs((signs[:, 0] * signs[:, 3] * signs[:, 7] * signs[:, 11]).mean()) <= 4.5 * se1
    assert abs((signs[:, 1] * signs[:, 2]).mean()) <= 4.5 * se1


def test_nonzero_rows_counts_the_buckets_some_column_hashes_to():
    """R's zero rows are the buckets no column hashes to; every other family keeps b rows by default."""
    for seed in range(20):
        sk = make_sketch("countsketch", 40, 16, seed)
        assert sk.nonzero_rows() == int((sk.to_dense().abs().sum(1) > 0).sum())
    assert make_sketch("countsketch", 13426, 1000, 208).nonzero_rows() == 286  # the linear hash's worst seeds
    assert make_sketch("srht", 40, 16, 0).nonzero_rows() == 16
