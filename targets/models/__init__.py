"""The model zoo: ``get_model(name, ...) -> Victim`` and ``list_models()``, torchvision style.

* ``lenet``  — the LeNet of DLG (sigmoid, weights U(-0.5, 0.5) by default).
* ``mlp``    — one hidden layer (sigmoid by default) and a linear head.
* ``logreg`` — multinomial logistic regression (linear layer + cross-entropy).
* ``linreg`` — linear regression F(w, x) = 1/2 (w^T x - y)^2, a regression task.
* ``resnet20``, ``resnet32``, ``resnet_cifar`` (any depth 6n + 2) — He et al.'s
  CIFAR ResNets, option-A shortcuts; ``resnet18`` — ResNet-18 with a CIFAR stem.
* ``resnet50``, ``resnet101``, ``vit_b_16`` — torchvision's ImageNet architectures.
* ``vit_small`` — a ViT for 32 px images (patch 4, dim 192, depth 6, 3 heads, MLP 384).
* ``path/to/file.py:Name`` or ``package.module:Name`` — the user's own ``nn.Module``
  subclass (see :mod:`targets.models.user`).

Every weight is drawn from the model seed: the module is built with PyTorch's
global generator seeded by it (inside ``fork_rng``, so the caller's stream is
untouched), then re-drawn by ``initialise`` where the model's registered
default or the caller asks for an init; models registered without a default
keep their own (torchvision's, the paper's) initialisation.

Adding a model: its own module with an ``nn.Module`` class or builder, plus one
``register_model`` line here giving its task, loss and default initialisation.
"""

from __future__ import annotations

import inspect
import numbers
import warnings

import torch
from torch import nn

from leakattack.errors import SettingWarning, UserError
from leakattack.registry import Registry
from leakattack.seeds import check_seed, torch_defaults, torch_generator, torch_seed

from ..victim import TASKS, Victim, cross_entropy, has_batchnorm, last_linear, squared_error
from .layers import ACTIVATIONS, INITS, activation, initialise
from .lenet import LeNet
from .linear import LinReg, LogReg
from .mlp import MLP
from .resnet import resnet18, resnet20, resnet32, resnet_cifar
from .torchvision_models import resnet50, resnet101, vit_b_16
from .units import piecewise_units
from .user import (
    build_user_module,
    check_attributes,
    is_user_spec,
    not_built,
    output_problem,
    user_class,
    user_params,
    user_recipe,
    user_task,
    user_victim,
)
from .vit import vit_small

_MODELS = Registry("model")

#: the recipe of a model whose units decide it: ``ig`` where a unit's derivative jumps, else ``dlg``
BY_UNITS = None


def register_model(name: str, builder=None, *, task: str = "classification", loss=None,
                   default_init: str | None = "default", recipe: str | None = BY_UNITS, in_rank: int | None = None):
    """Register ``builder(in_shape, num_classes, **params) -> nn.Module`` under ``name`` (a decorator without builder).

    ``in_rank`` is the number of entries ``in_shape`` must have (3 for a convolutional model's
    (channels, height, width)); None where the model takes any (it flattens its input), or where a
    forward pass is left to find out.  ``default_init`` None keeps the builder's own initialisation
    (seeded) unless an init is asked for.
    ``recipe`` names the attack recipe measured to suit the model (``leakattack.attacks.recipes``): ``dlg`` for
    the MLP and the 32 px ViT, ``ig`` for the ResNets and the ImageNet-size ViT; by default (:data:`BY_UNITS`)
    its units decide (:func:`recipe_of`), so LeNet takes ``dlg`` with its smooth activations and ``ig`` with
    ReLU (docs/victims.md#your-own-model-the-recipe-by-its-units).

    Refused in one sentence at registration, before anything is kept: a name registered twice or one the command
    line cannot write (:func:`~leakattack.registry.name_error`), a builder that is not callable, a ``task`` not in
    :data:`~targets.victim.TASKS`, a ``loss`` that is not callable, a ``default_init`` not in ``INITS``, a
    ``recipe`` that is not a name; a builder that then returns anything but an ``nn.Module`` is refused by
    :func:`get_model`.
    """
    _MODELS.check_name(name)
    if in_rank is not None and (isinstance(in_rank, bool) or not isinstance(in_rank, int) or in_rank < 1):
        raise UserError(f"the in_rank of model '{name}' must be a positive integer or None, got {in_rank!r}")
    if task not in TASKS:
        raise UserError(f"the task of model '{name}' must be one of: {', '.join(TASKS)}; got {task!r}")
    if loss is not None and not callable(loss):
        raise TypeError(f"the loss of model '{name}' must be a callable (output, target) -> loss or None, got "
                        f"{loss!r}")
    if default_init is not None and default_init not in INITS:
        raise UserError(f"the default_init of model '{name}' must be one of: {', '.join(INITS)} (or None: the "
                        f"builder's own), got {default_init!r}")
    if recipe is not None and not isinstance(recipe, str):
        raise TypeError(f"the recipe of model '{name}' must be an attack recipe's name or None, got {recipe!r}")
    meta = {"task": task, "loss": loss or (cross_entropy if task == "classification" else squared_error),
            "default_init": default_init, "recipe": recipe, "in_rank": in_rank}

    def deco(b):
        if not callable(b):
            raise TypeError(f"model '{name}' must be registered with a builder(in_shape, num_classes, **params) -> "
                            f"nn.Module (a class or a function), got {type(b).__name__} {b!r}")
        return _MODELS.register(name, b, **meta)

    return deco if builder is None else deco(builder)


