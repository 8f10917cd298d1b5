"""How close the sketches run to the memory floor of this machine, each ratio against a floor measured in the same run.

Floors: a stream copy (``Tensor.copy_`` into an existing tensor, i.e. memcpy: one read and one
write of the same bytes) and a bare dense matrix-vector product of the same size.  Rows:

- fast Walsh-Hadamard transform, float32, n = 2^24 and 2^26: the compiled kernel (1 and 2
  threads) and the torch passes, against a copy of the n numbers and against the floor of
  a blocked transform, which reads and writes memory twice (two copies);
- SRHT apply + adjoint, float32, d = 1.1e7 (ResNet-18; 1 and 2 threads) and 4.4e7 (n = 2^24, 2^26;
  2 threads), b = d/2, against two bare transforms of the padded vector (the compiled kernel
  alone, one per call) and two copies of it;
- countsketch and sparse (s = 4) apply + adjoint at d = 1.1e7 (1 and 2 threads) and 4.4e7
  (2 threads), against two copies of d numbers, and against the bytes their bucketed plan
  must move (``plan_bytes``) at the copy's bandwidth;
- gaussian and ams holding R (lenet size, d = 15826, b = 7913) against the same two
  products on a plain tensor, float32 and float64;
- peak resident memory while building each large sketch (in a fresh process each; Linux
  VmHWM reset before the build), next to what the sketch keeps.

Times are the best of ``--reps`` runs (1 thread unless stated), so a shared machine shows
through as little as it can; the load average is printed at the start and the end: rerun
when other work shared the cores.

    python benchmarks/sketch_floor.py [--reps 5]
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch

from leakattack.script import count, parser, script_main
from leakattack.sketch import get_sketch, kernels
from leakattack.sketch.hadamard import hadamard_torch

LARGE_D = (11_000_000, 44_000_000)


def best(fn, reps: int) -> float:
    """Seconds of the fastest of ``reps`` calls (after one warm-up call)."""
    fn()
    out = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def row(name: str, seconds: float, floor: float, floor_name: str) -> None:
    print(f"{name:<44} {seconds * 1e3:9.1f} ms  {seconds / floor:7.2f} x {floor_name}")


def wht_section(reps: int) -> None:
    print("\n# fast Walsh-Hadamard transform, float32, in place")
    for k in (24, 26):
        n = 1 << k
        x = torch.randn(n)
        y = torch.empty(n)
        copy = best(lambda: y.copy_(x), reps)
        row(f"stream copy of n = 2^{k}", copy, copy, "copy")
        if kernels.available():
            buf = kernels.buffer(y)
            for th in (1, 2):
                t = best(lambda: kernels.ext.transform(buf, n, th), reps)
                row(f"compiled kernel, {th} thread{'s' * (th > 1)}", t, copy, "copy")
                row("", t, 2 * copy, "two-pass floor (2 copies)")
        torch_reps = max(1, reps // 3) if k == 26 else reps
        row("torch passes (radix 32, then 8)", best(lambda: hadamard_torch(x), torch_reps), copy, "copy")


def plan_bytes(E: int, m: int, d: int, reps: int, itemsize: int = 4) -> int:
    """Bytes one apply plus one adjoint of a bucketed scatter plan must move between memory and the cores.

    Apply: the source once per repetition, pos (int32) and the sign bits to spread the E
    values into the bucket-ordered scratch, which is written and read back, destB (int32),
    and the m outputs written.  Adjoint: the m inputs, destB, the scratch written and read,
    pos, the sign bits, the d outputs written (and read and written again for each further
    repetition).  Nothing is counted for cache misses, read-for-ownership or the
    outputs' random order inside a bucket: a floor, not a model of the kernel.
    """
    f, signs = itemsize, E / 8
    apply = E * f + 4 * E + signs + 2 * E * f + 4 * E + m * f
    adjoint = m * f + 4 * E + 2 * E * f + 4 * E + signs + d * f + 2 * d * f * (reps - 1)
    return int(apply + adjoint)


_CHILD = r"""
import json, sys, time, torch
from leakattack.sketch import get_sketch, kernels
kind, d, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
thread_counts = [int(t) for t in sys.argv[4].split(",")]
torch.set_num_threads(1)
b = d // 2
def status(key):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":"))
with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the current RSS
    fh.write("5")
before = status("VmRSS")
t0 = time.perf_counter()
sk = get_sketch(kind, d, b, 1)
build = time.perf_counter() - t0
peak = status("VmHWM")
plan = getattr(sk, "_plan", None) or getattr(sk, "_select", None)
held = sum(t.numel() * t.element_size() for t in vars(sk).values() if isinstance(t, torch.Tensor))
held += plan.nbytes() if plan is not None else 0
v, u = torch.randn(d), torch.randn(b)
n = getattr(sk, "n", d)
src, dst = torch.randn(n), torch.empty(n)
def best(fn):
    fn(); fn()  # the first calls of a fresh process also map its large buffers
    out = float("inf")
    for _ in range(reps):
        t = time.perf_counter(); fn(); out = min(out, time.perf_counter() - t)
    return out
