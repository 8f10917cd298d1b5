"""COMPSGD (Kasiviswanathan, "SGD with low-dimensional gradients", Algorithm COMPSGD) as a federated protocol.

Round t is one SGD step taken through a fresh random projection Phi_t (m_t x d, from the shared seed):

    a. client c sends theta_c = Phi_t g_c, its projected gradient on its batch (m_t floats);
    b. the server averages theta = mean_c theta_c and steps in the projected space, z = Phi_t w_t - eta theta;
    c. it projects z onto Phi_t C (theta_t = Pi_{Phi_t C}(z)) and lifts back: w_{t+1} in {w in C : Phi_t w = theta_t}.

C is an l1 constraint on the weights: one l1 ball of radius r = ``l1_scale`` ||w_1||_1 over all of w
(``projection_blocks`` = global), or one ball per layer, r_i = ``l1_scale`` ||w_{1,i}||_1, with Phi_t
block-diagonal, one m_i x d_i block per layer (``projection_blocks`` = layer, the paper's MLP experiment,
m_i = d_i/10).  m_i = max(1, round(``sketch_ratio`` d_i)).  Phi_t is any sketch of leakattack.sketch;
the paper's are ``gaussian`` (i.i.d. N(0, 1/m_t)) and ``sparse`` (sparse JL, Kane & Nelson).
eta = ``local_lr`` x ``global_lr`` (FedAvg with K = 1 is SGD with that step).  K must be 1: COMPSGD
sends gradients, not K-step updates.

The solver.  Steps c's projection and lift are one problem: for any minimiser
w* of min_{w in C} ||Phi_t w - z||^2, Phi_t w* is the point of Phi_t C closest to z, i.e. theta_t,
and w* lies in C, so w* is in S_t.  It is solved by projected FISTA (Beck & Teboulle 2009) with
backtracking on the step 1/L (L from a power-iteration estimate of ||Phi_i||^2, doubled until the
quadratic upper bound holds) and the gradient restart of O'Donoghue & Candes (2015); the Euclidean
projection onto the l1 ball is the sort-and-threshold algorithm of Duchi et al. (2008).  It runs per
block (the problem separates over the blocks), in the model's dtype, warm-started at w_t.  Started at
w_t, the iterates stay in w_t + rowspace(Phi_t^T) while the ball is inactive, so the lift is the
element of S_t nearest to w_t: w_t - eta Phi_t^T (Phi_t Phi_t^T)^{-1} Phi_t g.  It stops when an
iteration moves w by less than ``LIFT_TOL`` (float64; 1e-5 in float32) times its distance from w_t
or than the dtype's resolution of w, or after ``LIFT_MAX_ITER`` iterations.

The attacker sees theta_c = Phi_t g_c of one round (Kasiviswanathan's footnote 4: g cannot be
recovered from Phi g without structure; the model's own structure is that structure here).
"""

from __future__ import annotations

import math

import torch

from leakattack.sketch import get_sketch
from leakattack.sketch.base import Sketch

from ..oracle import param_slices
from .base import Protocol, round_seed

PROJECTION_BLOCKS = ("layer", "global")
#: the lift's relative stopping tolerance (float64) and iteration cap (FISTA, per block)
LIFT_TOL, LIFT_MAX_ITER = 1e-7, 500


