"""One attack step on deep victims: leakattack's ``ig`` recipe against a bare PyTorch loop of the same math.

leakattack's step is timed inside :meth:`GradientMatching.optimise` on a case built by
``leakattack.experiment.prepare`` (the ``ig`` recipe: cosine objective, TV, signed Adam
with step decay, box, float32): a monitor called at every step records the clock, so
a step's time is the gap between two calls (evaluation, optimiser step, clamp,
bookkeeping; the monitor itself returns an empty dict).  The floor is a bare loop
written here with the same weights, the same sketch object's ``apply``, the same
labels and start: forward in the victim's mode (``--bn auto``: the running statistics for
one image), ``torch.autograd.grad(create_graph=True)``
over the weights, ``torch.cat`` to one flat gradient, the sketch, cosine against the
message (half the squared distance of the unit vectors) plus weight * TV, the gradient
with respect to x, a signed ``torch.optim.Adam``
step and the clamp to [0, 1].

    python benchmarks/deep_step.py [--models resnet20 resnet18 vit_small resnet50] [--steps 6]
                                   [--warmup 2] [--rounds 3] [--threads 1 all] [--device cpu]

Each (model, sketch, threads) row alternates the two loops ``--rounds`` times
(``--steps`` timed steps each after ``--warmup`` untimed ones) and prints the median
wall time of a step and the ratio; the spread is the lowest and highest step time of
each.  Beside it, the median CPU time of a step (user + system, all threads) and its
system part: on a shared machine the wall time of several threads is at the mercy of
the other processes, while the CPU time of one thread barely moves.  The attack keeps
freed memory in the process (``keep_freed_memory``), which the bare loop then shares;
``--glibc-default`` measures both without it.  Cases:
32 px victims with no sketch and with srht b/d = 0.01; resnet50 at 224 px with srht
b = 4e5.  Goal: ratio <= 1.1 for resnet18, <= 1.5 for resnet50/srht b = 4e5.
Take timings under ``flock /tmp/timing.lock``; the load average is printed.  With
``--device cuda`` both loops run on the GPU and every clock reading waits for the
device's queue first (``torch.cuda.synchronize``), so a step's time is its whole work;
the CPU columns then measure the host's share.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import targets
from leakattack.attacks import gradient_matching, init_dummy
from leakattack.attacks.priors.tv import total_variation
from leakattack.config import RunConfig
from leakattack.config.constraints import available_cores
from leakattack.experiment import prepare
from leakattack.script import count, index, one_of, parser, script_main, thread_count


def cases(models: list[str]) -> list[tuple[str, dict]]:
    """(label, RunConfig fields) of every timed case."""
    out = []
    for m in models:
        ig = dict(model=m, recipe="ig")  # the ig recipe, also where the victim's own is dlg (vit_small)
        if m == "resnet50":
            out.append((f"{m} 224px srht b=4e5", dict(ig, image_size=224, sketch="srht", sketch_dim=400_000)))
        else:
            out.append((f"{m} none", dict(ig, sketch="none")))
            out.append((f"{m} srht b/d=0.01", dict(ig, sketch="srht", sketch_ratio=0.01)))
    return out


def library_steps(p, x0, labels, steps: int) -> list[tuple[float, float, float]]:
    """(wall, CPU, system) seconds of each of ``steps`` steps of the library's optimise (the first gap includes no
    start-up)."""
    stamps = []

    def monitor(step, x):
        stamps.append(clocks())
        return {}

    attack = p.attack
    saved = attack.iterations, attack.stall_window
    attack.iterations, attack.stall_window = steps, 0
    try:
        attack.optimise(p.obs, x0.unsqueeze(0), labels, monitor=monitor, monitor_every=1)
    finally:
        attack.iterations, attack.stall_window = saved
    return gaps(stamps)


#: the device both loops run on (``--device``); its queue is drained before every clock reading
DEVICE = torch.device("cpu")


def clocks() -> tuple[float, float, float]:
    """Wall, CPU (user + system, all threads) and system seconds so far, once the device's queued work is done."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    t = os.times()
    return time.perf_counter(), t.user + t.system, t.system


def gaps(stamps: list) -> list[tuple[float, float, float]]:
    """(wall, CPU, system) seconds between consecutive clock readings."""
    return [tuple(y - x for x, y in zip(a, b)) for a, b in zip(stamps, stamps[1:])]


