"""``leakattack sweep``: run a grid of attacks from a TOML file (resumable, parallel).

Without ``--out`` a sweep runs into a folder of its own, ``results/runs/sweep-<name>-<timestamp>/`` (ignored by
git), so that a user's sweep never resumes into, and skips every point of, the committed reference of the same name
under ``results/sweeps/<name>/``; ``leakattack reproduce`` writes those references, naming them with ``--out``.
Giving the same ``--out`` again resumes a sweep.  ``--dry-run`` checks every point as a run does and lists them,
one line each, without running or writing anything.
"""

from __future__ import annotations

import shlex
import sys
import time
import warnings
from pathlib import Path

from ..errors import UserError, listed
from ..figures.report.sweep_section import stored_summary, summary_matches
from ..results import writable_out
from ..results.io import ANY, own_folder
from ..results.runs import RUNS_ROOT, unused_path
from ..results.store import checked_points, load_records
from ..sweep import Plan, SweepInterrupted, check_name, get_backend, load_plan, point_key, read_results, run_sweep
from ..sweep.backends import SlurmJobFailed
from ..sweep.backends.base import WorkerLost
from ..sweep.backends.slurm import listed_jobs
from ..sweep.lock import FolderLock
from ..sweep.plan import check_name_length, value_text
from ..sweep.runner import warn_threads_over_share
from . import interrupted_exit
from .figures import figures_said, verdicts_text

#: options of the slurm backend: flag -> keyword of SlurmBackend
SLURM_OPTIONS = {"--partition": "partition", "--time": "time", "--mem": "mem", "--gpus": "gpus",
                 "--cpus-per-task": "cpus_per_task", "--retries": "retries"}


def default_sweep_dir(name: str, root: str | Path = RUNS_ROOT) -> Path:
    """``<root>/sweep-<name>-<YYYYmmdd-HHMMSS>/``, a suffix -2, -3, ... keeping it unique (nothing is created)."""
    return unused_path(Path(root) / f"sweep-{check_name_length(check_name(name))}-{time.strftime('%Y%m%d-%H%M%S')}")


def _backend_options(a) -> dict:
    given = {flag: getattr(a, kw) for flag, kw in SLURM_OPTIONS.items() if getattr(a, kw) is not None}
    if a.backend != "slurm" and given:
        flags = list(given)
        one = len(flags) == 1
        raise UserError(f"{listed(flags)} {'is an option' if one else 'are options'} of the slurm backend, not of "
                        f"'{a.backend}': add --backend slurm, or leave {'it' if one else 'them'} out")
    return {SLURM_OPTIONS[flag]: v for flag, v in given.items()}


def resume_command(a, out: Path, jobs: int | None = None, backend: str | None = None) -> str:
    """The command that resumes this sweep into ``out``: the options the user gave (``jobs`` and ``backend`` in place
    of theirs), shell-quoted."""
    words = ["leakattack", "sweep", str(a.config), "--out", str(out)]
    backend = backend or a.backend
    if backend != "local":
        words += ["--backend", backend]
    if jobs is not None or a.jobs is not None:
        words += ["--jobs", str(jobs if jobs is not None else a.jobs)]
    words += [w for flag, kw in SLURM_OPTIONS.items() if getattr(a, kw) is not None
              for w in (flag, f"{getattr(a, kw):g}" if isinstance(getattr(a, kw), float) else str(getattr(a, kw)))]
    if a.quiet:
        words.append("--quiet")
    return shlex.join(words)


def interrupted_line(err: KeyboardInterrupt, planned: bool) -> str:
    """What an interrupted sweep kept and dropped (``planned``: the interrupt came after the plan was read)."""
    # a plain Ctrl-C outside run_sweep, after the plan was read, says only that finished results are kept
    swept = err if isinstance(err, SweepInterrupted) else SweepInterrupted(started=True)
    if not planned or not swept.started:
        return "leakattack: interrupted before any point started; no result was written"
    line = "leakattack: interrupted; finished results are kept"
    if swept.finished is not None:
        line += f" ({swept.finished} of {swept.planned} points)"
    n = swept.unfinished
    if n == 1:
        line += ", the unfinished point was not written"
    elif n > 1:
        line += f", the {n} unfinished points were not written"
    if n and swept.cancelled:
        line += f" ({'its job was' if n == 1 else 'their jobs were'} cancelled)"
    if swept.waiting:
        line += f"; {swept.waiting} point{'s' if swept.waiting != 1 else ''} had not started"
    if swept.drawing:
        line += "; summary.csv and the figures were being drawn and may be those of fewer points"
    return line


