"""The sketch operator interface shared by every sketch family.

A sketch is a random linear map R: R^d -> R^b known to the attacker through its
seed.  Operators are matrix-free: ``apply`` computes R v and ``adjoint`` R^T u,
both batched over leading dimensions and differentiable with autograd.
"""

from __future__ import annotations

import torch

#: Above this many entries (b*d) no operator may hold a dense b x d matrix.
DENSE_LIMIT = 2 ** 24


class LinearMap(torch.autograd.Function):
    """y = A v for a linear map computed outside autograd; its backward is A^T.

    ``LinearMap.apply(v, A, AT)`` with callables A and AT (each the other's
    transpose).  Autograd then stores no intermediate tensors, only the two
    callables, which keeps regenerated or transformed operators O(d) in memory.
    """

    @staticmethod
    def forward(ctx, v, A, AT):
        ctx.maps = (A, AT)
        return A(v)

    @staticmethod
    def backward(ctx, g):
        A, AT = ctx.maps
        return LinearMap.apply(g, AT, A), None, None


class Sketch:
    """Base class: holds ``kind, d, b, seed``; subclasses implement ``_apply``/``_adjoint``.

    Subclasses draw all randomness in ``__init__`` (or lazily, from ``seed``) on the
    CPU with a ``torch.Generator``/``numpy`` generator, so the same seed gives the
    same R on every machine; ``to(device)`` moves cached tensors.
    """

    kind: str = "base"
    identity: bool = False  #: R = I (b = d): nothing is compressed

    def __init__(self, d: int, b: int, seed: int):
        self.d = int(d)
        self.b = int(b)
        self.seed = int(seed)
        self.device = torch.device("cpu")

    # -- public API -------------------------------------------------------
    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """R v for v of shape (..., d); returns (..., b).  Cached tensors follow v's device."""
        if v.device != self.device:
            self.to(v.device)
        return self._apply(v)

    def adjoint(self, u: torch.Tensor) -> torch.Tensor:
        """R^T u for u of shape (..., b); returns (..., d)."""
        if u.device != self.device:
            self.to(u.device)
        return self._adjoint(u)

    __call__ = apply

    def to_dense(self) -> torch.Tensor:
        """The b x d matrix (only for small sketches: b*d <= 2**24)."""
        if self.b * self.d > DENSE_LIMIT:
            raise ValueError(f"to_dense() refused: b*d = {self.b * self.d} > 2**24")
        eye = torch.eye(self.d, dtype=torch.float64, device=self.device)
        return self.apply(eye).T.contiguous()

    def to(self, device) -> "Sketch":
        """Move cached index/sign tensors to ``device`` (in place); returns self."""
        self.device = torch.device(device)
        for name, val in list(vars(self).items()):
            if isinstance(val, torch.Tensor):
                setattr(self, name, val.to(self.device))
        return self

    def describe(self) -> dict:
        """Parameters that reproduce this operator (for config.json)."""
        return {"kind": self.kind, "d": self.d, "b": self.b, "seed": self.seed}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.d}, b={self.b}, seed={self.seed})"

    # -- to implement -----------------------------------------------------
    def _apply(self, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _adjoint(self, u: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError
