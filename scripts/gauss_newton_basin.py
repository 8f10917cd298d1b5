"""Where Gauss-Newton steps on L_R converge: from the input plus noise, and from a run's reconstruction.

The Jacobian J of x -> R grad_w F(w, x) at the input says whether the message pins the image down near it (full
column rank) and how well (its condition number).  Gauss-Newton steps (the least-squares solution of the linearised
problem, halved until L_R falls) then show the basin: from the input plus Gaussian noise of each ``--noise`` level
they converge to it where the basin holds that noise; from a run's reconstruction (``--run DIR``: its saved
reconstruction.pt, float32, clamped to [0, 1]) they converge to the input, or to a stationary point of L_R whose
residual is not zero (a spurious minimum: L_R stays above round-off and the step shrinks to nothing).  ``--hops``
adds Gaussian noise of each level to that reconstruction and takes the steps again (``--draws`` draws each), to
see how wide such a minimum's basin is.  It also prints how the reconstruction's error spreads over J's right
singular vectors (by tenths of the singular values, largest first).

    leakattack run --model vit_small --model-param patch=8 --model-param dim=48 --model-param depth=2 \\
        --model-param heads=2 --model-param mlp=96 --image-size 16 --iterations 2000 --refine none --out DIR
    python scripts/gauss_newton_basin.py --model vit_small --model-param patch=8 --model-param dim=48 \\
        --model-param depth=2 --model-param heads=2 --model-param mlp=96 --image-size 16 --run DIR --hops 0.03 0.1

Every step forms J (b x m numbers) in float64, so it runs where the attack's own Gauss-Newton steps run
(docs/attack.md, "Gauss-Newton after L-BFGS"); the labels are the truth's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from _problem import finished_run, prepared, problem_flags

from leakattack.attacks.gauss_newton import halved_step, jacobian, residual
from leakattack.metrics.uniqueness import rank_of
from leakattack.script import count, parser, script_main

#: J is formed only up to this many numbers (8 bytes each: 1.6 GB)
MAX_ENTRIES = 2 * 10**8
#: two steps in a row that lower L_R by less than this share of it end the steps (a stationary point)
FLAT = 1e-3


def main() -> None:
    ap = parser(__doc__)
    problem_flags(ap, "lenet")
    ap.add_argument("--noise", type=float, nargs="*", default=[0.01, 0.03, 0.1],
                    help="standard deviations of the noise added to the input (default 0.01 0.03 0.1)")
    ap.add_argument("--run", help="a run folder whose reconstruction.pt is a start")
    ap.add_argument("--hops", type=float, nargs="*", default=[],
                    help="standard deviations of the noise added to the run's reconstruction")
    ap.add_argument("--draws", type=count, default=2, help="draws of each hop's noise (default 2)")
    ap.add_argument("--steps", type=count, default=12, help="Gauss-Newton steps from each start (default 12)")
    a = ap.parse_args()
    if a.hops and not a.run:
        ap.error("--hops perturbs a run's reconstruction: give --run DIR")
    if a.run:
        finished_run(a.run)
    if min([*a.noise, *a.hops], default=0) < 0:
        ap.error("noise levels must be >= 0")
    pb = prepared(a)
    obs, labels, y, yy, truth, score = pb.obs, pb.labels, pb.y, pb.yy, pb.truth, pb.score
    n = truth.numel()
    if obs.b * n > MAX_ENTRIES:
        print(f"J would hold b x m = {obs.b} x {n} numbers (this script forms up to {MAX_ENTRIES:.0e})",
              file=sys.stderr)
        raise SystemExit(2)

    def steps(x: torch.Tensor) -> tuple[torch.Tensor, float, str]:
        """Gauss-Newton from x: (the last iterate, its L_R / ||y||^2, the steps taken and why they ended)."""
        r = residual(obs.forward, y, x, labels)
        loss = float(r @ r)
        taken, flat = 0, 0
        for _ in range(a.steps):
            J = jacobian(obs.forward, x, labels)
            d = torch.linalg.lstsq(J, -r.unsqueeze(1)).solution.reshape(x.shape)
            found = halved_step(obs.forward, y, x, d, labels, loss, 12)
            if found is None:
                return x, loss / yy, f"{taken} steps, then none lowered L_R"
            flat = flat + 1 if found[2] > (1 - FLAT) * loss else 0
            x, r, loss, _ = found
            taken += 1
            if loss / yy < 1e-28:
                return x, loss / yy, f"{taken} steps, round-off"
            if flat == 2:
                return x, loss / yy, f"{taken} steps, stationary (two cut L_R by less than {FLAT:g})"
        return x, loss / yy, f"{taken} steps"

    J = jacobian(obs.forward, truth, labels)
    U, S, Vh = torch.linalg.svd(J, full_matrices=False)
    del U  # b x m, as large as J
    rank = rank_of(S, J.shape)
    print(f"J at the input: {obs.b} x {n}, rank {rank}, singular values {float(S[0]):.3e} to {float(S[-1]):.3e} "
          f"(condition {float(S[0] / S[-1]):.2e})")
    gen = torch.Generator().manual_seed(0)
    for sigma in a.noise:
        x0 = truth + sigma * torch.randn(truth.shape, generator=gen, dtype=truth.dtype)
        x, loss, how = steps(x0)
        print(f"input + N(0, {sigma:g}^2): {score(x0):.2f} dB -> {score(x):.2f} dB, L_R/||y||^2 {loss:.2e}, {how}")
    if not a.run:
        return
    x0 = pb.start(Path(a.run))
    err = (x0 - truth).reshape(-1)
    share = (Vh @ err) ** 2 / float(err @ err)
    tenths = [float(share[i * n // 10:(i + 1) * n // 10].sum()) for i in range(10)]
    print(f"the run's reconstruction, {score(x0):.2f} dB: its error's share by tenths of J's singular values "
          f"(largest first): {' '.join(f'{s:.3f}' for s in tenths)}")
    x, loss, how = steps(x0)
    print(f"from the reconstruction: {score(x0):.2f} dB -> {score(x):.2f} dB, L_R/||y||^2 {loss:.2e}, {how}")
    for sigma in a.hops:
        for _ in range(a.draws):
            start = x0 + sigma * torch.randn(truth.shape, generator=gen, dtype=truth.dtype)
            x, loss, how = steps(start)
            print(f"reconstruction + N(0, {sigma:g}^2): {score(start):.2f} dB -> {score(x):.2f} dB, "
                  f"L_R/||y||^2 {loss:.2e}, {how}")


if __name__ == "__main__":
    script_main(main)
