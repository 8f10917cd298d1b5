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
sentence naming it.  :func:`provenance` says which of the user's files the registries hold code of (a run's
config.json records it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from .errors import UserError
from .registry import members_outside, registered_outside

#: the environment variable naming plugin modules or files, os.pathsep-separated
ENV = "LEAKATTACK_PLUGINS"
#: the entry-point group installed packages declare their plugin modules in
GROUP = "leakattack.plugins"

_loaded: dict[str, object] = {}
#: how each plugin of ``_loaded`` came in (its LEAKATTACK_PLUGINS entry, or its entry point and distribution)
_how: dict[str, str] = {}
_scanned = False


def _first_line(err: BaseException) -> str:
    if isinstance(err, SystemExit):  # a script's top level, run by the import: sys.exit(), argparse's usage error
        return f"SystemExit: its top level called sys.exit({'' if err.code is None else repr(err.code)}); script " \
               "code belongs under if __name__ == '__main__'"
    text = str(err.msg if isinstance(err, SyntaxError) and err.msg else err).strip()  # its place: raised_at
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def raised_at(err: BaseException, files) -> str:
    """Where ``err`` arose in the user's code, as the end of a sentence: `` in forward at /abs/net.py:12`` for the
    last traceback frame in one of ``files`` (file names as compiled: a module's ``__file__``), `` at
    /abs/net.py:5`` for a frame at a module's top level or a SyntaxError's own place; empty where neither is known."""
    if isinstance(err, SyntaxError) and err.filename and err.lineno:
        return f" at {os.path.abspath(err.filename)}:{err.lineno}"
    files = {f for f in files if f}
    found = None
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in files:
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code = found.tb_frame.f_code
    return place_text(code.co_name, code.co_filename, found.tb_lineno)


def place_text(function: str, file: str, line: int | str) -> str:
    """`` in forward at /abs/net.py:12``, or `` at /abs/net.py:5`` for a module's top level (``<module>``)."""
    name = "" if function.startswith("<") else f" in {function}"
    return f"{name} at {os.path.abspath(file)}:{line}"


def import_file(path: Path, label: str, prefix: str, *, reuse: bool = False, name: str | None = None):
    """Import the .py file ``path`` as module ``prefix`` + a digest of its absolute path (classes defined in it
    pickle by that name: a spawned worker that imports the same file finds them), or as ``name`` where given, with
    its folder first on sys.path while it runs, as ``python file.py`` has it (it imports its neighbours).  ``label``
    names it in the one UserError sentence of a missing file or a failed import (``"model file 'net.py'"``).  With
    ``reuse``, a module imported from that file already (under any name: ``import myplugins`` in the caller's
    script) is returned as it is, where this function imported it only while the file is unchanged since."""
    import importlib.util

    if not path.is_file():
        raise UserError(f"{label} does not exist")
    known = _imported_as(path) if reuse else None
    if known is not None and getattr(known, STAMP, None) in (None, _stamp(path)):
        # a plugin imported already, by this function from the file as it is now, or by the caller's own import: a
        # second run of its registrations would find its names taken
        return known
    name = name or f"{prefix}{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{label} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    setattr(module, STAMP, _stamp(path))  # the file as imported: reused only while it is unchanged
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        raise UserError(f"{label} could not be imported ({_first_line(err)}){raised_at(err, [spec.origin])}") \
            from None
    finally:
        sys.path.remove(folder)  # the first occurrence, the one put there; what it imported stays imported
    return module


#: the attribute of a module :func:`import_file` imported: (mtime_ns, size) of its file then
STAMP = "__leakattack_file_stamp__"


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size) of the file ``path``, or None where it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _imported_as(path: Path):
    """The module already imported from the file ``path`` (under any name), or None."""
    target = os.path.realpath(path)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == path.name and os.path.realpath(file) == target:
            return module
    return None


