"""Analytic inversion of a fully connected first layer, from the true or the sketched gradient.

One example's gradient of a linear layer z = W x + c is the rank-1 block
delta [x; 1]^T, so x is a row of dF/dW divided by the matching entry of dF/dc
(Phong et al. 2017).  With b >= d, g is solved from y first; with b < d every
``nn.Linear`` block is fitted as rank B from y with M and M^T alone (alternating
least squares by CGLS, then damped Gauss-Newton steps, from a spectral start),
every other coordinate of g an unknown of its own.  Batches behind a ReLU are
separated by rows with one active unit; labels follow through the head's block.
Batches behind a smooth activation are solved with the model in the row space of
the first block (:mod:`leakattack.attacks.span`).  The method reads the layer layout,
and the weights' values only for that solve.  The derivation, the measured threshold
(exact from b/m = 1.5 on mlp/digits), the batches and the limits:
docs/attacks/analytic.md.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import targets

from ..constraints import Number, Param
from ..errors import SettingWarning, a_type
from ..observation import Observation
from ..sketch import DENSE_LIMIT
from .base import NO_CAUSE, Attack, AttackError, AttackResult, Monitor, halt_reason, inexact_causes, stop_requested
from .labels import readings_to_compare, recover_labels, scale_unknown
from .span import SPAN_STARTS, accepted, solve_span

#: label sources: ``given`` (granted by the threat model) or ``recovered`` (iDLG's sign rule through the sketch; for one
#: example, the fitted head block's bias column where the block was read to the tolerance)
ANALYTIC_LABELS = ("recovered", "given")
#: ALS stops when the relative residual ||M g - y|| / ||y|| falls below this ...
RESIDUAL_TOL = 1e-9
#: ... or, for a message of lower precision, its dtype's machine epsilon (float32: 1.2e-7), where the sweeps also
#: stopped gaining ...
#: ... or improves by less than this factor over one sweep
STALL_GAIN = 1e-4
#: CGLS steps per half-step (warm-started, so later half-steps need few)
CGLS_STEPS = 60
#: the low-rank fit's sweeps at most (``--sweeps``)
SWEEPS = 200
#: when the row-space solve fails with the labels read from the message, other label multisets are tried (the other
#: rules' readings, then every change of one label), one start each, until one solves or this many seconds have gone:
#: one wrong label leaves the solve at a relative residual of 0.14-0.67, the right ones at round-off or near the fit's
#: (``python scripts/analytic_batches.py --act sigmoid``; :data:`.span.FIT_MARGIN`), so the solve tells them apart
LABEL_SEARCH_S = 120.0
#: a batch's row-space solve names the scale it fitted to the message (a clip's C / ||g||) where it is not 1 to this
SCALE_RTOL = 1e-6
#: rows of a batch's first-layer block are the same example when their quotients agree to this (relative)
GROUP_TOL = 1e-4
#: how a note says that some of a batch's examples were guessed, not separated (:meth:`Analytic._examples`)
GUESSES = "the others are guesses"
#: activations with exact zeros (inactive units), which separate a batch's examples
PIECEWISE_LINEAR = (nn.ReLU,)
#: activations with kinks but no zeros: neither separable by inactive units nor solvable in the row space
KINKED = (nn.LeakyReLU,)
#: modules read as activations when looking for the one after the first layer
ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.ELU, nn.SiLU, nn.Softplus)
#: ``als``: alternating least squares; ``gn``: Gauss-Newton; ``als+gn``: one of each per sweep (module docstring)
SOLVERS = ("als+gn", "als", "gn")
#: the relative residual of the normal equations, ||M^T (M g - y)|| / ||M^T y||, above which g read by CGLS from a
#: message of b >= d numbers is said not to be the least-squares solution (a converged solve meets them to round-off;
#: float32's: 100 of its eps)
SOLVE_RESIDUAL = 1e-8


@dataclass
class _Block:
    """One ``nn.Linear`` seen with one vector per example: its gradient is delta [a; 1]^T (no 1 without a bias)."""

    weight: slice
    bias: slice | None
    out: int
    inp: int
    module: nn.Linear

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


#: modules that pass their input on unchanged, up to a reshape (dropout: the victim runs in eval mode)
PASS_THROUGH = (nn.Identity, nn.Flatten, nn.Unflatten, nn.Dropout)

Call = tuple[nn.Module, tuple, torch.Tensor]


def leaf_calls(victim, batch: int = 1) -> tuple[torch.Tensor, list[Call], torch.Tensor]:
    """One forward pass of ``batch`` random examples: those examples, every call of a leaf module in call order
    (module, inputs, output; a module called twice appears twice) and the model's output."""
    leaves = [m for m in victim.model.modules() if not any(True for _ in m.children())]
    calls: list[Call] = []
    gen = torch.Generator().manual_seed(0)  # drawn on the CPU and moved: the same probe on every device
    x = torch.rand((batch, *victim.input_shape), generator=gen, dtype=victim.dtype).to(victim.device)
    out = targets.probe(victim, x, leaves, lambda m, inp, res: calls.append((m, inp, res)))
    return x, calls, out


def same_values(a, b) -> bool:
    """Whether ``a`` and ``b`` are tensors of the same values, up to a reshape."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel() == b.numel() \
        and torch.equal(a.reshape(-1), b.reshape(-1))


def first_outside(x: torch.Tensor, calls: list[Call]) -> int | None:
    """The index of the first call whose input is not the previous call's output (the first call's: the example
    ``x``), up to a reshape: an operation of the model's forward outside its modules came between; None if none."""
    prev = x
    for i, (_, inp, res) in enumerate(calls):
        if len(inp) != 1 or not same_values(inp[0], prev):
            return i
        prev = res
    return None


def outside_before(name: str) -> str:
    """The words for an operation outside the modules before the module ``name`` (:func:`first_outside`)."""
    return (f"an operation outside its modules before {name} (a residual connection, pooling, a functional "
            "activation, or arithmetic such as a normalisation)")