def stale_summary(out: Path) -> str | None:
    """Where an interrupted sweep leaves a summary.csv (an earlier sweep's or ``leakattack figures``') that does not
    count the points finished now: what it and figures/ hold, and the command that redraws them; else None."""
    if not (out / "summary.csv").is_file():
        return None
    try:
        rows, records = stored_summary(out), load_records(out)
    except (UserError, OSError):  # a summary that is not a sweep's table: the report says so when it reads it
        return None
    if rows is None or summary_matches(rows, records):
        return None
    drawn = sum(int(r["n"]) for r in rows)
    return (f"summary.csv and figures/ are of {drawn} point{'s' if drawn != 1 else ''}, drawn before, not of the "
            f"{len(records)} finished now: leakattack figures {shlex.quote(str(out))} redraws them")


def interrupted_note(a) -> str | None:
    """Where a signal stops a sweep before its backend took up the SLURM jobs an earlier run of it left in
    ``--out``'s ``slurm/jobs.json`` (a resumed sweep's first seconds), that they still run and how to resume; else
    None.  A signal later, once the backend holds them, cancels them with the sweep's own."""
    if getattr(a, "out", None) is None or not str(a.out).strip():
        return None
    out = Path(a.out)
    n = listed_jobs(out)
    if not n:
        return None
    return (f"{n} SLURM job{'s' if n != 1 else ''} of an earlier run of this sweep, listed in "
            f"{out / 'slurm' / 'jobs.json'}, {'is' if n == 1 else 'are'} still queued or running: resume with: "
            f"{resume_command(a, out, backend='slurm')} (which takes {'it' if n == 1 else 'them'} up), or stop "
            f"{'it' if n == 1 else 'them'} with scancel")


def point_line(index: int, point: dict, width: int) -> str:
    """One planned point: its number, key and grid values (``key=value``, in the grid's order)."""
    values = "  ".join(f"{k}={value_text(v)}" for k, v in point["grid"].items())
    return f"{index:>{width}}  {point['key']}  {values}"


def dry_run(a, plan: Plan, out: Path | None, jobs: int | None = 1) -> int:
    """``--dry-run``: the plan's points, each checked, one line each; with ``--out``, which of them are finished
    there already (results.jsonl is read, not repaired), and who runs in it where another sweep holds it."""
    finished = set() if out is None else {point_key(r["params"]) for r in read_results(out / "results.jsonl")}
    if out is not None:  # a bad stored metric is refused as the run refuses it, before any point
        checked_points(out, load_records(out, plan, key_of=point_key))
    finished &= {pt["key"] for pt in plan.points}
    n = len(plan.points)
    head = [f"{a.config}: {n} point{'s' if n != 1 else ''}, each checked as a run checks it; nothing run or written"]
    if plan.duplicates:
        head.append(f"{plan.duplicates} duplicate grid point{'s' if plan.duplicates != 1 else ''} left out")
    if out is not None:  # a folder another sweep runs in is read as it stands: its points go on finishing
        busy = FolderLock(out).holder()
        held = f" (in use by another sweep, {busy}: it may finish more while it runs)" if busy else ""
        head.append(f"{len(finished)} already finished in {out}{held}, {n - len(finished)} to run")
    if a.backend == "local":  # as the run would warn, after the points' checks
        warn_threads_over_share([pt for pt in plan.points if pt["key"] not in finished], jobs)
    print(" | ".join(head))
    width = len(str(n))
    for i, pt in enumerate(plan.points, 1):
        print(point_line(i, pt, width) + ("  (finished)" if pt["key"] in finished else ""))
    return 0


def best_text(rows: list[dict]) -> str:
    """``best mean PSNR P dB``, with the baseline of that setting (the better of the attack's start and the data
    set's mean image, mean over its points) where it is recorded."""
    scored = [r for r in rows if r.get("psnr_mean") is not None]
    if not scored:
        return "best mean PSNR n/a"
    best = max(scored, key=lambda r: r["psnr_mean"])
    base = best.get("baseline_psnr_mean")
    return f"best mean PSNR {best['psnr_mean']:.2f} dB" + (f" (baseline {base:.2f} dB)" if base is not None else "")


#: what a sweep writes into its --out folder (figures and points as files in their folders, the slurm backend's
#: job files in slurm/): an existing folder holding anything else, or a folder where a file belongs or the other
#: way round, is refused
SWEEP_FILES = {"sweep.json": None, "results.jsonl": None, "summary.csv": None, "sweep.lock": None,
               "figures": {"*.png": None, "*.pdf": None}, "points": {"*.pt": None}, "slurm": {"*": ANY}}


def sweep_out(folder: str | Path) -> Path:
    """``folder`` (``--out``, or the default folder) as the sweep's, refused in one sentence where a sweep may not
    write into it (:data:`SWEEP_FILES`)."""
    out = writable_out(folder)
    if (out / "metrics.json").is_file() and not (out / "results.jsonl").is_file():
        raise UserError(f"--out '{out}' is a run's folder (it holds metrics.json): a sweep beside it would be "
                        "read as that run; name a new folder or an earlier sweep's")
    own_folder(out, folder, SWEEP_FILES, "a sweep")
    return out


