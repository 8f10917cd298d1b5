"""The compiled Walsh-Hadamard kernel: the same map as the torch passes, in every layout, and its fallback."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import torch

from leakattack.sketch import hadamard, kernels, make_sketch
from leakattack.sketch.hadamard import fwht, hadamard_owned, hadamard_torch, hadamard_unnormalised

needs_kernel = pytest.mark.skipif(not kernels.available(), reason="compiled kernels switched off (LEAKATTACK_NO_CEXT)")


@pytest.fixture
def torch_only(monkeypatch):
    """Every transform through the torch passes, as without the extension."""
    monkeypatch.setattr(kernels, "use_kernel", False)


def _x(shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _close(a, b, dtype):
    """Agreement to round-off: float64 1e-12, float32 1e-5 of the largest entry (sums of up to 2^20 terms)."""
    tol = (1e-12 if dtype == torch.float64 else 1e-5) * float(b.abs().max().clamp_min(1))
    torch.testing.assert_close(a, b, rtol=0, atol=tol)


@pytest.mark.skipif(os.environ.get("LEAKATTACK_NO_CEXT", "").strip() not in ("", "0"), reason="switched off on purpose")
def test_the_install_built_the_kernels_and_the_sketches_use_them():
    assert kernels.available() and kernels.active()
    assert kernels.applies(torch.zeros(4)) and kernels.applies(torch.zeros(4, dtype=torch.float64))
    assert not kernels.applies(torch.zeros(4, dtype=torch.float16))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kernel_equals_torch_passes_for_every_power_of_two_up_to_2_20(dtype):
    for k in range(21):
        n = 1 << k
        rows = 3 if n <= 1 << 14 else 1
        x = _x((rows, n), dtype, seed=k)
        ref = hadamard_torch(x.double())
        out = hadamard_owned(x.clone())
        assert out.dtype == dtype
        _close(out.double(), ref, dtype)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(8,), (1, 1, 64), (3, 1, 5, 128), (7, 2048), (2, 3, 1 << 15)])
def test_kernel_handles_batch_shapes_and_matches_scipy(dtype, shape):
    x = _x(shape, dtype, seed=len(shape))
    n = shape[-1]
    if n <= 2048:
        H = torch.from_numpy(scipy.linalg.hadamard(n).astype(np.float64))
        _close(hadamard_unnormalised(x).double(), x.double() @ H.T, dtype)
    _close(hadamard_unnormalised(x).double(), hadamard_torch(x.double()), dtype)


@needs_kernel
@pytest.mark.parametrize("tuning", [
    dict(block_bytes=256, chunk_bytes=256, tile_bytes=256, high_bits=1),
    dict(block_bytes=512, chunk_bytes=256, tile_bytes=1024, high_bits=2),
    dict(block_bytes=1024, chunk_bytes=512, tile_bytes=4096, high_bits=3),
    dict(block_bytes=2048, chunk_bytes=1024, tile_bytes=32, high_bits=5),
    dict(block_bytes=4096, chunk_bytes=4096, tile_bytes=65536, high_bits=7),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_pass_structure_of_the_kernel_gives_the_same_transform(tuning, dtype):
    """Tiny blocks force several high passes, radix-2/4/8 remainders and tiles narrower than a block at small n."""
    for k in (6, 9, 12, 14):
        n = 1 << k
        x = _x((2, n), dtype, seed=k)
        y = x.clone()
        kernels.ext.transform(kernels.buffer(y), n, 1, **tuning)
        _close(y.double(), hadamard_torch(x.double()), dtype)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_threads_give_bit_identical_results(dtype):
    x = _x((3, 1 << 16), dtype)
    one, two, three = x.clone(), x.clone(), x.clone()
    kernels.ext.transform(kernels.buffer(one), 1 << 16, 1, block_bytes=4096)
    kernels.ext.transform(kernels.buffer(two), 1 << 16, 2, block_bytes=4096)
    kernels.ext.transform(kernels.buffer(three), 1 << 16, 3, block_bytes=4096)
    assert torch.equal(one, two) and torch.equal(one, three)


@needs_kernel
def test_non_contiguous_inputs_are_transformed_and_left_untouched():
    base = _x((64, 32), torch.float64)
    for x in (base.T, base[:, ::2], base.T[::2], base.unsqueeze(0).expand(3, 64, 32)):
        x0 = x.clone()
        _close(hadamard_unnormalised(x), hadamard_torch(x.contiguous()), torch.float64)
        _close(fwht(x), hadamard_torch(x.contiguous()) / math.sqrt(x.shape[-1]), torch.float64)
        assert torch.equal(x, x0)


@needs_kernel
def test_autograd_through_the_kernel_passes_gradcheck_and_gradgradcheck():
    x = _x((3, 64), torch.float64).requires_grad_()
    assert kernels.applies(x)
    assert torch.autograd.gradcheck(fwht, (x,))
    assert torch.autograd.gradgradcheck(fwht, (x,))
    assert torch.autograd.gradcheck(hadamard_unnormalised, (x,))


def test_the_torch_fallback_gives_the_kernels_numbers(torch_only):
    assert not kernels.applies(torch.zeros(4))
    x = _x((2, 1 << 10), torch.float64)
    _close(hadamard_unnormalised(x), torch.from_numpy(x.numpy() @ scipy.linalg.hadamard(1 << 10).T), torch.float64)
    y = x.clone()
    assert hadamard_owned(y) is not y and torch.equal(y, x)  # the torch path never overwrites its input


@pytest.mark.parametrize("kind", ["srht", "countsketch", "sparse"])
def test_sketches_give_the_same_operator_with_and_without_the_kernels(kind, monkeypatch):
    """Built and applied with the kernels, then with the torch twins: the same R and, to round-off, the same R v."""
    d, b = 3000, 1100  # d pads to n = 4096 for srht
    v = _x((2, d), torch.float64, seed=1)
    u = _x((2, b), torch.float64, seed=2)
    with_kernel = make_sketch(kind, d, b, 5)
    results = [with_kernel.apply(v), with_kernel.adjoint(u), with_kernel.apply(v.float())]
    monkeypatch.setattr(kernels, "use_kernel", False)
    without = make_sketch(kind, d, b, 5)
    for sk in (with_kernel, without):  # built with kernels but run without, and built and run without
        _close(sk.apply(v), results[0], torch.float64)
        _close(sk.adjoint(u), results[1], torch.float64)
        _close(sk.apply(v.float()).double(), results[2].double(), torch.float32)


def test_environment_switch_builds_and_runs_without_the_extension():
    """LEAKATTACK_NO_CEXT=1 at import: no kernel anywhere, and SRHT still gives the operator of the definition."""
    code = (
        "import math, scipy.linalg, torch\n"
        "from leakattack.sketch import kernels, make_sketch\n"
        "assert not kernels.available() and not kernels.active()\n"
        "sk = make_sketch('srht', 100, 20, 3)\n"
        "H = torch.from_numpy(scipy.linalg.hadamard(128) / math.sqrt(128))\n"
        "R = math.sqrt(128 / 20) * H[sk.idx][:, :100] * sk.signs.double()\n"
        "torch.testing.assert_close(sk.to_dense(), R, rtol=0, atol=1e-12)\n"
        "print('fallback ok')\n"
    )
    env = {**os.environ, "LEAKATTACK_NO_CEXT": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fallback ok" in out.stdout


@needs_kernel
def test_kernel_refuses_bad_buffers_in_one_sentence():
    with pytest.raises(ValueError, match="power-of-two length"):
        kernels.ext.transform(np.zeros(12), 12)
    with pytest.raises(TypeError, match="float32 or float64"):
        kernels.ext.transform(np.zeros(8, dtype=np.int64), 8)
    with pytest.raises(ValueError, match="whole number of rows"):
        kernels.ext.transform(np.zeros(12), 8)
    with pytest.raises(ValueError, match="tuning out of range"):
        kernels.ext.transform(np.zeros(8), 8, block_bytes=100)
    with pytest.raises(ValueError, match="power-of-two length"):
        hadamard.fwht(torch.zeros(3, 12))
