"""Stopping a SLURM sweep: cancelled jobs may still finish (submitit's jobs ignore SIGTERM until KillWait's
SIGKILL), so the backend waits until they have ended, hands back the results that arrived and only then forgets the
jobs; the coordinator writes those results like any other and its stop line says how many other jobs it cancelled.

These tests run without SLURM: the scheduler's commands are a fake that answers as squeue and scancel do
(test_sweep_slurm.py checks the same on a real scheduler where one answers).
"""

import json
import pickle
import subprocess

import numpy as np
import pytest
from submitit.core.utils import JobPaths

from leakattack import cli
from leakattack.sweep import load_plan, read_results, run_sweep, runner
from leakattack.sweep.backends import Backend, SlurmBackend, SlurmJobFailed
from leakattack.sweep.backends import slurm as slurm_module
from leakattack.sweep.backends.slurm import _Attempt, kill_wait

SWEEP = """
[base]
model = "lenet"
dataset = "digits"
iterations = 2
[grid]
image_index = [0, 1, 2, 3]
"""


class FakeScheduler:
    """squeue and scancel of a cluster whose jobs ``runs`` polls long after scancel; a job in ``finishes`` writes
    its result (``finishes[job]``) at its last poll before it ends, as a job does during KillWait."""

    def __init__(self, jobs_dir, runs: dict[str, int], finishes: dict[str, object]):
        self.jobs_dir, self.runs, self.finishes = jobs_dir, dict(runs), finishes
        self.cancelled: list[str] = []
        self.polls = 0

    def __call__(self, args, timeout=60.0):
        if args[0] == "scancel":
            self.cancelled += args[1:]
            return subprocess.CompletedProcess(args, 0, "", "")
        assert args[0] == "squeue", args
        self.polls += 1
        lines = []
        for job in self.runs:
            if not self.cancelled or job not in self.cancelled:
                lines.append(f"{job}|RUNNING")
                continue
            self.runs[job] -= 1
            if self.runs[job] == 0 and job in self.finishes:
                write_result(self.jobs_dir, job, self.finishes[job])
            lines.append(f"{job}|{'RUNNING' if self.runs[job] > 0 else 'CANCELLED'}")
        return subprocess.CompletedProcess(args, 0, "\n".join(lines) + "\n", "")


def write_result(jobs_dir, job: str, value) -> None:
    path = JobPaths(jobs_dir / "%j", job_id=job, task_id=0).result_pickle
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(("success", value)))


def backend_with_jobs(tmp_path, monkeypatch, runs: dict[str, int], finishes: dict[str, object], kill_wait_s=5):
    """A slurm backend (no cluster check) with one live job per item of ``runs`` (item = its job id), recorded in
    jobs.json, and the fake scheduler in place of SLURM's commands."""
    monkeypatch.setattr(SlurmBackend, "_check_cluster", lambda self: None)
    backend = SlurmBackend(poll_s=0.01)
    backend.kill_wait = kill_wait_s
    backend.use_folder(tmp_path)
    backend.jobs_dir.mkdir(parents=True)
    backend._persist = True
    backend._by_key = {job: f"item {job}" for job in runs}
    backend._live = {job: _Attempt(job, "leakattack-test", 1, backend.jobs_dir) for job in runs}
    backend._state = {k: a.record() for k, a in backend._live.items()}
    backend._save_state()
    fake = FakeScheduler(backend.jobs_dir, runs, finishes)
    monkeypatch.setattr(slurm_module, "_slurm", fake)
    return backend, fake


def listed(tmp_path) -> set[str]:
    return set(json.loads((tmp_path / "slurm" / "jobs.json").read_text())["jobs"])


def test_a_cancelled_job_that_finishes_while_it_ends_is_handed_back_and_then_forgotten(tmp_path, monkeypatch,
                                                                                        capsys):
    backend, fake = backend_with_jobs(tmp_path, monkeypatch, runs={"7_0": 3, "7_1": 2}, finishes={"7_0": 49.0})
    backend.close(cancel=True)
    # the seconds before the stop line are named once
    assert capsys.readouterr().err.splitlines() == [
        "leakattack: waiting up to 15 s for 2 cancelled SLURM jobs to end (a result that arrives meanwhile is kept)"]
    assert sorted(fake.cancelled) == ["7_0", "7_1"]
    assert backend.stopped == 1  # 7_1 ended without a result
    assert listed(tmp_path) == {"7_0"}  # forgotten only once the caller has the result
    assert list(backend.finished_late()) == [("item 7_0", 49.0)]
    assert listed(tmp_path) == set()
    assert list(backend.finished_late()) == []


