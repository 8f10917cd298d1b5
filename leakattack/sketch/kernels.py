"""The compiled kernels of the sketches, and the switch between them and plain torch.

``leakattack.sketch._kernels`` is a C extension built by ``pip install`` (setup.py): the
fast Walsh-Hadamard transform and cache-bucketed scatter/gather (``hadamard.py``,
``scatter.py``).  A plain CPython extension rather than a torch C++ extension or a JIT:
it needs only a C compiler and the Python headers at install time, no torch headers and
no compiler at run time, and the install still succeeds without it.  Every kernel has a
pure-torch twin computing the same map, used on GPUs, for other dtypes, and on the CPU
when the extension is missing or switched off: ``LEAKATTACK_NO_CEXT=1`` in the
environment (read at import) or ``use_kernel = False`` on this module.
"""

from __future__ import annotations

import importlib
import math
import mmap
import os
from types import ModuleType

import torch

ext: ModuleType | None
try:
    if os.environ.get("LEAKATTACK_NO_CEXT", "").strip() not in ("", "0"):
        raise ImportError("switched off by LEAKATTACK_NO_CEXT")
    ext = importlib.import_module("._kernels", __package__)
except ImportError:  # not compiled here (no C compiler at install time) or switched off
    ext = None

#: use the compiled kernels for CPU float32/float64 tensors (False: the torch twins everywhere)
use_kernel: bool = ext is not None

#: below this many entries one thread does the work (starting threads costs more than it saves)
THREAD_MIN_ENTRIES = 1 << 20

DTYPES = (torch.float32, torch.float64)


def available() -> bool:
    """Whether the compiled extension was built and imported (whatever ``use_kernel`` says)."""
    return ext is not None


def active() -> bool:
    """Whether calls go to the compiled kernels now."""
    return use_kernel and ext is not None


def applies(x: torch.Tensor) -> bool:
    """Whether the kernels take ``x``: active, on the CPU, float32 or float64."""
    return active() and x.device.type == "cpu" and x.dtype in DTYPES


def threads(entries: int) -> int:
    """Threads for one kernel call over ``entries`` numbers: torch's intra-op thread count (``--threads``), one for
    small calls."""
    return 1 if entries < THREAD_MIN_ENTRIES else max(1, torch.get_num_threads())


#: outputs of at least this many bytes are placed on transparent huge pages where the system offers them
HUGE_MIN_BYTES = 1 << 23
_HUGE = 1 << 21  # the x86-64 / arm64 huge page
_CAN_ADVISE = hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")


def empty(shape: tuple, dtype: torch.dtype, *, zero: bool = False) -> torch.Tensor:
    """A new contiguous CPU tensor for a kernel's output (zeros with ``zero``); a large one on transparent huge pages.

    Every call of a sketch returns fresh memory, and its first write page-faults once per
    4 KiB page: 11,000 faults for a 44 MB output, 25-50 ms on the 2-core VM the kernels were
    tuned on, more than the transform itself.  Anonymous memory advised as huge pages
    faults once per 2 MiB.  The tensor's storage is an ``mmap`` (2 MiB aligned), freed with the
    tensor; it cannot be resized in place, and it is zero already (fresh anonymous memory).
    Small outputs, and systems without the advice (not Linux), get ``torch.empty`` / ``torch.zeros``.
    """
    count = math.prod(shape)
    size = count * dtype.itemsize
    plain = torch.zeros if zero else torch.empty
    if size < HUGE_MIN_BYTES or not _CAN_ADVISE:
        return plain(shape, dtype=dtype)
    try:
        region = mmap.mmap(-1, size + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # no THP in this kernel, or the mapping was refused
        return plain(shape, dtype=dtype)
    skip = -torch.frombuffer(region, dtype=torch.uint8, count=1).data_ptr() % _HUGE
    return torch.frombuffer(region, dtype=dtype, count=count, offset=skip).view(shape)


def buffer(t: torch.Tensor):
    """The NumPy view the kernels read and write (no copy; ``t`` must be a contiguous CPU tensor)."""
    return t.detach().numpy()


__all__ = ["available", "active", "applies", "threads", "buffer", "empty", "use_kernel", "ext"]
