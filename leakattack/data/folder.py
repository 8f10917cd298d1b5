"""Image folders laid out as ``ROOT/<class>/<image files>`` (torchvision's ImageFolder, e.g. ImageNet).

Classes are the sub-folders of the root sorted by name (label i is the i-th
name); a class's images are the files under its folder, sub-folders included,
whose names end in one of :data:`IMG_EXTENSIONS` (any case), folder by folder in
the order of their path strings and by name within a folder.  The set lists
classes 0, 1, ... one after the other, all as ``torchvision.datasets.ImageFolder``
does.  Hidden folders and files (names starting with ".") are skipped, e.g.
``.ipynb_checkpoints`` or macOS ``._x.jpg`` files; so are other files, and a
warning names those of image formats torchvision does not read (a GIF, a HEIC).

Each image is opened with Pillow and converted to RGB as torchvision's loader does
(grey is repeated over the three channels, an alpha channel is dropped, an EXIF
orientation is not applied), its shorter side resized to ``size`` pixels with
Pillow's bilinear filter (which averages over the shrunk footprint when
downscaling, as ``torchvision.transforms.Resize`` on a PIL image), then the central
``size`` x ``size`` square is cut out (``CenterCrop``), giving float32 (3, size,
size) in [0, 1].  Where transparent pixels, an EXIF orientation or upscaling make
an image read differ from its file as a viewer shows it, one warning per kind and
set names a file.

Pixels are read when asked for: :func:`~leakattack.data.get_batch` reads only the
images it returns, ``len()``, ``labels`` and ``in_shape`` read none.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import torch

from leakattack.errors import SettingWarning, shown_names

from .base import DataError, ImageSet

#: file name endings read as images (case-insensitive), those of torchvision's ImageFolder
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
#: side of the square crops when no image size is given (ImageNet models' input)
DEFAULT_SIZE = 224
#: endings of image files that torchvision's ImageFolder, and so this set, does not read: skipping one is warned of,
#: unlike a README or any other file, as a folder of them would otherwise lose its images without a word
UNREAD_IMAGE_ENDINGS = (".gif", ".heic", ".heif", ".avif", ".jfif", ".jp2", ".j2k", ".ico", ".tga", ".psd", ".svg",
                        ".dng", ".cr2", ".nef", ".arw", ".exr", ".dcm")


def _layout(root) -> str:
    return f"{root}/<class>/<image files>, one sub-folder of images per class"


def _visible(name: str) -> bool:
    return not name.startswith(".")


def scan_folder(root: Path) -> tuple[list[str], list[Path], list[int]]:
    """(class names, image paths, labels) of an image folder, without opening any image; raise DataError."""
    if not root.exists():
        raise DataError(f"no image folder at {root}: expected {_layout(root)}")
    if not root.is_dir():
        own = (f" (for this image, {root.parent.parent}, where its class folder is {root.parent.name})"
               if root.name.lower().endswith(IMG_EXTENSIONS) else "")
        raise DataError(f"{root} is a file, not a folder: --data-root names the folder above the class "
                        f"folders{own}, laid out as {_layout('<root>')}")
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise DataError(f"cannot list image folder {root} ({exc.strerror or type(exc).__name__}): expected "
                        f"{_layout(root)}") from None
    classes = [e.name for e in entries if e.is_dir() and _visible(e.name)]
    #: image files directly in the root, beside (or without) its class folders
    stray = [e.name for e in entries if e.is_file() and _visible(e.name) and e.name.lower().endswith(IMG_EXTENSIONS)]
    if not classes:
        what = f"it has {len(stray)} image(s) directly inside, not in class folders" if stray else "it has none"
        raise DataError(f"{root} holds no class sub-folders ({what}): expected {_layout(root)}")
    if stray:  # torchvision's ImageFolder reads the class folders alone: these would be lost without a word
        warnings.warn(f"image folder: {len(stray)} image file(s) directly in {root} (e.g. {stray[0]}) are not read: "
                      "only the images in its class sub-folders are, one sub-folder per class", SettingWarning,
                      stacklevel=2)
    if len(classes) == 1:
        raise DataError(f"{root} holds one class sub-folder ({classes[0]}): a classifier of one class has a zero "
                        f"loss and a zero gradient, so give two or more: expected {_layout(root)}")
    files: list[Path] = []
    labels: list[int] = []
    empty: list[str] = []
    unread: list[Path] = []  # image files of an ending not read (a GIF, an iPhone's HEIC)
    empty_unread: list[Path] = []  # those in the class folders without images
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
        not_read = [Path(here) / f for here, names in sorted(walked)
                    for f in sorted(names) if _visible(f) and f.lower().endswith(UNREAD_IMAGE_ENDINGS)]
        unread += not_read
        if not found:
            empty.append(name)
            empty_unread += not_read
        files += found
        labels += [label] * len(found)
    if empty:
        shown = shown_names(empty)
        skipped = (f" ({len(empty_unread)} of other endings, e.g. {empty_unread[0].name}, are not read)"
                   if empty_unread else "")
        raise DataError(f"class folder(s) {shown} under {root} hold no image files ({' '.join(IMG_EXTENSIONS)})"
                        f"{skipped}: expected {_layout(root)}")
    if unread:
        endings = sorted({f.suffix.lower() for f in unread})
        warnings.warn(f"image folder {root}: {len(unread)} file(s) ending in {', '.join(endings)} (e.g. {unread[0]}) "
                      f"skipped: only {' '.join(IMG_EXTENSIONS)} files are read, as torchvision's ImageFolder reads "
                      "them; convert them to PNG to attack them", SettingWarning, stacklevel=2)
    return classes, files, labels


#: (file, Pillow's warning) pairs already passed on: the baseline's mean image and the batch read the same files
_WARNED: set[tuple[str, str]] = set()

#: Pillow modes of one channel of more than 8 bits whose range is fixed: 16-bit unsigned greyscale (PNG, TIFF)
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


#: EXIF orientation tag values (other than 1, upright) and what a viewer does to show the image upright
_ORIENTATION = {2: "mirrored", 3: "rotated 180 degrees", 4: "flipped", 5: "mirrored and rotated",
                6: "rotated 90 degrees", 7: "mirrored and rotated", 8: "rotated 270 degrees"}


def _special_kind(path: Path) -> str | None:
    """What ``path`` is where it is no regular file to read (a named pipe, a socket, a device), else None (a file, a
    link to one, or an entry that cannot be stat'ed, which opening it then names)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return kind
    return None


def read_image(path: Path, size: int, notes: dict | None = None) -> torch.Tensor:
    """One image file as float32 (3, size, size) in [0, 1]: RGB, shorter side resized (bilinear), centre crop.

    ``notes``, where given, receives what was done to the file that changes how it looks, for one warning per set
    (:class:`ImageFolderSet`): ``"upscaled"`` (its (width, height), its shorter side below ``size``), ``"exif"``
    (its EXIF orientation, not applied) and ``"alpha"`` (transparent pixels, whose alpha is dropped)."""
    # Pillow is an optional heavy import (it comes with matplotlib and torchvision): only when images are read.
    from PIL import Image, UnidentifiedImageError

    kind = _special_kind(path)
    if kind:  # reading a named pipe waits for a writer without end; a device reads without end
        raise DataError(f"image {path} is {kind}, not a file: in a data root laid out as <root>/<class>/<image files> "
                        "every entry with an image ending must be an image file") from None
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with Image.open(path) as im:
                if notes is not None:
                    _note(im, notes)
                im = _as_rgb(im)
    except _Unsupported as exc:
        raise DataError(str(exc).replace("{path}", str(path))) from None
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, Image.DecompressionBombError):  # an image, only larger than Pillow opens (its bomb guard)
            raise DataError(f"image {path} has more pixels than Pillow opens ({reason}; PIL.Image.MAX_IMAGE_PIXELS "
                            "sets the limit): shrink it, or leave it out of the data root") from None
        raise DataError(f"image {path} is not readable ({reason}): in a data root laid out as "
                        f"<root>/<class>/<image files> every file with an image ending must be an image") from None
    for w in said:  # Pillow's own warnings (a very large image, a palette's transparency), naming the file, once
        first = str(w.message).strip().splitlines()[0] if str(w.message).strip() else w.category.__name__
        if (str(path), first) not in _WARNED:
            _WARNED.add((str(path), first))
            warnings.warn(f"image {path}: {first}", SettingWarning, stacklevel=2)
    w, h = im.size
    if notes is not None and min(w, h) < size:
        notes["upscaled"] = (w, h)
    # torchvision's Resize(size): the shorter side becomes size, the longer int(size * long / short)
    new_w, new_h = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    if (new_w, new_h) != (w, h):
        im = im.resize((new_w, new_h), Image.Resampling.BILINEAR)
    left, top = int(round((new_w - size) / 2.0)), int(round((new_h - size) / 2.0))  # CenterCrop's offsets
    im = im.crop((left, top, left + size, top + size))
    a = np.asarray(im, dtype=np.float32) / np.float32(255.0)
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


