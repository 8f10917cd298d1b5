"""Where a sweep's points run: ``get_backend(name, **options)`` / ``list_backends()``.

Every backend keeps the :class:`Backend` contract (``map_unordered``,
``close``); the sweep's coordinator stays the one writer of the results.
Adding a backend: its own module here and one ``_BACKENDS.register`` line.
"""

from __future__ import annotations

from ...registry import Registry
from .base import Backend
from .local import LocalBackend
from .slurm import SlurmBackend, SlurmJobFailed

_BACKENDS = Registry("sweep backend")
_BACKENDS.register("local", LocalBackend, help="worker processes on this machine")
_BACKENDS.register("slurm", SlurmBackend, help="job arrays on a SLURM cluster (submitit)")


def get_backend(name: str, **options) -> Backend:
    """The backend registered as ``name``, built with ``options`` (local: ``jobs``; slurm: ``jobs``,
    ``partition``, ``time``, ``mem``, ``gpus``, ``cpus_per_task``, ``retries``)."""
    return _BACKENDS.get(name)(**options)


def list_backends() -> list[str]:
    """The registered backend names, sorted."""
    return _BACKENDS.names()


__all__ = ["Backend", "LocalBackend", "SlurmBackend", "SlurmJobFailed", "get_backend", "list_backends"]
