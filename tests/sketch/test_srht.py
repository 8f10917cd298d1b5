"""SRHT structure (Definition D.3): the fast Walsh-Hadamard transform, orthogonal rows, padding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from leakattack.sketch import make_sketch
from leakattack.sketch.srht import fwht


@pytest.mark.parametrize("n", [1, 2, 4, 8, 64, 512])
def test_fwht_matches_scipy_hadamard_over_sqrt_n(n):
    H = torch.from_numpy(scipy.linalg.hadamard(n) / math.sqrt(n))
    x = torch.randn(3, 2, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    torch.testing.assert_close(fwht(x), x @ H.T, rtol=0, atol=1e-12)  # float64, batched
    torch.testing.assert_close(fwht(x.float()), (x @ H.T).float(), rtol=1e-5, atol=1e-5)


def test_fwht_is_an_involution_and_leaves_its_input_untouched():
    x = torch.randn(5, 1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x0 = x.clone()
    torch.testing.assert_close(fwht(fwht(x)), x, rtol=0, atol=1e-12)
    assert torch.equal(x, x0)


def test_fwht_rejects_non_power_of_two_length():
    with pytest.raises(ValueError):
        fwht(torch.zeros(12))


def test_fwht_gradients_pass_gradcheck_and_gradgradcheck():
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fwht, (x,))
    assert torch.autograd.gradgradcheck(fwht, (x,))


def test_power_of_two_d_gives_orthogonal_rows_RRt_equals_n_over_b_identity():
    d, b = 64, 16
    R = make_sketch("srht", d, b, 2).to_dense()
    torch.testing.assert_close(R @ R.T, (d / b) * torch.eye(b, dtype=torch.float64), rtol=0, atol=1e-12)


def test_non_power_of_two_d_is_zero_padded_and_matches_definition():
    d, b = 100, 20
    sk = make_sketch("srht", d, b, 3)
    assert sk.n == 128
    assert len(set(sk.idx.tolist())) == b  # S samples rows without replacement
    H = scipy.linalg.hadamard(sk.n) / math.sqrt(sk.n)
    signs = sk.signs.double().numpy()
    expected = math.sqrt(sk.n / b) * H[sk.idx.numpy()][:, :d] * signs  # sqrt(n/b) S H D, first d columns
    torch.testing.assert_close(sk.to_dense(), torch.from_numpy(expected), rtol=0, atol=1e-12)
    assert set(np.unique(signs)) <= {-1.0, 1.0}


def test_power_of_two_second_moment_equals_n_over_b():
    """||R^T R g||^2 = (n/b)^2 ||S H D g||^2, so E = (n/b)||g||^2 <= (1 + 2d/b)||g||^2; 2000 seeds, 4 se."""
    d, b, n_seeds = 32, 8, 2000
    g = torch.from_numpy(np.random.default_rng(0).standard_normal(d))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = []
        for s in range(n_seeds):
            sk = make_sketch("srht", d, b, s)
            r.append(float(sk.adjoint(sk.apply(g)).pow(2).sum() / g.pow(2).sum()))
    finally:
        torch.set_num_threads(threads)
    r = np.array(r)
    mean, se = r.mean(), r.std() / math.sqrt(n_seeds)
    assert abs(mean - d / b) <= 4 * se
    assert mean <= 1 + 2 * d / b