def _note(im, notes: dict) -> None:
    """Record in ``notes`` an opened image's EXIF orientation other than upright and any transparent pixel."""
    try:
        turn = int(im.getexif().get(0x0112, 1))
    except Exception:  # a malformed EXIF block: its orientation is unknown, and the pixels are read all the same
        turn = 1
    if turn in _ORIENTATION:
        notes["exif"] = _ORIENTATION[turn]
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        alpha = im.convert("RGBA").getchannel("A") if im.mode not in ("RGBA", "LA") else im.getchannel("A")
        if alpha.getextrema()[0] < 255:
            notes["alpha"] = True


class _Unsupported(ValueError):
    """An image file Pillow reads whose pixels leakattack cannot map onto [0, 1]; its text holds ``{path}``."""


def _as_rgb(im):
    """The image in Pillow's 8-bit RGB mode.  16-bit greyscale is scaled from [0, 65535] (Pillow's own conversion
    clips it to 255, a white image); 32-bit integer and float pixels, whose range no file format fixes, are refused."""
    from PIL import Image

    if im.mode in _SIXTEEN_BIT or (im.mode == "I" and im.format == "PNG"):
        # older Pillow opens 16-bit greyscale PNG in mode I (32-bit); a PNG holds at most 16 bits a channel
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
    _noted: set  # the kinds of read_image's notes already warned of for this set
    #: read at a size the command does not let its user choose (a protocol's training split): no --image-size hint
    _size_fixed: bool

    def __init__(self, name: str, files, labels: torch.Tensor, class_names: list, size: int, source: str):
        # the dataclass fields of ImageSet but ``images``, which is read on demand
        for key, value in (("name", name), ("labels", labels), ("num_classes", len(class_names)),
                           ("class_names", list(class_names)), ("source", source),
                           ("files", tuple(files)), ("size", int(size)), ("_loaded", None), ("_noted", set()),
                           ("_size_fixed", False)):
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

    def size_fixed(self) -> ImageFolderSet:
        """This set, marked as read at a size its command does not let the user choose (a protocol's training, which
        reads its folder at the default 224 px): its upscaling warning then names no --image-size."""
        object.__setattr__(self, "_size_fixed", True)
        return self

    def subset(self, index: torch.Tensor, source: str) -> ImageFolderSet:
        picked = [self.files[i] for i in index.tolist()]
        out = ImageFolderSet(self.name, picked, self.labels[index], self.class_names, self.size, source)
        object.__setattr__(out, "_noted", self._noted)  # one warning per kind for the set and its parts (a split)
        object.__setattr__(out, "_size_fixed", self._size_fixed)
        if self._loaded is not None:
            object.__setattr__(out, "_loaded", self._loaded[index])
        return out

    def _read(self, positions) -> torch.Tensor:
        if len(positions) == 0:
            return torch.zeros((0, *self.in_shape))
        noted: dict[str, list] = {}
        out = []
        for i in positions:
            notes: dict = {}
            out.append(read_image(self.files[i], self.size, notes=notes))
            for kind, value in notes.items():
                noted.setdefault(kind, []).append((self.files[i], value))
        self._warn(noted)
        return torch.stack(out)

    def _warn(self, noted: dict) -> None:
        """One warning per kind of change to the images' look (:func:`read_image`'s notes) and set, naming the
        first file: the truth the run scores and shows is the image as read, which then differs from the file."""
        for kind in ("upscaled", "exif", "alpha"):
            if kind not in noted or kind in self._noted:
                continue
            self._noted.add(kind)
            first, value = noted[kind][0]
            if kind == "upscaled":
                short = min(min(v) for _, v in noted[kind])
                # 11: SSIM's window
                keep = f"; leakattack run --image-size {short} keeps their pixels" \
                    if short >= 11 and not self._size_fixed else ""
                text = (f"images smaller than {self.size} px on the shorter side are upscaled (bilinear), which adds "
                        f"unknowns but no detail: e.g. {first} ({value[0]}x{value[1]} px){keep}")
            elif kind == "exif":
                text = (f"EXIF orientations are not applied: images are read as stored, as torchvision's ImageFolder "
                        f"reads them, so {first} ({value} to show upright) may appear turned")
            else:
                text = (f"transparent pixels' alpha is dropped, not composited onto a background (as torchvision's "
                        f"ImageFolder does), so colours hidden under it show: e.g. {first}")
            warnings.warn(text, SettingWarning, stacklevel=3)

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
