"""Label readings of a clipped message, as the gradient itself and at the scale fitted by the labels' integrality.

A clip sends g min(1, C / ||g||): an attacker who knows that a clip was applied does not know ||g||, so the message
is the gradient times an unknown factor.  For each batch size and clip, over ``--trials`` batches of the data set
drawn at random (labels may repeat), the share of the labels each count rule reads right (as multisets) read as
the gradient itself and after ``labels.fitted_scale`` (``recover_labels_by_rule(..., scale_unknown=True)``), and
the median of the factor fitted (``labels.message_scale``) times the true one, min(1, C / ||g||) (1: exact).
LeNet at its seed-0 weights, float64, unsketched or through SRHT at ``--ratio``.  docs/attacks/labels.md quotes
its output.

    python scripts/label_scale.py [--batch-sizes 1,4,8,16] [--clips 1,1e-3] [--trials 5] [--ratio 1]
"""

from __future__ import annotations

import collections
import statistics

import torch

import defenses
import targets
from leakattack import Channel, ThreatModel, get_batch, get_dataset, get_sketch, observe
from leakattack.attacks import labels
from leakattack.script import count, counts, parser, positives, script_main

RULES = ("pooled", "llg-star", "bias", "ilrg")


def share(read: list[int], true: list[int]) -> float:
    """The labels read right, as multisets."""
    return sum((collections.Counter(read) & collections.Counter(true)).values()) / len(true)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--batch-sizes", type=counts, default="1,4,8,16")
    ap.add_argument("--clips", type=positives, default="1,1e-3",
                    help="clip thresholds C (the default victim's ||g|| is about 24)")
    ap.add_argument("--trials", type=count, default=5)
    ap.add_argument("--ratio", type=float, default=1.0, help="SRHT b/d (1: unsketched)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    digits = get_dataset("digits")
    victim = targets.get_model("lenet", in_shape=digits.in_shape, num_classes=10, seed=0).to(dtype=torch.float64)
    sketch = get_sketch("none" if a.ratio >= 1 else "srht", victim.d, int(round(victim.d * min(a.ratio, 1.0))),
                        seed=1)
    gen = torch.Generator().manual_seed(0)
    print(f"lenet, digits, {'unsketched' if a.ratio >= 1 else f'srht b/d = {a.ratio:g}'}, {a.trials} batches each: "
          "labels read right, as the gradient / at the fitted scale; the fitted factor against the true one")
    print("| B | clip C | " + " | ".join(RULES) + " | factor fitted / true (median) |")
    print("|---|---|" + "---|" * len(RULES) + "---|")
    for B in a.batch_sizes:
        for C in a.clips:
            plain: dict[str, list[float]] = {r: [] for r in RULES}
            fitted: dict[str, list[float]] = {r: [] for r in RULES}
            ratios = []
            for _ in range(a.trials):
                index = int(torch.randint(len(digits.images), (1,), generator=gen))
                x, y = get_batch(digits, index, batch_size=B, draw="random")
                true = sorted(y.tolist())
                obs = observe(victim, x.double(), y, Channel(sketch, defenses.build(f"clip:C={C:g}")),
                              ThreatModel(knows_clip=True))
                for r, v in labels.recover_labels_by_rule(victim, sketch, obs.y, B, rules=RULES).items():
                    plain[r].append(share(v.tolist(), true))
                for r, v in labels.recover_labels_by_rule(victim, sketch, obs.y, B, rules=RULES,
                                                          scale_unknown=True).items():
                    fitted[r].append(share(v.tolist(), true))
                read = labels.read_head(victim, sketch, obs.y)
                stats = labels.probe(victim, 64, obs.y)
                t = labels.message_scale(victim, read, B, stats)
                ratios.append(t * min(1.0, C / obs.g_norm))  # the true factor is min(1, C / ||g||)
            cells = [f"{statistics.mean(plain[r]):.2f} / {statistics.mean(fitted[r]):.2f}" for r in RULES]
            print(f"| {B} | {C:g} | " + " | ".join(cells) + f" | {statistics.median(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    script_main(main)
