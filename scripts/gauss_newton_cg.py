"""Gauss-Newton steps on L_R without forming J: each step solves the linearised problem by CGLS.

The attack's Gauss-Newton steps (``leakattack/attacks/gauss_newton.py``) solve the linearised problem exactly, from
J^T J (n x n, n = m unknowns), formed from J where J (b x n) fits in memory and from 2n products of J and J^T where
it does not (vit_small through srht b/d = 0.5: 903,269 x 3072 numbers, 22 GB).  This script takes inexact steps
instead: J v by a backward pass through the graph of J^T v (linear in v) and J^T u by a backward pass through the
message's graph, min ||r + J d||^2 + lam ||d||^2 by conjugate gradients on the normal equations (CGLS,
``--cg-steps`` products of each), halving a step that does not lower L_R.  Where J is ill-conditioned a few hundred
CGLS iterations do not solve the linearised problem, and the steps creep (docs/attack.md).  It starts from a run's
reconstruction and prints, per step, L_R / ||y||^2 and the PSNR against the truth:

    leakattack run --model vit_small --sketch srht --sketch-ratio 0.5 --time-limit 2m --no-lpips --quiet --out DIR
    python scripts/gauss_newton_cg.py DIR --model vit_small --sketch srht --sketch-ratio 0.5

It measures what truncated second-order steps do (docs/attack.md, "Gauss-Newton after L-BFGS"); it is not part of
the attack.  The labels are the truth's (give a run whose labels were read right).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
from _problem import finished_run, prepared, problem_flags

from leakattack.attacks.gauss_newton import halved_step, products, residual
from leakattack.script import count, parser, script_main


def linearised(forward, x: torch.Tensor, labels, y: torch.Tensor):
    """r(x) = forward(x) - y, and d -> J d and u -> J^T u at x, each one backward pass (J never formed)."""
    out, J, Jt = products(forward, x, labels)
    if J is None:  # as gauss_newton.jacobian: J is zero
        print("the message does not depend on the input: there is nothing to solve for", file=sys.stderr)
        raise SystemExit(2)
    return (out - y).detach(), (lambda d: J(d).detach()), (lambda u: Jt(u).detach().view_as(x))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("run", help="a run folder whose reconstruction.pt is the start")
    problem_flags(ap, "vit_small")
    ap.add_argument("--cg-steps", type=count, default=100, help="CGLS iterations per Gauss-Newton step")
    ap.add_argument("--steps", type=count, default=5, help="Gauss-Newton steps")
    ap.add_argument("--damping", type=float, default=1e-6, help="lam, relative to ||J^T r|| (Tikhonov)")
    a = ap.parse_args()
    finished_run(a.run)
    pb = prepared(a)
    obs, labels, y, yy = pb.obs, pb.labels, pb.y, pb.yy
    x = pb.start(Path(a.run))
    score = pb.score

    r = residual(obs.forward, y, x, labels)
    loss = float(r @ r)
    print(f"start: L_R/||y||^2 {loss / yy:.3e}, PSNR {score(x):.2f} dB (b = {obs.b}, unknowns {x.numel()})")
    t0 = time.perf_counter()
    for step in range(a.steps):
        r, J, Jt = linearised(obs.forward, x, labels, y)
        # CGLS on min ||J d + r||^2 + lam ||d||^2, from d = 0
        s = Jt(-r)
        lam = a.damping * float(s.norm())
        d, q_res, direction, gamma = torch.zeros_like(x), -r, s.clone(), float((s * s).sum())
        first = math.sqrt(gamma)
        for _ in range(a.cg_steps):
            q = J(direction)
            alpha = gamma / (float(q @ q) + lam * float((direction * direction).sum()))
            d = d + alpha * direction
            q_res = q_res - alpha * q
            s = Jt(q_res) - lam * d
            new = float((s * s).sum())
            direction, gamma = s + (new / gamma) * direction, new
        linear = float(q_res @ q_res)
        del J, Jt  # the graphs of this step
        found = halved_step(obs.forward, y, x, d, labels, loss, 6)
        if found is None:
            print(f"step {step + 1}: no step of six halvings lowered L_R; stopped")
            break
        x, _, loss, halving = found
        print(f"step {step + 1}: L_R/||y||^2 {loss / yy:.3e} (the linear model's {linear / yy:.3e}, CGLS residual "
              f"{math.sqrt(gamma) / first:.1e} of its first, step halved {halving} times), PSNR {score(x):.2f} dB, "
              f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    script_main(main)
