"""Optimisers over the dummy data: ``get_optimizer(name, lr)`` / ``list_optimizers()``.

``gd`` (fixed-step gradient descent, the sketching paper's algorithm), ``adam``
and ``lbfgs`` (strong-Wolfe line search, the DLG choice; :mod:`.lbfgs`).  One
*iteration* is one optimiser step (for L-BFGS one quasi-Newton step with its line
search).

Each optimiser updates R independent problems at once, one per row of a matrix X
(R, n): the restarts of an attack.  ``gd`` and ``adam`` are plain tensor code with
torch.optim's arithmetic (``SGD`` without momentum, ``Adam`` with its defaults), so
they give torch's iterates to the last bit; they are our own because building a
torch.optim optimiser imports torch._dynamo, a second of start-up.

First-order optimisers (``evaluates = False``) map (X, G) to the next X; L-BFGS
(``evaluates = True``) also evaluates the objective, in its line search, and
returns the next points with their evaluations.
"""

from __future__ import annotations

import torch

from ..registry import Registry
from .lbfgs import LBFGS

_OPTIMIZERS = Registry("optimizer")

#: step sizes that work for the defaults (lbfgs: the DLG setting)
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.1, "gd": 0.01}


class _RowState:
    """State tensors of the R problems, created at the first step; a later step may update a subset of rows."""

    def __init__(self):
        self.rows: list | None = None
        self.index: torch.Tensor | None = None

    def positions(self, rows: list) -> torch.Tensor | None:
        """None when ``rows`` are all the problems (in order), else their positions in the state tensors."""
        if self.rows is None:
            self.rows = list(rows)
            return None
        if list(rows) == self.rows:
            return None
        where = {r: i for i, r in enumerate(self.rows)}
        return torch.tensor([where[r] for r in rows])


class SGD:
    """x <- x - lr g (torch.optim.SGD without momentum or weight decay)."""

    evaluates = False

    def __init__(self, lr: float = DEFAULT_LR["gd"]):
        self.lr = float(lr)

    def step(self, rows: list, X: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        return X.add(G, alpha=-self.lr)


class Adam(_RowState):
    """Adam (Kingma & Ba 2015) with torch.optim.Adam's arithmetic, operation for operation."""

    evaluates = False

    def __init__(self, lr: float = DEFAULT_LR["adam"], betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__()
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        self.steps = 0
        self.exp_avg: torch.Tensor | None = None
        self.exp_avg_sq: torch.Tensor | None = None

    def step(self, rows: list, X: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        beta1, beta2 = self.betas
        where = self.positions(rows)
        if self.exp_avg is None or self.exp_avg_sq is None:  # the first step (both are set together)
            self.exp_avg, self.exp_avg_sq = torch.zeros_like(X), torch.zeros_like(X)
        m, v = (self.exp_avg, self.exp_avg_sq) if where is None else (self.exp_avg[where], self.exp_avg_sq[where])
        # the restarts step together, so one count serves every row still running
        self.steps += 1
        m.lerp_(G, 1 - beta1)
        v.mul_(beta2).addcmul_(G, G, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** float(self.steps)
        bias_correction2 = 1 - beta2 ** float(self.steps)
        step_size = self.lr / bias_correction1
        denom = (v.sqrt() / bias_correction2 ** 0.5).add_(self.eps)
        if where is not None:
            self.exp_avg[where], self.exp_avg_sq[where] = m, v
        return X.addcdiv(m, denom, value=-step_size)


_OPTIMIZERS.register("lbfgs", LBFGS, normalised=True)
_OPTIMIZERS.register("adam", Adam, normalised=False)
_OPTIMIZERS.register("gd", SGD, normalised=False)


def list_optimizers() -> list[str]:
    """Names accepted by :func:`get_optimizer`, in the order the CLI shows them."""
    return list(DEFAULT_LR)


def get_optimizer(name: str, lr: float | None = None, **options):
    """A fresh optimiser ``name`` with step size ``lr`` (default: :data:`DEFAULT_LR`)."""
    builder = _OPTIMIZERS.get(name)
    return builder(DEFAULT_LR[name] if lr is None else lr, **options)


def sees_normalised_loss(name: str) -> bool:
    """Whether the optimiser minimises 1e3 * L_R/||y||^2 instead of L_R (see gradient_matching)."""
    return _OPTIMIZERS.meta(name)["normalised"]


__all__ = ["get_optimizer", "list_optimizers", "DEFAULT_LR", "sees_normalised_loss", "Adam", "SGD", "LBFGS"]
