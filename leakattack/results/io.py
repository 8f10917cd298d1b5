"""Files written atomically (temporary file + rename) and read back safely.

Every file appears whole or not at all, so an interrupted run never leaves a
half-written result.  Tensor files are read with ``weights_only=True``: a file
someone else wrote can hold tensors and plain containers, never code.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import tempfile
from pathlib import Path

import torch

from ..errors import UserError
from ..jsonable import to_jsonable


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def directory_mode() -> int:
    """The permissions a new folder gets under the process umask (mkdtemp makes 0700)."""
    return 0o777 & ~_UMASK


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_csv(path, rows: list[dict], columns: list[str] | None = None) -> None:
    """Rows of dicts as CSV; missing values are empty cells."""
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    atomic_write_text(path, buf.getvalue())


def read_jsonl(path) -> list[dict]:
    """One JSON object per non-empty line."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_tensors(path, obj) -> None:
    """Tensors (in dicts, lists, tuples) saved with torch.save, atomically."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_tensors(path):
    """A torch file read on the CPU with ``weights_only=True``; anything but tensors and plain containers is refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"'{path}' holds objects other than tensors and plain containers; it was not loaded") from None
