"""Untrained against trained ResNet-20 on photos, with and without the BatchNorm-statistics prior.

Trains the victim with ``scripts/train_photo_victim.py`` (once; the state_dict
holds the BatchNorm running statistics), then runs ``leakattack run`` (the ig
recipe, ``--bn auto`` = eval for one image) on photos 0..N-1 for every
combination of weights (untrained: the seed-0 initialisation, running
statistics 0 and 1; trained), prior (none; ``--prior bn``, pulling towards the
running statistics) and sketch (none; srht b/d = 0.01).  Runs that already have
a metrics.json are kept.  Prints one markdown row per setting: PSNR and SSIM
mean ± standard deviation over the images, the runs' baseline PSNR (metrics.json's
``baseline_psnr``, the better of the start and the data set's mean image), the
verdicts, which part of the runs not rebuilt failed (their labels, their objective or their
search: :func:`leakattack.metrics.failed_kind`), how many photos the reconstructions single out of the set by
pixels / by the victim's features (image identifiability, docs/runs.md) and the minutes per run.

    python scripts/bn_prior_table.py --out DIR [--iterations N] [--images 3] [--jobs 2] [--prior-weight W] [--rows RE]
                                       [--tv T]

Without ``--iterations`` every run takes the recipe's own budget (``leakattack
run``'s default: 24,000 steps or 8 minutes, whichever comes first).  ``--rows``
keeps the settings whose label (``trained-none-srht``, ``untrained-bn-none``, ...)
matches a regular expression, e.g. ``'^trained-.*-srht'`` for the bar's two rows.  Without ``--tv`` every run
takes the recipe's TV weight: 0.2 for one image at the trained weights (loaded with ``--weights``), 0.02 at the
untrained ones.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _runs import run_jobs

from leakattack.script import count, out_folder, parser, pattern, script_main, threads_text, weight_text

MODEL = "resnet20"
SKETCHES = {"none": ["--sketch", "none"], "srht 0.01": ["--sketch", "srht", "--sketch-ratio", "0.01"]}


def settings(weights: Path, prior_weight: str | None, tv: str | None = None):
    """(label, weights label, prior label, sketch label, extra run arguments) of every row, the bar's first."""
    prior = ["--prior", f"bn:{prior_weight}" if prior_weight else "bn"]
    rows = []
    for state, sk, pr in itertools.product(("trained", "untrained"), ("srht 0.01", "none"), ("none", "bn")):
        extra = [*(["--weights", str(weights)] if state == "trained" else []), *(prior if pr == "bn" else []),
                 *SKETCHES[sk], *(["--tv", tv] if tv is not None else [])]
        rows.append((f"{state}-{pr}-{sk.split()[0]}", state, pr, sk, extra))
    return rows


def run(folder: Path, image: int, iterations: int | None, threads: str, extra: list[str]) -> dict:
    if not (folder / "metrics.json").exists():
        budget = ["--iterations", str(iterations)] if iterations else []
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", "--model", MODEL, "--dataset", "photos",
                        "--image-index", str(image), *budget, "--threads", threads,
                        "--no-lpips", "--quiet", "--out", str(folder), *extra],
                       check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def identified(ms: list[dict]) -> str:
    """How many photos the reconstructions single out of the set (their truth the nearest image, IIP), by pixels /
    by the victim's features (:mod:`leakattack.metrics.identify`), beside the baselines' best; ``-`` where the runs
    did not record it."""
    def count(suffix: str) -> str:
        shares = [m.get(f"iip{suffix}") for m in ms]
        if any(v is None for v in shares):
            return "-"
        base = max((m.get(f"baseline_iip{suffix}") or 0.0) for m in ms)
        return f"{sum(v == 1.0 for v in shares)} of {len(ms)} (baselines {base:.0%})"

    return f"{count('')} / {count('_features')}"


def failed_parts(ms: list[dict]) -> str:
    """Of the runs not rebuilt, how many failed in their label reading, their objective and their search
    (:func:`leakattack.metrics.failed_counts`); ``-`` where none tells."""
    from leakattack.metrics import failed_counts

    counts = failed_counts(ms)
    return ", ".join(f"{part} {k}" for part, k in counts.items()) if sum(counts.values()) else "-"


