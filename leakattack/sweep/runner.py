"""The sweep's coordinator: runs a plan's points on a backend and is the one writer of their results.

Every finished point appends one JSON line ``{"key", "index", "grid",
"params", "metrics"}`` to ``DIR/results.jsonl`` (one ``write`` + ``fsync``, by
this process only) and its reconstruction to ``DIR/points/<key>.pt``.  Running
the same plan again skips finished points; a torn last line (kill -9
mid-write) is dropped first.  At the end ``summary.csv`` (mean and sample std
over seeds and images per setting, in grid order) and the figures are written
from the stored results.

On a cluster backend the jobs hand their results back to this process (the
slurm backend: as pickled files it reads), so it stays the one writer there too.

Only one sweep runs in a folder at a time: it holds ``DIR/sweep.lock``
(:mod:`.lock`), and a second sweep on the same folder is refused.

Interrupted (Ctrl-C, SIGTERM), :func:`run_sweep` raises :class:`SweepInterrupted`,
a ``KeyboardInterrupt`` that says whether any point had started and how many
unfinished ones were stopped, for the command line's closing line.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from pathlib import Path
from typing import Callable

import torch

from targets.victim import cpu_cores

from .. import experiment, figures
from ..config import RunConfig
from ..errors import SettingWarning, UserError, listed
from ..figures.sweep import with_grid_values
from ..metrics import identified_line, lpips_missing
from ..plugins import import_modules, load_plugins, provenance, used_outside
from ..progress import progress_bar
from ..rebuilt import NOT_REBUILT, REBUILT, batch_images
from ..results import (
    append_line,
    checked_points,
    load_records,
    read_results,
    summarize,
    write_csv,
    write_json,
    write_tensors,
)
from ..seeds import torch_defaults
from .backends import SlurmBackend, get_backend
from .backends.local import worker_share
from .backends.slurm import listed_jobs
from .lock import FolderLock
from .plan import Plan, point_key, sweep_warnings, value_text


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a sweep: ``started``, whether any point had started; ``unfinished``, how many
    points were started and not written; ``cancelled``, whether those were cluster jobs that were cancelled;
    ``finished`` and ``planned``, the points in results.jsonl and in the plan (None where not counted);
    ``drawing``, whether it came while summary.csv and the figures were being written."""

    def __init__(self, started: bool = False, unfinished: int = 0, cancelled: bool = False,
                 finished: int | None = None, planned: int | None = None, drawing: bool = False):
        super().__init__()
        self.started, self.unfinished, self.cancelled = started, unfinished, cancelled
        self.finished, self.planned, self.drawing = finished, planned, drawing

    @property
    def waiting(self) -> int:
        """How many planned points had not started (0 where the points were not counted)."""
        if self.finished is None or self.planned is None:
            return 0
        return max(0, self.planned - self.finished - self.unfinished)


def cancelled_text(stopped: int, late: int) -> str:
    """What stopping a sweep did to its other jobs: ``stopped`` cancelled without a result, ``late`` finished while
    they were being cancelled (and were written)."""
    n = stopped + late
    text = f"the sweep cancelled its {n} other job{'s' if n != 1 else ''} still queued or running"
    if late:
        text += f" ({late} of them finished first and {'was' if late == 1 else 'were'} written)"
    return text


#: the texts of the run warnings this process has printed for sweep points (or read from the plan's own)
_warned: set[str] = set()


def run_point(params: dict, with_lpips: bool = False, warned: frozenset[str] = frozenset(),
              modules: tuple = ()):
    """One attack: (metrics.json's keys plus m = C*H*W*batch, the reconstruction in truth order, the truth), the
    images as numpy arrays.

    Its run warnings name their sweep keys, and each is printed once per process; those in ``warned`` (the plan's
    own, printed when it was read) are not printed again.  ``modules``: (module, file) of the user's modules that
    registered names the sweep uses in the process that started it (:func:`leakattack.plugins.used_outside`),
    imported here first where they are not yet (a worker process).
    """
    m, recon, truth, *_ = _point(params, with_lpips, warned, modules)
    return m, recon, truth


