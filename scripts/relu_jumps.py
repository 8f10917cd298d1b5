"""Where the exact derivative of the matching objective misleads on a ReLU victim, and what the surrogate does.

Runs the victim's recipe (the ``ig`` recipe for the ResNets) for ``--steps`` steps,
then, at the iterate it kept and in float64, steps along the descent direction of the
cosine objective L(x) = 1 - cos(R grad_w F(w, x), y) as autograd forms it, and along the
descent directions of the ReLU surrogate (``--relu-surrogate TAU``, leakattack.attacks.surrogate)
for several widths, and prints the change of the exact L at each step length next to
what the exact derivative predicts.  A rise where the derivative predicts a fall is a
ReLU crossing its threshold: L jumps there, and no derivative sees it.

    python scripts/relu_jumps.py --model resnet20 --dataset photos --weights round_0301.pt \\
        --sketch srht --sketch-ratio 0.01 [--image-index 0] [--steps 400]
"""

from __future__ import annotations

import torch

from leakattack.attacks.gradient_matching import distance_to_unit, unit
from leakattack.attacks.surrogate import relu_surrogate
from leakattack.config import RunConfig
from leakattack.experiment import prepare
from leakattack.script import count, parser, script_main

LENGTHS = (1e-4, 1e-3, 1e-2, 1e-1, 0.3, 1.0)
WIDTHS = (1e-3, 1e-2, 1e-1, 1.0)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="photos")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--sketch", default="srht")
    ap.add_argument("--sketch-ratio", type=float, default=0.01)
    ap.add_argument("--image-index", type=int, default=0)
    ap.add_argument("--steps", type=count, default=400)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    common = dict(model=a.model, dataset=a.dataset, weights=a.weights, sketch=a.sketch, sketch_ratio=a.sketch_ratio,
                  image_index=a.image_index, threads=a.threads)
    run = prepare(RunConfig(iterations=a.steps, surrogate=0.0, **common))
    x = run.attack.reconstruct(run.case.obs).x
    p = prepare(RunConfig(dtype="float64", **common))  # the same message and attacker model, in float64
    obs, labels = p.case.obs, p.attack.labels_for(p.case.obs)
    y_unit = unit(obs.y.flatten())
    x = x.to(obs.victim.dtype).detach()

    def exact(z: torch.Tensor) -> float:
        return float(distance_to_unit(obs.forward(z, labels).flatten(), y_unit).detach())

    def descent(tau: float) -> tuple[torch.Tensor, torch.Tensor]:
        z = x.clone().requires_grad_(True)
        with relu_surrogate(obs.victim.model, tau):
            g, = torch.autograd.grad(distance_to_unit(obs.forward(z, labels).flatten(), y_unit), z)
        return g, -g / g.norm()

    start = exact(x)
    g0, _ = descent(0.0)
    print(f"{a.model}, {a.sketch} b/d = {a.sketch_ratio}, photo {a.image_index}: the iterate the recipe kept after "
          f"{a.steps} steps, L = {start:.4e}, |dL/dx| = {float(g0.norm()):.3e}")
    print("change of the exact L along each descent direction, at step length h (the whole image's norm):")
    print("direction                      cos with exact | norm / exact | " + " | ".join(f"h = {h:g}" for h in LENGTHS))
    for tau in (0.0, *WIDTHS):
        g, d = descent(tau)
        cos = float((g * g0).sum() / (g.norm() * g0.norm()))
        name = "exact derivative" if tau == 0 else f"surrogate, tau = {tau:g}"
        ratio = float(g.norm() / g0.norm())
        print(f"{name:<30} {cos:+14.3f} | {ratio:12.1f} | "
              + " | ".join(f"{exact(x + h * d) - start:+.2e}" for h in LENGTHS))
    print("predicted by the exact derivative:                           | "
          + " | ".join(f"{-h * float(g0.norm()):+.2e}" for h in LENGTHS))
    return 0


if __name__ == "__main__":
    script_main(main)
