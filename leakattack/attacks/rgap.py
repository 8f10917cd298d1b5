"""R-GAP, the recursive gradient attack (Zhu & Blaschko, "R-GAP: Recursive Gradient Attack on Privacy", ICLR 2021).

From the whole gradient of one example (through a sketch only when b >= d: g is
solved from y first), the input of a chain of convolutions and linear layers with
invertible activations or ReLUs is rebuilt from the head down: each layer's input
solves one least-squares system of its forward equations and its weight-gradient
equations (rows normalised; forward rows weighted by the activation's slope, so an
inactive ReLU unit contributes none), through an SVD with rank threshold
``RANK_RTOL``.  A ReLU unit is active where the output the layer above solved for it
exceeds ``SE_MARGIN`` of its own standard errors (the message's round-off carried
through that layer's system).  A rank-deficient or inconsistent hidden layer is named in the
result's message (stop reason ``stalled``).  Where the input layer's system is
rank-deficient (a first layer of ReLUs, about half of them inactive, leaves LeNet's
3x32x32 photos 0-4 families of 256-600 dimensions), every input of that affine family
gives the message's gradient, and the image is chosen among them: the least total
variation inside the pixel box [0, 1], below which every inactive first-layer unit's
input must stay (:func:`_least_tv`).  Pooling, normalisation, residuals,
attention, batches and b < d are refused by :meth:`Rgap.supports`.  The
recursion, the weighting, the family and its measurements: docs/attacks/rgap.md.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, vjp, vmap

import targets

from ..errors import a_type
from ..observation import Observation
from ..progress import progress_bar
from .analytic import PASS_THROUGH, Analytic, OneExampleAttack, first_outside, leaf_calls, outside_before, same_values
from .base import AttackResult, Monitor, closed_form_result, stop_requested

#: the activations R-GAP inverts (leaky ReLU only with a positive slope)
INVERTIBLE = (nn.Sigmoid, nn.Tanh, nn.LeakyReLU, nn.Softplus)
#: a softplus is inverted from this ``threshold`` up (torch's softplus is linear above it): there its jump,
#: log(1 + exp(-threshold)) / beta (:func:`softplus_jump`), is below a float32 message's round-off of its output
#: there, threshold / beta (equal at 13.35); torch's default threshold 20 jumps by 2e-9/beta
SOFTPLUS_MIN_THRESHOLD = 13.4


def softplus_jump(act: nn.Softplus) -> float:
    """How far torch's softplus jumps where it turns linear: log(1 + exp(-threshold)) / beta (computed without
    overflow for any threshold)."""
    t = float(act.threshold)
    return (max(0.0, -t) + math.log1p(math.exp(-abs(t)))) / abs(act.beta)


#: activations inverted where their unit is active (output > 0); an inactive unit says only that its input was at
#: most 0, an inequality the input layer's family keeps
RECTIFIERS = (nn.ReLU,)
#: a rectifier's output counts as 0 (the unit inactive) below this many times the largest negative value the layer
#: above solved for it (an inactive unit's 0 comes back as round-off of either sign, an active one as a positive
#: value), and below the message's machine epsilon times the largest output; the rule where the layer above gives
#: no standard errors (the head's input, a rank-deficient system, too few rows beyond its unknowns)
NOISE_MARGIN = 100.0
#: where the layer above solved a full-rank system with at least :data:`SURPLUS_ROWS` rows beyond its unknowns, a
#: unit is active where its solved output exceeds this many of its own standard errors instead (LeNet with ReLUs,
#: float32 message, photos 0-2: conv1's inactive units within 3.8 of theirs, its active ones from 7.5 up;
#: ``python scripts/rgap_margins.py``)
SE_MARGIN = 5.0
#: rows beyond the unknowns a system needs before its residual estimates the noise of its solution
SURPLUS_ROWS = 32
#: the quadratic penalties' weights on the box and the inactive units' inequalities, one L-BFGS run each, warm-started
PENALTIES = (1e1, 1e3, 1e5)
#: the smoothing of total variation's absolute values, sqrt(t^2 + TV_SMOOTHING) (differences of about 0.01 and up,
#: 2.5 grey levels, count as |t|)
TV_SMOOTHING = 1e-4
#: layers whose input R-GAP solves for
LAYERS = (nn.Conv2d, nn.Linear)
#: an activation's value is clamped this far inside its open range before it is inverted
MARGIN = 1e-12
#: singular values below this fraction of the largest count as zero
RANK_RTOL = 1e-10
#: a layer's system (its output's and its weight gradient's rows times its input's unknowns) holds at most this many
#: numbers: R-GAP forms it densely in float64, with an identity of its unknowns squared beside it, and its solve costs
#: rows x unknowns^2
MAX_SYSTEM = 10**8


@dataclass
class _Step:
    """One affine layer of the chain and the activation applied to its output (None: the identity)."""

    name: str
    module: nn.Module
    act: nn.Module | None
    in_shape: tuple  #: the layer's input for one example, as the layer sees it
    out_shape: tuple  #: its output for one example


def _problem_with_chain(victim) -> tuple[list[_Step] | None, str | None]:
    """The chain of layers found by tracing one forward pass, or None and what in the model breaks it.

    Every leaf module's call is recorded in call order (a module called twice appears twice: lenet's
    one activation module serves three layers); each call's input must be the previous call's output up
    to a reshape, the first call's input the example and the model's output the last call's output.
    """
    names = {id(m): n or type(m).__name__ for n, m in victim.model.named_modules()}
    x, calls, out = leaf_calls(victim)
    for mod, _, _ in calls:  # the kind of module first: that names the problem best
        if isinstance(mod, nn.LeakyReLU) and mod.negative_slope <= 0:
            return None, f"a leaky ReLU of slope {mod.negative_slope} ({names[id(mod)]}), which is not invertible"
        if isinstance(mod, nn.Softplus) and mod.threshold < SOFTPLUS_MIN_THRESHOLD:
            return None, (f"a softplus of threshold {mod.threshold:g} ({names[id(mod)]}), which jumps by "
                          f"{softplus_jump(mod):.2g} where it turns linear, so that one output comes from two inputs "
                          f"(R-GAP inverts softplus from threshold {SOFTPLUS_MIN_THRESHOLD:g} up)")
        if not isinstance(mod, LAYERS + INVERTIBLE + RECTIFIERS + PASS_THROUGH):
            return None, f"{a_type(mod)} ({names[id(mod)]}), which is not an nn.Conv2d, nn.Linear, " \
                         "invertible activation or ReLU"
    if not calls:
        return None, "no modules to trace"
    steps: list[_Step] = []
    broken = first_outside(x, calls)
    for i, (mod, inp, res) in enumerate(calls):
        if i == broken:
            return None, outside_before(names[id(mod)])
        if isinstance(mod, LAYERS):
            if any(s.module is mod for s in steps):
                return None, f"a layer called twice ({names[id(mod)]}: shared weights)"
            if not mod.weight.requires_grad:
                return None, f"a frozen layer ({names[id(mod)]}), whose gradient is not sent"
            steps.append(_Step(names[id(mod)], mod, None, tuple(inp[0].shape[1:]), tuple(res.shape[1:])))
        elif isinstance(mod, INVERTIBLE + RECTIFIERS):
            if not steps or steps[-1].act is not None:
                return None, f"an activation ({names[id(mod)]}) that does not follow a layer"
            steps[-1].act = mod
    if not same_values(out, calls[-1][2]):
        return None, "an operation outside its modules after the last one"
    head = steps[-1] if steps else None
    if head is None or not isinstance(head.module, nn.Linear) or head.act is not None or len(head.in_shape) != 1:
        return None, "no linear head at the end of the chain"
    if head.module is not victim.head:
        return None, "a last layer that is not its classifier head"
    if head.module.bias is None or not head.module.bias.requires_grad:
        return None, "a head without a trainable bias (its gradient then holds its input only up to scale)"
    return steps, None


def _inverse(act: nn.Module | None, a: torch.Tensor, eps: float,
             se: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """z = act^{-1}(a) and act'(z), with a clamped into the activation's open range by ``MARGIN``; for a rectifier,
    z = a and slope 1 where the unit is active, z = 0 and slope 0 (its forward row dropped) where it is not: below
    ``eps`` times the largest |a| (``eps`` the machine epsilon of the gradient read from the message) and below
    :data:`SE_MARGIN` times the unit's standard error ``se`` (:func:`_standard_errors`), or where that is None,
    :data:`NOISE_MARGIN` times the largest negative a."""
    if act is None:
        return a, torch.ones_like(a)
    if isinstance(act, RECTIFIERS):  # z = a where the unit is active; elsewhere z <= 0 is all that is known
        floor = eps * float(a.abs().max())
        noise = NOISE_MARGIN * float(-a.min()) if se is None else SE_MARGIN * se.reshape(a.shape)
        active = (a > floor) & (a > noise)
        return torch.where(active, a, torch.zeros_like(a)), active.to(a.dtype)
    if isinstance(act, nn.Sigmoid):  # s' = s (1 - s)
        a = a.clamp(MARGIN, 1 - MARGIN)
        return torch.log(a) - torch.log1p(-a), a * (1 - a)
    if isinstance(act, nn.Tanh):  # s' = 1 - s^2
        a = a.clamp(-1 + MARGIN, 1 - MARGIN)
        return torch.atanh(a), 1 - a * a
    if isinstance(act, nn.LeakyReLU):
        slope = act.negative_slope
        return torch.where(a >= 0, a, a / slope), torch.where(a >= 0, torch.ones_like(a), torch.full_like(a, slope))
    # softplus: a = log(1 + exp(beta z)) / beta, linear above its threshold; s' = 1 - exp(-beta a)
    assert isinstance(act, nn.Softplus), f"{type(act).__name__} is not one of INVERTIBLE"
    beta, threshold = act.beta, act.threshold
    a = a.clamp_min(MARGIN)
    linear = a * beta > threshold
    z = torch.where(linear, a, (a * beta + torch.log(-torch.expm1(-a * beta))) / beta)
    return z, torch.where(linear, torch.ones_like(a), -torch.expm1(-a * beta))


def _peak_slope(act: nn.Module | None) -> float:
    """The largest derivative of the activation (its slope where it is least saturated)."""
    if isinstance(act, nn.Sigmoid):
        return 0.25
    if isinstance(act, nn.LeakyReLU):
        return max(1.0, act.negative_slope)
    return 1.0


def _layer_system(step: _Step, layer: nn.Module, z: torch.Tensor, delta: torch.Tensor, dW: torch.Tensor):
    """The stacked system A a = r of one layer: forward rows f(a) - f(0) = z - f(0), gradient rows G(a; delta) = dW.

    G is bilinear in (a, W) through <delta, f(a; W)>, so its matrix is built from whichever side has fewer unit
    vectors: row k is the input gradient of <delta, f(., E_k)> for the unit weight E_k, and column i the weight
    gradient of <delta, f(e_i; .)> for the unit input e_i (lenet's first layer on 3x32x32: 900 weights
    against 3,072 inputs).
    """
    n = math.prod(step.in_shape)
    basis = torch.eye(n, dtype=z.dtype, device=z.device).reshape(n, *step.in_shape)
    with torch.no_grad():
        zero = layer(torch.zeros_like(basis[:1]))
        A_f = (layer(basis) - zero).reshape(n, -1).T
    r_f = (z.reshape(1, *step.out_shape) - zero).reshape(-1)
    assert isinstance(layer.weight, torch.Tensor)  # a Linear or Conv2d layer
    weight, delta = layer.weight.detach(), delta.reshape(1, *step.out_shape)

    def call(a, w):
        return functional_call(layer, {"weight": w}, (a,))

    if weight.numel() < n:
        units = torch.eye(weight.numel(), dtype=z.dtype, device=z.device).reshape(-1, *weight.shape)
        A_g = vmap(lambda w: vjp(lambda a: call(a, w), basis[:1])[1](delta)[0])(units).reshape(weight.numel(), n)
    else:
        A_g = vmap(lambda a: vjp(lambda w: call(a.unsqueeze(0), w), weight)[1](delta)[0])(basis).reshape(n, -1).T
    return torch.cat([A_f, A_g]), torch.cat([r_f, dW.reshape(-1)])


def _weighted(A: torch.Tensor, r: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of A a = r normalised and then scaled by ``weight``; rows of weight 0 dropped."""
    scale = weight / A.norm(dim=1)
    keep = (scale > 0) & torch.isfinite(scale)
    return A[keep] * scale[keep, None], r[keep] * scale[keep]


