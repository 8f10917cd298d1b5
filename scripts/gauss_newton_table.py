"""L-BFGS alone against L-BFGS followed by Gauss-Newton steps (``--refine none`` against the default ``auto``) on the
victims whose recipe is dlg (L-BFGS on L_R in float64): what the steps add, in dB and seconds, and the Jacobian's
rank they report.

Runs ``leakattack run --model M [--dataset D] --sketch S --image-index I --refine R`` with one thread per run for
the DLG LeNet (photos) through SRHT b = d/2 and unsketched, and the MLP (digits) through SRHT b = d/2.  Runs that
already have a metrics.json are kept.  Prints one markdown row per victim, sketch and image.

    python scripts/gauss_newton_table.py --out DIR [--images 3] [--jobs 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: name -> the run's victim and sketch flags
CASES = {
    "lenet, srht b/d = 0.5": ["--model", "lenet", "--sketch", "srht"],
    "lenet, none": ["--model", "lenet", "--sketch", "none"],
    "mlp (digits), srht b/d = 0.5": ["--model", "mlp", "--dataset", "digits", "--sketch", "srht"],
}
REFINES = ("none", "auto")


def run(folder: Path, case: str, refine: str, image: int) -> dict:
    if not (folder / "metrics.json").exists():
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", *CASES[case], "--refine", refine,
                        "--image-index", str(image), "--threads", "1", "--no-lpips", "--quiet", "--out", str(folder)],
                       check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def cell(m: dict) -> str:
    gn = m.get("gauss_newton")
    steps = f"{m['iterations']} ({m['stop_reason']}" + (f", {gn['accepted']} Gauss-Newton)" if gn else ")")
    return f"{m['psnr']:.2f} dB / {m['ssim']:.4f}, {steps}, {m['attack_s']:.1f} s"


def rank(m: dict) -> str:
    gn = m.get("gauss_newton") or {}
    if gn.get("jacobian_rank") is None:
        return "not measured"
    top, low = gn["singular_values"]
    return f"{gn['jacobian_rank']} of {m['unknowns']} (s {top:.2g} to {low:.2g})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the attack runs")
    ap.add_argument("--images", type=int, default=3, help="images 0..N-1")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    a = ap.parse_args()
    out = Path(a.out)
    slug = {c: c.replace(" ", "").replace(",", "-").replace("(", "").replace(")", "").replace("/", "")
            .replace("=", "") for c in CASES}
    jobs = [(c, r, i) for c in CASES for i in range(a.images) for r in REFINES]

    def one(job):
        c, r, i = job
        return job, run(out / f"{slug[c]}-{r}-{i}", c, r, i)

    with ThreadPoolExecutor(a.jobs) as pool:
        results = dict(pool.map(one, jobs))
    print("| victim, sketch | image | L-BFGS alone (--refine none) | with Gauss-Newton (auto) | J's rank | "
          "baseline PSNR |")
    print("|---|---|---|---|---|---|")
    for c in CASES:
        for i in range(a.images):
            plain, refined = results[(c, "none", i)], results[(c, "auto", i)]
            print(f"| {c} | {i} | {cell(plain)} | {cell(refined)} | {rank(refined)} | "
                  f"{plain['baseline_psnr']:.2f} dB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
