"""Levenberg-Marquardt on L_R after the first-order phase: the exact input where the message pins it down.

L_R(x) = ||r(x)||^2 with r(x) = R grad_w F(w, x) - y is a nonlinear least-squares
problem whose minimum is 0 at the client's input.  L-BFGS on it slows down as it
nears that minimum: on the DLG LeNet through an SRHT with b = d/2 it stalls at
about 52 dB, L_R ~ 1e-7, while the Jacobian J (b x n, n = m*B) there has full
column rank with a condition number of about 2e4.  Gauss-Newton steps, which
solve the linearised problem min ||r + J delta|| exactly, converge quadratically
on such a zero-residual problem: the same run reaches the image to round-off in
four full steps, or one J and its chord steps (below; docs/attack.md, "Gauss-Newton after L-BFGS").

Each round forms J column by column (:func:`jacobian`: n backward passes, batched, through
the graph of one evaluation), the normal equations A = J^T J, g = J^T r, and
solves (A + mu * mean(diag A) * I) delta = -g (Marquardt's damping: mu falls
tenfold after a step that lowers L_R and rises tenfold, without a new J, after
one that does not).  That costs n passes plus b n^2 + n^3 / 3 flops, so it
runs only on problems within :data:`MAX_UNKNOWNS`, :data:`MAX_ENTRIES` and
:data:`MAX_WORK`.  After an accepted step the round goes on with chord steps
(Shamanskii's method): the same J and the same Cholesky factor, only the residual
new, delta = -(A + damping)^-1 J^T r(x), which costs one evaluation and two
triangular solves instead of n passes.  Near a zero of r each cuts L_R by a
factor that grows as J's point nears it; while each cuts it at least
:data:`CHORD_GAIN`-fold they go on, then a new J is formed.  On the DLG LeNet
through srht b = d/2 one J and 14 chord steps take the 1000-step L-BFGS iterate
to round-off, where four full steps formed four J (docs/attack.md).  Where J would hold more than :data:`MAX_HELD`
numbers it is not formed: :func:`sketched_normal_equations` compresses each column J e_j (one backward pass) by a
CountSketch S of :data:`SKETCH_ROWS` x n rows into a row of (S J)^T, and (S J)^T (S J), close to J^T J in every
direction, preconditions conjugate gradients on the exact normal equations (J^T J + damping) delta = -J^T r, whose
products J d and J^T u are backward passes through the graph of J's point (:func:`_refined`): n passes for the J
instead of the 2n that J^T J itself takes (:func:`normal_equations`), and steps as exact as a held J's. A damped
step that raises L_R is watched (:data:`WATCH`): across a curved valley of L_R the Gauss-Newton step lands much
nearer the input at a higher L_R, and the chord steps from there fall below the round's start.  It needs L_R
itself as the objective (not the cosine), no prior, fixed labels and no box.  Steps that do not converge
(no damping lowers L_R, or two rounds in a row cut it less than :data:`SLOW`-fold) are a sign that the iterate is
not near the input: the attack then keeps its first phase's iterate (GradientMatching's ``refine``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import allocation_failed
from .base import halt_reason, stop_requested, torch_threads

#: Gauss-Newton runs only where n = m*B, the unknowns, is at most this (its normal equations are n x n) ...
MAX_UNKNOWNS = 4096
#: ... J (b x n) holds at most this many numbers (8 bytes each in float64: 480 MB) ...
MAX_ENTRIES = 6 * 10**7
#: ... and d x n, the work of forming J (n backward passes through the gradient of d weights), is at most this
MAX_WORK = 10**8
#: J's columns formed in one batched backward pass (its b x CHUNK numbers stay small; on the DLG LeNet 16 at a time
#: take x0.64 of the time of one at a time: ``python benchmarks/attack_speed.py --only jacobian``)
CHUNK = 16
#: a batched pass of columns holds about this many bytes at most: :func:`columns_per_pass` takes fewer than
#: :data:`CHUNK` columns where each holds much (a column's pass keeps vectors of the message's b and of the gradient's
#: d numbers; vit_small through srht b/d = 0.5, b + d = 2.7 M: `leakattack run --model vit_small --image-index 1
#: --iterations 3600 --refine gauss-newton` peaked at 2.25 GB of RSS with 16 columns a pass against 1.43 GB with one
#: a pass through torch.cat, about 2.5 (b + d) numbers more a column)
BATCH_BYTES = 2**30
#: at most this many rounds of Gauss-Newton steps (each forms J once)
STEPS = 20
#: rows of the CountSketch S that compresses J where J is not held, per unknown: (S J)^T (S J) is J^T J up to a
#: factor 1 +- eps in every direction, eps shrinking as the rows grow, and as a preconditioner it leaves conjugate
#: gradients on J^T J a condition number of about ((1 + eps) / (1 - eps))^2 whatever J's own
#: (``tests/attacks/test_gauss_newton.py`` measures both; vit_small through srht b/d = 0.5: (S J)^T is 3072 x 12288
#: numbers, 302 MB, where J is 22 GB)
SKETCH_ROWS = 4
#: conjugate-gradient iterations a solve with a sketched J takes at most, and the residual of the normal equations,
#: relative to their right-hand side, at which it stops
PCG_STEPS, PCG_TOL = 60, 1e-12
#: chord steps (the round's J and factor reused) go on while each cuts L_R at least this many times
CHORD_GAIN = 10.0
#: Marquardt's damping at the first step, relative to the mean of diag(J^T J) (small: the first-order phase
#: leaves a good start), and the most trials one J gets, the damping ten times larger at each
DAMPING, TRIALS = 1e-6, 6
#: a damped step that raises L_R is followed by up to this many chord steps (its J, its factor) while each lowers L_R;
#: where they end below the round's start, the step and they are taken (a watchdog: Chamberlain, Powell, Lemarechal
#: and Pedersen 1982).  Across a curved valley of L_R the Gauss-Newton step lands far nearer the input with a higher
#: L_R: on vit_small through srht b/d = 0.5, photo 1 from 33.85 dB (L_R / ||y||^2 3.8e-10), the full step reached
#: 43.25 dB at 6.2e-8 and its chord steps 51.92, 57.92 and 63.13 dB, the second below the start (docs/attack.md)
WATCH = 5
#: two rounds in a row (a J each, its full step and chord steps) that cut L_R by less than this factor end the steps
#: (``stalled``): Gauss-Newton is not converging quadratically there, so the iterate is not near a zero of the
#: residual it could reach.  On LeNet the rounds that converged cut it 3.5-4.2-fold at most once (the first, from
#: 30 or fewer L-BFGS steps), then 11-fold and more; through uniform sampling (J of rank 2998 of 3072) 3.0, 1.6,
#: 5.1, 2.5, 1.7 and 1.5-fold (docs/attack.md)
SLOW = 5.0
#: the steps go on past the attack's tolerance while each round still cuts L_R tenfold (quadratic convergence), down
#: to L_R / ||y||^2 <= FLOOR (float64 round-off of a message matched to its last bits)
FLOOR = 1e-26


class Stopped(Exception):
    """:func:`jacobian`'s ``stop()`` turned true before J was complete."""


