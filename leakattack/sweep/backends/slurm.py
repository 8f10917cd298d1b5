"""A SLURM cluster: the items run as job arrays submitted through submitit.

Each job unpickles ``fn`` and its item on a compute node, runs it and pickles
the result (or the error's traceback) next to its logs; the coordinator polls
for those files and yields the results, so it stays the one writer of the
sweep's store.  The job files live in ``FOLDER/slurm/<job id>/`` (FOLDER: the
sweep folder given by :meth:`SlurmBackend.use_folder`), which must be on a
file system the compute nodes share.

Resuming.  ``FOLDER/slurm/jobs.json`` maps each item's key to its SLURM job
id, written before and after every ``sbatch``.  A coordinator that is killed
(kill -9, a lost login session) and started again re-attaches to the jobs of
the items it is asked for again: a finished job's result is read from its
file, a job still queued or running is waited for, and only an item whose job
failed or ended without a result is submitted again.  Ctrl-C (or SIGTERM, or a failed
job) cancels the jobs still queued or running with ``scancel``; results
already on disk are kept for the next run.

Failures.  A job that raises, or ends without a result (time limit, out of
memory, node failure), is submitted again up to ``retries`` times in one run;
after that :class:`SlurmJobFailed` names the item, its SLURM job id and its
stderr log, and the next run starts the item afresh.
"""

from __future__ import annotations

import contextlib
import io
import math
import pickle
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError, JobPaths

from ...errors import UserError
from ...results import read_json, write_json
from .base import Backend

#: the SLURM commands the backend runs (submitit runs sbatch; jobs run under srun)
COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "srun")
#: squeue states of a job that will not run (again); any other listed state is alive
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
STATE_FILE = "jobs.json"
#: seconds a job that left the queue may take to show its result file (shared file systems cache directories)
RESULT_GRACE_S = 15.0


class SlurmJobFailed(UserError):
    """A job failed on every attempt; the message names its SLURM job id and its stderr log."""


def _slurm(args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess | None:
    """Run a SLURM command; None when it cannot run or does not answer in ``timeout`` seconds."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _last_line(text: str) -> str:
    """The last non-empty line (a traceback's exception, a command's final complaint)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _count(name: str, value, least: int) -> int:
    """A whole number of at least ``least``, or one UserError sentence naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < least:
        raise UserError(f"SLURM {name} must be a whole number of at least {least}, got {value!r}")
    return int(value)


def _amount(name: str, value) -> float:
    """A finite number above 0, or one UserError sentence naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"SLURM {name} must be a number above 0, got {value!r}")
    return float(value)


class _Attempt:
    """One submitted job of an item: its SLURM job id and the files submitit writes for it."""

    def __init__(self, job: str | None, name: str, tries: int, jobs_dir: Path):
        self.job, self.name, self.tries = job, name, tries
        self.jobs_dir = jobs_dir
        self.gone_since: float | None = None  # when squeue first no longer listed it as alive

    @property
    def paths(self):
        return JobPaths(self.jobs_dir / "%j", job_id=self.job, task_id=0)

    def outcome(self):
        """("success", result) or ("error", traceback text) once the job wrote its result file, else None."""
        if self.job is None:
            return None
        path = self.paths.result_pickle
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except (FileNotFoundError, EOFError, pickle.UnpicklingError):
            return None

    def record(self) -> dict:
        return {"job": self.job, "name": self.name, "tries": self.tries}


