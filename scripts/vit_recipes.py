"""The two attack recipes on the 32 px ViT: dlg (L-BFGS on L_R in float64) against ig (Inverting Gradients).

Runs ``leakattack run --model vit_small --recipe R`` on photos 0..N-1, unsketched and through SRHT sketches,
one thread per run: ``dlg`` under a time limit (it improves until its last step), ``ig`` to its own end (it
stops on its stall rule).  Runs that already have a metrics.json are kept.  Prints one markdown row per photo
and setting (PSNR / SSIM, steps and stop reason, wall seconds, verdict, the run's baseline) and, with
``--figure``, draws the truths and reconstructions.

    python scripts/vit_recipes.py --out DIR [--images 3] [--jobs 2] [--time-limit 5m] [--figure docs/vit-small.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _runs import run_jobs
from bn_prior_table import draw_grid

from leakattack.config.params import Duration
from leakattack.script import count, out_folder, parser, script_main

SKETCHES = {"none": ["--sketch", "none"], "srht 0.5": ["--sketch", "srht", "--sketch-ratio", "0.5"],
            "srht 0.01": ["--sketch", "srht", "--sketch-ratio", "0.01"]}
#: (recipe, sketch) of every setting
SETTINGS = [("dlg", "none"), ("dlg", "srht 0.5"), ("dlg", "srht 0.01"), ("ig", "none"), ("ig", "srht 0.01")]


def duration(text: str) -> str:
    """An argparse type: a duration as ``leakattack run --time-limit`` takes it (90s, 10m, 1h30m, seconds)."""
    limit = Duration()
    if not limit.ok(text):
        raise argparse.ArgumentTypeError(limit.error("time limit", text))
    return text


def run(folder: Path, image: int, recipe: str, sketch: str, time_limit: str) -> dict:
    if not (folder / "metrics.json").exists():
        limit = ["--time-limit", time_limit] if recipe == "dlg" else []
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--model", "vit_small", "--recipe", recipe,
                        *SKETCHES[sketch], "--image-index", str(image), *limit, "--threads", "1", "--no-lpips",
                        "--quiet", "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def folder_of(out: Path, recipe: str, sketch: str, image: int) -> Path:
    return out / "runs" / f"{recipe}-{sketch.replace(' ', '')}-{image}"


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the attack runs")
    ap.add_argument("--images", type=count, default=3, help="photos 0..N-1")
    ap.add_argument("--jobs", type=count, default=2, help="runs at once, one thread each")
    ap.add_argument("--time-limit", type=duration, default="5m", help="the dlg runs' --time-limit")
    ap.add_argument("--figure", default=None, help="also draw the truths and reconstructions into this png")
    a = ap.parse_args()
    out = Path(a.out)
    jobs = [(r, s, i) for i in range(a.images) for r, s in SETTINGS]

    def one(job):
        r, s, i = job
        return run(folder_of(out, r, s, i), i, r, s, a.time_limit)

    results = run_jobs(jobs, one, a.jobs)
    print("| photo | recipe | sketch | PSNR / SSIM | steps | wall | verdict | baseline PSNR / SSIM |")
    print("|---|---|---|---|---|---|---|---|")
    for (r, s, i), m in results.items():
        print(f"| {i} | {r} | {s} | {m['psnr']:.2f} dB / {m['ssim']:.3f} | {m['iterations']} ({m['stop_reason']}) "
              f"| {m['wall_s']:.0f} s | {m['verdict']} | {m['baseline_psnr']:.2f} dB / {m['baseline_ssim']:.2f} |")
    if a.figure:
        figure(out, a.images, results, Path(a.figure))
    return 0


def figure(out: Path, images: int, results: dict, path: Path) -> None:
    """One row per photo: the truth, then every setting's reconstruction with its PSNR."""
    import torch

    from leakattack.data import get_dataset

    truth = get_dataset("photos").images
    grid = []
    for i in range(images):
        panels = [("truth", truth[i])]
        for r, s in SETTINGS:
            rec = torch.load(folder_of(out, r, s, i) / "reconstruction.pt", weights_only=True)["images"][0]
            psnr = f"{results[(r, s, i)]['psnr']:.1f} dB"
            panels.append((f"{r}, {s}\n{psnr}" if i == 0 else psnr, rec))
        grid.append(panels)
    draw_grid(grid, path)


if __name__ == "__main__":
    script_main(main)
