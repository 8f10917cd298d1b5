"""The images a baseline scores: the data set's mean image (or a constant grey one) shaped like the truth."""

from __future__ import annotations

import torch

#: the mean image averages at most this many images of the data set, evenly spaced (a folder set reads each file)
MEAN_IMAGE_SAMPLE = 256
#: the constant image scored where no data set mean applies
GREY_LEVEL = 0.5


def mean_image(dataset, like: torch.Tensor) -> tuple[torch.Tensor, str]:
    """(the data set's mean image repeated to the shape of ``like`` (B, C, H, W), what it is, in words).

    The mean is over at most :data:`MEAN_IMAGE_SAMPLE` images, evenly spaced
    over the set.  A constant grey image (:data:`GREY_LEVEL`) stands in where
    the set has no images of the truth's shape, or where its images are the
    truth itself (a message file's truth): its mean would be made of the answer.
    """
    shape = tuple(like.shape[1:])
    n = 0 if dataset is None else len(dataset)
    if n == 0 or tuple(dataset.in_shape) != shape or _is_the_truth(dataset, like):
        return torch.full_like(like, GREY_LEVEL), f"a constant {GREY_LEVEL:g} grey image (no data set mean applies)"
    k = min(n, MEAN_IMAGE_SAMPLE)
    positions = torch.linspace(0, n - 1, k).round().long().unique()
    images, _ = dataset.rows(positions)
    mean = images.to(dtype=torch.float64).mean(0).to(device=like.device, dtype=like.dtype)
    what = f"the mean of {'all' if positions.numel() == n else f'{positions.numel()} of the'} {n} images of " \
           f"{dataset.name}"
    return mean.unsqueeze(0).expand_as(like).clone(), what


def _is_the_truth(dataset, like: torch.Tensor) -> bool:
    """Whether the set holds exactly the attacked images (then its mean is not knowledge an attacker has)."""
    if len(dataset) != like.shape[0]:
        return False
    images, _ = dataset.rows(slice(0, len(dataset)))
    return bool(torch.equal(images.to(device=like.device, dtype=like.dtype), like))


__all__ = ["MEAN_IMAGE_SAMPLE", "GREY_LEVEL", "mean_image"]
