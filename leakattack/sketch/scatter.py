"""Sparse linear maps applied at memory speed: entries scattered to random outputs, and the transpose.

A :class:`ScatterPlan` holds E = reps * len entries; entry j = k * len + i reads source i
(or ``src_index[j]``), is multiplied by ``weights[j]`` and lands on output ``dest[j]`` of m.
CountSketch (one entry per column), the sparse embedding (s per column) and the row
selection S of the SRHT are such maps.  Done directly, every entry touches a random output:
a cache miss per entry once the output outgrows the caches, which makes these maps 10x
slower than reading their inputs.  With the compiled kernels (:mod:`.kernels`) the plan
keeps the entries sorted by output bucket (at most ``MAX_BUCKETS`` stretches of >= 2^12
outputs), so both passes of a call stay within cache-sized stretches; the torch twin
(GPUs, other dtypes, no kernel) runs ``index_add_`` / ``index_select`` on ``dest``.  On a CPU both add
the entries of one output in the order of j, so they agree to the last bit; on a GPU ``index_add_`` adds colliding
entries with atomics in no fixed order, so its last bits may differ from run to run.
"""

from __future__ import annotations

import numpy as np
import torch

from .kernels import active, applies, buffer, empty, ext, threads

#: the output is cut into at most this many buckets (streams the first pass writes at once)
MAX_BUCKETS = 128
#: ... each at least 2^BUCKET_BITS_MIN outputs long
BUCKET_BITS_MIN = 12
_INT32_MAX = 2 ** 31 - 1


def bucket_bits(m: int) -> int:
    """log2 of the bucket length for m outputs: at most MAX_BUCKETS buckets, none shorter than 2^BUCKET_BITS_MIN."""
    return max(BUCKET_BITS_MIN, (max(m, 1) - 1).bit_length() - (MAX_BUCKETS.bit_length() - 1))