def pm(values: list[float], fmt: str) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{format(statistics.mean(values), fmt)} ± {format(sd, fmt)}"


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the checkpoint and the attack runs")
    ap.add_argument("--iterations", type=count, default=None,
                    help="attack steps of every run (default: the recipe's budget, 24,000 steps or 8 minutes)")
    ap.add_argument("--images", type=count, default=3, help="photos 0..N-1 attacked per setting")
    ap.add_argument("--jobs", type=count, default=2, help="runs at once (each with --threads 1 when more than one)")
    ap.add_argument("--prior-weight", type=weight_text, default=None,
                    help="weight of the bn prior (default: the prior's own)")
    ap.add_argument("--figure", default=None, help="also draw the truths and reconstructions into this png")
    ap.add_argument("--threads", type=threads_text, default=None,
                    help="torch threads of every run (default: 1 when several run at once, else the victim's own)")
    ap.add_argument("--rows", type=pattern, default=".",
                    help="only the settings whose label matches this regular expression")
    ap.add_argument("--train-steps", type=count, default=None, help="training steps (default: the recipe's)")
    ap.add_argument("--tv", type=weight_text, default=None,
                    help="TV weight of every run (default: the recipe's, 0.2 at the trained weights, 0.02 untrained)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    weights = out / f"{MODEL}_photos.pt"
    if not weights.exists():
        cmd = [sys.executable, str(Path(__file__).with_name("train_photo_victim.py")), "--model", MODEL,
               "--out", str(weights)]
        if a.train_steps:
            cmd += ["--steps", str(a.train_steps)]
        subprocess.run(cmd, check=True)
    threads = a.threads or ("1" if a.jobs > 1 else "auto")
    rows = [row for row in settings(weights, a.prior_weight, a.tv) if a.rows.search(row[0])]
    extras = {label: extra for label, _, _, _, extra in rows}
    jobs = [(label, i) for label in extras for i in range(a.images)]

    def one(job):
        label, i = job
        t0 = time.perf_counter()
        m = run(out / "runs" / f"{label}-{i}", i, a.iterations, threads, extras[label])
        print(f"{label} photo {i}: {m['psnr']:.2f} dB ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)
        return m

    results = run_jobs(jobs, one, a.jobs)
    print("| weights | prior | sketch | PSNR (dB) | SSIM | baseline PSNR (dB) | verdicts | failed | identified | "
          "min per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, state, pr, sk, _ in rows:
        ms = [results[(label, i)] for i in range(a.images)]
        verdicts = ", ".join(sorted({m["verdict"] for m in ms}))
        shown = f"bn:{a.prior_weight}" if pr == "bn" and a.prior_weight else pr
        print(f"| {state} | {shown} | {sk} | {pm([m['psnr'] for m in ms], '.1f')} "
              f"| {pm([m['ssim'] for m in ms], '.3f')} | {pm([m['baseline_psnr'] for m in ms], '.1f')} | {verdicts} | "
              f"{failed_parts(ms)} | {identified(ms)} | {statistics.mean(m['wall_s'] for m in ms) / 60:.1f} |")
    if a.figure:
        figure(out, rows, a.images, results, Path(a.figure))
    return 0


def figure(out: Path, rows, images: int, results: dict, path: Path) -> None:
    """One row per photo: the truth, then every setting's reconstruction with its PSNR."""
    import torch

    from leakattack.data import get_dataset

    truth = get_dataset("photos").images
    grid = []
    for i in range(images):
        panels = [("truth", truth[i])]
        for label, state, pr, sk, _ in rows:
            rec = torch.load(out / "runs" / f"{label}-{i}" / "reconstruction.pt", weights_only=True)["images"][0]
            title = f"{state}\n{'bn prior' if pr == 'bn' else 'no prior'}\n{sk}\n{results[(label, i)]['psnr']:.1f} dB"
            panels.append((title if i == 0 else title.rsplit("\n", 1)[-1], rec))
        grid.append(panels)
    draw_grid(grid, path)


def draw_grid(grid: list[list[tuple[str, object]]], path: Path) -> None:
    """Rows of (title, image tensor C x H x W in [0, 1]) panels, drawn small and untouched by interpolation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_cols = len(grid), max(len(r) for r in grid)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.1 * n_cols, 1.25 * n_rows + 0.5), squeeze=False)
    for ax_row, panels in zip(axes, grid):
        for ax in ax_row:
            ax.axis("off")
        for ax, (title, img) in zip(ax_row, panels):
            ax.imshow(img.float().clamp(0, 1).permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_title(title, fontsize=5)
    fig.tight_layout(pad=0.2)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    script_main(main)
