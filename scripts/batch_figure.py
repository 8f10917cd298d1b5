"""Reconstructions of one batch side by side, each matched to the photos as leakattack scores a batch
(docs/trained-victims.md#the-spread-between-starts).

    python scripts/batch_figure.py --image-index 0 --batch-size 4 --out fig.png \\
        "leakattack seed 0=RUN/reconstruction.pt" "breaching seed 0=br.pt" ...

Each LABEL=FILE is a run folder's ``reconstruction.pt`` (``{'images': ...}``) or a tensor (B, C, H, W) in
[0, 1], as ``scripts/breaching_ig.py --save`` writes.  The first row holds photos I .. I+B-1 of the embedded
set (or the batch ``--batch-draw class|random`` takes, as ``leakattack run`` does); every other row one
reconstruction, its images in the order leakattack's matching assigns them to the photos, each titled with its
PSNR.  Prints the same PSNRs.
"""

from pathlib import Path

import torch

from leakattack import get_batch, get_dataset
from leakattack.data import BATCH_DRAWS, batch_positions
from leakattack.figures.common import plt, save, to_hwc
from leakattack.metrics import match
from leakattack.metrics.image import psnr
from leakattack.script import count, index, out_file, parser, script_main


def load(path: str) -> torch.Tensor:
    """A reconstruction file's images (B, C, H, W), clamped to [0, 1]."""
    x = torch.load(path, map_location="cpu")
    return (x["images"] if isinstance(x, dict) else x).float().clamp(0, 1)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("rows", nargs="+", metavar="LABEL=FILE")
    ap.add_argument("--image-index", type=index, default=0, help="the batch's first photo")
    ap.add_argument("--batch-size", type=count, default=4)
    ap.add_argument("--batch-draw", default="consecutive", choices=BATCH_DRAWS, help="as leakattack run's")
    ap.add_argument("--out", type=out_file, required=True, help="the figure's file (.png)")
    a = ap.parse_args()
    photos = get_dataset("photos")
    truth = get_batch(photos, a.image_index, a.batch_size, a.batch_draw)[0].float()
    names = batch_positions(photos, a.image_index, a.batch_size, a.batch_draw).tolist()
    rows = [("photos", truth)]
    for spec in a.rows:
        label, _, path = spec.partition("=")
        if not label or not Path(path).is_file():
            ap.error(f"{spec!r} is not LABEL=FILE with an existing file")
        x = load(path)
        if x.shape != truth.shape:
            ap.error(f"{path} holds images of shape {tuple(x.shape)}, and photos {names} are {tuple(truth.shape)}")
        rows.append((label, x[match(x, truth)]))
    figure(rows, names, a.out)


def figure(rows: list, names: list, out: Path) -> None:
    """One row per (label, images), the first the truth and the others titled with each image's PSNR against it
    (printed too), one column per photo of ``names``."""
    truth, n = rows[0][1], len(names)
    fig, axes = plt.subplots(len(rows), n, figsize=(1.5 * n, 1.6 * len(rows)), squeeze=False)
    for r, (label, x) in enumerate(rows):
        each = psnr(x, truth).tolist()
        if r:
            print(f"{label}: " + ", ".join(f"{p:.2f}" for p in each) + f" dB (mean {sum(each) / len(each):.2f})")
        for j in range(n):
            ax = axes[r][j]
            ax.imshow(to_hwc(x[j]), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{each[j]:.1f} dB" if r else f"photo {names[j]}", fontsize=7)
        axes[r][0].set_ylabel(label, fontsize=7)
    save(fig, out)


if __name__ == "__main__":
    script_main(main)
