"""Reading a file that ``torch.save`` wrote: ``torch.load(..., weights_only=True)`` on the CPU, and one sentence
saying why a file that cannot be read is not one.

``weights_only`` admits tensors and plain containers only, so a file cannot run code when it is read.  torch's own
errors for files it cannot read are many and name internals (``KeyError: 101`` for a text file, ``EOFError`` for an
empty one, a zip-reader message for one cut short); :func:`unreadable` reads the file's first bytes instead and says
what the file is.  A leaf module: every station that reads torch files can use it.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import torch

from .errors import UserError

#: how a file begins: a zip archive (torch.save's format since torch 1.6), a NumPy array, a pickle of protocol 2 or
#: more (torch.save's legacy format begins with one, as does a plain pickle)
_ZIP, _NUMPY, _PICKLE = b"PK\x03\x04", b"\x93NUMPY", b"\x80"


def _head(path: Path) -> bytes | str:
    """The file's first 512 bytes, or why it cannot be read (the end of a sentence naming it)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(512)
    except OSError as err:
        return f"cannot be read ({err.strerror or type(err).__name__})"


def unreadable(path: Path) -> str:
    """What the file at ``path``, which torch.load could not read, is, as the end of a sentence naming it."""
    head = _head(path)
    if isinstance(head, str):
        return head
    if not head:
        return "is empty"
    if head.startswith(_ZIP):
        return _zip_kind(path)
    if head.startswith(_NUMPY):
        return "is a NumPy file (numpy.save), not a torch file (torch.save)"
    if head.startswith(_PICKLE):
        return "is a pickle that torch.load cannot read as a torch file (a plain pickle, or a damaged torch file)"
    text = head.decode("utf-8", errors="replace")
    body = text[:-3] if len(head) == 512 else text  # the last character may be cut at the 512th byte
    if "\ufffd" not in body and all(c.isprintable() or c in "\r\n\t" for c in body):
        return "is a text file, not a torch file (torch.save)"
    return "is not a torch file (torch.save)"


def _zip_kind(path: Path) -> str:
    """What a zip archive that torch.load could not read is: NumPy's .npz, another zip archive (no pickle of torch's
    layout inside), or a damaged torch file."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        names = None
    if names:
        if all(name.endswith(".npy") for name in names):
            return "is a NumPy archive (numpy.savez), not a torch file (torch.save)"
        if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
            return "is a zip archive, not a torch file (torch.save): it holds no data.pkl"
    return ("is a damaged torch file: its zip archive cannot be read (cut short while it was written or copied, or "
            "changed since)")


def _pickled(path: Path) -> bool:
    """Whether the file begins as torch.save's files do (a zip archive, or a pickle of protocol 2 or more): only then
    is a global that torch.load refuses an object the file holds, and not text read as pickle opcodes."""
    head = _head(path)
    return isinstance(head, bytes) and head.startswith((_ZIP, _PICKLE))


def load_torch_file(path, what: str, *, error: type[UserError] = UserError, objects_hint: str = ""):
    """The contents of the torch file at ``path``, read on the CPU with ``weights_only=True``.

    A file that is missing, a folder, or not one torch can read raises ``error`` with one sentence that begins with
    ``what`` (``"weights file 'w.pt'"``); one that holds objects other than tensors and plain containers (a whole
    pickled model) is refused as such, ``objects_hint`` appended.  torch's notes on a file it reads (its pickle
    protocol) are not shown."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} " + ("is a folder, not a file" if path.is_dir() else "does not exist"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        text = str(err).lower()  # torch's wording varies: "Unsupported global", "unsupported GLOBAL"
        if ("not an allowed global" in text or "unsupported global" in text) and _pickled(path):
            raise error(f"{what} holds objects other than tensors and plain containers; it was not loaded"
                        + objects_hint) from None
        raise error(f"{what} {unreadable(path)}") from None
    except Exception:  # noqa: BLE001 -- truncated or foreign files fail inside torch's reader in many ways
        raise error(f"{what} {unreadable(path)}") from None


__all__ = ["load_torch_file", "unreadable"]
