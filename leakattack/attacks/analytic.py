"""Analytic inversion of a fully connected first layer, from the true or the sketched gradient.

Symbols.  The victim's first parametrised layer is z = W x + c (W of shape H x m,
x the flattened example).  For one example its gradient is the rank-1 block

    dF/dW = delta x^T,    dF/dc = delta,     i.e.  [dF/dW | dF/dc] = delta [x; 1]^T,

so every row of dF/dW divided by the matching entry of dF/dc is x (Phong et al.,
"Privacy-preserving deep learning via additively homomorphic encryption", 2017;
R-GAP, Zhu & Blaschko, ICLR 2021).  The attacker sees y = M g (M: the sketch R,
or a scaled map a R for a protocol update) and knows M.

* b >= d (no sketch, or a square R): g is solved from y (M^T y for the identity,
  a dense least-squares solve while R fits DENSE_LIMIT, else CGLS), and x = sum_k delta_k W'_k / sum_k delta_k^2, the
  least-squares fit of every row W'_k ~ delta_k x with delta = dF/dc: exact division.
* b < d: a low-rank recovery.  Every ``nn.Linear`` that sees one vector per
  example has a rank-1 block delta_l [a_l; 1]^T of its own (the head included);
  every other coordinate of g is an unknown of its own.  The unknowns are then
  sum_l (H_l + m_l) + the free coordinates, far fewer than d (mlp on digits:
  64 + 784 + 10 + 64 = 922 against d = 50,890).  They are fitted to y by
  alternating least squares (ALS): with every a_l fixed the message is
  linear in (delta_l, free), with every delta_l fixed it is linear in (a_l, free);
  each half-sweep is a CGLS solve with M and M^T alone (matrix-free, columns
  scaled to unit norm, warm-started).  After each ALS sweep one damped
  Gauss-Newton step on all factors at once (``solver="als+gn"``, the default):
  ALS alone crawls along a plateau near the threshold (mlp on digits, srht,
  b/m = 1.5: about 200 sweeps, 20 s), Gauss-Newton alone stops at a wrong
  stationary point there (5.6 dB), and the two together converge in 10-30
  sweeps.  The start is spectral: the top singular pair of the back-projection
  M^T y restricted to each layer's block (an SVD of an H x (m+1) matrix); at
  b << d it is mostly noise (5-12 dB), and the fit, not the start, recovers x.
  The first layer's x is its factor a divided by its bias entry.  Measured
  threshold (mlp on digits, srht and countsketch): noise up to b/m = 1.4, exact
  from 1.5 (b about 1.25x the unknowns); random restarts at 1.4 stopped at the
  same residual as the spectral start.  A fit to the tolerance with b above the
  unknowns is the unique one; below them the fit is exact and the x is another
  (the attack warns).

Weights.  The method never reads the weights' values: it needs the layer layout
(which coordinates of g belong to which ``nn.Linear``, found by one forward pass
of a zero input to see each layer's input shape; the weights' values do not
matter) and the sketch.  The labels it
returns come from iDLG's sign rule read through the sketch (no weights either),
or are the granted ones.

Limits.  One example (B = 1): a batch's block is sum_i delta_i [x_i; 1]^T, and
each row then gives a weighted mean of the batch, not one example.  The first
layer must be an ``nn.Linear`` with a bias that sees the flattened example; a
convolution's gradient sums over positions (a ViT's patch embedding is such a
convolution: its block is sum_p delta_p patch_p^T, rank up to the number of
patches, so the division gives a weighted mean of patches, not an image).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import torch
from torch import nn

import targets

from ..errors import SettingWarning
from ..observation import Observation
from ..sketch import DENSE_LIMIT
from .base import Attack, AttackResult, Monitor
from .labels import recover_labels

#: label sources: ``given`` (granted by the threat model) or ``recovered`` (iDLG's sign rule through the sketch)
ANALYTIC_LABELS = ("recovered", "given")
#: ALS stops when the relative residual ||M g - y|| / ||y|| falls below this ...
RESIDUAL_TOL = 1e-9
#: ... or improves by less than this factor over one sweep
STALL_GAIN = 1e-4
#: CGLS steps per half-step (warm-started, so later half-steps need few)
CGLS_STEPS = 60
#: ``als``: alternating least squares; ``gn``: Gauss-Newton; ``als+gn``: one of each per sweep (module docstring)
SOLVERS = ("als+gn", "als", "gn")


@dataclass
class _Block:
    """One ``nn.Linear`` seen with one vector per example: its gradient is delta [a; 1]^T (no 1 without a bias)."""

    weight: slice
    bias: slice | None
    out: int
    inp: int

    @property
    def cols(self) -> int:
        """Length of a: the layer's input, plus the bias column."""
        return self.inp + (self.bias is not None)


