"""``leakattack run``: attack one (sketched) gradient or protocol message and write a run folder."""

from __future__ import annotations

import sys

from ..config.arguments import config_from_args
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
    unused = cfg.unused_options()
    if unused:
        print(f"note: the {cfg.attack} attack solves in closed form and does not read {', '.join(unused)}",
              file=sys.stderr)
    m, folder = run_attack(cfg, out=a.out, progress=not a.quiet, with_lpips=not a.no_lpips)
    print(summary_line(m, folder))
    # a note when the run diverged, its loss rose, or a match is not unique; not for the ordinary stops
    if m["message"] and (m["stop_reason"] not in ("tolerance", "stalled") or not m["unique"]):
        print(f"note: {m['message']}", file=sys.stderr)
    if "seed_search" in m:
        print(f"note: {seed_search_line(m['seed_search'])}", file=sys.stderr)
    return 0


def seed_search_line(s: dict) -> str:
    """What a seed search found, in one line."""
    truth = "" if "found" not in s else \
        ", the client's seed" if s["found"] else f", not the client's seed (which ranked {s['true_seed_rank'] + 1})"
    return (f"seed search: seed {s['found_seed']} of {s['candidates']} candidates{truth}, statistic "
            f"{s['statistic_best']:.3g} against {s['statistic_runner_up']:.3g} for the runner-up (about 1 for a wrong "
            f"seed), {s['wall_s']:.1f} s")
