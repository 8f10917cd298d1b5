"""Processes on this machine: a spawn-context pool whose workers split the cores (two workers on two cores:
one thread each, every victim, deep ones included).

Ctrl-C is handled by the parent (workers ignore SIGINT), and workers exit on
their own when the parent dies (kill -9), so nothing is left running.  With one
job, or a single item, the work runs in the calling process.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

import torch
from tqdm.std import tqdm

from targets.victim import cores_shared, cpu_cores, share_cores

from ...errors import SettingWarning, one_line_warnings
from .base import Backend, WorkerLost


def _worker_init(cores: int, parent: int) -> None:
    """Workers: ``cores`` threads and cores to count as their own (:func:`targets.victim.share_cores`: the thread
    rule's "every core" of a deep victim, the Gauss-Newton algebra's), Ctrl-C handled by the parent, exit when the
    parent (process ``parent``) dies (kill -9), also when it died while the worker was starting."""
    if os.getppid() != parent:
        os._exit(1)
    torch.set_num_threads(cores)
    share_cores(cores)
    one_line_warnings()
    # a point's progress bar (tqdm) would create a process-shared lock, a semaphore that a worker terminated by
    # Ctrl-C never releases, and Python's resource tracker then warns of it after the sweep's last line; the
    # workers' bars are their own, so a lock of this process serves them
    tqdm.set_lock(threading.RLock())
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process inside the block (from the main thread; elsewhere nothing changes).

    A process started here inherits the ignored SIGINT through exec, and Python then installs no KeyboardInterrupt
    handler: a Ctrl-C, which the terminal sends to the whole process group, reaches the coordinator only, also while
    a spawned worker is still importing (where it printed a worker's traceback).  A Ctrl-C inside the block, which
    only starts processes, is lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _reaped(proc, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until ``proc`` has exited and been reaped; whether it has.

    ``join`` alone can return while the process still counts as alive: it waits for the
    process's end of a pipe to close, which happens while the process exits, and some
    kernels report the exit itself a moment later.
    """
    deadline = time.monotonic() + timeout
    while proc.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        proc.join(timeout=min(left, 0.05))
    return True


def worker_share(jobs: int) -> int:
    """The cores each of ``jobs`` worker processes takes as its own: an equal share, at least one."""
    return max(1, cpu_cores() // jobs)


class LocalBackend(Backend):
    """``jobs`` worker processes on this machine (``jobs=1``: in this process)."""

    def __init__(self, jobs: int = 1):
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None
        cores = cpu_cores()
        if isinstance(jobs, int) and jobs > cores:
            warnings.warn(f"--jobs {jobs} on {cores} core{'s' if cores != 1 else ''}: up to {jobs} worker processes "
                          "at once (at most one per point still to run) share the cores, each holding its own torch, "
                          "model and attack in memory", SettingWarning, stacklevel=3)

    def map_unordered(self, fn, items, key=None):  # nothing outlives this process: keys are not needed
        items = list(items)
        if self.jobs <= 1:
            for item in items:
                yield item, fn(item)
            return
        if len(items) <= 1:  # one point left: run here, on the share of the cores a worker of --jobs would hold
            for item in items:
                with cores_shared(worker_share(self.jobs)):
                    result = fn(item)
                yield item, result
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                                             initializer=_worker_init,
                                             initargs=(worker_share(self.jobs), os.getpid()))
        with _sigint_ignored():  # the workers start here: from their first instruction Ctrl-C is the parent's
            futures = {self._pool.submit(fn, item): item for item in items}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except BrokenProcessPool:
                raise WorkerLost(f"a worker process of the sweep ended without a result (killed: the system stops "
                                 f"one where memory runs out, and {self.jobs} jobs hold {self.jobs} models and "
                                 "attacks at once); the points finished are kept") from None
            yield futures[fut], result

    def close(self, cancel: bool = False) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not cancel:
            pool.shutdown()
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())  # CPython keeps no public handle on them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:  # a worker caught mid start-up may miss SIGTERM's default action: make sure
            if not _reaped(proc, 5.0):
                proc.kill()
                _reaped(proc, 60.0)
