"""The downloadable data sets (``torchvision.datasets``), read from a data root.

``"mnist"``, ``"cifar10"``, ``"cifar100"``: the train or test split, converted to
float32 tensors (N, C, H, W) in [0, 1].  Nothing is downloaded unless asked.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

from .base import DataError, ImageSet

#: Our name -> the class name in ``torchvision.datasets``.
TORCHVISION_CLASSES = {"mnist": "MNIST", "cifar10": "CIFAR10", "cifar100": "CIFAR100"}
#: where torchvision expects each set under the data root
LAYOUT = {"mnist": "MNIST/raw/train-images-idx3-ubyte (and the other idx files)",
          "cifar10": "cifar-10-batches-py/data_batch_1..5 and test_batch",
          "cifar100": "cifar-100-python/train and test"}


def _paths_under(root: Path) -> set[Path]:
    """``root`` and every path under it that exists now (none where ``root`` does not)."""
    return {root, *root.rglob("*")} if root.exists() else set()


def _remove_new(root: Path, before: set[Path]) -> None:
    """Remove what a failed download made under ``root`` (``before``: the paths there before it): its partial files,
    then its folders, deepest first, where they are empty; what was there before stays."""
    new = sorted(_paths_under(root) - before, key=lambda p: len(p.parts), reverse=True)
    for path in new:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # only an empty one
            else:
                path.unlink()


def load_torchvision(name: str, root, download: bool, train: bool) -> ImageSet:
    """A torchvision data set from ``root``, converted to float tensors in [0, 1]."""
    # torchvision.datasets is an optional heavy import: only when such a set is loaded.
    import torchvision

    if root is None:
        raise DataError(f"no data root given for {name}: pass --download with --data-root DIR, "
                        f"or point --data-root at a folder containing {name}")
    if Path(root).exists() and not Path(root).is_dir():  # nothing is found, or downloaded, into a file
        raise DataError(f"data root {root} is a file, not a folder: point --data-root at the folder containing "
                        f"{name} ({LAYOUT[name].split('/')[0]}/ inside it)")
    cls = getattr(torchvision.datasets, TORCHVISION_CLASSES[name])
    before = _paths_under(Path(root)) if download else set()
    try:
        ds = cls(root=str(root), train=train, download=download)
    except (RuntimeError, OSError) as exc:  # torchvision: "Dataset not found ..."; network errors
        if download:
            _remove_new(Path(root), before)
            lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
            reason = lines[0] if lines else type(exc).__name__
            if reason.endswith(":") and len(lines) > 1:  # MNIST's "Error downloading x.gz:", its cause lines below
                reason = f"{reason} {lines[-1]}"
            raise DataError(f"could not download {name} into data root {root} ({reason}): fetch it "
                            f"elsewhere and point --data-root at a folder containing it") from exc
        present = (Path(root) / LAYOUT[name].split("/")[0]).exists()
        if present:  # CIFAR's files are checked by their MD5 sums, MNIST's by parsing them
            why = ("their checksums are not the official files'" if "cifar" in name.lower() else
                   "they could not be parsed as the official files")
            raise DataError(f"{name} files are under data root {root} ({root}/{LAYOUT[name].split('/')[0]}) but "
                            f"torchvision finds them incomplete or corrupted ({why}): replace them with the official "
                            f"{name} files (--download would fetch them into that folder)") from exc
        raise DataError(f"{name} not found under data root {root} (expected {root}/{LAYOUT[name]}): pass "
                        f"--download or point --data-root at a folder containing it") from exc
    except Exception as exc:  # garbage files fail inside torchvision's readers in many ways
        raise DataError(f"the {name} files under data root {root} are not readable ({type(exc).__name__}); "
                        f"expected {root}/{LAYOUT[name]}") from None
    try:
        data = ds.data if isinstance(ds.data, torch.Tensor) else torch.from_numpy(np.asarray(ds.data))
        x = data.float().div_(255.0)
        x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
        labels = torch.as_tensor(np.asarray(ds.targets), dtype=torch.long)
        if x.ndim != 4 or x.shape[0] != labels.shape[0] or x.shape[0] == 0:
            raise ValueError("images and labels do not match")
    except Exception as exc:
        raise DataError(f"the {name} files under data root {root} are not readable ({exc}); "
                        f"expected {root}/{LAYOUT[name]}") from None
    split = "train" if train else "test"
    return ImageSet(name=name, images=x.contiguous(), labels=labels,
                    num_classes=len(ds.classes), class_names=list(ds.classes),
                    source=f"torchvision.datasets.{TORCHVISION_CLASSES[name]} ({split}) at {root}")


__all__ = ["TORCHVISION_CLASSES", "load_torchvision"]
