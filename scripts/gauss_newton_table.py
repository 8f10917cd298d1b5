"""L-BFGS alone against L-BFGS followed by Gauss-Newton steps (``--refine none`` against the default ``auto``) on the
victims whose recipe is dlg (L-BFGS on L_R in float64): what the steps add, in dB and seconds, and the Jacobian's
rank they report.

Runs ``leakattack run --model M [--dataset D] --sketch S --image-index I --refine R`` with one thread per run for
the DLG LeNet (photos) through SRHT b = d/2 and unsketched, and the MLP (digits) through SRHT b = d/2.  Runs that
already have a metrics.json are kept.  Prints one markdown row per victim, sketch and image.

    python scripts/gauss_newton_table.py --out DIR [--images 3] [--jobs 1]
"""

from __future__ import annotations

from pathlib import Path

from _runs import grid_arguments, print_table, run_grid

from leakattack.attacks.gauss_newton import steps_note
from leakattack.script import script_main

#: name -> the run's victim and sketch flags
CASES = {
    "lenet, srht b/d = 0.5": ["--model", "lenet", "--sketch", "srht"],
    "lenet, none": ["--model", "lenet", "--sketch", "none"],
    "mlp (digits), srht b/d = 0.5": ["--model", "mlp", "--dataset", "digits", "--sketch", "srht"],
}
REFINES = ("none", "auto")


def cell(m: dict) -> str:
    gn = m.get("gauss_newton")
    kept = f", {steps_note(gn)}" if gn and gn.get("kept") else ", Gauss-Newton not kept" if gn else ""
    steps = f"{m['iterations']} ({m['stop_reason']}{kept})"
    return f"{m['psnr']:.2f} dB / {m['ssim']:.4f}, {steps}, {m['attack_s']:.1f} s"


def rank(m: dict) -> str:
    gn = m.get("gauss_newton") or {}
    if gn.get("jacobian_rank") is None:
        return "not measured"
    top, low = gn["singular_values"]
    return f"{gn['jacobian_rank']} of {m['unknowns']} (s {top:.2g} to {low:.2g})"


def main() -> int:
    a = grid_arguments(__doc__)
    out = Path(a.out)
    slug = {c: c.replace(" ", "").replace(",", "-").replace("(", "").replace(")", "").replace("/", "")
            .replace("=", "") for c in CASES}
    results = run_grid(out, slug, REFINES, a.images,
                       lambda c, r, i: [*CASES[c], "--refine", r, "--image-index", str(i), "--threads", "1"], a.jobs)
    print_table(["victim, sketch", "image", "L-BFGS alone (--refine none)", "with Gauss-Newton (auto)", "J's rank",
                 "baseline PSNR"],
                ([c, i, cell(results[(c, "none", i)]), cell(results[(c, "auto", i)]), rank(results[(c, "auto", i)]),
                  f"{results[(c, 'none', i)]['baseline_psnr']:.2f} dB"] for c in CASES for i in range(a.images)))
    return 0


if __name__ == "__main__":
    script_main(main)