def transpose_graph(forward, x: torch.Tensor, labels):
    """(xr, y, v, h): ``xr`` a copy of x that requires grad, y = forward(xr, labels) flattened with its graph, ``v``
    zeros of y's shape that require grad, and h = J^T v = grad_xr <v, y> built with its graph (None where y does not
    depend on x).  h is linear in v, so grad_v <h, e> is J e and grad_xr <u, y> is J^T u: both products of J by
    backward passes alone, J never formed."""
    xr = x.detach().clone().requires_grad_(True)
    y = forward(xr, labels).reshape(-1)
    v = torch.zeros_like(y, requires_grad=True)
    h, = torch.autograd.grad(y, xr, grad_outputs=v, create_graph=True, allow_unused=True)
    return xr, y, v, h


def columns_per_pass(b: int, d: int, itemsize: int = 8) -> int:
    """Columns of J (or of its sketch, or of J^T J) one batched pass forms for a message of b numbers of a gradient
    of d: :data:`CHUNK`, or as many as fit :data:`BATCH_BYTES` at 3 (b + d) numbers of ``itemsize`` bytes a column,
    at least one (vit_small: 16; ResNet-18 unsketched, b = d = 11.2 M: 2)."""
    return max(1, min(CHUNK, BATCH_BYTES // (3 * (b + d) * itemsize)))


def _by_columns(column: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor, chunk: int | None,
                stop: Callable[[], bool] | None, done: Callable[[int], None] | None,
                after: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
    """rows[k] = column(e_k) for the n unit vectors e_k (n = rows.shape[0]), :data:`CHUNK` at a time as
    one batched pass (``torch.func.vmap``; ``chunk`` another number), one at a time from the first batch where an
    operation has no batching rule (or ``chunk=1``); a batch that does not fit in memory is tried again at half its
    size (one column at a time holds the least); ``after`` maps each block of columns (k, ...) to what its rows
    hold (a sketch of them); raises :class:`Stopped` when ``stop()`` turns true between two batches; ``done(k)``
    after each batch with the number of rows written."""
    n = rows.shape[0]
    keep = (lambda block: block) if after is None else after
    step = CHUNK if chunk is None else chunk
    first = 0
    while step > 1 and first < n:
        try:
            with warnings.catch_warnings():  # an operation vmap runs one slice at a time is still right
                warnings.filterwarnings("ignore", message=".*performance drop.*")
                while first < n:
                    if stop is not None and stop():
                        raise Stopped
                    k = min(step, n - first)
                    e = torch.zeros(k, n, dtype=rows.dtype, device=rows.device)
                    e[torch.arange(k), torch.arange(first, first + k)] = 1
                    rows[first:first + k] = keep(torch.func.vmap(column)(e))
                    first += k
                    if done is not None:
                        done(first)
            return
        except (RuntimeError, NotImplementedError, MemoryError) as err:
            if not allocation_failed(err):  # an operation of the graph that vmap cannot batch
                break
            step //= 2  # the batch's temporaries did not fit: half as many columns a pass
    e = torch.zeros(n, dtype=rows.dtype, device=rows.device)
    for k in range(first, n):
        if stop is not None and k % CHUNK == 0 and stop():
            raise Stopped
        e[k] = 1
        rows[k] = keep(column(e).unsqueeze(0))[0]
        e[k] = 0
        if done is not None and ((k + 1) % CHUNK == 0 or k + 1 == n):
            done(k + 1)


def jacobian(forward, x: torch.Tensor, labels, *, chunk: int | None = None,
             stop: Callable[[], bool] | None = None, done: Callable[[int], None] | None = None) -> torch.Tensor:
    """J (b, n) of x -> forward(x, labels) at ``x`` (n = x.numel()), by reverse mode only; raises
    :class:`Stopped` when ``stop()`` turns true between two batches of columns (a deadline, Ctrl-C);
    ``done(k)`` is called after each batch with the number of columns formed (a progress bar's postfix).

    h(v) = J^T v = grad_x <v, forward(x)> is built once with its graph (it is
    linear in v); column j of J is then grad_v <h, e_j> (:func:`products`).  Only backward passes are
    needed, which every differentiable model and sketch of the attack provides
    (the attack itself differentiates through them).  They run :data:`CHUNK`
    columns at a time as one batched pass (``torch.func.vmap`` over the backward
    pass; the sketches' linear maps batch their rows), or one column at a time
    where an operation of the graph has no batching rule (``chunk=1`` asks for that).
    """
    y, j, _ = products(forward, x, labels)
    Jt = torch.zeros(x.numel(), y.numel(), dtype=y.dtype, device=y.device)  # J's columns as rows: each written whole
    if j is not None:  # else the message does not depend on the input
        _by_columns(j, Jt, chunk, stop, done)
    return Jt.T


#: J is formed and held while it has at most this many numbers (4 GB in float64); above, a sketch of it is formed
#: instead (:func:`sketched_normal_equations`: vit_small through srht b/d = 0.5 would hold 903,269 x 3072 numbers,
#: 22 GB, against 3072 x 12,288 for the sketch)
MAX_HELD = 5 * 10**8


Product = Callable[[torch.Tensor], torch.Tensor]


def products(forward, x: torch.Tensor, labels) -> tuple[torch.Tensor, Product | None, Product]:
    """(y, d -> J d, u -> J^T u) at ``x``: y = forward(x, labels) flattened with its graph, and J's products by
    backward passes alone (:func:`transpose_graph`), J never formed; the J product is None where y does not depend
    on x.  Both keep their graphs for further calls; J^T u comes flattened."""
    xr, y, v, h = transpose_graph(forward, x, labels)
    n = x.numel()

    def jt(u: torch.Tensor) -> torch.Tensor:
        out = torch.autograd.grad(y, xr, grad_outputs=u, retain_graph=True, allow_unused=True)[0] \
            if y.requires_grad else None
        return torch.zeros(n, dtype=y.dtype, device=y.device) if out is None else out.reshape(-1)

    if h is None or not h.requires_grad:
        return y, None, jt

    def j(d: torch.Tensor) -> torch.Tensor:
        col, = torch.autograd.grad(h, v, grad_outputs=d.reshape(h.shape), retain_graph=True, allow_unused=True)
        return torch.zeros_like(v) if col is None else col

    return y, j, jt


def normal_equations(forward, x: torch.Tensor, labels, *, chunk: int | None = None,
                     stop: Callable[[], bool] | None = None,
                     done: Callable[[int], None] | None = None) -> tuple[torch.Tensor, Product]:
    """(A, u -> J^T u): A = J^T J at ``x`` and J^T's product with a residual, J never formed; raises
    :class:`Stopped` when ``stop()`` turns true between two batches of columns; ``done(k)`` is called after each
    batch with the number of columns formed.

    Column j of A is J^T (J e_j) (:func:`products`: J e_j by a backward pass through the graph of h = J^T v, as
    :func:`jacobian` forms a column, and J^T of it by one through the message's graph), so A costs 2n backward
    passes and holds n^2 numbers where J holds b x n.  The passes run :data:`CHUNK` columns at a time as one
    batched pass (``torch.func.vmap``), or one column at a time where an operation of the graph has no batching
    rule or ``chunk=1`` asks for that.  The product function keeps the graph of ``x`` (a round's chord steps take
    J^T r at J's own point)."""
    y, j, jt = products(forward, x, labels)
    n = x.numel()
    A = torch.zeros(n, n, dtype=y.dtype, device=y.device)
    if j is None:  # the message does not depend on the input
        return A, jt
    _by_columns(lambda e: jt(j(e)), A, chunk, stop, done)  # rows of a symmetric matrix: its columns
    return (A + A.T) / 2, jt  # symmetric up to the round-off of the two passes


#: what :func:`jacobian`, :func:`normal_equations` and the steps raise where they cannot run: an operation whose
#: derivative autograd lacks, or an allocation that did not fit
CANNOT_FORM = (RuntimeError, NotImplementedError, MemoryError)


def why_not_formed(err: BaseException) -> str:
    """Why J (or its normal equations) could not be formed, from what forming it raised (one of
    :data:`CANNOT_FORM`), with the first line of the error."""
    lines = str(err).strip().splitlines()
    cause = ("J did not fit in memory" if allocation_failed(err)
             else "the message could not be differentiated twice in x")
    return f"{cause} ({(lines[0] if lines else type(err).__name__)[:120]})"


def count_sketch(b: int, s: int, dtype: torch.dtype, device, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """u (k, b) -> S u^T as rows (k, s): each of the b coordinates added, with a random sign, into one of s buckets
    drawn at random (Clarkson and Woodruff's CountSketch; the generator seeded with ``seed``, on the CPU, so every
    device draws the same S)."""
    gen = torch.Generator().manual_seed(seed)
    bucket = torch.randint(0, s, (b,), generator=gen).to(device)
    sign = (torch.randint(0, 2, (b,), generator=gen) * 2 - 1).to(device=device, dtype=dtype)

    def apply(u: torch.Tensor) -> torch.Tensor:
        u = u.reshape(u.shape[0], -1)
        return u.new_zeros(u.shape[0], s).index_add_(1, bucket, u * sign)

    return apply


def sketched_normal_equations(forward, x: torch.Tensor, labels, *, rows: int = SKETCH_ROWS, chunk: int | None = None,
                              stop: Callable[[], bool] | None = None, done: Callable[[int], None] | None = None,
                              threads: int | None = None) -> tuple[torch.Tensor, Product, Product]:
    """(A_S, u -> J^T u, d -> J^T J d): A_S = (S J)^T (S J) at ``x`` for a CountSketch S of ``rows`` x n rows
    (:func:`count_sketch`), and the exact products of J's normal equations, J never formed; raises
    :class:`Stopped` when ``stop()`` turns true between two batches of columns; ``done(k)`` is called after each
    batch with the number of columns formed.  The columns run on torch's threads as they are, A_S's product on
    ``threads`` (None: the same).

    Column j of J, J e_j, is one backward pass (:func:`products`), compressed to S J e_j as it is formed: n
    passes and n x s numbers, where J^T J from products takes 2n passes (:func:`normal_equations`).  A_S is J^T J up
    to a factor 1 +- eps in every direction (a subspace embedding), which makes it a preconditioner for conjugate
    gradients on J^T J itself (:func:`_refined`); its rank is J's wherever S is one-to-one on J's column space (a
    column space in general position and s at least its dimension).  A message of at most s numbers is not
    compressed (S = I: A_S is J^T J).  Both products keep the graph of ``x``."""
    y, j, jt = products(forward, x, labels)
    n, b = x.numel(), y.numel()
    if j is None:  # the message does not depend on the input
        return torch.zeros(n, n, dtype=y.dtype, device=y.device), jt, lambda d: torch.zeros_like(d)
    s = max(n, rows * n)
    compress = count_sketch(b, s, y.dtype, y.device) if b > s else (lambda u: u.reshape(u.shape[0], -1))
    SJt = torch.zeros(n, min(b, s), dtype=y.dtype, device=y.device)  # (S J)^T: a row for each column of J
    _by_columns(j, SJt, chunk, stop, done, after=compress)

    def normal(d: torch.Tensor) -> torch.Tensor:
        assert j is not None  # returned above where the message does not depend on the input
        return jt(j(d.reshape(-1)).detach())

    with torch_threads(threads or torch.get_num_threads()):
        return gram(SJt.T), jt, normal


def too_large(b: int, n: int, d: int) -> str | None:
    """Why Gauss-Newton does not run on a message of b numbers, n unknowns and d weights, or None when it does."""
    if n > MAX_UNKNOWNS:
        return f"m*B = {n} unknowns (it runs up to {MAX_UNKNOWNS})"
    if b * n > MAX_ENTRIES:
        return f"J would hold b x m*B = {b} x {n} numbers (it runs up to {MAX_ENTRIES:.0e})"
    if d * n > MAX_WORK:
        return f"forming J costs m*B = {n} passes through d = {d} weights (it runs up to d x m*B = {MAX_WORK:.0e})"
    return None


@dataclass
class Refined:
    """What the Gauss-Newton steps did."""

    x: torch.Tensor  #: the last accepted iterate (the lowest L_R)
    start_loss: float = math.nan  #: L_R at the start
    losses: list[float] = field(default_factory=list)  #: L_R after each accepted step, chord steps included
    steps: int = 0  #: rounds taken, each formed J once: a full step and the chord steps on its J
    chord: int = 0  #: accepted chord steps (J and its factor reused), among the losses
    watched: int = 0  #: accepted steps that raised L_R and whose chord steps then took it below the round's start
    rounds: list[float] = field(default_factory=list)  #: L_R at the end of each round (what the stall rule reads)
    stop: str = "iterations"  #: tolerance | stalled | time-limit | iterations | diverged
    seconds: float = 0.0
    #: the numerical rank of the last J formed (singular values above s_max * sqrt(n * eps): what its Gram
    #: matrix resolves), and its largest and smallest singular values; when the steps converge (``tolerance``)
    #: that J is formed at the last iterate: one more J if the last round's steps moved it or none was formed
    #: (the start met the tolerance), so a converged result without a rank is one whose J was cut short
    rank: int | None = None
    singular: tuple[float, float] | None = None
    #: L_R where that J was formed
    rank_loss: float | None = None
    #: where a J was stopped because, at the pace of its columns after the first batch (:data:`PACE_SHARE`), it
    #: (with its normal equations, and for the first J the ``ahead`` - 1 more the caller asked room for) would end
    #: after the deadline: the seconds one J takes at that pace; else None
    foreseen: float | None = None


def residual(forward, y: torch.Tensor, x: torch.Tensor, labels) -> torch.Tensor:
    """r(x) = forward(x, labels) - y, flattened and detached."""
    with torch.enable_grad():  # the attacker's model differentiates the victim's loss in w
        return (forward(x.detach().clone().requires_grad_(True), labels).detach().reshape(-1) - y)


def halved_step(forward, y: torch.Tensor, x: torch.Tensor, d: torch.Tensor, labels, loss: float,
                tries: int) -> tuple[torch.Tensor, torch.Tensor, float, int] | None:
    """x + d / 2^k for the first k < ``tries`` whose L_R is below ``loss``: (that point, its residual, its L_R, k);
    None where no halving lowers L_R."""
    for k in range(tries):
        trial = x + d / 2 ** k
        r = residual(forward, y, trial, labels)
        new = float(r @ r)
        if new < loss:
            return trial, r, new, k
    return None


#: J^T J is formed in column blocks of J at least this wide (a multiple of the matrix kernels' panels)
GRAM_BLOCK = 768


def gram(J: torch.Tensor) -> torch.Tensor:
    """J^T J, forming only its blocks on and above the diagonal (5/8 of the products for four blocks) and
    mirroring them: the matrix is symmetric.  On the 2-core AMD EPYC, J 7913 x 3072 in float64 (LeNet through
    srht b = d/2): 0.96 s against 1.47 s for one product, and equal to it there bit for bit (blocks of 768
    columns; ``benchmarks/attack_speed.py --only jacobian``)."""
    n = J.shape[1]
    k = max(1, min(4, n // GRAM_BLOCK))
    if k == 1:
        return J.T @ J
    width = (-(-n // k) + 63) // 64 * 64  # n/k rounded up to a multiple of 64
    edges = [min(n, i * width) for i in range(k)] + [n]
    A = torch.empty(n, n, dtype=J.dtype, device=J.device)
    for lo, hi in zip(edges[:-1], edges[1:]):
        block = J[:, lo:hi].T @ J[:, lo:]
        A[lo:hi, lo:] = block
        A[hi:, lo:hi] = block[:, hi - lo:].T
    return A


def _factor(A: torch.Tensor, damping: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """g -> delta with (A + damping * I) delta = -g, factored once by Cholesky (LU where round-off leaves the
    matrix indefinite): a round's chord steps solve with it again."""
    damped = A.clone()
    damped.diagonal().add_(damping)
    L, info = torch.linalg.cholesky_ex(damped)
    if int(info) == 0:
        return lambda g: torch.cholesky_solve(-g.unsqueeze(1), L).squeeze(1)
    LU, pivots = torch.linalg.lu_factor(damped)
    return lambda g: torch.linalg.lu_solve(LU, pivots, -g.unsqueeze(1)).squeeze(1)


def _refined(A: torch.Tensor, damping: float, normal: Product,
             steps: int = PCG_STEPS, tol: float = PCG_TOL) -> Callable[[torch.Tensor], torch.Tensor]:
    """g -> delta with (J^T J + damping * I) delta = -g by conjugate gradients, J^T J's product ``normal``
    (:func:`sketched_normal_equations`) and (A + damping * I)^-1 (A = (S J)^T (S J), factored once: :func:`_factor`)
    as the preconditioner; at most ``steps`` iterations, ending where the residual is ``tol`` of -g's norm."""
    inverse = _factor(A, damping)  # v -> -(A + damping I)^-1 v

    def solve(g: torch.Tensor) -> torch.Tensor:
        rhs = -g.reshape(-1)
        delta = inverse(-rhs)
        res = rhs - normal(delta) - damping * delta
        goal = tol * float(rhs.norm())
        z = inverse(-res)
        p, rz = z.clone(), float(res @ z)
        for _ in range(steps):
            if float(res.norm()) <= goal or rz <= 0:
                break
            q = normal(p) + damping * p
            pq = float(p @ q)
            if not pq > 0:  # round-off has left no descent along p
                break
            alpha = rz / pq
            delta = delta + alpha * p
            res = res - alpha * q
            z = inverse(-res)
            rz, before = float(res @ z), rz
            p = z + (rz / before) * p
        return delta

    return solve


#: the normal equations of a J (J^T J and its Cholesky factor) are begun only while the time limit leaves at least
#: this share of the time J took to form: they took 0.3-0.75 of it on LeNet (`python benchmarks/attack_speed.py --only
#: jacobian`: J 3.1 s, J^T J 1.0 s and its factor 0.2 s on two threads through srht b = d/2)
NORMAL_SHARE = 0.5


#: under a deadline a J is timed over at least this many batches of columns after its first (which also builds the
#: graph) and this share of its columns before its pace decides whether it can end in time (the DLG LeNet through
#: srht b = d/2, one thread: a J of 3.2-3.3 s read as 1.7-6.4 s from two batches, 1.7-3.5 s from a sixteenth of its
#: columns; ``python benchmarks/attack_speed.py --only jacobian``)
PACE_BATCHES, PACE_SHARE = 2, 1 / 16


def gram_rank(A: torch.Tensor) -> tuple[int, tuple[float, float]]:
    """(numerical rank, (s_max, s_min)) of J from its Gram matrix A = J^T J: eigenvalues above
    lambda_max * n * eps (singular values above s_max * sqrt(n * eps); below that the Gram matrix's round-off
    hides them)."""
    lam = torch.linalg.eigvalsh(A).clamp_min(0)
    top = float(lam[-1])
    rank = int((lam > top * A.shape[0] * torch.finfo(A.dtype).eps).sum()) if top > 0 else 0
    return rank, (top ** 0.5, float(lam[0]) ** 0.5)


def steps_note(record: dict, steps: bool = False) -> str:
    """The accepted steps of a run's ``gauss_newton`` record in a few words: ``15 Gauss-Newton on 1 Jacobian``
    (``steps``: ``15 Gauss-Newton steps on 1 Jacobian``; ``4 Gauss-Newton`` for a record that predates the chord
    steps and does not count its Jacobians)."""
    n, jacobians = record["accepted"], record.get("jacobians")
    said = f"{n} Gauss-Newton" + (f" step{'s' if n != 1 else ''}" if steps else "")
    return said if jacobians is None else f"{said} on {jacobians} Jacobian{'s' if jacobians != 1 else ''}"


def levenberg_marquardt(forward, y: torch.Tensor, x: torch.Tensor, labels, *, tol: float, scale: float,
                        deadline: float = math.inf, steps: int = STEPS, threads: int | None = None,
                        chord: bool = True, on_step: Callable[[float], None] | None = None,
                        on_columns: Callable[[int, int], None] | None = None, chunk: int | None = None,
                        ahead: int = 1) -> Refined:
    """Gauss-Newton steps with Marquardt's damping on ||forward(x, labels) - y||^2 from ``x``.

    Each round forms J, takes one damped step and then chord steps on the same J and factor (the module's
    docstring; ``chord=False``: none, one step a J).  Stops at L_R / ``scale`` <= :data:`FLOOR`, or below
    ``tol`` once a round cuts L_R less than tenfold (``tolerance``); when :data:`TRIALS` dampings
    of one J do not lower L_R (``tolerance`` below ``tol``, else ``stalled``), or two rounds in a row cut it
    less than :data:`SLOW`-fold (``stalled``); at ``deadline``
    (``time.perf_counter()`` seconds; ``time-limit``); at a non-finite residual
    (``diverged``); or after ``steps`` rounds.  J is formed on torch's threads as they are, its normal equations
    solved on ``threads`` (None: the same).  ``on_step(L_R)`` is called after each round (a progress bar's
    update), ``on_columns(k, n)`` as each J (or its sketch) has k of its n columns; ``chunk`` columns a batched pass
    (None: :data:`CHUNK`; :func:`columns_per_pass` fits it to the sizes).

    Under a deadline a J is timed over :data:`PACE_BATCHES` batches of columns after its first (which also builds
    the graph) and over :data:`PACE_SHARE` of its columns at least: where, at that pace, its remaining columns and,
    for a held J, its normal equations (:data:`NORMAL_SHARE` of its time) would end after the deadline, it stops
    there (``time-limit``, :attr:`Refined.foreseen` its seconds) rather than when the deadline comes; for the first
    J the time left must also hold ``ahead`` - 1 more J with its normal equations (``ahead=2``: a round and the
    next J, where the steps are taken because the time limit can pay for them).
    """
    return _Marquardt(forward, y, x, labels, tol=tol, scale=scale, deadline=deadline, threads=threads, chord=chord,
                      on_step=on_step, on_columns=on_columns, chunk=chunk).run(steps, ahead)


class _Marquardt:
    """The state of :func:`levenberg_marquardt`'s rounds: the iterate and its residual, the damping, the last J's
    normal equations and where they were formed."""

    def __init__(self, forward, y: torch.Tensor, x: torch.Tensor, labels, *, tol: float, scale: float,
                 deadline: float, threads: int | None, chord: bool, on_step: Callable[[float], None] | None,
                 on_columns: Callable[[int, int], None] | None, chunk: int | None):
        self.t0 = time.perf_counter()
        self.forward, self.labels, self.tol, self.scale, self.deadline = forward, labels, tol, scale, deadline
        self.chord, self.on_step, self.on_columns, self.chunk = chord, on_step, on_columns, chunk
        self.y = y.detach().reshape(-1)
        self.r = residual(forward, self.y, x, labels)
        self.loss = float(self.r @ self.r)
        self.out = Refined(x=x.detach().clone(), start_loss=self.loss)
        self.mu, self.slow = DAMPING, 0
        self.A: torch.Tensor | None = None  #: the last J's J^T J (or its sketch's)
        self.at = (self.out.x, self.loss)  #: the point of the last J and L_R there
        self.algebra = threads or torch.get_num_threads()
        self.held = self.y.numel() * x.numel() <= MAX_HELD

    def halt(self) -> bool:
        return halt_reason(self.deadline) is not None

    def room(self, formed: float) -> bool:
        """Whether the time left allows the normal equations of a J whose formation began at ``formed``."""
        now = time.perf_counter()
        return self.deadline - now >= NORMAL_SHARE * (now - formed)

    def run(self, steps: int, ahead: int) -> Refined:
        out = self.out
        while True:
            if not math.isfinite(self.loss):
                out.stop = "diverged"
                break
            if self.loss / self.scale <= FLOOR:
                out.stop = "tolerance"
                break
            if out.steps >= steps:
                break
            if self.halt():
                out.stop = halt_reason(self.deadline) or "time-limit"
                break
            pair = self.normal(out.x, more=ahead - 1 if out.steps == 0 else 0)
            if pair is None or self.halt():  # cut short, or no time left for the normal equations
                out.stop = halt_reason(self.deadline) or "time-limit"
                break
            start = self.round(*pair)
            del pair  # J, or the graph its products went through
            out.rounds.append(self.loss)
            if self.on_step is not None:
                self.on_step(self.loss)
            stop = self.verdict(start)
            if stop is not None:
                out.stop = stop
                break
        self.rank()
        out.seconds = time.perf_counter() - self.t0
        return out

    def round(self, A: torch.Tensor, jt: Product, exact: Product | None) -> float:
        """One round on a J's normal equations: a damped step (its damping raised tenfold until one lowers L_R,
        up to :data:`TRIALS`), then chord steps on the same J and factor; returns L_R at the round's start."""
        out = self.out
        self.A, self.at = A, (out.x, self.loss)

        def factor(damping: float) -> Product:
            return _factor(A, damping) if exact is None else _refined(A, damping, exact)

        with torch_threads(self.algebra):
            g = jt(self.r)
            level = float(A.diagonal().mean()) or 1.0
            out.steps += 1
            start = self.loss
            solve = self.damped(factor, g, level, jt)
            # chord steps after an accepted step: this J and factor, the new residual, until one cuts L_R less
            # than CHORD_GAIN-fold or not at all
            while self.chord and solve is not None and self.loss / self.scale > FLOOR \
                    and time.perf_counter() < self.deadline and not stop_requested():
                trial = out.x + solve(jt(self.r)).view_as(out.x)
                r_new = residual(self.forward, self.y, trial, self.labels)
                new = float(r_new @ r_new)
                if not (math.isfinite(new) and new < self.loss):
                    break
                gain, out.x, self.r, self.loss = self.loss / new, trial, r_new, new
                out.losses.append(self.loss)
                out.chord += 1
                if gain < CHORD_GAIN:
                    break
        return start

    def damped(self, factor: Callable[[float], Product], g: torch.Tensor, level: float, jt: Product) -> Product | None:
        """The accepted damped step's solve (the damping then lowered tenfold), or None where no damping tried
        lowered L_R before the deadline."""
        out = self.out
        for _ in range(TRIALS):
            solve = factor(self.mu * level)
            trial = out.x + solve(g).view_as(out.x)
            r_new = residual(self.forward, self.y, trial, self.labels)
            new = float(r_new @ r_new)
            path = [(trial, r_new, new)]
            if self.chord and math.isfinite(new) and new >= self.loss:  # perhaps across a curved valley
                path += self.watched(trial, r_new, new, self.loss, solve, jt)
            trial, r_new, new = path[-1]
            if math.isfinite(new) and new < self.loss:
                out.x, self.r, self.loss = trial, r_new, new
                out.losses += [point[2] for point in path]
                out.chord += len(path) - 1
                out.watched += len(path) > 1
                self.mu = max(self.mu / 10, 1e-15)
                return solve
            self.mu *= 10
            if time.perf_counter() >= self.deadline or stop_requested():
                break
        return None

    def watched(self, x: torch.Tensor, r: torch.Tensor, loss: float, below: float, solve: Product,
                jt: Product) -> list:
        """Chord steps from a step that raised L_R, up to :data:`WATCH` while each lowers it, ending at the first
        point below ``below`` (the round's start); [(point, residual, L_R), ...], empty where none gets there."""
        path: list = []
        for _ in range(WATCH):
            if time.perf_counter() >= self.deadline or stop_requested():
                break
            x = x + solve(jt(r)).view_as(x)
            r = residual(self.forward, self.y, x, self.labels)
            new = float(r @ r)
            if not (math.isfinite(new) and new < loss):
                break
            path.append((x, r, new))
            loss = new
            if new < below:
                return path
        return []

    def verdict(self, start: float) -> str | None:
        """The stop reason after a round that began at L_R ``start``, or None to go on."""
        loss = self.loss
        if loss == start:  # no damping of this J lowered L_R
            return "tolerance" if loss / self.scale <= self.tol else "time-limit" \
                if time.perf_counter() >= self.deadline else "interrupted" if stop_requested() else "stalled"
        if loss / self.scale <= self.tol and start / loss < 10:  # the round no longer converged quadratically
            return "tolerance"
        self.slow = self.slow + 1 if start / loss < SLOW else 0  # the whole round's gain
        return "stalled" if self.slow == 2 else None

    def rank(self) -> None:
        """The numerical rank of J where the steps ended: of the last J, formed again at the last iterate where
        they converged after it moved, and only while time is left."""
        out = self.out
        if out.stop == "tolerance" and (self.A is None or self.at[0] is not out.x):
            pair = self.normal(out.x)  # without time for it: no rank (the last J was formed elsewhere)
            self.A = None if pair is None else pair[0]
            if self.A is not None:
                self.at = (out.x, self.loss)
            del pair
        if self.A is not None and not self.halt():
            with torch_threads(self.algebra):
                out.rank, out.singular = gram_rank(self.A)
            out.rank_loss = self.at[1]

    def normal(self, point: torch.Tensor, more: int = 0) -> tuple[torch.Tensor, Product, Product | None] | None:
        """(A, u -> J^T u, exact) at ``point``: A = J^T J from J where it can be held (:data:`MAX_HELD`) and exact
        None; else A = (S J)^T (S J) and ``exact`` J^T J's product (:func:`sketched_normal_equations`); None where
        the deadline or Ctrl-C cut J short, where at its columns' pace J and its normal equations (and ``more`` J
        after them) would end after the deadline, or where no room was left for J^T J."""
        formed = time.perf_counter()
        n = point.numel()
        first = last = (0.0, 0)  # (time, columns formed) after the first batch and after the latest
        batches = 0
        # J^T J and its factor after a held J; from products, J^T J is formed
        share = NORMAL_SHARE if self.held else 0.0
        deadline = self.deadline

        def done(k: int) -> None:
            nonlocal first, last, batches
            batches += 1
            last = (time.perf_counter(), k)
            if batches == 1:
                first = last
            if self.on_columns is not None:
                self.on_columns(k, n)

        def stop() -> bool:
            if self.halt():
                return True
            (t1, k1), (t2, k2) = first, last
            if not math.isfinite(deadline) or batches <= PACE_BATCHES or k2 - k1 < n * PACE_SHARE:
                return False
            per = (t2 - t1) / (k2 - k1)  # seconds a column, after the first batch
            whole, now = per * n, time.perf_counter()
            if now + per * (n - k2) + share * whole + more * (1 + share) * whole <= deadline:
                return False
            self.out.foreseen = whole
            return True

        try:
            if not self.held:
                return sketched_normal_equations(self.forward, point, self.labels, chunk=self.chunk, stop=stop,
                                                 done=done, threads=self.algebra)
            J = jacobian(self.forward, point, self.labels, chunk=self.chunk, stop=stop, done=done)
        except Stopped:
            return None
        if not self.room(formed):
            return None
        with torch_threads(self.algebra):
            return gram(J), J.T.matmul, None

__all__ = ["jacobian", "products", "normal_equations", "sketched_normal_equations", "count_sketch", "SKETCH_ROWS",
           "PCG_STEPS", "PCG_TOL", "columns_per_pass", "BATCH_BYTES", "transpose_graph", "residual",
           "halved_step", "Stopped", "CHUNK",
           "too_large", "levenberg_marquardt", "steps_note", "gram_rank", "Refined",
           "MAX_UNKNOWNS", "MAX_ENTRIES", "MAX_WORK", "MAX_HELD", "STEPS", "CHORD_GAIN", "DAMPING", "TRIALS", "WATCH",
           "FLOOR", "SLOW", "PACE_BATCHES", "PACE_SHARE", "CANNOT_FORM", "why_not_formed"]
