"""The user's own model: ``get_model("path/to/file.py:Name")`` or ``get_model("package.module:Name")``.

``Name`` is an ``nn.Module`` subclass.  It is called with the model parameters
(``--model-param``), plus ``num_classes=`` and ``in_shape=`` where its signature
names them, with PyTorch's global generator seeded by the model seed (so its own
initialisation is reproducible).  Optional class attributes say what the victim
is, where the defaults do not fit:

* ``leakattack_loss`` — F(output, target), a scalar averaged over the batch:
  a ``@staticmethod``, a method (its first parameter ``self``), a function
  (``F.mse_loss``, a lambda: called as it is) or a loss module (``nn.MSELoss()``).
  Default: cross-entropy (classification), 1/2 squared error (regression).
* ``leakattack_task`` — ``"classification"`` (integer labels, the default) or
  ``"regression"`` (real targets).
* ``leakattack_head`` — the name of the classifier head, an ``nn.Linear``
  submodule (``"fc"``, ``"heads.head"``), or None for none.  Default: the
  ``nn.Linear`` that computes the model's output (``Victim.from_module``'s ``head="auto"``).
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Literal

from torch import nn

from leakattack.errors import UserError, a_type, allocation_failed
from leakattack.plugins import import_file, import_module_named, raised_at

from ..victim import TASKS, Victim, code_files, cross_entropy, defined_at, first_line, output_problem, squared_error


def is_user_spec(name: str) -> bool:
    """Whether ``name`` names a class (``file.py:Name`` or ``module:Name``) rather than a registered model."""
    return isinstance(name, str) and ":" in name


#: model files imported by this process: resolved path -> ((mtime_ns, size) when imported, module)
_IMPORTED: dict[str, tuple[tuple[int, int], object]] = {}


def _model_file(path: Path):
    """The module of model file ``path``, imported once per process while the file is unchanged: a run asks for its
    class dozens of times, and each import would run the file's top level again (a register_model there would find
    its own name taken); an edited file is imported again.  A file imported already when it is first asked for (a
    plugin file while it is unchanged, or the caller's own ``import`` of it, taken as the caller has it) is not
    imported again."""
    try:
        st = path.stat()
        key, stamp = str(path.resolve()), (st.st_mtime_ns, st.st_size)
    except OSError:  # missing: import_file says so in one sentence
        return import_file(path, f"model file '{path}'", "leakattack_user_model_")
    known = _IMPORTED.get(key)
    if known is not None and known[0] == stamp:
        return known[1]
    # the first time, a module imported from this file already (a plugin file of LEAKATTACK_PLUGINS, or the caller's
    # own import of it) is taken as it is: its registrations ran once, and a second import finds their names taken
    module = import_file(path, f"model file '{path}'", "leakattack_user_model_", reuse=known is None)
    _IMPORTED[key] = (stamp, module)
    return module


def user_class(spec: str) -> type:
    """The ``nn.Module`` subclass named by ``path/to/file.py:Name`` or ``package.module:Name``."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise UserError(f"model '{spec}' is not of the form path/to/file.py:Name or package.module:Name")
    if where.endswith(".py"):
        module, place = _model_file(Path(where)), f"model file '{where}'"
    elif "/" in where or "\\" in where:
        raise UserError(f"model file '{where}' is not a .py file")
    else:
        module, place = import_module_named(where, f"module '{where}'", f"no module named '{where}' (name a "
                                            "file as path/to/file.py:Name or an importable module as "
                                            "package.module:Name)"), f"module '{where}'"
    if not hasattr(module, attr):
        own = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, nn.Module)
                     and v.__module__ == module.__name__)
        raise UserError(f"{place} has no attribute '{attr}'" + (f" (its nn.Module classes: {', '.join(own)})"
                                                                 if own else ""))
    cls = getattr(module, attr)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UserError(f"'{spec}' is not an nn.Module subclass (its type is {type(cls).__name__})")
    return cls


def _signature(cls: type) -> inspect.Signature | None:
    try:
        return inspect.signature(cls)
    except (TypeError, ValueError):
        return None


def required_params(cls: type) -> list[str]:
    """The keyword parameters of :func:`user_params` that have no default: a build without them fails."""
    sig = _signature(cls)
    if sig is None:
        return []
    return [n for n in user_params(cls) if sig.parameters[n].default is inspect.Parameter.empty]


