"""BatchNorm running statistics from real images, for the ``bn`` prior's measurement in docs/attack.md.

Builds a registered model with the run's seed (BatchNorm tracking statistics),
passes the embedded photos FIRST..LAST-1 through it once in train mode as one
batch with a cumulative average (momentum None, so the running statistics are
that batch's mean and unbiased variance), and saves the state_dict for
``leakattack run --weights``.  The attacked photo is left out of the range.

    python scripts/bn_running_stats.py --out resnet20_bn_photos1-49.pt [--model resnet20] [--first 1] [--last 50]
"""

from __future__ import annotations

import torch

import targets
from leakattack.data import get_dataset
from leakattack.script import count, index, one_of, out_file, parser, script_main, seed


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--out", type=out_file, required=True, help="state_dict file to write (its folder must exist)")
    ap.add_argument("--model", type=one_of(targets.list_models, "model", files=True), default="resnet20")
    ap.add_argument("--first", type=index, default=1, help="the first photo")
    ap.add_argument("--last", type=count, default=50, help="one past the last photo")
    ap.add_argument("--seed", type=seed, default=0, help="model seed (leakattack run's --seed)")
    a = ap.parse_args()
    ds = get_dataset("photos")
    if not 0 <= a.first < a.last <= len(ds.images):
        ap.error(f"--first {a.first} --last {a.last}: give 0 <= first < last <= {len(ds.images)} "
                 "(photos first..last-1)")
    victim = targets.get_model(a.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=a.seed,
                               bn_mode="eval")
    model = victim.model
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.momentum = None
        m.reset_running_stats()
    model.train()
    with torch.no_grad():
        model(ds.images[a.first:a.last].to(victim.dtype))
    torch.save(model.state_dict(), a.out)
    print(f"{len(norms)} BatchNorm layers, statistics of photos {a.first}..{a.last - 1} -> {a.out}")
    return 0


if __name__ == "__main__":
    script_main(main)
