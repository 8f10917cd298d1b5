"""``leakattack report PATH... --out report.html``: one self-contained HTML audit report of run and sweep folders."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from .. import __version__
from ..errors import UserError
from ..figures.report import build_report, check_folders
from ..results import atomic_write_text, writable_out

#: the suffixes ``--out`` may end in: the report is one HTML file
HTML_SUFFIXES = (".html", ".htm")


def report_out(out) -> Path:
    """``--out`` as a path, refused in one sentence before anything is read: it must name a .html (or .htm) file,
    and a file already there is replaced only when it is an HTML page (an earlier report), never a run's or a
    sweep's own file (metrics.json, summary.csv, ...)."""
    path = writable_out(out, ".html")
    if path.suffix.lower() not in HTML_SUFFIXES:
        raise UserError(f"--out '{out}' must name a .html file (the report is one HTML page)")
    if path.is_file() and not _is_html(path):
        raise UserError(f"--out '{out}' exists and is not an HTML page, so the report will not replace it: name a "
                        "new file or an earlier report")
    return path


def _is_html(path: Path) -> bool:
    """Whether the file at ``path`` is empty or begins as an HTML page does (``<!DOCTYPE html`` or ``<html``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    return not head or head.startswith((b"<!doctype html", b"<html"))


def cmd_report(a) -> int:
    out = report_out(a.out)
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


__all__ = ["cmd_report", "report_out", "HTML_SUFFIXES"]
