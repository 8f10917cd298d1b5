"""Committed reference runs compared by the quality they reach, not bit for bit.

A reference run (``results/reference/<name>/``) is thousands of L-BFGS steps.
Another CPU (another SIMD width in the BLAS and oneDNN kernels, another
``ATEN_CPU_CAPABILITY``, another thread count) changes the last bits of a
reduction, and thousands of steps amplify them into another trajectory: the
same attack then stops at another step with another PSNR.  So a regenerated
reference *agrees* with the committed one when it reaches the same quality
within :data:`TOLERANCES`, and it is *the same to the last bit* only when every
number of the optimisation is identical.

The spread these tolerances allow was measured on the default attacks
(``leakattack run --model lenet --sketch srht|none``) under the three CPU
capabilities torch offers on x86-64 (AVX-512, AVX2, none): see docs/measured-results.md.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import RunMetrics

#: a regenerated reference agrees with the committed one when each metric lies within these bounds of it
TOLERANCES = {
    "psnr": 6.0,  #: dB, either way
    "ssim": 0.002,  #: absolute, either way
    "label_acc": 0.0,  #: the same labels
}

#: two PSNRs at or above this both say "the image to float64 round-off" (Gauss-Newton's end, where the last step
#: decides how far below the message's round-off the error lies): they agree whatever their difference
EXACT_PSNR = 120.0

#: the numbers that are identical when two runs took the same trajectory
TRAJECTORY_KEYS = ("psnr", "ssim", "final_loss", "iterations", "best_step")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The facts that change the last bits of a CPU run: CPU model, the SIMD capability torch dispatches to
    (and the ``ATEN_CPU_CAPABILITY`` override, if set), torch's version and thread count."""
    import torch

    return {
        "cpu": cpu_model(), "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }


def machine_text(m: dict | None) -> str:
    """One phrase naming a machine record (``cpu, capability, torch, threads``)."""
    if not m:
        return "an unrecorded machine"
    return (f"{m.get('cpu') or m.get('machine') or 'unknown CPU'}, {m.get('cpu_capability', '?')}, "
            f"torch {m.get('torch', '?')}, {m.get('threads', '?')} thread(s)")


@dataclass
class Comparison:
    """How a regenerated reference differs from the committed one."""

    name: str
    agrees: bool  #: every metric within TOLERANCES
    identical: bool  #: the same trajectory, to the last bit
    lines: list[str] = field(default_factory=list)  #: one line per metric, then the verdict


def _number(value) -> float | None:
    return None if value is None else float(value)


def _sci(value) -> str:
    return "none" if value is None else f"{float(value):.3e}"


def compare(name: str, committed: RunMetrics, fresh: RunMetrics) -> Comparison:
    """Compare the metrics of a regenerated reference (``fresh``) with the committed one."""
    lines, agrees = [], True
    for key, tol in TOLERANCES.items():
        old, new = _number(committed.get(key)), _number(fresh.get(key))
        if old is None and new is None:
            continue
        if old is None or new is None or not (math.isfinite(old) and math.isfinite(new)):
            ok = old == new
        else:
            ok = abs(new - old) <= tol or (key == "psnr" and min(old, new) >= EXACT_PSNR)
        agrees &= ok
        unit = " dB" if key == "psnr" else ""
        exact = f" (or both >= {EXACT_PSNR:g} dB: exact)" if key == "psnr" else ""
        if old is None or new is None:
            lines.append(f"{key}: committed {old}, now {new}: {'same' if ok else 'OUTSIDE the tolerance'}")
        else:
            lines.append(f"{key}: committed {old:.6g}{unit}, now {new:.6g}{unit} ({new - old:+.4g}{unit}), "
                         f"tolerance ±{tol:g}{unit}{exact}: {'within' if ok else 'OUTSIDE'}")
    identical = all(committed.get(k) == fresh.get(k) for k in TRAJECTORY_KEYS)
    if not identical:
        lines.append(f"iterations: committed {committed.iterations} ({committed.stop_reason}), now "
                     f"{fresh.iterations} ({fresh.stop_reason}); final L_R committed "
                     f"{_sci(committed.final_loss)}, now {_sci(fresh.final_loss)}")
    verdict = ("the same to the last bit" if identical else
               "agrees within the tolerances (another trajectory: the last bits of a reduction differ)" if agrees
               else "DISAGREES beyond the tolerances")
    lines.append(f"{name}: {verdict}")
    return Comparison(name, agrees, identical, lines)


__all__ = ["TOLERANCES", "EXACT_PSNR", "TRAJECTORY_KEYS", "Comparison", "compare", "machine", "machine_text",
           "cpu_model"]