def project_l1_ball(v: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection of v onto {x : ||x||_1 <= radius} (Duchi, Shalev-Shwartz, Singer, Chandra, ICML 2008,
    Fig. 1)."""
    norm = float(v.abs().sum())
    if norm <= radius or not math.isfinite(norm):  # a non-finite v has no projection: it is left for the caller
        return v  # to find (training stops as diverged where the weights are not finite)
    if radius <= 0:
        return torch.zeros_like(v)
    u = v.abs().flatten().sort(descending=True).values
    css = u.cumsum(0)
    j = torch.arange(1, u.numel() + 1, dtype=v.dtype, device=v.device)
    above = torch.nonzero(u - (css - radius) / j > 0)
    # rho = 0 always qualifies (u_1 - (u_1 - radius) = radius > 0), though a radius below u_1's round-off rounds it to 0
    rho = int(above.max()) if above.numel() else 0
    theta = (css[rho] - radius) / (rho + 1)
    return v.sign() * (v.abs() - theta).clamp_min(0)


def power_estimate(op, like: torch.Tensor, iters: int = 10) -> float:
    """A lower estimate of ||A||^2 = lambda_max(A^T A) by ``iters`` power iterations from a fixed start."""
    v = torch.randn(op.d, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(like)
    for _ in range(iters):
        v = op.adjoint(op.apply(v))
        n = v.norm()
        if float(n) == 0:
            return 0.0
        v = v / n
    return float(op.apply(v).pow(2).sum())


def lift_l1(op, z: torch.Tensor, w0: torch.Tensor, radius: float, *, tol: float | None = None,
            max_iter: int = LIFT_MAX_ITER) -> tuple[torch.Tensor, int]:
    """A minimiser of f(w) = ||A w - z||^2 / 2 over the l1 ball of ``radius`` (A = ``op``), from w0: (w, iterations).

    FISTA with backtracking (Beck & Teboulle 2009, Sec. 4: L doubles until the quadratic upper bound
    holds, starting from a power-iteration estimate of ||A||^2) and the gradient restart of O'Donoghue &
    Candes (2015), in the dtype of z; ``tol`` defaults to LIFT_TOL in float64 and 1e-5 in lower precision.
    """
    if tol is None:
        tol = LIFT_TOL if z.dtype == torch.float64 else 1e-5
    slack = 64 * torch.finfo(z.dtype).eps  # rounding of f in the model's dtype

    def f(Av):
        return 0.5 * float((Av - z).double().pow(2).sum())

    L = 1.1 * power_estimate(op, z)
    x = project_l1_ball(w0, radius)
    if L <= 0:
        return x, 0
    L_max = L * 2.0 ** 40  # the backtracking cannot run away on rounding
    y, s = x, 1.0
    for it in range(1, max_iter + 1):
        Ay = op.apply(y)
        grad, fy = op.adjoint(Ay - z), f(Ay)
        while True:  # backtracking: f(x+) <= f(y) + <grad, x+ - y> + L/2 ||x+ - y||^2
            x_new = project_l1_ball(y - grad / L, radius)
            step = (x_new - y).double()
            bound = fy + float(grad.double() @ step) + 0.5 * L * float(step @ step)
            if f(op.apply(x_new)) <= bound + slack * (abs(bound) + fy) or L >= L_max:
                break
            L *= 2
        moved = float((x_new - x).norm())
        if float((y - x_new) @ (x_new - x)) > 0:  # restart: the momentum points uphill
            y, s = x_new, 1.0
        else:
            s_new = (1 + math.sqrt(1 + 4 * s * s)) / 2
            y, s = x_new + ((s - 1) / s_new) * (x_new - x), s_new
        x = x_new
        # converged: relative to the step taken, or at the resolution of the dtype
        if moved <= max(tol * float((x - w0).norm()), 4 * torch.finfo(x.dtype).eps * float(x.norm()), 1e-300):
            return x, it
    return x, max_iter


class BlockProjection(Sketch):
    """Phi = diag(Phi_1, ..., Phi_L): one sketch per block of coordinates (a layer), block i of size m_i x d_i."""

    kind = "block-projection"

    def __init__(self, blocks: list[slice], ops: list[Sketch], seed: int):
        super().__init__(d=blocks[-1].stop, b=sum(op.b for op in ops), seed=seed)
        self.blocks, self.ops = blocks, ops
        offs = [0]
        for op in ops:
            offs.append(offs[-1] + op.b)
        self.out_blocks = [slice(a, b) for a, b in zip(offs[:-1], offs[1:])]

    def _apply(self, v):
        return torch.cat([op.apply(v[..., s]) for op, s in zip(self.ops, self.blocks)], -1)

    def _adjoint(self, u):
        return torch.cat([op.adjoint(u[..., o]) for op, o in zip(self.ops, self.out_blocks)], -1)

    def to(self, device):
        for op in self.ops:
            op.to(device)
        return super().to(device)

    def describe(self) -> dict:
        kinds = sorted({op.kind for op in self.ops})
        return {"kind": kinds[0] if len(kinds) == 1 else "+".join(kinds), "d": self.d, "b": self.b, "seed": self.seed,
                "blocks": len(self.ops), "block_dims": [op.b for op in self.ops]}


def layer_blocks(victim) -> list[slice]:
    """Contiguous coordinate ranges of the model's layers (parameters grouped by their module)."""
    groups: dict[str, slice] = {}
    for name, s in param_slices(victim).items():
        mod = name.rsplit(".", 1)[0] if "." in name else name
        groups[mod] = slice(groups[mod].start, s.stop) if mod in groups else s
    return list(groups.values())


class CompSGD(Protocol):
    """Kasiviswanathan's COMPSGD: clients send Phi_t g (fresh Phi_t per round); the server steps, projects onto Phi_t C
    and lifts."""

    uses_sketch = True
    sends_gradient = True
    reads: tuple[str, ...] = ("sketch", "sketch_ratio", "sketch_params", "projection_blocks", "l1_scale")

    def __init__(self, victim, train_set, **spec):
        super().__init__(victim, train_set, **spec)
        whole = [slice(0, self.d)]
        self.blocks = layer_blocks(victim) if self.projection_blocks == "layer" else whole
        w1 = self.initial_weights()
        w1 = w1.detach().to("cpu", torch.float64)  # the same radii for a float32 (training) and float64 (attack) model
        scale = float(w1.abs().mean()) or 1.0
        # a block whose initial weights are all zero gets the ball of a block of typical weights
        self.radii = [self.l1_scale * (float(w1[s].abs().sum()) or scale * (s.stop - s.start)) for s in self.blocks]
        self._ops: dict = {}
        self.last_lift_iterations: list[int] = []

    @classmethod
    def spec_error(cls, spec):
        if spec.get("local_epochs", 0):
            return (f"{cls.name} sends one projected gradient per round, not a local epoch: --local-epochs must be 0, "
                    f"got {spec['local_epochs']}")
        if spec["local_steps"] != 1:
            return (f"{cls.name} sends one projected gradient per round: --local-steps must be 1, "
                    f"got {spec['local_steps']}")
        return None

    def block_dims(self) -> list[int]:
        """m_i = max(1, round(ratio d_i)) per block; d_i where the sketch is ``none`` (it keeps every coordinate)."""
        if self.sketch == "none":
            return [s.stop - s.start for s in self.blocks]
        return [max(1, int(math.floor(self.sketch_ratio * (s.stop - s.start) + 0.5))) for s in self.blocks]

    def operator(self, t, seed_offset=0):
        key = (t, seed_offset)
        if key not in self._ops:
            base = round_seed(self.seed, t) + seed_offset
            ops = [get_sketch(self.sketch, s.stop - s.start, m, seed=base * 1_000_003 + i, **self.sketch_params)
                   for i, (s, m) in enumerate(zip(self.blocks, self.block_dims()))]
            self._ops = {k: v for k, v in self._ops.items() if k[0] == t}  # keep only this round's operators
            self._ops[key] = BlockProjection(self.blocks, ops, base).to(self.device)
        return self._ops[key]

    def floats_per_client(self):
        return sum(self.block_dims())

    def step_size(self) -> float:
        return self.local_lr * self.global_lr

    # the client sends a projected gradient, not a K-step update
    def client_update(self, w, x, y, t, c, create_graph=False):
        return self.gradient(w, x, y, t, c, 0, create_graph)

    def attacker_update(self, w, x, y, steps=None):
        return self.attacker_gradient(w, x, y)

    def message_scale(self, steps: int = 1) -> float:
        return 1.0

    def server(self, w, t, deltas, messages):
        Phi = self.operator(t)
        theta = torch.stack(list(messages.values())).mean(0)
        z = Phi.apply(w) - self.step_size() * theta  # the SGD step in R^{m_t}
        out, iters = [], []
        for s, o, op, r in zip(self.blocks, Phi.out_blocks, Phi.ops, self.radii):
            wi, it = lift_l1(op, z[o], w[s], r)
            out.append(wi)
            iters.append(it)
        self.last_lift_iterations = iters
        return torch.cat(out)

    def describe(self) -> dict:
        return {**super().describe(), "l1_radii": self.radii, "block_dims": self.block_dims()}
