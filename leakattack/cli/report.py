"""``leakattack report PATH... --out report.html``: one self-contained HTML audit report of run and sweep folders."""

from __future__ import annotations

import datetime as _dt

from .. import __version__
from ..errors import UserError
from ..figures.report import build_report, check_folders
from ..results import atomic_write_text, writable_out


def cmd_report(a) -> int:
    out = writable_out(a.out, ".html")
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


__all__ = ["cmd_report"]