def first_layer(model: nn.Module) -> nn.Module | None:
    """The first registered submodule that owns a trainable parameter (the model itself only without submodules:
    parameters a model holds directly, such as a ViT's class token, act after its first layer)."""
    has_children = any(True for _ in model.children())
    for mod in model.modules():
        if mod is model and has_children:
            continue
        if any(p.requires_grad for p in mod.parameters(recurse=False)):
            return mod
    return None


def _input_ranks(victim) -> dict[int, int]:
    """id(layer) -> number of input rows per example of each ``nn.Linear`` (1: a vector; more: a sequence)."""
    seen, hooks = {}, []
    for mod in victim.model.modules():
        if isinstance(mod, nn.Linear):
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out: seen.__setitem__(id(m), math.prod(inp[0].shape[:-1]))))
    saved = [(b, b.detach().clone()) for b in victim.model.buffers()]
    try:
        with torch.no_grad():
            victim.model(torch.zeros((1, *victim.input_shape), dtype=victim.dtype, device=victim.device))
    finally:
        for h in hooks:
            h.remove()
        with torch.no_grad():
            for b, v in saved:
                b.copy_(v)
    return seen


def _layout(victim) -> tuple[list[_Block], torch.Tensor]:
    """The rank-1 blocks (the first layer first) and the indices of every other coordinate of g."""
    slices = targets.param_slices(victim)
    names = {id(p): n for n, p in victim.model.named_parameters()}
    ranks = _input_ranks(victim)
    first = first_layer(victim.model)
    blocks = []
    for mod in victim.model.modules():
        if not isinstance(mod, nn.Linear) or not mod.weight.requires_grad or ranks.get(id(mod)) != 1:
            continue
        bias = mod.bias if mod.bias is not None and mod.bias.requires_grad else None
        block = _Block(slices[names[id(mod.weight)]], None if bias is None else slices[names[id(bias)]],
                       mod.out_features, mod.in_features)
        blocks.insert(0, block) if mod is first else blocks.append(block)
    free = torch.ones(victim.d, dtype=torch.bool)
    for bl in blocks:
        free[bl.weight] = False
        if bl.bias is not None:
            free[bl.bias] = False
    return blocks, free.nonzero().squeeze(1)


def _assemble(blocks, free_idx, deltas, factors, free, d, like) -> torch.Tensor:
    """g = [delta_l a_l^T per block | free coordinates] as one flat vector."""
    g = torch.zeros(d, dtype=like.dtype, device=like.device)
    for bl, dl, a in zip(blocks, deltas, factors):
        g[bl.weight] = torch.outer(dl, a[:bl.inp]).reshape(-1)
        if bl.bias is not None:
            g[bl.bias] = dl * a[bl.inp]
    g[free_idx] = free
    return g


def _block_matrix(bl: _Block, v: torch.Tensor) -> torch.Tensor:
    """The block of a flat vector as the out x cols matrix [dW | dc]."""
    W = v[bl.weight].reshape(bl.out, bl.inp)
    return W if bl.bias is None else torch.cat([W, v[bl.bias].unsqueeze(1)], 1)


def cgls(A, At, y: torch.Tensor, z: torch.Tensor, steps: int, tol: float = 1e-12) -> torch.Tensor:
    """min_z ||A z - y|| from z by conjugate gradients on the normal equations (CGLS, Hestenes & Stiefel 1952)."""
    r = y - A(z)
    s = At(r)
    p, gamma = s.clone(), float(s @ s)
    stop = tol * tol * max(float(At(y).pow(2).sum()), 1e-300)
    for _ in range(steps):
        if gamma <= stop:
            break
        q = A(p)
        qq = float(q @ q)
        if qq == 0:
            break
        alpha = gamma / qq
        z = z + alpha * p
        r = r - alpha * q
        s = At(r)
        new = float(s @ s)
        p, gamma = s + (new / gamma) * p, new
    return z


