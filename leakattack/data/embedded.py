"""The offline data sets shipped inside installed libraries: no download, no network.

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
"""

from __future__ import annotations

import gzip
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import torch

from leakattack.errors import SettingWarning

from .base import ImageSet

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
PHOTO_SIZE = 32
_DIGIT_SIZE = 28


def _photo_boxes(name: str, h: int, w: int) -> list:
    """The five (top, left, side) crop boxes of one photo (see module docstring)."""
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    boxes = [_HEADLINE_BOX.get(name, (top, left, side))]
    s = int(round(_CORNER_FRACTION * side))
    for dy, dx in [(0, 0), (0, side - s), (side - s, 0), (side - s, side - s)]:
        boxes.append((top + dy, left + dx, s))
    return boxes


def _mirror(index: np.ndarray, n: int) -> np.ndarray:
    """Indices folded into ``range(n)`` as numpy.pad's ``reflect`` (scipy.ndimage's ``mirror``) extends an axis."""
    if n == 1:
        return np.zeros_like(index)
    period = 2 * (n - 1)
    index = np.abs(index) % period
    return np.where(index >= n, period - index, index)


def _axis_map(n_in: int, n_out: int):
    """The (n_out, n_in) sparse matrix that resamples one axis as ``skimage.transform.resize`` does with
    ``order=1, anti_aliasing=True, mode="reflect"``: scipy's Gaussian filter (sigma (f - 1) / 2 for the factor
    f = n_in / n_out, radius int(4 sigma + 0.5), mirrored edges), then linear interpolation at the grid-mode
    coordinates (o + 0.5) f - 0.5 (``scipy.ndimage.zoom(..., grid_mode=True)``)."""
    from scipy.sparse import csr_matrix

    f = n_in / n_out
    sigma = max(0.0, (f - 1) / 2)
    if sigma > 1e-15:
        radius = int(4.0 * sigma + 0.5)
        taps = np.arange(-radius, radius + 1)
        phi = np.exp(-0.5 / (sigma * sigma) * taps ** 2)
        weights = phi / phi.sum()
    else:  # not downsampled: no filter
        taps, weights = np.zeros(1, dtype=np.int64), np.ones(1)
    coord = (np.arange(n_out) + 0.5) * f - 0.5
    low = np.floor(coord).astype(np.int64)
    frac = coord - low
    rows = np.tile(np.repeat(np.arange(n_out), taps.size), 2)
    cols = np.concatenate([_mirror(np.repeat(_mirror(low + k, n_in), taps.size) + np.tile(taps, n_out), n_in)
                           for k in (0, 1)])
    vals = np.concatenate([np.outer(1 - frac, weights).ravel(), np.outer(frac, weights).ravel()])
    return csr_matrix((vals, (rows, cols)), shape=(n_out, n_in))  # repeated entries are summed


def _resize(patch: np.ndarray, size: int) -> np.ndarray:
    """``skimage.transform.resize(patch, (size, size), order=1, anti_aliasing=True, mode="reflect")`` of an
    (h, w, channels) float64 image, as one sparse linear map per axis: the same weights, summed in another order,
    so equal to round-off (``tests/data/test_data.py`` compares the two at 32 to 300 px)."""
    h, w, ch = patch.shape
    rows = _axis_map(h, size) @ patch.reshape(h, w * ch)  # (size, w * ch)
    both = _axis_map(w, size) @ rows.reshape(size, w, ch).transpose(1, 0, 2).reshape(w, size * ch)
    out = both.reshape(size, size, ch).transpose(1, 0, 2)
    return np.clip(out, patch.min(), patch.max())  # resize's clip to the input's range


def load_photos(size: int = PHOTO_SIZE) -> ImageSet:
    """50 deterministic 3 x size x size crops of ten skimage.data photographs (interleaved by class).

    The crops are the same regions at every size (32 px by default, e.g. 224 for
    ImageNet-size victims), resized from the full-resolution photographs.
    """
    # scikit-image is an optional heavy dependency: imported only when the set is loaded.
    import skimage.data

    per_photo, sides = [], []
    for name in PHOTO_NAMES:
        img = np.asarray(getattr(skimage.data, name)(), dtype=np.float64) / 255.0
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        img = img[:, :, :3]
        crops = []
        boxes = _photo_boxes(name, *img.shape[:2])
        for top, left, side in boxes:
            patch = img[top:top + side, left:left + side]
            crops.append(np.clip(_resize(patch, size), 0.0, 1.0))
        per_photo.append(crops)
        sides.append([side for _, _, side in boxes])
    # Interleave: index = crop * 10 + class, so consecutive indices are distinct photos.
    images, labels = [], []
    for crop in range(_CROPS_PER_PHOTO):
        for cls in range(len(PHOTO_NAMES)):
            images.append(per_photo[cls][crop])
            labels.append(cls)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous().float()
    source = "scikit-image sample photographs (skimage.data); see leakattack/data/embedded.py for licences"
    # Index crop * 10 + class (as interleaved above) of each crop smaller than the size asked for.
    small = [(crop * len(PHOTO_NAMES) + cls, PHOTO_NAMES[cls], sides[cls][crop]) for crop in range(_CROPS_PER_PHOTO)
             for cls in range(len(PHOTO_NAMES)) if sides[cls][crop] < size]
    if small:
        first, photo, side = small[0]
        smallest = min(s for _, _, s in small)
        source += f"; {len(small)} of the {len(images)} crops are smaller than {size} px and upscaled (bilinear)"
        warnings.warn(f"at {size} px, {len(small)} of the {len(images)} photos are crops smaller than that, upscaled "
                      f"(bilinear), which adds unknowns but no detail: e.g. photo {first} ({photo}, "
                      f"{side} px); --image-size {smallest} keeps every crop's pixels", SettingWarning, stacklevel=2)
    return ImageSet(
        name="photos", images=x, labels=torch.tensor(labels, dtype=torch.long),
        num_classes=len(PHOTO_NAMES), class_names=list(PHOTO_NAMES), source=source,
    )


def _digits_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (images (1797, 8, 8), targets), the arrays ``sklearn.datasets.load_digits`` gives.

    The table is read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, what
    ``load_digits`` reads), found without importing scikit-learn: that import takes a second or more.
    """
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(f) / "datasets" / "data" / "digits.csv.gz" for f in folders
                 if (Path(f) / "datasets" / "data" / "digits.csv.gz").is_file()), None)
    if path is None:  # another layout: let scikit-learn find its file (or say that it is missing)
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        return np.asarray(bunch.images), np.asarray(bunch.target)
    with gzip.open(path, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits() -> ImageSet:
    """scikit-learn's 8x8 digits scaled to [0, 1] and resized bilinearly to 1x28x28."""
    images, targets = _digits_table()
    x = torch.from_numpy(np.asarray(images, dtype=np.float32) / 16.0).unsqueeze(1)
    x = torch.nn.functional.interpolate(x, size=(_DIGIT_SIZE, _DIGIT_SIZE), mode="bilinear",
                                        align_corners=False).clamp_(0.0, 1.0).contiguous()
    return ImageSet(
        name="digits", images=x, labels=torch.from_numpy(np.asarray(targets)).long(),
        num_classes=10, class_names=[str(i) for i in range(10)],
        source="scikit-learn load_digits (UCI ML hand-written digits), resized 8x8 -> 28x28",
    )


__all__ = ["PHOTO_NAMES", "PHOTO_SIZE", "load_photos", "load_digits"]
