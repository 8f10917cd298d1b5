"""The imprint block's numbers that docs/attacks/imprint.md quotes besides its table.

Prints (1) how far the block of 128 bins (the default ``random`` query) moves the values of the embedded photos and
digits, (2) ||g_rest|| / ||g_block|| for ResNet-18 behind the block (16 photos, 128 bins; 8 photos, 32 bins), and
(3) how many distinct rows the SRHT of the table's sketch rows (seed 1) has on the block's columns
(:func:`leakattack.sketch.srht.prefix_rows`), against the block's K (m + 1) numbers.

    python scripts/imprint_block_facts.py
"""

from __future__ import annotations

import argparse

import torch

import targets
from leakattack.attacks import get_attack
from leakattack.attacks.imprint import _block_slices
from leakattack.data import get_dataset
from leakattack.script import script_main
from leakattack.sketch.srht import prefix_rows
from targets.models.imprint import imprint_block


def imprinted(model: str, data, bins: int):
    victim = targets.get_model(model, in_shape=data.in_shape, seed=0, bn_mode="train")
    get_attack("imprint", bins=bins).modify(victim, data)
    return victim, imprint_block(victim.model)


def main() -> None:
    for name, model in (("photos", "resnet18"), ("digits", "lenet")):
        data = get_dataset(name)
        _, block = imprinted(model, data, 128)
        with torch.no_grad():
            moved = (block(data.images) - data.images).abs().amax((1, 2, 3))
        print(f"{name}, 128 bins: the block moves a value by at most {float(moved.max()):.2g} "
              f"(median over the images {float(moved.median()):.2g})")
    photos = get_dataset("photos")
    for batch, bins in ((16, 128), (8, 32)):
        victim, block = imprinted("resnet18", photos, bins)
        g = targets.flat_gradient(victim, photos.images[:batch], photos.labels[:batch]).double()
        w, b = _block_slices(victim, block)
        inside = torch.zeros(g.numel(), dtype=torch.bool)
        inside[w] = inside[b] = True
        print(f"resnet18, {batch} photos, {bins} bins: ||g_rest|| / ||g_block|| = "
              f"{float(g[~inside].norm() / g[inside].norm()):.2g}")
    d0, m1 = targets.get_model("resnet18", seed=0).d, 3 * 32 * 32 + 1
    for bins, ratio in ((128, 0.5), (32, 0.1), (32, 0.01), (16, 0.01), (128, 0.01)):
        n = bins * m1
        d = d0 + n
        b = int(ratio * d)
        print(f"srht b/d = {ratio}, {bins} bins: b = {b:,}, the block's {n:,} columns meet "
              f"{prefix_rows(d, b, 1, n):,} distinct rows")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    script_main(main)
