"""The Gauss-Newton step from a run's reconstruction, and the chord steps after it: across a curved valley of L_R.

From a run's saved reconstruction x (``--run DIR``), J^T J of x -> R grad_w F(w, x) is formed from products, J never
held (:func:`leakattack.attacks.gauss_newton.normal_equations`: 2n backward passes, n^2 numbers).  The script prints

- J's singular values there (its rank and condition) and how the error e = x - input spreads over J's right
  singular vectors (by tenths of the singular values, largest first);
- ||r||, ||J e|| and ||r - J e|| (r the residual at x): where ||J e|| is far larger than ||r||, the linear model
  r(x - e) ~ r - J e is far from the zero the input has, and x lies on the floor of a curved valley of L_R;
- the Gauss-Newton step (J^T J + mu I) d = -J^T r for each ``--damping`` mu (absolute, on J^T J's eigenvalues):
  L_R / ||y||^2 and the PSNR where it lands;
- ``--chords`` chord steps from the undamped step's point: d = -(J^T J)^-1 J^T r(x_k), J^T at x, the point of J
  (Shamanskii's method, as the attack's rounds take them), and the same with J^T at x_k instead, which is not.

    leakattack run --model vit_small --sketch srht --sketch-ratio 0.5 --image-index 1 --time-limit 5m --out DIR
    python scripts/curved_valley.py --model vit_small --image-index 1 --run DIR

On vit_small (3072 unknowns) J^T J takes 3-3.5 minutes of a 2-core CPU.  The labels are the truth's.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from _problem import finished_run, prepared, problem_flags

from leakattack.attacks.gauss_newton import gram_rank, normal_equations, products, residual
from leakattack.script import parser, script_main


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--run", required=True, help="a run folder whose reconstruction.pt is the start")
    problem_flags(ap, "vit_small")
    ap.add_argument("--damping", type=float, nargs="*", default=[0.0, 1e-8, 1e-7, 1e-6],
                    help="mu of each Gauss-Newton step, absolute (default 0 1e-8 1e-7 1e-6)")
    ap.add_argument("--chords", type=int, default=8, help="chord steps after the undamped step (default 8)")
    a = ap.parse_args()
    finished_run(a.run)
    if min(a.damping, default=0) < 0 or a.chords < 0:
        ap.error("--damping values and --chords must be >= 0")
    pb = prepared(a)
    obs, labels, y, yy, truth, score = pb.obs, pb.labels, pb.y, pb.yy, pb.truth, pb.score
    n = truth.numel()
    x = pb.start(Path(a.run))

    def loss_at(z: torch.Tensor) -> tuple[torch.Tensor, float]:
        r = residual(obs.forward, y, z, labels)
        return r, float(r @ r) / yy

    r, loss = loss_at(x)
    t0 = time.perf_counter()
    A, jt = normal_equations(obs.forward, x, labels)
    took = time.perf_counter() - t0
    lam, V = torch.linalg.eigh(A)  # ascending
    s = lam.clamp_min(0).sqrt().flip(0)
    print(f"J^T J at the reconstruction ({score(x):.2f} dB, L_R/||y||^2 {loss:.3e}; b = {obs.b}, n = {n}): "
          f"{took:.0f} s; J's singular values {float(s[0]):.3e} to {float(s[-1]):.3e} "
          f"(condition {float(s[0] / s[-1]):.2e}), rank {gram_rank(A)[0]} of {n}")
    e = (x - truth).reshape(-1)
    share = ((V.T @ e) ** 2 / float(e @ e)).flip(0)
    tenths = [float(share[i * n // 10:(i + 1) * n // 10].sum()) for i in range(10)]
    print(f"its error e, ||e|| = {float(e.norm()):.3e}: share by tenths of J's singular values (largest first): "
          f"{' '.join(f'{t:.3f}' for t in tenths)}")
    _, J, _ = products(obs.forward, x, labels)
    assert J is not None  # normal_equations' A would be zero
    Je = J(e).detach()
    print(f"||r|| = {float(r.norm()):.3e}, ||J e|| = {float(Je.norm()):.3e}, "
          f"||r - J e|| = {float((r - Je).norm()):.3e}")
    g = V.T @ jt(r)
    full = None
    for mu in a.damping:
        step = x - (V @ (g / (lam + mu))).reshape(x.shape)
        print(f"Gauss-Newton step, mu {mu:g}: L_R/||y||^2 {loss_at(step)[1]:.3e}, {score(step):.2f} dB, "
              f"||e|| {float((step - truth).norm()):.3e}")
        if mu == 0:
            full = step
    if full is None or not a.chords:
        return
    L = torch.linalg.cholesky(A)
    for name, at_x in (("J^T at the reconstruction (chord steps)", True), ("J^T at each new point", False)):
        z, said = full, []
        rz, _ = loss_at(z)
        for _ in range(a.chords):
            u = jt(rz) if at_x else products(obs.forward, z, labels)[2](rz)
            z = z - torch.cholesky_solve(u.reshape(-1, 1), L).reshape(x.shape)
            rz, lz = loss_at(z)
            said.append(f"{score(z):.2f} dB ({lz:.1e})")
        print(f"from the undamped step, {name}: {', '.join(said)}")


if __name__ == "__main__":
    script_main(main)
