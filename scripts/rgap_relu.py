"""R-GAP on LeNet with ReLUs against Inverting Gradients on the same unsketched message: the family of inputs the
message leaves, and the member R-GAP takes.

Runs ``leakattack run --model lenet --model-param act=relu --sketch none --image-index I`` with ``--attack rgap``
in float64 and in float32 (``--dtype``: the client's precision, so the message's) and with the victim's own
recipe (``ig``: Inverting Gradients, float32), one thread per run.  Runs that already have a metrics.json are kept.
Prints one markdown row per image and setting: PSNR / SSIM, the verdict, the rank of the equations R-GAP solved
the image from (``jacobian_rank``; the family's dimension is 3072 minus it), the stop reason, the final loss (R-GAP:
the input layer's relative residual; ig: L_R), the attack's seconds and the run's baseline.

    python scripts/rgap_relu.py --out DIR [--images 3] [--jobs 1] [--figure FILE.png]

``--figure`` draws the photos and every setting's reconstructions, one row each.
"""

from __future__ import annotations

from pathlib import Path

import torch
from _runs import grid_arguments, print_table, run_grid
from batch_figure import figure, load

from leakattack import get_batch, get_dataset
from leakattack.script import script_main

#: setting -> its flags (``ig``: the victim's own recipe)
SETTINGS = {
    "rgap-float64": ["--attack", "rgap", "--dtype", "float64"],
    "rgap-float32": ["--attack", "rgap", "--dtype", "float32"],
    "ig": [],
}


def main() -> int:
    a = grid_arguments(__doc__, "photos 0..N-1", figure=True)
    results = run_grid(Path(a.out), {"lenet-relu": "lenet-relu"}, tuple(SETTINGS), a.images, lambda _, s, i: [
        "--model", "lenet", "--model-param", "act=relu", "--sketch", "none", *SETTINGS[s], "--image-index", str(i),
        "--threads", "1"], a.jobs)
    rows = []
    for i in range(a.images):
        for s in SETTINGS:
            m = results[("lenet-relu", s, i)]
            rank = "" if m.get("jacobian_rank") is None else f"{m['jacobian_rank']} of {m['unknowns']}"
            rows.append([i, s, f"{m['psnr']:.2f} dB / {m['ssim']:.4f}", m["verdict"], rank,
                         f"{m['iterations']} ({m['stop_reason']})", f"{m['final_loss']:.1e}",
                         f"{m['attack_s']:.1f} s", f"{m['baseline_psnr']:.2f} dB"])
    print_table(["photo", "setting", "PSNR / SSIM", "verdict", "rank", "steps", "final loss", "attack",
                 "baseline PSNR"], rows)
    if a.figure:
        photos = get_dataset("photos")
        truth = torch.cat([get_batch(photos, i)[0] for i in range(a.images)]).float()
        runs = [(s, [str(Path(a.out) / f"lenet-relu-{s}-{i}" / "reconstruction.pt") for i in range(a.images)])
                for s in SETTINGS]
        figure([("photos", truth)] + [(s, torch.cat([load(f) for f in files])) for s, files in runs],
               list(range(a.images)), Path(a.figure))
    return 0


if __name__ == "__main__":
    script_main(main)
