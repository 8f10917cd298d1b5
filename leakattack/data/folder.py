"""Image folders laid out as ``ROOT/<class>/<image files>`` (torchvision's ImageFolder, e.g. ImageNet).

Classes are the sub-folders of the root sorted by name (label i is the i-th
name); a class's images are the files under its folder, sub-folders included,
whose names end in one of :data:`IMG_EXTENSIONS` (any case), folder by folder in
the order of their path strings and by name within a folder.  The set lists
classes 0, 1, ... one after the other, all as ``torchvision.datasets.ImageFolder``
does.  Hidden folders and files (names starting with ".") are skipped, e.g.
``.ipynb_checkpoints`` or macOS ``._x.jpg`` files.

Each image is opened with Pillow and converted to RGB as torchvision's loader does
(grey is repeated over the three channels, an alpha channel is dropped), its
shorter side resized to ``size`` pixels with Pillow's bilinear filter (which
averages over the shrunk footprint when downscaling, as
``torchvision.transforms.Resize`` on a PIL image), then the central
``size`` x ``size`` square is cut out (``CenterCrop``), giving float32 (3, size,
size) in [0, 1].

Pixels are read when asked for: :func:`~leakattack.data.get_batch` reads only the
images it returns, ``len()``, ``labels`` and ``in_shape`` read none.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

from leakattack.errors import SettingWarning

from .base import DataError, ImageSet

#: file name endings read as images (case-insensitive), those of torchvision's ImageFolder
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
#: side of the square crops when no image size is given (ImageNet models' input)
DEFAULT_SIZE = 224


def _layout(root) -> str:
    return f"{root}/<class>/<image files>, one sub-folder of images per class"


def _visible(name: str) -> bool:
    return not name.startswith(".")


def scan_folder(root: Path) -> tuple[list[str], list[Path], list[int]]:
    """(class names, image paths, labels) of an image folder, without opening any image; raise DataError."""
    if not root.exists():
        raise DataError(f"no image folder at {root}: expected {_layout(root)}")
    if not root.is_dir():
        raise DataError(f"{root} is a file, not a folder: --data-root names the folder above the class folders, "
                        f"laid out as {_layout(root.parent / '<root>')}")
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise DataError(f"cannot list image folder {root} ({exc.strerror or type(exc).__name__}): expected "
                        f"{_layout(root)}") from None
    classes = [e.name for e in entries if e.is_dir() and _visible(e.name)]
    if not classes:
        loose = sum(1 for e in entries if e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS))
        what = f"it has {loose} image(s) directly inside, not in class folders" if loose else "it has none"
        raise DataError(f"{root} holds no class sub-folders ({what}): expected {_layout(root)}")
    if len(classes) == 1:
        raise DataError(f"{root} holds one class sub-folder ({classes[0]}): a classifier of one class has a zero "
                        f"loss and a zero gradient, so give two or more: expected {_layout(root)}")
    files: list[Path] = []
    labels: list[int] = []
    empty: list[str] = []
    for label, name in enumerate(classes):
        walked = []
        top = os.path.realpath(root / name)
        seen: set[str] = set()
        for here, dirs, names in os.walk(root / name, followlinks=True):
            real = os.path.realpath(here)
            if real in seen or (real != top and (top + os.sep).startswith(real.rstrip(os.sep) + os.sep)):
                # a link back to a folder already read, or to one holding this class: followed, it would count
                # images again (or another class's) under this label, without end where it loops
                warnings.warn(f"image folder: {here} leads back to {real}, which this class already reads or "
                              "holds: not followed", SettingWarning, stacklevel=2)
                dirs[:] = []
                continue
            seen.add(real)
            dirs[:] = [d for d in dirs if _visible(d)]
            walked.append((here, names))
        found = [Path(here) / f for here, names in sorted(walked)  # ImageFolder's order: folders by path, files by name
                 for f in sorted(names) if _visible(f) and f.lower().endswith(IMG_EXTENSIONS)]
        if not found:
            empty.append(name)
        files += found
        labels += [label] * len(found)
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        raise DataError(f"class folder(s) {shown} under {root} hold no image files ({' '.join(IMG_EXTENSIONS)}): "
                        f"expected {_layout(root)}")
    return classes, files, labels


#: (file, Pillow's warning) pairs already passed on: the baseline's mean image and the batch read the same files
_WARNED: set[tuple[str, str]] = set()

#: Pillow modes of one channel of more than 8 bits whose range is fixed: 16-bit unsigned greyscale (PNG, TIFF)
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


def read_image(path: Path, size: int) -> torch.Tensor:
    """One image file as float32 (3, size, size) in [0, 1]: RGB, shorter side resized (bilinear), centre crop."""
    # Pillow is an optional heavy import (it comes with matplotlib and torchvision): only when images are read.
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with Image.open(path) as im:
                im = _as_rgb(im)
    except _Unsupported as exc:
        raise DataError(str(exc).replace("{path}", str(path))) from None
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"image {path} is not readable ({reason}): in a data root laid out as "
                        f"<root>/<class>/<image files> every file with an image ending must be an image") from None
    for w in said:  # Pillow's own warnings (a very large image, a palette's transparency), naming the file, once
        first = str(w.message).strip().splitlines()[0] if str(w.message).strip() else w.category.__name__
        if (str(path), first) not in _WARNED:
            _WARNED.add((str(path), first))
            warnings.warn(f"image {path}: {first}", SettingWarning, stacklevel=2)
    w, h = im.size
    # torchvision's Resize(size): the shorter side becomes size, the longer int(size * long / short)
    new_w, new_h = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    if (new_w, new_h) != (w, h):
        im = im.resize((new_w, new_h), Image.Resampling.BILINEAR)
    left, top = int(round((new_w - size) / 2.0)), int(round((new_h - size) / 2.0))  # CenterCrop's offsets
    im = im.crop((left, top, left + size, top + size))
    a = np.asarray(im, dtype=np.float32) / np.float32(255.0)
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


class _Unsupported(ValueError):
    """An image file Pillow reads whose pixels leakattack cannot map onto [0, 1]; its text holds ``{path}``."""


def _as_rgb(im):
    """The image in Pillow's 8-bit RGB mode.  16-bit greyscale is scaled from [0, 65535] (Pillow's own conversion
    clips it to 255, a white image); 32-bit integer and float pixels, whose range no file format fixes, are refused."""
    from PIL import Image

    if im.mode in _SIXTEEN_BIT:
        a = np.asarray(im).astype(np.float64) / 65535.0
        return Image.fromarray(np.round(a * 255.0).astype(np.uint8), mode="L").convert("RGB")
    if im.mode in ("I", "F"):
        kind = "32-bit integer" if im.mode == "I" else "floating-point"
        raise _Unsupported(f"image {{path}} holds {kind} pixels, which have no fixed range to map onto [0, 1]: "
                           "save it with 8 or 16 bits per channel")
    return im.convert("RGB")


class ImageFolderSet(ImageSet):
    """An :class:`ImageSet` whose pixels stay on disk until asked for.

    It answers ``name``, ``labels``, ``num_classes``, ``class_names``, ``source``,
    ``in_shape`` and ``len()`` from the folder listing alone; :meth:`rows` (used by
    ``get_batch``) reads only the images it returns; ``images`` reads every file
    once and keeps the tensor (what training on the whole set needs).
    """

    # set by __init__ beside the dataclass fields of ImageSet (not fields: the class is no dataclass of its own)
    files: tuple[Path, ...]
    size: int
    _loaded: torch.Tensor | None

    def __init__(self, name: str, files, labels: torch.Tensor, class_names: list, size: int, source: str):
        # the dataclass fields of ImageSet but ``images``, which is read on demand
        for key, value in (("name", name), ("labels", labels), ("num_classes", len(class_names)),
                           ("class_names", list(class_names)), ("source", source),
                           ("files", tuple(files)), ("size", int(size)), ("_loaded", None)):
            object.__setattr__(self, key, value)

    @property
    def images(self) -> torch.Tensor:
        """All images (N, 3, size, size), read from disk on first use."""
        if self._loaded is None:
            loaded = self._read(range(len(self.files)))
            object.__setattr__(self, "_loaded", loaded)
            return loaded
        return self._loaded

    @property
    def in_shape(self) -> tuple:
        return (3, self.size, self.size)

    def __len__(self) -> int:
        return len(self.files)

    def rows(self, index):
        if self._loaded is not None:
            return super().rows(index)
        positions = range(len(self.files))[index] if isinstance(index, slice) else \
            torch.as_tensor(index).reshape(-1).tolist()
        return self._read(positions), self.labels[index]

    def subset(self, index: torch.Tensor, source: str) -> ImageFolderSet:
        picked = [self.files[i] for i in index.tolist()]
        out = ImageFolderSet(self.name, picked, self.labels[index], self.class_names, self.size, source)
        if self._loaded is not None:
            object.__setattr__(out, "_loaded", self._loaded[index])
        return out

    def _read(self, positions) -> torch.Tensor:
        if len(positions) == 0:
            return torch.zeros((0, *self.in_shape))
        return torch.stack([read_image(self.files[i], self.size) for i in positions])

    def __repr__(self) -> str:  # the dataclass repr would read every image
        return (f"ImageFolderSet(name={self.name!r}, images={len(self)} x {self.in_shape}, "
                f"num_classes={self.num_classes}, source={self.source!r})")

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def load_imagefolder(root, download: bool = False, train: bool = True, size: int = DEFAULT_SIZE) -> ImageFolderSet:
    """The image folder at ``root`` cut to ``size`` px squares (``download`` and ``train`` do not apply)."""
    if root is None:
        raise DataError("imagefolder needs --data-root DIR pointing at a folder laid out as "
                        "DIR/<class>/<image files>, one sub-folder of images per class")
    root = Path(root)
    classes, files, labels = scan_folder(root)
    return ImageFolderSet("imagefolder", files, torch.as_tensor(labels, dtype=torch.long), classes, size,
                          f"image folder {root} ({len(files)} images in {len(classes)} classes; "
                          f"shorter side resized to {size} px (bilinear), centre crop)")


__all__ = ["DEFAULT_SIZE", "IMG_EXTENSIONS", "ImageFolderSet", "load_imagefolder", "read_image", "scan_folder"]
