"""Random Gaussian sketch (kind ``gaussian``) and the row-block machinery shared with ``ams``.

Dense random sketches have b*d independent entries (d = 16k, b = 8k is 125M numbers).
``RowBlockSketch`` defines R by row blocks: block k holds rows [k*r, (k+1)*r) with
r = 2**22 // d, and is drawn on the CPU from a generator seeded by (seed, k) alone, so
the same seed gives the same R on every device (blocks for a GPU are drawn on the CPU
and moved; ``ams`` ships packed sign bits and unpacks them on the device).  ``gaussian``
draws with torch's normal sampler, whose vectorised (AVX2, AVX-512) and scalar CPU paths
differ in float32's last bits (docs/sketches.md); ``ams``'s NumPy signs are the same on
every CPU.

R is held as one matrix, in the dtype and on the device of the calls, whenever b*d
numbers of that dtype fit the sketch's memory budget (``memory_gb``; default a quarter
of the RAM available when the sketch is built, see :func:`default_memory_gb`): one
matrix product per call, at the speed of reading R.  Beyond the budget the blocks are
regenerated on every apply/adjoint call, and a custom autograd Function makes the
backward pass call the (regenerating) adjoint, so autograd never saves a block; that
costs the generation of b*d random numbers twice per attack iteration
(:func:`regeneration_note` words the warning a run prints when that adds up).
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .. import seeds
from ..errors import SettingWarning, duration_text
from .base import DENSE_LIMIT, LinearMap, Sketch

#: Largest number of entries in one regenerated row block.
BLOCK_ENTRIES = 2 ** 22
#: the default memory budget of a dense sketch: this fraction of the RAM available when it is built
MEMORY_FRACTION = 0.25
#: a run whose regenerated dense sketch is estimated to take longer than this (seconds) is warned about
SLOW_SKETCH_SECONDS = 180.0
#: apply+adjoint pairs of R a run spends besides its iterations' (the message, the label reading, the verdict's
#: objective at the truth and the reconstruction): tests/sketch/test_dense_cache.py counts them on a LeNet run
RUN_EVALUATIONS = 8
#: a run whose regenerated dense sketch needs longer than this (seconds) before its second iteration is refused ...
HOPELESS_SECONDS = 86400.0
#: ... and so is one that needs more than this many times its time limit (which bounds the iterations alone), and
#: more than LIMIT_FLOOR_SECONDS (a few minutes past a short limit are a wait, not a hopeless run)
LIMIT_FACTOR, LIMIT_FLOOR_SECONDS = 10.0, 600.0

_POOL_WORKERS = max(1, min(4, os.cpu_count() or 1))
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


#: dtypes that hold R's float32 entries exactly: a held matrix in one of them converts to any dtype without loss
_EXACT = (torch.float32, torch.float64)


def _pool() -> ThreadPoolExecutor:
    """A small process-wide thread pool that generates blocks ahead of the matmul."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_POOL_WORKERS, thread_name_prefix="sketch-block")
        return _POOL


def available_memory_bytes() -> int:
    """RAM available to new allocations: MemAvailable of /proc/meminfo, else the free physical pages (os.sysconf),
    else 8 GiB."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 8 * 2 ** 30


def available_bytes(device: torch.device) -> int:
    """Memory free for new tensors on ``device``: the GPU's free memory, else the RAM available."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory_bytes()


def default_memory_gb() -> float:
    """The default budget of a dense sketch's matrix, in GB (10^9 bytes): MEMORY_FRACTION of the available RAM."""
    return MEMORY_FRACTION * available_memory_bytes() / 1e9


def block_seed(seed: int, k: int, tag: int) -> np.random.SeedSequence:
    """The seed sequence of row block ``k`` of a sketch with ``seed`` (``tag`` separates families)."""
    return seeds.seed_sequence(seed, k, tag)