class HeldWarnings:
    """Inside ``with``, warnings are held until :meth:`show` (then printed, and later ones pass as usual); those still
    held when the block ends are dropped: a sweep refused or interrupted after its points were checked (a bad option,
    a folder in use) prints its refusal alone."""

    def __enter__(self) -> "HeldWarnings":
        self.held: list | None = []
        self._show = warnings.showwarning

        def hold(message, category, filename, lineno, file=None, line=None):
            if self.held is None:
                self._show(message, category, filename, lineno, file, line)
            else:
                self.held.append((message, category, filename, lineno, file, line))

        warnings.showwarning = hold
        return self

    def show(self) -> None:
        """Print the warnings held so far; from now on they pass."""
        held, self.held = self.held or [], None
        for args in held:
            self._show(*args)

    def __exit__(self, exc_type, exc, tb) -> None:
        warnings.showwarning = self._show


def cmd_sweep(a) -> int:
    with HeldWarnings() as held:
        return _sweep(a, held)


def _sweep(a, held: HeldWarnings) -> int:
    planned, out, jobs = False, None, None
    try:
        options = _backend_options(a)
        if a.jobs is not None and a.jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {a.jobs}")
        # a given --out before the points are checked: a refused sweep prints its refusal alone
        given = None if a.out is None else sweep_out(a.out)
        if given is not None and not a.dry_run:
            FolderLock(given).check()  # another sweep's folder: refused now, not after every point was checked
        plan = load_plan(a.config, progress=not a.quiet)
        planned = True
        jobs = a.jobs if a.jobs is not None else plan.settings.get("jobs", None if a.backend == "slurm" else 1)
        out = given if given is not None else sweep_out(default_sweep_dir(plan.settings.get("name",
                                                                                          Path(a.config).stem)))
        if a.dry_run:
            get_backend(a.backend, jobs=jobs, **options)  # the slurm backend checks its request with sbatch --test-only
            held.show()
            return dry_run(a, plan, out if a.out is not None else None, jobs)
        t0 = time.perf_counter()
        # the points' warnings once the backend took its options and the folder is locked
        res = run_sweep(plan, out, jobs=jobs, progress=not a.quiet, backend=a.backend, options=options,
                        ready=held.show)
    except (WorkerLost, OSError) as err:  # a killed worker, a disk that fills: the finished points stay
        if out is None or not out.is_dir() or isinstance(err, BrokenPipeError):  # a closed stdout is no disk's fault
            raise
        what = str(err) if isinstance(err, WorkerLost) else \
            f"cannot write into '{out}' ({err.strerror or err}); the points finished are kept"
        # a killed worker is most often the memory of too many at once: half as many
        fewer = jobs // 2 if isinstance(err, WorkerLost) and isinstance(jobs, int) and jobs > 1 else None
        raise UserError(f"{what}: resume with{' fewer --jobs' if fewer else ''}: "
                        f"{resume_command(a, out, fewer)}") from None
    except SlurmJobFailed as err:  # a job that failed on every attempt: the points finished stay
        if out is None or not out.is_dir():
            raise
        raise UserError(f"{err}; the points finished are kept: once its log says what to mend, resume with: "
                        f"{resume_command(a, out)}") from None
    except UserError as err:  # a point its run refused: the points finished stay, the rest wait for the mended file
        if getattr(err, "point", None) is None or out is None or not out.is_dir():
            raise
        raise UserError(f"{err}; the points finished are kept: mend or drop that point in {a.config}, then resume "
                        f"with: {resume_command(a, out)}") from None
    except KeyboardInterrupt as err:
        print(interrupted_line(err, planned), file=sys.stderr)
        early = interrupted_note(a) if not (isinstance(err, SweepInterrupted) and err.started) else None
        if early:  # before the backend took up an earlier run's jobs: they run on
            print(f"leakattack: {early}", file=sys.stderr)
        elif out is not None and out.is_dir():
            stale = None if isinstance(err, SweepInterrupted) and err.drawing else stale_summary(out)
            if stale:
                print(f"leakattack: {stale}", file=sys.stderr)
            print(f"leakattack: resume with: {resume_command(a, out)}", file=sys.stderr)
        return interrupted_exit()
    extra = [f"{plan.duplicates} duplicate grid point{'s' if plan.duplicates != 1 else ''} run once"] \
        if plan.duplicates else []
    if res.get("skipped") or res.get("reattached"):
        parts = [f"{res['skipped']} already finished in {out} (skipped)"] if res.get("skipped") else []
        if res.get("reattached"):
            parts.append(f"{res['reattached']} re-attached (submitted by an earlier run)")
        extra.insert(0, ", ".join([*parts, f"{res['ran']} run now"]))
    settings = len(res["rows"])
    print(" | ".join([f"{res['points']}/{len(plan.points)} points", *extra,
                      f"{settings} setting{'s' if settings != 1 else ''}",
                      best_text(res["rows"]), *verdicts_text(res), f"{time.perf_counter() - t0:.1f} s",
                      str(out / "summary.csv"),
                      figures_said(res, out), *res.get("notes", [])]))
    return 0
