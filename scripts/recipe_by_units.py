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

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: name -> the run's victim flags
VICTIMS = {
    "lenet, act=relu": ["--model", "lenet", "--model-param", "act=relu"],
    "mlp, act=relu (digits)": ["--model", "mlp", "--model-param", "act=relu", "--dataset", "digits"],
    "ReluCNN": ["--model", "examples/relu_models.py:ReluCNN"],
    "PooledCNN": ["--model", "examples/relu_models.py:PooledCNN"],
}
RECIPES = ("dlg", "ig")


def run(folder: Path, victim: str, recipe: str, image: int) -> dict:
    if not (folder / "metrics.json").exists():
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", *VICTIMS[victim], "--sketch", "srht",
                        "--recipe", recipe, "--image-index", str(image), "--threads", "1", "--no-lpips", "--quiet",
                        "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def cell(m: dict) -> str:
    return (f"{m['psnr']:.2f} dB / {m['ssim']:.3f}, {m['verdict']}, {m['iterations']} ({m['stop_reason']}), "
            f"{m['attack_s']:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the attack runs")
    ap.add_argument("--images", type=int, default=3, help="images 0..N-1")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    a = ap.parse_args()
    out = Path(a.out)
    slug = {v: v.split(",")[0].split(" ")[0].lower() for v in VICTIMS}
    jobs = [(v, r, i) for v in VICTIMS for i in range(a.images) for r in RECIPES]

    def one(job):
        v, r, i = job
        return job, run(out / f"{slug[v]}-{r}-{i}", v, r, i)

    with ThreadPoolExecutor(a.jobs) as pool:
        results = dict(pool.map(one, jobs))
    print("| victim | image | dlg: PSNR / SSIM, verdict, steps, attack | ig: PSNR / SSIM, verdict, steps, attack "
          "| baseline PSNR |")
    print("|---|---|---|---|---|")
    for v in VICTIMS:
        for i in range(a.images):
            dlg, ig = results[(v, "dlg", i)], results[(v, "ig", i)]
            print(f"| {v} | {i} | {cell(dlg)} | {cell(ig)} | {dlg['baseline_psnr']:.2f} dB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