def test_a_job_still_running_when_the_wait_runs_out_stays_listed_for_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_module, "CANCEL_MARGIN_S", 0.05)
    backend, fake = backend_with_jobs(tmp_path, monkeypatch, runs={"8_0": 10**9, "8_1": 1}, finishes={},
                                      kill_wait_s=0)
    backend.close(cancel=True)
    assert backend.stopped == 2 and list(backend.finished_late()) == []
    assert listed(tmp_path) == {"8_0"}  # the next run re-attaches to it and reads its result, if it gives one


def test_kill_wait_is_read_from_scontrol_show_config():
    assert kill_wait("JobCompType = jobcomp/none\nKillWait                = 5 sec\nMaxArraySize = 1001\n") == 5
    assert kill_wait("MaxArraySize = 1001\n") is None


class StoppedCluster(Backend):
    """A cluster backend whose second point fails after its retries; cancelling it stops two jobs, one of which
    finished all the same."""

    def __init__(self, **_):
        self.stopped = 0
        self.items: list = []

    def map_unordered(self, fn, items, key=None):
        self.items = list(items)
        yield self.items[0], fake_point()
        raise SlurmJobFailed("SLURM job 9_1 for abc failed after 3 attempts (it ended TIMEOUT); its stderr: x.err")

    def close(self, cancel=False):
        self.stopped = 2 if cancel else 0

    def finished_late(self):
        yield self.items[2], fake_point()


def fake_point():
    return {"psnr": 10.0}, np.zeros((1, 1, 28, 28), np.float32), np.zeros((1, 1, 28, 28), np.float32)


def test_a_stopped_sweep_writes_the_late_results_and_says_how_many_other_jobs_it_cancelled(tmp_path, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    plan = load_plan(cfg)
    monkeypatch.setattr(runner, "get_backend", lambda name, **kw: StoppedCluster())
    with pytest.raises(SlurmJobFailed) as err:
        run_sweep(plan, tmp_path / "out", progress=False, backend="slurm")
    assert str(err.value).endswith("its stderr: x.err; the sweep cancelled its 3 other jobs still queued or running "
                                   "(1 of them finished first and was written)"), err.value
    written = [r["key"] for r in read_results(tmp_path / "out" / "results.jsonl")]
    assert written == [plan.points[0]["key"], plan.points[2]["key"]]
    assert all((tmp_path / "out" / "points" / f"{k}.pt").is_file() for k in written)


def test_the_stop_line_of_a_failed_slurm_sweep_is_one_sentence_exit_2(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    monkeypatch.setattr(runner, "get_backend", lambda name, **kw: StoppedCluster())
    assert cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakattack: error: SLURM job 9_1 for abc failed"), err
    assert "the sweep cancelled its 3 other jobs still queued or running" in err[0]
    assert err[0].endswith(f"; the points finished are kept: once its log says what to mend, resume with: leakattack "
                           f"sweep {cfg} --out {tmp_path / 'out'} --quiet")  # as a local sweep's failed point says


class InterruptedCluster(StoppedCluster):
    """Ctrl-C after the first point: two jobs are cancelled, one of which finished all the same."""

    def map_unordered(self, fn, items, key=None):
        self.items = list(items)
        yield self.items[0], fake_point()
        raise KeyboardInterrupt


def test_an_interrupted_sweep_writes_the_late_results_and_counts_them_as_finished(tmp_path, monkeypatch):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    plan = load_plan(cfg)
    monkeypatch.setattr(runner, "get_backend", lambda name, **kw: InterruptedCluster())
    with pytest.raises(runner.SweepInterrupted) as err:
        run_sweep(plan, tmp_path / "out", progress=False, backend="slurm")
    said = err.value
    assert (said.finished, said.planned, said.unfinished, said.cancelled, said.waiting) == (2, 4, 2, True, 0)
    assert len(read_results(tmp_path / "out" / "results.jsonl")) == 2


def test_ctrl_c_during_the_wait_leaves_the_cancelled_jobs_listed_for_the_next_run(tmp_path, monkeypatch):
    backend, fake = backend_with_jobs(tmp_path, monkeypatch, runs={"6_0": 10**9, "6_1": 10**9}, finishes={})

    def interrupted(args, timeout=60.0):
        if args[0] == "squeue":
            raise KeyboardInterrupt
        return fake(args, timeout)

    monkeypatch.setattr(slurm_module, "_slurm", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backend.close(cancel=True)
    assert sorted(fake.cancelled) == ["6_0", "6_1"] and backend.stopped == 2
    assert listed(tmp_path) == {"6_0", "6_1"}
