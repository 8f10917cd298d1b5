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
_scanned = False


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def import_file(path: Path, label: str, prefix: str):
    """Import the .py file ``path`` as module ``prefix`` + a digest of its absolute path (classes defined in it
    pickle by that name: a spawned worker that imports the same file finds them), with its folder first on sys.path
    while it runs, as ``python file.py`` has it (it imports its neighbours).  ``label`` names it in the one UserError
    sentence of a missing file or a failed import (``"model file 'net.py'"``)."""
    import importlib.util

    if not path.is_file():
        raise UserError(f"{label} does not exist")
    name = f"{prefix}{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{label} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise UserError(f"{label} could not be imported ({_first_line(err)})") from None
    finally:
        sys.path.remove(folder)  # the first occurrence, the one put there; what it imported stays imported
    return module


def import_module_named(name: str, label: str, missing: str):
    """``importlib.import_module(name)``, or one UserError sentence: ``missing`` where the module itself is not
    found, ``label`` and the error where it (or an import of its own) fails."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            raise UserError(missing) from None
        raise UserError(f"{label} could not be imported ({_first_line(err)})") from None
    except Exception as err:
        raise UserError(f"{label} could not be imported ({_first_line(err)})") from None


def named() -> list[str]:
    """The plugins ``LEAKATTACK_PLUGINS`` names, in its order (empty entries left out)."""
    return [p.strip() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]


def load_plugins() -> list[str]:
    """Import every plugin not imported yet (``LEAKATTACK_PLUGINS``, then the ``leakattack.plugins`` entry
    points); return the names of all imported so far.  A plugin that fails is a UserError sentence."""
    global _scanned
    for item in named():
        key = str(Path(item).resolve()) if item.endswith(".py") else item
        if key in _loaded:
            continue
        if item.endswith(".py"):
            _loaded[key] = import_file(Path(item), f"plugin file '{item}' ({ENV})", "leakattack_plugin_")
        else:
            _loaded[key] = import_module_named(item, f"plugin '{item}' ({ENV})",
                                               f"plugin '{item}' ({ENV}) is no importable module: name a module on "
                                               "the Python path or a .py file")
    if _scanned:  # the installed packages' entry points, read once a process (a sweep worker asks at every point)
        return list(_loaded)
    for ep in importlib.metadata.entry_points(group=GROUP):
        key = f"entry point {ep.name} = {ep.value}"
        if key in _loaded:
            continue
        try:
            _loaded[key] = ep.load()
        except Exception as err:
            raise UserError(f"plugin entry point '{ep.name}' ({ep.value}, group {GROUP}) could not be imported "
                            f"({_first_line(err)})") from None
    _scanned = True  # after every one imported: one that failed fails again at the next call
    return list(_loaded)


__all__ = ["ENV", "GROUP", "import_file", "import_module_named", "load_plugins", "named"]