def _point(params: dict, with_lpips: bool, warned: frozenset[str], modules: tuple):
    """:func:`run_point`'s three, the most threads the attack ran torch on (what its last bits depend on) and the
    cores the process counted as its own (what the thread rule chose those threads from: the sweep's share of the
    machine per job)."""
    _warned.update(warned)
    load_plugins()  # a worker process's first point: the names the coordinator's plugins registered
    import_modules(modules)  # ... and those its own modules registered (a notebook's `import mymodels`)
    with sweep_warnings(_warned), torch_defaults():  # a point run in the caller's process (a notebook) too
        p = experiment.prepare(RunConfig.from_dict(params))
        out = experiment.execute(p, progress=False, with_lpips=with_lpips)
    m = out.metrics.to_dict()
    assert p.x is not None  # a sweep point attacks images of its data set, so the truth is known
    m["m"] = int(p.x.numel())
    order = torch.as_tensor(out.metrics.match)
    recon = out.result.x.clamp(0, 1)[order]
    return m, recon.detach().float().cpu().numpy(), p.x.detach().float().cpu().numpy(), out.threads, cpu_cores()


def _run_indexed(with_lpips: bool, warned: frozenset[str], modules: tuple, item: tuple[int, dict]):
    """A backend job: ``item`` is (index, point); ``warned``: the plan's run warnings, printed already; ``modules``:
    as :func:`run_point` takes them.  Returns :func:`_point`'s four.  A point its run refuses (a check only the attack
    itself can make, such as a prior that is inf at its start) raises the run's sentence with the point's grid values,
    ``point`` set to them."""
    try:
        return _point(item[1]["params"], with_lpips, warned, modules)
    except UserError as err:
        err.args = (f"{err} (sweep point {value_text(item[1]['grid'])})",)
        err.point = item[1]["grid"]  # type: ignore[attr-defined]  # pickled with the error from a worker process
        raise


def _point_of(item: tuple[int, dict]) -> str:
    """A job's name across runs: its point's key."""
    return item[1]["key"]


def run_sweep(plan: Plan, out: Path, jobs: int | None = 1, progress: bool = True, backend: str = "local",
              options: dict | None = None, ready: Callable[[], None] | None = None) -> dict:
    """Run the points not yet in ``out/results.jsonl`` on ``backend``, then write summary.csv and the figures.

    ``options`` go to the backend (slurm: partition, time, mem, gpus, ...).
    ``ready()`` is called once the backend has accepted its options and the
    folder is locked, before anything is written (the command line prints the
    points' warnings only then, so that a refused sweep prints its refusal alone).
    Interrupted (Ctrl-C, or a point that fails), the backend's running jobs are
    cancelled and every result already written is kept.  Another sweep running
    in ``out`` makes this one stop before writing anything (UserError).
    """
    # an unknown name, a bad option or a scheduler that does not answer is refused before anything is written
    try:
        workers = get_backend(backend, jobs=jobs, **(options or {}))
    except KeyboardInterrupt:
        raise SweepInterrupted() from None
    out = Path(out)
    listed = 0 if isinstance(workers, SlurmBackend) else listed_jobs(out)
    if listed:
        warnings.warn(f"{out / 'slurm' / 'jobs.json'} lists {listed} SLURM job{'s' if listed != 1 else ''} of an "
                      f"earlier --backend slurm run: the {backend} backend neither reads their results nor cancels "
                      "them; resume with --backend slurm, or cancel them with scancel", SettingWarning, stacklevel=2)
    out.mkdir(parents=True, exist_ok=True)
    with FolderLock(out):
        if ready is not None:
            ready()
        workers.use_folder(out)
        return _run_locked(plan, out, workers, progress)


def warn_threads_over_share(todo: list[dict], jobs: int | None) -> None:
    """One warning where the points to run (``todo``) set more threads than a worker's share of the cores under
    ``--jobs`` (:func:`~leakattack.sweep.backends.local.worker_share`).

    A run refuses threads beyond its cores; a sweep's point is checked against the machine's, but its worker holds
    only its share of them, so such points run more threads at once than there are cores.
    """
    if not jobs or jobs <= 1 or len(todo) <= 1:  # one point at a time: its threads alone on the cores (a lone last
        return  # point of --jobs N counts a worker's share as every core, and runs its own threads on nothing else
    cores, share = cpu_cores(), worker_share(jobs)
    counts = [t for pt in todo if isinstance(t := pt["params"].get("threads"), int) and t > share]
    if not counts:
        return
    over, count, at_once = sorted(set(counts)), len(counts), min(jobs, len(todo))
    one = len(over) == 1
    warnings.warn(f"threads {listed([str(t) for t in over])} (at {count} of the {len(todo)} points to run) "
                  f"{'is' if one else 'are'} more than a worker's share of the cores: {jobs} jobs give each of "
                  f"their {at_once} workers at once {share} of the {cores} core{'s' if cores != 1 else ''}, so they "
                  f"run up to {max(over) * at_once} threads on {cores} and wait on each other (threads = \"auto\" "
                  "takes the share; or run fewer jobs)", SettingWarning, stacklevel=3)


