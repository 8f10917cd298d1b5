"""Victims: models at weights w, their loss F and the gradient oracle grad_w F(w, x).

Registry in the torchvision style: ``get_model(name, num_classes, in_shape, seed,
init)`` and ``list_models()``.  Federated protocols live in ``targets.protocols``.
"""

from __future__ import annotations


import torch
from torch import nn

from .models import INITS, LeNet, LinReg, LogReg, MLP, initialise
from .oracle import flat_gradient, flat_params, loss_at, num_params, param_slices, per_example_gradients, unflatten
from leakattack.registry import Registry

_MODELS = Registry("model")
#: the weight initialisation each model gets unless ``init`` is given
DEFAULT_INIT: dict[str, str] = {}


def register_model(name: str, default_init: str = "default"):
    """Decorator/function registering a model constructor under ``name``."""

    def deco(fn):
        _MODELS.register(name, fn)
        DEFAULT_INIT[name] = default_init
        return fn

    return deco


register_model("lenet", default_init="uniform")(LeNet)
register_model("mlp", default_init="default")(MLP)
register_model("logreg", default_init="default")(LogReg)
register_model("linreg", default_init="default")(LinReg)


def list_models() -> list[str]:
    """Names accepted by :func:`get_model`."""
    return _MODELS.names()


def get_model(
    name: str,
    num_classes: int = 10,
    in_shape: tuple = (3, 32, 32),
    seed: int = 0,
    init: str | None = None,
    **kwargs,
) -> nn.Module:
    """Build model ``name`` with weights drawn from ``seed`` (float32, CPU, eval mode)."""
    model = _MODELS.get(name)(in_shape=tuple(in_shape), num_classes=num_classes, **kwargs)
    gen = torch.Generator().manual_seed(int(seed))
    initialise(model, init or DEFAULT_INIT[name], gen)
    return model.eval()


__all__ = [
    "INITS", "get_model", "list_models", "register_model", "flat_gradient", "flat_params",
    "loss_at", "num_params", "param_slices", "per_example_gradients", "unflatten",
]
