"""Offline image data sets for the attacks: real photographs and digits by default.

Built-in sets (no download, no network):

* ``"photos"`` -- 3x32x32 crops of ten photographs bundled with scikit-image
  (``skimage.data``), one class per photograph.  Licence statements, as given in
  the ``skimage.data`` docstrings of scikit-image 0.26:

  - astronaut: NASA Great Images database, "No known copyright restrictions,
    released into the public domain."
  - chelsea: "No copyright restrictions.  CC0 by the photographer (Stefan van der Walt)."
  - coffee: "No copyright restrictions.  CC0 by the photographer (Rachel Michetti)."
  - rocket: captured by SpaceX and released in the public domain.
  - hubble_deep_field: captured by NASA, "may be freely used in the public domain".
  - immunohistochemistry: CMMI, "No known copyright restrictions."
  - retina: Wikimedia Commons, "Creative Commons CC0 1.0 Universal Public Domain
    Dedication."
  - camera: "No copyright restrictions. CC0 by the photographer (Lav Varshney)."
  - coins: Brooklyn Museum Collection, "No known copyright restrictions."
  - moon: its docstring states no licence; it ships inside scikit-image, whose
    LICENSE.txt covers all files ("Files: *") under BSD-3-Clause.

  (``cat`` is the same photograph as ``chelsea`` and is not used twice.)
* ``"digits"`` -- scikit-learn's bundled handwritten digits (``load_digits``:
  1797 images, 8x8, grey levels 0..16; UCI ML hand-written digits data set),
  scaled to [0, 1] and resized bilinearly to 1x28x28.

Downloadable sets (``torchvision.datasets``, read from ``root``): ``"mnist"``,
``"cifar10"``, ``"cifar100"``.

All images are float32 tensors (N, C, H, W) in [0, 1], never normalised.
Loaded sets are cached (``functools.lru_cache``): repeated loads return the same
tensors, so treat them as read-only; :func:`get_batch` returns clones.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


class DataError(ValueError):
    """A data-set request the user can fix (unknown name, missing files, bad index)."""


_DATASETS = ["photos", "digits", "mnist", "cifar10", "cifar100"]

#: The ten photographs of the "photos" set, in class order; grey ones are repeated to RGB.
PHOTO_NAMES = [
    "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
    "immunohistochemistry", "retina", "camera", "coins", "moon",
]

#: Crop 0 of each photo, as (top, left, side) in pixels of the original image;
#: photos not listed use their largest centred square.  The astronaut's crop is
#: her face, so that image index 0 is a recognisable, detailed image.
_HEADLINE_BOX = {"astronaut": (20, 130, 200)}

#: Crops 1..4: squares of this fraction of the centred square, at its four corners.
_CORNER_FRACTION = 0.6
_CROPS_PER_PHOTO = 5
_PHOTO_SIZE = 32
_DIGIT_SIZE = 28


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


def list_datasets() -> list:
    """Names accepted by :func:`load_dataset`."""
    return list(_DATASETS)


def _photo_boxes(name: str, h: int, w: int) -> list:
    """The five (top, left, side) crop boxes of one photo (see module docstring)."""
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    boxes = [_HEADLINE_BOX.get(name, (top, left, side))]
    s = int(round(_CORNER_FRACTION * side))
    for dy, dx in [(0, 0), (0, side - s), (side - s, 0), (side - s, side - s)]:
        boxes.append((top + dy, left + dx, s))
    return boxes


def _load_photos() -> ImageSet:
    """50 deterministic 3x32x32 crops of ten skimage.data photographs (interleaved by class)."""
    import skimage.data
    from skimage.transform import resize

    per_photo = []
    for name in PHOTO_NAMES:
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.float64) / 255.0
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        img = img[:, :, :3]
        crops = []
        for top, left, side in _photo_boxes(name, *img.shape[:2]):
            patch = img[top:top + side, left:left + side]
            small = resize(patch, (_PHOTO_SIZE, _PHOTO_SIZE), order=1,
                           anti_aliasing=True, mode="reflect")
            crops.append(np.clip(small, 0.0, 1.0))
        per_photo.append(crops)
    # Interleave: index = crop * 10 + class, so consecutive indices are distinct photos.
    images, labels = [], []
    for crop in range(_CROPS_PER_PHOTO):
        for cls in range(len(PHOTO_NAMES)):
            images.append(per_photo[cls][crop])
            labels.append(cls)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous().float()
    return ImageSet(
        name="photos", images=x, labels=torch.tensor(labels, dtype=torch.long),
        num_classes=len(PHOTO_NAMES), class_names=list(PHOTO_NAMES),
        source="scikit-image sample photographs (skimage.data); see leakattack/data.py for licences",
    )


def _load_digits() -> ImageSet:
    """scikit-learn's 8x8 digits scaled to [0, 1] and resized bilinearly to 1x28x28."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.from_numpy(np.asarray(bunch.images, dtype=np.float32) / 16.0).unsqueeze(1)
    x = torch.nn.functional.interpolate(x, size=(_DIGIT_SIZE, _DIGIT_SIZE), mode="bilinear",
                                        align_corners=False).clamp_(0.0, 1.0).contiguous()
    return ImageSet(
        name="digits", images=x, labels=torch.from_numpy(np.asarray(bunch.target)).long(),
        num_classes=10, class_names=[str(i) for i in range(10)],
        source="scikit-learn load_digits (UCI ML hand-written digits), resized 8x8 -> 28x28",
    )


