"""Measurements of the attack theory of Song, Wang, Yu, Zhang (ICML 2023), §7 and App. I–M, on real victims and
sketches.

Notation (the paper's, App. I): data x ∈ R^m (the unknowns), weights w ∈ R^d,
G(x) = ∇_w F(w, x) ∈ R^d, J(x) = ∂G/∂x ∈ R^{d×m} (the paper's pseudo-Hessian
Φ = Jᵀ, Def. 7.1), pseudo-kernel K = ΦᵀΦ = J Jᵀ ∈ R^{d×d}.  R is the sketch
(b×d), y = R g the observation, L_R(x) = ‖R G(x) − y‖² (R = I: L).

What is measured, and how it maps onto the paper:

* θ₁², θ₂² — extreme eigenvalues of the kernel on the *smaller* side of J
  (J Jᵀ if d ≤ m, else Jᵀ J; they share their nonzero spectrum).  When d ≤ m this
  is exactly λ_min/λ_max of the paper's d×d K.  When d > m (LeNet) the d×d K has
  d − m zero eigenvalues, Assumption J.3 fails, and θ₁² reported is the smallest
  of the m nonzero ones: the lower non-critical bound is then not implied by the paper.
* τ, γ₁, γ₂ — Assumption M.1 (‖R u − R v‖ ≤ τ‖u − v‖) and M.2 (γ₁ ≤ σ_i(Rᵀ) ≤ γ₂,
  i = 1..b).  For a linear R, τ = ‖R‖ = σ_max(R) = γ₂; Rᵀ (d×b) has b singular
  values, the σ_i(R), all positive when R has full row rank, so γ₁ > 0 even for b < d.
* ∇L_R = 2 Jᵀ Rᵀ (R G − y), hence ‖∇L_R‖² / L_R ∈ [4 λ_min(R K Rᵀ), 4 λ_max(R K Rᵀ)]
  ⊂ [4θ₁²γ₁², 4θ₂²γ₂²]: Lemma 7.7's (2θ₁γ₁, 2θ₂γ₂)-non-critical point, which for
  R = I (γ = 1) is (2θ₁, 2θ₂).  Theorem 7.4 / Lemma J.5 state (θ₁, θ₂) for R = I,
  dropping the factor 2 of ∇‖·‖² (the proof of L.1 writes ∇L = Φ(G − g)); both are measured where R = I
  (for a sketch the paper states only Lemma 7.7's bounds, and the literal fraction is None).
* Semi-smoothness (Def. 7.2, p = ½): Lemma J.4 proves a = 2(β + θ₂), b = β²
  (Theorem 7.4 prints b = β); Lemma M.3 prints B = τ²β but its proof bounds
  τ²‖G(y) − G(x)‖² ≤ τ²β²‖y − x‖², i.e. B = τ²β².  Both readings are measured.
* Theorem 7.5 / L.1 needs θ₁² > a θ₂ (p = ½).  With a = 2(β + θ₂) and β ≥ θ₂ ≥ θ₁
  this can never hold, so the paper's own constants give no rate; we report that and
  also the rate L.1 predicts from the tightest measured constants (a = 0, b = b*).

Everything here is a measurement over stated samples, not a proof.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call, grad, jvp, vjp, vmap

import targets

from ..config import ConfigError
from ..data import get_batch, get_dataset
from ..errors import quiet_jvp_setup
from ..metrics.uniqueness import rank_of
from ..seeds import torch_generator
from ..sketch import Sketch, get_sketch, is_identity, sketch_dim
from .analysis import (
    gd_rate_theorem_l1,
    lanczos_extremes,
    linear_rate,
    noncritical_constants_lemma77,
    semismooth_constants,
    semismooth_rhs,
)

# ---------------------------------------------------------------------------
# the targets the check runs on (small data so the Jacobian fits)
# ---------------------------------------------------------------------------

#: model -> (dataset, in_shape, batch size, dtype).  linreg: d = 16 weights, m = 4·16 = 64
#: unknowns, so d ≤ m (the paper's under-parametrised regime, §7.1) and K = J Jᵀ is 16×16.
CHECK_TARGETS = {
    "linreg": ("digits", (1, 4, 4), 4, torch.float64),
    "logreg": ("digits", (1, 8, 8), 1, torch.float64),
    "mlp": ("digits", (1, 14, 14), 1, torch.float64),
    "lenet": ("photos", (3, 32, 32), 1, torch.float32),
}
#: exact Jacobian when d·m is at most this many entries, else Lanczos on J products
EXACT_LIMIT = 60_000_000
#: default --samples per model, chosen so `check` stays within minutes on 2 CPU cores
DEFAULT_SAMPLES = {"linreg": 200, "logreg": 100, "mlp": 48, "lenet": 24}
#: default gradient-descent steps per model
DEFAULT_ITERATIONS = {"linreg": 400, "logreg": 300, "mlp": 200, "lenet": 150}


@dataclass
class Problem:
    """One attack instance: victim, sketch, truth x*, targets, observation y = R G(x*)."""

    victim: targets.Victim
    sketch: Sketch
    x_true: torch.Tensor
    labels: torch.Tensor
    y_obs: torch.Tensor
    dtype: torch.dtype

    def __post_init__(self):
        self.params = {n: p.detach() for n, p in self.victim.model.named_parameters()}
        self.d = self.victim.d
        self.m = self.x_true.numel()
        self.b = self.sketch.b

    def G(self, x):
        """∇_w F(w, x), flat (torch.func-transformable, unlike the autograd oracle)."""
        model, loss = self.victim.model, self.victim.loss
        gr = grad(lambda p: loss(functional_call(model, p, (x,)), self.labels))(self.params)
        return torch.cat([t.reshape(-1) for t in gr.values()])

    def RG(self, x):
        return self.sketch.apply(self.G(x))

    def L(self, x):
        """L_R(x) = ‖R G(x) − y‖²."""
        return (self.RG(x) - self.y_obs).pow(2).sum()

    def L_and_grad(self, x):
        x = x.detach().requires_grad_(True)
        val = self.L(x)
        (gx,) = torch.autograd.grad(val, x)
        return float(val.detach()), gx.detach()


def build_problem(model_name: str, sketch_kind: str, ratio: float, seed: int,
                  sketch_params: dict | None = None) -> Problem:
    """The check's attack instance: CHECK_TARGETS[model_name] at weights `seed`, sketch seed `seed`+1,
    b = sketch_dim(ratio, d)."""
    ds_name, in_shape, batch, dtype = CHECK_TARGETS[model_name]
    ds = get_dataset(ds_name)
    x, labels = get_batch(ds, 0, batch)
    if tuple(x.shape[1:]) != in_shape:
        x = torch.nn.functional.adaptive_avg_pool2d(x, in_shape[1:])
    victim = targets.get_model(model_name, num_classes=ds.num_classes, in_shape=in_shape, seed=seed).to(dtype=dtype)
    labels = victim.target(labels)  # a regression victim reads the class index as a real target
    x = x.to(dtype)
    d = victim.d
    if is_identity(sketch_kind):
        b = d
    else:
        b = sketch_dim(ratio, d)
        if b < 1:
            raise ConfigError(f"sketch ratio {ratio} gives b < 1 for d = {d}")
    sketch = get_sketch(sketch_kind, d, b, seed + 1, **(sketch_params or {}))
    prob = Problem(victim, sketch, x, labels, torch.empty(0), dtype)
    with torch.no_grad():
        prob.y_obs = prob.RG(x).detach()
    return prob


# ---------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------


def sketch_constants(sketch, generator: torch.Generator, k: int = 120) -> dict:
    """τ = γ₂ = σ_max(R), γ₁ = σ_min(Rᵀ) (the b singular values of R), exact when small, else Lanczos on R Rᵀ.
    An exact γ₁ at most max(b, d)·ε·γ₂ (float64's ε: the rule of numpy's matrix_rank) is the round-off of a 0 (R
    with fewer independent rows than b) and is taken as 0, so that Lemma 7.7's bounds and the worst ratios read it as
    the summary does; Lanczos's estimate, in float32, cannot tell such a 0 and is kept."""
    if is_identity(sketch.kind):
        return {"tau": 1.0, "gamma1": 1.0, "gamma2": 1.0, "sketch_method": "identity"}
    if sketch.b * sketch.d <= 4_000_000:
        s = torch.linalg.svdvals(sketch.to_dense().double())
        g1, g2, method = float(s[-1]), float(s[0]), "exact SVD"
        if rank_of(s, (sketch.b, sketch.d)) < s.numel():  # rank deficient: its smallest value is round-off of 0
            g1 = 0.0
    else:
        mv = lambda u: sketch.apply(sketch.adjoint(u.float())).double()  # noqa: E731
        lo, hi = lanczos_extremes(mv, sketch.b, k, generator)
        g1, g2, method = math.sqrt(lo), math.sqrt(hi), f"Lanczos ({k} steps) on R Rᵀ; γ₁ is an upper estimate"
    return {"tau": g2, "gamma1": g1, "gamma2": g2, "sketch_method": method}