register_model("lenet", LeNet, default_init="uniform", in_rank=3)
register_model("mlp", MLP, recipe="dlg")  # with act=relu too (docs/victims.md#your-own-model-the-recipe-by-its-units)
register_model("logreg", LogReg)
register_model("linreg", LinReg, task="regression")
register_model("resnet20", resnet20, default_init=None, recipe="ig", in_rank=3)
register_model("resnet32", resnet32, default_init=None, recipe="ig", in_rank=3)
register_model("resnet_cifar", resnet_cifar, default_init=None, recipe="ig", in_rank=3)
register_model("resnet18", resnet18, default_init=None, recipe="ig", in_rank=3)
register_model("resnet50", resnet50, default_init=None, recipe="ig", in_rank=3)
register_model("resnet101", resnet101, default_init=None, recipe="ig", in_rank=3)
register_model("vit_small", vit_small, default_init=None, recipe="dlg", in_rank=3)
register_model("vit_b_16", vit_b_16, default_init=None, recipe="ig", in_rank=3)


def list_models() -> list[str]:
    """Names accepted by :func:`get_model` (besides the user's own ``file.py:Name`` / ``module:Name``)."""
    return _MODELS.names()


def _is_user(name: str) -> bool:
    return name not in _MODELS and is_user_spec(name)


RESERVED_MODEL_PARAMS = {"name": "the --model flag", "seed": "set by --model-seed", "init": "set by --weight-init",
                         "num_classes": "the data set's class count", "in_shape": "the data set's image shape",
                         "bn_mode": "set by --bn"}
"""The keywords every model is built with, set by leakattack itself (-> what sets them): no model parameter of
these names can be passed (``--model-param``), and :func:`model_params` does not list them."""


