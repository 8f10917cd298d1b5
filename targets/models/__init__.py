"""The model zoo: ``get_model(name, ...) -> Victim`` and ``list_models()``, torchvision style.

* ``lenet``  — the LeNet of DLG (sigmoid, weights U(-0.5, 0.5) by default).
* ``mlp``    — one hidden layer (sigmoid by default) and a linear head.
* ``logreg`` — multinomial logistic regression (linear layer + cross-entropy).
* ``linreg`` — linear regression F(w, x) = 1/2 (w^T x - y)^2, a regression task.

Adding a model: its own module with an ``nn.Module`` class, plus one
``register_model`` line here giving its task, loss and default initialisation.
"""

from __future__ import annotations

import inspect

from leakattack.errors import UserError
from leakattack.registry import Registry
from leakattack.seeds import torch_generator

from ..victim import Victim, cross_entropy, squared_error
from .layers import ACTIVATIONS, INITS, activation, initialise
from .lenet import LeNet
from .linear import LinReg, LogReg
from .mlp import MLP

_MODELS = Registry("model")


def register_model(name: str, builder=None, *, task: str = "classification", loss=None,
                   default_init: str = "default"):
    """Register ``builder(in_shape, num_classes, **params) -> nn.Module`` under ``name`` (a decorator without builder)."""
    meta = {"task": task, "loss": loss or (cross_entropy if task == "classification" else squared_error),
            "default_init": default_init}
    if builder is None:
        return lambda b: _MODELS.register(name, b, **meta)
    return _MODELS.register(name, builder, **meta)


register_model("lenet", LeNet, default_init="uniform")
register_model("mlp", MLP)
register_model("logreg", LogReg)
register_model("linreg", LinReg, task="regression")


def list_models() -> list[str]:
    """Names accepted by :func:`get_model`."""
    return _MODELS.names()


def model_params(name: str) -> list[str]:
    """The keyword parameters model ``name`` takes beyond input shape and classes (e.g. act, hidden)."""
    sig = inspect.signature(_MODELS.get(name))
    return [p for p in sig.parameters if p not in ("in_shape", "num_classes")]


def get_model(name: str, num_classes: int = 10, in_shape: tuple = (3, 32, 32), seed: int = 0,
              init: str | None = None, bn_mode: str = "train", **params) -> Victim:
    """Build model ``name`` with every weight drawn from ``seed`` (float32, CPU) and wrap it as a Victim."""
    builder, meta = _MODELS.get(name), _MODELS.meta(name)
    unknown = sorted(set(params) - set(model_params(name)))
    if unknown:
        allowed = ", ".join(model_params(name)) or "none"
        raise UserError(f"model '{name}' has no parameter '{unknown[0]}'; allowed: {allowed}")
    module = builder(in_shape=tuple(in_shape), num_classes=num_classes, **params)
    initialise(module, init or meta["default_init"], torch_generator(seed))
    head = getattr(module, "fc", None) if meta["task"] == "classification" else None
    return Victim(model=module, input_shape=in_shape, num_classes=num_classes, loss=meta["loss"],
                  task=meta["task"], head=head, bn_mode=bn_mode, name=name,
                  meta={"name": name, "seed": int(seed), "init": init or meta["default_init"], **params})


def default_init(name: str) -> str:
    """The weight initialisation model ``name`` gets unless another is asked for."""
    return _MODELS.meta(name)["default_init"]


def task_of(name: str) -> str:
    """classification or regression, without building the model."""
    return _MODELS.meta(name)["task"]


__all__ = ["get_model", "list_models", "register_model", "model_params", "default_init", "task_of",
           "INITS", "ACTIVATIONS", "activation", "initialise", "LeNet", "MLP", "LogReg", "LinReg"]
