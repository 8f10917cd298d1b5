"""``leakattack figures``: redraw a sweep's summary and figures from its stored results."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from ..results.store import read_results
from ..sweep import finalize
from ..sweep.lock import FolderLock


def figures_said(res: dict, out: Path) -> str:
    """The summary line's part on a sweep's figures: how many (each as PNG and PDF) and where, or that none was
    drawn."""
    n = len({Path(p).stem for p in res["figures"]})
    return f"{n} figure{'s' if n != 1 else ''} in {out / 'figures'}" if n else "no figures"


def cmd_figures(a) -> int:
    out = Path(a.dir)
    if not (out / "results.jsonl").exists():
        raise UserError(f"no results.jsonl in '{out}': run a sweep into it first")
    stored = [ln for ln in (out / "results.jsonl").read_bytes().split(b"\n") if ln.strip()]
    if stored and not read_results(out / "results.jsonl"):
        raise UserError(f"'{out / 'results.jsonl'}' holds {len(stored)} line{'s' if len(stored) != 1 else ''} and "
                        "none is a finished point of a sweep (a JSON object with its key, grid, parameters and "
                        "metrics): nothing to draw, and summary.csv and figures/ are left as they are")
    for folder in (out, out / "figures"):
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"'{folder}' is not a writable folder: figures rewrites the sweep's summary.csv and "
                            "figures/ in place")
    with FolderLock(out):  # not while a sweep writes the folder
        try:
            res = finalize(out)
        except OSError as err:  # a disk that fills, a file made read-only
            raise UserError(f"cannot write the summary and figures into '{out}' ({err.strerror or err}): the "
                            "stored results are untouched") from None
    print(" | ".join([f"{res['points']} point{'s' if res['points'] != 1 else ''}", figures_said(res, out),
                      *res["notes"]]))
    return 0
