"""Whether a model has units whose derivative jumps: ReLU's family and max pooling.

Gradient matching differentiates the model's gradient in its input.  Where a unit's
derivative is a step (ReLU, its clipped and leaky variants, the hard sigmoid and swish,
shrinkage, a clamp) or a selection (max pooling), that derivative of the matching objective sees
none of the jumps (docs/ig_recipe.md#relus-jumps-and-the-surrogate), and float64 L-BFGS,
which trusts its curvature pairs, stalls near its start; signed Adam (the ``ig`` recipe)
walks through them.  Measured on small convolutional networks of a user's own
(docs/victims.md#your-own-model).  Smooth units (sigmoid, tanh, softplus, GELU, SiLU, ELU,
softmax) keep L-BFGS's pace and precision.

The units are found two ways: the model's modules, and where none of them jumps, the calls
of a forward pass on PyTorch's meta device (nothing allocated, no weights drawn) seen
through a ``TorchFunctionMode``, which catches ``F.relu`` and ``x.relu()`` in a ``forward``.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..oracle import kept_buffers

#: module classes whose derivative in their input jumps
PIECEWISE_MODULES = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid,
    nn.Hardshrink, nn.Softshrink, nn.Threshold,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
    nn.FractionalMaxPool2d, nn.FractionalMaxPool3d,
)

#: names of torch functions and tensor methods whose derivative jumps (max pooling: any name holding "max_pool")
PIECEWISE_CALLS = frozenset({
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "prelu", "rrelu", "rrelu_", "hardtanh", "hardtanh_",
    "hardswish", "hardswish_", "hardsigmoid", "hardsigmoid_", "hardshrink", "softshrink", "threshold", "threshold_",
    # a clamp is a ReLU (x.clamp(min=0)) or a hard tanh written out
    "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "clip", "clip_",
    # so is an elementwise maximum or minimum (torch.maximum(h, zeros)), and abs has its kink at 0
    "maximum", "minimum", "fmax", "fmin", "abs", "abs_", "absolute", "absolute_", "__abs__",
})


#: names of calls that make a unit whose derivative jumps where they act on a value that depends on the input or
#: the weights (a comparison that gates an activation, ``torch.where(h > 0, h, 0)`` or ``h * (h > 0)``; a step
#: function; a selection such as a global max pooling written ``h.amax((2, 3))``), and not on a fixed mask or shape
GATED_CALLS = frozenset({
    "gt", "ge", "lt", "le", "greater", "greater_equal", "less", "less_equal",
    "__gt__", "__ge__", "__lt__", "__le__",
    "sign", "sgn", "heaviside", "floor", "ceil", "round", "trunc", "fix",
    "max", "min", "amax", "amin", "topk", "sort", "argmax", "argmin", "argsort", "kthvalue", "median", "mode",
})


def _piecewise_call(name: str) -> bool:
    return name in PIECEWISE_CALLS or name in GATED_CALLS or "max_pool" in name


def _depends(value) -> bool:
    """Whether ``value`` (or a tensor inside a list or tuple of it) depends on the input or the weights."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    return isinstance(value, (list, tuple)) and any(_depends(v) for v in value)


class _Calls(TorchFunctionMode):
    """Records the names of the torch functions and tensor methods called within it; a call of
    :data:`GATED_CALLS` only where an argument depends on the input or the weights."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name not in GATED_CALLS or _depends(args) or _depends(list((kwargs or {}).values())):
            self.names.add(name)
        return func(*args, **(kwargs or {}))


def piecewise_units(module: nn.Module, in_shape: tuple | None = None) -> list[str]:
    """The names of ``module``'s units whose derivative jumps: its module classes, or where it has none and
    ``in_shape`` is given, the calls of a forward pass of two zero inputs on the module's device (the meta device
    where it was built there, ``torch.device("meta")``), its buffers restored afterwards.  A forward pass that
    fails (a model that needs real values, on the meta device) counts the calls made before it failed.  On the
    meta device it imports ``torch._dynamo`` (meta kernels run torch's Python decompositions): 1.5 s of start-up
    on a 2-core CPU (docs/victims.md), spent only where no module answers."""
    found = {type(m).__name__ for m in module.modules() if isinstance(m, PIECEWISE_MODULES)}
    if not found and in_shape is not None:
        first = next(module.parameters(), None)
        device, dtype = (first.device, first.dtype) if first is not None else (torch.device("meta"), None)
        calls = _Calls()
        try:  # with autograd on, so that a comparison of an activation is told from one of a fixed mask
            x = torch.zeros(2, *in_shape, device=device, dtype=dtype)
            x.requires_grad_(x.is_floating_point())
            with kept_buffers(module), torch.enable_grad(), warnings.catch_warnings(), calls:
                warnings.simplefilter("ignore")  # the user's forward warns, if it does, when the run calls it
                module(x)
        except Exception:  # noqa: BLE001 - any failure of the user's forward (on meta tensors): the calls made so far
            pass
        found |= {name for name in calls.names if _piecewise_call(name)}
    return sorted(found)


__all__ = ["piecewise_units", "PIECEWISE_MODULES", "PIECEWISE_CALLS", "GATED_CALLS"]
