"""The imprint attack of a malicious server (Robbing the Fed) by batch size, bins and defense.

Runs ``leakattack run --attack imprint --sketch none`` for ResNet-18 on batches of the embedded photos and LeNet on
batches of the digits, at several bin counts, and ResNet-18 on 16 photos under the client's defenses; one thread per
run (the ``random`` query, and the ``brightness`` one in two rows); runs that already have a metrics.json are kept.
Prints one markdown row per run: the images rebuilt exactly (PSNR >= 100 dB), those above 20 dB, the mean PSNR /
SSIM against the mean image's, the share of a batch expected alone in a bin if the bins held equal shares of the
images ((1 - 1/K)^(B-1)), and the attack's message.

    python scripts/imprint_table.py --out DIR [--jobs 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _runs import cli_run, print_table, run_jobs

#: (data set, model, batch size, bins, query, defense)
RUNS = [("photos", "resnet18", b, k, "random", "") for b in (8, 16, 32, 48) for k in (64, 256)] + \
       [("photos", "resnet18", 32, 256, "brightness", "")] + \
       [("digits", "lenet", b, k, "random", "") for b in (64, 256) for k in (256, 1024)] + \
       [("digits", "lenet", 64, 1024, "brightness", "")] + \
       [("photos", "resnet18", 16, 256, "random", d) for d in (
           "clip:C=1", "gaussian:sigma=1e-6", "clip:C=1,gaussian:sigma=1e-4", "clip:C=1,gaussian:sigma=1e-2",
           "quantize:bits=8", "prune:p=0.9")]


def args_of(run: tuple) -> list[str]:
    data, model, batch, bins, query, defense = run
    out = ["--dataset", data, "--model", model, "--attack", "imprint", "--bins", str(bins), "--query", query,
           "--sketch", "none", "--batch-size", str(batch), "--threads", "1"]
    return out + (["--defense", defense] if defense else [])


def slug(run: tuple) -> str:
    data, model, batch, bins, query, defense = run
    tail = "-" + defense.replace(":", "").replace(",", "-").replace("=", "") if defense else ""
    return f"{data}-{model}-b{batch}-k{bins}-{query}{tail}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the attack runs")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    a = ap.parse_args()
    out = Path(a.out)
    done = run_jobs(RUNS, lambda r: cli_run(out / slug(r), args_of(r)), a.jobs)
    rows = []
    for run in RUNS:
        m = done[run]
        data, model, batch, bins, query, defense = run
        each = m["psnr_each"]
        eps = m.get("epsilon")
        rows.append([f"{model}, {data}", batch, bins, query,
                     (defense or "none") + ("" if eps is None else f" (ε {eps:.3g})"),
                     f"{sum(p >= 100 for p in each)} of {batch}", sum(p >= 20 for p in each),
                     f"{m['psnr']:.2f} / {m['ssim']:.3f}", f"{m['baseline_psnr']:.2f}",
                     f"{(1 - 1 / bins) ** (batch - 1):.2f}", f"{m['wall_s']:.1f}", m["message"]])
    print_table(["victim", "B", "bins", "query", "defense", "exact (>= 100 dB)", ">= 20 dB", "PSNR / SSIM",
                 "baseline PSNR", "alone if equal bins", "attack s", "message"], rows)


if __name__ == "__main__":
    main()
