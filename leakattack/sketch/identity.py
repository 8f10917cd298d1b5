"""The identity 'sketch' (kind ``none``): the unsketched DLG setting, R = I_d."""

from __future__ import annotations

import torch

from .base import Sketch


def identity_operator_norm() -> float:
    """||I_d||_2 = 1 (every singular value of the identity is 1)."""
    return 1.0


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

    def _operator_norm(self) -> float:
        return identity_operator_norm()