def user_params(cls: type) -> list[str]:
    """The keyword parameters the class takes beyond ``in_shape`` and ``num_classes``."""
    sig = _signature(cls)
    if sig is None:
        return []
    return [n for n, p in sig.parameters.items() if n not in ("in_shape", "num_classes")
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def user_task(cls: type) -> str:
    task = getattr(cls, "leakattack_task", "classification")
    if task not in TASKS:
        raise UserError(f"{cls.__name__}.leakattack_task is {task!r}; choose one of: {', '.join(TASKS)}")
    return task


def user_recipe(cls: type) -> str | None:
    """The class's ``leakattack_recipe`` (None when it names none: its units decide); the configuration checks
    the name."""
    return getattr(cls, "leakattack_recipe", None)


def not_built(spec: str, params: dict, err: BaseException, cls: type | None = None) -> UserError:
    """The one sentence for a model that could not be built with ``params``, naming the exception and, for the
    user's class ``cls``, where in its file it arose (the last frame there), or where the ``__init__`` that refused
    the arguments is defined."""
    given = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "no parameters"
    where = raised_at(err, code_files([cls])) if cls is not None else ""
    if not where and cls is not None and isinstance(err, TypeError):
        init = defined_at(getattr(cls, "__init__", None))
        where = f" calling {cls.__name__}.__init__ defined{init}" if init else ""
    if allocation_failed(err):  # torch's allocator's own message is a paragraph of its internals
        why = "its weights do not fit in this machine's memory"
    elif "Overflow when unpacking" in str(err):  # torch's message holds an unbalanced quote
        why = "a size beyond the 64-bit integers torch takes"
    else:
        why = first_line(err)
    return UserError(f"model '{spec}' could not be built with {given} ({why}){where}")


def build_user_module(spec: str, cls: type, in_shape: tuple, num_classes: int, params: dict) -> nn.Module:
    """``cls(**params, [num_classes=], [in_shape=])``; the caller seeds the global generator."""
    sig = _signature(cls)
    kwargs = dict(params)
    if sig is not None:
        if "num_classes" in sig.parameters:
            kwargs["num_classes"] = num_classes
        if "in_shape" in sig.parameters:
            kwargs["in_shape"] = tuple(in_shape)
    try:
        module = cls(**kwargs)
    except UserError:
        raise
    except (Exception, SystemExit) as err:  # sys.exit() in __init__ is a failure to build, said in one sentence
        raise not_built(spec, params, err, cls) from None
    if not isinstance(module, nn.Module):
        raise UserError(f"model '{spec}' built {a_type(module)}, not an nn.Module")
    return module


def _loss(spec: str, module: nn.Module, task: str):
    loss = getattr(module, "leakattack_loss", None)
    if loss is None:
        return cross_entropy if task == "classification" else squared_error
    raw = inspect.getattr_static(module, "leakattack_loss", None)
    if isinstance(raw, types.FunctionType) and _first_parameter(raw) != "self":
        loss = raw  # a function set as the attribute (F.mse_loss, a lambda): F(output, target), not a method
    try:
        inspect.signature(loss).bind(None, None)
    except TypeError:
        raise UserError(f"leakattack_loss of '{spec}' must take (output, target)") from None
    except ValueError:  # no signature to inspect (some builtins): trust it
        pass
    return loss


def _first_parameter(fn) -> str | None:
    try:
        return next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None


def _head(spec: str, module: nn.Module, task: str) -> nn.Linear | None | Literal["auto"]:
    """The head ``leakattack_head`` names, else ``auto``: the one :meth:`Victim.from_module` finds."""
    if not hasattr(module, "leakattack_head"):
        return "auto"
    name = getattr(module, "leakattack_head")  # whatever the user set: a non-str is refused below
    if name is None:
        return None
    try:
        head = module.get_submodule(name)
    except (AttributeError, TypeError):
        linear = [n for n, m in module.named_modules() if isinstance(m, nn.Linear)]
        raise UserError(f"leakattack_head of '{spec}'{_class_at(type(module))} names no submodule '{name}'"
                        + (f"; its nn.Linear layers: {', '.join(linear)}" if linear else "")) from None
    if not isinstance(head, nn.Linear):
        raise UserError(f"leakattack_head of '{spec}' names {a_type(head)}, not an nn.Linear")
    return head


def _class_at(cls: type) -> str:
    """`` (class Net at /abs/net.py:5)``, or empty where its source cannot be found."""
    try:
        file, line = inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return ""
    return f" (class {cls.__name__} at {file}:{line})" if file else ""


def check_attributes(spec: str, module: nn.Module) -> None:
    """Refuse, in the sentence a run gives, a built module whose class attributes cannot work: an unknown
    ``leakattack_task``, a ``leakattack_loss`` that does not take (output, target), a ``leakattack_head`` that
    names no ``nn.Linear`` submodule.  ``leakattack list --model`` asks this of the class built on the meta
    device, so that it refuses what ``run`` refuses."""
    task = user_task(type(module))
    _loss(spec, module, task)
    _head(spec, module, task)


def user_victim(spec: str, module: nn.Module, in_shape: tuple, num_classes: int, bn_mode: str) -> Victim:
    """Wrap the built module: its loss, task and head from the class attributes (``Victim.from_module`` checks
    it on one small batch)."""
    task = user_task(type(module))
    victim = Victim.from_module(module, input_shape=in_shape, num_classes=num_classes, loss=_loss(spec, module, task),
                                task=task, head=_head(spec, module, task), bn_mode=bn_mode, name=spec)
    return victim


__all__ = ["is_user_spec", "not_built", "first_line",
           "user_class", "user_params", "required_params", "user_task", "user_recipe", "build_user_module",
           "check_attributes", "user_victim", "output_problem"]
