"""A SLURM cluster: the items run as job arrays submitted through submitit.

Each job unpickles ``fn`` and its item on a compute node, runs it and pickles
the result (or the error's traceback) next to its logs; the coordinator polls
for those files and yields the results, so it stays the one writer of the
sweep's store.  The job files live in ``FOLDER/slurm/<array id>_<task>/`` (a
job submitted alone: ``FOLDER/slurm/<job id>/``; FOLDER: the sweep folder given
by :meth:`SlurmBackend.use_folder`), which must be on a file system the compute
nodes share.

Arrays and the cap.  The coordinator keeps at most ``jobs`` tasks submitted and
not yet ended at any time (without ``jobs``: one array's worth), retried jobs
included: as tasks end (squeue no longer lists them as queued, running or
completing) it submits the next items as a new array.  No array holds more
tasks than the cluster's ``MaxArraySize`` (read with ``scontrol show config``
when the backend is built; SLURM's default, 1001, where it cannot be read), so
any number of items runs.  An array sbatch refuses leaves no file behind: what
submitit wrote for it is removed.

Resuming.  ``FOLDER/slurm/jobs.json`` maps each submitted item's key to its
SLURM job id, written before and after every ``sbatch``.  A coordinator that is
killed (kill -9, a lost login session) and started again re-attaches to the
jobs of the items it is asked for again: a finished job's result is read from
its file, a job still queued or running is waited for, and only an item whose
job failed or ended without a result, or was never submitted, is submitted
again.  Ctrl-C (or SIGTERM, or a failed job) cancels the jobs still queued or
running with ``scancel`` and waits, at most the cluster's ``KillWait`` and
:data:`CANCEL_MARGIN_S`, until they have ended: submitit's jobs ignore SIGTERM,
so a job may still finish before SLURM kills it, and its result is handed back
(:meth:`SlurmBackend.finished_late`) for the coordinator to write like any
other.  A job still ending when the wait runs out stays in ``jobs.json`` for the
next run to re-attach to.

Failures.  A job that raises, or ends without a result (time limit, out of
memory, node failure), is submitted again up to ``retries`` times in one run;
after that :class:`SlurmJobFailed` names the item, its SLURM job id and its
stderr log, and the next run starts the item afresh.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError, JobPaths

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
#: SLURM's default MaxArraySize: the most tasks one array may hold where ``scontrol show config`` does not say
DEFAULT_MAX_ARRAY = 1001
#: upper bounds of the request: a year of time (SLURM's own limit is in the same range), a million GB of memory
MAX_TIME_MIN = 525_600
MAX_MEM_GB = 1e6
#: seconds between squeue calls while items wait for a task of the sweep to end
SLOT_POLL_S = 1.0
#: SLURM's default KillWait: seconds between a cancelled job's SIGTERM and its SIGKILL, where the config does not say
DEFAULT_KILL_WAIT_S = 30
#: seconds a cancelled job may take beyond KillWait to be listed as ended (the controller's and the node's epilogue)
CANCEL_MARGIN_S = 10.0


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


def _count(name: str, value, least: int, most: int | None = None) -> int:
    """A whole number in [``least``, ``most``], or one UserError sentence naming the option."""
    whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value == int(value))
    if isinstance(value, bool) or not whole or value < least or (most is not None and value > most):
        bound = f"from {least} to {most:,}" if most is not None else f"of at least {least}"
        raise UserError(f"SLURM {name} must be a whole number {bound}, got {value!r}")
    return int(value)


def _amount(name: str, value, most: float) -> float:
    """A finite number above 0 and at most ``most``, or one UserError sentence naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, float) \
            and not math.isfinite(value) or not 0 < value <= most:
        raise UserError(f"SLURM {name} must be a number above 0 and at most {most:,.0f}, got {value!r}")
    return float(value)


def max_array_size(config: str) -> int | None:
    """``MaxArraySize`` in the text of ``scontrol show config``; None where it is not there."""
    found = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)\s*$", config or "", re.MULTILINE)
    return int(found.group(1)) if found else None


def kill_wait(config: str) -> int | None:
    """``KillWait`` in seconds in the text of ``scontrol show config``; None where it is not there."""
    found = re.search(r"^\s*KillWait\s*=\s*(\d+)\s*sec", config or "", re.MULTILINE)
    return int(found.group(1)) if found else None


def listed_jobs(folder) -> int:
    """How many SLURM jobs ``FOLDER/slurm/jobs.json`` lists (submitted by an earlier run and not yet folded in)."""
    try:
        jobs = read_json(Path(folder) / "slurm" / STATE_FILE).get("jobs", {})
    except (OSError, ValueError, AttributeError):
        return 0
    return sum(1 for v in jobs.values() if isinstance(v, dict) and isinstance(v.get("name"), str)) \
        if isinstance(jobs, dict) else 0


class _Attempt:
    """One submitted job of an item: its SLURM job id and the files submitit writes for it.

    ``task``: its index in the array it was submitted in (None: submitted alone), which finds its job id by the
    array's ``name`` when the coordinator was killed before sbatch answered.
    """

    def __init__(self, job: str | None, name: str, tries: int, jobs_dir: Path, task: int | None = None):
        self.job, self.name, self.tries, self.task = job, name, tries, task
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
        return {"job": self.job, "name": self.name, "tries": self.tries, "task": self.task}


class SlurmBackend(Backend):
    """Job arrays on a SLURM cluster, submitted with submitit (see the module docstring).

    ``jobs``: at most this many tasks queued or running at once, retries
    included (None: one array's worth, the cluster's MaxArraySize);
    ``partition`` (None: the cluster's default), ``time`` (minutes per job, at
    most a year; submitit needs one to time its jobs), ``mem`` (GB per job, at
    most a million; None: the partition's default), ``gpus`` (per job),
    ``cpus_per_task``; ``retries``: how many times a failed job is submitted
    again.  The request is checked with ``sbatch --test-only`` when the backend
    is built, so a SLURM that is missing or does not answer, an unknown
    partition or a request no node can meet is refused (UserError) before
    anything is written.

    After a run, ``reattached`` counts the items whose jobs an earlier,
    killed coordinator had submitted; after ``close(cancel=True)``, ``stopped``
    counts the jobs it cancelled that gave no result, and
    :meth:`finished_late` yields the results of those that finished while they
    were being stopped.
    """

    def __init__(self, jobs: int | None = None, *, partition: str | None = None, time: int = 60,
                 mem: float | None = None, gpus: int = 0, cpus_per_task: int = 1, retries: int = 2,
                 poll_s: float = 0.5, queue_poll_s: float = 10.0):
        self.jobs = None if jobs is None else _count("--jobs", jobs, 1)
        if partition is not None and (not isinstance(partition, str) or not partition.strip()
                                      or any(c.isspace() or c in ",;'\"\\$`" for c in partition)):
            raise UserError(f"SLURM --partition must be one partition name, got {partition!r}")
        self.partition = partition
        self.time = _count("--time (minutes)", time, 1, MAX_TIME_MIN)
        self.mem = None if mem is None else _amount("--mem (GB)", mem, MAX_MEM_GB)
        self.gpus = _count("--gpus", gpus, 0)
        self.cpus_per_task = _count("--cpus-per-task", cpus_per_task, 1)
        self.retries = _count("--retries", retries, 0)
        self.poll_s, self.queue_poll_s = poll_s, queue_poll_s
        self.max_array = DEFAULT_MAX_ARRAY
        self.kill_wait = DEFAULT_KILL_WAIT_S
        self.reattached = 0
        self.stopped = 0
        self._by_key: dict[str, object] = {}
        self._late: list[tuple[str, object]] = []  # (key, result) of cancelled jobs that finished all the same
        self._folder: Path | None = None
        self._tmp: Path | None = None
        self._live: dict[str, _Attempt] = {}
        self._ending: dict[str, _Attempt] = {}  # job id -> attempt whose result is in, until squeue says it ended
        self._pending: deque[tuple[str, object, int]] = deque()  # (key, item, tries so far), not yet submitted
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
        # sbatch --test-only does not check an array's size: the cluster's limit is read here, once (and KillWait,
        # how long a cancelled job may run on)
        config = _slurm(["scontrol", "show", "config"], timeout=30)
        shown = config.stdout if config is not None and config.returncode == 0 else ""
        size, wait = max_array_size(shown), kill_wait(shown)
        if size is not None:
            self.max_array = size
        if wait is not None:
            self.kill_wait = wait

    @property
    def _batch(self) -> int:
        """The most tasks one array holds (MaxArraySize 0 turns arrays off: jobs are then submitted one by one)."""
        return max(1, self.max_array)

    @property
    def _cap(self) -> int:
        """The most tasks submitted and not yet ended at any time."""
        return self.jobs if self.jobs is not None else self._batch

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
    def _executor(self, name: str, tasks: int):
        ex = submitit.SlurmExecutor(folder=self.jobs_dir / "%j", max_num_timeout=0)
        params = {"job_name": name, "cpus_per_task": self.cpus_per_task, "time": self.time,
                  "partition": self.partition, "gpus_per_node": self.gpus or None,
                  "mem": f"{self._mem_mb()}M" if self.mem else None,
                  "array_parallelism": tasks}  # the coordinator keeps the cap: no throttle inside an array
        ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
        return ex

    def _fill(self, fn) -> None:
        """Submit waiting items, in arrays of at most MaxArraySize tasks, while fewer than the cap are unended."""
        free = self._cap - len(self._live) - len(self._ending)
        while free > 0 and self._pending:
            batch = [self._pending.popleft() for _ in range(min(free, self._batch, len(self._pending)))]
            self._submit(fn, batch)
            free -= len(batch)

    def _submit(self, fn, batch: list[tuple[str, object, int]]) -> None:
        """Submit ``(key, item, tries so far)`` as one job array; the table is written before and after sbatch.

        Refused, or interrupted while sbatch runs, the files submitit wrote for it are removed."""
        name = f"leakattack-{uuid.uuid4().hex[:12]}"  # before sbatch answers, the job is found by this name
        for task, (key, _, tries) in enumerate(batch):
            self._live[key] = _Attempt(None, name, tries + 1, self.jobs_dir, task if len(batch) > 1 else None)
            self._state[key] = self._live[key].record()
        self._save_state()
        before = set(os.listdir(self.jobs_dir))
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's complaint: one sentence is ours
                jobs = self._executor(name, len(batch)).map_array(fn, [item for _, item, _ in batch])
        except (subprocess.SubprocessError, FailedJobError, FailedSubmissionError, OSError) as err:
            self._drop_submission(name, before)
            for key, _, _ in batch:
                self._live.pop(key, None)
                self._state.pop(key, None)
            self._save_state()
            raise UserError(f"sbatch refused the jobs ({_last_line(str(err))})") from None
        except BaseException:  # Ctrl-C while sbatch ran: close(cancel=True) forgets these attempts
            self._drop_submission(name, before)
            raise
        for (key, _, _), job in zip(batch, jobs):
            self._live[key].job = job.job_id
            self._state[key] = self._live[key].record()
        self._save_state()

    def _drop_submission(self, name: str, before: set[str]) -> None:
        """Cancel what sbatch may have queued under ``name`` and remove the files submitit wrote since ``before``."""
        _slurm(["scancel", f"--name={name}"])
        for entry in set(os.listdir(self.jobs_dir)) - before - {STATE_FILE}:
            path = self.jobs_dir / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

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

    @staticmethod
    def _listed(name: str) -> list[str]:
        """The job ids squeue lists under the job name ``name`` (array tasks one by one)."""
        listed = _slurm(["squeue", "-h", "-r", "-t", "all", "-o", "%i", f"--name={name}"])
        return [] if listed is None or listed.returncode != 0 else [ln.strip() for ln in listed.stdout.splitlines()]

    def _find(self, listed: list[str], task: int | None) -> str | None:
        """The job id, among those squeue ``listed`` under an attempt's name, of the attempt whose sbatch answered
        after the coordinator died: its task of the array (None: a job submitted alone), and only where submitit had
        put the call in place (else the job cannot run it)."""
        for jid in listed:
            array, _, index = jid.partition("_")
            if array.isdigit() and (index == str(task) if task is not None else not index) \
                    and JobPaths(self.jobs_dir / "%j", job_id=jid, task_id=0).submitted_pickle.is_file():
                return jid
        return None

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

    def _reattach(self, by_key: dict) -> None:
        """Take up the jobs ``jobs.json`` lists for the items asked for; cancel those of items not asked for."""
        self._state = self._load_state() if self._persist else {}
        listed: dict[str, list[str]] = {}
        for v in self._state.values():  # sbatch answered after the last coordinator died: find the job by name
            if not v.get("job"):
                task = v.get("task")
                if v["name"] not in listed:
                    listed[v["name"]] = self._listed(v["name"])
                v["job"] = self._find(listed[v["name"]], task if isinstance(task, int) else None)
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
        self.reattached = len(self._live)

    # -- the contract ---------------------------------------------------------------------------
    def map_unordered(self, fn, items, key=None):
        items = list(items)
        if not items:
            return
        keys = [str(key(it)) if key is not None else str(i) for i, it in enumerate(items)]
        if len(set(keys)) != len(keys):
            raise ValueError("map_unordered needs one distinct key per item")
        by_key = self._by_key = dict(zip(keys, items))
        self._persist = key is not None and self._folder is not None
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._reattach(by_key)
        self._ending = {}
        self._pending = deque((k, by_key[k], 0) for k in keys if k not in self._live)
        self._save_state()
        next_queue = -math.inf if self._live else time.monotonic() + self.queue_poll_s  # re-attached: ask at once
        while self._live or self._pending:
            self._fill(fn)
            now, states = time.monotonic(), None
            if now >= next_queue:
                states = self._queue([*self._live.values(), *self._ending.values()])
                next_queue = now + self.queue_poll_s
                if states is not None:  # a task whose result is in holds its slot until it has ended
                    self._ending = {j: a for j, a in self._ending.items() if states.get(j, "COMPLETED") not in ENDED}
            done, failed = [], []
            for k, att in self._live.items():
                outcome = att.outcome()
                if outcome is not None:
                    (done if outcome[0] == "success" else failed).append((k, outcome, None))
                    continue
                if states is None:
                    continue
                state = states.get(att.job or "")
                if state is not None and state not in ENDED:
                    att.gone_since = None
                    continue
                att.gone_since = att.gone_since or now
                if now - att.gone_since >= RESULT_GRACE_S:
                    failed.append((k, None, state))
                else:  # look again soon: the result file may still be on its way
                    next_queue = min(next_queue, now + 2.0)
            for k, outcome, _ in done:
                att = self._live.pop(k)
                self._ending[att.job or ""] = att
                yield by_key[k], outcome[1]
                self._state.pop(k, None)  # the caller has the result: the job is no longer needed
                self._save_state()
            for k, outcome, state in failed:
                att = self._live[k]
                if att.tries > self.retries:  # forgotten: the next run starts the item afresh
                    self._live.pop(k)
                    self._state.pop(k, None)
                    self._save_state()
                    raise SlurmJobFailed(self._failure(k, att, outcome, state))
                self._live.pop(k)
                if outcome is not None:  # it raised: it may still be listed while it exits
                    self._ending[att.job or ""] = att
                self._state.pop(k, None)
                self._pending.appendleft((k, by_key[k], att.tries))
            if failed:
                self._save_state()
            if self._pending and self._ending and len(self._live) + len(self._ending) >= self._cap:
                next_queue = min(next_queue, now + max(self.poll_s, SLOT_POLL_S))  # waiting for a slot
            if (self._live or self._pending) and not done and not failed:
                time.sleep(self.poll_s)

    def close(self, cancel: bool = False) -> None:
        """With ``cancel``, scancel the jobs still queued or running and wait until they have ended (see
        :meth:`_await_end`); without, wait until they end."""
        live, self._live = list(self._live.items()), {}
        self._pending.clear()
        self._ending = {}
        if cancel:
            self.stopped, self._late = len(live), []
        if cancel and live:
            self._cancel([a for _, a in live])
            ended = self._await_end([a for _, a in live])
            for k, a in live:
                outcome = a.outcome()
                if outcome is not None and outcome[0] == "success":  # it finished before SLURM stopped it
                    self._late.append((k, outcome[1]))
                    self.stopped -= 1
                elif a.job is None or a.job in ended or outcome is not None:
                    self._state.pop(k, None)  # cancelled or failed: submitted afresh next time
                # else still ending when the wait ran out: jobs.json keeps it for the next run to re-attach to
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

    def _await_end(self, attempts: list[_Attempt]) -> set[str]:
        """The job ids of ``attempts`` that squeue lists as ended (or no longer lists), once every one without a
        result has ended or KillWait and :data:`CANCEL_MARGIN_S` have passed: a cancelled job whose code ignores
        SIGTERM (submitit's) runs on until SLURM kills it, and may write its result meanwhile."""
        deadline = time.monotonic() + self.kill_wait + CANCEL_MARGIN_S
        ended: set[str] = set()
        said = False
        while True:
            waiting = [a for a in attempts if a.job and a.job not in ended and a.outcome() is None]
            if waiting:
                states = self._queue(waiting)
                if states is not None:
                    ended |= {a.job for a in waiting if a.job and states.get(a.job, "COMPLETED") in ENDED}
                    waiting = [a for a in waiting if a.job not in ended]
            if not waiting or time.monotonic() >= deadline:
                return ended
            if not said:  # the stop line comes after this wait: say what the seconds are for
                n = len(waiting)
                print(f"leakattack: waiting up to {self.kill_wait + CANCEL_MARGIN_S:.0f} s for {n} cancelled SLURM "
                      f"job{'s' if n != 1 else ''} to end (a result that arrives meanwhile is kept)",
                      file=sys.stderr, flush=True)
                said = True
            time.sleep(self.poll_s)

    def finished_late(self):
        """``(item, result)`` of the jobs that ``close(cancel=True)`` cancelled and that finished all the same; each
        is forgotten from ``jobs.json`` once the caller has it."""
        late, self._late = self._late, []
        for k, result in late:
            yield self._by_key[k], result
            self._state.pop(k, None)
            self._save_state()
