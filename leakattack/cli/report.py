"""``leakattack report PATH... --out report.html``: one self-contained HTML audit report of run and sweep folders."""

from __future__ import annotations

import datetime as _dt
import os
import warnings
from pathlib import Path

from .. import __version__
from ..errors import SettingWarning, UserError
from ..figures.report import build_report, check_folders
from ..results import atomic_write_text, writable_out
from ..results.io import link_target
from ..results.store import read_results

#: the suffixes ``--out`` may end in: the report is one HTML file
HTML_SUFFIXES = (".html", ".htm")


#: what marks an HTML file as a report of this command: the generator, in the page's head
MARK = '<meta name="generator" content="leakattack report">'
#: how an earlier report written before :data:`MARK` begins
_OLD_HEAD = (b'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n<meta name="viewport" '
             b'content="width=device-width, initial-scale=1">\n<link rel="icon" href="data:,">')
#: how many bytes of an existing ``--out`` file are read to recognise a report
_HEAD_BYTES = 1024


def report_out(out) -> Path:
    """``--out`` as a path, refused in one sentence before anything is read: it must name a .html (or .htm) file
    outside every run folder and sweep folder, and a file already there is replaced only when it is empty or an
    earlier report (:func:`_is_report`), never a page of the user's or a run's or a sweep's own file."""
    path = writable_out(out, ".html")
    if path.suffix.lower() not in HTML_SUFFIXES:
        raise UserError(f"--out '{out}' must name a .html file (the report is one HTML page)")
    if path.is_file() and not _is_report(path):
        raise UserError(f"--out '{out}' exists and is not an HTML page written by leakattack report, so the report "
                        "will not replace it: name a new file or an earlier report")
    return path


def _is_report(path: Path) -> bool:
    """Whether the file at ``path`` is empty or an earlier report: its head holds :data:`MARK`, or begins as a report
    written before the mark did."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return not head or MARK.encode() in head or head.lower().startswith(_OLD_HEAD)


def _warn_empty_sweeps(items) -> None:
    """One warning per sweep folder whose results.jsonl holds no finished point: its section shows nothing."""
    for kind, folder in items:
        if kind == "sweep" and not read_results(folder / "results.jsonl"):
            empty = not (folder / "results.jsonl").read_bytes().strip()
            warnings.warn(f"'{folder / 'results.jsonl'}' {'is empty' if empty else 'holds no finished point'}: the "
                          "report shows no point of that sweep", SettingWarning, stacklevel=1)


def _built() -> str:
    """When the report was built, in words: ``SOURCE_DATE_EPOCH``'s time where it is set (reproducible builds' fixed
    time, whose specification has a malformed value fail the build: one sentence), else now."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or not raw.strip():
        return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    epoch = raw.strip()
    try:
        if not epoch.isascii() or not epoch.isdigit():
            raise ValueError
        # by arithmetic, not the C library's gmtime: every platform then takes every time up to the year 9999
        when = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(seconds=int(epoch))
    except (ValueError, OverflowError):
        raise UserError(f"SOURCE_DATE_EPOCH must be the build's time in whole seconds since 1970-01-01 UTC, up to "
                        f"the year 9999, got {raw[:40]!r}: correct it, or unset it to stamp the report with the time "
                        "now") from None
    return when.strftime("%Y-%m-%d %H:%M %Z")


def cmd_report(a) -> int:
    if not a.title.strip():
        raise UserError(f"--title must name the report, got {a.title!r}")
    out = report_out(a.out)
    items = check_folders(a.paths)  # every path refused before anything is read or written
    built = _built()
    _warn_empty_sweeps(items)
    text = build_report([p for _, p in items], title=a.title, generator=f"leakattack {__version__}", built=built)
    text = text.replace('<meta charset="utf-8">', '<meta charset="utf-8">' + MARK, 1)
    try:
        atomic_write_text(link_target(out), text)  # an --out that is a link stays one
    except OSError as err:
        raise UserError(f"--out '{out}' cannot be written: {err.strerror or err}") from None
    runs = sum(kind == "run" for kind, _ in items)
    sweeps = len(items) - runs
    print(f"{runs} run{'s' if runs != 1 else ''} | {sweeps} sweep{'s' if sweeps != 1 else ''} | "
          f"{len(text.encode()) / 1e6:.1f} MB | {out}")
    return 0


__all__ = ["cmd_report", "report_out", "HTML_SUFFIXES", "MARK"]
