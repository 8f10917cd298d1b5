"""Untrained against trained victims: the README table, re-measured.

For each model: ``leakattack train --protocol fedavg`` on the embedded digits
(10 iid clients, one local step, seed 0), then ``leakattack run`` on digit
images 0..N-1 with the weights clients start round 1 from and with those after the
last round (``--weights`` of the first and the final checkpoint), unsketched and through
SRHT (b/d = 0.5).  Prints one markdown row per model, sketch and state.

    python scripts/trained_victims.py --out /tmp/trained [--models lenet resnet20] [--images 3]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from leakattack.script import count, out_folder, parser, script_main

#: rounds of federated training per model and the attack settings left to the model's recipe otherwise
SETTINGS = {
    "lenet": {"rounds": 100, "run": ["--model-param", "act=tanh"]},
    "resnet20": {"rounds": 30, "run": []},
}


def leakattack(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "leakattack.cli", *args], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the training and attack runs")
    ap.add_argument("--models", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--images", type=count, default=3, help="digit images attacked per setting")
    a = ap.parse_args()
    out = Path(a.out)
    print("| model | test acc | sketch | weights | PSNR (dB) per image | mean | SSIM mean | steps |")
    print("|---|---|---|---|---|---|---|---|")
    for model in a.models:
        s = SETTINGS[model]
        train = out / "train"
        if not (train / model / "train.jsonl").exists():
            leakattack("train", "--protocol", "fedavg", "--model", model, "--rounds", str(s["rounds"]),
                       "--out", str(train), "--name", model, "--quiet")
        rows = (train / model / "train.jsonl").read_text().splitlines()
        last = json.loads(rows[-1])
        acc = f"{last['test_acc']:.3f}"
        first_acc = "–"  # train.jsonl records accuracy after each round, not before the first
        first = train / model / "checkpoints" / "round_0001.pt"
        final = train / model / "checkpoints" / f"round_{s['rounds'] + 1:04d}.pt"
        for sketch in ("none", "srht"):
            for state, weights in (("initial", first), (f"after {s['rounds']} rounds", final)):
                extra = ["--weights", str(weights)]
                psnr, ssim, steps = [], [], []
                for i in range(a.images):
                    folder = out / "runs" / f"{model}-{sketch}-{'u' if weights == first else 't'}-{i}"
                    if not (folder / "metrics.json").exists():
                        leakattack("run", "--model", model, "--dataset", "digits", "--sketch", sketch,
                                   "--image-index", str(i), "--no-lpips", "--quiet", "--out", str(folder),
                                   *s["run"], *extra)
                    m = json.loads((folder / "metrics.json").read_text())
                    psnr.append(m["psnr"])
                    ssim.append(m["ssim"])
                    steps.append(m["iterations"])
                print(f"| {model} | {acc if weights == final else first_acc} | {sketch} | {state} | "
                      f"{', '.join(f'{p:.1f}' for p in psnr)} | {statistics.mean(psnr):.1f} | "
                      f"{statistics.mean(ssim):.3f} | {', '.join(map(str, steps))} |", flush=True)
    return 0


if __name__ == "__main__":
    script_main(main)
