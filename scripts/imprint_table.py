"""The imprint attack of a malicious server (Robbing the Fed) by batch size, bins and defense.

Runs ``leakattack run --attack imprint`` for ResNet-18 on batches of the embedded photos and LeNet on batches of the
digits, at several bin counts, unsketched (the ``random`` query, and the ``brightness`` one in two rows), then
ResNet-18 on 16 photos under the client's defenses and through sketches; one thread per run; runs that already have
a metrics.json are kept. Prints one markdown row per run: the images rebuilt to 60 dB or more (a pixel error below
1e-3 on images in [0, 1]), those above 20 dB, the mean PSNR / SSIM against the mean image's, the share of a batch
expected alone in a bin if the bins held equal shares of the images ((1 - 1/K)^(B-1)), and the attack's message.

    python scripts/imprint_table.py --out DIR [--jobs 2]
"""

from __future__ import annotations

from pathlib import Path

from _runs import cli_run, print_table, run_jobs

from leakattack.script import count, out_folder, parser, script_main

#: (data set, model, batch size, bins, query, sketch, defense)
RUNS = [("photos", "resnet18", b, k, "random", "none", "") for b in (8, 16, 32, 48) for k in (64, 256)] + \
       [("photos", "resnet18", 32, 256, "brightness", "none", "")] + \
       [("digits", "lenet", b, k, "random", "none", "") for b in (64, 256) for k in (256, 1024)] + \
       [("digits", "lenet", 64, 1024, "brightness", "none", "")] + \
       [("photos", "resnet18", 16, 256, "random", "none", d) for d in (
           "clip:C=1", "gaussian:sigma=1e-6", "clip:C=1,gaussian:sigma=1e-4", "clip:C=1,gaussian:sigma=1e-2",
           "quantize:bits=8", "prune:p=0.9")] + \
       [("photos", "resnet18", b, k, "random", s, "") for b, k, s in (
           (16, 128, "srht:0.5"), (16, 128, "countsketch:0.5"), (16, 32, "srht:0.1"), (8, 32, "srht:0.01"),
           (8, 16, "srht:0.01"), (8, 128, "srht:0.01"))]


def args_of(run: tuple) -> list[str]:
    data, model, batch, bins, query, sketch, defense = run
    kind, _, ratio = sketch.partition(":")
    out = ["--dataset", data, "--model", model, "--attack", "imprint", "--bins", str(bins), "--query", query,
           "--sketch", kind, "--batch-size", str(batch), "--threads", "1"]
    return out + (["--sketch-ratio", ratio] if ratio else []) + (["--defense", defense] if defense else [])


def slug(run: tuple) -> str:
    data, model, batch, bins, query, sketch, defense = run
    tail = "-" + defense.replace(":", "").replace(",", "-").replace("=", "") if defense else ""
    return f"{data}-{model}-b{batch}-k{bins}-{query}-{sketch.replace(':', '')}{tail}"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_folder, required=True, help="folder for the attack runs")
    ap.add_argument("--jobs", type=count, default=1, help="runs at once, one thread each")
    a = ap.parse_args()
    out = Path(a.out)
    done = run_jobs(RUNS, lambda r: cli_run(out / slug(r), args_of(r)), a.jobs)
    rows = []
    for run in RUNS:
        m = done[run]
        data, model, batch, bins, query, sketch, defense = run
        each = m["psnr_each"]
        eps = m.get("epsilon")
        rows.append([f"{model}, {data}", batch, bins, query, sketch.replace(":", " "),
                     (defense or "none") + ("" if eps is None else f" (ε {eps:.3g})"),
                     f"{sum(p >= 60 for p in each)} of {batch}", sum(p >= 20 for p in each),
                     f"{m['psnr']:.2f} / {m['ssim']:.3f}", f"{m['baseline_psnr']:.2f}",
                     f"{(1 - 1 / bins) ** (batch - 1):.2f}", f"{m['attack_s']:.1f}", m["message"]])
    print_table(["victim", "B", "bins", "query", "sketch", "defense", ">= 60 dB", ">= 20 dB", "PSNR / SSIM",
                 "baseline PSNR", "alone if equal bins", "attack s", "message"], rows)


if __name__ == "__main__":
    script_main(main)
