"""Speed of the attack's hot path, each part against its floor, measured in one run.

* start-up: ``leakattack run --dataset digits --iterations 1`` against ``import torch``;
* L-BFGS: evaluations per step and time per step of our L-BFGS and of
  torch.optim.LBFGS (as the attack drove it: ``max_iter=1`` per step, the evaluation
  at x_k cached), on the default attack (lenet, SRHT b = d/2, photo 0, float64); the
  floor of each is a bare loop of the same number of evaluations (forward, gradient
  with its graph, backward) without an optimiser;
* the direction: the two-loop recursion against the compact representation over a
  full history of 100 pairs; the floor is one product of the history with a vector;
* restarts: ``--restarts R`` (Adam, the default attack otherwise) against one start,
  the attack alone (wall and CPU time) and the whole command (the wall time its summary
  line prints); beside them the same evaluations, R at a time against one at a time,
  and the floor of batching: the victim's forward pass and its gradient with the graph
  kept, differentiated back to x, for a batch of R images against one image (no
  sketch, no per-restart split), in float64 as the attack runs and in float32; and the
  batched evaluation of k = 1, 2, 4, ... R starts with its fit fixed + k x marginal; and R starts
  pruned by successive halving (``--prune-restarts``) against one start;
* oneDNN: float32 attacks (small victims on one image and on 8 batched starts, and ResNet-20) with torch's
  oneDNN (mkldnn) convolutions and without, the attack's wall time;
* Gauss-Newton's Jacobian: J of x -> R grad_w F(w, x) formed CHUNK columns at a time (one batched backward
  pass each, ``torch.func.vmap``), against the loop of one backward pass per column, on the default attack's
  victim through srht b = d/2 and unsketched (float64, one thread), with the two J's largest difference, and the
  rest of a step: J^T J and its Cholesky factor on every core;
* J^T J from products (where J is too large to hold; vit_small through srht b/d = 0.5): its first columns, CHUNK
  columns a batched pass against one a pass, and one a pass with the flat gradient concatenated by torch.cat (the
  bare PyTorch way: its backward, differentiated again, writes a d-long zero vector per parameter), and the
  columns of (S J)^T the attack forms there instead (J e_j alone, compressed by a CountSketch), every core;
* Gauss-Newton's chord steps: the steps after the default attack's 1000 L-BFGS steps (its first phase, run
  once) with chord steps, which reuse each J and its factor while they converge, against one full step a J
  (``chord=False``, the floor each chord step avoids), on every core as the attack takes them;
* a dense sketch: ``--sketch gaussian --sketch-ratio 0.5 --optimizer adam`` on lenet, per
  iteration, against an unsketched iteration plus one R v and one R^T u with the same
  b x d matrix held (the two products the sketch adds); the bar is 1.3x.

    python benchmarks/attack_speed.py [--steps 300] [--restarts 8] [--restart-steps 200] [--rounds 3]
                                      [--restart-model lenet] [--restart-ratio 0.5] [--restart-threads 1]
                                      [--restart-dtype float64|float32] [--profile]
                                      [--products-model vit_small] [--columns 64]
                                      [--only startup|lbfgs|restarts|sketch|onednn|jacobian|chord|convgrad|products ...]

Times are minima over ``--rounds`` interleaved rounds (the machine may be shared); the
load average is printed: ratios taken at a load above 1.5 on two cores are not to be trusted.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import targets
from leakattack.attacks import GradientMatching, init_dummy
from leakattack.attacks.base import torch_threads
from leakattack.attacks.gauss_newton import CHUNK, PACE_BATCHES, PACE_SHARE, gram, jacobian, levenberg_marquardt
from leakattack.attacks.gradient_matching import LOSS_UNIT, _Problem, match_loss, onednn, own_convolutions
from leakattack.attacks.lbfgs import History, two_loop_direction
from leakattack.config import RunConfig
from leakattack.experiment import prepare
from leakattack.script import count, fraction, one_of, parser, script_main, thread_count
from targets.oracle import restart_gradients
from targets.victim import cpu_cores


class Counted:
    """The observation's model of the client, counting its calls."""

    def __init__(self, forward):
        self.forward, self.calls = forward, 0

    def __call__(self, x, labels):
        self.calls += 1
        return self.forward(x, labels)


def startup(rounds: int) -> tuple[float, float]:
    """Seconds for ``import torch`` and for the one-iteration digits run, each the minimum over rounds."""
    torch_s, run_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            torch_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--dataset", "digits", "--iterations", "1",
                            "--quiet", "--no-lpips", "--out", os.path.join(tmp, f"run{r}")], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # its notes: a one-step run fails
            run_s.append(time.perf_counter() - t0)
    return min(torch_s), min(run_s)


def torch_lbfgs(obs, x0, labels, steps: int) -> None:
    """The attack's loop around torch.optim.LBFGS: evaluate at x_k, then one step whose first call is cached."""
    x = x0.clone().requires_grad_(True)
    weight = LOSS_UNIT / float(obs.y.pow(2).sum())
    opt = torch.optim.LBFGS([x], lr=1, max_iter=1, max_eval=25, history_size=100, tolerance_grad=0,
                            tolerance_change=0, line_search_fn="strong_wolfe")

    def evaluate():
        opt.zero_grad(set_to_none=True)
        total = weight * match_loss(obs.forward(x, labels), obs.y, "l2")
        total.backward()
        return total.detach()

    for _ in range(steps):
        cached = [evaluate()]
        opt.step(lambda: cached.pop() if cached else evaluate())
    evaluate()


