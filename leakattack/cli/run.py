"""``leakattack run``: attack one (sketched) gradient or protocol message and write a run folder."""

from __future__ import annotations

import sys

from ..config import add_arguments, config_from_args
from ..experiment import run_attack


def summary_line(m: dict, folder) -> str:
    """The one line a run ends with."""
    lp = f"{m['lpips']:.3f}" if m["lpips"] is not None else "n/a (backbone weights not cached)"
    if m.get("truth") is False:  # a message attacked without a truth file
        return (f"no image metrics (no --truth) | L_R {m['final_loss']:.3e} | labels {m['labels_attack']} "
                f"({m['label_mode']}) | {m['iterations']} it ({m['stop_reason']}) | {m['wall_s']:.1f} s | "
                f"d={m['d']} b={m['b']} | reconstruction.pt in {folder}")
    if m["label_acc"] is None:
        lab = "label given"
    else:
        n = len(m["labels_true"])
        lab = f"labels {round(m['label_acc'] * n)}/{n} ({m['label_mode']})"
        if n > 1 and m.get("label_acc_matched") is not None:
            lab += f", {round(m['label_acc_matched'] * n)}/{n} on the matched images"
    return (f"PSNR {m['psnr']:.2f} dB | SSIM {m['ssim']:.4f} | LPIPS {lp} | L_R {m['final_loss']:.3e} | "
            f"{lab} | {m['iterations']} it ({m['stop_reason']}) | {m['wall_s']:.1f} s | d={m['d']} b={m['b']} | {folder}")


def cmd_run(a) -> int:
    cfg = config_from_args(a)
    m, folder = run_attack(cfg, out=a.out, progress=not a.quiet, with_lpips=not a.no_lpips)
    print(summary_line(m, folder))
    # a note when the run diverged, its loss rose, or a match is not unique; not for the ordinary stops
    if m["message"] and (m["stop_reason"] not in ("tolerance", "stalled") or not m["unique"]):
        print(f"note: {m['message']}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="attack one (sketched) gradient and write a run folder",
                       description="Reconstruct private images from the (sketched) gradient a client sends; writes "
                                   "config.json, metrics.json, trace.csv, reconstruction.png, convergence.png.")
    groups = add_arguments(p)
    g = groups["output"]
    g.add_argument("--out", default=None, help="run folder (default: results/runs/<timestamp>-<model>-<sketch>-<dataset>[-<defense>]/)")
    g.add_argument("--no-lpips", action="store_true", help="skip LPIPS (recorded as null with that reason)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)
