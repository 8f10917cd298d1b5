"""A batch read from its first layer's block by the model: the examples' coefficients in the block's row space.

A batch's first-layer block is G = [dW | dc] = sum_i delta_i [x_i; 1]^T (H x (m+1), rank B), so every [x_i; 1]
lies in G's row space, spanned by its top B right singular vectors V ((m+1) x B): [x_i; 1] = V a_i / s_i with
s_i = v . a_i (v: V's last row, the bias coordinate).  The block alone fixes the a_i only up to an invertible B x B
mixing; the attacker who holds the model fixes it: delta_i is the loss's derivative at the first layer's output
for example i, a function of x_i and its label alone when no layer couples the examples (no BatchNorm on batch
statistics).  So the B^2 numbers A = [a_1 ... a_B] solve

    r(A) = D(A)^T U(A) - G V = 0        (D: B x H, row i = delta_i(x_i); U: B x B, row i = a_i / s_i)

whose H B equations are G V's (G = G V V^T, so nothing of the block is left out).  Levenberg-Marquardt on r
from random images put in the span, its normal equations formed from H-vectors without the (H B) x B^2 Jacobian:
delta_i depends on a_i alone, so B forward-mode passes (one per coordinate of every a_i at once) give every
d delta_i / d a_i.  Unlike the one-active-unit separation of a ReLU batch this needs the weights' values, and a
smooth activation: at a ReLU, a unit whose input changes sign on a reconstructed example moves r by a jump its
derivative does not see.  A clip of the whole update sends G times an unknown t (C / ||g||), so t is one more
unknown, r = t D^T U - G V, set to its least-squares value after every step (:func:`solve_span`).  The derivation
and the measured batches: docs/attacks/analytic.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, jvp, vmap

from ..errors import quiet_jvp_setup
from .base import halt_reason

#: Levenberg-Marquardt stops when ||r|| / ||G V|| falls below this
SPAN_TOL = 1e-13
#: The examples count as solved below the larger of the square root of the dtype's epsilon (1.5e-8 in float64) and
#: FIT_MARGIN times the relative residual of the block's own fit to the message (a block fitted through a sketch
#: carries its error into r: 4 to 65 times the fit's on mlp, digits, srht), never above ACCEPT_CAP.  One wrong label
#: in the batch leaves r at 0.14-0.58 (mlp on digits, B = 4, 8, 16): ``python scripts/analytic_batches.py --act
#: sigmoid`` prints both.
FIT_MARGIN, ACCEPT_CAP = 1e3, 1e-4
#: Levenberg-Marquardt steps per start, and the starts tried before giving up
SPAN_STEPS = 200
SPAN_STARTS = 3
#: the damping's bounds: steps stop when it would have to exceed the upper one
DAMP_MIN, DAMP_MAX = 1e-12, 1e12


@dataclass
class SpanResult:
    x: torch.Tensor  #: (B, *shape) the examples, in the order of ``labels``
    residual: float  #: ||r|| / ||G V|| at the end
    steps: int  #: Levenberg-Marquardt steps taken, over all starts
    starts: int  #: starts tried
    scale: float = 1.0  #: the block's size against the model's gradient for these examples (t; 1 where not fitted)


def row_space(block: torch.Tensor, B: int) -> torch.Tensor:
    """V ((m+1) x B): the top B right singular vectors of the block [dW | dc]."""
    return torch.linalg.svd(block, full_matrices=False)[2][:B].T.contiguous()


class _Batch:
    """r(A) and its Levenberg-Marquardt system for one victim, block and label assignment."""

    def __init__(self, victim, layer: nn.Linear, block: torch.Tensor, labels: torch.Tensor, shape: tuple):
        self.victim, self.layer, self.shape = victim, layer, shape
        self.B = labels.shape[0]
        self.V = row_space(block, self.B)
        self.P, self.v = self.V[:-1], self.V[-1]
        self.Y = block @ self.V
        self.target = victim.target(labels)
        self.params = {k: p.detach() for k, p in victim.model.named_parameters()}
        self.buffers = {k: b.detach() for k, b in victim.model.named_buffers()}
        self.zeros = self.Y.new_zeros(self.B, block.shape[0])
        #: the first layer on the span: its output for example i is (Q a_i) / s_i + c, Q = W P (H x B)
        self.Q = layer.weight.detach().to(self.P) @ self.P
        self.c = layer.bias.detach().to(self.P)
        self.blank = self.P.new_zeros(self.B, *shape)
        self.collapsed = True
        self.injected: torch.Tensor | None = None
        probe = torch.rand(self.B, self.P.shape[0], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        A = self.V.T @ torch.cat([probe.to(self.P), torch.ones_like(self.zeros[:, :1])], 1).T
        self.collapsed = _close(self.deltas(A), self._deltas_through_the_layer(A))

    def images(self, A: torch.Tensor) -> torch.Tensor:
        return ((self.P @ A) / (self.v @ A)).T.reshape(self.B, *self.shape)

    def _loss(self, eps: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        if self.collapsed:  # the layer's output from Q; its input (a constant) and its own product unused
            self.injected = ((self.Q @ A) / (self.v @ A)).T + self.c + eps
            x = self.blank
        else:
            self.injected, x = eps, self.images(A)
        with self.victim.running():
            out = functional_call(self.victim.model, {**self.params, **self.buffers}, (x,))
        return self.victim.loss(out, self.target)

    def _hook(self, module, inputs, out):
        assert self.injected is not None
        return out + self.injected

    def _output(self, x):
        assert self.injected is not None
        return self.injected

    def deltas(self, A: torch.Tensor) -> torch.Tensor:
        """D (B x H): the loss's derivative at the first layer's output, one row per example.  Collapsed, the layer's
        forward is replaced (for this call) by the output computed from Q, so its product with the input is skipped."""
        if self.collapsed:
            self.layer.forward = self._output  # type: ignore[method-assign]
        else:
            handle = self.layer.register_forward_hook(self._hook)
        try:
            return grad(self._loss)(self.zeros, A)
        finally:
            if self.collapsed:
                del self.layer.forward
            else:
                handle.remove()
            self.injected = None

    def _deltas_through_the_layer(self, A: torch.Tensor) -> torch.Tensor:
        """:meth:`deltas` with the images themselves put through the first layer: the check that nothing else of the
        model reads the input (then the collapsed form is used)."""
        collapsed, self.collapsed = self.collapsed, False
        try:
            return self.deltas(A)
        finally:
            self.collapsed = collapsed

    def predicted(self, A: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
        """D^T U (H x B): the block's G V as the model gives it for these examples, at the model's own scale."""
        return D.T @ (A / (self.v @ A)).T

    def residual(self, A: torch.Tensor, D: torch.Tensor, t: float = 1.0, P: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """r = t D^T U - G V, for a message that is the gradient times ``t`` (1: the gradient itself); ``P``: D^T U
        where the caller has it (:meth:`predicted`)."""
        return t * (self.predicted(A, D) if P is None else P) - self.Y

    def scale(self, P: torch.Tensor) -> float:
        """The t minimising ||t P - G V|| for the prediction P = D^T U: a 1-D least squares in closed form (the
        message's scale against the model's gradient: C / ||g|| under a clip of the whole update to C)."""
        return float((P * self.Y).sum()) / max(float(P.pow(2).sum()), 1e-300)

    def scaled_system(self, A: torch.Tensor, D: torch.Tensor, r: torch.Tensor, t: float,
                      P: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """J^T J and J^T r ((B^2 + 1) x (B^2 + 1), B^2 + 1) of r = t D^T U - G V for the unknowns A[k, i] and then t:
        J = [t J_A | vec(D^T U)], with J_A the Jacobian of D^T U (:meth:`system`); ``P``: D^T U where the caller has
        it."""
        P = self.predicted(A, D) if P is None else P
        JtJ, Jtr, JtP = self._system(A, D, (r, P))
        n = JtJ.shape[0]
        full = JtJ.new_empty(n + 1, n + 1)
        full[:n, :n] = t * t * JtJ
        full[:n, n] = full[n, :n] = t * JtP
        full[n, n] = P.pow(2).sum()
        return full, torch.cat([t * Jtr, (P * r).sum().reshape(1)])

    def system(self, A: torch.Tensor, D: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """J^T J and J^T r (B^2 x B^2, B^2) for the unknowns A[k, i], from the B forward-mode passes."""
        JtJ, Jtr = self._system(A, D, (r,))
        return JtJ, Jtr

    def _system(self, A: torch.Tensor, D: torch.Tensor, rs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """J^T J, then J^T r for each r of ``rs`` (H x B each), J the Jacobian of D^T U in the unknowns A[k, i]."""
        B = self.B
        s = self.v @ A
        U = (A / s).T  # row i: u_i = a_i / s_i
        eye = torch.eye(B, dtype=A.dtype, device=A.device)
        tangents = eye[:, :, None].expand(B, B, B)  # tangent k: row k of A all ones
        with quiet_jvp_setup():
            Pm = vmap(lambda t: jvp(self.deltas, (A,), (t,))[1])(tangents)  # (k, i, H)
        # w[k, i] = d u_i / d A[k, i] = e_k / s_i - a_i v_k / s_i^2
        W = eye[:, None, :] / s[None, :, None] - A.T[None, :, :] * self.v[:, None, None] / (s ** 2)[None, :, None]
        # column (k, i) of J is p_ki (x) u_i + delta_i (x) w_ki; inner products of outer products factor
        PD = torch.einsum("kih,jh->kij", Pm, D)  # p_ki . delta_j
        UW = torch.einsum("ib,ljb->ilj", U, W)  # u_i . w_lj
        cross = _cross(PD, UW)
        JtJ = (torch.einsum("kih,ljh->kilj", Pm, Pm) * (U @ U.T)[None, :, None, :] + cross + cross.permute(2, 3, 0, 1)
               + (D @ D.T)[None, :, None, :] * torch.einsum("kib,ljb->kilj", W, W))
        n = B * B
        Jtrs = [(torch.einsum("kih,hb,ib->ki", Pm, r, U) + torch.einsum("ih,hb,kib->ki", D, r, W)).reshape(n)
                for r in rs]
        return (JtJ.reshape(n, n), *Jtrs)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).norm() <= 1e3 * torch.finfo(a.dtype).eps * b.norm())


def _cross(PD: torch.Tensor, UW: torch.Tensor) -> torch.Tensor:
    """The cross term <p_ki (x) u_i, delta_j (x) w_lj> = (p_ki . delta_j)(u_i . w_lj), indexed [k, i, l, j]."""
    return PD[:, :, None, :] * UW[None, :, :, :]


def accepted(dtype: torch.dtype, fit: float = 0.0) -> float:
    """The relative residual below which the solve's examples count as the batch's, for a block whose fit to the
    message left the relative residual ``fit`` (0: the block read exactly)."""
    return min(max(torch.finfo(dtype).eps ** 0.5, FIT_MARGIN * fit), ACCEPT_CAP)


def solve_span(victim, layer: nn.Linear, block: torch.Tensor, labels: torch.Tensor, shape: tuple, *,
               fit: float = 0.0, seed: int = 0, steps: int = SPAN_STEPS, starts: int = SPAN_STARTS,
               tol: float = SPAN_TOL, deadline: float = math.inf, free_scale: bool = True) -> SpanResult:
    """The B examples whose first-layer block is ``block`` (H x (m+1)) with these ``labels`` (module docstring):
    the start whose solve ends lowest, trying further starts only while none ends below :func:`accepted` (for a block
    fitted to relative residual ``fit``); no step or start begins after ``deadline`` (``time.perf_counter()``
    seconds) or once Ctrl-C asked the attack to stop, and the first start always runs to its first step.

    ``free_scale``: the block may be the gradient's times an unknown t (a clip of the whole update rescales it by
    C / ||g||), and t is an unknown of the solve beside A: Levenberg-Marquardt on both, t set after every step to its
    least-squares value for the new A (:meth:`_Batch.scale`), so the cost compared is always the least over t.
    Without it the block is compared with the model's gradient at its absolute size (t = 1)."""
    batch = _Batch(victim, layer, block, labels, shape)
    B, m = batch.B, batch.P.shape[0]
    size = float(batch.Y.norm()) or 1.0
    gen = torch.Generator().manual_seed(seed)
    best: SpanResult | None = None
    taken = 0

    def evaluate(A):
        D = batch.deltas(A)
        P = batch.predicted(A, D)
        t = batch.scale(P) if free_scale else 1.0
        r = batch.residual(A, D, t, P)
        return D, P, t, r, float(r.pow(2).sum())

    for start in range(starts):
        x0 = torch.rand(B, m, generator=gen, dtype=torch.float64).to(block)
        A = batch.V.T @ torch.cat([x0, torch.ones_like(x0[:, :1])], 1).T
        A = A / (batch.v @ A)
        D, P, t, r, cost = evaluate(A)
        lam = 1e-3
        for step_no in range(steps):
            if cost ** 0.5 <= tol * size or (step_no and halt_reason(deadline)):
                break
            JtJ, Jtr = batch.scaled_system(A, D, r, t, P) if free_scale else batch.system(A, D, r)
            diag = JtJ.diagonal().clamp_min(1e-30 * float(JtJ.diagonal().max()))
            taken += 1
            while lam <= DAMP_MAX:
                step = torch.linalg.solve(JtJ + lam * torch.diag(diag), -Jtr)
                An = A + step[:B * B].view(B, B)
                An = An / (batch.v @ An)
                Dn, Pn, tn, rn, new = evaluate(An)
                if new < cost:
                    A, D, P, t, r, cost, lam = An, Dn, Pn, tn, rn, new, max(lam / 3, DAMP_MIN)
                    break
                lam *= 4
            if lam > DAMP_MAX:
                break
        result = SpanResult(batch.images(A).detach(), cost ** 0.5 / size, taken, start + 1, t)
        if best is None or result.residual < best.residual:
            best = result
        if best.residual <= accepted(block.dtype, fit) or halt_reason(deadline):
            break
    assert best is not None
    return SpanResult(best.x, best.residual, taken, start + 1, best.scale)


__all__ = ["solve_span", "accepted", "row_space", "SpanResult", "SPAN_TOL", "FIT_MARGIN", "ACCEPT_CAP"]
