"""How well the bn prior tells real images from noise, by batch size: R_BN at batches of photos against noise.

R_BN (``leakattack.attacks.priors.bn_statistics_distance``: the norms of the
per-channel mean and variance differences at every BatchNorm input, against the
layers' running statistics) at random batches of B embedded photos and at batches
of B seeded noise images (N(0.5, 0.25²) clipped to [0, 1]), for B = 1, 3, 8, 16:
the medians over ``--draws`` batches and their ratio, for R_BN and for its mean
term alone (the norms of the mean differences: a batch's mean estimates the
running mean whatever its size, where one image's variance is its own, not the
data set's).  Last, both at the data set's mean image.  A prior helps an attack
only where the truth scores well below what the attack starts from; the victim
is a model with running statistics (e.g. ``scripts/train_photo_victim.py``'s).

    python scripts/bn_prior_separation.py --weights resnet20_photos.pt [--model resnet20] [--draws 10]
"""

from __future__ import annotations

import torch

import targets
from leakattack.attacks.priors import bn_statistics_distance
from leakattack.data import get_dataset
from leakattack.script import count, parser, script_main
from targets.victim import batchnorm_input_moments, batchnorm_layers
from targets.weights import load_weights

SIZES = (1, 3, 8, 16)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--weights", required=True, help="state_dict with BatchNorm running statistics")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--draws", type=count, default=10, help="batches per size and kind")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = get_dataset("photos")
    victim = load_weights(targets.get_model(a.model, num_classes=ds.num_classes, in_shape=ds.in_shape, seed=0,
                                            bn_mode="eval"), a.weights)
    layers = batchnorm_layers(victim.model)
    running = [(m.running_mean, m.running_var) for m in layers]
    images = ds.images.to(victim.dtype)
    gen = torch.Generator().manual_seed(0)

    def r_bn(x: torch.Tensor) -> tuple[float, float]:
        """R_BN at x, and its mean term alone."""
        with torch.no_grad():
            moments = batchnorm_input_moments(victim.model, x)
        means = [(mu, torch.zeros_like(mu)) for mu, _ in moments]
        return (float(bn_statistics_distance(moments, running)),
                float(bn_statistics_distance(means, [(m, torch.zeros_like(m)) for m, _ in running])))

    print(f"{a.model}, weights {a.weights}: R_BN and its mean term, medians over {a.draws} batches")
    print("| B | R_BN, photos | R_BN, noise | noise / photos | mean term, photos | mean term, noise | noise / photos |")
    print("|---|---|---|---|---|---|---|")
    for size in SIZES:
        real = torch.tensor([r_bn(images[torch.randperm(len(images), generator=gen)[:size]])
                             for _ in range(a.draws)]).median(0).values
        noise = torch.tensor([r_bn((0.5 + 0.25 * torch.randn(size, *ds.in_shape, generator=gen)).clamp(0, 1)
                                   .to(victim.dtype)) for _ in range(a.draws)]).median(0).values
        print(f"| {size} | {float(real[0]):.0f} | {float(noise[0]):.0f} | {float(noise[0] / real[0]):.2f} "
              f"| {float(real[1]):.0f} | {float(noise[1]):.0f} | {float(noise[1] / real[1]):.2f} |")
    whole, mean_term = r_bn(images.mean(0, keepdim=True))
    print(f"the data set's mean image (B = 1): R_BN {whole:.0f}, mean term {mean_term:.0f}")
    return 0


if __name__ == "__main__":
    script_main(main)
