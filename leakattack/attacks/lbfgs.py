"""L-BFGS with a strong-Wolfe line search, over R independent problems evaluated together.

The iteration is torch.optim.LBFGS's with ``max_iter=1`` per step (Nocedal & Wright,
Numerical Optimization, 2nd ed., Alg. 7.5 with the line search of Alg. 3.5/3.6 as
ported from minFunc by torch): the same first step min(1, 1/||g||_1)·lr, the same
curvature test s^T y > 1e-10, the same scaling gamma = s^T y / y^T y, the same
line-search conditions (c1 = 1e-4, c2 = 0.9) and cubic interpolation.  Two things
differ, neither changes the iterates:

* **One evaluation per accepted point.**  The point the line search accepts is
  one it has evaluated, so its loss and gradient are returned with it; torch's
  step evaluates the objective again at x_{k+1} before the next step.
* **The compact representation** of the inverse Hessian (Byrd, Nocedal &
  Schnabel, "Representations of quasi-Newton matrices and their use in limited
  memory methods", Math. Prog. 63, 1994, Thm 2.2) instead of the two-loop
  recursion: two matrix products over the stored pairs instead of 2m Python-level
  vector operations.  It is the same matrix, so the same direction up to
  round-off; :func:`two_loop_direction` is the recursion, for comparison
  (``direction="two-loop"`` reproduces torch's iterates bit for bit in float64).

Scalars of the line search (losses, directional derivatives, step lengths) are
Python floats, i.e. double precision whatever the dtype of the variables.

Every step of every problem is a generator that yields trial points and receives
their evaluations; :meth:`LBFGS.step` runs the generators of all problems side by
side and evaluates their trial points in one batched call, so restarts share each
evaluation while their line searches stay independent.
"""

from __future__ import annotations

import math
from typing import Callable, Generator, Sequence

import torch

#: torch's L-BFGS keeps a curvature pair only when s^T y exceeds this (absolute)
CURVATURE_MIN = 1e-10
#: the line search's evaluations per step: torch's max_eval=25 less the evaluation at x_k
MAX_LINE_SEARCH = 24
DIRECTIONS = ("compact", "two-loop")

#: one evaluation: (objective, flat gradient, whatever the caller attaches, e.g. the unweighted loss)
Evaluation = tuple[float, torch.Tensor, object]
#: evaluate(rows, Z) -> (objectives, gradients (k, n), attachments) at the k points Z of problems ``rows``
BatchEvaluate = Callable[[list, torch.Tensor], tuple[list, torch.Tensor, list]]


def cubic_minimizer(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                    bounds: tuple[float, float] | None = None) -> float:
    """Minimiser of the cubic through (x1, f1, g1), (x2, f2, g2), clipped to ``bounds`` (minFunc's polyinterp)."""
    if bounds is not None:
        lo, hi = bounds
    else:
        lo, hi = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(pos, lo), hi)
    return (lo + hi) / 2.0


