"""Optimisers over the dummy data: ``get_optimizer(name, variables, lr)`` / ``list_optimizers()``.

``gd`` (fixed-step gradient descent, the sketching paper's algorithm), ``adam``
and ``lbfgs`` (strong-Wolfe line search, the DLG choice).  One *iteration* is
one optimiser step (for L-BFGS one quasi-Newton step with its line search).
"""

from __future__ import annotations

import torch

from ..registry import Registry

_OPTIMIZERS = Registry("optimizer")

#: step sizes that work for the defaults (lbfgs: the DLG setting)
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.1, "gd": 0.01}


def _lbfgs(variables, lr):
    # max_eval bounds the line search; its default (5/4 max_iter = 1) would forbid it
    return torch.optim.LBFGS(variables, lr=lr, max_iter=1, max_eval=25, history_size=100, tolerance_grad=0.0,
                             tolerance_change=0.0, line_search_fn="strong_wolfe")


_OPTIMIZERS.register("lbfgs", _lbfgs, normalised=True)
_OPTIMIZERS.register("adam", lambda variables, lr: torch.optim.Adam(variables, lr=lr), normalised=False)
_OPTIMIZERS.register("gd", lambda variables, lr: torch.optim.SGD(variables, lr=lr), normalised=False)


def list_optimizers() -> list[str]:
    """Names accepted by :func:`get_optimizer`, in the order the CLI shows them."""
    return list(DEFAULT_LR)


def get_optimizer(name: str, variables, lr: float | None = None) -> torch.optim.Optimizer:
    """Optimiser ``name`` over ``variables`` with step size ``lr`` (default: :data:`DEFAULT_LR`)."""
    builder = _OPTIMIZERS.get(name)
    return builder(variables, DEFAULT_LR[name] if lr is None else lr)


def sees_normalised_loss(name: str) -> bool:
    """Whether the optimiser minimises 1e3 * L_R/||y||^2 instead of L_R (see gradient_matching)."""
    return _OPTIMIZERS.meta(name)["normalised"]


__all__ = ["get_optimizer", "list_optimizers", "DEFAULT_LR", "sees_normalised_loss"]
