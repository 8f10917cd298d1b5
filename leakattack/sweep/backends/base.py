"""The contract every sweep backend keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Iterator

from ...errors import UserError


class WorkerLost(UserError):
    """A job's process ended without a result (killed): one sentence; the sweep's finished points stay, and the
    command line adds how to resume."""


class Backend(ABC):
    """Runs independent jobs somewhere; the caller alone writes their results.

    ``map_unordered(fn, items, key=None)`` yields ``(item, fn(item))`` for
    every item once, in completion order; an exception raised by a job
    propagates out of the iterator.  ``key(item)`` names an item the same way
    from one run to the next: a backend whose jobs outlive the caller (a
    cluster scheduler) re-attaches to them by it, in the folder given to
    ``use_folder`` (the sweep folder).  ``fn`` and the items must be
    picklable for backends that run them in other processes.  ``close(cancel=False)`` waits for the jobs
    started; ``close(cancel=True)`` stops them, dropping unfinished results; a
    job that finished while it was being stopped (a cluster's job runs on for a
    while after it is cancelled) comes back from ``finished_late()`` afterwards,
    for the caller to keep like any other.
    As a context manager it closes on leaving, cancelling when an exception
    (Ctrl-C, a failed job) is on its way out.
    """

    @abstractmethod
    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any],
                      key: Callable[[Any], str] | None = None) -> Iterator[tuple[Any, Any]]:
        """``(item, fn(item))`` pairs in completion order."""

    def use_folder(self, folder) -> None:
        """Where the backend may keep files across runs (its jobs' files, what it submitted); default: none."""

    @abstractmethod
    def close(self, cancel: bool = False) -> None:
        """Release the workers; with ``cancel``, stop the jobs still running."""

    def finished_late(self) -> Iterator[tuple[Any, Any]]:
        """After ``close(cancel=True)``: ``(item, fn(item))`` of the jobs that finished while they were being
        stopped; default: none (a worker stopped gives nothing back)."""
        return iter(())

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(cancel=exc_type is not None)
