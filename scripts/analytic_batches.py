"""The analytic attack on batches: how many examples it recovers exactly.

mlp with a hidden layer of width H on the embedded digits (m = 784 pixels per image), float64,
one thread.  For each (B, H), three disjoint batches (images 0..3B-1); unsketched (b = d) and
through srht with b = 1.5x the low-rank unknowns B (H + 785 + 10 + H) = B (2H + 795) where that fits in a
few seconds.  ``--act relu`` (the default) measures the one-active-unit separation; a smooth
activation (``--act sigmoid``, mlp's own, ``tanh``, ``softplus``, ``gelu``) the model's solve in the
first block's row space.  Prints one markdown row per setting: examples recovered exactly (PSNR > 80 dB after
one-to-one matching) and the lowest PSNR, examples the attack says it recovered (its separated count; for the solve,
all B when it reached its tolerance, else none), labels right on the matched examples, the
attack's wall time and, for the solve through the sketch, its relative residual over the block
fit's (the spread over the batches); then the solve with one wrong label.

    python scripts/analytic_batches.py [--act relu|sigmoid|tanh|softplus|gelu] [--quick] [--only-sketched]
                                       [--unsketched BxH ...]
"""

from __future__ import annotations

import argparse
import time

import torch

import targets
from leakattack import metrics
from leakattack.attacks import get_attack
from leakattack.channel import Channel
from leakattack.data import get_dataset
from leakattack.observation import ThreatModel, observe
from leakattack.script import count, parser, script_main
from leakattack.sketch import make_sketch

EXACT_DB = 80.0


def one(data, B, H, start, sketch, act):
    x, labels = data.images[start:start + B].double(), data.labels[start:start + B]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, act=act, hidden=H)
    victim = victim.to(dtype=torch.float64)
    low_rank = B * (H + 785 + 10 + H)  # two linear blocks, minus the bias entries fixed to 1
    b = victim.d if sketch == "none" else round(1.5 * low_rank)
    obs = observe(victim, x, labels, Channel(make_sketch(sketch, victim.d, b, seed=1)), ThreatModel())
    t0 = time.perf_counter()
    result = get_attack("analytic").reconstruct(obs)
    wall = time.perf_counter() - t0
    xh = result.x.clamp(0, 1)
    perm = metrics.match(xh, x)
    psnr = metrics.psnr(xh[perm], x)
    exact = int((psnr > EXACT_DB).sum())
    if "separated" in result.message:
        said = int(result.message.split(" of the batch")[0])
    else:
        said = B if result.stop_reason == "tolerance" else 0
    right = int((result.labels[perm] == labels).sum())
    solve = result.row_space_solve
    ratio = solve["residual"] / solve["fit"] if solve and solve["fit"] > 0 else None
    return exact, said, right, wall, b, victim.d, ratio, float(psnr.min())


def wrong_label(data, B, H, act) -> str:
    """The solve's verdict and relative residual when one of the batch's labels is wrong."""
    x, labels = data.images[:B].double(), data.labels[:B]
    victim = targets.get_model("mlp", in_shape=tuple(x.shape[1:]), seed=0, act=act, hidden=H).to(dtype=torch.float64)
    obs = observe(victim, x, labels, Channel(make_sketch("none", victim.d, victim.d, seed=1)),
                  ThreatModel(knows_labels=True))
    obs.labels = labels.clone()
    obs.labels[0] = (labels[0] + 1) % victim.num_classes
    result = get_attack("analytic", labels="given").reconstruct(obs)
    return f"{result.stop_reason}, relative residual {result.row_space_solve['residual']:.2f}"


def batch_by_width(text: str) -> tuple[int, int]:
    """An argparse type: ``BxH``, a batch size and a hidden width, both at least 1."""
    b, x, h = text.partition("x")
    if not x:
        raise argparse.ArgumentTypeError(f"{text!r} is not BxH (a batch size and a width, e.g. 64x256)")
    return count(b), count(h)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--act", default="relu", choices=["relu", "sigmoid", "tanh", "softplus", "gelu"],
                    help="mlp's hidden activation")
    ap.add_argument("--quick", action="store_true", help="one batch per setting, fewer settings")
    ap.add_argument("--only-sketched", action="store_true", help="the rows through srht alone")
    ap.add_argument("--unsketched", metavar="BxH", nargs="+", type=batch_by_width,
                    help="instead of the table: unsketched rows of these batch sizes and widths, e.g. 64x256")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = get_dataset("digits")
    repeats = 1 if args.quick else 3
    settings = [(B, H, "none") for H in (64, 256, 1024) for B in (2, 4, 8, 16, 32)]
    if args.only_sketched:
        settings = []
    if args.act == "relu":
        settings += [(B, 256, "srht") for B in (2, 4, 8)]
    else:
        settings += [(B, 256, "srht") for B in (2, 4, 8, 16)]
    if args.quick:
        settings = [(4, 64, "none"), (8, 256, "none"), (2, 64, "srht")]
    if args.unsketched:
        settings = [(b, h, "none") for b, h in args.unsketched]
    print(f"act = {args.act}")
    print("| sketch | B | H | b / d | exact (PSNR > 80 dB) | lowest PSNR (dB) | recovered (attack's count) "
          "| labels right | wall s | solve / fit residual |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for B, H, sketch in settings:
        rows = [one(data, B, H, r * B, sketch, args.act) for r in range(repeats)]
        n = B * repeats
        b, d = rows[0][4], rows[0][5]
        ratios = [r[6] for r in rows if r[6] is not None]
        spread = f"{min(ratios):.0f}-{max(ratios):.0f}" if ratios else "-"
        print(f"| {sketch} | {B} | {H} | {b / d:.3f} | {sum(r[0] for r in rows)}/{n} | {min(r[7] for r in rows):.1f} "
              f"| {sum(r[1] for r in rows)}/{n} | {sum(r[2] for r in rows)}/{n} | {max(r[3] for r in rows):.1f} "
              f"| {spread} |", flush=True)
    if args.act != "relu" and not args.unsketched:
        print("\none wrong label (labels given, the first one moved to the next class), unsketched, the first batch:")
        for B, H in ((4, 32), (8, 64), (16, 256)):
            print(f"B = {B}, H = {H}: {wrong_label(data, B, H, args.act)}", flush=True)


if __name__ == "__main__":
    script_main(main)
