"""Per-iteration cost of the sketched attack relative to the unsketched one.

For lenet on one embedded 3x32x32 image at b/d = 0.5, time one attack iteration
(simulate the client's sketched gradient with create_graph, L_R, backward
through R^T, one fixed-step GD update) for every sketch kind, with the kinds
interleaved over several rounds on the same machine, and print the median time
per iteration divided by that of kind ``none``.

    python benchmarks/sketch_overhead.py [--ratio 0.5] [--iters 30] [--rounds 5]

gaussian and ams hold R as one b x d matrix where it fits the memory budget (it does
here: their first call, in the first round, builds it, and the median over the rounds
sets that round aside); ``--slow-iters`` still caps their iterations per round, a margin
for a machine where they rebuild it by blocks.
"""

from __future__ import annotations

import platform
import statistics
import time

import torch

import targets
from leakattack import data
from leakattack.attacks import GradientMatching, init_dummy
from leakattack.channel import Channel
from leakattack.observation import observe
from leakattack.script import count, fraction, parser, script_main, some_of, thread_count
from leakattack.sketch import get_sketch, list_sketches


def time_per_iteration(victim, sketch, x, labels, iters: int) -> float:
    obs = observe(victim, x, labels, Channel(sketch))
    x0 = init_dummy(x.shape, "uniform", 0, x.device, x.dtype)
    GradientMatching(optimizer="gd", iterations=2, lr=1e-3, tol=0).run(obs, x0, labels)  # warm-up
    attack = GradientMatching(optimizer="gd", iterations=iters, lr=1e-3, tol=0)
    t0 = time.perf_counter()
    attack.run(obs, x0, labels)
    return (time.perf_counter() - t0) / iters


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--ratio", type=fraction, default=0.5, help="b/d of every sketch, in (0, 1]")
    ap.add_argument("--iters", type=count, default=30)
    ap.add_argument("--rounds", type=count, default=5)
    ap.add_argument("--slow-iters", type=count, default=3, help="iterations per round for gaussian and ams")
    ap.add_argument("--kinds", type=some_of(list_sketches, "sketch"), default=",".join(list_sketches()))
    ap.add_argument("--threads", type=thread_count, default=1, help="torch CPU threads (the attack's default is 1)")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="precision (the attack's default is float64)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ds = data.get_dataset("photos")
    dtype = getattr(torch, a.dtype)
    x, labels = data.get_batch(ds, 0, 1)
    x = x.to(dtype)
    model = targets.get_model("lenet", num_classes=ds.num_classes, in_shape=ds.in_shape, seed=0).to(dtype=dtype)
    d = model.d
    b = round(a.ratio * d)
    kinds = ["none"] + [k for k in a.kinds if k != "none"]
    sketches = {k: get_sketch(k, d, d if k == "none" else b, seed=1) for k in kinds}  # none sends all d
    times = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for k in kinds:
            iters = a.slow_iters if k in ("gaussian", "ams") else a.iters
            times[k].append(time_per_iteration(model, sketches[k], x, labels, iters))
    base = statistics.median(times["none"])
    print(f"# lenet 3x32x32 {a.dtype}, d = {d}, b = {b} (b/d = {a.ratio}), {a.iters} GD iterations x {a.rounds} "
          f"rounds, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'sketch':<12} {'ms/iter':>9} {'ratio to none':>14}")
    for k in kinds:
        med = statistics.median(times[k])
        print(f"{k:<12} {1e3 * med:9.2f} {med / base:14.2f}")


if __name__ == "__main__":
    script_main(main)