_TORCHVISION = {"mnist": "MNIST", "cifar10": "CIFAR10", "cifar100": "CIFAR100"}


def _load_torchvision(name: str, root, download: bool, train: bool) -> ImageSet:
    """A torchvision data set from ``root``, converted to float tensors in [0, 1]."""
    import torchvision

    if root is None:
        raise DataError(f"no data root given for {name}: pass --download with --data-root DIR, "
                        f"or point --data-root at a folder containing {name}")
    cls = getattr(torchvision.datasets, _TORCHVISION[name])
    try:
        ds = cls(root=str(root), train=train, download=download)
    except (RuntimeError, OSError) as exc:  # torchvision: "Dataset not found ..."; network errors
        if download:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DataError(f"could not download {name} into data root {root} ({reason}): fetch it "
                            f"elsewhere and point --data-root at a folder containing it") from exc
        raise DataError(f"{name} not found under data root {root}: pass --download or point "
                        f"--data-root at a folder containing it") from exc
    data = ds.data if isinstance(ds.data, torch.Tensor) else torch.from_numpy(np.asarray(ds.data))
    x = data.float().div_(255.0)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    labels = torch.as_tensor(np.asarray(ds.targets), dtype=torch.long)
    split = "train" if train else "test"
    return ImageSet(name=name, images=x.contiguous(), labels=labels,
                    num_classes=len(ds.classes), class_names=list(ds.classes),
                    source=f"torchvision.datasets.{_TORCHVISION[name]} ({split}) at {root}")


@functools.lru_cache(maxsize=6)
def _load_cached(name: str, root, download: bool, train: bool) -> ImageSet:
    """Cached loader behind :func:`load_dataset` (arguments already normalised)."""
    if name == "photos":
        return _load_photos()
    if name == "digits":
        return _load_digits()
    return _load_torchvision(name, root, download, train)


def load_dataset(name: str, root=None, download: bool = False, train: bool = True) -> ImageSet:
    """Load a data set by name (see :func:`list_datasets`); ``root``/``download``/``train`` only affect torchvision sets."""
    key = str(name).lower()
    if key not in _DATASETS:
        raise DataError(f"unknown dataset {name!r}: choose one of {', '.join(_DATASETS)}")
    if key in ("photos", "digits"):
        return _load_cached(key, None, False, True)
    root_key = None if root is None else str(Path(root).expanduser().resolve())
    return _load_cached(key, root_key, bool(download), bool(train))


def get_batch(ds: ImageSet, index: int, batch_size: int = 1):
    """Images and labels index .. index+batch_size-1 of ``ds``, as clones."""
    n = len(ds)
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise DataError(f"image index must be an integer, got {index!r}")
    if (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
            or batch_size < 1):
        raise DataError(f"batch size must be a positive integer, got {batch_size!r}")
    index, batch_size = int(index), int(batch_size)
    if index < 0 or index >= n:
        raise DataError(f"image index {index} out of range: dataset {ds.name} has {n} images")
    if index + batch_size > n:
        raise DataError(f"images {index}..{index + batch_size - 1} out of range: "
                        f"dataset {ds.name} has {n} images")
    sl = slice(index, index + batch_size)
    return ds.images[sl].clone(), ds.labels[sl].clone()


def train_test_split(ds: ImageSet, test_fraction: float = 0.2, seed: int = 0):
    """Seeded split stratified by class: round(test_fraction * N) test images, split over classes by largest remainder."""
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
        t = torch.from_numpy(idx).long()
        parts.append(ImageSet(
            name=ds.name, images=ds.images[t], labels=ds.labels[t], num_classes=ds.num_classes,
            class_names=list(ds.class_names),
            source=f"{ds.source}; {tag} part of a stratified split "
                   f"(test_fraction={test_fraction}, seed={seed})",
        ))
    return parts[0], parts[1]