def import_module_named(name: str, label: str, missing: str):
    """``importlib.import_module(name)``, or one UserError sentence: ``missing`` where the module itself is not
    found, ``label`` and the error where it (or an import of its own) fails."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            raise UserError(missing) from None
        raise UserError(f"{label} could not be imported ({_first_line(err)})") from None
    except (Exception, SystemExit) as err:  # a SyntaxError keeps its place, which _first_line leaves out
        raise UserError(f"{label} could not be imported ({_first_line(err)}){raised_at(err, [])}") from None


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
        _how[key] = f"{ENV}={item}"
        if item.endswith(".py"):
            _loaded[key] = import_file(Path(item), f"plugin file '{item}' ({ENV})", "leakattack_plugin_",
                                       reuse=True)
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
        dist = getattr(ep, "dist", None)
        _how[key] = f"entry point {ep.name} = {ep.value}" + (f" ({dist.name} {dist.version})" if dist else "")
        try:
            _loaded[key] = ep.load()
        except (Exception, SystemExit) as err:
            raise UserError(f"plugin entry point '{ep.name}' ({ep.value}, group {GROUP}) could not be imported "
                            f"({_first_line(err)})") from None
    _scanned = True  # after every one imported: one that failed fails again at the next call
    return list(_loaded)


def _module_name(obj: object) -> str | None:
    """The module a plugin's import gave (an entry point may name an attribute of one)."""
    name = getattr(obj, "__name__", None) if isinstance(obj, type(sys)) else getattr(obj, "__module__", None)
    return name if isinstance(name, str) else None


def _strings(value) -> Iterator[str]:
    """Every string in ``value`` (a point's settings: dicts and lists of them)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def used_outside(settings) -> tuple[list[tuple[str, str | None]], list[str], list[str]]:
    """What other processes need of this process's registrations to run ``settings`` (a sweep's points' parameters):
    a name is used where it is one of the words of a setting (``grey``, ``clip:C=1,mine:s=2``, ``bn:1e-4``).

    Returns ``(modules, scripted, unimportable)``: the (module, file) of each module outside leakattack that
    registered a used name and that other processes do not import themselves (a LEAKATTACK_PLUGINS or entry-point
    plugin they do: :func:`load_plugins`); the used names registered by the script this process runs as ``__main__``
    (a spawned worker re-runs its top level, a cluster job does not); and those registered by code that no other
    process can import (a notebook cell, ``python -c``), each as ``model 'net'``."""
    words = {w for text in _strings(settings) for w in re.split(r"[\s:,=@]+", text) if w}
    plugins = {_module_name(obj) for obj in _loaded.values()}
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    modules: dict[str, str | None] = {}
    scripted: list[str] = []
    unimportable: list[str] = []
    for module, family, name in members_outside():
        if name not in words or module in plugins:
            continue
        if module in ("__main__", "__mp_main__"):
            (scripted if main_file else unimportable).append(f"{family} '{name}'")
        else:
            modules.setdefault(module, getattr(sys.modules.get(module), "__file__", None))
    return list(modules.items()), scripted, unimportable


def import_modules(modules) -> None:
    """Import each (module, file) of :func:`used_outside` not imported yet: by its name (a worker has its parent's
    sys.path), else from its file under that name; a failure is one UserError sentence naming the module."""
    for name, file in modules:
        if name in sys.modules:
            continue
        label = f"module '{name}', which registered names the sweep uses in the process that started it,"
        try:
            importlib.import_module(name)
            continue
        except ModuleNotFoundError as err:
            if not file or not (name == err.name or name.startswith(f"{err.name}.")):
                raise UserError(f"{label} could not be imported ({_first_line(err)})") from None
        except (Exception, SystemExit) as err:
            raise UserError(f"{label} could not be imported ({_first_line(err)}){raised_at(err, [])}") from None
        import_file(Path(file), label, "", name=name)


def provenance() -> list[dict]:
    """The user's code the registries hold, for config.json: one entry per module that registered names from
    outside leakattack, targets and defenses, and per plugin imported (LEAKATTACK_PLUGINS, entry points), with the
    names it registered, how it came in, its file and the file's SHA-256 as it is now.  Empty when there is none."""
    entries: dict[str, dict] = {}
    for key, obj in _loaded.items():
        module = _module_name(obj)
        if module is not None:
            entries.setdefault(module, {})["plugin"] = _how.get(key, key)
    for module, names in registered_outside().items():
        entries.setdefault(module, {})["registers"] = names
    out = []
    for module, entry in entries.items():
        record: dict = {"module": module, **entry}
        file = getattr(sys.modules.get(module), "__file__", None)
        if file:
            record["path"] = str(Path(file).resolve())
            try:
                record["sha256"] = hashlib.sha256(Path(file).read_bytes()).hexdigest()
            except OSError:  # removed or unreadable since it was imported: the path alone
                pass
        out.append(record)
    return out


__all__ = ["ENV", "GROUP", "import_file", "import_module_named", "import_modules", "load_plugins", "named",
           "place_text", "provenance", "raised_at", "used_outside"]