def computed_weight(module: nn.Module) -> bool:
    """Whether ``module``'s weight is a tensor computed from parameters of its own, not a parameter: a
    parametrization (``torch.nn.utils.parametrizations``) or the older ``torch.nn.utils.weight_norm``."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and not isinstance(weight, nn.Parameter)


def input_problem(victim) -> str | None:
    """What stands between the example and the first layer's input, as the end of a sentence ("... has ..."), or None
    where the first layer sees the example itself, up to a reshape: only :data:`PASS_THROUGH` modules come before it,
    and no operation outside the modules (a normalisation, x ** 2) does (:func:`first_outside`, R-GAP's check)."""
    layer = first_layer(victim.model)
    names = {id(m): n or type(m).__name__ for n, m in victim.model.named_modules()}
    x, calls, _ = leaf_calls(victim, batch=2)  # two examples: a BatchNorm1d on batch statistics refuses one
    upto = next((i for i, (mod, _, _) in enumerate(calls) if mod is layer), None)
    if upto is None:
        return f"a first layer ({names.get(id(layer), '?')}) that its forward pass does not call as a module"
    broken = first_outside(x, calls[:upto + 1])
    if broken is not None:
        return outside_before(names[id(calls[broken][0])])
    before = next((mod for mod, _, _ in calls[:upto] if not isinstance(mod, PASS_THROUGH)), None)
    if before is not None:
        return f"{a_type(before)} ({names[id(before)]}) before its first layer {names[id(layer)]}"
    return None


def _input_ranks(victim) -> dict[int, int]:
    """id(layer) -> number of input rows per example of each ``nn.Linear`` (1: a vector; more: a sequence), from a
    probe with two examples (a BatchNorm1d on batch statistics refuses one)."""
    seen: dict[int, int] = {}
    linears = [m for m in victim.model.modules() if isinstance(m, nn.Linear)]
    targets.probe(victim, torch.zeros((2, *victim.input_shape), dtype=victim.dtype, device=victim.device), linears,
                  lambda m, inp, out: seen.__setitem__(id(m), math.prod(inp[0].shape[:-1]) // 2))
    return seen


def _layout(victim) -> tuple[list[_Block], torch.Tensor]:
    """The rank-1 blocks (the first layer first) and the indices of every other coordinate of g."""
    slices = targets.param_slices(victim)
    names = {id(p): n for n, p in victim.model.named_parameters()}
    ranks = _input_ranks(victim)
    first = first_layer(victim.model)
    blocks: list[_Block] = []
    for mod in victim.model.modules():
        if not isinstance(mod, nn.Linear) or not mod.weight.requires_grad or ranks.get(id(mod)) != 1:
            continue
        bias = mod.bias if mod.bias is not None and mod.bias.requires_grad else None
        block = _Block(slices[names[id(mod.weight)]], None if bias is None else slices[names[id(bias)]],
                       mod.out_features, mod.in_features, mod)
        blocks.insert(0, block) if mod is first else blocks.append(block)
    free = torch.ones(victim.d, dtype=torch.bool)
    for bl in blocks:
        free[bl.weight] = False
        if bl.bias is not None:
            free[bl.bias] = False
    return blocks, free.nonzero().squeeze(1)


def _assemble(blocks, free_idx, deltas, factors, free, d, like) -> torch.Tensor:
    """g = [Delta_l A_l^T per block | free coordinates] as one flat vector (Delta_l: out x B, A_l: cols x B)."""
    g = torch.zeros(d, dtype=like.dtype, device=like.device)
    for bl, dl, a in zip(blocks, deltas, factors):
        _put_block(g, bl, dl @ a.T)
    g[free_idx] = free
    return g


def _put_block(g: torch.Tensor, bl: _Block, blk: torch.Tensor) -> None:
    """Write the out x cols matrix [dW | dc] into its coordinates of the flat vector g."""
    g[bl.weight] = blk[:, :bl.inp].reshape(-1)
    if bl.bias is not None:
        g[bl.bias] = blk[:, bl.inp]


def _block_matrix(bl: _Block, v: torch.Tensor) -> torch.Tensor:
    """The block of a flat vector as the out x cols matrix [dW | dc]."""
    W = v[bl.weight].reshape(bl.out, bl.inp)
    return W if bl.bias is None else torch.cat([W, v[bl.bias].unsqueeze(1)], 1)


def _unseen_inputs(M, bl: _Block, y: torch.Tensor) -> int:
    """How many of block ``bl``'s inputs have no entry of their weight column in the message y = M g: M^T u of a
    Gaussian u is 0 exactly on a coordinate that no row of M reads (a coordinate-sampling sketch that drew none of the
    column's entries) and almost surely nonzero on every other."""
    u = torch.randn(M.b, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(y.device, y.dtype)
    seen = M.adjoint(u).reshape(-1) != 0
    return int((~seen[bl.weight].reshape(bl.out, bl.inp)).all(0).sum())


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
    closed_form = True
    refuses_nonfinite = True  # its SVD fails on them
    reads_labels = True
    #: ``--time-limit``: the low-rank fit, the batch's solve and its label search stop at the deadline
    settings = ("time_limit",)
    options = (Param("sweeps", SWEEPS, Number(1, integer=True), "analytic sweeps",
                     "analytic: most sweeps of the low-rank fit through a sketch (b < d); a batch may need more "
                     "(mlp, 16 digits, srht: 356)"),)

    def __init__(self, *, labels: str = "recovered", sweeps: int = SWEEPS, cgls_steps: int = CGLS_STEPS,
                 tol: float = RESIDUAL_TOL, solver: str = SOLVERS[0], time_limit: float | None = None):
        if labels not in ANALYTIC_LABELS:
            raise AttackError(f"analytic's labels must be one of {', '.join(ANALYTIC_LABELS)}, got {labels!r}")
        if solver not in SOLVERS:
            raise AttackError(f"analytic's solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
        self.label_mode, self.sweeps, self.cgls_steps, self.tol = labels, int(sweeps), int(cgls_steps), float(tol)
        self.solver = solver
        #: seconds of attack after which no sweep, solve step or label set begins (None: no limit)
        self.time_limit, self._deadline = time_limit, math.inf

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        layer = first_layer(victim.model)
        owner = next((n or type(m).__name__ for n, m in victim.model.named_modules()
                      if layer is not None and any(sub is layer for sub in m.modules()) and computed_weight(m)), None)
        if owner is not None:
            return (f"{victim.name}'s first layer ({owner}) is parametrized (weight_norm, spectral_norm or the like): "
                    "its weight is computed from parameters of its own, so the message holds no gradient of the "
                    "weight to read the example from; use gradient-matching")
        if not isinstance(layer, nn.Linear):
            kind = "no trainable layer" if layer is None else a_type(layer)
            return (f"the analytic attack inverts a fully connected first layer, and {victim.name}'s first "
                    f"parametrised layer is {kind}; use gradient-matching")
        if not layer.weight.requires_grad:
            return (f"{victim.name}'s first layer has a frozen weight, so the message holds no gradient of it to read "
                    "the example from; use gradient-matching")
        if layer.bias is None or not layer.bias.requires_grad:
            return (f"{victim.name}'s first layer has no trainable bias, so its gradient holds x only up to an "
                    "unknown scale; use gradient-matching")
        if layer.in_features != victim.unknowns_per_example or _input_ranks(victim).get(id(layer)) != 1:
            return f"{victim.name}'s first linear layer does not see the flattened example; use gradient-matching"
        _, calls, _ = leaf_calls(victim, batch=2)  # two examples: a BatchNorm1d on batch statistics refuses one
        if (times := sum(mod is layer for mod, _, _ in calls)) > 1:
            return (f"{victim.name}'s forward pass calls its first layer {times} times (shared weights), so that "
                    "layer's gradient sums a block for each call and no row of it is one example's; use "
                    "gradient-matching")
        if problem := input_problem(victim):
            return (f"the analytic attack reads the example from its first layer's input, and {victim.name} has "
                    f"{problem}, so that input is not the example; use gradient-matching")
        if obs.batch_size > 1 and not self._separates(victim):
            why = self._unsolvable(victim, obs.batch_size)
            if why:
                return (f"the analytic attack separates a batch of {obs.batch_size} by the first layer's inactive "
                        f"ReLU units or solves it with the model in the block's row space, and {victim.name} "
                        f"{why}; use gradient-matching or a batch size of 1")
        if self.label_mode == "given" and obs.labels is None:
            return "labels were asked for as given but the threat model does not grant them"
        return None

    @staticmethod
    def _separates(victim) -> bool:
        """Whether a batch is read by the one-active-unit separation (a ReLU after the first layer); otherwise by the
        model's solve in the block's row space (:mod:`leakattack.attacks.span`)."""
        layer = first_layer(victim.model)
        return layer is not None and isinstance(_activation_after(victim.model, layer), PIECEWISE_LINEAR)

    @staticmethod
    def _unsolvable(victim, B: int) -> str | None:
        """Why the model's solve in the row space cannot read a batch of B examples of this victim (a sentence's end),
        or None."""
        layer = first_layer(victim.model)
        if isinstance(layer, nn.Linear) and (rank := min(layer.out_features, layer.in_features + 1)) < B:
            return (f"has a first-layer block of {layer.out_features} x {layer.in_features + 1} numbers, whose rank "
                    f"(at most {rank}) cannot hold {B} examples")
        act = None if layer is None else _activation_after(victim.model, layer)
        if isinstance(act, KINKED):
            return (f"has {a_type(act)} after its first layer (no inactive units to separate by, and kinks "
                    "the solve's derivatives do not see)")
        if victim.batch_statistics:
            return "normalises by batch statistics, which couples every example's derivative to the others"
        if victim.task != "classification":
            return "is not a classifier, and the solve needs each example's label"
        if victim.head is None:
            return ("has no head whose gradient the solve reads each example's label from (a frozen last layer, or "
                    "none found)")
        return None

    def labels_for(self, obs: Observation) -> torch.Tensor | None:
        if self.label_mode == "given":
            return obs.labels
        if obs.victim.head is None or obs.victim.task != "classification":
            return obs.labels
        if obs.batch_size == 1:
            return recover_labels(obs.victim, obs.linear_map, obs.y, 1, rule="sign")
        return recover_labels(obs.victim, obs.linear_map, obs.y, obs.batch_size, scale_unknown=scale_unknown(obs))

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        self._deadline = math.inf if self.time_limit is None else t0 + self.time_limit
        labels = self.labels_for(obs)
        blocks, free_idx = _layout(obs.victim)
        # the message is read in float64 whatever the client's dtype: the attacker's arithmetic is its own, and the
        # low-rank fit's sweeps need more digits than float32 holds (docs/attacks/analytic.md)
        M, y = obs.linear_map, obs.y.detach().reshape(-1).to(torch.float64)
        shape, B = obs.input_shape, obs.batch_size

        if M.b >= M.d:  # g itself is determined: solve it, then divide
            g, short = self._solve_square_checked(M, y)
            loss = float((M.apply(g) - y).pow(2).sum())
            stop, record = "tolerance", None
            if B > 1 and not self._separates(obs.victim):
                x, labels, stop, note, record = self._solve_batch(obs, blocks[0], _block_matrix(blocks[0], g), labels,
                                                                  loss)
            else:
                first = _block_matrix(blocks[0], g)
                x, note = self._examples(blocks[0], first, B)
                x = x.reshape(shape)
                labels = self._assign_labels(obs, labels, blocks, x, lambda bl: _block_matrix(bl, g))
                beyond = _off_reading(first, x.reshape(1, -1)) if B == 1 else _beyond_rank(first, B)
                if beyond > torch.finfo(obs.victim.dtype).eps ** 0.5:  # as APRIL and R-GAP hold their systems
                    stop = "stalled"
                    note = "; ".join(filter(None, [note, _not_exact(beyond, B, short, inexact_causes(obs))]))
            extra = [{"step": 0, **monitor(0, x)}] if monitor is not None else []
            losses = _with_failed_solve(_relative([loss], y), record)
            if stop == "stalled" and record is None:  # the final loss is the block's distance from rank B, not 0
                losses = [*losses, beyond]
            if record is None:  # a separated batch: its guessed examples are no batch that sends the message
                stop, losses, note = self._guessed(obs, x, labels, note, stop, losses)
            # iterations: the row-space solve's Levenberg-Marquardt steps where a batch took them (g itself is one
            # linear solve)
            x = x.to(obs.victim.dtype)
            return AttackResult(x=x, labels=labels, x0=x.clone(), losses=losses, extra=extra,
                                iterations=int(record["steps"]) if record else 0, best_step=len(losses) - 1,
                                stop_reason=stop, message=note or "solved g from the message, then divided",
                                wall_s=time.perf_counter() - t0, row_space_solve=record)

        unknowns = B * sum(bl.out + bl.cols - (bl.bias is not None) for bl in blocks) + free_idx.numel()
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
        for bl in blocks:  # the top B singular pairs; a biased block's columns of A scaled to a bias entry of 1
            U, S, Vh = torch.linalg.svd(_block_matrix(bl, back), full_matrices=False)
            a, dl = Vh[:B].T, U[:, :B] * S[:B]
            if a.shape[1] < B:  # a block narrower than the batch (a head of C < B classes): zero columns to B
                a, dl = F.pad(a, (0, B - a.shape[1])), F.pad(dl, (0, B - dl.shape[1]))
            if bl.bias is not None:
                c = a[bl.inp]
                ok = c.abs() > 1e-12 * a.abs().amax(0)
                c = torch.where(ok, c, torch.ones_like(c))
                dl, a = dl * c, a / c
            deltas.append(dl)
            factors.append(a)
        x0 = self._examples(blocks[0], deltas[0] @ factors[0].T, B)[0].reshape(shape)
        # a message of float32 numbers holds a rank-B gradient only to its own round-off (relative 5.6e-8 on the
        # digits MLP), short of RESIDUAL_TOL: the fit counts as read to the tolerance at the message's epsilon
        tol = max(self.tol, torch.finfo(obs.y.dtype).eps)
        run = self._fit(M, y, blocks, free_idx, deltas, factors, back[free_idx], shape, monitor, monitor_every, tol)
        fitted = {id(bl): dl @ a.T for bl, dl, a in zip(blocks, run["deltas"], run["factors"])}
        x, stop, note, record = run["x"], run["stop"], run["note"], None
        if B > 1 and not self._separates(obs.victim):
            x, labels, solved, note, record = self._solve_batch(obs, blocks[0], fitted[id(blocks[0])].detach(),
                                                                labels, run["losses"][-1])
            stop = solved if stop == "tolerance" else stop
        else:
            labels = self._assign_labels(obs, labels, blocks, x, lambda bl: fitted[id(bl)],
                                         exact=run["stop"] == "tolerance")
        guessed: list[float] = []
        if record is None and note:  # a separated batch: its guessed examples are no batch that sends the message
            stop, guessed, note = self._guessed(obs, x, labels, note, stop, guessed)
        said = run["message"] or message or note
        sweeps, rel = len(run["losses"]) - 1, (run["losses"][run["best"]] / max(float(y @ y), 1e-300)) ** 0.5
        if not said and stop == "tolerance":
            said = (f"the low-rank fit read the message in {sweeps} sweeps (relative residual {rel:.1e}), then its "
                    "first block was divided")
        # what in the channel keeps the message from a rank-B gradient (the fit models the sketch's null space)
        causes = inexact_causes(obs, sketch=False)
        because = f" (the message is not the batch's gradient up to one scale: {causes})" if causes else ""
        if run["stop"] == "stalled":  # why the run stopped short, beside what the examples' note says
            said += ("; " if said else "") + (f"the low-rank fit stopped gaining after {sweeps} sweeps at a relative "
                                              f"residual of {rel:.1e}, above its tolerance {tol:.0e}{because}")
        if run["stop"] == "iterations":
            said += ("; " if said else "") + (f"the low-rank fit ran all its {self.sweeps} sweeps short of its "
                                              f"tolerance (--sweeps gives it more){because}")
        unseen = _unseen_inputs(M, blocks[0], y)
        if unseen:  # a pixel whose first-layer column the sketch never samples: no fit can read it
            stop = "stalled" if stop == "tolerance" else stop
            said = (f"{unseen} of the first layer's {blocks[0].inp} inputs have no entry of their weights' gradient "
                    "in the message (the sketch samples none): they cannot be read and come back as 0"
                    + ("; " + said if said else ""))
        fit_losses = _relative(run["losses"], y)
        losses = [*_with_failed_solve(fit_losses, record), *guessed]
        return AttackResult(x=x.detach().to(obs.victim.dtype), labels=labels, x0=x0.detach().to(obs.victim.dtype),
                            losses=losses,
                            extra=run["extra"], iterations=len(run["losses"]) - 1,
                            best_step=run["best"] if len(losses) == len(fit_losses) else len(losses) - 1,
                            stop_reason=stop, message=said, wall_s=time.perf_counter() - t0,
                            row_space_solve=record)

    def _solve_batch(self, obs: Observation, first: _Block, block: torch.Tensor, labels: torch.Tensor | None,
                     loss: float) -> tuple[torch.Tensor, torch.Tensor, str, str, dict]:
        """(x, labels, stop reason, note, record): a batch behind a smooth activation solved with the model in the row
        space of its first-layer block (:func:`leakattack.attacks.span.solve_span`; ``loss``: the squared residual the
        block's own reading left on the message), the examples in the order of the labels returned.  When the solve
        fails with labels read from the message, other multisets are tried (:data:`LABEL_SEARCH_S`)."""
        assert labels is not None  # supports() refuses a victim without labels to solve with
        victim, B = obs.victim, obs.batch_size
        fit = (loss / max(float(obs.y.detach().pow(2).sum()), 1e-300)) ** 0.5
        bar = accepted(victim.dtype, fit)
        shape, block = tuple(obs.input_shape[1:]), block.to(victim.dtype)

        def solve(lab: torch.Tensor, starts: int = SPAN_STARTS):
            return solve_span(victim, first.module, block, lab.to(victim.device), shape, fit=fit, starts=starts,
                              deadline=self._deadline)

        solved, tried, read, out_of_time = solve(labels), 1, labels, False
        if solved.residual > bar and self.label_mode == "recovered":
            deadline = min(time.perf_counter() + LABEL_SEARCH_S, self._deadline)
            for other in self._other_labels(obs, labels):
                if stop_requested():
                    break
                if time.perf_counter() >= deadline:
                    out_of_time = True
                    break
                attempt = solve(other, starts=1)
                tried += 1
                if attempt.residual <= bar:
                    solved, labels = attempt, other
                    break
        x = solved.x.reshape(obs.input_shape)
        met = solved.residual <= bar
        record = {"residual": solved.residual, "accepted": bar, "fit": fit, "steps": solved.steps,
                  "starts": solved.starts, "solved": met, "label_sets": tried,
                  # the scale of a fit that did not solve it is no clip's (it came out negative under a per-example
                  # clip, which no one scale models)
                  "scale": solved.scale if met else None}
        if labels is not read:  # the labels kept came from the search: the ones the count rule read, beside them
            record["labels_read"] = read.tolist()
        changed = "" if labels is read else (f"; with labels {labels.tolist()} after the ones read from the message, "
                                             f"{read.tolist()}, left it short ({tried} label sets tried)")
        if met:
            scaled = "" if abs(solved.scale - 1) <= SCALE_RTOL else (
                f"; the message is the model's gradient times {solved.scale:.3g}, a rescaled update (a clip), "
                "which the solve fits")
            return x, labels, "tolerance", (f"the batch's {B} examples solved with the model in the first layer's row "
                                            f"space ({solved.steps} Levenberg-Marquardt steps; relative residual "
                                            f"{solved.residual:.1e}{changed}){scaled}"), record
        halted = halt_reason(self._deadline)
        why = f" ({self._halt_note(halted)})" if halted else \
            f" (the label search stopped at its {LABEL_SEARCH_S:g} s)" if out_of_time else ""
        searched = (f", and {tried - 1} other label sets did not solve it either" if tried > 1 else "") + why
        causes = inexact_causes(obs)
        because = ["the labels read from the message may be wrong"] if self.label_mode == "recovered" else []
        if causes:
            because.append(f"the message is not the batch's gradient up to one scale: {causes}")
        return x, labels, halted or "stalled", (
            f"the model's solve in the first layer's row space stopped at relative residual {solved.residual:.1e} "
            f"after {solved.steps} steps from {solved.starts} starts{searched}: the examples returned do not send "
            f"the message to the solve's threshold of {bar:.1e} ({', or '.join(because) or NO_CAUSE})"), record

    def _halt_note(self, halted: str) -> str:
        return f"the time limit of {self.time_limit:g} s was reached" if halted == "time-limit" else \
            "Ctrl-C stopped the attack"

    @staticmethod
    def _other_labels(obs: Observation, labels: torch.Tensor):
        """Sorted label multisets other than ``labels``, most plausible first: the other rules' readings of the
        message, then ``labels`` with one label changed to each other class."""
        seen = {tuple(labels.tolist())}
        readings = [r.tolist() for r in readings_to_compare(obs.victim, obs.linear_map, obs.y, obs.batch_size,
                                                            scale_unknown=scale_unknown(obs)).values()]
        read = labels.tolist()
        changed = [sorted(read[:i] + [c] + read[i + 1:]) for i in range(len(read)) if i == read.index(read[i])
                   for c in range(obs.victim.num_classes) if c != read[i]]
        for other in readings + changed:
            if tuple(other) not in seen:
                seen.add(tuple(other))
                yield torch.tensor(other, dtype=labels.dtype, device=labels.device)

    def _fit(self, M, y, blocks, free_idx, deltas, factors, free, shape, monitor, monitor_every, tol: float) -> dict:
        """The sweeps from one start, until the relative residual is at most ``tol``: losses, the best sweep and its
        x, why it stopped, monitor records."""
        ynorm2 = float(y @ y)

        def residual(dl, fa, fr):
            return float((M.apply(_assemble(blocks, free_idx, dl, fa, fr, M.d, y)) - y).pow(2).sum())

        B = deltas[0].shape[1]

        def examples():
            x, note = self._examples(blocks[0], deltas[0] @ factors[0].T, B)
            return x.reshape(shape), note

        losses = [residual(deltas, factors, free)]
        x, note = examples()
        extra = [{"step": 0, **monitor(0, x)}] if monitor is not None else []
        best, best_x, best_note, stop, message = 0, x, note, "iterations", ""
        for sweep in range(1, self.sweeps + 1):
            halted = halt_reason(self._deadline)
            if halted:
                done = f"{sweep - 1} sweep" + ("" if sweep == 2 else "s")
                kept = "the best sweep's examples are returned" if sweep > 1 else \
                    "the examples its initial factors give are returned"
                stop, message = halted, f"{self._halt_note(halted)} after {done} of the low-rank fit; {kept}"
                break
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
            x, note = examples()
            if loss <= losses[best]:
                best, best_x, best_note = sweep, x, note
            if monitor is not None and sweep % max(1, monitor_every) == 0:
                extra.append({"step": sweep, **monitor(sweep, x)})
            gaining = loss <= (1 - STALL_GAIN) * losses[-2]
            # a message of lower precision than RESIDUAL_TOL's is fitted on while the sweeps gain: a batch's row-space
            # solve starts from the fitted block
            if losses[best] <= tol ** 2 * ynorm2 and (tol <= self.tol or not gaining):
                stop = "tolerance"
                break
            if not gaining:
                stop = "stalled"
                break
        return {"losses": losses, "best": best, "x": best_x, "stop": stop, "message": message, "extra": extra,
                "note": best_note, "deltas": deltas, "factors": factors}

    def _assign_labels(self, obs, labels, blocks, x, block_of, exact: bool = True):
        """Recovered labels put in the order of the recovered examples (a batch, a classifier head among the blocks).

        The head's block is sum_i delta_i [h_i; 1]^T with h_i the head's input for example i, which the
        attacker computes from its recovered x_i with the model's weights; delta = G A (A^T A)^-1 for
        A = [h_i; 1] is then each example's output error softmax - onehot, whose one negative entry
        is the label.  Kept only when it gives the multiset the count rule read from the message; otherwise,
        and without a head block, the count rule's labels are returned as they are.

        One example (``exact``: its block was read to the tolerance): the head's block is delta [h; 1]^T, and its
        bias column delta = softmax - onehot has one negative entry, the label (R-GAP's reading of the head).  The
        sign rule read the label from the message's head alone, whose row sums drown in the sketch's noise where the
        head's inputs nearly cancel (tanh), so the block's reading replaces it.
        """
        head = obs.victim.head
        block = next((bl for bl in blocks if bl.module is head), None)
        if self.label_mode != "recovered" or block is None or block.bias is None or labels is None:
            return labels
        if obs.batch_size == 1:
            return block_of(block)[:, -1].argmin().reshape(1).to(labels) if exact else labels
        with torch.no_grad():
            _, feats = obs.victim.head_inputs(x.to(obs.victim.dtype))
        A = torch.cat([feats, torch.ones_like(feats[:, :1])], 1).T
        delta = block_of(block).to(A.dtype) @ torch.linalg.pinv(A.T)
        per_example = delta.argmin(0).to(labels.device)
        return per_example if sorted(per_example.tolist()) == sorted(labels.tolist()) else labels

    # -- the pieces -------------------------------------------------------------
    @staticmethod
    def _divide(blk: torch.Tensor) -> torch.Tensor:
        """x = sum_k delta_k W'_k / sum_k delta_k^2 over the rows of [W' | delta]: every row's quotient, pooled."""
        W, delta = blk[:, :-1], blk[:, -1]
        return (delta @ W) / (delta @ delta).clamp_min(1e-300)

    def _examples(self, bl: _Block, blk: torch.Tensor, B: int) -> tuple[torch.Tensor, str]:
        """The B examples (B, m) read from the first layer's block [dW | dc]; a note when fewer were separated.

        One example: every row is delta_k [x; 1], pooled by :meth:`_divide`.  A batch: row k is
        sum_i delta_ik [x_i; 1], and after a ReLU delta_ik = 0 wherever unit k is inactive for example i,
        so the rows with one active example are exact copies of one [x_i; 1] (up to scale): the rows'
        quotients W'_k / c_k are grouped (equal to GROUP_TOL relative), and each group of two or more rows
        is one example, unless it is an affine combination of the other groups' examples (two examples
        whose output errors are alike, e.g. same label on an untrained model, share rows in a fixed
        ratio, and their mixture repeats).  With fewer than B such groups, the remaining examples are guessed
        from the single rows: those outside the span of the examples found (a row of known examples only is
        no news), the
        ones closest to the pixel box [0, 1] first (a mixture with weights of both signs leaves it); the
        note says how many were separated.
        """
        if B == 1:
            return self._divide(blk).unsqueeze(0), ""
        c = blk[:, -1]
        keep = (c.abs() > 1e-9 * c.abs().max()).nonzero().squeeze(1)
        keep = keep[c[keep].abs().argsort(descending=True)]
        quotients = blk[keep, :-1] / c[keep, None]
        groups = _group_rows(quotients, GROUP_TOL)
        xs = _independent([self._divide(blk[keep[torch.tensor(g)]]) for g in groups if len(g) >= 2])[:B]
        found = len(xs)
        singles = [g[0] for g in groups if len(g) == 1]
        if singles and len(xs) < B:
            cand = quotients[singles]
            if xs:  # drop rows inside the span of [x_i; 1] of the examples found
                basis = torch.cat([torch.stack(xs), torch.ones_like(cand[:len(xs), :1])], 1)
                rows = torch.cat([cand, torch.ones_like(cand[:, :1])], 1)
                coef = rank_safe_lstsq(basis.T, rows.T)
                off = (rows.T - basis.T @ coef).norm(dim=0) > GROUP_TOL * rows.norm(dim=1)
                cand = cand[off]
            outside = (cand - cand.clamp(0, 1)).norm(dim=1)
            xs += list(cand[outside.argsort(stable=True)][:B - len(xs)])
        while len(xs) < B:  # fewer active rows than examples: nothing left to read
            xs.append(torch.full_like(blk[0, :-1], 0.5))
        note = "" if found == B else (
            f"{found} of the batch's {B} examples were separated by rows with one active unit "
            f"(a wider first layer or a smaller batch gives more such rows); {GUESSES}")
        return torch.stack(xs), note

    @staticmethod
    def _guessed(obs: Observation, x: torch.Tensor, labels, note: str, stop: str,
                 losses: list[float]) -> tuple[str, list[float], str]:
        """Where some of a batch's examples are guesses (``note``, :meth:`_examples`), the batch returned was not read
        from the message, however exactly its block was: the run stops ``stalled`` and its final loss is the
        message's relative residual at that batch, ||model(x) - y|| / ||y|| (the attacker's model of the client)."""
        if GUESSES not in note:
            return stop, losses, note
        y = obs.y.detach().reshape(-1)
        with torch.enable_grad():
            sent = obs.forward(x.detach(), labels).detach().reshape(-1)
        residual = float((sent - y).norm()) / max(float(y.norm()), 1e-300)
        note += (f": the message's relative residual at the batch returned is {residual:.3g}, so it is not a batch "
                 "that sends the message")
        return ("stalled" if stop == "tolerance" else stop), [*losses, residual], note

    def _solve_square(self, M, y: torch.Tensor) -> torch.Tensor:
        """g from y = M g when b >= d (:meth:`_solve_square_checked`)."""
        return self._solve_square_checked(M, y)[0]

    def _solve_square_checked(self, M, y: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        """(g from y = M g when b >= d, the relative residual of the normal equations where CGLS stopped short of
        :data:`SOLVE_RESIDUAL`, else None): M^T y for the identity, a dense least-squares solve while M fits
        ``DENSE_LIMIT`` (a square Gaussian R is too ill-conditioned for CGLS), else CGLS."""
        if getattr(M, "identity", False):
            return M.adjoint(y), None
        if M.b * M.d <= DENSE_LIMIT:
            R = M.apply(torch.eye(M.d, dtype=y.dtype, device=y.device)).T  # b x d
            return torch.linalg.lstsq(R, y.unsqueeze(1), driver="gelsd" if R.device.type == "cpu" else None
                                      ).solution.squeeze(1), None
        steps = max(self.cgls_steps, 10 * self.sweeps)
        g = cgls(M.apply, M.adjoint, y, M.adjoint(y), steps, tol=1e-14)
        # least squares' optimality, M^T (M g - y) = 0, which a noisy message of b > d numbers meets too
        start = M.adjoint(y).norm().clamp_min(torch.finfo(y.dtype).tiny)
        residual = float(M.adjoint(M.apply(g) - y).norm() / start)
        short = residual if residual > max(SOLVE_RESIDUAL, 100 * torch.finfo(y.dtype).eps) else None
        if short is not None:  # an ill-conditioned R: g is not y's
            warnings.warn(f"reading g from the message stopped at a relative residual of {residual:.2g} (of the "
                          f"normal equations) after "
                          f"{steps} CGLS steps (an ill-conditioned sketch, such as a square gaussian one, of "
                          f"{M.b} x {M.d}, beyond the {DENSE_LIMIT} entries solved densely): the g read is not the "
                          "message's gradient, and what the attack rebuilds from it reflects this solve, not noise or "
                          "a null space of the sketch", SettingWarning, stacklevel=2)
        return g, short

    def _fit_deltas(self, M, y, blocks, free_idx, deltas, factors, free):
        """With every a_l fixed, (delta_l, free) by least squares on y (columns scaled by ||a_l||)."""
        return self._fit_half(M, y, blocks, free_idx, factors, deltas, free, deltas_vary=True)

    def _fit_factors(self, M, y, blocks, free_idx, deltas, factors, free):
        """With every delta_l fixed, (a_l, free) by least squares on y (columns scaled by ||delta_l||)."""
        return self._fit_half(M, y, blocks, free_idx, deltas, factors, free, deltas_vary=False)

    def _fit_half(self, M, y, blocks, free_idx, fixed, start, free, *, deltas_vary: bool):
        """One half of an alternating sweep: one factor of every block ``fixed``, the other (from ``start``)
        and the free coordinates by CGLS on y; each block's columns are scaled by its fixed factor's norm."""
        scales = [_column_norms(f) for f in fixed]
        rows = [bl.out if deltas_vary else bl.cols for bl in blocks]
        sizes = [r * f.shape[1] for r, f in zip(rows, fixed)] + [free_idx.numel()]

        def split(z):
            parts = list(torch.split(z, sizes))
            return [p.view(r, -1) / s for p, r, s in zip(parts[:-1], rows, scales)], parts[-1]

        def A(z):
            varying, fr = split(z)
            deltas, factors = (varying, fixed) if deltas_vary else (fixed, varying)
            return M.apply(_assemble(blocks, free_idx, deltas, factors, fr, M.d, y))

        def At(u):
            v = M.adjoint(u)
            mats = [_block_matrix(bl, v) if deltas_vary else _block_matrix(bl, v).T for bl in blocks]
            return torch.cat([(m @ f / s).reshape(-1) for m, f, s in zip(mats, fixed, scales)] + [v[free_idx]])

        z0 = torch.cat([(a * s).reshape(-1) for a, s in zip(start, scales)] + [free])
        return split(cgls(A, At, y, z0, self.cgls_steps))

    @staticmethod
    def _rescale(blocks, deltas, factors):
        """Move each block's scale into delta: a biased block's bias entry of a becomes 1, another's a unit norm."""
        for i, bl in enumerate(blocks):
            c = factors[i][bl.inp] if bl.bias is not None else factors[i].norm(dim=0)
            c = torch.where(c.abs() > 0, c, torch.ones_like(c))
            deltas[i], factors[i] = deltas[i] * c, factors[i] / c

    def _gauss_newton(self, M, y, blocks, free_idx, deltas, factors, free, loss):
        """One damped Gauss-Newton step on all factors at once: the linearised least squares by CGLS.

        The step (d delta_l, d a_l, d free) solves min ||M(sum_l d delta_l a_l^T + delta_l d a_l^T + d free) - r||
        for the residual r = y - M g; a biased block's bias entry of a stays 1, which fixes the scale.
        Columns are scaled to unit norm (delta's by ||a||, a's by ||delta||).
        """
        fixed = [bl.bias is not None for bl in blocks]
        sd = [_column_norms(a) for a in factors]
        sa = [_column_norms(dl) for dl in deltas]
        k = deltas[0].shape[1]
        shapes = [s for bl, f in zip(blocks, fixed) for s in ((bl.out, k), (bl.cols - f, k))]
        sizes = [r * c for r, c in shapes] + [free_idx.numel()]

        def split(z):
            parts = [p.view(s) for p, s in zip(torch.split(z, sizes), shapes)] + [z[sum(sizes[:-1]):]]
            dd = [parts[2 * i] / sd[i] for i in range(len(blocks))]
            da = [torch.cat([parts[2 * i + 1] / sa[i], parts[2 * i + 1].new_zeros(1, k)]) if f
                  else parts[2 * i + 1] / sa[i] for i, f in enumerate(fixed)]
            return dd, da, parts[-1]

        def tangent(z):
            dd, da, fr = split(z)
            g = torch.zeros(M.d, dtype=y.dtype, device=y.device)
            for bl, dl, a, ddl, dal in zip(blocks, deltas, factors, dd, da):
                _put_block(g, bl, ddl @ a.T + dl @ dal.T)
            g[free_idx] = fr
            return M.apply(g)

        def tangent_t(u):
            v = M.adjoint(u)
            out = []
            for i, (bl, dl, a, f) in enumerate(zip(blocks, deltas, factors, fixed)):
                V = _block_matrix(bl, v)
                ga = V.T @ dl / sa[i]
                out += [(V @ a / sd[i]).reshape(-1), (ga[:-1] if f else ga).reshape(-1)]
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


def _relative(squared: list[float], y: torch.Tensor) -> list[float]:
    """The relative residuals ||M g - y|| / ||y|| of the squared residuals ||M g - y||^2 the fit minimises: the
    closed-form attacks' losses (R-GAP's and the row-space solve's are relative residuals too)."""
    ynorm2 = max(float(y @ y), 1e-300)
    return [(max(v, 0.0) / ynorm2) ** 0.5 if math.isfinite(v) else v for v in squared]


def _beyond_rank(blk: torch.Tensor, B: int) -> float:
    """How far the block [dW | dc] is from rank B, relative to it: ||sigma_{B+1..}|| / ||sigma|| over its singular
    values (0 for the exact gradient of B examples, whose block is sum_i delta_i [x_i; 1]^T)."""
    sv = torch.linalg.svdvals(blk.to(torch.float64))
    total = float(sv.norm())
    return float(sv[B:].norm()) / total if total > 0 else 0.0


def _off_reading(blk: torch.Tensor, x: torch.Tensor) -> float:
    """How far the block [dW | dc] is from delta [x; 1]^T for the example x (1, m) read from it, relative to it, at
    the least-squares delta (0 for one example's exact gradient; 1 where the block's bias column is 0, or the whole
    block, which then holds no example)."""
    blk = blk.to(torch.float64)
    a = torch.cat([x.to(blk), torch.ones_like(x[:, :1], dtype=blk.dtype)], 1)  # 1 x (m + 1)
    total = float(blk.norm())
    if total == 0:
        return 1.0
    delta = blk @ a.T / float(a @ a.T)
    return float((blk - delta @ a).norm()) / total


def _short_first(short_solve: float | None, causes: str) -> str:
    """``causes`` of a g read that is not the exact gradient, with a solve that stopped short of reading g from the
    message (its relative residual ``short_solve``; None: it did not) first among them."""
    if short_solve is None:
        return causes
    return (f"first, reading g from the message stopped short, at a relative residual of {short_solve:.2g}; "
            f"else {causes}")


def _not_exact(beyond: float, B: int, short_solve: float | None = None, causes: str | None = None) -> str:
    """The note for a first-layer block that is not one example's delta [x; 1]^T (:func:`_off_reading`) or not of
    rank B (:func:`_beyond_rank`); ``short_solve``: the relative residual at which reading g from the message stopped
    short (:meth:`Analytic._solve_square`), which then comes first among the causes; ``causes``: what in the channel
    changes the gradient (:func:`inexact_causes`; None: nothing does)."""
    what = ("is not delta [x; 1]^T for any x (relative residual " if B == 1 else
            f"is not of rank {B} (relative residual beyond its top {B} singular values ")
    whose = "one example" if B == 1 else f"a batch of {B}"
    causes = _short_first(short_solve, causes or NO_CAUSE)
    return (f"the first layer's block {what}{beyond:.2g}): the g read from the message is not the exact gradient of "
            f"{whose} at these weights ({causes}), so the division gives an approximation")


def _with_failed_solve(losses: list[float], record: dict | None) -> list[float]:
    """``losses`` (the block's fit to the message), with the row-space solve's relative residual appended where a
    batch took that solve: the run's final loss is then the solve's, not the fit's (a block read exactly fits at 0,
    while the examples returned solve it to their own residual, 3e-14 for a sigmoid batch of 4 solved, far more
    for one whose solve failed)."""
    if record is None:
        return losses
    return [*losses, float(record["residual"])]


def rank_safe_lstsq(A: torch.Tensor, B: torch.Tensor, cpu: bool | None = None) -> torch.Tensor:
    """A least-squares solution X of A X = B that holds where A lacks full rank (near-identical examples): torch's
    CPU default (gelsy) handles that, its CUDA one (gels) assumes full rank, so elsewhere the pseudo-inverse.
    ``cpu``: which way, where not the tensor's own device (for tests)."""
    on_cpu = A.device.type == "cpu" if cpu is None else cpu
    if on_cpu:
        return torch.linalg.lstsq(A, B).solution
    return torch.linalg.pinv(A) @ B


def _independent(xs: list[torch.Tensor], tol: float = 1e-3) -> list[torch.Tensor]:
    """``xs`` (most trusted first) without affine combinations of the others: while some [x; 1] lies in the
    span of the others', the least trusted such vector is dropped."""
    xs = list(xs)
    while len(xs) >= 3:
        V = torch.cat([torch.stack(xs), torch.ones_like(xs[0][:1]).expand(len(xs), 1)], 1)
        dependent = []
        for i in range(len(xs)):
            others = torch.cat([V[:i], V[i + 1:]]).T
            coef = rank_safe_lstsq(others, V[i].unsqueeze(1))
            if float((others @ coef).squeeze(1).sub(V[i]).norm()) <= tol * float(V[i].norm()):
                dependent.append(i)
        if not dependent:
            break
        del xs[dependent[-1]]
    return xs


def _column_norms(a: torch.Tensor) -> torch.Tensor:
    """Each column's norm, with 1 for a zero column (a column scaling that never divides by zero)."""
    n = a.norm(dim=0)
    return torch.where(n > 0, n, torch.ones_like(n))


def _group_rows(q: torch.Tensor, tol: float) -> list[list[int]]:
    """Rows of q grouped by equality to ``tol`` relative to their norms (connected components), largest first."""
    norms = q.norm(dim=1).clamp_min(1e-300)
    close = torch.cdist(q, q) <= tol * torch.maximum(norms[:, None], norms[None, :])
    seen, groups = set(), []
    for i in range(q.shape[0]):
        if i in seen:
            continue
        group, todo = [], [i]
        seen.add(i)
        while todo:
            j = todo.pop()
            group.append(j)
            for k in close[j].nonzero().squeeze(1).tolist():
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        groups.append(sorted(group))
    groups.sort(key=lambda g: (-len(g), g[0]))
    return groups


def _activation_after(model: nn.Module, layer: nn.Module) -> nn.Module | None:
    """The activation module applied to ``layer``'s output, found by the registration order (None if unknown)."""
    mods = list(model.modules())
    after = mods[mods.index(layer) + 1:] if layer in mods else []
    for mod in after:
        if any(True for _ in mod.parameters(recurse=False)):
            return None
        if isinstance(mod, ACTIVATIONS):
            return mod
    return None


class OneExampleAttack(Attack):
    """The common start of the closed-form attacks on one example's whole gradient (R-GAP, APRIL): the refusal of
    a batch, and g solved from a message of b >= d numbers as :class:`Analytic` solves it."""

    closed_form = True
    #: the attack's name in its sentences
    title = ""

    def __init__(self):
        self._square = Analytic()
        self.short_solve: float | None = None

    def one_example(self, obs: Observation) -> str | None:
        """The sentence refusing a message of a batch, or None."""
        if obs.batch_size > 1:
            if (obs.extra.get("protocol_spec") or {}).get("local_epochs"):  # the client's whole shard, not one batch
                return (f"{self.title} inverts the gradient of one example and the message holds the client's whole "
                        f"shard of {obs.batch_size}, over which --local-epochs trains; use gradient-matching, or "
                        "--local-epochs 0 with a batch size of 1")
            return (f"{self.title} inverts the gradient of one example and the message holds a batch of "
                    f"{obs.batch_size}; use gradient-matching or a batch size of 1")
        return None

    def gradient(self, obs: Observation) -> torch.Tensor:
        """g from the message y = M g, b >= d, both in float64; :attr:`short_solve` keeps the relative residual where
        the iterative solve stopped short of reading it (an ill-conditioned sketch), else None."""
        # in float64 whatever the client's dtype, as the analytic attack reads it
        y = obs.y.detach().reshape(-1).to(torch.float64)
        g, self.short_solve = self._square._solve_square_checked(obs.linear_map, y)
        return g.to(torch.float64)

    def inexact_words(self, obs: Observation) -> str:
        """What keeps the g read from being one example's exact gradient, for a note: a solve that stopped short
        (:meth:`gradient`) first, then what in the channel changes the message (:func:`inexact_causes`)."""
        return _short_first(self.short_solve, inexact_causes(obs) or NO_CAUSE)


__all__ = ["Analytic", "ANALYTIC_LABELS", "SOLVERS", "first_layer", "cgls", "OneExampleAttack", "PASS_THROUGH",
           "leaf_calls", "same_values", "first_outside", "outside_before", "input_problem"]