class RowBlockSketch(Sketch):
    """Dense sketch defined by seeded row blocks; subclasses implement ``_make_block``.

    ``memory_gb``: the most R may take as one matrix (GB; None: :func:`default_memory_gb`).
    ``force_blocks=True`` never holds the matrix (for tests: both paths give the same R).
    """

    _tag = 0
    #: entries per row block (part of the definition of R: changing it changes R)
    _block_entries = BLOCK_ENTRIES
    #: generate blocks ahead in a thread pool (pays off when generation is compute-bound)
    _prefetch = True
    #: ``get_sketch`` passes its memory budget to families that set this
    takes_memory_budget = True
    param_rules = {"force_blocks": ("true or false", lambda v, b: isinstance(v, bool))}

    def __init__(self, d: int, b: int, seed: int = 0, force_blocks: bool = False, memory_gb: float | None = None):
        super().__init__(d=d, b=b, seed=seed)
        self.block_rows = max(1, min(self.b, self._block_entries // self.d))
        self.n_blocks = -(-self.b // self.block_rows)
        self.force_blocks = bool(force_blocks)
        room = available_memory_bytes()
        gb = MEMORY_FRACTION * room / 1e9 if memory_gb is None else float(memory_gb)  # default_memory_gb's
        if memory_gb is not None and not self.force_blocks and gb * 1e9 > room and self.matrix_bytes(
                torch.float32) > room:
            warnings.warn(f"--sketch-memory {gb:g} GB is more than the {room / 1e9:.3g} GB of RAM available, and R of "
                          f"{self.matrix_bytes(torch.float32) / 1e9:.3g} GB does not fit in that: it is regenerated "
                          "instead of held", SettingWarning, stacklevel=2)
        # a budget past the RAM available would only make the allocation of R fail
        self.memory_bytes = 0 if self.force_blocks else int(min(gb * 1e9, room))
        self._dense = None
        self._regeneration_s: float | None = None
        #: how the products ran so far: "held" (one matrix), "regenerated" (by blocks), or both
        self.ways: set[str] = set()
        if self.b * self.d <= DENSE_LIMIT and self.fits(torch.float32):  # small: hold it from the start
            self._dense = self._build(torch.float32, torch.device("cpu"))

    # -- the matrix within the budget -------------------------------------------
    def matrix_bytes(self, dtype) -> int:
        """Bytes of R as one matrix of ``dtype``."""
        return self.b * self.d * torch.empty((), dtype=dtype).element_size()

    def fits(self, dtype) -> bool:
        """Whether R as one ``dtype`` matrix fits the memory budget (then calls in that dtype hold it)."""
        return self.matrix_bytes(dtype) <= self.memory_bytes

    @staticmethod
    def _device_room(device: torch.device, nbytes: int) -> bool:
        """Whether a GPU has room for nbytes more (with half its free memory left to the attack); the CPU: the budget
        decides."""
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return nbytes <= free // 2
        return True

    def _build(self, dtype, device: torch.device) -> torch.Tensor:
        """R as one (b, d) matrix of ``dtype`` on ``device``, block by block (no second copy)."""
        out = torch.empty(self.b, self.d, dtype=dtype, device=device)
        for r0, r1, blk in self._blocks(device):
            out[r0:r1].copy_(blk)
        return out

    def _matrix(self, dtype, device: torch.device) -> torch.Tensor | None:
        """:meth:`_held`, with the way it went recorded in :attr:`ways`."""
        D = self._held(dtype, device)
        self.ways.add("regenerated" if D is None else "held")
        return D

    def _held(self, dtype, device: torch.device) -> torch.Tensor | None:
        """R as one matrix in ``dtype`` on ``device``, built or converted once, when the budget allows; else None.

        Entries are float32 numbers, so converting a held float32 or float64 matrix to another dtype is exact; a
        held matrix of a narrower dtype (float16, bfloat16) has lost digits, so R is rebuilt from its blocks instead.
        A held matrix is converted when both fit the budget at once, else dropped and R rebuilt.
        """
        D = self._dense
        if D is not None and D.dtype == dtype and D.device == device:
            return D
        need = self.matrix_bytes(dtype)
        if need > self.memory_bytes or not self._device_room(device, need):
            return None
        if D is not None and D.dtype in _EXACT and need + D.numel() * D.element_size() <= self.memory_bytes:
            self._dense = D.to(device=device, dtype=dtype)
        else:
            self._dense = D = None
            self._dense = self._build(dtype, device)
        return self._dense

    def to(self, device) -> "RowBlockSketch":
        """Move to ``device``; a held matrix follows when the device has room for it, else it is dropped (rebuilt on
        use)."""
        D, self._dense = self._dense, None
        super().to(device)
        if D is not None:
            if D.device == self.device:
                self._dense = D
            elif self._device_room(self.device, D.numel() * D.element_size()):
                self._dense = D.to(self.device)
        return self

    # -- block generation --------------------------------------------------
    def _block_range(self, k: int) -> tuple[int, int]:
        r0 = k * self.block_rows
        return r0, min(self.b, r0 + self.block_rows)

    def _make_block(self, k: int, device=None) -> torch.Tensor:  # pragma: no cover
        """Rows ``_block_range(k)`` of R as a float32 tensor (drawn on the CPU from (seed, k))."""
        raise NotImplementedError

    def _blocks(self, device):
        """Yield (r0, r1, block on ``device``) for every block: slices of a held matrix, else generated a few blocks
        ahead."""
        D = self._dense
        if D is not None and D.device == torch.device(device):
            for k in range(self.n_blocks):
                r0, r1 = self._block_range(k)
                yield r0, r1, D[r0:r1]
            return
        if self.n_blocks == 1 or not self._prefetch:
            for k in range(self.n_blocks):
                yield (*self._block_range(k), self._make_block(k, device))
            return
        pool = _pool()
        ahead = _POOL_WORKERS + 1
        pending: deque = deque()
        for k in range(self.n_blocks):
            pending.append((k, pool.submit(self._make_block, k, device)))
            if len(pending) >= ahead:
                j, fut = pending.popleft()
                yield (*self._block_range(j), fut.result())
        while pending:
            j, fut = pending.popleft()
            yield (*self._block_range(j), fut.result())

    def _blocks_apply(self, v: torch.Tensor) -> torch.Tensor:
        flat = v.reshape(-1, self.d)
        out = torch.empty(flat.shape[0], self.b, dtype=v.dtype, device=v.device)
        for r0, r1, blk in self._blocks(v.device):
            out[:, r0:r1] = flat @ blk.to(v.dtype).T
        return out.reshape(*v.shape[:-1], self.b)

    def _blocks_adjoint(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(-1, self.b)
        out = torch.zeros(flat.shape[0], self.d, dtype=u.dtype, device=u.device)
        for r0, r1, blk in self._blocks(u.device):
            out.addmm_(flat[:, r0:r1], blk.to(u.dtype))
        return out.reshape(*u.shape[:-1], self.d)

    def regeneration_seconds(self) -> float:
        """Measured estimate of one apply plus one adjoint that regenerates R: two passes over all blocks, timed on
        block 0."""
        if self._regeneration_s is None:  # once per sketch: a run's warning and its refusal read the same estimate
            t0 = time.perf_counter()
            blk = self._make_block(0)
            t1 = time.perf_counter()
            wide = blk.to(torch.float64)  # what a pass does with each block: the default dtype's two products
            (torch.ones(1, self.d, dtype=torch.float64) @ wide.T) @ wide
            t2 = time.perf_counter()
            self._regeneration_s = self.n_blocks * (2 * (t1 - t0) + (t2 - t1))
        return self._regeneration_s

    # -- Sketch API ------------------------------------------------------------
    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        if v.shape[-1] != self.d:
            raise ValueError(f"expected last dimension d = {self.d}, got {v.shape[-1]}")
        D = self._matrix(v.dtype, v.device)
        if D is None:
            return LinearMap.apply(v, self._blocks_apply, self._blocks_adjoint)
        return v @ D.T

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        if u.shape[-1] != self.b:
            raise ValueError(f"expected last dimension b = {self.b}, got {u.shape[-1]}")
        D = self._matrix(u.dtype, u.device)
        if D is None:
            return LinearMap.apply(u, self._blocks_adjoint, self._blocks_apply)
        return u @ D


def _too_large(sketch: RowBlockSketch, dtype) -> str:
    """How R outgrows the sketch memory, as the start of a sentence."""
    return (f"sketch '{sketch.kind}' has b x d = {sketch.b} x {sketch.d} entries "
            f"({sketch.matrix_bytes(dtype) / 1e9:.3g} GB in {str(dtype).replace('torch.', '')}), more than the sketch "
            f"memory of {sketch.memory_bytes / 1e9:.2g} GB")


def regeneration_note(sketch: Sketch, evaluations: int, dtype, limit_s: float = SLOW_SKETCH_SECONDS,
                      time_limit: float | None = None, optimizer: str | None = None,
                      closed_form: bool = False) -> str | None:
    """One sentence when ``sketch`` regenerates its dense R and ``evaluations`` iterations' apply+adjoint pairs, with
    the :data:`RUN_EVALUATIONS` pairs every run adds, are estimated to take longer than ``limit_s`` seconds (None
    otherwise): the estimate, where the attack's ``time_limit`` (seconds) cuts it, and the cheaper choices.  A
    ``closed_form`` attack has no iterations: its solve takes a pair per step of its own (CGLS, the low-rank fit's
    sweeps), as many as its system needs, so the sentence gives the cost of a pair where the run's own passes
    alone pass ``limit_s``."""
    if not isinstance(sketch, RowBlockSketch) or sketch.fits(dtype) or evaluations < 1:
        return None
    per = sketch.regeneration_seconds()
    if closed_form:
        if per * RUN_EVALUATIONS <= limit_s:
            return None
        return (f"{_too_large(sketch, dtype)}, so it regenerates them twice per product pair: about {per:.2g} s each; "
                f"the run's own passes (the message, the label reading, the verdict) take about "
                f"{duration_text(per * RUN_EVALUATIONS)}, and the closed-form solve a pair per step of its iterative "
                "solve, as many as its system needs; use --sketch srht or countsketch, or a larger --sketch-memory")
    total = per * (evaluations + RUN_EVALUATIONS)
    if total <= limit_s:
        return None
    more = " at least" if optimizer == "lbfgs" else ""  # its line search may evaluate more than once a step
    return (f"{_too_large(sketch, dtype)}, so it regenerates them twice per evaluation: about {per:.2g} s each,"
            f"{more} {duration_text(total)} for {evaluations} iterations"
            + (" (L-BFGS's line search may evaluate more than once an iteration)" if more else "") + " and "
            f"{RUN_EVALUATIONS} iterations' worth of the run's other passes (the message, the label reading, the "
            "verdict)" + (f"; the attack's time limit of {duration_text(time_limit)} stops it after "
                          + (f"at most {int(time_limit / per)} of them" if time_limit >= per else
                             "its first evaluation")
                          if time_limit is not None and time_limit < per * evaluations else "")
            + "; use --sketch srht or countsketch, or a larger --sketch-memory")


#: a sketch whose regenerated apply and adjoint together take longer than this (seconds) is warned of by observe,
#: where no run warned of it: a hundred iterations of gradient matching then pass SLOW_SKETCH_SECONDS
SLOW_PASS_SECONDS = SLOW_SKETCH_SECONDS / 100


def regeneration_warning(sketch: Sketch, dtype) -> str | None:
    """One sentence for :func:`leakattack.observation.observe` (the Python path, which gives no iteration count) when
    ``sketch`` regenerates its dense R and an apply and an adjoint take longer than :data:`SLOW_PASS_SECONDS`: the
    cost of the pair, which gradient matching takes once an iteration, and the cheaper choices; None otherwise, and
    where a run has worded the cost already (``sketch.cost_told``, :func:`regeneration_note`)."""
    if not isinstance(sketch, RowBlockSketch) or sketch.cost_told or sketch.fits(dtype):
        return None
    per = sketch.regeneration_seconds()
    if per <= SLOW_PASS_SECONDS:
        return None
    return (f"{_too_large(sketch, dtype)}, so every product regenerates them: about {duration_text(per)} for an "
            f"apply and an adjoint, which gradient matching takes once an iteration ({duration_text(100 * per)} for "
            f"100); get_sketch('srht', d, b) or get_sketch('countsketch', d, b) sends the same b without a stored "
            "matrix, and get_sketch(..., memory_gb=...) holds R where the RAM allows")


def regeneration_refusal(sketch: Sketch, dtype, time_limit: float | None = None) -> str | None:
    """One sentence when a regenerated dense R makes the passes every run needs outside its iterations (the message,
    the label reading, the verdict: :data:`RUN_EVALUATIONS`) and its first iteration take longer than
    :data:`HOPELESS_SECONDS`, or than :data:`LIMIT_FACTOR` times the attack's ``time_limit`` (which bounds the
    iterations only); None otherwise (:func:`regeneration_note` then warns where it is slow)."""
    if not isinstance(sketch, RowBlockSketch) or sketch.fits(dtype):
        return None
    per = sketch.regeneration_seconds()
    least = per * (RUN_EVALUATIONS + 1)
    bound = HOPELESS_SECONDS if time_limit is None else \
        min(HOPELESS_SECONDS, max(LIMIT_FACTOR * time_limit, LIMIT_FLOOR_SECONDS))
    if least <= bound:
        return None
    limit = "" if time_limit is None else \
        f", where the time limit of {duration_text(time_limit)} bounds the iterations only"
    return (f"{_too_large(sketch, dtype)}, so every pass regenerates them: about {duration_text(per)} a pass, "
            f"{duration_text(least)} for the message, the label reading, the verdict and one iteration{limit}; use "
            "--sketch srht or countsketch (the same b without a stored matrix), a smaller --sketch-ratio, or a larger "
            "--sketch-memory where the RAM allows")


class GaussianSketch(RowBlockSketch):
    """Definition D.2 of Song et al. 2023: i.i.d. N(0, 1/b) entries."""

    kind = "gaussian"

    _tag = 2

    def _make_block(self, k: int, device=None) -> torch.Tensor:
        r0, r1 = self._block_range(k)
        seed = int(block_seed(self.seed, k, self._tag).generate_state(1, np.uint64)[0] >> 1)
        gen = seeds.torch_generator(seed % seeds.TORCH_SEEDS)  # a hash already: its low 32 bits, as torch reads it
        blk = torch.randn(r1 - r0, self.d, generator=gen, dtype=torch.float32)
        blk.mul_(1.0 / math.sqrt(self.b))
        return blk if device is None else blk.to(device)
