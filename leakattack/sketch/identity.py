"""The identity 'sketch' (kind ``none``): the unsketched DLG setting, R = I_d."""

from __future__ import annotations

import torch

from .base import Sketch


class Identity(Sketch):
    """R = I_d; ``b`` is forced to ``d``."""

    kind = "none"

    identity = True

    def __init__(self, d: int, b: int | None = None, seed: int = 0):
        super().__init__(d=d, b=d, seed=seed)

    def _apply(self, v: torch.Tensor) -> torch.Tensor:
        return v

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:
        return u
