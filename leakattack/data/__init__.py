"""Image data sets for the attacks, found by name: real photographs and digits by default.

``get_dataset(name, root=None, download=False, train=True, image_size=None)`` loads one set and
``list_datasets()`` names them, in this order:

* ``"photos"``, ``"digits"`` -- offline sets shipped inside scikit-image and
  scikit-learn (no download, no network; contents and licences in
  :mod:`leakattack.data.embedded`).
* ``"mnist"``, ``"cifar10"``, ``"cifar100"`` -- downloadable sets
  (``torchvision.datasets``, read from ``root``; :mod:`leakattack.data.torchvision_sets`).
* ``"imagefolder"`` -- your own images under ``root/<class>/<image files>`` (the
  layout of torchvision's ImageFolder and of ImageNet), cut to ``image_size``
  squares (default 224) and read from disk only when a batch asks for them
  (:mod:`leakattack.data.folder`).

All images are float32 tensors (N, C, H, W) in [0, 1], never normalised.
Loaded sets are cached (``functools.lru_cache``): repeated loads return the same
tensors, so treat them as read-only; :func:`get_batch` returns clones.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from pathlib import Path

from leakattack.registry import Registry

from .base import BATCH_DRAWS, DataError, ImageSet, batch_positions, get_batch, train_test_split
from .embedded import PHOTO_NAMES, PHOTO_SIZE, load_digits, load_photos
from .folder import DEFAULT_SIZE, ImageFolderSet, load_imagefolder
from .torchvision_sets import load_torchvision

#: the largest image side a set is cut to (--image-size's bound)
MAX_IMAGE_SIZE = 1024
#: the smallest side a reconstruction can be scored at: the width of SSIM's window (metrics.SSIM_WIN), which
#: --image-size takes as its lower bound; the API cuts smaller images with a warning (a seed search needs no score)
SCORED_IMAGE_SIZE = 11

_REGISTRY = Registry("dataset", DataError)
_ORDER: list[str] = []  # registration order, which list_datasets() keeps (Registry.names() sorts)


def register_dataset(name: str, loader, *, offline: bool, sizable: bool = False, shape: tuple | None = None) -> None:
    """Add a loader under ``name``: ``loader()`` when ``offline``, else ``loader(root, download, train)``;
    ``sizable`` loaders also take an image size last (``loader(size)``, ``loader(root, download, train, size)``).
    ``shape``: the (channels, side) of its images (the default side where ``sizable``), when known without
    loading it.  A name the command line cannot write or one taken, and a loader that is not callable
    (``TypeError``), are refused in one sentence before anything is kept."""
    _REGISTRY.check_name(name)
    if not callable(loader):
        raise TypeError(f"the loader of data set '{name}' must be a callable that returns an ImageSet, got "
                        f"{type(loader).__name__} {loader!r:.60}")
    _REGISTRY.register(name, loader, offline=offline, sizable=sizable, shape=shape)
    _ORDER.append(name)


register_dataset("photos", load_photos, offline=True, sizable=True, shape=(3, PHOTO_SIZE))
register_dataset("digits", load_digits, offline=True, shape=(1, 28))
register_dataset("mnist", functools.partial(load_torchvision, "mnist"), offline=False, shape=(1, 28))
register_dataset("cifar10", functools.partial(load_torchvision, "cifar10"), offline=False, shape=(3, 32))
register_dataset("cifar100", functools.partial(load_torchvision, "cifar100"), offline=False, shape=(3, 32))
register_dataset("imagefolder", load_imagefolder, offline=False, sizable=True, shape=(3, DEFAULT_SIZE))


def list_datasets() -> list:
    """Names accepted by :func:`get_dataset`, in registration order."""
    return list(_ORDER)


@functools.lru_cache(maxsize=6)
def _load_cached(name: str, root, download: bool, train: bool, image_size: int | None = None) -> ImageSet:
    """Cached loader behind :func:`get_dataset` (arguments already normalised)."""
    loader = _REGISTRY.get(name)
    args = () if _REGISTRY.meta(name)["offline"] else (root, download, train)
    out = loader(*args) if image_size is None else loader(*args, image_size)
    if not isinstance(out, ImageSet):  # a registered loader of one's own that returns something else
        raise DataError(f"the loader of data set '{name}' ({getattr(loader, '__module__', '?')}."
                        f"{getattr(loader, '__qualname__', loader)}) returned {type(out).__name__} {out!r:.40}, not "
                        "the leakattack.data.ImageSet a loader returns")
    return out


def get_dataset(name: str, root=None, download: bool = False, train: bool = True,
                image_size: int | None = None) -> ImageSet:
    """Load a data set by name (see :func:`list_datasets`).

    ``root`` is read by the torchvision sets and ``imagefolder``, ``download`` and
    ``train`` only by the torchvision sets; ``image_size`` applies to the sets that
    can be cut at any size (the embedded photos, default 32; ``imagefolder``,
    default 224).
    """
    key = str(name).lower()
    if key not in _REGISTRY:
        if Path(str(name)).expanduser().is_dir():
            raise DataError(f"unknown dataset {name!r}, a folder: a folder of images is the dataset imagefolder "
                            f"with root={name!r} (--dataset imagefolder --data-root {name})")
        raise DataError(f"unknown dataset {name!r}: choose one of {', '.join(_ORDER)}")
    if image_size is not None and not _REGISTRY.meta(key)["sizable"]:
        sizable = ", ".join(n for n in _ORDER if _REGISTRY.meta(n)["sizable"])
        raise DataError(f"--image-size applies to {sizable} only, not to {key} (its images have a fixed size)")
    if image_size is not None and (isinstance(image_size, bool) or not isinstance(image_size, numbers.Integral)
                                   or not 1 <= int(image_size) <= MAX_IMAGE_SIZE):
        raise DataError(f"image_size must be a whole number of pixels from 1 to {MAX_IMAGE_SIZE}, got "
                        f"{type(image_size).__name__} {image_size!r}")
    size = None if image_size is None else int(image_size)
    if size is not None and size < SCORED_IMAGE_SIZE:
        warnings.warn(f"images of {size}x{size} pixels cannot be scored: SSIM, and so assess(), needs at least "
                      f"{SCORED_IMAGE_SIZE}x{SCORED_IMAGE_SIZE}", stacklevel=2)
    if _REGISTRY.meta(key)["offline"]:
        return _load_cached(key, None, False, True, size)
    root_key = None if root is None else str(Path(root).expanduser().resolve())
    return _load_cached(key, root_key, bool(download), bool(train), size)


def input_shape(name: str, image_size: int | None = None) -> tuple | None:
    """The (C, H, W) of one image of data set ``name`` cut at ``image_size`` (or its default size), known without
    loading it; None for a set registered without its shape, or an unknown name."""
    key = str(name).lower()
    shape = _REGISTRY.meta(key)["shape"] if key in _REGISTRY else None
    if shape is None:
        return None
    channels, side = shape
    side = int(image_size) if image_size is not None and _REGISTRY.meta(key)["sizable"] else side
    return (channels, side, side)


def reads_root(name: str) -> bool:
    """Whether data set ``name`` reads files under a root folder (``--data-root``); the embedded sets read none."""
    key = str(name).lower()
    return key in _REGISTRY and not _REGISTRY.meta(key)["offline"]


#: The former name of :func:`get_dataset`, kept as an alias for callers not yet switched.
load_dataset = get_dataset

__all__ = ["BATCH_DRAWS", "DataError", "ImageFolderSet", "ImageSet", "MAX_IMAGE_SIZE", "SCORED_IMAGE_SIZE",
           "PHOTO_NAMES", "batch_positions", "get_batch", "get_dataset", "input_shape", "list_datasets",
           "load_dataset", "reads_root", "register_dataset", "train_test_split"]