def sign_bits(weights: torch.Tensor) -> tuple[np.ndarray | None, float]:
    """(bit j % 64 of word j // 64 set where weights[j] < 0, c) when every weight is +-c, else (None, 1.0).

    CountSketch and the sparse embedding have such weights; the kernels then read E bits
    instead of E floats and compute v * c with the sign flipped, the same number as v * (-c).
    """
    w = weights.detach().cpu().reshape(-1)
    if not w.numel():
        return None, 1.0
    c = w[0].abs()
    words = np.zeros((w.numel() + 63) // 64, dtype=np.int64)
    packed = words.view(np.uint8)
    step = 1 << 20  # entries per chunk (a multiple of 64): temporaries of a few MB
    for c0 in range(0, w.numel(), step):
        part = w[c0:c0 + step]
        if not bool((part.abs() == c).all()):
            return None, 1.0
        bits = np.packbits((part < 0).numpy(), bitorder="little")
        packed[c0 // 8:c0 // 8 + bits.size] = bits
    if not np.little_endian:
        words = words.byteswap()  # the bytes were written in little-endian bit order
    return words, float(c)


class ScatterPlan:
    """y = A x with A[dest[j], s(j)] += weights[j] (s(j) = src_index[j], or j mod len), and x = A^T y.

    ``dest``: E destinations in [0, m) (any integer array; consumed).  ``covers``: every output
    receives exactly one entry (then no output is zeroed first).  Not thread-safe: one scratch
    buffer per dtype is reused across calls (a fresh multi-MB buffer costs a page fault per 4 KiB).
    """

    def __init__(self, dest: np.ndarray, m: int, *, src_len: int, reps: int = 1,
                 src_index: np.ndarray | None = None, weights: torch.Tensor | None = None, covers: bool = False):
        self.m, self.src_len, self.reps, self.covers = int(m), int(src_len), int(reps), bool(covers)
        self.E = int(dest.shape[0])
        self.len = self.E // self.reps
        self.weights = weights  # float32 CPU, E entries, or None
        self.src_index = (None if src_index is None
                          else torch.from_numpy(np.ascontiguousarray(src_index, dtype=np.int32)))
        self._dest = None
        self.pos = self.destB = self.starts = None
        #: weights that are all +-scale, for the kernels: their sign bits (int64 words) and scale; else None
        self.signs, self.scale = None, 1.0
        fits = self.m <= _INT32_MAX and self.E <= _INT32_MAX and self.src_len <= _INT32_MAX
        if active() and fits:
            d32 = np.ascontiguousarray(dest, dtype=np.int32)
            bits = bucket_bits(self.m)
            self.pos = torch.empty(self.E, dtype=torch.int32)
            self.destB = torch.empty(self.E, dtype=torch.int32)
            self.starts = torch.empty(((self.m - 1) >> bits) + 2, dtype=torch.int64)
            assert ext is not None  # active(): the kernels are compiled
            ext.bucket_plan(d32, self.m, bits, buffer(self.pos), buffer(self.destB),
                                    buffer(self.starts))
            self.signs, self.scale = sign_bits(weights) if weights is not None else (None, 1.0)
        else:
            self._dest = torch.from_numpy(np.ascontiguousarray(dest, dtype=np.int64))
        self._scratch: dict = {}
        self._device_cache: dict = {}

    # -- what the plan stands for ---------------------------------------------------------
    def dest(self, device=None) -> torch.Tensor:
        """The E destinations as int64 on ``device`` (derived from the bucket order when the kernel built the
        plan: then computed afresh on the CPU, where the kernel makes it unnecessary, and kept on other devices)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        if self._dest is not None and device.type == "cpu":
            return self._dest
        key = ("dest", device)
        if key in self._device_cache:
            return self._device_cache[key]
        if self._dest is not None:
            d = self._dest
        else:  # the kernel built the plan
            assert self.destB is not None and self.pos is not None
            d = self.destB.index_select(0, self.pos).long()
        if device.type != "cpu":
            d = self._device_cache[key] = d.to(device)
        return d

    def _weights(self, dtype, device) -> torch.Tensor | None:
        if self.weights is None:
            return None
        key = ("w", dtype, torch.device(device))
        if key not in self._device_cache:
            self._device_cache[key] = self.weights.to(device=device, dtype=dtype).contiguous()
        return self._device_cache[key]

    def _src_index(self, device) -> torch.Tensor:
        key = ("src", torch.device(device))
        if key not in self._device_cache:
            assert self.src_index is not None, "a plan without source indices reads j mod len"
            self._device_cache[key] = self.src_index.long().to(device)
        return self._device_cache[key]

    def _plan_buffers(self, dtype) -> tuple:
        """The plan's arguments of the scatter and gather kernels: positions, bucketed destinations, bucket
        starts, scratch, repetitions, weights (None when their sign bits go instead) and source indices."""
        assert self.pos is not None and self.destB is not None and self.starts is not None, "the kernel built no plan"
        w = None if self.signs is not None else self._weights(dtype, "cpu")
        return (buffer(self.pos), buffer(self.destB), buffer(self.starts), buffer(self.scratch(dtype)), self.reps,
                None if w is None else buffer(w), None if self.src_index is None else buffer(self.src_index))

    def scratch(self, dtype) -> torch.Tensor:
        """The kernels' E-entry scratch buffer of ``dtype``, kept between calls (also lent to the fused SRHT kernel)."""
        if dtype not in self._scratch:
            self._scratch[dtype] = torch.empty(self.E, dtype=dtype)
        return self._scratch[dtype]

    def _kernel(self, t: torch.Tensor) -> bool:
        return self.pos is not None and applies(t)

    # -- the maps -------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A x for x of shape (..., src_len); returns (..., m).  Outside autograd (callers wrap it)."""
        flat = x.detach().reshape(-1, self.src_len)
        rows = flat.shape[0]
        if self._kernel(flat):
            flat = flat.resolve_neg().contiguous()  # a lazily negated view (torch._neg_view) as its values
            out = empty((rows, self.m), x.dtype, zero=not self.covers)
            assert ext is not None  # _kernel(): the kernels are compiled
            ext.scatter(buffer(flat), self.src_len, buffer(out), self.m, *self._plan_buffers(x.dtype),
                        not self.covers, threads(self.E * rows), self.signs, self.scale)
        else:
            if self.src_index is not None:
                vals = flat.index_select(1, self._src_index(x.device))
            else:
                vals = flat.repeat(1, self.reps) if self.reps > 1 else flat
            w = self._weights(x.dtype, x.device)
            if w is not None:
                vals = vals * w
            out = torch.zeros(rows, self.m, dtype=x.dtype, device=x.device)
            out = (out.index_copy_(1, self.dest(x.device), vals) if self.covers
                   else out.index_add_(1, self.dest(x.device), vals))
        return out.reshape(*x.shape[:-1], self.m)

    def transpose(self, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """A^T y for y of shape (..., m); returns (..., src_len), written into ``out`` (a contiguous
        (rows, src_len) CPU tensor of y's dtype) when given and the kernel runs.  Outside autograd."""
        flat = y.detach().reshape(-1, self.m)
        rows = flat.shape[0]
        if self._kernel(flat):
            flat = flat.resolve_neg().contiguous()  # a lazily negated view (torch._neg_view) as its values
            partial = self.src_index is not None and self.E < self.src_len  # outputs no entry reaches stay 0
            if out is None:
                out = empty((rows, self.src_len), y.dtype, zero=partial)
            elif partial:
                out.zero_()
            assert ext is not None  # _kernel(): the kernels are compiled
            ext.gather(buffer(flat), self.m, buffer(out), self.src_len, *self._plan_buffers(y.dtype),
                       threads(self.E * rows), self.signs, self.scale)
        else:
            vals = flat.index_select(1, self.dest(y.device))
            w = self._weights(y.dtype, y.device)
            if w is not None:
                vals = vals * w
            if self.src_index is not None:
                out = torch.zeros(rows, self.src_len, dtype=y.dtype, device=y.device)
                out.index_copy_(1, self._src_index(y.device), vals)
            else:
                out = vals.reshape(rows, self.reps, self.len).sum(1) if self.reps > 1 else vals
        return out.reshape(*y.shape[:-1], self.src_len)

    def nbytes(self) -> int:
        """Bytes the plan holds (index arrays, weights and their sign bits; scratch buffers not counted)."""
        ts = [self.pos, self.destB, self.starts, self._dest, self.src_index, self.weights]
        return sum(t.numel() * t.element_size() for t in ts if t is not None) + \
            (self.signs.nbytes if self.signs is not None else 0)


__all__ = ["ScatterPlan", "bucket_bits", "sign_bits", "MAX_BUCKETS"]
