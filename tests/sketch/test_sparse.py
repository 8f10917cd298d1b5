"""Sparse embedding matrix I (Definition D.6): s nonzeros +-1/sqrt(s) per column at distinct rows."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from leakattack.sketch import make_sketch
from leakattack.sketch.sparse import distinct_rows


@pytest.mark.parametrize("s", [1, 2, 4, 7])
def test_exactly_s_nonzeros_per_column_at_distinct_rows_with_value_pm_inv_sqrt_s(s):
    d, b = 400, 30
    sk = make_sketch("sparse", d, b, 0, s=s)
    R = sk.to_dense()
    assert torch.equal((R != 0).sum(0), torch.full((d,), s))
    rows = sk.rows.view(s, d)
    assert all(len(set(rows[:, j].tolist())) == s for j in range(d))  # distinct rows per column
    val = float(np.float32(1 / math.sqrt(s)))
    assert set(R[R != 0].unique().tolist()) == {-val, val}


def test_default_s_is_4_and_is_clipped_to_b_while_an_asked_s_above_b_is_refused():
    assert make_sketch("sparse", 50, 10, 0).s == 4
    sk = make_sketch("sparse", 50, 3, 0)
    assert sk.s == 3 and sk.describe()["s"] == 3
    assert torch.equal((sk.to_dense() != 0).sum(0), torch.full((50,), 3))  # every row used
    for bad in (0, 4, 65, "abc", 2.5):
        with pytest.raises(ValueError, match=r"sketch 'sparse': s must be an integer in \[1, min\(b, 64\)\]"):
            make_sketch("sparse", 500, 3 if bad == 4 else 100, 0, s=bad)
    with pytest.raises(ValueError, match="sketch 'sparse' has no parameter 'k'; allowed: s"):
        make_sketch("sparse", 50, 10, 0, k=2)
    with pytest.raises(ValueError, match="sketch 'srht' has no parameter 's'; allowed: none"):
        make_sketch("srht", 50, 10, 0, s=2)


def test_storage_is_s_times_d():
    sk = make_sketch("sparse", 100_000, 50_000, 1, s=4)
    assert max(t.numel() for t in vars(sk).values() if isinstance(t, torch.Tensor)) == 4 * 100_000


def test_row_subsets_are_uniform_over_all_s_subsets():
    """Floyd sampling: 20000 columns, b = 5, s = 2: each of the 10 subsets has frequency 1/10 within 5 se."""
    rows = distinct_rows(np.random.default_rng(0), 5, 2, 20000)
    freq = Counter(tuple(sorted(c)) for c in rows.T.tolist())
    assert len(freq) == 10
    n, p = 20000, 0.1
    se = math.sqrt(p * (1 - p) / n)
    assert all(abs(c / n - p) <= 5 * se for c in freq.values())


def test_signs_are_balanced_and_independent_of_rows():
    sk = make_sketch("sparse", 20000, 64, 2, s=4)
    sgn = torch.sign(sk.values).double()
    se = 1 / math.sqrt(sgn.numel())
    assert abs(sgn.mean().item()) <= 5 * se  # +-1 with probability 1/2 (5 se)
    low = (sk.rows.view(4, -1) < 32).double()
    assert abs((sgn * (2 * low - 1)).mean().item()) <= 5 * se  # no sign/row correlation