def _svd_solve(A: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
    """The minimum-norm least-squares solution of A a = r with singular values below ``RANK_RTOL`` times the largest
    dropped, the rank, and the right singular vectors of the kept ones (rows of Vh)."""
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    rank = int((S > RANK_RTOL * S[0]).sum()) if S.numel() else 0  # no rows: every weight 0 (no unit active)
    return Vh[:rank].T @ ((U[:, :rank].T @ r) / S[:rank]), rank, Vh[:rank]


def _solve(A: torch.Tensor, r: torch.Tensor, svd: bool | None = None) -> tuple[torch.Tensor, int, float]:
    """Least squares for the weighted system A a = r (:func:`_weighted`): the minimum-norm solution with singular
    values below ``RANK_RTOL`` times the largest dropped, the rank, and the relative residual (LAPACK's gelsd on a
    CPU; an explicit SVD elsewhere, where torch has no rank-revealing least-squares driver, or if ``svd``)."""
    if not (A.device.type != "cpu" if svd is None else svd) and A.shape[0]:
        fit = torch.linalg.lstsq(A, r.unsqueeze(1), rcond=RANK_RTOL, driver="gelsd")
        a, rank = fit.solution.squeeze(1), int(fit.rank)
    else:
        a, rank, _ = _svd_solve(A, r)
    return a, rank, _residual(A, r, a)


def _standard_errors(A: torch.Tensor, r: torch.Tensor, a: torch.Tensor) -> torch.Tensor | None:
    """Each unknown's standard error in the least-squares solution ``a`` of the weighted system A a = r,
    sigma sqrt((A^T A)^-1_jj), with sigma^2 the residual's mean square over the rows beyond the unknowns (the
    message's round-off, carried through the system), and at least sqrt(n) eps ||a|| (the solve's own round-off in its
    n unknowns, rows of unit norm, eps of the solve's dtype); None where the system has fewer than
    :data:`SURPLUS_ROWS` such rows or is not positive definite (rank-deficient)."""
    surplus = A.shape[0] - A.shape[1]
    if surplus < SURPLUS_ROWS:
        return None
    G = A.T @ A
    L, info = torch.linalg.cholesky_ex(G)
    # a dependent column can leave a pivot of round-off instead of failing the factorisation (it does on some CPUs'
    # kernels): L_jj^2 / G_jj is the squared sine of column j's angle to the columns before it
    if int(info) or bool((L.diagonal() ** 2 < 10 * A.shape[1] * torch.finfo(A.dtype).eps * G.diagonal()).any()):
        return None
    sigma = max(float((A @ a - r).norm()) / surplus ** 0.5,
                A.shape[1] ** 0.5 * torch.finfo(A.dtype).eps * float(a.norm()))
    return sigma * torch.cholesky_inverse(L).diagonal().sqrt()


def _residual(A: torch.Tensor, r: torch.Tensor, a: torch.Tensor) -> float:
    return float((A @ a - r).norm() / r.norm().clamp_min(1e-300))


def _least_tv(A: torch.Tensor, r: torch.Tensor, shape: tuple,
              below: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, int, float, int]:
    """The input layer's solution from its weighted system A a = r (x, rank, relative residual, the dimension of the
    family it was chosen from; 0 where the system has full rank and its least-squares solution is returned).

    Every a = a0 + N c (a0 the minimum-norm solution, N an orthonormal basis of the weighted system's null space)
    satisfies the layer's equations as well as a0 does, so gives the same gradient; the one returned has the least
    total variation over ``shape`` (C, H, W) (absolute values smoothed by :data:`TV_SMOOTHING`) inside the box
    [0, 1] and, where ``below`` = (B, h) is given, B a <= h (the inactive rectifier units' inputs at most 0).  The
    inequalities are quadratic penalties of the weights :data:`PENALTIES` in turn (scipy's L-BFGS-B on c, each run
    warm-started from the last); what they leave outside the box is left to the scoring's clamp, so the layer's
    equations hold to round-off."""
    from scipy.optimize import minimize  # only for a family to choose from

    if A.shape[0] >= A.shape[1]:  # fewer rows than unknowns leave a family for certain: straight to the SVD
        a0, rank, residual = _solve(A, r)  # gelsd tells the rank faster than the explicit SVD below
        if rank == A.shape[1]:  # full rank: no family
            return a0, rank, residual, 0
    a0, rank, V = _svd_solve(A, r)  # the null space needs the right singular vectors, which gelsd does not return
    N = torch.linalg.qr(V.T, mode="complete").Q[:, rank:]  # the complement of the kept right singular vectors
    if not N.shape[1]:  # the SVD found the rank full where gelsd did not
        return a0, rank, _residual(A, r, a0), 0
    B, h = below if below is not None else (A.new_zeros(0, A.shape[1]), A.new_zeros(0))
    c = torch.zeros(N.shape[1], dtype=A.dtype, device=A.device)

    def objective(mu: float):
        def f(cn):
            cc = torch.as_tensor(cn, dtype=A.dtype, device=A.device).requires_grad_(True)
            a = a0 + N @ cc
            img = a.reshape(shape)
            dh, dv = img[..., :, 1:] - img[..., :, :-1], img[..., 1:, :] - img[..., :-1, :]
            tv = (dh * dh + TV_SMOOTHING).sqrt().sum() + (dv * dv + TV_SMOOTHING).sqrt().sum()
            outside = torch.relu(-a).pow(2).sum() + torch.relu(a - 1).pow(2).sum() + torch.relu(B @ a - h).pow(2).sum()
            loss = tv + mu * outside
            (grad,) = torch.autograd.grad(loss, cc)
            return float(loss.detach()), grad.detach().cpu().double().numpy()
        return f

    for mu in PENALTIES:
        c = torch.as_tensor(minimize(objective(mu), c.cpu().double().numpy(), jac=True, method="L-BFGS-B",
                                     options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10}).x,
                            dtype=A.dtype, device=A.device)
    a = a0 + N @ c
    return a, rank, _residual(A, r, a), N.shape[1]


