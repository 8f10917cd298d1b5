"""``leakattack figures``: redraw a sweep's summary and figures from its stored results."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..sweep import finalize


def cmd_figures(a) -> int:
    out = Path(a.dir)
    if not (out / "results.jsonl").exists():
        raise UserError(f"no results.jsonl in '{out}': run a sweep into it first")
    res = finalize(out)
    print(" | ".join([f"{res['points']} points", f"{len(res['figures'])} figures in {out / 'figures'}",
                      *res["notes"]]))
    return 0