def model_params(name: str) -> list[str]:
    """The keyword parameters model ``name`` takes beyond input shape and classes (e.g. act, hidden) that a user
    can set (none of :data:`RESERVED_MODEL_PARAMS`)."""
    if _is_user(name):
        return [p for p in user_params(user_class(name)) if p not in RESERVED_MODEL_PARAMS]
    sig = inspect.signature(_MODELS.get(name))
    return [n for n, p in sig.parameters.items() if n not in RESERVED_MODEL_PARAMS
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def param_default(name: str, key: str):
    """The value registered model ``name`` gives parameter ``key`` when none is given (``param_default("resnet20",
    "act")`` is ``"relu"``); None where it takes no such parameter, has no default for it, or is a user's model
    file."""
    if _is_user(name):
        return None
    p = inspect.signature(_MODELS.get(name)).parameters.get(key)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def takes_any_param(name: str) -> bool:
    """Whether registered model ``name``'s builder takes any keyword (``builder(in_shape, num_classes, **params)``,
    passing them on): then its builder, not :func:`model_params`, decides which it accepts."""
    if _is_user(name):
        return False
    params = inspect.signature(_MODELS.get(name)).parameters.values()
    return any(p.kind == p.VAR_KEYWORD for p in params)


def seeded_build(seed: int, build):
    """``build()`` with PyTorch's global generator seeded by ``seed``, leaving the caller's generator as it was."""
    with torch.random.fork_rng(devices=[]), torch_defaults():  # built on the CPU, in float32 whatever the default
        torch.default_generator.manual_seed(torch_seed(seed))
        return build()


def get_model(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), seed: int = 0,
              init: str | None = None, bn_mode: str = "train", **params) -> Victim:
    """Build model ``name`` with every weight drawn from ``seed`` (float32, CPU) and wrap it as a Victim.

    ``name`` is a registered model or the user's own class, ``path/to/file.py:Name`` or ``package.module:Name``.
    ``in_shape`` (one example's shape) must be a tuple of positive integers, with as many entries as a registered
    model takes (its ``in_rank``), and ``num_classes`` an integer of at least 1 (2 for a classifier under
    cross-entropy, whose one-class loss has no gradient): anything else is one
    :class:`~leakattack.errors.UserError` sentence before the model is built.
    """
    if isinstance(name, torch.nn.Module) or isinstance(name, type) and issubclass(name, torch.nn.Module):
        raise UserError(f"get_model takes a model's name, got the {'class' if isinstance(name, type) else 'module'}"
                        f" {getattr(name, '__name__', type(name).__name__)}: wrap a module you built with "
                        "Victim.from_module(module, input_shape=..., num_classes=...)")
    if not _is_user(name):
        _MODELS.get(name)  # an unknown name is named before its arguments
    in_shape = _checked_in_shape(name, in_shape)
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or int(num_classes) < 1:
        raise UserError(f"num_classes must be an integer of at least 1, got {num_classes!r}")
    num_classes = int(num_classes)
    meta = {"name": name, "seed": check_seed(seed, "model seed"), "init": init, **params}
    if _is_user(name):
        cls = user_class(name)
        module = seeded_build(seed, lambda: build_user_module(name, cls, in_shape, num_classes, params))
        if init is not None:
            initialise(module, init, torch_generator(seed))
        victim = user_victim(name, module, in_shape, num_classes, bn_mode)
        victim.meta = meta
        return victim
    builder, info = _MODELS.get(name), _MODELS.meta(name)
    unknown = [] if takes_any_param(name) else sorted(set(params) - set(model_params(name)))
    if unknown:
        allowed = ", ".join(model_params(name)) or "none"
        hint = ("; one example's shape is get_model's in_shape=(C, H, W) (Victim.from_module calls it input_shape)"
                if unknown[0] == "input_shape" else "")
        raise UserError(f"model '{name}' has no parameter '{unknown[0]}'; allowed: {allowed}{hint}")
    if init is not None and init not in INITS:
        raise UserError(f"unknown weight init '{init}'; choose one of: {', '.join(INITS)}")
    module = seeded_build(seed, lambda: _build(name, builder, in_shape, num_classes, params))
    init = init or info["default_init"]
    if init is not None:
        initialise(module, init, torch_generator(seed))
    head = last_linear(module) if info["task"] == "classification" else None
    victim = Victim(model=module, input_shape=in_shape, num_classes=num_classes, loss=info["loss"],
                    task=info["task"], head=head, bn_mode=bn_mode, name=name, meta={**meta, "init": init})
    if _outside(builder):  # registered by the user's code: checked on one small batch, as a file.py:Name class is
        victim.check_output()
    return victim


def _outside(builder) -> bool:
    """Whether a registered builder comes from outside this package (the user's code, a plugin)."""
    return not str(getattr(builder, "__module__", "") or "").startswith(__name__ + ".")