def bare_evaluations(obs, x0, labels, count: int) -> float:
    """Seconds for ``count`` evaluations of the objective and its gradient, without an optimiser."""
    t0 = time.perf_counter()
    for _ in range(count):
        x = x0.detach().requires_grad_(True)
        total = match_loss(obs.forward(x, labels), obs.y, "l2")
        torch.autograd.grad(total, x)
    return time.perf_counter() - t0


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_wall(argv: list[str], times: int = 5) -> float:
    """Median wall time of running ``argv`` ``times`` times (output discarded)."""
    walls = sorted(timed(lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)) for _ in range(times))
    return walls[len(walls) // 2]


#: the one-iteration digits run phase by phase in one fresh process, ``import torch`` first
_PHASES = r"""
import json, sys, tempfile, time
t = [time.perf_counter()]
import torch
t.append(time.perf_counter())
from leakattack import experiment
from leakattack.config import RunConfig
t.append(time.perf_counter())
p = experiment.prepare(RunConfig(dataset="digits", iterations=1))
t.append(time.perf_counter())
o = experiment.execute(p, with_lpips=False)
t.append(time.perf_counter())
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
t.append(time.perf_counter())
with tempfile.TemporaryDirectory() as tmp:
    experiment.write_run(o, tmp + "/run")
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""
PHASE_NAMES = ("import torch", "leakattack imports", "data, model, message", "one attack step + scoring",
               "import matplotlib", "write the run folder (2 figures)")


def photos_load(rounds: int) -> tuple[float, float]:
    """Seconds (minima) to build the embedded photos set, and to resize its 50 crops with scikit-image's own
    ``resize`` (the peer the set's per-axis resampling reproduces), photographs already decoded for both."""
    import numpy as np
    import skimage.data
    from skimage.transform import resize

    from leakattack.data.embedded import PHOTO_NAMES, _photo_boxes, load_photos

    photos = []
    for name in PHOTO_NAMES:
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.float64) / 255.0
        photos.append(((np.repeat(img[:, :, None], 3, axis=2) if img.ndim == 2 else img)[:, :, :3], name))

    def peer():
        for img, name in photos:
            for top, left, side in _photo_boxes(name, *img.shape[:2]):
                np.clip(resize(img[top:top + side, left:left + side], (32, 32), order=1, anti_aliasing=True,
                               mode="reflect"), 0.0, 1.0)

    load_photos()  # decodes the photographs once (skimage caches nothing; the OS caches the files)
    ours = min(timed(load_photos) for _ in range(rounds))
    return ours, min(timed(peer) for _ in range(rounds))


def startup_section(a) -> None:
    torch_s, run_s = startup(a.rounds)
    print(f"start-up   import torch {torch_s:6.2f} s | leakattack run --dataset digits --iterations 1 "
          f"{run_s:6.2f} s | above import torch {run_s - torch_s:5.2f} s")
    phases = [json.loads(subprocess.run([sys.executable, "-c", _PHASES], check=True, capture_output=True,
                                        text=True).stdout.splitlines()[-1]) for _ in range(a.rounds)]
    print("           phases, medians of " + f"{a.rounds}: " + " | ".join(
        f"{name} {statistics.median(p[i] for p in phases):.2f} s" for i, name in enumerate(PHASE_NAMES)))
    cli = [sys.executable, "-m", "leakattack.cli"]
    walls = {"import torch": median_wall([sys.executable, "-c", "import torch"]),
             "leakattack --help": median_wall(cli + ["--help"]),
             "leakattack run --help": median_wall(cli + ["run", "--help"]),
             "leakattack list": median_wall(cli + ["list"]),
             "python -c pass": median_wall([sys.executable, "-c", "pass"])}
    print("           medians of 5: " + " | ".join(f"{k} {v:.3f} s" for k, v in walls.items())
          + f"; --help at x{walls['leakattack --help'] / walls['import torch']:.2f} of import torch")
    ours, peer = photos_load(a.rounds)
    print(f"           photos set (50 crops, 32 px): built in {ours:.2f} s, decoding included; scikit-image's resize "
          f"of the same crops alone {peer:.2f} s (x{peer / ours:.1f})")


def lbfgs_section(a) -> None:
    p = prepare(RunConfig(model="lenet", sketch="srht"))
    obs, labels = p.obs, p.attack.labels_for(p.obs)
    x0 = init_dummy(obs.input_shape, "gaussian", 2, dtype=obs.victim.dtype)
    counted = Counted(obs.forward)
    torch.optim.LBFGS([x0.clone().requires_grad_(True)])  # its first build imports torch._dynamo: not timed
    ours = GradientMatching(optimizer="lbfgs", iterations=a.steps, tol=0, stall_window=0, labels="given")
    own_s, torch_s_, own_floor, torch_floor = [], [], [], []
    for _ in range(a.rounds):
        counted.calls = 0
        own_s.append(timed(lambda: ours.run(dataclasses.replace(obs, forward=counted), x0, labels)))
        own_evals = counted.calls
        counted.calls = 0
        torch_s_.append(timed(lambda: torch_lbfgs(dataclasses.replace(obs, forward=counted), x0, labels, a.steps)))
        torch_evals = counted.calls
        own_floor.append(bare_evaluations(obs, x0, labels, own_evals))
        torch_floor.append(bare_evaluations(obs, x0, labels, torch_evals))
    n = a.steps
    print(f"L-BFGS     evaluations per step: ours {own_evals / n:.2f}, torch {torch_evals / n:.2f} "
          f"({a.steps} steps, default attack)")
    print(f"           ms per step: ours {1e3 * min(own_s) / n:.2f} (floor {1e3 * min(own_floor) / n:.2f}, "
          f"x{min(own_s) / min(own_floor):.2f}), torch {1e3 * min(torch_s_) / n:.2f} "
          f"(floor {1e3 * min(torch_floor) / n:.2f}, x{min(torch_s_) / min(torch_floor):.2f}); "
          f"ours {min(torch_s_) / min(own_s):.2f}x faster")

    nz = obs.victim.unknowns_per_example
    gen = torch.Generator().manual_seed(0)
    history = History(100, nz, torch.float64, "cpu")
    for _ in range(100):
        s = torch.randn(nz, generator=gen, dtype=torch.float64)
        y = s + 0.1 * torch.randn(nz, generator=gen, dtype=torch.float64)
        history.push(s, y, float(y.dot(s)), float(y.dot(y)))
    S, Y = history.pairs()
    g = torch.randn(nz, generator=gen, dtype=torch.float64)
    reps = 50
    two, compact, floor = [], [], []
    for _ in range(a.rounds):
        two.append(timed(lambda: [two_loop_direction(g, S, Y, history.gamma) for _ in range(reps)]))
        compact.append(timed(lambda: [history.direction(g) for _ in range(reps)]))
        floor.append(timed(lambda: [history.W.view(200, nz) @ g for _ in range(reps)]))
    reference = two_loop_direction(g, S, Y, history.gamma)
    err = float((history.direction(g) - reference).norm() / reference.norm())
    print(f"direction  100 pairs, n = {nz}: two-loop {1e3 * min(two) / reps:.3f} ms, compact "
          f"{1e3 * min(compact) / reps:.3f} ms (floor: one product with the history {1e3 * min(floor) / reps:.3f} ms); "
          f"{min(two) / min(compact):.1f}x; relative difference {err:.1e}")


def cpu_timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``; CPU counts user and system time of every thread."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _floor_passes(victim, R: int, dtype) -> dict:
    """n -> one bare pass for a batch of n images (n = 1, R): forward, gradient with its graph, back to x."""
    model = copy.deepcopy(victim.model).to(dtype)
    weights = [w for w in model.parameters() if w.requires_grad]
    passes = {}
    for n in (1, R):
        x = torch.rand(n, *victim.input_shape, dtype=dtype, requires_grad=True)
        labels = torch.zeros(n, dtype=torch.long)

        def once(x=x, labels=labels):
            grads = torch.autograd.grad(victim.loss(model(x), labels), weights, create_graph=True)
            torch.autograd.grad(sum(g.pow(2).sum() for g in grads), x)

        passes[n] = once
    return passes


def batch_floor(victim, R: int, dtype, reps: int) -> float:
    """CPU time of a batch of R images over that of one: forward, gradient with its graph, back to x."""
    out = []
    for once in _floor_passes(victim, R, dtype).values():
        once()
        out.append(cpu_timed(lambda once=once: [once() for _ in range(reps)])[1])
    return out[1] / out[0]


def batch_floor_wall(victim, R: int, dtype, reps: int, rounds: int) -> tuple[float, int, int]:
    """(ratio, threads of R, threads of 1): the wall time of the same bare pass for a batch of R images on the threads
    an attack of R starts takes by default over that of one image on one start's threads
    (:meth:`targets.Victim.threads_for`), minima over ``rounds`` interleaved rounds: the floor of ``--restarts R``
    against ``--restarts 1`` at the default threads, where the batch shares nothing a start computes on its own."""
    passes = _floor_passes(victim, R, dtype)
    threads = {n: victim.threads_for(n) for n in passes}
    before = torch.get_num_threads()
    best = dict.fromkeys(passes, math.inf)
    try:
        for _ in range(rounds):
            for n, once in passes.items():
                torch.set_num_threads(threads[n])
                once()
                best[n] = min(best[n], cpu_timed(lambda once=once: [once() for _ in range(reps)])[0])
    finally:
        torch.set_num_threads(before)
    return best[R] / best[1], threads[R], threads[1]


def restart_scaling(problem, R: int, steps: int, rounds: int) -> str:
    """One line: a batched evaluation of k = 1, 2, 4, ... R starts against one start's own evaluation (wall ms,
    minima over rounds), and the least-squares fit fixed + k * marginal, which says what R starts must cost at
    least while each start adds that much arithmetic."""
    sizes = sorted({k for k in (1, 2, 4, 8, 16, 32) if k < R} | {R})
    reps = max(steps // 4, 1)
    per: dict = {}
    for _ in range(rounds):
        for k in sizes:
            Z = problem.z0[:k]
            per.setdefault(k, []).append(cpu_timed(lambda: [problem._evaluate(Z, batched=True)
                                                            for _ in range(reps)])[0] / reps)
        per.setdefault(0, []).append(cpu_timed(lambda: [problem._evaluate(problem.z0[:1], batched=False)
                                                        for _ in range(reps)])[0] / reps)
    best = {k: 1e3 * min(v) for k, v in per.items()}
    ks = torch.tensor(sizes, dtype=torch.float64)
    ts = torch.tensor([best[k] for k in sizes], dtype=torch.float64)
    A = torch.stack([torch.ones_like(ks), ks], 1)
    fixed, marginal = torch.linalg.lstsq(A, ts.unsqueeze(1)).solution.flatten().tolist()
    one = best[0]
    return ("batched evaluation of k starts, ms: " + ", ".join(f"k={k} {best[k]:.2f}" for k in sizes)
            + f"; one start's own evaluation {one:.2f}; fit {fixed:.2f} + k x {marginal:.2f} ms: each start adds "
            f"{marginal / one:.0%} of one start's evaluation, so {R} starts cost x{(fixed + R * marginal) / one:.2f}")


def against(many: list[float], one: list[float]) -> str:
    """``A s against B s``: the least of the times ``many`` (R starts), then the least of ``one`` (one start), in the
    order of the ratio beside them (``min(many) / min(one)``)."""
    return f"{min(many):.2f} s against {min(one):.2f} s"


def restarts_section(a) -> None:
    th, before = a.restart_threads, torch.get_num_threads()
    torch.set_num_threads(th)  # the evaluations and floors below too
    p = prepare(RunConfig(model=a.restart_model, sketch="srht", sketch_ratio=a.restart_ratio, threads=th,
                          dtype=a.restart_dtype))
    obs, labels = p.obs, p.attack.labels_for(p.obs)
    R, steps = a.restarts, a.restart_steps
    common = dict(optimizer="adam", iterations=steps, init_seed=2, stall_window=0, tol=0, threads=th)
    one = GradientMatching(**common, restarts=1)
    many = GradientMatching(**common, restarts=R)
    pruned = GradientMatching(**common, restarts=R, prune_restarts=True)
    xs = torch.stack([init_dummy(obs.input_shape, "gaussian", 2 + 1000 * r, dtype=obs.victim.dtype)
                      for r in range(R)])
    t1, tR, tP, f1, fR = [], [], [], [], []
    for _ in range(a.rounds):
        t1.append(cpu_timed(lambda: one.reconstruct(obs)))
        tR.append(cpu_timed(lambda: many.reconstruct(obs)))
        tP.append(cpu_timed(lambda: pruned.reconstruct(obs)))
        problem = _Problem(many, obs, xs, labels)
        rows = list(range(R))
        for _ in range(2):  # its two checks of the batched model against the starts one by one
            problem.evaluate(rows, problem.z0)
        f1.append(cpu_timed(lambda: [problem.evaluate([0], problem.z0[:1]) for _ in range(steps)]))
        fR.append(cpu_timed(lambda: [problem.evaluate(rows, problem.z0) for _ in range(steps)]))
    scaling = restart_scaling(problem, R, steps, a.rounds)
    if a.profile:  # where one batched evaluation of the R starts spends its time
        from torch.profiler import profile
        with profile() as prof:
            for _ in range(steps):
                problem.evaluate(rows, problem.z0)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    path = "one start at a time" if problem.batched is None else \
        "per-layer" if restart_gradients(obs.victim, xs[:2], labels.expand(2, *labels.shape)) is not None \
        else "torch.func.vmap"

    def ratio(t, u, k):
        return min(x[k] for x in t) / min(x[k] for x in u)

    floors = {str(dt).replace("torch.", ""): batch_floor(obs.victim, R, dt, 20 if obs.d < 10 ** 6 else 2)
              for dt in (obs.victim.dtype, torch.float32 if obs.victim.dtype == torch.float64 else torch.float64)}
    print(f"restarts   {a.restart_model}, srht b/d = {a.restart_ratio}, {th} thread(s), "
          f"{str(obs.victim.dtype)[6:]}, Adam, "
          f"{steps} steps, {R} starts against 1 ({path} batched path): attack x{ratio(tR, t1, 0):.2f} "
          f"wall ({against([x[0] for x in tR], [x[0] for x in t1])}), x{ratio(tR, t1, 1):.2f} CPU; "
          f"evaluations alone x{ratio(fR, f1, 0):.2f} wall, x{ratio(fR, f1, 1):.2f} CPU; floor of a batch of {R} "
          "images against one: " + ", ".join(f"x{v:.2f} CPU in {k}" for k, v in floors.items()))
    wall, th_R, th_1 = batch_floor_wall(obs.victim, R, obs.victim.dtype, 20 if obs.d < 10 ** 6 else 2, a.rounds)
    print(f"           floor at the default threads: a batch of {R} images on {th_R} thread(s) against one on "
          f"{th_1}, the same pass, x{wall:.2f} wall" + ("; wanted of the attack: at most x2.67" if R == 8 else ""))
    print("           " + scaling)
    print(f"           {R} starts pruned by halving (--prune-restarts): attack x{ratio(tP, t1, 0):.2f} wall "
          f"({min(x[0] for x in tP):.2f} s), x{ratio(tP, t1, 1):.2f} CPU against one start")
    dtype = f" --dtype {a.restart_dtype}" if a.restart_dtype else ""
    for threads in (str(th), None):  # as given, then the default (auto: its own choice for R and for 1 start)
        cmd: dict[int, list[float]] = {1: [], R: []}
        summary: dict[int, list[float]] = {1: [], R: []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(a.rounds):
                for r in (1, R):
                    folder = os.path.join(tmp, f"r{r}")
                    cmd[r].append(timed(lambda: subprocess.run(
                        [sys.executable, "-m", "leakattack.cli", "run", "--model", a.restart_model, "--sketch",
                         "srht", *(["--threads", threads] if threads else []),
                         *(["--dtype", a.restart_dtype] if a.restart_dtype else []),
                         "--sketch-ratio", str(a.restart_ratio), "--optimizer", "adam", "--iterations", str(steps),
                         "--restarts", str(r), "--quiet", "--no-lpips", "--out", folder], check=True,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
                    with open(os.path.join(folder, "metrics.json")) as f:
                        summary[r].append(json.load(f)["wall_s"])
        print(f"           leakattack run --model {a.restart_model} --sketch-ratio {a.restart_ratio}{dtype} "
              f"--optimizer adam --iterations {steps} --restarts {R} --threads {threads or 'auto'}: "
              f"{against(cmd[R], cmd[1])} with 1: x{min(cmd[R]) / min(cmd[1]):.2f} of the "
              f"command's wall time; x{min(summary[R]) / min(summary[1]):.2f} of the wall time its summary line "
              f"prints ({against(summary[R], summary[1])}"
              + ("; wanted: at most x2.67)" if R == 8 else ")"))
    torch.set_num_threads(before)


def sketch_section(a) -> None:
    """Per iteration: the gaussian sketch held as R, against no sketch plus the two products R v and R^T u."""
    steps = a.restart_steps
    runs = {}
    for kind in ("gaussian", "none"):
        p = prepare(RunConfig(model="lenet", sketch=kind, sketch_ratio=0.5, optimizer="adam", iterations=steps,
                              tol=0, stall_window=0))
        x0 = init_dummy(p.obs.input_shape, "gaussian", 2, dtype=p.obs.victim.dtype)
        labels = p.attack.labels_for(p.obs)
        p.obs.forward(x0, labels)  # the first call draws R (held from then on): not timed
        runs[kind] = (p, x0, labels)
    p = runs["gaussian"][0]
    d, b, dtype = p.obs.victim.d, int(p.obs.y.numel()), p.obs.victim.dtype
    M = torch.randn(b, d, dtype=dtype)
    v, u = torch.randn(d, dtype=dtype), torch.randn(b, dtype=dtype)
    times = {"gaussian": [], "none": [], "pair": []}
    for _ in range(a.rounds):
        for kind, (p, x0, labels) in runs.items():
            times[kind].append(timed(lambda: p.attack.run(p.obs, x0, labels)) / steps)
        times["pair"].append(timed(lambda: [(M @ v, u @ M) for _ in range(steps)]) / steps)
    sk, plain, pair = (min(times[k]) for k in ("gaussian", "none", "pair"))
    load = os.getloadavg()[0]
    print(f"sketch     lenet, adam, {steps} steps, {str(dtype).replace('torch.', '')}: gaussian b = d/2 = {b} "
          f"{1e3 * sk:.2f} ms/it; floor: unsketched {1e3 * plain:.2f} ms/it + R v and R^T u with R held "
          f"{1e3 * pair:.2f} ms = {1e3 * (plain + pair):.2f} ms: x{sk / (plain + pair):.2f} (bar x1.30)"
          + (f"; load {load:.1f}: the machine was busy, rerun" if load >= 1.5 else ""))


#: (label, run settings) of the oneDNN comparison: float32 attacks of small victims on one image and on batched
#: starts, and a deep victim
RELU_MODELS = Path(__file__).resolve().parents[1] / "examples" / "relu_models.py"  # from any working folder
ONEDNN_CASES = [
    ("lenet act=relu, ig, 600 steps", dict(model="lenet", model_params={"act": "relu"}, iterations=600)),
    ("ReluCNN, ig, 600 steps", dict(model=f"{RELU_MODELS}:ReluCNN", iterations=600)),
    ("PooledCNN, ig, 600 steps", dict(model=f"{RELU_MODELS}:PooledCNN", iterations=600)),
    ("lenet, adam float32, 200 steps", dict(model="lenet", optimizer="adam", dtype="float32", iterations=200)),
    ("lenet, adam float32, 200 steps, 8 starts", dict(model="lenet", optimizer="adam", dtype="float32",
                                                      iterations=200, restarts=8)),
    ("resnet20, ig, 30 steps, srht 0.01", dict(model="resnet20", sketch_ratio=0.01, iterations=30, threads=1)),
]


def onednn_section(a) -> None:
    """The attack's wall time with torch's oneDNN (mkldnn) convolutions and without, interleaved rounds."""
    for label, settings in ONEDNN_CASES:
        p = prepare(RunConfig(sketch="srht", tol=0, stall_window=0, **settings))
        x0 = torch.stack([init_dummy(p.obs.input_shape, "gaussian", 2 + 1000 * r, dtype=p.obs.victim.dtype)
                          for r in range(p.attack.restarts)])
        labels = p.attack.labels_for(p.obs)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(a.rounds):
            for enabled in (True, False):
                with onednn(enabled):  # the optimisation alone: optimise() would choose
                    times[enabled].append(timed(lambda: p.attack._optimise(p.obs, x0, labels, None, 10, False)))
        on, off = min(times[True]), min(times[False])
        chosen = "without" if own_convolutions(p.obs, x0) else "with"
        print(f"onednn     {label} (d = {p.obs.victim.d}): {on:.3f} s with oneDNN, {off:.3f} s without: "
              f"x{off / on:.2f}; the attack runs {chosen} it")


def jacobian_section(a) -> None:
    """Gauss-Newton's J, CHUNK columns a batched backward pass against one column a pass, interleaved rounds."""
    for kind in ("srht", "none"):
        p = prepare(RunConfig(model="lenet", sketch=kind, sketch_ratio=0.5, threads=1))
        x = init_dummy(p.obs.input_shape, "gaussian", 2, dtype=p.obs.victim.dtype)
        labels = p.attack.labels_for(p.obs)
        times: dict[int, list[float]] = {CHUNK: [], 1: []}
        made, ends = {}, []  # ends: (time, columns) after each batch of the batched J's rounds
        for _ in range(a.rounds):
            for chunk in (CHUNK, 1):
                t = time.perf_counter()
                ends.append([(t, 0)])
                made[chunk] = jacobian(p.obs.forward, x, labels, chunk=chunk,
                                       done=lambda k: ends[-1].append((time.perf_counter(), k)))
                times[chunk].append(time.perf_counter() - t)
                if chunk == 1:
                    ends.pop()
        batched, loop = min(times[CHUNK]), min(times[1])
        J = made[CHUNK]
        diff = float((J - made[1]).abs().max() / made[1].abs().max())
        b, n = J.shape
        # the rest of a step: the normal equations on every core, as the attack forms them, and their factor
        with torch_threads(cpu_cores()):
            product, blocks = [], []
            for _ in range(a.rounds):  # interleaved: the machine's load falls on both alike
                product.append(timed(lambda: J.T @ J))
                blocks.append(timed(lambda: gram(J)))
            A, full = gram(J), J.T @ J
            gram_diff = float((A - full).abs().max() / full.abs().max())
            A.diagonal().add_(1e-6 * float(A.diagonal().mean()))
            factor = min(timed(lambda: torch.linalg.cholesky(A)) for _ in range(a.rounds))
        print(f"jacobian   lenet, {kind}{' b = d/2' if kind != 'none' else ''}, float64, J {b} x {n}: "
              f"{CHUNK} columns a pass {batched:.2f} s, one column a pass {loop:.2f} s: x{batched / loop:.2f}; "
              f"largest difference {diff:.1e} of J's largest entry; J^T J by blocks above the diagonal "
              f"{min(blocks):.2f} s against one product {min(product):.2f} s (x{min(blocks) / min(product):.2f}, "
              f"largest difference {gram_diff:.1e}) and its Cholesky factor {factor:.2f} s on {cpu_cores()} threads")
        print(f"           {pace_text(ends, n)}")


def pace_text(ends: list[list[tuple[float, int]]], n: int) -> str:
    """What a deadline reads of J's time from its batches' pace (gauss_newton's rule: after the first batch, over
    PACE_BATCHES batches and PACE_SHARE of the columns at least) against the same pace over two batches alone, over
    every window of each J's batches, and the batched J's whole time; ``ends``: (time, columns) at each batch's end,
    from the J's start, per J formed."""
    first, rest, two, share, whole = [], [], [], [], []
    need = max(PACE_BATCHES, -(-int(n * PACE_SHARE) // CHUNK))  # batches a pace is read over
    for e in ends:
        t = [b[0] - a[0] for a, b in zip(e, e[1:])]
        first.append(t[0])
        rest += t[1:]
        whole.append(e[-1][0] - e[0][0])
        for i in range(1, len(e) - 1):
            for w, out in ((2, two), (need, share)):
                if i + w < len(e):
                    out.append((e[i + w][0] - e[i][0]) / (e[i + w][1] - e[i][1]) * n)
    return (f"pace under a deadline: a batch of {CHUNK} columns {1e3 * min(rest):.0f}-{1e3 * max(rest):.0f} ms (the "
            f"first, which builds the graph, {1e3 * min(first):.0f}-{1e3 * max(first):.0f} ms); J read from two "
            f"batches {min(two):.1f}-{max(two):.1f} s, from {need} ({PACE_SHARE:.4g} of its columns) "
            f"{min(share):.1f}-{max(share):.1f} s, the whole J {min(whole):.2f}-{max(whole):.2f} s")


def products_section(a) -> None:
    """J^T J from products, its first ``--columns`` columns: CHUNK columns a batched pass against one a pass, and
    one a pass with the gradient flattened by torch.cat (whose backward, differentiated again, writes a d-long zero
    vector per parameter) in place of targets.oracle.joined; and the columns of (S J)^T that the attack forms above
    MAX_HELD instead (sketched_normal_equations: J e_j alone, one backward pass, compressed), CHUNK a pass and one a
    pass; interleaved rounds."""
    import targets.oracle as oracle
    from leakattack.attacks.gauss_newton import Stopped, normal_equations, sketched_normal_equations

    cores = cpu_cores()
    torch.set_num_threads(cores)
    p = prepare(RunConfig(model=a.products_model, sketch="srht", sketch_ratio=0.5, dtype="float64", threads=cores))
    x = init_dummy(p.obs.input_shape, "gaussian", 2, dtype=p.obs.victim.dtype)
    labels = p.attack.labels_for(p.obs)
    joined = oracle.joined

    def catted(pieces):
        return torch.cat([t.reshape(-1) for t in pieces])

    def first_columns(chunk: int, form=normal_equations) -> float:
        """Seconds per column over the first --columns columns of J^T J, or of (S J)^T with
        ``form=sketched_normal_equations`` (the graph built before the clock)."""
        count = [0]

        def done(k: int) -> None:
            count[0] = k

        def stop() -> bool:
            if count[0] == 0 and not clock:
                clock.append(time.perf_counter())  # the first batch begins: the graph is built
            return count[0] >= a.columns

        clock: list[float] = []
        try:
            form(p.obs.forward, x, labels, chunk=chunk, stop=stop, done=done)
        except Stopped:
            pass
        return (time.perf_counter() - clock[0]) / count[0]

    ways = {f"{CHUNK} columns a pass": (CHUNK, joined, normal_equations),
            "one a pass": (1, joined, normal_equations), "one a pass, torch.cat": (1, catted, normal_equations),
            f"(S J)^T, {CHUNK} columns a pass": (CHUNK, joined, sketched_normal_equations),
            "(S J)^T, one a pass": (1, joined, sketched_normal_equations)}
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(a.rounds):
            for name, (chunk, join, form) in ways.items():  # interleaved: the machine's load falls on all alike
                oracle.joined = join
                times[name].append(first_columns(chunk, form))
        if a.profile:  # where a column's time goes, one a pass through each concatenation
            from torch.profiler import ProfilerActivity, profile
            for name, join in (("torch.cat", catted), ("joined", joined)):
                oracle.joined = join
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    first_columns(1)
                oracle.joined = joined
                rows = sorted(prof.key_averages(), key=lambda r: r.self_cpu_time_total, reverse=True)
                total = sum(r.self_cpu_time_total for r in rows) or 1
                print(f"products   self CPU time of {a.columns} columns one a pass through {name}: " + ", ".join(
                    f"{r.key} {100 * r.self_cpu_time_total / total:.1f} %" for r in rows[:5]))
    finally:
        oracle.joined = joined
        torch.set_num_threads(1)
    best = {name: min(t) for name, t in times.items()}
    floor = best["one a pass, torch.cat"]
    cells = "; ".join(f"{name} {1e3 * t:.1f} ms (x{t / floor:.2f})" for name, t in best.items())
    n = x.numel()
    print(f"products   {a.products_model}, srht b/d = 0.5 (b = {p.obs.b}, d = {p.obs.victim.d}), float64, "
          f"{cores} threads, "
          f"J^T J's (or (S J)^T's) first {a.columns} of {n} columns, per column: {cells}; all {n} columns at the "
          f"first: {n * best[f'{CHUNK} columns a pass'] / 60:.1f} min, at the fastest (S J)^T: "
          f"{n * min(best[f'(S J)^T, {CHUNK} columns a pass'], best['(S J)^T, one a pass']) / 60:.1f} min")


def columns(text: str) -> int:
    """An argparse type: the columns the products comparison times, at least a batched pass's CHUNK."""
    value = count(text)
    if value < CHUNK:
        raise argparse.ArgumentTypeError(f"{value} is below {CHUNK}, the columns one batched pass forms")
    return value


def chord_section(a) -> None:
    """Gauss-Newton from the default attack's 1000-step L-BFGS iterate, chord steps against one step a J."""
    p = prepare(RunConfig(model="lenet", sketch="srht", threads=1))
    attack = copy.copy(p.attack)  # the default attack's first phase alone, as its Gauss-Newton steps follow it
    attack.iterations, attack.refine = 1000, "none"
    first = attack.reconstruct(p.obs)
    scale = float(p.obs.y.pow(2).sum())
    runs: dict[bool, list] = {True: [], False: []}
    with torch_threads(cpu_cores()):
        for _ in range(a.rounds):
            for chord in (True, False):  # interleaved: the machine's load falls on both alike
                t = time.perf_counter()
                out = levenberg_marquardt(p.obs.forward, p.obs.y, first.x, first.labels, tol=attack.tol, scale=scale,
                                          chord=chord)
                runs[chord].append((time.perf_counter() - t, out))

    def said(chord: bool) -> str:
        best, out = min(runs[chord], key=lambda run: run[0])
        return (f"{len(out.losses)} steps on {out.steps} J ({out.chord} chord), L_R {out.losses[-1]:.2e} "
                f"({out.stop}), {best:.2f} s")

    ratio = min(t for t, _ in runs[True]) / min(t for t, _ in runs[False])
    print(f"chord      lenet, srht b = d/2, float64, from the 1000-step L-BFGS iterate (L_R {first.final_loss:.2e}): "
          f"with chord steps {said(True)}; one step a J {said(False)}: x{ratio:.2f}")


def convgrad_section(a) -> None:
    """Each start's Conv2d weight gradients (targets.oracle._layer_gradients, with their derivatives in the layer's
    input and output gradient, as the attack differentiates them) by one grouped convolution against unfold and a
    batched product, per layer shape (3x3 of stride 1 and 2; LeNet's 5x5 layers), precision and thread count: the
    rule targets.oracle._grouped draws."""
    from torch import nn

    from targets import oracle

    before = torch.get_num_threads()
    torch.set_num_threads(a.restart_threads)
    rule = oracle._grouped
    shapes = [(C, H, 3, 1) for C, H in ((16, 32), (32, 16), (64, 8), (64, 32), (128, 16), (256, 8), (512, 4))]
    for dtype, R in ((torch.float32, 4), (torch.float32, 8), (torch.float64, 8)):
        cells = []
        for C, H, k, stride in shapes + [(16, 32, 3, 2), (32, 16, 3, 2), (64, 16, 3, 2), (3, 32, 5, 2), (12, 16, 5, 2),
                                         (12, 8, 5, 1)]:
            if dtype == torch.float64 and C > 128:
                continue  # seconds per cell in float64, and unfold's side already at 256 channels in float32
            conv = nn.Conv2d(C, 12 if k == 5 else C * stride, k, stride=stride, padding=k // 2).to(dtype)
            x = torch.randn(R, C, H, H, dtype=dtype, requires_grad=True)
            dz = torch.randn(R, conv.out_channels, H // stride, H // stride, dtype=dtype, requires_grad=True)
            best = {}
            for way in ("grouped", "unfold"):
                oracle._grouped = lambda m, positions, way=way: way == "grouped"  # noqa: E731  # that way, every layer

                def once():
                    w = oracle._layer_gradients(conv, x, dz, None, R)["weight"]
                    torch.autograd.grad(w.pow(2).sum(), (x, dz))

                once()
                best[way] = min(cpu_timed(lambda: [once() for _ in range(3)])[0] / 3 for _ in range(a.rounds))
            oracle._grouped = rule
            grouped = rule(conv, (H // stride) ** 2)
            cells.append(f"{C} ch {H}x{H}{f' {k}x{k}/{stride}' if (k, stride) != (3, 1) else ''}: "
                         f"x{best['grouped'] / best['unfold']:.2f} "
                         f"({1e3 * best['unfold']:.1f} ms; {'grouped' if grouped else 'unfold'})")
        print(f"convgrad   {R} starts, {str(dtype)[6:]}, {a.restart_threads} thread(s), grouped convolution against "
              "unfold and a batched product (its ms): " + "; ".join(cells) + "; (the attack's choice)")
    torch.set_num_threads(before)


SECTIONS = {"startup": startup_section, "lbfgs": lbfgs_section, "restarts": restarts_section,
            "sketch": sketch_section, "onednn": onednn_section, "jacobian": jacobian_section, "chord": chord_section,
            "convgrad": convgrad_section, "products": products_section}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=count, default=300, help="L-BFGS steps per round")
    ap.add_argument("--restarts", type=count, default=8)
    ap.add_argument("--restart-steps", type=count, default=200,
                    help="Adam steps of the restarts and sketch comparisons")
    ap.add_argument("--restart-model", type=one_of(targets.list_models, "model", files=True), default="lenet",
                    help="victim of the restarts comparison (e.g. resnet18)")
    ap.add_argument("--restart-ratio", type=fraction, default=0.5, help="srht b/d of the restarts comparison")
    ap.add_argument("--restart-threads", type=thread_count, default=1,
                    help="torch threads of the restarts and convgrad comparisons (a count up to the cores, or all)")
    ap.add_argument("--restart-dtype", choices=("float64", "float32"), default=None,
                    help="precision of the restarts comparison (default: the victim's recipe's)")
    ap.add_argument("--profile", action="store_true", help="also print torch.profiler's table of the batched "
                    "restarts' evaluations, and the largest items of J^T J's columns (products)")
    ap.add_argument("--products-model", type=one_of(targets.list_models, "model", files=True), default="vit_small",
                    help="victim of the products comparison")
    ap.add_argument("--columns", type=columns, default=64,
                    help=f"columns of J^T J the products comparison times, at least {CHUNK} (its batched ways form "
                         f"{CHUNK} a pass)")
    ap.add_argument("--rounds", type=count, default=3)
    ap.add_argument("--only", choices=sorted(SECTIONS), action="append",
                    help="run this part only (repeatable; default: all; lbfgs also times the direction)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, {platform.machine()}, 1 thread, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; minima over {a.rounds} rounds")
    for name, section in SECTIONS.items():
        if not a.only or name in a.only:
            section(a)


if __name__ == "__main__":
    script_main(main)
