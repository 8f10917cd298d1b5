"""``leakattack figures``: redraw a sweep's summary and figures from its stored results."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..sweep import finalize


def figures_said(res: dict, out: Path) -> str:
    """The summary line's part on a sweep's figures: how many and where, or that none was drawn."""
    n = len(res["figures"])
    return f"{n} figure{'s' if n != 1 else ''} in {out / 'figures'}" if n else "no figures"


def cmd_figures(a) -> int:
    out = Path(a.dir)
    if not (out / "results.jsonl").exists():
        raise UserError(f"no results.jsonl in '{out}': run a sweep into it first")
    res = finalize(out)
    print(" | ".join([f"{res['points']} points", figures_said(res, out),
                      *res["notes"]]))
    return 0
