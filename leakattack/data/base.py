"""What every data set is: an :class:`ImageSet`, its errors, batching and splitting.

All images are float32 tensors (N, C, H, W) in [0, 1], never normalised.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from leakattack.errors import UserError


class DataError(UserError):
    """A data-set request the user can fix (unknown name, missing files, bad index)."""


@dataclass(frozen=True)
class ImageSet:
    """Images (N, C, H, W) float32 in [0, 1] with integer labels and provenance."""

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    class_names: list
    source: str

    @property
    def in_shape(self) -> tuple:
        """Shape (C, H, W) of one image."""
        return tuple(self.images.shape[1:])

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def rows(self, index):
        """Images and labels at ``index`` (a slice or a tensor of positions), sharing memory with the set."""
        return self.images[index], self.labels[index]

    def subset(self, index: torch.Tensor, source: str) -> ImageSet:
        """The images at positions ``index`` (a LongTensor) as a set of the same kind, described by ``source``."""
        return ImageSet(name=self.name, images=self.images[index], labels=self.labels[index],
                        num_classes=self.num_classes, class_names=list(self.class_names), source=source)


#: how :func:`get_batch` takes a batch's other images (``--batch-draw``)
BATCH_DRAWS = ("consecutive", "class", "random")


def batch_positions(ds: ImageSet, index: int, batch_size: int, draw: str = "consecutive") -> torch.Tensor:
    """The positions of a batch of ``batch_size`` images with image ``index`` in it, in increasing order.

    ``consecutive``: images index .. index+batch_size-1.  ``class``: image index and the next batch_size-1 images of
    its class (after it, wrapping round the set): a client that holds one class, where every label repeats.
    ``random``: image index and batch_size-1 others drawn uniformly without replacement by a generator seeded with
    index, so labels repeat as often as the set's classes make them, and each index names one batch.
    """
    n = len(ds)
    if draw == "consecutive":
        if batch_size > n:
            raise DataError(f"a batch of {batch_size} images does not fit in dataset {ds.name} of {n} images")
        if index + batch_size > n:
            raise DataError(f"images {index}..{index + batch_size - 1} out of range: "
                            f"dataset {ds.name} has {n} images (the last batch of {batch_size} starts at image "
                            f"{n - batch_size})")
        return torch.arange(index, index + batch_size)
    if draw == "class":
        label = int(ds.labels[index])
        order = torch.cat([torch.arange(index, n), torch.arange(0, index)])
        same = order[ds.labels[order] == label]
        if len(same) < batch_size:
            named = f" ({ds.class_names[label]})" if 0 <= label < len(ds.class_names) else ""
            raise DataError(f"class {label}{named} of dataset {ds.name} has {len(same)} image"
                            f"{'' if len(same) == 1 else 's'}, fewer than the batch size {batch_size} that "
                            f"--batch-draw class takes from it")
        return same[:batch_size].sort().values
    if draw == "random":
        if batch_size > n:
            raise DataError(f"a batch of {batch_size} images does not fit in dataset {ds.name} of {n} images")
        others = torch.cat([torch.arange(0, index), torch.arange(index + 1, n)])
        picked = others[torch.randperm(n - 1, generator=torch.Generator().manual_seed(index))[:batch_size - 1]]
        return torch.cat([torch.tensor([index]), picked]).sort().values
    raise DataError(f"unknown batch draw {draw!r}; choose one of: {', '.join(BATCH_DRAWS)}")


def get_batch(ds: ImageSet, index: int, batch_size: int = 1, draw: str = "consecutive"):
    """Images and labels of the batch of ``batch_size`` images with image ``index`` in it (:func:`batch_positions`;
    by default images index .. index+batch_size-1), as clones.  ``ds`` is an ImageSet (a data set's name is one
    DataError sentence naming get_dataset)."""
    if not isinstance(ds, ImageSet):
        hint = f": load it first, get_batch(get_dataset({ds!r}), ...)" if isinstance(ds, str) else ""
        raise DataError(f"get_batch takes an ImageSet, got {type(ds).__name__} {ds!r:.40}{hint}")
    n = len(ds)
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise DataError(f"image index must be an integer, got {index!r}")
    if (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
            or batch_size < 1):
        raise DataError(f"batch size must be a positive integer, got {batch_size!r}")
    index, batch_size = int(index), int(batch_size)
    if index < 0 or index >= n:
        raise DataError(f"image index {index} out of range: dataset {ds.name} has {n} images")
    positions = batch_positions(ds, index, batch_size, draw)
    # a set kept on disk reads only these images
    x, y = ds.rows(slice(index, index + batch_size) if draw == "consecutive" else positions)
    return x.clone(), y.clone()


def train_test_split(ds: ImageSet, test_fraction: float = 0.2, seed: int = 0):
    """Seeded split stratified by class: round(test_fraction * N) test images, split over classes by largest
    remainder."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise DataError(f"test fraction must lie strictly between 0 and 1, got {test_fraction}")
    rng = np.random.default_rng(seed)
    labels = ds.labels.cpu().numpy()
    classes = np.unique(labels)
    sizes = np.array([np.sum(labels == c) for c in classes])
    # Largest-remainder allocation: the test part has round(test_fraction * N) images in total.
    quota = float(test_fraction) * sizes
    k = np.floor(quota).astype(int)
    extra = int(np.floor(float(test_fraction) * len(labels) + 0.5)) - int(k.sum())
    k[np.argsort(-(quota - k), kind="stable")[:max(extra, 0)]] += 1
    train_idx, test_idx = [], []
    for c, kc in zip(classes, k):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(idx.size)]
        test_idx.append(idx[:kc])
        train_idx.append(idx[kc:])
    parts = []
    for idx, tag in ((np.sort(np.concatenate(train_idx)), "train"),
                     (np.sort(np.concatenate(test_idx)), "test")):
        parts.append(ds.subset(torch.from_numpy(idx).long(),
                               f"{ds.source}; {tag} part of a stratified split "
                               f"(test_fraction={test_fraction}, seed={seed})"))
    return parts[0], parts[1]


#: how far outside [0, 1] images may reach (round-off of a resize or a colour conversion) before they are not taken
#: as images in [0, 1]
RANGE_SLACK = 1e-4


def outside_unit_range(x) -> tuple[float, float] | None:
    """(lowest, highest) value of images (a tensor) that reach outside [0, 1] by more than :data:`RANGE_SLACK`, else
    None."""
    x = x.detach()  # a tensor that requires grad (the caller's own leaf) is read as its values
    low, high = float(x.min()), float(x.max())
    return (low, high) if low < -RANGE_SLACK or high > 1 + RANGE_SLACK else None


__all__ = ["DataError", "ImageSet", "get_batch", "train_test_split", "RANGE_SLACK", "outside_unit_range"]
