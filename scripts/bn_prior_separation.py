"""How well the bn prior tells real images from noise, by batch size: R_BN at batches of photos against noise.

R_BN (``leakattack.attacks.priors.bn_statistics_distance``: the norms of the
per-channel mean and variance differences at every BatchNorm input, against the
layers' running statistics) at random batches of B embedded photos and at batches
of B seeded noise images (N(0.5, 0.25²) clipped to [0, 1]), for B = 1, 3, 8, 16:
the medians over ``--draws`` batches and their ratio.  A prior helps an attack
only where the truth scores well below what the attack starts from; the victim
is a model with running statistics (e.g. ``scripts/train_photo_victim.py``'s).

    python scripts/bn_prior_separation.py --weights resnet20_photos.pt [--model resnet20] [--draws 10]
"""

from __future__ import annotations

import argparse

import torch

import targets
from leakattack.attacks.priors import bn_statistics_distance
from leakattack.data import get_dataset
from targets.victim import batchnorm_input_moments, batchnorm_layers
from targets.weights import load_weights

SIZES = (1, 3, 8, 16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True, help="state_dict with BatchNorm running statistics")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--draws", type=int, default=10, help="batches per size and kind")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = get_dataset("photos")
    victim = load_weights(targets.get_model(a.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=0,
                                            bn_mode="eval"), a.weights)
    layers = batchnorm_layers(victim.model)
    running = [(m.running_mean, m.running_var) for m in layers]
    images = ds.images.to(victim.dtype)
    gen = torch.Generator().manual_seed(0)

    def r_bn(x: torch.Tensor) -> float:
        with torch.no_grad():
            return float(bn_statistics_distance(batchnorm_input_moments(victim.model, x), running))

    print(f"{a.model}, weights {a.weights}: R_BN, median over {a.draws} batches")
    print("| B | photos | noise | noise / photos |\n|---|---|---|---|")
    for size in SIZES:
        real = torch.tensor([r_bn(images[torch.randperm(len(images), generator=gen)[:size]])
                             for _ in range(a.draws)]).median()
        noise = torch.tensor([r_bn((0.5 + 0.25 * torch.randn(size, *ds.in_shape, generator=gen)).clamp(0, 1)
                                   .to(victim.dtype)) for _ in range(a.draws)]).median()
        print(f"| {size} | {float(real):.0f} | {float(noise):.0f} | {float(noise / real):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