class SlurmBackend(Backend):
    """Job arrays on a SLURM cluster, submitted with submitit (see the module docstring).

    ``jobs``: at most this many array tasks run at once (None: as many as the
    scheduler grants); ``partition`` (None: the cluster's default), ``time``
    (minutes per job; submitit needs one to time its jobs), ``mem`` (GB per job; None: the
    partition's default), ``gpus`` (per job), ``cpus_per_task``; ``retries``:
    how many times a failed job is submitted again.  The request is checked
    with ``sbatch --test-only`` when the backend is built, so a SLURM that is
    missing or does not answer, an unknown partition or a request no node can
    meet is refused (UserError) before anything is written.
    """

    def __init__(self, jobs: int | None = None, *, partition: str | None = None, time: int = 60,
                 mem: float | None = None, gpus: int = 0, cpus_per_task: int = 1, retries: int = 2,
                 poll_s: float = 0.5, queue_poll_s: float = 10.0):
        self.jobs = None if jobs is None else _count("--jobs", jobs, 1)
        if partition is not None and (not isinstance(partition, str) or not partition.strip()
                                      or any(c.isspace() or c in ",;'\"\\$`" for c in partition)):
            raise UserError(f"SLURM --partition must be one partition name, got {partition!r}")
        self.partition = partition
        self.time = _count("--time (minutes)", time, 1)
        self.mem = None if mem is None else _amount("--mem (GB)", mem)
        self.gpus = _count("--gpus", gpus, 0)
        self.cpus_per_task = _count("--cpus-per-task", cpus_per_task, 1)
        self.retries = _count("--retries", retries, 0)
        self.poll_s, self.queue_poll_s = poll_s, queue_poll_s
        self._folder: Path | None = None
        self._tmp: Path | None = None
        self._live: dict[str, _Attempt] = {}
        self._state: dict[str, dict] = {}
        self._persist = False
        self._check_cluster()

    # -- the request, checked once -------------------------------------------------------------
    def _sbatch_flags(self) -> list[str]:
        flags = [f"--cpus-per-task={self.cpus_per_task}", f"--time={self.time}"]
        if self.partition:
            flags.append(f"--partition={self.partition}")
        if self.mem:
            flags.append(f"--mem={self._mem_mb()}M")
        if self.gpus:
            flags.append(f"--gpus-per-node={self.gpus}")
        return flags

    def _mem_mb(self) -> int:
        assert self.mem is not None, "no --mem given"
        return max(1, int(round(self.mem * 1024)))

    def _check_cluster(self) -> None:
        missing = [c for c in COMMANDS if shutil.which(c) is None]
        if missing:
            raise UserError(f"the slurm backend needs SLURM's commands on PATH and '{missing[0]}' is not there: run "
                            "the sweep where SLURM is installed (a login node), or use --backend local")
        ping = _slurm(["scontrol", "ping"], timeout=30)  # answers at once, where sbatch retries for a while
        if ping is None or ping.returncode != 0:
            said = [ln.strip() for ln in (ping.stdout + "\n" + ping.stderr if ping else "").splitlines()
                    if " is " in ln or "error" in ln.lower()]
            why = said[0] if said else "no reply in 30 s" if ping is None else "scontrol ping failed"
            raise UserError(f"the SLURM controller does not answer ({why}): check it with 'sinfo', or use "
                            "--backend local")
        probe = _slurm(["sbatch", "--test-only", *self._sbatch_flags(), "--wrap", "true"], timeout=60)
        if probe is None:
            raise UserError("the SLURM controller does not answer (sbatch --test-only gave no reply in 60 s): check "
                            "it with 'sinfo', or use --backend local")
        if probe.returncode != 0:
            why = _last_line(probe.stderr) or _last_line(probe.stdout) or f"exit code {probe.returncode}"
            if "contact" in why.lower() or "connect" in why.lower() or "timed out" in why.lower():
                raise UserError(f"the SLURM controller does not answer ({why}): check it with 'sinfo', or use "
                                "--backend local")
            raise UserError(f"SLURM refuses the job request {' '.join(self._sbatch_flags())} ({why}): check the "
                            "partition and resources with 'sinfo'")

    # -- where the job files and the key -> job table live --------------------------------------
    def use_folder(self, folder) -> None:
        self._folder = Path(folder)

    @property
    def jobs_dir(self) -> Path:
        if self._folder is not None:
            return (self._folder / "slurm").absolute()
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="leakattack-slurm-"))
        return self._tmp

    def _save_state(self) -> None:
        if self._persist:
            write_json(self.jobs_dir / STATE_FILE, {"jobs": self._state})

    def _load_state(self) -> dict[str, dict]:
        try:
            jobs = read_json(self.jobs_dir / STATE_FILE).get("jobs", {})
        except (FileNotFoundError, ValueError, AttributeError):
            return {}
        return {k: v for k, v in jobs.items() if isinstance(v, dict) and isinstance(v.get("name"), str)}

    # -- submission and the queue ---------------------------------------------------------------
    def _executor(self, name: str):
        ex = submitit.SlurmExecutor(folder=self.jobs_dir / "%j", max_num_timeout=0)
        params = {"job_name": name, "cpus_per_task": self.cpus_per_task, "time": self.time,
                  "partition": self.partition, "gpus_per_node": self.gpus or None,
                  "mem": f"{self._mem_mb()}M" if self.mem else None}
        if self.jobs is not None:
            params["array_parallelism"] = self.jobs
        ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
        return ex

    def _submit(self, fn, batch: list[tuple[str, object, int]]) -> None:
        """Submit ``(key, item, tries so far)`` as one job array; the table is written before and after sbatch."""
        name = f"leakattack-{uuid.uuid4().hex[:12]}"  # before sbatch answers, the job is found by this name
        for key, _, tries in batch:
            self._live[key] = _Attempt(None, name, tries + 1, self.jobs_dir)
            self._state[key] = self._live[key].record()
        self._save_state()
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's complaint: one sentence is ours
                jobs = self._executor(name).map_array(fn, [item for _, item, _ in batch])
        except (subprocess.SubprocessError, FailedJobError, OSError) as err:
            _slurm(["scancel", f"--name={name}"])
            for key, _, _ in batch:
                self._live.pop(key, None)
                self._state.pop(key, None)
            self._save_state()
            raise UserError(f"sbatch refused the jobs ({_last_line(str(err))})") from None
        for (key, _, _), job in zip(batch, jobs):
            self._live[key].job = job.job_id
            self._state[key] = self._live[key].record()
        self._save_state()

    def _queue(self, attempts) -> dict[str, str] | None:
        """SLURM state per job id (those squeue still lists); None when squeue does not answer."""
        arrays = sorted({a.job.split("_")[0] for a in attempts if a.job})
        if not arrays:
            return {}
        done = _slurm(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", ",".join(arrays)])
        if done is None:
            return None
        if done.returncode != 0:
            return {} if "invalid job id" in done.stderr.lower() else None
        return {jid.strip(): st.strip() for jid, _, st in (ln.partition("|") for ln in done.stdout.splitlines())}

    def _cancel(self, attempts) -> None:
        ids = [a.job for a in attempts if a.job]
        if ids:
            _slurm(["scancel", *ids])
        for name in sorted({a.name for a in attempts if not a.job}):
            _slurm(["scancel", f"--name={name}"])

    def _failure(self, key: str, attempt: _Attempt, outcome, state: str | None) -> str:
        why = _last_line(outcome[1]) if outcome else f"it ended {state or 'without a result'}"
        tries = f"{attempt.tries} attempt{'s' if attempt.tries != 1 else ''}"
        return f"SLURM job {attempt.job} for {key} failed after {tries} ({why}); its stderr: {attempt.paths.stderr}"

    # -- the contract ---------------------------------------------------------------------------
    def map_unordered(self, fn, items, key=None):
        items = list(items)
        if not items:
            return
        keys = [str(key(it)) if key is not None else str(i) for i, it in enumerate(items)]
        if len(set(keys)) != len(keys):
            raise ValueError("map_unordered needs one distinct key per item")
        by_key = dict(zip(keys, items))
        self._persist = key is not None and self._folder is not None
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._state = self._load_state() if self._persist else {}
        # jobs of items not asked for any more (written already, or gone from the plan) are forgotten;
        # an item's job whose sbatch never answered (no id) is cancelled by its name and submitted again
        stale = [_Attempt(v.get("job"), v["name"], 0, self.jobs_dir) for k, v in self._state.items()
                 if k not in by_key or not v.get("job")]
        if stale:
            states = self._queue(stale) or {}
            self._cancel([a for a in stale if not a.job or states.get(a.job, "COMPLETED") not in ENDED])
        self._state = {k: v for k, v in self._state.items() if k in by_key and v.get("job")}
        # a re-attached job is this run's first attempt: every run gives an item 1 + retries attempts
        self._live = {k: _Attempt(v["job"], v["name"], 1, self.jobs_dir) for k, v in self._state.items()}
        fresh = [(k, by_key[k], 0) for k in keys if k not in self._live]
        self._save_state()
        if fresh:
            self._submit(fn, fresh)
        last_queue = -float("inf") if len(fresh) < len(keys) else time.monotonic()  # re-attached: ask at once
        while self._live:
            done, failed = [], []
            states = None
            if time.monotonic() - last_queue >= self.queue_poll_s:
                states, last_queue = self._queue(self._live.values()), time.monotonic()
            for k, att in self._live.items():
                outcome = att.outcome()
                if outcome is not None:
                    (done if outcome[0] == "success" else failed).append((k, outcome, None))
                    continue
                if states is None:
                    continue
                state = states.get(att.job)
                if state is not None and state not in ENDED:
                    att.gone_since = None
                    continue
                att.gone_since = att.gone_since or time.monotonic()
                if time.monotonic() - att.gone_since >= RESULT_GRACE_S:
                    failed.append((k, None, state))
                else:  # look again soon: the result file may still be on its way
                    last_queue = min(last_queue, time.monotonic() - self.queue_poll_s + 2.0)
            for k, outcome, _ in done:
                self._live.pop(k)
                yield by_key[k], outcome[1]
                self._state.pop(k, None)  # the caller has the result: the job is no longer needed
                self._save_state()
            again = []
            for k, outcome, state in failed:
                att = self._live[k]
                if att.tries > self.retries:
                    raise SlurmJobFailed(self._failure(k, att, outcome, state))
                again.append((k, by_key[k], att.tries))
            if again:
                self._submit(fn, again)
            if self._live and not done and not failed:
                time.sleep(self.poll_s)

    def close(self, cancel: bool = False) -> None:
        """With ``cancel``, scancel the jobs still queued or running; without, wait until they end."""
        live, self._live = list(self._live.items()), {}
        if cancel and live:
            self._cancel([a for _, a in live])
            # a cancelled or failed job is forgotten (submitted afresh next time); one that finished keeps its result
            for k, a in live:
                if (a.outcome() or ("",))[0] != "success":
                    self._state.pop(k, None)
            self._save_state()
        elif live:
            while True:
                states = self._queue([a for _, a in live])
                # an attempt without a job id counts as ended, as one squeue no longer lists
                if states is not None and all(a.outcome() is not None or a.job is None
                                              or states.get(a.job, "COMPLETED") in ENDED for _, a in live):
                    break
                time.sleep(max(self.poll_s, 1.0))
        if self._tmp is not None and not self._persist:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
