"""``leakattack report PATH... --out report.html``: one self-contained HTML audit report of run and sweep folders."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from .. import __version__
from ..errors import UserError
from ..figures.report import build_report, check_folders
from ..results import atomic_write_text


def check_out_file(out: str) -> Path:
    """The report file a user named, refused in one sentence when it cannot be written (before any work)."""
    if not str(out).strip():
        raise UserError("--out must name an .html file, got an empty string")
    path = Path(out)
    if path.is_dir():
        raise UserError(f"--out '{out}' is a folder; name an .html file")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out '{out}' cannot be written: '{parent}' is not a writable folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"--out '{out}' cannot be written: the file is read-only")
    return path


def cmd_report(a) -> int:
    out = check_out_file(a.out)
    items = check_folders(a.paths)  # every path refused before anything is read or written
    built = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    text = build_report([p for _, p in items], title=a.title, generator=f"leakattack {__version__}", built=built)
    try:
        atomic_write_text(out, text)
    except OSError as err:
        raise UserError(f"--out '{out}' cannot be written: {err.strerror or err}") from None
    runs = sum(kind == "run" for kind, _ in items)
    sweeps = len(items) - runs
    print(f"{runs} run{'s' if runs != 1 else ''} | {sweeps} sweep{'s' if sweeps != 1 else ''} | "
          f"{len(text.encode()) / 1e6:.1f} MB | {out}")
    return 0


__all__ = ["cmd_report", "check_out_file"]
