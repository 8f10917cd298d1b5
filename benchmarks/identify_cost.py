"""What image identifiability adds to a run: both scores against a bare PyTorch loop of the same work.

A run whose batch was drawn from a data set ranks its truth among the set's images by pixel distance and by the
victim's features (``leakattack.metrics.identification`` and ``feature_identification``, docs/runs.md).  The feature
score dominates: one eval-mode forward pass of the candidates and of the reconstruction and baselines.  The floor is
a bare loop written here: the same images through ``model`` in eval mode without gradients, in batches of the same
size, and ``torch.cdist`` of the flattened images to the set's.

    python benchmarks/identify_cost.py [--models resnet101 vit_b_16] [--image-size 224] [--rounds 3]

Per victim: the median seconds of the two scores and of the floor over ``--rounds`` alternating rounds (one
untimed round first), their spread, and the ratio.  The victim is built at its random weights (seed 0; the features
are the head's inputs, whatever the head holds); the reconstruction and the two baselines are three seeded
random images, the set the embedded photos at ``--image-size``.  Take timings alone (``flock /tmp/timing.lock``).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import targets
from leakattack.data import get_dataset
from leakattack.metrics import feature_identification, identification
from leakattack.metrics.identify import FEATURE_CHUNK
from leakattack.script import count, one_of, parser, script_main


def floor(model, images: torch.Tensor, others: torch.Tensor) -> None:
    """The bare work of both scores: the eval-mode forward passes and the pixel distances."""
    model.eval()
    with torch.no_grad():
        for batch in (images, others):
            for start in range(0, batch.shape[0], FEATURE_CHUNK):
                model(batch[start:start + FEATURE_CHUNK])
        torch.cdist(images.flatten(1).double(), others.flatten(1).double())


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--models", nargs="+", type=one_of(targets.list_models, "model"), default=["resnet101", "vit_b_16"])
    ap.add_argument("--image-size", type=count, default=224)
    ap.add_argument("--rounds", type=count, default=3)
    a = ap.parse_args()
    photos = get_dataset("photos", image_size=a.image_size)
    g = torch.Generator().manual_seed(0)
    recon, start, mean = (torch.rand((1, *photos.in_shape), generator=g) for _ in range(3))
    truth = photos.images[:1]
    # every model is built before any is timed: one that refuses the image size does so before the measurements
    victims = {name: targets.get_model(name, num_classes=10, in_shape=photos.in_shape, seed=0) for name in a.models}
    print(f"{torch.get_num_threads()} thread(s), load {os.getloadavg()[0]:.1f}; {len(photos)} photos at "
          f"{a.image_size} px; medians over {a.rounds} rounds")
    for name, victim in victims.items():

        def ours():
            identification(recon, {"start": start, "mean": mean}, truth, photos, [0])
            feature_identification(victim, recon, {"start": start, "mean": mean}, truth, photos, [0])

        def bare():
            floor(victim.model, torch.cat([recon, start, mean]), photos.images)

        times: dict[str, list[float]] = {"ours": [], "bare": []}
        for r in range(a.rounds + 1):
            for label, fn in (("ours", ours), ("bare", bare)):
                t0 = time.perf_counter()
                fn()
                if r:  # the first round warms up
                    times[label].append(time.perf_counter() - t0)
        o, b = statistics.median(times["ours"]), statistics.median(times["bare"])
        print(f"{name}: identifiability {o:.2f} s ({min(times['ours']):.2f}-{max(times['ours']):.2f}), bare loop "
              f"{b:.2f} s ({min(times['bare']):.2f}-{max(times['bare']):.2f}): x{o / b:.2f}")


if __name__ == "__main__":
    script_main(main)
