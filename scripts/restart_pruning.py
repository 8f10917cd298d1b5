"""Restarts with and without successive halving (``--prune-restarts``): what they cost and which start they keep.

For every case it runs ``leakattack run`` with one start, with R starts to the end and with R starts pruned by
halving, one run at a time (the wall times are compared), and prints one markdown row per run: the attack's
seconds and their ratio to one start, the kept start's L_R and which start it is, PSNR / SSIM and the verdict.
Then, per case, whether the pruned run kept the start that the full run kept.  Runs that already have a
metrics.json are kept.

    python scripts/restart_pruning.py --out DIR [--cases lenet-adam,lenet-batch4,resnet20-ig] [--restarts 8]

The cases: ``lenet-adam`` (the restarts benchmark's setting: srht b/d = 0.5, Adam, 200 steps, photos 0-2),
``lenet-batch4`` (the dlg recipe, a batch of 4 photos, srht b/d = 0.5, 600 steps, batches from photos 0, 4, 8) and
``resnet20-ig`` (the ig recipe on photos 0-2 unsketched under a 90 s time limit, so that the pruned starts'
survivors take the steps the pruned ones leave).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from leakattack.script import count, out_folder, parser, script_main, some_of

CASES = {
    "lenet-adam": [(f"photo {i}", ["--model", "lenet", "--dataset", "photos", "--image-index", str(i),
                                   "--sketch", "srht", "--sketch-ratio", "0.5", "--optimizer", "adam",
                                   "--iterations", "200"]) for i in range(3)],
    "lenet-batch4": [(f"photos {i}-{i + 3}", ["--model", "lenet", "--dataset", "photos", "--image-index", str(i),
                                             "--batch-size", "4", "--sketch", "srht", "--sketch-ratio", "0.5",
                                             "--iterations", "600"]) for i in (0, 4, 8)],
    "resnet20-ig": [(f"photo {i}", ["--model", "resnet20", "--dataset", "photos", "--image-index", str(i),
                                    "--sketch", "none", "--time-limit", "90s"]) for i in range(3)],
}
MODES = ("1 start", "R starts", "R starts, pruned")


def run(folder: Path, args: list, mode: str, restarts: int) -> dict:
    if not (folder / "metrics.json").exists():
        extra = [] if mode == "1 start" else ["--restarts", str(restarts)]
        extra += ["--prune-restarts"] if mode.endswith("pruned") else []
        subprocess.run([sys.executable, "-m", "leakattack.cli", "run", *args, *extra, "--no-lpips", "--quiet",
                        "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((folder / "metrics.json").read_text())


def kept(m: dict) -> int:
    """The index of the start a run kept (the lowest final L_R)."""
    losses = [math.inf if v is None else v for v in m["restart_losses"]]
    return losses.index(min(losses))


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the attack runs")
    ap.add_argument("--cases", type=some_of(lambda: CASES, "case"), default=",".join(CASES),
                    help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--restarts", type=count, default=8, help="R")
    a = ap.parse_args()
    out = Path(a.out)
    print("| case | input | starts | attack s | × one start | kept start | its L_R | PSNR / SSIM | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree = []
    for case in a.cases:
        same = 0
        for label, args in CASES[case]:
            ms = {mode: run(out / case / f"{label.replace(' ', '_')}-{i}", args, mode, a.restarts)
                  for i, mode in enumerate(MODES)}
            one = ms["1 start"]["attack_s"]
            for mode, m in ms.items():
                starts = mode.replace("R", str(a.restarts))
                print(f"| {case} | {label} | {starts} | {m['attack_s']:.2f} | {m['attack_s'] / one:.2f} "
                      f"| {kept(m)} | {m['final_loss']:.3e} | {m['psnr']:.2f} dB / {m['ssim']:.3f} "
                      f"| {m['verdict']} |")
            same += kept(ms["R starts"]) == kept(ms["R starts, pruned"])
        agree.append(f"{case} {same} of {len(CASES[case])}")
    # under a time limit the full run's starts take fewer steps each than the pruned run's survivors
    print("\nthe pruned run kept the start the full run kept: " + ", ".join(agree))
    return 0


if __name__ == "__main__":
    script_main(main)