def _run_locked(plan: Plan, out: Path, workers, progress: bool) -> dict:
    code = provenance()  # the user's code behind registered names, as a run's config.json records it
    meta = {**plan.meta(), **({"plugins": code} if code else {})}
    # an earlier sweep's plan stays in sweep.json until this one writes a point: a changed sweep file stopped before
    # its first point leaves the folder's summary.csv and figures as they were, and still drawable
    plan_written = not (out / "sweep.json").exists()
    if plan_written:
        write_json(out / "sweep.json", meta)
    results = out / "results.jsonl"
    done = {point_key(r["params"]) for r in read_results(results, repair=True) if "params" in r}
    checked_points(out, load_records(out, plan, key_of=point_key))  # a bad stored metric: refused before any run
    todo = [(i, pt) for i, pt in enumerate(plan.points) if pt["key"] not in done]
    others = len(done - {pt["key"] for pt in plan.points})
    if others:
        one = others == 1
        warnings.warn(f"{out} holds {others} finished point{'' if one else 's'} of another sweep file's grid: "
                      f"{'it stays' if one else 'they stay'} in results.jsonl and {'is' if one else 'are'} left out "
                      "of this sweep's summary.csv and figures (a new --out keeps the two apart)",
                      SettingWarning, stacklevel=2)
    modules, scripted, unimportable = used_outside([pt["params"] for _, pt in todo])
    cluster = isinstance(workers, SlurmBackend)
    elsewhere = cluster or ((getattr(workers, "jobs", 1) or 1) > 1 and len(todo) > 1)  # not in this process
    lost = unimportable + (scripted if cluster else [])
    if elsewhere and lost:
        where = ("the script this process runs" if not unimportable else
                 "code this process ran outside any file (a notebook cell, python -c)")
        raise UserError(f"the sweep uses {listed(lost)}, registered by {where}, which its "
                        f"{'cluster jobs' if cluster else 'worker processes'} cannot import: define "
                        f"{'it' if len(lost) == 1 else 'them'} in a .py file and import that, or name the file in "
                        "LEAKATTACK_PLUGINS, or run the sweep with one job")
    if not cluster:
        warn_threads_over_share([pt for _, pt in todo], getattr(workers, "jobs", 1) or 1)
    lpips = bool(plan.settings.get("lpips", False))
    missing = lpips_missing() if lpips and todo else ""
    if missing:
        warnings.warn(f"lpips = true: {missing}; the points record LPIPS as n/a", SettingWarning, stacklevel=2)
    bar = progress_bar(len(plan.points), "sweep", "pt", progress, initial=len(plan.points) - len(todo))
    fd = os.open(results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    (out / "points").mkdir(exist_ok=True)
    started, written = False, 0

    def keep(i: int, pt: dict, result) -> None:
        nonlocal written, plan_written
        # a job's three of an earlier version (a SLURM result written before the thread count was kept) has none,
        # its four (before the cores were kept) no cores
        m, recon, truth, *rest = result
        threads, cores = (rest + [None, None])[:2]
        if not plan_written:
            write_json(out / "sweep.json", meta)
            plan_written = True
        write_tensors(out / "points" / f"{pt['key']}.pt",
                      {"recon": torch.from_numpy(recon), "truth": torch.from_numpy(truth)})
        append_line(fd, {"key": pt["key"], "index": i, "grid": pt["grid"], "params": pt["params"], "metrics": m,
                         **({"threads": threads} if isinstance(threads, int) else {}),
                         **({"cores": cores} if isinstance(cores, int) else {})})
        written += 1
        bar.set_postfix_str(f"PSNR {m['psnr']:.1f} dB")
        bar.update(1)

    try:
        with workers:  # leaving on an exception cancels the jobs still running; what is written stays
            jobs = workers.map_unordered(functools.partial(_run_indexed, lpips, plan.warned, tuple(modules)), todo,
                                         key=_point_of)
            started = bool(todo)
            for (i, pt), result in jobs:
                keep(i, pt, result)
    except BaseException as err:
        late = 0
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C again: the backend keeps the rest for the next run
            for (i, pt), result in workers.finished_late():  # points whose cancelled jobs finished all the same
                keep(i, pt, result)
                late += 1
        stopped = getattr(workers, "stopped", None)  # a cluster backend counts the jobs it cancelled
        if isinstance(err, KeyboardInterrupt):
            # counted from the file: Ctrl-C can land between a point's line and its count
            written = len(_finished(results, plan) - done)
            unfinished = stopped if stopped is not None else min(getattr(workers, "jobs", 1) or 1,
                                                                 len(todo) - written)
            unfinished = unfinished if started else 0
            raise SweepInterrupted(started, unfinished, stopped is not None,
                                   len(plan.points) - len(todo) + written, len(plan.points)) from None
        if isinstance(err, UserError) and (stopped or late):
            err.args = (f"{err}; {cancelled_text(stopped or 0, late)}",)
        raise
    finally:
        bar.close()
        os.close(fd)
    reattached = getattr(workers, "reattached", 0)
    if written:
        _warn_mixed_threads(results, plan)
    if not plan_written:  # every point was finished already: this plan is the folder's now
        write_json(out / "sweep.json", meta)
    try:
        drawn = finalize(out, plan)
    except KeyboardInterrupt:
        raise SweepInterrupted(True, 0, False, len(plan.points) - len(todo) + written, len(plan.points),
                               drawing=True) from None
    return {**drawn, "skipped": len(plan.points) - len(todo), "reattached": reattached,
            "ran": len(todo) - reattached}


def _warn_mixed_threads(results: Path, plan: Plan) -> None:
    """Warn once where the plan's points in ``results`` ran with different shares of the machine (each record's
    ``cores``, the cores its process counted as its own; records written before it was kept count as unknown): a
    point's threads follow its cores (a deep victim's attack takes every one, the Gauss-Newton algebra too), and
    its last bits its threads, so a sweep resumed with another ``--jobs`` (or on another machine) mixes points that
    an uninterrupted run would have computed alike.  The thread counts themselves differ within one uninterrupted
    sweep (points that reach Gauss-Newton run its algebra on every core, the others one thread)."""
    counts = sorted({r["cores"] for r in _plan_records(results, plan) if isinstance(r.get("cores"), int)})
    if len(counts) > 1:
        warnings.warn(f"this sweep's points ran with {listed([str(n) for n in counts])} cores each (resumed with "
                      "another --jobs, or on another machine): a point's last bits depend on the threads its attack "
                      "runs on, which follow its cores, so points run with different cores may differ in them from "
                      "an uninterrupted run (resume with the --jobs the sweep started with, on the same machine, to "
                      "keep them alike)", SettingWarning, stacklevel=3)


def _plan_records(results: Path, plan: Plan) -> list[dict]:
    """The records of ``results`` (results.jsonl) of the plan's points."""
    keys = {pt["key"] for pt in plan.points}
    return [r for r in read_results(results) if "params" in r and point_key(r["params"]) in keys]


def _finished(results: Path, plan: Plan) -> set[str]:
    """The keys of the plan's points that ``results`` (results.jsonl) holds."""
    return {point_key(r["params"]) for r in _plan_records(results, plan)}


def finalize(out: Path, plan: Plan | None = None) -> dict:
    """summary.csv and the figures from results.jsonl (points of the current plan, in grid order).

    ``notes``: what the figures leave out (e.g. series beyond the reconstruction grid's blocks); ``judged`` and
    ``rebuilt``: how many of the points have a verdict, and how many of those were rebuilt; ``images``: of batches
    with per-image verdicts, (images rebuilt on their own, images), or None (:func:`leakattack.rebuilt.batch_images`);
    ``identified``: how many points not rebuilt still single out images (:func:`leakattack.metrics.identified_line`).
    """
    records = checked_points(out, load_records(out, plan, key_of=point_key))
    if not records:
        raise UserError(f"'{out / 'results.jsonl'}' holds no finished point of the grid '{out / 'sweep.json'}' names: "
                        "nothing to draw, and summary.csv and figures/ are left as they are")
    # a key one [[grid]] table leaves out: the value its points ran with, as the figures' legends name it
    rows = summarize(with_grid_values(records))
    notes: list[str] = []
    paths = figures.sweep_figures(out, records, notes=notes)
    # last: a summary.csv that counts the points of results.jsonl vouches for the figures beside it (the report shows
    # them only then), so drawing cut short leaves the earlier summary, which no longer matches
    write_csv(out / "summary.csv", rows)
    verdicts = [v for r in records if (v := r["metrics"].get("verdict")) is not None]
    # the points not rebuilt whose reconstruction still singles out more images than their baselines do
    identified = sum(r["metrics"].get("verdict") == NOT_REBUILT and identified_line(r["metrics"]) is not None
                     for r in records)
    return {"points": len(records), "rows": rows, "figures": paths, "notes": notes, "judged": len(verdicts),
            "rebuilt": verdicts.count(REBUILT), "images": batch_images(r["metrics"] for r in records),
            "identified": identified}
