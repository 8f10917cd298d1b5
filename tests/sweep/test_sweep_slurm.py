"""The slurm sweep backend on a real SLURM (``.ci/slurm-up`` starts a single-node one).

Same points and metrics as the local backend, each point once; a coordinator
killed with SIGKILL re-attaches to its jobs instead of submitting them again;
a failing job is retried, then named with its SLURM job id and stderr log;
Ctrl-C cancels the jobs, and hands back the result of one that finished
before KillWait ended it; no array is larger than the cluster's MaxArraySize,
and one sbatch refuses leaves no file; the --jobs cap holds for retried jobs
too; bad requests are one sentence, exit 2, nothing written, also in a dry
run.  The tests that need the scheduler skip when no SLURM node answers.
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from leakattack import cli
from leakattack.cli.sweep import interrupted_line
from leakattack.errors import UserError
from leakattack.results import load_tensors
from leakattack.sweep import SweepInterrupted, read_results
from leakattack.sweep.backends import SlurmJobFailed, get_backend
from leakattack.sweep.backends.slurm import ENDED, listed_jobs, max_array_size

ROOT = Path(__file__).resolve().parents[2]
#: four lenet points on the embedded digits, a fraction of a second of attack each
SWEEP = """
[sweep]
name = "slurm4"

[base]
model = "lenet"
dataset = "digits"
iterations = 10

[grid]
image_index = [0, 1]
seed = [0, 1]
"""
TIMING = {"wall_s", "attack_s", "utility_wall_s", "peak_memory"}  # measured, not repeated by a rerun


def _scheduler_missing() -> str | None:
    """Why the SLURM tests cannot run here, or None when the controller answers and a node is up."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM here (sinfo/sbatch missing): `bash .ci/slurm-up` as root starts a single-node one"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the SLURM controller does not answer sinfo within 20 s"
    if out.returncode != 0 or not {"idle", "mix", "alloc", "comp"} & set(out.stdout.split()):
        return f"no SLURM node is up (sinfo: {(out.stdout + out.stderr).strip()[:80]!r})"
    return None


MISSING = _scheduler_missing()
needs_slurm = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _records(out: Path) -> list[dict]:
    return read_results(out / "results.jsonl")


def _metrics(out: Path) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r["metrics"].items() if k not in TIMING} for r in _records(out)}