def _family_note(layer: str, rank: int, unknowns: int, dim: int, inactive: int) -> str:
    """What the run's message says of an input layer whose system left a family (:func:`_least_tv`)."""
    return (f"; the input layer's ({layer}) has rank {rank} of {unknowns} unknowns, so a {dim}-dimensional family "
            "of inputs gives this gradient, and the one with the least total variation inside the box [0, 1]"
            + (f" whose {inactive} inactive units of {layer} stay inactive" if inactive else "")
            + " was taken: the message alone does not determine the input")


class Rgap(OneExampleAttack):
    """The recursive gradient attack: the head by division, then each layer's input by least squares (a ReLU's units
    where they are active); an input layer whose equations leave a family takes the member :func:`_least_tv` picks."""

    name = "rgap"
    title = "R-GAP"

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        if refusal := self.one_example(obs):
            return refusal
        if victim.task != "classification":
            return (f"R-GAP starts from a classifier head, and {victim.name} is a {victim.task} model; "
                    "use gradient-matching")
        M = obs.linear_map
        if M.b < M.d:
            return (f"R-GAP needs every coordinate of the gradient, and the message has b = {M.b} numbers for "
                    f"d = {M.d}; use gradient-matching or a sketch with b >= d")
        steps, problem = _problem_with_chain(victim)
        if problem:
            return (f"R-GAP inverts a chain of convolutions and linear layers with invertible activations or "
                    f"ReLUs, and {victim.name} has {problem}; use gradient-matching")
        assert steps is not None
        systems = [(math.prod(st.out_shape) + dict(st.module.named_parameters())["weight"].numel(),
                    math.prod(st.in_shape), st.name) for st in steps[:-1]]  # the head's input is found by division
        rows, n, name = max(systems, key=lambda sys_: sys_[0] * sys_[1], default=(0, 0, ""))
        if rows * n > MAX_SYSTEM:
            other = "--attack analytic" if Analytic().supports(obs) is None else "gradient-matching"
            return (f"R-GAP solves each layer's input from one dense system, and {victim.name}'s layer {name} would "
                    f"hold {rows} x {n} = {rows * n:.1e} numbers (it solves up to {MAX_SYSTEM:.0e}); use {other} "
                    "or a smaller --image-size")
        return None

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        victim = obs.victim
        steps, _ = _problem_with_chain(victim)
        assert steps is not None  # check() refused a victim without such a chain
        g = self.gradient(obs)
        slices = targets.param_slices(victim)
        pname = {id(p): n for n, p in victim.model.named_parameters()}
        layers = [copy.deepcopy(s.module).to(torch.float64).requires_grad_(False) for s in steps]

        def grad_of(mod):
            return g[slices[pname[id(mod.weight)]]].reshape(mod.weight.shape)

        head = steps[-1].module
        db = g[slices[pname[id(head.bias)]]]
        blk = torch.cat([grad_of(head), db.unsqueeze(1)], 1)
        a = Analytic._divide(blk)
        losses = [float((blk - torch.outer(db, torch.cat([a, a.new_ones(1)]))).norm() / blk.norm().clamp_min(1e-300))]
        delta = db
        labels = obs.labels if obs.labels is not None else db.argmin().reshape(1).to(victim.device)
        deficient, family, input_rank, se = [], "", None, None
        with progress_bar(len(steps), "rgap", "layer", requested=progress, leave=False) as bar:
            bar.update(1)
            for i in range(len(steps) - 2, -1, -1):
                if stop_requested():  # Ctrl-C: no layer below is solved, so there is no input to return
                    x = torch.zeros(obs.input_shape, dtype=victim.dtype, device=victim.device)
                    return AttackResult(x=x, labels=labels, x0=x.clone(), losses=losses, iterations=len(losses) - 1,
                                        best_step=len(losses) - 1, stop_reason="interrupted",
                                        message=(f"Ctrl-C stopped R-GAP after the head's division and "
                                                 f"{len(losses) - 1} of the {len(steps) - 1} layers below it, before "
                                                 "the input layer: no input was rebuilt"),
                                        wall_s=time.perf_counter() - t0)
                step, nxt = steps[i], layers[i + 1]
                a = a.reshape(step.out_shape)
                z, slope = _inverse(step.act, a, torch.finfo(victim.dtype).eps, se)
                pull = vjp(lambda u: nxt(u.unsqueeze(0)),
                           torch.zeros(steps[i + 1].in_shape, dtype=torch.float64, device=a.device))[1]
                delta = pull(delta.reshape(1, *steps[i + 1].out_shape))[0].reshape(step.out_shape) * slope
                A, r = _layer_system(step, layers[i], z, delta, grad_of(step.module))
                weight = torch.cat([slope.reshape(-1) / _peak_slope(step.act),
                                    slope.new_ones(A.shape[0] - slope.numel())])
                image = i == 0 and len(step.in_shape) == 3  # the input image: a family, if any, is chosen from
                inactive = slope.reshape(-1) == 0 if image and isinstance(step.act, RECTIFIERS) else None
                below = None if inactive is None else (A[:slope.numel()][inactive], r[:slope.numel()][inactive])
                A, r = _weighted(A, r, weight)  # the system every solve below reads (an inactive unit's row dropped)
                if image:
                    a, input_rank, residual, dim = _least_tv(A, r, step.in_shape, below)
                    if dim:
                        family = _family_note(step.name, input_rank, A.shape[1], dim,
                                              0 if inactive is None else int(inactive.sum()))
                else:
                    a, rank, residual = _solve(A, r)
                    if rank < A.shape[1]:
                        deficient.append(f"layer {step.name}: rank {rank} of {A.shape[1]} unknowns")
                    if i == 0:
                        input_rank = rank
                    # the standard errors of a full-rank layer's solution set the threshold of the ReLU below it
                    se = _standard_errors(A, r, a) if i > 0 and rank == A.shape[1] \
                        and isinstance(steps[i - 1].act, RECTIFIERS) else None
                losses.append(residual)
                bar.update(1)
        x = a.reshape(obs.input_shape).to(victim.dtype)
        last = len(losses) - 1
        tol = torch.finfo(victim.dtype).eps ** 0.5
        worst = max(range(len(losses)), key=lambda k: losses[k])
        notes = []
        if losses[worst] > tol:
            precision = victim.dtype != torch.float64 and any(isinstance(st.act, RECTIFIERS) for st in steps)
            notes.append(f"the layers' systems are inconsistent (relative residual {losses[worst]:.2g} at layer "
                         f"{steps[len(steps) - 1 - worst].name}): the g read from the message is not the exact "
                         f"gradient of one example at these weights ({self.inexact_words(obs)}"
                         + (f"; or {str(victim.dtype)[6:]}'s round-off, which moves a unit's near-zero "
                            "output across its ReLU's threshold: --dtype float64" if precision else "")
                         + ")")
        if deficient:
            notes.append("; ".join(deficient) + ": the minimum-norm solution was taken")
        if input_rank == 0:  # its residual of 0 is that of no equation, not of an exact fit
            notes.append(f"the input layer's system holds no equation in the input (rank 0 of {A.shape[1]} unknowns), "
                         "so its residual of 0 fits nothing and the input returned is "
                         "the smoothest image in the box, not read from the message")
        result = closed_form_result(
            x, labels, losses, notes, step=last, monitor=monitor, wall_s=time.perf_counter() - t0,
            solved="the head's input by division" + (
                f", then {len(steps) - 1} " + ("layers' inputs" if len(steps) > 2 else "layer's input")
                + " by least squares, each system consistent and "
                + ("every hidden layer's full rank" + family if family else "full rank")
                if len(steps) > 1 else ", its gradient exactly rank one"),
            non_finite="a layer's solution became non-finite")
        result.input_rank = input_rank
        return result


__all__ = ["Rgap", "INVERTIBLE", "RANK_RTOL"]
