"""Whether the message pins the input down near a point: the numerical rank of the Jacobian of x -> y(x).

y(x) = R grad_w F(w, x) is the attacker's model of the client (through the
sketch and the deterministic part of a defense).  At a point where the Jacobian
J (b x m*B) has rank m*B, every small change of the input changes the message
to first order: the matching input is isolated there (locally unique).  Below
m*B a direction exists along which the message stays the same to first order.
The rank says nothing about distant inputs that match the message as well: a
run that matched the message to its tolerance at an image that is not the truth
shows those directly.
"""

from __future__ import annotations

import torch

from ..attacks.gauss_newton import CANNOT_FORM, jacobian, why_not_formed

#: the Jacobian is measured only when d x m*B is at most this: each of its m*B columns is one backward pass through
#: the graph of the d weights' gradient, and J (b x m*B, b <= d) takes at most 160 MB in float64 ...
JACOBIAN_MAX_WORK = 2 * 10**7
#: ... and m*B is at most this (the SVD grows as b (m*B)^2; what it costs: docs/runs.md)
JACOBIAN_MAX_UNKNOWNS = 1024


def numerical_rank(J: torch.Tensor) -> int:
    """Singular values above s_max * max(J.shape) * eps(dtype) (numpy.linalg.matrix_rank's default tolerance)."""
    return rank_of(torch.linalg.svdvals(J), J.shape)


def rank_of(s: torch.Tensor, shape: tuple[int, ...]) -> int:
    """:func:`numerical_rank` of a matrix of ``shape`` from its singular values ``s`` (an SVD already taken)."""
    if s.numel() == 0:
        return 0
    tol = float(s.max()) * max(shape) * torch.finfo(s.dtype).eps
    return int((s > tol).sum())


def jacobian_rank(forward, x: torch.Tensor, labels, d: int) -> tuple[int | None, str]:
    """(rank of the Jacobian of x -> forward(x, labels) at ``x``, a note); rank None when not measured.

    ``d``: the number of weights the message is computed from.  Not measured
    when d x m*B exceeds :data:`JACOBIAN_MAX_WORK` or m*B exceeds
    :data:`JACOBIAN_MAX_UNKNOWNS` (m*B = x.numel()), or when the message
    cannot be differentiated twice in x.
    """
    n = x.numel()
    if d * n > JACOBIAN_MAX_WORK or n > JACOBIAN_MAX_UNKNOWNS:
        return None, (f"not measured: d x m*B = {d} x {n} (measured up to {JACOBIAN_MAX_WORK:.0e}, and up to "
                      f"{JACOBIAN_MAX_UNKNOWNS} unknowns)")
    try:
        J = jacobian(forward, x, labels)
    except CANNOT_FORM as err:
        return None, f"not measured: {why_not_formed(err)}"
    rank = numerical_rank(J if J.dtype in (torch.float32, torch.float64) else J.double())
    return rank, f"rank {rank} of m*B = {n} at the reconstruction"


__all__ = ["JACOBIAN_MAX_WORK", "JACOBIAN_MAX_UNKNOWNS", "jacobian", "numerical_rank", "rank_of", "jacobian_rank"]