def _job_dirs(out: Path) -> set[str]:
    """The SLURM jobs submitted in a folder: submitit keeps one folder per job (array task) with its pickled call."""
    return {p.parent.name for p in (out / "slurm").glob("*/*_submitted.pkl")}


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The sweep run on the local backend, in this process."""
    folder = tmp_path_factory.mktemp("local")
    cfg = folder / "s.toml"
    cfg.write_text(SWEEP)
    assert cli.main(["sweep", str(cfg), "--out", str(folder / "out"), "--quiet"]) == 0
    return cfg, folder / "out"


def _cluster_max_array() -> int:
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    size = max_array_size(config)
    assert size is not None, config[:200]
    return size


@needs_slurm
def test_slurm_sweep_killed_and_restarted_gives_the_local_points_and_metrics_each_point_once(local_reference,
                                                                                             tmp_path, capsys):
    """The first coordinator is killed (SIGKILL) after one written point; the second re-attaches to the jobs it
    had submitted (none is submitted again), submits the points that never were, and folds in the other three."""
    cfg, ref = local_reference
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # --jobs 2: two tasks at a time, so points are still queued or running when the first is written
    proc = subprocess.Popen([sys.executable, "-m", "leakattack.cli", "sweep", str(cfg), "--out", str(out),
                             "--backend", "slurm", "--jobs", "2", "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 120 and proc.poll() is None and not _records(out):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    written = [r["key"] for r in _records(out)]
    assert 1 <= len(written) < 4, (written, proc.stderr.read())
    submitted = _job_dirs(out)
    listed = json.loads((out / "slurm" / "jobs.json").read_text())["jobs"]
    in_flight = [k for k, v in listed.items() if v.get("job") and k not in written]
    capsys.readouterr()

    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--quiet"]) == 0
    said = capsys.readouterr().out
    keys = [r["key"] for r in _records(out)]
    assert sorted(keys) == sorted(_metrics(ref)) and len(keys) == 4  # every point, once
    assert keys[:len(written)] == written  # what was written before the kill stays as it was
    assert submitted <= _job_dirs(out) and len(_job_dirs(out)) == 4  # re-attached: no point submitted twice
    if in_flight:  # the summary tells re-attached jobs from points run now
        reattached = re.search(r"(\d+) re-attached", said)
        assert reattached and int(reattached.group(1)) >= len(in_flight), said
    assert _metrics(out) == _metrics(ref)  # same seeds, one thread, same device type: the same numbers
    for key in keys:
        ours, theirs = load_tensors(out / "points" / f"{key}.pt"), load_tensors(ref / "points" / f"{key}.pt")
        assert torch.equal(ours["recon"], theirs["recon"]) and torch.equal(ours["truth"], theirs["truth"])
    assert (out / "summary.csv").read_text() == (ref / "summary.csv").read_text()
    assert not (out / "slurm" / "jobs.json").read_text().count('"job"')  # every job folded in and forgotten


@needs_slurm
def test_a_job_that_raises_is_retried_then_reported_with_its_job_id_and_stderr_log(tmp_path):
    backend = get_backend("slurm", retries=1, poll_s=0.1)
    backend.use_folder(tmp_path)
    got = []
    with pytest.raises(SlurmJobFailed) as err:
        with backend:
            for item, value in backend.map_unordered(math.sqrt, [4.0, -1.0], key=str):
                got.append((item, value))
    msg = str(err.value)
    assert got == [(4.0, 2.0)]
    assert "\n" not in msg and "after 2 attempts" in msg and "ValueError: math domain error" in msg, msg
    job = re.search(r"SLURM job (\S+) ", msg).group(1)
    log = Path(re.search(r"its stderr: (\S+)$", msg).group(1))
    assert log.is_file() and job in log.name and "math domain error" in log.read_text()
    assert len(_job_dirs(tmp_path)) == 3  # the good item once, the bad one twice
    assert "-1.0" not in json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"]  # afresh next run


@needs_slurm
def test_closing_with_cancel_scancels_the_jobs_still_queued_or_running(tmp_path):
    backend = get_backend("slurm", poll_s=0.1)
    backend.use_folder(tmp_path)
    try:
        jobs = backend.map_unordered(time.sleep, [0.0, 600.0], key=str)
        assert next(jobs) == (0.0, None)
        job = json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"]["600.0"]["job"]
    finally:
        backend.close(cancel=True)
    t0 = time.time()
    while time.time() - t0 < 30:
        listed = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i %T", "-j", job.split("_")[0]],
                                capture_output=True, text=True).stdout.splitlines()
        queue = [line.split()[1] for line in listed if line.split()[0] == job]
        if not {"PENDING", "RUNNING"} & set(queue):
            break
        time.sleep(0.2)
    assert set(queue) <= {"CANCELLED", "COMPLETING"}, queue  # a 600 s sleep cannot have completed
    assert "600.0" not in json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"]  # afresh next time


@needs_slurm
def test_a_cancelled_job_that_finishes_before_killwait_ends_it_has_its_result_handed_back(tmp_path):
    """submitit's jobs ignore SIGTERM: a job cancelled while it runs finishes if it can within KillWait, and its result
    comes back from finished_late instead of being computed again by the next run."""
    backend = get_backend("slurm", poll_s=0.1, queue_poll_s=1.0)
    if backend.kill_wait < 4:
        pytest.skip(f"KillWait is {backend.kill_wait} s here: too short for a job to finish after scancel")
    nap = backend.kill_wait - 2.0  # ends after scancel, before SIGKILL
    backend.use_folder(tmp_path)
    try:
        jobs = backend.map_unordered(time.sleep, [0.0, nap], key=str)
        assert next(jobs) == (0.0, None)
        job = json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"][str(nap)]["job"]
        t0, state = time.time(), ""
        while time.time() - t0 < 60 and state != "RUNNING":
            state = subprocess.run(["squeue", "-h", "-r", "-o", "%T", "-j", job], capture_output=True,
                                   text=True).stdout.strip()
            time.sleep(0.1)
        assert state == "RUNNING", state
        # cancelled KillWait - 2.5 s after it shows as running, so that it ends within KillWait of the cancel even
        # where starting its Python (imports, unpickling) takes up to 4.5 s, and still runs when cancelled
        time.sleep(backend.kill_wait - 2.5)
        assert backend._live[str(nap)].outcome() is None  # not finished when it is cancelled
    finally:
        backend.close(cancel=True)
    assert list(backend.finished_late()) == [(nap, None)] and backend.stopped == 0
    assert str(nap) not in json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"]  # handed back: done


@needs_slurm
@pytest.mark.parametrize("flags,needle", [
    (["--partition", "no-such-partition"], "Invalid partition name"),
    (["--cpus-per-task", "100000"], "SLURM refuses the job request"),
])
def test_a_request_slurm_refuses_is_one_sentence_exit_2_and_writes_nothing(tmp_path, capsys, flags, needle):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


@needs_slurm
def test_a_dry_run_checks_the_slurm_request_and_submits_and_writes_nothing(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out"
    before = set(tmp_path.rglob("*"))
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--dry-run", "--quiet"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 1 + 4 and "4 points" in said[0] and "0 already finished" in said[0], said
    assert set(tmp_path.rglob("*")) == before and not out.exists()
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--partition", "no-such-partition",
                     "--dry-run", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Invalid partition name" in err[0], err


@needs_slurm
def test_the_backend_reads_the_clusters_max_array_size():
    assert get_backend("slurm").max_array == _cluster_max_array()


def test_max_array_size_is_read_from_scontrol_show_config():
    config = "MaxArrayTaskLimit = 5\nMaxArraySize            = 2001\nMaxJobCount = 10000\n"
    assert max_array_size(config) == 2001
    assert max_array_size("MaxJobCount = 10000\n") is None


@needs_slurm
def test_more_items_than_an_array_may_hold_run_in_arrays_of_at_most_max_array_size(tmp_path):
    backend = get_backend("slurm", poll_s=0.1, queue_poll_s=1.0)
    backend.max_array = 2  # as if the cluster's MaxArraySize were 2
    backend.use_folder(tmp_path)
    with backend:
        got = sorted(backend.map_unordered(abs, [-1, -2, -3, -4, -5], key=str))
    assert got == [(-5, 5), (-4, 4), (-3, 3), (-2, 2), (-1, 1)]
    jobs = _job_dirs(tmp_path)
    assert len(jobs) == 5
    arrays: dict[str, set[str]] = {}
    for job in jobs:
        array, _, task = job.partition("_")
        arrays.setdefault(array, set()).add(task)
    assert all(len(tasks) <= 2 and tasks <= {"", "0", "1"} for tasks in arrays.values()), arrays


@needs_slurm
def test_an_array_sbatch_refuses_leaves_no_file_behind(tmp_path):
    size = _cluster_max_array()
    if size > 5000:
        pytest.skip(f"MaxArraySize is {size} here: an array sbatch refuses would take too many pickles")
    backend = get_backend("slurm", poll_s=0.1)
    backend.max_array = size + 1  # as if the limit had been misread: sbatch refuses the array
    backend.use_folder(tmp_path)
    with pytest.raises(UserError, match="sbatch refused the jobs"):
        with backend:
            for _ in backend.map_unordered(abs, range(size + 1), key=str):
                pass
    left = sorted(os.listdir(tmp_path / "slurm"))
    assert left == ["jobs.json"], left[:5]
    assert json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"] == {}


def _alive_in(folder: Path) -> int:
    """How many SLURM jobs (array tasks) whose logs go to ``folder`` are queued, running or completing."""
    listed = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-O", "JobArrayID:40,State:30,StdOut:1000"],
                            capture_output=True, text=True, timeout=30).stdout.splitlines()
    return sum(1 for line in listed if str(folder) in line and line.split()[1] not in ENDED)


@needs_slurm
def test_the_jobs_cap_holds_for_retried_jobs_too(tmp_path):
    """--jobs 2: a raising job is submitted again, and never are more than two tasks queued or running at once."""
    backend = get_backend("slurm", jobs=2, retries=1, poll_s=0.1, queue_poll_s=1.0)
    backend.use_folder(tmp_path)
    most, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            most[0] = max(most[0], _alive_in(tmp_path / "slurm"))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    got = []
    try:
        with pytest.raises(SlurmJobFailed, match="after 2 attempts"):
            with backend:
                for item, value in backend.map_unordered(time.sleep, [2.0, -1.0, 2.5, 3.0], key=str):
                    got.append(item)
    finally:
        stop.set()
        watcher.join(10)
    assert len(_job_dirs(tmp_path)) >= 3  # -1.0 ran twice
    assert 1 <= most[0] <= 2, most[0]


@pytest.mark.parametrize("err,line", [
    (KeyboardInterrupt(), "leakattack: interrupted; finished results are kept"),
    (SweepInterrupted(), "leakattack: interrupted before any point started; no result was written"),
    (SweepInterrupted(True, 1), "leakattack: interrupted; finished results are kept, the unfinished point was not "
                                "written"),
    (SweepInterrupted(True, 3, True), "leakattack: interrupted; finished results are kept, the 3 unfinished points "
                                      "were not written (their jobs were cancelled)"),
    (SweepInterrupted(True, 1, False, finished=2, planned=12),
     "leakattack: interrupted; finished results are kept (2 of 12 points), the unfinished point was not written; 9 "
     "points had not started"),
])
def test_the_interrupted_line_says_how_many_points_were_left_unfinished(err, line):
    assert interrupted_line(err, planned=True) == line


def test_an_interrupted_slurm_sweep_prints_the_command_that_resumes_it_with_every_option_given(tmp_path, capsys,
                                                                                               monkeypatch):
    cfg = tmp_path / "my sweep.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out dir"

    def interrupted(plan, out, **_):
        out.mkdir(parents=True)
        raise SweepInterrupted(True, 3, True)

    monkeypatch.setattr("leakattack.cli.sweep.run_sweep", interrupted)
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--partition", "debug", "--time",
                     "30", "--mem", "2.5", "--gpus", "1", "--cpus-per-task", "2", "--retries", "0", "--jobs", "3",
                     "--quiet"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == ("leakattack: interrupted; finished results are kept, the 3 unfinished points were not written "
                      "(their jobs were cancelled)"), err
    assert err[1] == (f"leakattack: resume with: leakattack sweep '{cfg}' --out '{out}' --backend slurm --jobs 3 "
                      "--partition debug --time 30 --mem 2.5 --gpus 1 --cpus-per-task 2 --retries 0 --quiet"), err
    assert len(err) == 2


def test_a_local_sweep_warns_of_the_slurm_jobs_an_earlier_run_left_in_its_folder(local_reference, tmp_path, capsys):
    cfg, ref = local_reference
    out = tmp_path / "out"
    shutil.copytree(ref, out)  # every point finished: the sweep only redraws its summary
    (out / "slurm").mkdir()
    (out / "slurm" / "jobs.json").write_text(json.dumps({"jobs": {
        "a": {"job": "7_0", "name": "leakattack-x", "tries": 1}, "b": {"job": "7_1", "name": "leakattack-x",
                                                                      "tries": 1}}}))
    assert listed_jobs(out) == 2
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warned) == 1 and warned[0].startswith("leakattack: warning: "), warned
    assert "lists 2 SLURM jobs" in warned[0] and "neither reads their results nor cancels them" in warned[0]
    assert "--backend slurm" in warned[0] and "scancel" in warned[0]


@pytest.mark.parametrize("flags,needle", [
    (["--time", "30"], "--time is an option of the slurm backend"),
    (["--mem", "2", "--time", "5"], "--time and --mem are options of the slurm backend, not of 'local'"),
    (["--backend", "slurm", "--time", "0"], "SLURM --time (minutes) must be a whole number from 1 to 525,600, got 0"),
    (["--backend", "slurm", "--time", "99999999999"], "SLURM --time (minutes) must be a whole number from 1 to "
                                                      "525,600, got 99999999999"),
    (["--backend", "slurm", "--mem", "-2"], "SLURM --mem (GB) must be a number above 0"),
    (["--backend", "slurm", "--mem", "1e300"], "SLURM --mem (GB) must be a number above 0 and at most 1,000,000, "
                                               "got 1e+300"),
    (["--backend", "slurm", "--gpus", "-1"], "SLURM --gpus must be a whole number of at least 0"),
    (["--backend", "slurm", "--retries", "-1"], "SLURM --retries must be a whole number of at least 0"),
    (["--backend", "slurm", "--partition", "a b"], "SLURM --partition must be one partition name"),
    (["--backend", "slurrm"], "invalid choice: 'slurrm'"),
])
def test_bad_backend_options_are_one_sentence_exit_2_and_write_nothing(tmp_path, capsys, flags, needle):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_slurm_backend_without_sbatch_is_one_sentence_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no SLURM command can be found
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs SLURM's commands on PATH and 'sbatch' is not there" in err[0], err
    assert not out.exists()


def test_a_controller_that_does_not_answer_is_one_sentence_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    out = tmp_path / "out"
    bin_dir = tmp_path / "bin"  # SLURM's commands, with a controller that is down (what `scontrol ping` says then)
    bin_dir.mkdir()
    for name in ("sbatch", "squeue", "scancel", "srun", "sinfo"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'Slurmctld(primary) at head is DOWN'\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--backend", "slurm", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leakattack: error: the SLURM controller does not answer (Slurmctld(primary) at head is DOWN): "
                   "check it with 'sinfo', or use --backend local"], err
    assert not out.exists()