class Analytic(Attack):
    """Closed-form inversion of a fully connected first layer; through a sketch, a rank-1 fit (module docstring)."""

    name = "analytic"

    def __init__(self, *, labels: str = "recovered", sweeps: int = 200, cgls_steps: int = CGLS_STEPS,
                 tol: float = RESIDUAL_TOL, solver: str = SOLVERS[0]):
        if labels not in ANALYTIC_LABELS:
            raise ValueError(f"labels must be one of {ANALYTIC_LABELS}, got {labels!r}")
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        self.label_mode, self.sweeps, self.cgls_steps, self.tol = labels, int(sweeps), int(cgls_steps), float(tol)
        self.solver = solver

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        layer = first_layer(victim.model)
        if not isinstance(layer, nn.Linear):
            kind = "no trainable layer" if layer is None else f"a {type(layer).__name__}"
            return (f"the analytic attack inverts a fully connected first layer, and {victim.name}'s first "
                    f"parametrised layer is {kind}; use gradient-matching")
        if layer.bias is None or not layer.bias.requires_grad:
            return (f"{victim.name}'s first layer has no trainable bias, so its gradient holds x only up to an "
                    "unknown scale; use gradient-matching")
        if layer.in_features != victim.unknowns_per_example or _input_ranks(victim).get(id(layer)) != 1:
            return f"{victim.name}'s first linear layer does not see the flattened example; use gradient-matching"
        if obs.batch_size != 1:
            return (f"the analytic attack recovers one example, and a batch of {obs.batch_size} mixes its inputs "
                    "in every row of the layer's gradient; use gradient-matching or a batch size of 1")
        if self.label_mode == "given" and obs.labels is None:
            return "labels were asked for as given but the threat model does not grant them"
        return None

    def labels_for(self, obs: Observation) -> torch.Tensor | None:
        if self.label_mode == "given":
            return obs.labels
        if obs.victim.head is None or obs.victim.task != "classification":
            return obs.labels
        return recover_labels(obs.victim, obs.linear_map, obs.y, obs.batch_size, rule="sign")

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        labels = self.labels_for(obs)
        blocks, free_idx = _layout(obs.victim)
        M, y = obs.linear_map, obs.y.detach().reshape(-1)
        shape = obs.input_shape

        if M.b >= M.d:  # g itself is determined: solve it, then divide
            g = self._solve_square(M, y)
            x = self._divide(blocks[0], g).reshape(shape)
            loss = float((M.apply(g) - y).pow(2).sum())
            extra = [{"step": 0, **monitor(0, x)}] if monitor is not None else []
            return AttackResult(x=x, labels=labels, x0=x.clone(), losses=[loss], extra=extra, iterations=0,
                                stop_reason="tolerance", message="solved g from the message, then divided",
                                wall_s=time.perf_counter() - t0)

        unknowns = sum(bl.out + bl.cols - (bl.bias is not None) for bl in blocks) + free_idx.numel()
        message = ""
        if M.b < unknowns:
            message = (f"the message has b = {M.b} numbers for {unknowns} unknowns of the low-rank model: "
                       "the fit is not unique")
            warnings.warn(message, SettingWarning, stacklevel=2)

        # spectral start: the top singular pair of each block of M^T y
        back = M.adjoint(y)
        gain = float(M.apply(back).pow(2).sum()) / max(float(back @ back), 1e-300)  # ~ ||M||^2 on g's span
        back = back / max(gain, 1e-300)
        deltas, factors = [], []
        for bl in blocks:
            U, S, Vh = torch.linalg.svd(_block_matrix(bl, back), full_matrices=False)
            a, dl = Vh[0], S[0] * U[:, 0]
            if bl.bias is not None and a[bl.inp].abs() > 1e-12 * a.abs().max():
                dl, a = dl * a[bl.inp], a / a[bl.inp]
            deltas.append(dl)
            factors.append(a)
        x0 = self._x_of(blocks[0], factors[0]).reshape(shape)
        run = self._fit(M, y, blocks, free_idx, deltas, factors, back[free_idx], shape, monitor, monitor_every)
        return AttackResult(x=run["x"].detach(), labels=labels, x0=x0.detach(), losses=run["losses"],
                            extra=run["extra"], iterations=len(run["losses"]) - 1, best_step=run["best"],
                            stop_reason=run["stop"], message=run["message"] or message,
                            wall_s=time.perf_counter() - t0)

    def _fit(self, M, y, blocks, free_idx, deltas, factors, free, shape, monitor, monitor_every) -> dict:
        """The sweeps from one start: losses, the best sweep and its x, why it stopped, monitor records."""
        ynorm2 = float(y @ y)

        def residual(dl, fa, fr):
            return float((M.apply(_assemble(blocks, free_idx, dl, fa, fr, M.d, y)) - y).pow(2).sum())

        losses = [residual(deltas, factors, free)]
        x = self._x_of(blocks[0], factors[0]).reshape(shape)
        extra = [{"step": 0, **monitor(0, x)}] if monitor is not None else []
        best, best_x, stop, message = 0, x, "iterations", ""
        for sweep in range(1, self.sweeps + 1):
            if self.solver in ("als", "als+gn"):
                deltas, free = self._fit_deltas(M, y, blocks, free_idx, deltas, factors, free)
                factors, free = self._fit_factors(M, y, blocks, free_idx, deltas, factors, free)
                self._rescale(blocks, deltas, factors)
                loss = residual(deltas, factors, free)
            if self.solver in ("gn", "als+gn"):
                deltas, factors, free, loss = self._gauss_newton(M, y, blocks, free_idx, deltas, factors, free,
                                                                 loss if self.solver == "als+gn" else losses[-1])
            if not math.isfinite(loss):
                stop, message = "diverged", f"the residual became non-finite at sweep {sweep}"
                break
            losses.append(loss)
            x = self._x_of(blocks[0], factors[0]).reshape(shape)
            if loss <= losses[best]:
                best, best_x = sweep, x
            if monitor is not None and sweep % max(1, monitor_every) == 0:
                extra.append({"step": sweep, **monitor(sweep, x)})
            if loss <= self.tol ** 2 * ynorm2:
                stop = "tolerance"
                break
            if loss > (1 - STALL_GAIN) * losses[-2]:
                stop = "stalled"
                break
        return {"losses": losses, "best": best, "x": best_x, "stop": stop, "message": message, "extra": extra}

    # -- the pieces -------------------------------------------------------------
    @staticmethod
    def _divide(bl: _Block, g: torch.Tensor) -> torch.Tensor:
        """x = sum_k delta_k W'_k / sum_k delta_k^2 with delta = dF/dc: every row's quotient, least-squares pooled."""
        W = g[bl.weight].reshape(bl.out, bl.inp)
        delta = g[bl.bias]
        return (delta @ W) / (delta @ delta).clamp_min(1e-300)

    def _solve_square(self, M, y: torch.Tensor) -> torch.Tensor:
        """g from y = M g when b >= d: M^T y for the identity, a dense least-squares solve while M fits
        ``DENSE_LIMIT`` (a square Gaussian R is too ill-conditioned for CGLS), else CGLS."""
        if getattr(M, "identity", False):
            return M.adjoint(y)
        if M.b * M.d <= DENSE_LIMIT:
            R = M.apply(torch.eye(M.d, dtype=y.dtype, device=y.device)).T  # b x d
            return torch.linalg.lstsq(R, y.unsqueeze(1), driver="gelsd" if R.device.type == "cpu" else None
                                      ).solution.squeeze(1)
        return cgls(M.apply, M.adjoint, y, M.adjoint(y), max(self.cgls_steps, 10 * self.sweeps), tol=1e-14)

    @staticmethod
    def _x_of(bl: _Block, a: torch.Tensor) -> torch.Tensor:
        return a[:bl.inp] / a[bl.inp]

    def _fit_deltas(self, M, y, blocks, free_idx, deltas, factors, free):
        """With every a_l fixed, (delta_l, free) by least squares on y (columns scaled by ||a_l||)."""
        return self._fit_half(M, y, blocks, free_idx, factors, deltas, free, deltas_vary=True)

    def _fit_factors(self, M, y, blocks, free_idx, deltas, factors, free):
        """With every delta_l fixed, (a_l, free) by least squares on y (columns scaled by ||delta_l||)."""
        return self._fit_half(M, y, blocks, free_idx, deltas, factors, free, deltas_vary=False)

    def _fit_half(self, M, y, blocks, free_idx, fixed, start, free, *, deltas_vary: bool):
        """One half of an alternating sweep: one factor of every block ``fixed``, the other (from ``start``)
        and the free coordinates by CGLS on y; each block's columns are scaled by its fixed factor's norm."""
        scales = [float(f.norm()) or 1.0 for f in fixed]
        sizes = [bl.out if deltas_vary else bl.cols for bl in blocks] + [free_idx.numel()]

        def split(z):
            parts = list(torch.split(z, sizes))
            return [p / s for p, s in zip(parts[:-1], scales)], parts[-1]

        def A(z):
            varying, fr = split(z)
            deltas, factors = (varying, fixed) if deltas_vary else (fixed, varying)
            return M.apply(_assemble(blocks, free_idx, deltas, factors, fr, M.d, y))

        def At(u):
            v = M.adjoint(u)
            mats = [_block_matrix(bl, v) if deltas_vary else _block_matrix(bl, v).T for bl in blocks]
            return torch.cat([m @ f / s for m, f, s in zip(mats, fixed, scales)] + [v[free_idx]])

        z0 = torch.cat([a * s for a, s in zip(start, scales)] + [free])
        return split(cgls(A, At, y, z0, self.cgls_steps))

    @staticmethod
    def _rescale(blocks, deltas, factors):
        """Move each block's scale into delta: a biased block's bias entry of a becomes 1, another's a unit norm."""
        for i, bl in enumerate(blocks):
            c = factors[i][bl.inp] if bl.bias is not None else factors[i].norm()
            if float(c.abs()) > 0:
                deltas[i], factors[i] = deltas[i] * c, factors[i] / c

    def _gauss_newton(self, M, y, blocks, free_idx, deltas, factors, free, loss):
        """One damped Gauss-Newton step on all factors at once: the linearised least squares by CGLS.

        The step (d delta_l, d a_l, d free) solves min ||M(sum_l d delta_l a_l^T + delta_l d a_l^T + d free) - r||
        for the residual r = y - M g; a biased block's bias entry of a stays 1, which fixes the scale.
        Columns are scaled to unit norm (delta's by ||a||, a's by ||delta||).
        """
        fixed = [bl.bias is not None for bl in blocks]
        sd = [float(a.norm()) or 1.0 for a in factors]
        sa = [float(dl.norm()) or 1.0 for dl in deltas]
        sizes = [n for bl, f in zip(blocks, fixed) for n in (bl.out, bl.cols - f)] + [free_idx.numel()]

        def split(z):
            parts = list(torch.split(z, sizes))
            dd = [parts[2 * i] / sd[i] for i in range(len(blocks))]
            da = [torch.cat([parts[2 * i + 1] / sa[i], parts[2 * i + 1].new_zeros(1)]) if f
                  else parts[2 * i + 1] / sa[i] for i, f in enumerate(fixed)]
            return dd, da, parts[-1]

        def tangent(z):
            dd, da, fr = split(z)
            g = torch.zeros(M.d, dtype=y.dtype, device=y.device)
            for bl, dl, a, ddl, dal in zip(blocks, deltas, factors, dd, da):
                blk = torch.outer(ddl, a) + torch.outer(dl, dal)
                g[bl.weight] = blk[:, :bl.inp].reshape(-1)
                if bl.bias is not None:
                    g[bl.bias] = blk[:, bl.inp]
            g[free_idx] = fr
            return M.apply(g)

        def tangent_t(u):
            v = M.adjoint(u)
            out = []
            for i, (bl, dl, a, f) in enumerate(zip(blocks, deltas, factors, fixed)):
                B = _block_matrix(bl, v)
                ga = B.T @ dl / sa[i]
                out += [B @ a / sd[i], ga[:-1] if f else ga]
            return torch.cat(out + [v[free_idx]])

        r = y - M.apply(_assemble(blocks, free_idx, deltas, factors, free, M.d, y))
        z = cgls(tangent, tangent_t, r, r.new_zeros(sum(sizes)), self.cgls_steps)
        dd, da, dfr = split(z)
        step = 1.0
        for _ in range(8):  # backtrack until the residual falls
            nd = [dl + step * x for dl, x in zip(deltas, dd)]
            na = [a + step * x for a, x in zip(factors, da)]
            nf = free + step * dfr
            new = float((M.apply(_assemble(blocks, free_idx, nd, na, nf, M.d, y)) - y).pow(2).sum())
            if new < loss:
                return nd, na, nf, new
            step /= 2
        return deltas, factors, free, loss

__all__ = ["Analytic", "ANALYTIC_LABELS", "SOLVERS", "first_layer", "cgls"]
