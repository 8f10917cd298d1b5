"""Plugins: your own attacks, sketches, defenses, priors and models on the command line and in sweeps.

A plugin is a module whose import registers names (``register_attack``, ``register_sketch``,
``register_defense``, ``register_prior``, ``register_model``, ``register_protocol``).  The command line
imports, before it reads its flags:

* every module or ``.py`` file named in the environment variable ``LEAKATTACK_PLUGINS``, separated
  by ``os.pathsep`` (``:`` on Linux and macOS): ``LEAKATTACK_PLUGINS=myplugins.py leakattack run
  --attack grey``;
* every entry point of the group ``leakattack.plugins`` of the installed packages (a package
  declares ``[project.entry-points."leakattack.plugins"] name = "package.module"``).

A sweep's workers (local processes and SLURM jobs, which inherit the environment) import the same
before their first point.  Each plugin is imported once per process; one that fails to import is one
sentence naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import sys
from pathlib import Path

from .errors import UserError

#: the environment variable naming plugin modules or files, os.pathsep-separated
ENV = "LEAKATTACK_PLUGINS"
#: the entry-point group installed packages declare their plugin modules in
GROUP = "leakattack.plugins"

_loaded: dict[str, object] = {}


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def _import_file(path: Path):
    """Import the .py file ``path`` as its own module, with its folder first on sys.path while it runs (its
    neighbours import), as ``python file.py`` has it."""
    import importlib.util

    if not path.is_file():
        raise UserError(f"plugin file '{path}' ({ENV}) does not exist")
    name = f"leakattack_plugin_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"plugin file '{path}' ({ENV}) cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its classes pickle by this name: spawned workers import the same file first
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise UserError(f"plugin file '{path}' ({ENV}) could not be imported ({_first_line(err)})") from None
    finally:
        sys.path.remove(folder)
    return module


def named() -> list[str]:
    """The plugins ``LEAKATTACK_PLUGINS`` names, in its order (empty entries left out)."""
    return [p.strip() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]


def load_plugins() -> list[str]:
    """Import every plugin not imported yet (``LEAKATTACK_PLUGINS``, then the ``leakattack.plugins`` entry
    points); return the names of all imported so far.  A plugin that fails is a UserError sentence."""
    for item in named():
        key = str(Path(item).resolve()) if item.endswith(".py") else item
        if key in _loaded:
            continue
        if item.endswith(".py"):
            _loaded[key] = _import_file(Path(item))
            continue
        try:
            _loaded[key] = importlib.import_module(item)
        except ModuleNotFoundError as err:
            if err.name and (item == err.name or item.startswith(err.name + ".")):
                raise UserError(f"plugin '{item}' ({ENV}) is no importable module: name a module on the Python "
                                "path or a .py file") from None
            raise UserError(f"plugin '{item}' ({ENV}) could not be imported ({_first_line(err)})") from None
        except Exception as err:
            raise UserError(f"plugin '{item}' ({ENV}) could not be imported ({_first_line(err)})") from None
    for ep in importlib.metadata.entry_points(group=GROUP):
        key = f"entry point {ep.name} = {ep.value}"
        if key in _loaded:
            continue
        try:
            _loaded[key] = ep.load()
        except Exception as err:
            raise UserError(f"plugin entry point '{ep.name}' ({ep.value}, group {GROUP}) could not be imported "
                            f"({_first_line(err)})") from None
    return list(_loaded)


__all__ = ["ENV", "GROUP", "load_plugins", "named"]
