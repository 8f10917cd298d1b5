"""``leakattack sweep``: run a grid of attacks from a TOML file (resumable, parallel)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from ..errors import UserError
from ..sweep import check_name, load_plan, run_sweep

#: options of the slurm backend: flag -> keyword of SlurmBackend
SLURM_OPTIONS = {"--partition": "partition", "--time": "time", "--mem": "mem", "--gpus": "gpus",
                 "--cpus-per-task": "cpus_per_task", "--retries": "retries"}


def _backend_options(a) -> dict:
    given = {flag: getattr(a, kw) for flag, kw in SLURM_OPTIONS.items() if getattr(a, kw) is not None}
    if a.backend != "slurm" and given:
        raise UserError(f"{next(iter(given))} is an option of the slurm backend, not of '{a.backend}': add "
                        "--backend slurm, or leave it out")
    return {SLURM_OPTIONS[flag]: v for flag, v in given.items()}


def cmd_sweep(a) -> int:
    options = _backend_options(a)
    plan = load_plan(a.config)
    jobs = a.jobs if a.jobs is not None else plan.settings.get("jobs", None if a.backend == "slurm" else 1)
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    out = Path(a.out) if a.out else Path("results/sweeps") / check_name(plan.settings.get("name", Path(a.config).stem))
    t0 = time.perf_counter()
    res = run_sweep(plan, out, jobs=jobs, progress=not a.quiet, backend=a.backend, options=options)
    best = max((r.get("psnr_mean", -math.inf) for r in res["rows"]), default=float("nan"))
    extra = [f"{plan.duplicates} duplicate grid point{'s' if plan.duplicates != 1 else ''} run once"] \
        if plan.duplicates else []
    if res.get("skipped"):
        extra.insert(0, f"{res['skipped']} already finished in {out} (skipped), {res['ran']} run now")
    print(" | ".join([f"{res['points']}/{len(plan.points)} points", *extra, f"{len(res['rows'])} settings",
                      f"best mean PSNR {best:.2f} dB", f"{time.perf_counter() - t0:.1f} s", str(out / "summary.csv"),
                      f"{len(res['figures'])} figures in {out / 'figures'}", *res.get("notes", [])]))
    return 0
