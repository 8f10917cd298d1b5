"""``leakattack sweep``: run a grid of attacks from a TOML file (resumable, parallel)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from ..errors import UserError
from ..sweep import check_name, load_plan, run_sweep


def cmd_sweep(a) -> int:
    plan = load_plan(a.config)
    jobs = a.jobs if a.jobs is not None else plan.settings.get("jobs", 1)
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    out = Path(a.out) if a.out else Path("results/sweeps") / check_name(plan.settings.get("name", Path(a.config).stem))
    t0 = time.perf_counter()
    res = run_sweep(plan, out, jobs=jobs, progress=not a.quiet)
    best = max((r.get("psnr_mean", -math.inf) for r in res["rows"]), default=float("nan"))
    extra = [f"{plan.duplicates} duplicate grid point{'s' if plan.duplicates != 1 else ''} run once"] \
        if plan.duplicates else []
    if res.get("skipped"):
        extra.insert(0, f"{res['skipped']} already finished in {out} (skipped), {res['ran']} run now")
    print(" | ".join([f"{res['points']}/{len(plan.points)} points", *extra, f"{len(res['rows'])} settings",
                      f"best mean PSNR {best:.2f} dB", f"{time.perf_counter() - t0:.1f} s", str(out / "summary.csv"),
                      f"{len(res['figures'])} figures in {out / 'figures'}", *res.get("notes", [])]))
    return 0


def register(sub) -> None:
    """Add the ``sweep`` subcommand."""
    p = sub.add_parser("sweep", help="run a grid of attacks from a TOML file (resumable, parallel)",
                       description="Expand the [grid] of a sweep file over [base], run one attack per point, append "
                                   "results.jsonl, write summary.csv and figures. Re-running resumes; one sweep at "
                                   "a time per output folder.")
    p.add_argument("config", help="sweep file (TOML with [sweep], [base], [grid])")
    p.add_argument("--out", default=None, help="output folder (default: results/sweeps/<name>/)")
    p.add_argument("--jobs", type=int, default=None, help="parallel worker processes, one thread each (default: [sweep] jobs or 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)
