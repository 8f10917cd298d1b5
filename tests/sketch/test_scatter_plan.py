"""Bucketed scatter plans (countsketch, sparse, the SRHT's S): the map of the definition, the same R as before,
O(d) construction."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from leakattack.sketch import countsketch, kernels, make_sketch, sparse
from leakattack.sketch.scatter import ScatterPlan, bucket_bits

needs_kernel = pytest.mark.skipif(not kernels.available(), reason="compiled kernels switched off (LEAKATTACK_NO_CEXT)")


def _reference(dest, m, src_len, reps=1, src_index=None, weights=None):
    """A x and A^T y entry by entry (np.add.at, float64) for the map a plan stands for."""
    E = len(dest)
    src = np.asarray(src_index) if src_index is not None else np.arange(E) % (E // reps)
    w = np.ones(E) if weights is None else weights.double().numpy()

    def forward(x):
        out = np.zeros((x.shape[0], m))
        for r in range(x.shape[0]):
            np.add.at(out[r], dest, w * x[r].numpy()[src])
        return torch.from_numpy(out)

    def transpose(y):
        out = np.zeros((y.shape[0], src_len))
        for r in range(y.shape[0]):
            np.add.at(out[r], src, w * y[r].numpy()[dest])
        return torch.from_numpy(out)

    return forward, transpose


@pytest.mark.parametrize("use_kernel", [True, False])
@pytest.mark.parametrize("case", ["countsketch-like", "repeated", "selection"])
def test_plan_forward_and_transpose_are_the_matrix_of_its_entries(case, use_kernel, monkeypatch):
    if use_kernel and not kernels.available():
        pytest.skip("compiled kernels switched off")
    monkeypatch.setattr(kernels, "use_kernel", use_kernel)
    rng = np.random.default_rng(0)
    m, n = 9000, 5000  # m > 2 * 4096: several buckets
    if case == "countsketch-like":
        dest, kw = rng.integers(0, m, size=n), dict(src_len=n)
        kw["weights"] = torch.from_numpy(rng.choice([-1.0, 1.0], size=n).astype(np.float32))
    elif case == "repeated":  # s = 3 entries per source, like the sparse embedding
        dest, kw = rng.integers(0, m, size=3 * n), dict(src_len=n, reps=3)
        kw["weights"] = torch.from_numpy(rng.standard_normal(3 * n).astype(np.float32))
    else:  # each output reads one distinct source: the SRHT's row selection
        idx = rng.choice(2 * m, size=m, replace=False)
        order = np.argsort(idx, kind="stable")
        dest, kw = order, dict(src_len=2 * m, src_index=idx[order], covers=True)
    plan = ScatterPlan(dest, m, **kw)
    assert (plan.pos is not None) == use_kernel
    fwd, tr = _reference(dest, m, kw["src_len"], kw.get("reps", 1), kw.get("src_index"), kw.get("weights"))
    x = torch.randn(3, kw["src_len"], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = torch.randn(3, m, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(plan.forward(x), fwd(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(plan.transpose(y), tr(y), rtol=0, atol=1e-12)
    torch.testing.assert_close(plan.forward(x.float()).double(), fwd(x), rtol=0, atol=1e-4)
    assert plan.forward(x[0]).shape == (m,) and plan.transpose(y[:2].unsqueeze(0)).shape == (1, 2, kw["src_len"])
    assert torch.equal(plan.dest(), torch.from_numpy(np.asarray(dest, dtype=np.int64)))


@needs_kernel
def test_kernel_and_torch_twin_add_in_the_same_order_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(3)
    d, m = 20000, 700  # many collisions per output
    dest = rng.integers(0, m, size=2 * d)
    w = torch.from_numpy(rng.standard_normal(2 * d).astype(np.float32))
    plan = ScatterPlan(dest, m, src_len=d, reps=2, weights=w)
    x = torch.randn(2, d, generator=torch.Generator().manual_seed(4))
    y = torch.randn(2, m, generator=torch.Generator().manual_seed(5))
    fast = plan.forward(x), plan.transpose(y)
    monkeypatch.setattr(kernels, "use_kernel", False)
    assert torch.equal(plan.forward(x), fast[0]) and torch.equal(plan.transpose(y), fast[1])


@needs_kernel
def test_bucket_plan_is_a_stable_counting_sort_by_bucket():
    rng = np.random.default_rng(6)
    m = 50_000
    dest = rng.integers(0, m, size=120_000)
    plan = ScatterPlan(dest, m, src_len=120_000)
    bits = bucket_bits(m)
    pos, destB, starts = plan.pos.long().numpy(), plan.destB.numpy(), plan.starts.numpy()
    assert np.array_equal(np.sort(pos), np.arange(dest.size))  # a permutation
    assert np.array_equal(destB[pos], dest)  # entry j sits at pos[j]
    assert np.all(np.diff(destB >> bits) >= 0)  # bucket-major
    assert np.array_equal(starts, np.searchsorted(destB >> bits, np.arange(len(starts)), side="left"))
    same = (destB[1:] >> bits) == (destB[:-1] >> bits)  # within a bucket, entries keep their order
    inv = np.argsort(pos)
    assert np.all(np.diff(inv)[same] > 0)
    assert (m - 1) >> bits < 128 and 1 << bits >= 4096


def _old_countsketch(d, b, seed):
    """The construction as first written: one int64 pass over all columns."""
    from leakattack import seeds
    rng = seeds.numpy_stream(seed, seeds.COUNTSKETCH)
    h, s = rng.integers(0, countsketch.PRIME, size=2), rng.integers(0, countsketch.PRIME, size=4)
    cols = np.arange(d, dtype=np.int64)
    return countsketch.poly_hash(h, cols) % b, (2.0 * (countsketch.poly_hash(s, cols) & 1) - 1.0).astype(np.float32)


def _old_sparse(d, b, seed, s):
    from leakattack import seeds
    rng = seeds.numpy_stream(seed, seeds.SPARSE)
    rows = np.empty((s, d), dtype=np.int64)
    for i in range(s):
        t = b - s + i
        r = rng.integers(0, t + 1, size=d)
        dup = (rows[:i] == r).any(axis=0) if i else np.zeros(d, dtype=bool)
        rows[i] = np.where(dup, t, r)
    signs = 2.0 * rng.integers(0, 2, size=(s, d)) - 1.0
    return rows.reshape(-1), (signs * np.float32(1.0 / math.sqrt(s))).astype(np.float32)


def test_chunked_construction_draws_the_same_operators_as_one_pass(monkeypatch):
    """Chunks smaller than d (odd d, odd chunk counts) still give the R the seed always gave."""
    monkeypatch.setattr(countsketch, "HASH_CHUNK", 1000)
    monkeypatch.setattr(sparse, "CHUNK", 1000)  # even: sign draws split on whole 32-bit words
    for d, b, seed in [(5001, 700, 0), (2999, 2999, 11)]:
        rows, signs = _old_countsketch(d, b, seed)
        sk = make_sketch("countsketch", d, b, seed)
        assert torch.equal(sk.rows, torch.from_numpy(rows)) and torch.equal(sk.signs, torch.from_numpy(signs))
        for s in (1, 4, 7):
            rows, values = _old_sparse(d, b, seed, s)
            sk = make_sketch("sparse", d, b, seed, s=s)
            assert torch.equal(sk.rows, torch.from_numpy(rows))
            assert torch.equal(sk.values, torch.from_numpy(values).view(s, d))


def test_srht_row_selection_keeps_the_order_numpy_drew():
    from leakattack import seeds
    d, b = 1000, 300
    sk = make_sketch("srht", d, b, 9)
    rng = seeds.numpy_stream(9, seeds.SRHT)
    rng.integers(0, 2, size=1024)
    assert torch.equal(sk.idx, torch.from_numpy(rng.choice(1024, size=b, replace=False)))


_RSS = """
import json, sys, torch
from leakattack.sketch import make_sketch
def status(key):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":"))
make_sketch(sys.argv[1], 4096, 2048, 1)  # one-time costs (lazy imports, the kernels' first calls) come before
with open("/proc/self/clear_refs", "w") as fh:  # the peak (VmHWM) restarts from the current RSS
    fh.write("5")
before = status("VmRSS")
sk = make_sketch(sys.argv[1], int(sys.argv[2]), int(sys.argv[2]) // 2, 1)
peak = status("VmHWM")
plan = sk._plan
held = plan.nbytes() + sum(t.numel() * t.element_size() for t in vars(sk).values() if isinstance(t, torch.Tensor))
print(json.dumps({"growth": peak - before, "held": held}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)")
@pytest.mark.parametrize("kind", ["countsketch", "sparse"])
def test_construction_peak_memory_is_what_the_sketch_keeps_plus_small_chunks(kind):
    """Peak RSS while building at d = 3e6 stays within what the sketch holds + 40 MB of chunk temporaries
    (the one-pass int64 build grew by 123 MB for a countsketch holding 48 MB, by 342 MB for a sparse one holding
    192 MB)."""
    d = 3_000_000
    out = subprocess.run([sys.executable, "-c", _RSS, kind, str(d)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["held"] >= (4 if kind == "countsketch" else 16) * d
    assert r["growth"] <= r["held"] + 40e6, r
