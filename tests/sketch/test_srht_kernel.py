"""The fused SRHT kernel against the definition, the torch path and the unfused path; outputs on huge pages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from leakattack.sketch import kernels, make_sketch, scatter, srht
from leakattack.sketch.hadamard import hadamard_torch

needs_kernel = pytest.mark.skipif(not kernels.available(), reason="compiled kernels switched off (LEAKATTACK_NO_CEXT)")

#: (d, b): d = 1, tiny, a power of two, just above one, the first sizes with a tiled pass in float64 / float32
#: (n > 2^15 / 2^16 entries), b from 1 to n, and n = 2^20 (two threads)
SIZES = [(1, 1), (3, 2), (64, 16), (100, 20), (1000, 1000), (4097, 1), (40_000, 20_000), (70_001, 65_536),
         (131_072, 100_000), (600_000, 300_000)]


def _x(shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _definition(sk, v, forward):
    """sqrt(n/b) S H D / sqrt(n) in float64 through the torch passes of H: R v, or R^T u."""
    flat = v.double().reshape(-1, v.shape[-1])
    z = torch.zeros(flat.shape[0], sk.n, dtype=torch.float64)
    signs, scale = sk.signs.double(), 1 / math.sqrt(sk.b)
    if forward:
        z[:, : sk.d] = flat * signs
        return (hadamard_torch(z)[:, sk.idx] * scale).reshape(*v.shape[:-1], sk.b)
    z[:, sk.idx] = flat
    return (hadamard_torch(z)[:, : sk.d] * signs * scale).reshape(*v.shape[:-1], sk.d)


def _close(a, b, dtype):
    tol = (1e-12 if dtype == torch.float64 else 2e-6) * float(b.abs().max().clamp_min(1))
    torch.testing.assert_close(a.double(), b.double(), rtol=0, atol=tol)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d,b", SIZES)
def test_fused_kernel_equals_the_definition_and_the_torch_path(monkeypatch, d, b, dtype):
    sk = make_sketch("srht", d, b, seed=d % 7)
    v, u = _x((2, d), dtype, 0), _x((2, b), dtype, 1)
    assert sk._fused(v)
    y, w = sk.apply(v), sk.adjoint(u)
    assert y.dtype == w.dtype == dtype and y.shape == (2, b) and w.shape == (2, d)
    _close(y, _definition(sk, v, True), dtype)
    _close(w, _definition(sk, u, False), dtype)
    monkeypatch.setattr(kernels, "use_kernel", False)  # the pure-torch path, as on a GPU
    _close(y, sk.apply(v), dtype)
    _close(w, sk.adjoint(u), dtype)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d,b", [(100, 20), (70_001, 65_536), (600_000, 300_000)])
def test_fused_kernel_equals_the_unfused_kernel_path_to_the_bit(d, b, dtype):
    sk = make_sketch("srht", d, b, seed=3)
    v, u = _x((d,), dtype, 2), _x((b,), dtype, 3)
    y, w = sk.apply(v), sk.adjoint(u)
    mask, sk._mask = sk._mask, None  # the transform and the scatter plan as separate calls
    try:
        assert torch.equal(y, sk.apply(v)) and torch.equal(w, sk.adjoint(u))
    finally:
        sk._mask = mask


@needs_kernel
@pytest.mark.parametrize("n", [2, 8, 64, 256])
def test_small_sketches_equal_scipy_hadamard_matrix(n):
    d, b = n - n // 4 or 1, max(1, n // 2)
    sk = make_sketch("srht", d, b, seed=n)
    H = scipy.linalg.hadamard(sk.n) / math.sqrt(sk.n)
    R = math.sqrt(sk.n / b) * H[sk.idx.numpy()][:, :d] * sk.signs.double().numpy()
    torch.testing.assert_close(sk.to_dense(), torch.from_numpy(R), rtol=0, atol=1e-12)


@needs_kernel
def test_batches_layouts_and_empty_batches():
    d, b = 5000, 1200
    sk = make_sketch("srht", d, b, seed=1)
    v = _x((3, 2, d), torch.float64, 4)
    y = sk.apply(v)
    assert y.shape == (3, 2, b)
    _close(y, _definition(sk, v, True), torch.float64)
    rows = torch.stack([sk.apply(r) for r in v.reshape(-1, d)]).reshape(3, 2, b)
    assert torch.equal(y, rows)  # row by row, the same bits
    wide = _x((d, 4), torch.float64, 5)
    assert torch.equal(sk.apply(wide.T), sk.apply(wide.T.contiguous()))  # a transposed view
    v0 = v.clone()
    sk.adjoint(sk.apply(v))
    assert torch.equal(v, v0)  # inputs untouched
    assert sk.apply(torch.zeros(0, d)).shape == (0, b) and sk.adjoint(torch.zeros(0, b)).shape == (0, d)


@needs_kernel
def test_two_threads_give_the_same_bits_as_one(monkeypatch):
    d, b = 600_000, 250_000  # n = 2^20: the kernel splits blocks and tiles over the threads
    sk = make_sketch("srht", d, b, seed=4)
    v, u = _x((d,), torch.float32, 6), _x((b,), torch.float32, 7)
    monkeypatch.setattr(srht, "threads", lambda entries: 2)
    y2, w2 = sk.apply(v), sk.adjoint(u)
    monkeypatch.setattr(srht, "threads", lambda entries: 1)
    assert torch.equal(y2, sk.apply(v)) and torch.equal(w2, sk.adjoint(u))


@needs_kernel
def test_fused_kernel_is_differentiable():
    sk = make_sketch("srht", 30, 12, seed=5)
    v = _x((2, 30), torch.float64, 8).requires_grad_()
    assert torch.autograd.gradcheck(sk.apply, (v,))
    u = _x((2, 12), torch.float64, 9).requires_grad_()
    assert torch.autograd.gradcheck(sk.adjoint, (u,))


@needs_kernel
def test_large_outputs_come_on_aligned_memory_and_hold_the_result():
    t = kernels.empty((3, kernels.HUGE_MIN_BYTES // 4), torch.float32)
    assert t.is_contiguous() and t.shape == (3, kernels.HUGE_MIN_BYTES // 4)
    t.fill_(2.0)
    assert float(t.sum()) == 2.0 * t.numel()
    assert kernels.empty((5,), torch.float64).dtype == torch.float64
    for shape in [(7,), (2, kernels.HUGE_MIN_BYTES // 8 + 3)]:
        z = kernels.empty(shape, torch.float64, zero=True)
        assert z.shape == shape and not z.any()


@needs_kernel
def test_the_kernel_refuses_a_plan_that_does_not_match():
    sk = make_sketch("srht", 100, 20, seed=6)
    plan, x = sk._select, torch.zeros(100)
    args = dict(src=x, out=torch.zeros(20), work=torch.zeros(sk.n), tmp=plan.scratch(x.dtype), ds=sk._dscale(x.dtype))

    def call(mask, rank, work=None):
        b = kernels.buffer
        kernels.ext.srht(True, b(args["src"]), b(args["out"]), b(args["work"] if work is None else work),
                         b(args["tmp"]), b(args["ds"]), 100, mask, rank, b(plan.pos), b(plan.destB), b(plan.starts), 1)

    call(sk._mask, sk._rank)  # as the sketch calls it
    with pytest.raises(ValueError, match="rank"):
        call(sk._mask, sk._rank + 1)
    with pytest.raises(ValueError, match="mask"):
        call(np.zeros_like(sk._mask), np.zeros_like(sk._rank))
    with pytest.raises(ValueError, match="power-of-two"):
        call(sk._mask, sk._rank, work=torch.zeros(sk.n - 1))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["countsketch", "sparse"])
def test_scatter_sketches_with_sign_bits_and_huge_page_outputs_equal_their_torch_twin(monkeypatch, kind, dtype):
    d, b = 2_200_000, 2_100_000  # both outputs above HUGE_MIN_BYTES
    sk = make_sketch(kind, d, b, seed=8)
    assert sk._plan.signs is not None  # weights +-c: the kernels read their sign bits
    v, u = _x((d,), dtype, 10), _x((b,), dtype, 11)
    y, w = sk.apply(v), sk.adjoint(u)
    assert y.numel() * 4 >= kernels.HUGE_MIN_BYTES and w.numel() * 4 >= kernels.HUGE_MIN_BYTES
    monkeypatch.setattr(kernels, "use_kernel", False)
    assert torch.equal(y, sk.apply(v)) and torch.equal(w, sk.adjoint(u))  # the same sums in the same order


def test_sign_bits_only_for_weights_of_one_magnitude():
    w = torch.tensor([0.5, -0.5, -0.5] + [0.5] * 62 + [-0.5])
    words, c = scatter.sign_bits(w)
    assert c == 0.5 and words.tolist() == [0b110, 0b10]  # entries 1, 2 and 65 negative
    assert scatter.sign_bits(torch.tensor([0.5, -0.25]))[0] is None