def _checked_in_shape(name: str, in_shape) -> tuple[int, ...]:
    """``in_shape`` as a tuple of ints, or one UserError sentence: not a sequence of positive integers, or (for a
    registered model that declares its ``in_rank``) not that many entries."""
    whole = isinstance(in_shape, (tuple, list, torch.Size)) and len(in_shape) > 0 and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) and int(s) > 0 for s in in_shape)
    if not whole:
        raise UserError(f"in_shape must be the shape of one example, a tuple of positive integers such as "
                        f"(3, 32, 32), got {in_shape!r}")
    shape = tuple(int(s) for s in in_shape)
    rank = _MODELS.meta(name).get("in_rank") if name in _MODELS else None
    if rank is not None and len(shape) != rank:
        what = " (channels, height, width)" if rank == 3 else ""
        raise UserError(f"model '{name}' takes an in_shape of {rank} entries{what}, got {shape}")
    if rank == 3 and shape[2] in (1, 3, 4) and shape[0] not in (1, 3, 4) and shape[1] > shape[2]:
        warnings.warn(f"model '{name}' is built for {shape[0]} input channels of {shape[1]} x {shape[2]} pixels: "
                      f"in_shape is (channels, height, width), and ({shape[2]}, {shape[0]}, {shape[1]}) may be "
                      "what was meant (images channels-last?)", SettingWarning, stacklevel=3)
    return shape


def _build(name: str, builder, in_shape: tuple, num_classes: int, params: dict) -> nn.Module:
    """``builder(in_shape=, num_classes=, **params)``; a value it cannot take is one sentence.  A parameter whose
    default is a whole number (``hidden``, ``width``, ``depth``, ...) takes a positive whole number."""
    defaults = inspect.signature(builder).parameters
    for key, value in params.items():
        default = defaults[key].default if key in defaults else inspect.Parameter.empty  # else taken by **params
        if isinstance(default, int) and not isinstance(default, bool) and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"model '{name}' parameter {key} must be a positive whole number, got {value!r}")
    try:
        module = builder(in_shape=in_shape, num_classes=num_classes, **params)
    except UserError:
        raise
    except (TypeError, ValueError, RuntimeError, ZeroDivisionError) as err:
        if not params and not _outside(builder):  # the shape or classes do not fit: the caller names where they
            raise                                 # came from
        raise not_built(name, params, err) from None
    if not isinstance(module, nn.Module):
        raise UserError(f"the builder of model '{name}' returned {type(module).__name__}, not an nn.Module")
    return module


def _on_meta(name: str, num_classes: int, in_shape: tuple, params: dict) -> nn.Module:
    """Model ``name`` built on PyTorch's meta device: nothing allocated, no weights drawn."""
    with torch.device("meta"):
        if _is_user(name):
            return build_user_module(name, user_class(name), in_shape, num_classes, params)
        return _MODELS.get(name)(in_shape=in_shape, num_classes=num_classes, **params)


def parameter_count(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), **params) -> int | None:
    """The weights model ``name`` would have, counted on PyTorch's meta device (nothing allocated, no weights
    drawn), so that a size that cannot fit is refused before it is built; None where the class cannot be built
    there (the user's class may need real tensors) or refuses the arguments (building it says why)."""
    try:
        module = _on_meta(name, num_classes, tuple(int(s) for s in in_shape), params)
        return sum(p.numel() for p in module.parameters())
    except Exception:  # noqa: BLE001 -- counting is advisory: get_model gives the one-sentence error
        return None


def default_init(name: str) -> str | None:
    """The weight initialisation model ``name`` gets unless another is asked for (None: its own, seeded)."""
    if _is_user(name):
        return None
    return _MODELS.meta(name)["default_init"]


def units_of(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), **params) -> list[str] | None:
    """The units of model ``name`` whose derivative jumps (``targets.models.units``), found on the meta device;
    None where it cannot be built there (the user's class may need real tensors) or refuses the arguments."""
    found = _on_meta_facts(name, num_classes, in_shape, params)
    return None if found is None else list(found[0])


def has_batchnorm_of(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), **params) -> bool:
    """Whether model ``name`` has a BatchNorm layer, found on the meta device (False where it cannot be built
    there)."""
    found = _on_meta_facts(name, num_classes, in_shape, params)
    return found is not None and found[1]


