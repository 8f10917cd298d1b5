"""The two attack recipes on small victims whose units' derivative jumps (ReLU, max pooling): dlg (L-BFGS on L_R
in float64) against ig (Inverting Gradients' signed Adam), the measurements behind the recipe a model without one
of its own takes by its units (targets.recipe_of).

Runs ``leakattack run --model M --recipe R --image-index I`` through the default SRHT (b = d/2), one thread per
run, each recipe to its own end, for LeNet and the MLP with ``act=relu`` and the two networks of
examples/relu_models.py.  Runs that already have a metrics.json are kept.  Prints one markdown row per victim and
image (PSNR / SSIM, verdict, steps and stop reason, attack seconds for each recipe; the run's baseline).

    python scripts/recipe_by_units.py --out DIR [--images 3] [--jobs 1]
"""

from __future__ import annotations

from pathlib import Path

from _runs import grid_arguments, print_table, run_grid

from leakattack.script import script_main

RELU_MODELS = Path(__file__).resolve().parents[1] / "examples" / "relu_models.py"  # from any working folder
#: name -> the run's victim flags
VICTIMS = {
    "lenet, act=relu": ["--model", "lenet", "--model-param", "act=relu"],
    "mlp, act=relu (digits)": ["--model", "mlp", "--model-param", "act=relu", "--dataset", "digits"],
    "ReluCNN": ["--model", f"{RELU_MODELS}:ReluCNN"],
    "PooledCNN": ["--model", f"{RELU_MODELS}:PooledCNN"],
}
RECIPES = ("dlg", "ig")


def cell(m: dict) -> str:
    return (f"{m['psnr']:.2f} dB / {m['ssim']:.3f}, {m['verdict']}, {m['iterations']} ({m['stop_reason']}), "
            f"{m['attack_s']:.0f} s")


def main() -> int:
    a = grid_arguments(__doc__)
    out = Path(a.out)
    slug = {v: v.split(",")[0].split(" ")[0].lower() for v in VICTIMS}
    results = run_grid(out, slug, RECIPES, a.images, lambda v, r, i: [
        *VICTIMS[v], "--sketch", "srht", "--recipe", r, "--image-index", str(i), "--threads", "1"], a.jobs)
    print_table(["victim", "image", "dlg: PSNR / SSIM, verdict, steps, attack",
                 "ig: PSNR / SSIM, verdict, steps, attack", "baseline PSNR"],
                ([v, i, cell(results[(v, "dlg", i)]), cell(results[(v, "ig", i)]),
                  f"{results[(v, 'dlg', i)]['baseline_psnr']:.2f} dB"] for v in VICTIMS for i in range(a.images)))
    return 0


if __name__ == "__main__":
    script_main(main)
