"""How far batched restarts' gradients fall from the same starts evaluated one by one.

For each victim, the attack's objective gradient at R seeded Gaussian starts is
computed once through the batched pass and once start by start (the two answers
``_Problem.evaluate`` compares before it keeps the batch), and the relative
difference of every start's row is printed, sorted.  On victims with ReLUs a
unit whose input lies within round-off of zero can be gated differently by the
two passes; the rows it touches then move by far more than round-off, which
sets ``KINK`` in leakattack/attacks/gradient_matching.py.

    python scripts/restart_agreement.py [--victims resnet20,resnet18] [--starts 8] [--draws 2] [--dtype float32]
"""

from __future__ import annotations

from leakattack.script import count, parser, script_main


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--victims", default="resnet20,resnet18", help="models attacked on photo 0 (srht b/d = 0.01)")
    ap.add_argument("--weights", default=None, help="a checkpoint for the first victim (e.g. resnet20_photos.pt)")
    ap.add_argument("--starts", type=count, default=8, help="starts per batch")
    ap.add_argument("--draws", type=count, default=2, help="batches of starts (seeds 0..N-1)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    a = ap.parse_args()

    import torch

    from leakattack import experiment
    from leakattack.attacks.gradient_matching import KINK, _Problem, init_dummy, row_errors
    from leakattack.config import RunConfig

    dtype = getattr(torch, a.dtype)
    for i, model in enumerate(a.victims.split(",")):
        weights = a.weights if i == 0 else None
        p = experiment.prepare(RunConfig(model=model, dataset="photos", weights=weights, sketch="srht",
                                         sketch_ratio=0.01, restarts=a.starts, dtype=a.dtype))
        errors = []
        for seed in range(a.draws):
            x0 = init_dummy((a.starts, *p.case.x.shape), "gaussian", seed, dtype=dtype)
            problem = _Problem(p.attack, p.case.obs, x0, p.case.labels)
            batched = problem._evaluate(problem.z0, batched=True)[1]
            single = problem._evaluate(problem.z0, batched=False)[1]
            errors += row_errors(batched, single).tolist()
        errors.sort()
        print(f"{model}{' (' + weights + ')' if weights else ''}, {a.dtype}, {len(errors)} starts: "
              f"{' '.join(f'{e:.0e}' for e in errors)}; largest {errors[-1]:.1e} (KINK {KINK:g})")
    return 0


if __name__ == "__main__":
    script_main(main)
