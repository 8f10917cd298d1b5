"""Random Gaussian sketch (Definition D.2): entries N(0, 1/b); cached and regenerated paths agree."""

from __future__ import annotations

import math

import torch

from leakattack.sketch import DENSE_LIMIT, make_sketch


def test_entries_have_mean_zero_and_variance_one_over_b():
    d, b = 1024, 512  # 524,288 entries
    R = make_sketch("gaussian", d, b, 0).to_dense()
    n = R.numel()
    assert abs(R.mean().item()) <= 5 * math.sqrt(1 / b / n)  # 5 se of the mean
    var = R.var().item()
    assert abs(var * b - 1) <= 5 * math.sqrt(2 / n)  # 5 se of the sample variance (~1%)
    kurt = (R.pow(4).mean() / R.pow(2).mean() ** 2).item()
    assert abs(kurt - 3) < 0.05  # Gaussian fourth moment, E R^4 = 3/b^2 (used by Lemma D.13)


def test_large_d_blockwise_path_equals_dense_path_when_forced():
    """b*d = 2**24 - 1 is cached; forcing regeneration gives the same matrix (5 blocks, last partial)."""
    d, b = 4097, 4095
    assert b * d <= DENSE_LIMIT
    dense = make_sketch("gaussian", d, b, 11)
    blocks = make_sketch("gaussian", d, b, 11, force_blocks=True)
    assert blocks._dense is None and blocks.n_blocks == 5 and dense._dense.shape == (b, d)
    v = torch.randn(3, d, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(blocks.apply(v), dense.apply(v), rtol=1e-5, atol=1e-5)  # float32 sums
    eye_cols = torch.eye(d)[[0, 1234, d - 1]]
    assert torch.equal(blocks.apply(eye_cols).T, dense._dense[:, [0, 1234, d - 1]])  # same entries


def test_large_path_is_deterministic_and_has_gaussian_entries():
    d, b = 8192, 2049  # b*d > 2**24 and 67 MB > a 10 MB budget: regenerated every call
    sk = make_sketch("gaussian", d, b, 12, memory_gb=0.01)
    assert sk._dense is None
    cols = sk.apply(torch.eye(d)[:64])  # 64 columns of R, (64, b)
    assert sk._dense is None
    assert torch.equal(cols, sk.apply(torch.eye(d)[:64]))
    n = cols.numel()
    assert abs(cols.mean().item()) <= 5 * math.sqrt(1 / b / n)
    assert abs(cols.double().var().item() * b - 1) <= 5 * math.sqrt(2 / n)


def test_regenerating_path_is_twice_differentiable():
    """The custom autograd Functions (backward = adjoint, its backward = apply) pass gradcheck/gradgradcheck."""
    sk = make_sketch("gaussian", 12, 5, 13, force_blocks=True)
    v = torch.randn(2, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sk.apply, (v,)) and torch.autograd.gradgradcheck(sk.apply, (v,))
    assert torch.autograd.gradcheck(sk.adjoint, (u,)) and torch.autograd.gradgradcheck(sk.adjoint, (u,))