def bare_steps(p, x0, labels, steps: int) -> list[tuple[float, float, float]]:
    """(wall, CPU, system) seconds of each of ``steps`` steps of the bare loop (the same math, no library code but the
    sketch)."""
    s = p.cfg.derived()
    model, loss_fn, sketch = p.victim.model, p.victim.loss, p.obs.linear_map
    y = p.obs.y.detach().flatten()
    weights = [w for w in model.parameters() if w.requires_grad]
    x = x0.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=s.lr)
    stamps = [clocks()]
    for _ in range(steps):
        with sdpa_kernel(SDPBackend.MATH):
            loss = loss_fn(model(x), labels)
        grads = torch.autograd.grad(loss, weights, create_graph=True)
        g = torch.cat([w.reshape(-1) for w in grads])
        r = sketch.apply(g).flatten()
        rec = 0.5 * (r / r.norm() - y / y.norm()).pow(2).sum()  # 1 - cos, without cancellation
        total = rec + s.tv * total_variation(x)
        x.grad, = torch.autograd.grad(total, x)
        x.grad.sign_()
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        stamps.append(clocks())
    return gaps(stamps)


def measure(label: str, fields: dict, threads: int, a) -> str:
    torch.set_num_threads(threads)
    p = prepare(RunConfig(iterations=a.warmup + a.steps, threads=threads, device=DEVICE.type, **fields))
    torch.set_num_threads(threads)
    labels = p.attack.labels_for(p.obs)
    x0 = init_dummy(p.obs.input_shape, "gaussian", 2, p.obs.y.device, p.obs.victim.dtype)
    lib, bare = [], []
    for _ in range(a.rounds):
        lib += library_steps(p, x0, labels, a.warmup + a.steps)[a.warmup:]
        bare += bare_steps(p, x0, labels, a.warmup + a.steps)[a.warmup:]
    ml, mb = (statistics.median(t[0] for t in steps) for steps in (lib, bare))
    cl, cb = (statistics.median(t[1] for t in steps) for steps in (lib, bare))
    sl, sb = (statistics.median(t[2] for t in steps) for steps in (lib, bare))
    lo, hi = (lambda steps: min(t[0] for t in steps)), (lambda steps: max(t[0] for t in steps))
    return (f"{label:<24} {threads:>2} thr  b={p.obs.b:>10,}  leakattack {ml:6.3f} s [{lo(lib):.3f}-{hi(lib):.3f}]"
            f"  bare {mb:6.3f} s [{lo(bare):.3f}-{hi(bare):.3f}]  x{ml / mb:.2f}  | CPU s/step {cl:.3f} / {cb:.3f} "
            f"x{cl / cb:.2f} (system {sl:.3f} / {sb:.3f})  load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--models", nargs="+", type=one_of(targets.list_models, "model", files=True),
                    default=["resnet20", "resnet18", "vit_small", "resnet50"])
    ap.add_argument("--steps", type=count, default=6, help="timed steps per round and loop")
    ap.add_argument("--warmup", type=index, default=2, help="untimed steps before them")
    ap.add_argument("--rounds", type=count, default=3)
    ap.add_argument("--threads", nargs="+", type=thread_count, default=[1, available_cores()],
                    help="thread counts: integers from 1 to the cores this process may use, or 'all' (those cores; "
                         "default: 1 all)")
    ap.add_argument("--only", help="only the cases whose label contains this text")
    ap.add_argument("--glibc-default", action="store_true",
                    help="leave glibc returning freed blocks to the system (the attack keeps them by default, "
                         "gradient_matching.keep_freed_memory; both loops share the process's setting)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both loops run")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda needs a CUDA GPU, and torch finds none on this machine")
    chosen = [(label, fields) for label, fields in cases(a.models) if not a.only or a.only in label]
    if not chosen:
        ap.error(f"--only {a.only!r} matches no case of {', '.join(a.models)}: the cases are "
                 f"{', '.join(label for label, _ in cases(a.models))}")
    global DEVICE
    DEVICE = torch.device(a.device)
    if a.glibc_default:
        gradient_matching.keep_freed_memory = lambda: None
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "CPU"
    print(f"# torch {torch.__version__}, {platform.machine()}, {where}, {available_cores()} cores, load "
          f"{os.getloadavg()[0]:.1f}; medians of {a.rounds} x {a.steps} steps after {a.warmup} warm-up steps, "
          "[min-max]; ratio leakattack / bare")
    for label, fields in chosen:
        for t in a.threads:
            print(measure(label, fields, t, a), flush=True)


if __name__ == "__main__":
    script_main(main)
