"""Sweep backends: every item once, errors propagate, cancel stops the workers, unknown names are refused."""

import math
import operator
import time

import pytest
import torch

import targets
from leakattack.constraints import available_cores
from leakattack.errors import UserError
from leakattack.sweep.backends import Backend, LocalBackend, get_backend, list_backends
from targets.victim import cpu_cores, share_cores


def test_local_backend_with_workers_returns_every_item_once():
    backend = get_backend("local", jobs=2)
    try:
        pairs = list(backend.map_unordered(operator.neg, range(7)))
    finally:
        backend.close()
    assert sorted(pairs) == [(i, -i) for i in range(7)]


def test_local_workers_split_the_cores_so_deep_victims_do_not_oversubscribe_them():
    """Two workers on this machine each take half its cores (at least one) as their threads and as the "every core"
    of the thread rule: a deep victim's attack in a worker does not start a thread per core of the machine."""
    share = max(1, cpu_cores() // 2)
    backend = get_backend("local", jobs=2)
    try:
        pairs = list(backend.map_unordered(operator.call, [torch.get_num_threads, cpu_cores] * 2))
    finally:
        backend.close()
    assert [n for _, n in pairs] == [share] * 4


def test_the_last_point_run_alone_takes_a_workers_share_of_the_cores(monkeypatch):
    """One point left to run (a sweep resumed with the --jobs it started with) runs in this process: it took every
    core there, where the sweep's other points had a worker's share, and the sweep then warned of mixed cores."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(targets.victim.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    threads = torch.get_num_threads()
    backend = get_backend("local", jobs=2)
    try:
        pairs = list(backend.map_unordered(lambda f: f(), [lambda: (cpu_cores(), torch.get_num_threads())]))
    finally:
        backend.close()
    assert [r for _, r in pairs] == [(4, 4)]  # a lambda: it ran here, on 8 // 2 cores
    assert cpu_cores() == 8 and torch.get_num_threads() == threads  # as they were after it


def test_a_slurm_job_counts_the_cpus_it_asked_for(monkeypatch):
    """A node without cgroups leaves a job every core in its affinity: --cpus-per-task is the job's share."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(targets.victim.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr("leakattack.constraints.os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert cpu_cores() == 3 == available_cores()  # what the thread rule counts, and what --threads may take
    for ignored in ("0", "", "two"):
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", ignored)
        assert cpu_cores() == 8 == available_cores()


def test_a_share_of_the_cores_is_what_every_core_means_for_a_deep_victim():
    deep = targets.get_model("resnet20", seed=0)
    assert deep.deep
    try:
        share_cores(1)
        assert cpu_cores() == 1 and deep.threads == 1
    finally:
        share_cores(None)
    assert deep.threads == cpu_cores() >= 1


def test_local_backend_with_one_job_runs_in_this_process_in_order():
    seen = []
    backend = get_backend("local", jobs=1)
    pairs = list(backend.map_unordered(lambda x: seen.append(x) or 2 * x, [3, 1, 2]))  # a lambda: no pickling
    backend.close()
    assert pairs == [(3, 6), (1, 2), (2, 4)] and seen == [3, 1, 2]


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_error_in_a_job_propagates(jobs):
    backend = LocalBackend(jobs=jobs)
    with pytest.raises(ValueError, match="math domain error"):
        for _ in backend.map_unordered(math.sqrt, [4.0, -1.0, 9.0]):
            pass
    backend.close(cancel=True)


def test_cancel_stops_the_workers_still_running():
    backend = LocalBackend(jobs=2)
    jobs = backend.map_unordered(time.sleep, [0.0, 600.0, 600.0])
    assert next(jobs) == (0.0, None)
    procs = list(backend._pool._processes.values())
    backend.close(cancel=True)  # returns once every worker has exited and been reaped
    assert procs and not any(proc.is_alive() for proc in procs)


def test_workers_start_with_ctrl_c_ignored_and_the_parent_takes_it_back(monkeypatch):
    """The workers are started while SIGINT is ignored, which a spawned interpreter inherits through exec (Python then
    installs no KeyboardInterrupt handler): a Ctrl-C to the process group reaches the parent only, also while a worker
    still imports torch; the parent's own handler is back once they are started."""
    import signal
    from concurrent.futures import ProcessPoolExecutor

    seen, submit = [], ProcessPoolExecutor.submit

    def recording(self, fn, *args, **kwargs):
        seen.append(signal.getsignal(signal.SIGINT))
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", recording)
    own = signal.getsignal(signal.SIGINT)  # Python's KeyboardInterrupt handler, or what a test runner's worker set
    backend = LocalBackend(jobs=2)
    try:
        assert sorted(backend.map_unordered(math.sqrt, [4.0, 9.0])) == [(4.0, 2.0), (9.0, 3.0)]
    finally:
        backend.close()
    assert seen == [signal.SIG_IGN, signal.SIG_IGN]
    assert signal.getsignal(signal.SIGINT) == own


def test_a_worker_whose_parent_died_while_it_started_exits_at_once():
    """A worker compares its parent with the process that started the pool: one orphaned before its watch began
    (its parent killed during start-up) exits instead of idling forever."""
    import multiprocessing as mp
    import os

    from leakattack.sweep.backends.local import _worker_init

    ctx = mp.get_context("spawn")
    orphan = ctx.Process(target=_worker_init, args=(1, os.getpid() + 10 ** 6))  # not its parent
    orphan.start()
    orphan.join(60)
    assert orphan.exitcode == 1


def test_unknown_backend_is_refused_in_one_sentence_naming_the_choices():
    assert "local" in list_backends()
    with pytest.raises(UserError) as err:
        get_backend("slurmm", jobs=2)
    msg = str(err.value)
    assert msg == f"unknown sweep backend 'slurmm'; choose one of: {', '.join(list_backends())}"
    assert "\n" not in msg


@pytest.mark.parametrize("name", list_backends())
def test_every_registered_backend_keeps_the_contract(name):
    try:
        backend = get_backend(name)
    except UserError as err:  # a scheduler that is not on this machine (its own tests say the same)
        pytest.skip(f"backend {name} cannot start here: {err}")
    assert isinstance(backend, Backend)
    assert list(backend.map_unordered(abs, [-2])) == [(-2, 2)]
    backend.close()