def strong_wolfe(x: torch.Tensor, t: float, d: torch.Tensor, f: float, g: torch.Tensor, aux, gtd: float, *,
                 c1: float = 1e-4, c2: float = 0.9, tolerance_change: float = 1e-9,
                 max_ls: int = MAX_LINE_SEARCH) -> Generator[torch.Tensor, Evaluation, tuple]:
    """Line search for a step t along d satisfying the strong Wolfe conditions (Nocedal & Wright, Alg. 3.5/3.6).

    A generator: it yields trial points ``x + t d`` and is sent their evaluations
    (f, g, aux); it returns ``(f, g, aux, t, evaluations)`` of the accepted step,
    which is always one of the evaluated points (or t = 0, the start).  The
    branches are torch's ``_strong_wolfe``, step for step, where every trial is finite;
    a trial whose value is not finite fails Armijo's condition, is never the lowest
    point, and is bisected towards the finite end (minFunc's backtracking), where torch
    extrapolates past it and can return it.
    """
    d_norm = float(d.abs().max())
    f_new, g_new, aux_new = yield x.add(d, alpha=t)
    evals = 1
    gtd_new = float(g_new.dot(d))

    t_prev, f_prev, g_prev, aux_prev, gtd_prev = 0.0, f, g, aux, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if not math.isfinite(f_new) or f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_aux, bracket_gtd = [g_prev, g_new], [aux_prev, aux_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g, bracket_aux = [t], [f_new], [g_new], [aux_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_aux, bracket_gtd = [g_prev, g_new], [aux_prev, aux_new], [gtd_prev, gtd_new]
            break
        # extrapolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = cubic_minimizer(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, aux_prev, gtd_prev = tmp, f_new, g_new, aux_new, gtd_new
        f_new, g_new, aux_new = yield x.add(d, alpha=t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1

    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g, bracket_aux = [0.0, t], [f, f_new], [g, g_new], [aux, aux_new]
        # like torch, no derivative is kept for this bracket: zooming stops at once (ls_iter == max_ls)

    # zoom: refine the bracket until a point satisfies the conditions
    insuf_progress = False
    low_pos, high_pos = (0, 1) if _rank(bracket_f[0]) <= _rank(bracket_f[-1]) else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        if all(map(math.isfinite, [*bracket_f, *bracket_gtd])):
            t = cubic_minimizer(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        else:  # a trial that was not finite: halve the bracket towards the finite end (minFunc's backtracking)
            t = (bracket[0] + bracket[1]) / 2
        # an interpolate too close to an end of the bracket is moved 0.1 of its length inside
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new, aux_new = yield x.add(d, alpha=t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1

        if not math.isfinite(f_new) or f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            # Armijo not satisfied, or not below the lowest point: the new point is the high end
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_aux[high_pos], bracket_gtd[high_pos] = g_new, aux_new, gtd_new
            low_pos, high_pos = (0, 1) if _rank(bracket_f[0]) <= _rank(bracket_f[1]) else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                # the old low end becomes the high end
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_aux[high_pos] = bracket_g[low_pos], bracket_aux[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_aux[low_pos], bracket_gtd[low_pos] = g_new, aux_new, gtd_new

    return bracket_f[low_pos], bracket_g[low_pos], bracket_aux[low_pos], bracket[low_pos], evals


def _rank(f: float) -> float:
    """An objective value as the line search orders its points: a value that is not finite above every other."""
    return f if math.isfinite(f) else math.inf


def two_loop_direction(g: torch.Tensor, s: Sequence[torch.Tensor], y: Sequence[torch.Tensor], gamma: float
                       ) -> torch.Tensor:
    """-H g by the two-loop recursion (Nocedal & Wright, Alg. 7.4) over pairs oldest first, H0 = gamma I.

    The operations are torch.optim.LBFGS's, in its order, so its directions are reproduced bit for bit.
    """
    rho = [1.0 / float(yi.dot(si)) for si, yi in zip(s, y)]
    alpha = [0.0] * len(s)
    q = g.neg()
    for i in range(len(s) - 1, -1, -1):
        alpha[i] = float(s[i].dot(q)) * rho[i]
        q.add_(y[i], alpha=-alpha[i])
    r = torch.mul(q, gamma)
    for i in range(len(s)):
        beta = float(y[i].dot(r)) * rho[i]
        r.add_(s[i], alpha=alpha[i] - beta)
    return r


class History:
    """The last ``size`` curvature pairs (s_i, y_i) of one problem, with the inner products the compact form needs.

    The pairs live in a ring of slots, interleaved as rows s_0, y_0, s_1, y_1, ...
    of one (2·size, n) matrix W, so that W times a vector is one matrix-vector product.
    ``SY[i, j] = s_i^T y_j`` and ``YY[i, j] = y_i^T y_j`` are kept per slot.
    """

    def __init__(self, size: int, n: int, dtype: torch.dtype, device):
        self.size, self.count, self.oldest = int(size), 0, 0
        self.W = torch.zeros(self.size, 2, n, dtype=dtype, device=device)
        self.SY = torch.zeros(self.size, self.size, dtype=torch.float64, device=device)
        self.YY = torch.zeros(self.size, self.size, dtype=torch.float64, device=device)
        self.gamma = 1.0  #: H0 = gamma I, gamma = s^T y / y^T y of the newest pair (1 before any)

    def _rows(self) -> torch.Tensor:
        return self.W[: self.count].view(2 * self.count, -1)

    def _chronological(self, m: torch.Tensor) -> torch.Tensor:
        """A slot-indexed k x k matrix in chronological order (oldest first)."""
        if self.count < self.size or self.oldest == 0:
            return m[: self.count, : self.count]
        return torch.roll(m, shifts=(-self.oldest, -self.oldest), dims=(0, 1))

    def _chronological_vector(self, v: torch.Tensor) -> torch.Tensor:
        return v if self.count < self.size or self.oldest == 0 else torch.roll(v, -self.oldest)

    def pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The stored (s_i), (y_i), oldest first."""
        slots = [(self.oldest + i) % self.size for i in range(self.count)] if self.count == self.size \
            else list(range(self.count))
        return [self.W[i, 0] for i in slots], [self.W[i, 1] for i in slots]

    def push(self, s: torch.Tensor, y: torch.Tensor, ys: float, yy: float) -> None:
        """Store the pair (s, y) (replacing the oldest when full); s^T y and y^T y are given."""
        if self.count < self.size:
            slot = self.count
            self.count += 1
        else:
            slot = self.oldest
            self.oldest = (self.oldest + 1) % self.size
        self.W[slot, 0].copy_(s)
        self.W[slot, 1].copy_(y)
        # inner products of the new pair with every stored one (itself included), as matrix-vector
        # products with W (a (2k, n) x (n, 2) product takes a path 2-4x slower here)
        k = self.count
        with_y = (self._rows() @ y).to(torch.float64).view(k, 2)
        self.SY[slot, :k] = (self.W[:k, 1] @ s).to(torch.float64)  # s_new^T y_j
        self.SY[:k, slot] = with_y[:, 0]  # s_j^T y_new
        self.YY[slot, :k] = with_y[:, 1]
        self.YY[:k, slot] = with_y[:, 1]
        self.SY[slot, slot], self.YY[slot, slot] = ys, yy
        self.gamma = ys / yy

    def direction(self, g: torch.Tensor) -> torch.Tensor:
        """-H g with H = gamma I + [S gamma Y] M [S gamma Y]^T (Byrd, Nocedal & Schnabel 1994, Thm 2.2)."""
        if self.count == 0:
            return torch.mul(g.neg(), self.gamma)
        k, gamma = self.count, self.gamma
        rows = self._rows()
        p = (rows @ g).to(torch.float64).view(k, 2)
        a = self._chronological_vector(p[:, 0])  # S^T g
        b = self._chronological_vector(p[:, 1])  # Y^T g
        sy = self._chronological(self.SY)
        R = torch.triu(sy)
        YY = self._chronological(self.YY)
        u = torch.linalg.solve_triangular(R, a.unsqueeze(1), upper=True)
        inner = torch.diagonal(sy).unsqueeze(1) * u + gamma * (YY @ u) - gamma * b.unsqueeze(1)
        top = torch.linalg.solve_triangular(R.T, inner, upper=False)
        coef = torch.stack([top.squeeze(1), -gamma * u.squeeze(1)], 1)  # chronological (k, 2)
        if self.count == self.size and self.oldest:
            coef = torch.roll(coef, self.oldest, dims=0)  # back to slot order
        hg = torch.addmv(g, rows.T, coef.reshape(-1).to(g.dtype), beta=gamma)
        return hg.neg_()


class _Problem:
    """One problem's L-BFGS state: its history, last direction, step and gradient."""

    def __init__(self, history: int, n: int, dtype, device):
        self.history = History(history, n, dtype, device)
        self.d: torch.Tensor | None = None
        self.t = 0.0
        self.g_prev: torch.Tensor | None = None
        self.kept_at: float | None = None  #: the lr of the last step whose line search kept its start


class LBFGS:
    """L-BFGS steps with a strong-Wolfe line search for R independent problems (one row of X each).

    ``step`` takes the current points with their evaluations and returns the next
    points with theirs: the line search evaluated them, nothing is evaluated twice.
    ``lr`` may be changed between steps (a schedule); ``evaluations`` counts the
    objective evaluations; a problem with no descent direction left (its gradient
    zero, or not a descent direction) is added to ``stalled`` and stays in place; one whose
    line search kept its start (t = 0) twice at the same ``lr`` is added to ``stuck``: it
    stores no curvature pair, so every later step at that ``lr`` repeats the same search.
    """

    evaluates = True

    def __init__(self, lr: float = 1.0, *, history: int = 100, max_line_search: int = MAX_LINE_SEARCH,
                 direction: str = "compact"):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        self.lr, self.history, self.max_line_search = float(lr), int(history), int(max_line_search)
        self.direction = direction
        self.problems: dict[int, _Problem] = {}
        self.evaluations = 0
        self.stalled: set[int] = set()
        self.stuck: set[int] = set()

    def _direction(self, p: _Problem, g: torch.Tensor) -> torch.Tensor:
        if self.direction == "compact":
            return p.history.direction(g)
        s, y = p.history.pairs()
        return two_loop_direction(g, s, y, p.history.gamma)

    def _problem_step(self, row: int, x: torch.Tensor, f: float, g: torch.Tensor, aux):
        p = self.problems.get(row)
        if p is None:
            p = self.problems[row] = _Problem(self.history, x.numel(), x.dtype, x.device)
        if not bool(g.abs().max() > 0):  # torch: tolerance_grad = 0 reached, no step
            self.stalled.add(row)
            return x, f, g, aux
        if p.d is None:
            d = g.neg()
            t = min(1.0, 1.0 / float(g.abs().sum())) * self.lr
        else:
            assert p.g_prev is not None  # set with p.d by the first step
            y = g.sub(p.g_prev)
            s = p.d.mul(p.t)
            ys = float(y.dot(s))
            if ys > CURVATURE_MIN:
                p.history.push(s, y, ys, float(y.dot(y)))
            d = self._direction(p, g)
            t = self.lr
        p.g_prev = g
        gtd = float(g.dot(d))
        p.d, p.t = d, t
        if gtd > 0.0:  # not a descent direction: torch's step ends here without moving
            self.stalled.add(row)
            return x, f, g, aux
        f_new, g_new, aux_new, t, evals = yield from strong_wolfe(x, t, d, f, g, aux, gtd,
                                                                  max_ls=self.max_line_search)
        p.t = t
        if t == 0.0:  # the search kept its start: the same lr next time repeats it exactly
            if p.kept_at == self.lr:
                self.stuck.add(row)
            p.kept_at = self.lr
        else:
            p.kept_at = None
        return x.add(d, alpha=t), f_new, g_new, aux_new

    def step(self, rows: list, X: torch.Tensor, F: list, G: torch.Tensor, aux: list, evaluate: BatchEvaluate):
        """One step of each problem in ``rows`` from X (k, n) with objectives F, gradients G and attachments aux.

        Returns (X_next, F_next, G_next, aux_next); the trial points of all problems
        are evaluated together by ``evaluate(rows, Z)``.
        """
        k = len(rows)
        out: list = [None] * k
        pending: dict[int, tuple] = {}
        for i, row in enumerate(rows):
            gen = self._problem_step(row, X[i], F[i], G[i], aux[i])
            try:
                pending[i] = (gen, next(gen))
            except StopIteration as stop:
                out[i] = stop.value
        while pending:
            order = list(pending)
            Fe, Ge, Ae = evaluate([rows[i] for i in order], torch.stack([pending[i][1] for i in order]))
            self.evaluations += len(order)
            for j, i in enumerate(order):
                gen = pending[i][0]
                try:
                    pending[i] = (gen, gen.send((Fe[j], Ge[j], Ae[j])))
                except StopIteration as stop:
                    out[i] = stop.value
                    del pending[i]
        return (torch.stack([o[0] for o in out]), [o[1] for o in out], torch.stack([o[2] for o in out]),
                [o[3] for o in out])


__all__ = ["LBFGS", "History", "strong_wolfe", "cubic_minimizer", "two_loop_direction", "CURVATURE_MIN",
           "MAX_LINE_SEARCH", "DIRECTIONS"]