out = dict(build=build, growth=peak - before, held=held, n=n, runs={}, plan=None)
if kind != "srht":
    out["plan"] = dict(E=plan.E, m=plan.m, reps=plan.reps)
for th in thread_counts:
    torch.set_num_threads(th)
    r = dict(both=best(lambda: sk.adjoint(sk.apply(v))), apply=best(lambda: sk.apply(v)),
             adjoint=best(lambda: sk.adjoint(u)), copy=best(lambda: dst.copy_(src)))
    if kind == "srht" and kernels.available():
        buf = kernels.buffer(dst)
        r["transform"] = best(lambda: kernels.ext.transform(buf, n, th))
    out["runs"][th] = r
print(json.dumps(out))
"""

#: (kind, d, thread counts) measured in one fresh process each
LARGE_CASES = [("srht", LARGE_D[0], (1, 2)), ("srht", LARGE_D[1], (2,)), ("countsketch", LARGE_D[0], (1, 2)),
               ("countsketch", LARGE_D[1], (2,)), ("sparse", LARGE_D[0], (1, 2)), ("sparse", LARGE_D[1], (2,))]


def large_section(reps: int) -> None:
    print("\n# large sketches, float32, b = d/2, each in a fresh process (apply + adjoint; build; peak RSS);\n"
          "# floors from the same process: the bare compiled transform of n numbers and a copy of them (srht),\n"
          "# a copy of d numbers (countsketch, sparse), one of each per call")
    for kind, d, thread_counts in LARGE_CASES:
        out = subprocess.run([sys.executable, "-c", _CHILD, kind, str(d), str(reps), ",".join(map(str, thread_counts))],
                             capture_output=True, text=True)
        if out.returncode:
            print(f"{kind} d = {d:.1e}: failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for th, m in r["runs"].items():
            name = f"{kind} d = {d:.1e} apply + adjoint, {th} thr"
            if "transform" in m:
                row(name, m["both"], 2 * m["transform"], f"2 bare transforms of n = {r['n']:.2e}")
                row("", m["both"], 2 * m["copy"], "2 copies of n")
            else:
                row(name, m["both"], 2 * m["copy"], f"2 copies of {r['n']:.2e}")
                moved = plan_bytes(r["plan"]["E"], r["plan"]["m"], d, r["plan"]["reps"])
                per_byte = m["copy"] / (8 * r["n"])  # a copy of n float32 reads and writes 8 n bytes
                row("", m["both"], moved * per_byte, f"its plan's {moved / 1e9:.2f} GB at copy bandwidth")
            print(f"{'':<44} apply {m['apply'] * 1e3:.1f} ms, adjoint {m['adjoint'] * 1e3:.1f} ms")
        print(f"{'':<44} build {r['build']:.1f} s, construction peak RSS {r['growth'] / 1e9:.2f} GB, "
              f"holds {r['held'] / 1e9:.2f} GB")


def dense_section(reps: int) -> None:
    print("\n# dense sketches holding R (lenet size, d = 15826, b = 7913), apply + adjoint")
    d, b = 15826, 7913
    for dtype in (torch.float32, torch.float64):
        M = torch.randn(b, d, dtype=dtype)
        v, u = torch.randn(d, dtype=dtype), torch.randn(b, dtype=dtype)
        bare = best(lambda M=M: (M @ v, u @ M), reps)
        name = str(dtype).replace("torch.", "")
        row(f"bare matvec pair, {name}", bare, bare, "bare")
        del M
        for kind in ("gaussian", "ams"):
            sk = get_sketch(kind, d, b, 1)
            t0 = time.perf_counter()
            sk.apply(v)  # the first call builds the matrix in this dtype
            first = time.perf_counter() - t0
            row(f"{kind} {name} (first call builds R: {first:.2f} s)",
                best(lambda sk=sk: sk.adjoint(sk.apply(v)), reps), bare, "bare")
            del sk
        regen = get_sketch("gaussian", d, b, 1, memory_gb=0)
        row(f"gaussian {name} regenerated (no budget)", best(lambda: regen.adjoint(regen.apply(v)), 1), bare, "bare")


SECTIONS = {"wht": wht_section, "large": large_section, "dense": dense_section}


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--reps", type=count, default=5, help="timed calls per row; the fastest counts")
    ap.add_argument("--only", choices=sorted(SECTIONS), action="append",
                    help="run this section only (repeatable; default: all)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    print(f"# {cpu}, {os.cpu_count()} cores, load average {_load():.2f} at start; torch {torch.__version__}, "
          f"1 thread unless stated; compiled kernels: {'yes' if kernels.available() else 'no (torch passes only)'}")
    t0 = time.perf_counter()
    for name in SECTIONS:
        if not a.only or name in a.only:
            SECTIONS[name](a.reps)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"\n# {time.perf_counter() - t0:.0f} s in all; this process peaked at {rss:.1f} GB; "
          f"load average {_load():.2f} at the end")


if __name__ == "__main__":
    script_main(main)