def _on_meta_facts(name: str, num_classes: int, in_shape: tuple, params: dict) -> tuple[list, bool] | None:
    """(units whose derivative jumps, has a BatchNorm layer) of model ``name``, built once on the meta device per
    configuration (a configuration asks on every derivation of its settings); None where it cannot be built."""
    in_shape = tuple(int(s) for s in in_shape)
    key = (name, int(num_classes), in_shape, repr(sorted(params.items())))
    if key not in _FACTS:
        try:
            module = _on_meta(name, num_classes, in_shape, params)
            # a registered model's units are its modules; a user's class may also call them in its forward
            _FACTS[key] = (piecewise_units(module, in_shape if _is_user(name) else None), has_batchnorm(module))
        except Exception:  # noqa: BLE001 -- advisory: get_model gives the one-sentence error
            _FACTS[key] = None
    return _FACTS[key]


_FACTS: dict[tuple, tuple[list, bool] | None] = {}


def own_recipe(name: str) -> str | None:
    """The recipe model ``name`` is registered with or its class names; :data:`BY_UNITS` (None) where its units
    decide."""
    return user_recipe(user_class(name)) if _is_user(name) else _MODELS.meta(name)["recipe"]


def recipe_of(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), **params) -> str:
    """The attack recipe that suits model ``name`` built with these arguments: the one it is registered with or
    its class names (``leakattack_recipe``); else, by its units, ``ig`` where one's derivative jumps (ReLU, max
    pooling: :func:`units_of`) and ``dlg`` for a smooth model or one that cannot be built on the meta device."""
    return _by_units(own_recipe(name), lambda: units_of(name, num_classes, in_shape, **params))


def victim_recipe(victim: Victim) -> str:
    """The attack recipe for a built victim, as ``--recipe auto`` chooses it for its model: the one a registered
    model is registered with or the module's class names, else by the units of the module itself (a registered
    model's modules; another's modules, or the calls of one forward pass of two zero inputs).  Anything but a
    Victim is one UserError sentence."""
    if not isinstance(victim, Victim):
        raise UserError(f"victim_recipe takes a built victim, such as targets.get_model('lenet'), got "
                        f"{type(victim).__name__} {victim!r:.40}")
    name = str(victim.meta.get("name"))
    fixed = _MODELS.meta(name)["recipe"] if name in _MODELS else user_recipe(type(victim.model))
    return _by_units(fixed, lambda: victim_units(victim))


def victim_units(victim: Victim) -> list[str]:
    """The built victim's units whose derivative jumps, as :func:`victim_recipe` finds them: a registered model's
    modules; another's modules, or the calls of one forward pass of two zero inputs."""
    registered = str(victim.meta.get("name")) in _MODELS
    return piecewise_units(victim.model, None if registered else tuple(victim.input_shape))


def _by_units(fixed: str | None, units) -> str:
    """``fixed``, else ``ig`` where ``units()`` finds a unit whose derivative jumps and ``dlg`` where it finds none
    (or cannot look: None)."""
    if fixed is not BY_UNITS:
        return fixed
    return "ig" if units() else "dlg"


def task_of(name: str) -> str:
    """classification or regression, without building the model."""
    if _is_user(name):
        return user_task(user_class(name))
    return _MODELS.meta(name)["task"]


def check_class(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), **params) -> None:
    """For the user's class ``name``, refuse in one UserError sentence the class attributes a run refuses (task,
    loss, head: :func:`~targets.models.user.check_attributes`), asked of the class built on the meta device;
    nothing where ``name`` is a registered model or its class cannot be built there (a run then says why)."""
    if not _is_user(name):
        return
    try:
        module = _on_meta(name, num_classes, tuple(int(s) for s in in_shape), params)
    except Exception:  # noqa: BLE001 -- building it for a run gives the one-sentence error
        return
    check_attributes(name, module)


__all__ = ["get_model", "list_models", "register_model", "model_params", "param_default", "takes_any_param",
           "RESERVED_MODEL_PARAMS",
           "parameter_count",
           "default_init",
           "task_of", "check_class",
           "recipe_of", "own_recipe", "units_of", "has_batchnorm_of", "victim_recipe", "victim_units",
           "piecewise_units",
           "BY_UNITS",
           "seeded_build", "output_problem", "INITS", "ACTIVATIONS", "activation", "initialise", "LeNet", "MLP",
           "LogReg", "LinReg"]