def jacobian_T(prob: Problem, x: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """Jᵀ = (∂G/∂x)ᵀ as an (m, d) matrix, by batched JVPs over the coordinate basis."""
    f = lambda v: jvp(prob.G, (x,), (v.view_as(x),))[1]  # noqa: E731
    rows = []
    eye_cols = torch.eye(prob.m, dtype=prob.dtype)
    with quiet_jvp_setup():
        for i in range(0, prob.m, chunk):
            rows.append(vmap(f)(eye_cols[i:i + chunk]))
    return torch.cat(rows)


def _small_gram_eigs(A: torch.Tensor) -> np.ndarray:
    """Eigenvalues of the smaller Gram matrix of A (n1×n2): they are the squared singular values."""
    A = A.double()
    M = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return torch.linalg.eigvalsh(M).numpy()


def kernel_eigs(prob: Problem, x: torch.Tensor, generator: torch.Generator, lanczos_k: int = 60,
                exact_limit: int | None = None) -> dict:
    """Extreme eigenvalues at x of K = J Jᵀ and of the sketched kernel R K Rᵀ (both on their smaller side).

    Exact (a dense Jacobian) when d·m is at most ``exact_limit`` (default
    :data:`EXACT_LIMIT`), else Lanczos on Jacobian-vector products.
    """
    identity = is_identity(prob.sketch.kind)
    if prob.d * prob.m <= (EXACT_LIMIT if exact_limit is None else exact_limit):
        Jt = jacobian_T(prob, x)  # (m, d)
        ev = _small_gram_eigs(Jt)
        out = {"k_min": float(ev[0]), "k_max": float(ev[-1]), "method": "exact"}
        if identity:
            out.update(kr_min=out["k_min"], kr_max=out["k_max"])
        else:
            evr = _small_gram_eigs(prob.sketch.apply(Jt))  # (m, b) = (R J)ᵀ
            out.update(kr_min=float(evr[0]), kr_max=float(evr[-1]))
        return out
    # matrix-free: Lanczos on the smaller side of J (resp. R J)
    pull = vjp(prob.G, x)[1]
    Jv = lambda v: jvp(prob.G, (x,), (v.view_as(x),))[1]  # noqa: E731
    JTu = lambda u: pull(u)[0].reshape(-1)  # noqa: E731
    R = prob.sketch

    def side(n_out, fwd, bwd):
        if n_out <= prob.m:
            return lanczos_extremes(lambda u: fwd(bwd(u.to(prob.dtype))).double(), n_out, lanczos_k, generator)
        return lanczos_extremes(lambda v: bwd(fwd(v.to(prob.dtype))).double(), prob.m, lanczos_k, generator)

    lo, hi = side(prob.d, Jv, JTu)
    out = {"k_min": lo, "k_max": hi, "method": f"Lanczos ({lanczos_k} steps); λ_min is an upper estimate"}
    if identity:
        out.update(kr_min=lo, kr_max=hi)
    else:
        lo_r, hi_r = side(prob.b, lambda v: R.apply(Jv(v)), lambda u: JTu(R.adjoint(u)))
        out.update(kr_min=lo_r, kr_max=hi_r)
    return out


def sample_points(prob: Problem, n: int, generator: torch.Generator) -> list[torch.Tensor]:
    """n points between the truth and uniform dummies: x* + t (u − x*), t log-spaced in [1e-2, 1]."""
    ts = np.logspace(-2, 0, n) if n > 1 else np.array([1.0])
    pts = []
    for t in ts:
        u = torch.rand(prob.x_true.shape, generator=generator, dtype=torch.float64).to(prob.dtype)
        pts.append(prob.x_true + float(t) * (u - prob.x_true))
    return pts


def gradient_descent(prob: Problem, x0: torch.Tensor, eta: float, iterations: int):
    """Plain GD x_{t+1} = x_t − η ∇L_R(x_t) (Theorem 7.5); returns losses, ratios ‖∇L‖²/L and iterates' pairs data.
    Ratios and pairs are kept while L(x_t) > floor·L(x_0): below it L is round-off, and a pair's
    (L_y − L_x − <∇L, y − x>)/‖y − x‖² at a step of 1e-16 is round-off divided by 1e-32."""
    floor = 1e-20 if prob.dtype == torch.float64 else 1e-8  # below floor·L(x_0) the ratio is round-off
    x = x0.clone()
    losses, ratios, pairs = [], [], []
    L0 = None
    prev = None
    for _ in range(iterations + 1):
        Lx, gx = prob.L_and_grad(x)
        if prev is not None and L0 is not None and prev[1] > floor * L0:
            pairs.append((prev[0], prev[1], Lx, -eta * float(prev[2].pow(2).sum()), eta * float(prev[2].norm())))
        losses.append(Lx)
        if not math.isfinite(Lx) or (L0 is not None and Lx > 1e6 * L0):
            break
        L0 = Lx if L0 is None else L0
        if Lx > floor * L0:
            ratios.append(float(gx.pow(2).sum()) / Lx)
        prev = (x, Lx, gx)
        x = x - eta * gx
    return losses, ratios, pairs


def _fraction_within(lo: float, hi: float, vals, rtol: float) -> float:
    """The share of ``vals`` in [lo, hi], each end widened by the relative round-off ``rtol`` (NaN for none)."""
    vals = np.asarray(vals)
    if len(vals) == 0:
        return float("nan")
    return float(np.mean((vals >= lo * (1 - rtol)) & (vals <= hi * (1 + rtol))))


def _semismooth_stats(a: float, b: float, rows: list, rtol: float) -> tuple[float, float]:
    """(the share of the pairs ``rows`` = (L_x, <grad L(x), y - x>, ||y - x||, L_y) where Def. 7.2's inequality
    with (a, b) holds, its largest violation in units of b ||y - x||^2 + a ||y - x|| sqrt(L_x))."""
    lhs = np.array([Ly for *_, Ly in rows])
    rhs = np.array([semismooth_rhs(Lx, inner, dist, a, b) for Lx, inner, dist, _ in rows])
    slack = np.abs(rhs) * rtol + 1e-300
    scale = np.array([b * dist ** 2 + a * dist * Lx ** 0.5 for Lx, _, dist, _ in rows])
    viol = (lhs - rhs) / np.maximum(scale, 1e-300)
    return float(np.mean(lhs <= rhs + slack)), float(np.max(viol))


def _sampled(prob: Problem, pts: list, gen: torch.Generator) -> tuple[list, list, list, list]:
    """(L, grad L, ||grad L||^2 / L, kernel eigenvalues) at the points ``pts``; the kernel's at evenly spaced ones
    (all of them where d m is at most 10^6, else three)."""
    samples = len(pts)
    n_kernel = samples if prob.d * prob.m <= 1_000_000 else min(samples, 3)
    kernel_idx = np.unique(np.linspace(0, samples - 1, n_kernel).round().astype(int))
    Ls, grads, ratios, keig = [], [], [], []
    for i, x in enumerate(pts):
        Lx, gx = prob.L_and_grad(x)
        Ls.append(Lx)
        grads.append(gx)
        ratios.append(float(gx.pow(2).sum()) / Lx if Lx > 0 else float("nan"))
        if i in kernel_idx:
            keig.append(kernel_eigs(prob, x, gen))
    return Ls, grads, ratios, keig


def _beta_pairs(prob: Problem, pts: list, gen: torch.Generator) -> float | None:
    """The largest ||G(x_i) - G(x_j)|| / ||x_i - x_j|| over each point and one other drawn at random; None for one
    point, which makes no pair (its draw is still taken, so the rest of the check draws as it did)."""
    gvals = [prob.G(x).detach() for x in pts]
    beta = 0.0
    for i in range(len(pts)):
        j = (i + 1 + int(torch.randint(0, max(1, len(pts) - 1), (1,), generator=gen))) % len(pts)
        if j != i:
            beta = max(beta, float((gvals[i] - gvals[j]).norm() / (pts[i] - pts[j]).norm()))
    return beta if len(pts) > 1 else None


def _probe_pairs(prob: Problem, pts: list, Ls: list, grads: list, gen: torch.Generator) -> list:
    """(L_x, <grad L(x), d>, ||d||, L(x + d)) for every point x and four steps d: of 1e-3 and 1e-1 times ||x||,
    random and along -grad L (where the curvature that GD sees lives)."""
    rows = []
    for i, x in enumerate(pts):
        gdir = -grads[i] / grads[i].norm()
        for scale, kind in ((1e-3, "random"), (1e-1, "random"), (1e-3, "gradient"), (1e-1, "gradient")):
            if kind == "random":
                dlt = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(prob.dtype)
                dlt = dlt / dlt.norm()
            else:
                dlt = gdir
            dlt = dlt * (scale * float(x.norm()))
            Ly = float(prob.L(x + dlt).detach())
            rows.append((Ls[i], float((grads[i] * dlt).sum()), float(dlt.norm()), Ly))
    return rows


def _tuned_step(prob: Problem, x0: torch.Tensor, ratio_max: float, steps: int) -> float:
    """The step c / ratio_max, c in 1/4 ... 4, whose ``steps`` GD steps from x0 end lowest (1/4 where none ends
    finite); ``ratio_max`` is the largest ||grad L||^2 / L seen."""
    best = None
    for c in (0.25, 0.5, 1.0, 2.0, 4.0):
        eta = c / ratio_max
        ls = gradient_descent(prob, x0, eta, steps)[0]
        if len(ls) == steps + 1 and math.isfinite(ls[-1]) and (best is None or ls[-1] < best[1]):
            best = (eta, ls[-1])
    return best[0] if best else 0.25 / ratio_max


def _unsketched_run(model_name: str, seed: int, pts: list, x0: torch.Tensor, iterations: int, tune_steps: int,
                    floor: float) -> dict:
    """GD at its tuned step on the same target unsketched, from the same start: the comparison for a sketch."""
    prob0 = build_problem(model_name, "none", 1.0, seed)
    r0 = [prob0.L_and_grad(x) for x in pts[: max(4, len(pts) // 4)]]
    rmax0 = max(float(g.pow(2).sum()) / L for L, g in r0 if L > 0)
    eta0 = _tuned_step(prob0, x0, rmax0, tune_steps)
    l0 = gradient_descent(prob0, x0, eta0, iterations)[0]
    return {"eta": eta0, "losses": l0, "observed_rate": linear_rate(l0, floor)}


def check(model_name: str, sketch_kind: str, ratio: float = 0.5, samples: int | None = None, seed: int = 0,
          iterations: int | None = None, progress: bool = True, sketch_params: dict | None = None) -> dict:
    """Measure β, θ₁², θ₂², τ, γ₁, γ₂, the non-critical and semi-smooth inequalities and GD's rate on one
    target/sketch (``sketch_params``: the family's own, e.g. ``{"s": 8}`` for sparse)."""
    t_start = time.time()
    samples = DEFAULT_SAMPLES[model_name] if samples is None else samples
    gen = torch_generator(seed)
    prob = build_problem(model_name, sketch_kind, ratio, seed, sketch_params)
    say = ((lambda s: print(f"[check] {s} ({time.time() - t_start:.0f} s)", file=sys.stderr, flush=True))
           if progress else (lambda s: None))
    say(f"{model_name}: d={prob.d}, m={prob.m}, sketch {sketch_kind} b={prob.b}, {samples} samples")
    sk = sketch_constants(prob.sketch, gen)
    say(f"sketch constants τ={sk['tau']:.4g} γ₁={sk['gamma1']:.4g} γ₂={sk['gamma2']:.4g}")

    pts = sample_points(prob, samples, gen)
    Ls, grads, ratios, keig = _sampled(prob, pts, gen)
    say(f"kernel eigenvalues at {len(keig)} points ({keig[0]['method']})")
    theta1_sq = min(k["k_min"] for k in keig)
    theta2_sq = max(k["k_max"] for k in keig)
    kr1 = min(k["kr_min"] for k in keig)
    kr2 = max(k["kr_max"] for k in keig)

    # β: sampled pairs and the spectral norm of J (θ₂ is the largest ‖J(x)‖ seen)
    beta_pairs = _beta_pairs(prob, pts, gen)
    beta_power = math.sqrt(theta2_sq)
    beta = beta_power if beta_pairs is None else max(beta_pairs, beta_power)

    # non-critical point (Def. 7.3) at the sampled points
    r = np.array(ratios)
    ok = np.isfinite(r)
    lo77, hi77 = noncritical_constants_lemma77(theta1_sq, theta2_sq, sk["gamma1"], sk["gamma2"])
    lo_t, hi_t = noncritical_constants_lemma77(kr1, kr2, 1.0, 1.0)  # 4 λ(R K Rᵀ): the exact sketched kernel
    # Theorem 7.4 / Lemma J.5 as printed: θ₁² ≤ ‖∇L‖²/L ≤ θ₂², without Lemma 7.7's factor 4 (a statement about
    # L = L_I only: for a sketch the paper prints Lemma 7.7's bounds, factor included, and nothing else)
    lo74, hi74 = theta1_sq, theta2_sq
    rtol = 1e-6 if prob.dtype == torch.float64 else 1e-3

    def frac_in(lo, hi, vals):
        return _fraction_within(lo, hi, vals, rtol)

    # semi-smoothness (Def. 7.2, p = ½) on pairs x, y = x + δ at several scales
    a_p, b_p = semismooth_constants(beta, math.sqrt(theta2_sq), sk["tau"], sk["gamma2"], literal=False)
    a_l, b_l = semismooth_constants(beta, math.sqrt(theta2_sq), sk["tau"], sk["gamma2"], literal=True)
    pair_rows = _probe_pairs(prob, pts, Ls, grads, gen)
    say(f"semi-smoothness on {len(pair_rows)} pairs")

    # convergence: GD with L.1's step from measured constants, and with a tuned step
    T = iterations or DEFAULT_ITERATIONS[model_name]
    x0 = torch.rand(prob.x_true.shape, generator=gen, dtype=torch.float64).to(prob.dtype)
    b_star = max((Ly - Lx - inner) / dist ** 2 for Lx, inner, dist, Ly in pair_rows)
    r_lo, r_hi = float(np.nanmin(r)), float(np.nanmax(r))
    # a (0, b, ½)-semi-smooth L ≥ 0 with ‖∇L‖² = r_hi·L somewhere needs b ≥ r_hi/4 (step x − ∇L/(2b) keeps L ≥ 0)
    b_used = max(b_star, r_hi / 4)
    l1_meas = gd_rate_theorem_l1(0.0, b_used, r_lo, r_hi)
    if l1_meas is None:  # a sampled point where the gradient vanishes while L_R does not: no step of L.1 exists
        raise ConfigError(f"no step of Theorem L.1 follows from the sampled points: the smallest "
                          f"||grad L_R||^2 / L_R measured is {r_lo:.3g} (a point where the gradient vanishes while "
                          f"L_R > 0), so theta1^2 = 0; take another --seed or more --samples to see how often")
    eta_l1, gamma_l1 = l1_meas
    l1_paper = gd_rate_theorem_l1(a_p, b_p, lo77, hi77)
    losses_l1, traj_r1, traj_p1 = gradient_descent(prob, x0, eta_l1, T)
    say(f"GD with Theorem L.1 step η={eta_l1:.3g}: L {losses_l1[0]:.3g} -> {losses_l1[-1]:.3g}")
    T_tune = max(10, T // 10)
    eta_tuned = _tuned_step(prob, x0, r_hi, T_tune)
    losses_t, traj_rt, traj_pt = gradient_descent(prob, x0, eta_tuned, T)
    say(f"GD with tuned step η={eta_tuned:.3g}: L {losses_t[0]:.3g} -> {losses_t[-1]:.3g}")
    fl = 1e-12 if prob.dtype == torch.float64 else 1e-6
    unsk = None
    if not is_identity(sketch_kind):  # the same attack on the unsketched gradient, for comparison
        unsk = _unsketched_run(model_name, seed, pts, x0, T, T_tune, fl)
        say(f"unsketched GD η={unsk['eta']:.3g}: L {unsk['losses'][0]:.3g} -> {unsk['losses'][-1]:.3g}")

    # inequalities along the trajectories (consecutive iterates are the pairs)
    traj_ratios = traj_r1 + traj_rt
    traj_pairs = [(Lx, inner, dist, Ly) for _, Lx, Ly, inner, dist in traj_p1 + traj_pt]
    all_pairs = pair_rows + traj_pairs
    ss_frac, ss_worst = _semismooth_stats(a_p, b_p, pair_rows, rtol)
    ss_frac_l, ss_worst_l = _semismooth_stats(a_l, b_l, pair_rows, rtol)
    ss_traj = _semismooth_stats(a_p, b_p, traj_pairs, rtol)[0] if traj_pairs else float("nan")
    Dall = [(Ly - Lx - inner, dist, Lx) for Lx, inner, dist, Ly in all_pairs if dist > 0]
    tight_b = max(D / s ** 2 for D, s, _ in Dall)  # with a = 0
    tight_a = max(D / (s * Lx ** 0.5) for D, s, Lx in Dall if Lx > 0)  # with b = 0
    tight_b_given_a = max((D - a_p * s * Lx ** 0.5) / s ** 2 for D, s, Lx in Dall)

    obs_rate = linear_rate(losses_l1, fl)
    # the prediction's premises along its own run: b_used bounds the run's pairs, its ratios lie in [r_lo, r_hi]
    l1_pairs = [(Ly - Lx - inner) / dist ** 2 for _, Lx, Ly, inner, dist in traj_p1 if dist > 0]
    l1_b = max(l1_pairs) if l1_pairs else None
    l1_inside = frac_in(r_lo, r_hi, traj_r1) if traj_r1 else None
    # Theorem 7.5 / L.1 bound every step, L(x_{t+1}) ≤ (1 − γ) L(x_t), where ρ above is a fit over the run
    l1_steps = [(La, Lb) for La, Lb in zip(losses_l1, losses_l1[1:]) if La > fl * losses_l1[0]]
    l1_steps_within = (float(np.mean([Lb <= (1 - gamma_l1) * La * (1 + rtol) for La, Lb in l1_steps]))
                       if l1_steps else None)
    obs_rate_tuned = linear_rate(losses_t, fl)
    res = {
        "measurement_note": ("Measurements over the stated samples and trajectories of one seed, not proofs; "
                             "constants are extremes over what was sampled, not suprema over R^m."),
        "fields_doc": "docs/theory.md, section 'check.json'",
        "sampling": {
            "points": "x* + t (u − x*), u ~ U[0, 1]^m, t log-spaced in [1e-2, 1] (x*: the victim's batch)",
            "kernel": f"K's eigenvalues at {len(keig)} of the points, evenly spaced in log t",
            "beta_pairs": "each point with one other sampled point, drawn at random",
            "semismooth_pairs": "y = x + δ at every point, ‖δ‖ = 1e-3·‖x‖ and 1e-1·‖x‖, δ random and along −∇L_R(x)",
            "trajectory": "the iterates (and consecutive pairs) of the GD runs at the L.1 and the tuned step, from "
                          "x₀ ~ U[0, 1]^m",
        },
        "model": model_name, "sketch": sketch_kind, "sketch_ratio": None if is_identity(sketch_kind) else ratio,
        "sketch_params": dict(sketch_params or {}),
        "seed": seed, "samples": samples, "pairs": len(pair_rows), "trajectory_points": len(traj_ratios),
        "trajectory_pairs": len(traj_pairs),
        "kernel_points": len(keig), "kernel_method": keig[0]["method"], "sketch_method": sk["sketch_method"],
        "dataset": CHECK_TARGETS[model_name][0], "in_shape": list(CHECK_TARGETS[model_name][1]),
        "batch_size": CHECK_TARGETS[model_name][2], "dtype": str(prob.dtype).replace("torch.", ""),
        "d": prob.d, "m": prob.m, "b": prob.b,
        "regime": "d <= m (paper's)" if prob.d <= prob.m
        else "d > m (over-parametrised: K = J Jᵀ is singular, Assumption J.3 fails)",
        "beta": beta, "beta_pairs": beta_pairs, "beta_power": beta_power,
        "theta1_sq": theta1_sq, "theta2_sq": theta2_sq,
        "sketched_kernel_min": kr1, "sketched_kernel_max": kr2,
        "tau": sk["tau"], "gamma1": sk["gamma1"], "gamma2": sk["gamma2"],
        "noncritical_bounds": [lo77, hi77],
        "noncritical_fraction": frac_in(lo77, hi77, r[ok]),
        "noncritical_fraction_sketched_kernel": frac_in(lo_t, hi_t, r[ok]),
        # Theorem 7.4 is a statement about L (R = I): on L_R the paper prints Lemma 7.7 / Theorem 7.8 only
        "noncritical_fraction_thm74_literal": frac_in(lo74, hi74, r[ok]) if is_identity(sketch_kind) else None,
        "noncritical_fraction_trajectory": frac_in(lo77, hi77, traj_ratios),
        "noncritical_ratio_min": r_lo, "noncritical_ratio_max": r_hi,
        "noncritical_worst_lower": r_lo / lo77 if lo77 > 0 else None, "noncritical_worst_upper": r_hi / hi77,
        "semismooth_constants": {"a": a_p, "b": b_p, "source": "Lemma J.4 / M.3 as proved (b = τ²β²)"},
        "semismooth_constants_literal": {"a": a_l, "b": b_l, "source": "Theorem 7.4 / Lemma 7.6 as printed (b = τ²β)"},
        "semismooth_fraction": ss_frac, "semismooth_worst_ratio": ss_worst,
        "semismooth_fraction_literal": ss_frac_l, "semismooth_worst_ratio_literal": ss_worst_l,
        "semismooth_fraction_trajectory": ss_traj,
        "semismooth_tightest": {"b_with_a0": tight_b, "a_with_b0": tight_a, "b_given_paper_a": tight_b_given_a},
        "paper_rate_condition": {"theta1_sq": lo77, "a_theta2": a_p * math.sqrt(hi77), "holds": l1_paper is not None},
        "paper_predicted_rate": None if l1_paper is None else 1 - l1_paper[1],
        "b_star_samples": b_star, "b_used_for_eta": b_used,
        "eta_theorem_l1": eta_l1, "predicted_rate": 1 - gamma_l1, "observed_rate": obs_rate,
        "predicted_rate_source": "Theorem L.1 with measured constants: a = 0, b = b* (tightest on sampled pairs), "
                                 "θ² = min/max of ‖∇L‖²/L",
        "predicted_rate_holds": bool(obs_rate <= 1 - gamma_l1) if math.isfinite(obs_rate) else None,
        "predicted_rate_steps_within": l1_steps_within,
        "l1_trajectory_b": l1_b, "l1_trajectory_ratios_inside": l1_inside,
        "eta_tuned": eta_tuned, "observed_rate_tuned": obs_rate_tuned,
        "observed_rate_unsketched_tuned": None if unsk is None else unsk["observed_rate"],
        "losses_theorem_l1": losses_l1, "losses_tuned": losses_t,
        "losses_unsketched_tuned": None if unsk is None else unsk["losses"],
        "ratios": [float(v) for v in r], "trajectory_ratios": traj_ratios,
        "wall_s": time.time() - t_start,
    }
    return res


__all__ = ["CHECK_TARGETS", "EXACT_LIMIT", "DEFAULT_SAMPLES", "DEFAULT_ITERATIONS", "Problem", "build_problem",
           "sketch_constants", "jacobian_T", "kernel_eigs", "sample_points", "gradient_descent", "check"]
