"""Empirical checks of the attack theory of Song, Wang, Yu, Zhang (ICML 2023), §7 and App. I–M.

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
  dropping the factor 2 of ∇‖·‖² (the proof of L.1 writes ∇L = Φ(G − g)); both are measured.
* Semi-smoothness (Def. 7.2, p = ½): Lemma J.4 proves a = 2(β + θ₂), b = β²
  (Theorem 7.4 prints b = β); Lemma M.3 prints B = τ²β but its proof bounds
  τ²‖G(y) − G(x)‖² ≤ τ²β²‖y − x‖², i.e. B = τ²β².  Both readings are measured.
* Theorem 7.5 / L.1 needs θ₁² > a θ₂ (p = ½).  With a = 2(β + θ₂) and β ≥ θ₂ ≥ θ₁
  this can never hold, so the paper's own constants give no rate; we report that and
  also the rate L.1 predicts from the tightest measured constants (a = 0, b = b*).

Everything here is a measurement over stated samples, not a proof.
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call, grad, jvp, vjp, vmap

import targets

from .config import ConfigError

# ---------------------------------------------------------------------------
# pure math: the paper's constants and inequalities
# ---------------------------------------------------------------------------


def noncritical_constants_thm74(theta1_sq: float, theta2_sq: float) -> tuple[float, float]:
    """(θ₁², θ₂²) bounds on ‖∇L‖²/L as literally stated in Theorem 7.4 / Lemma J.5."""
    return theta1_sq, theta2_sq


def noncritical_constants_lemma77(theta1_sq: float, theta2_sq: float, gamma1: float, gamma2: float) -> tuple[float, float]:
    """Bounds (2θ₁γ₁)², (2θ₂γ₂)² on ‖∇L_R‖²/L_R from Lemma 7.7 / M.4 (R = I: γ = 1)."""
    return 4.0 * theta1_sq * gamma1 ** 2, 4.0 * theta2_sq * gamma2 ** 2


def semismooth_constants(beta: float, theta2: float, tau: float = 1.0, gamma2: float = 1.0, literal: bool = False) -> tuple[float, float]:
    """(a, b) of Lemma 7.6 / M.3: A = 2τβ + 2θ₂γ₂, B = τ²β (literal, as printed; = Thm 7.4 for R = I) or τ²β² (as proved, Lemma J.4)."""
    a = 2.0 * tau * beta + 2.0 * theta2 * gamma2
    b = tau ** 2 * beta if literal else tau ** 2 * beta ** 2
    return a, b


def semismooth_rhs(L_x, inner, dist, a: float, b: float, p: float = 0.5):
    """Right side of Def. 7.2: L(x) + ⟨∇L(x), y − x⟩ + b‖y − x‖² + a‖y − x‖^{2−2p} L(x)^p."""
    return L_x + inner + b * dist ** 2 + a * dist ** (2 - 2 * p) * L_x ** p


def gd_rate_theorem_l1(a: float, b: float, theta1_sq: float, theta2_sq: float, p: float = 0.5):
    """Theorem 7.5 / L.1: (η_max, γ) with η_max = (θ₁² − aθ₂^{2−2p})/(2bθ₂²), γ = η(θ₁² − aθ₂^{2−2p})/2; None if θ₁² ≤ aθ₂^{2−2p}."""
    margin = theta1_sq - a * theta2_sq ** (1 - p)
    if not margin > 0 or not b > 0:
        return None
    eta = margin / (2.0 * b * theta2_sq)
    return eta, eta * margin / 2.0


def linear_rate(losses, floor: float = 1e-12) -> float:
    """Per-step factor ρ of a least-squares fit log L(x_t) ≈ c + t log ρ (points above floor·L(x_0))."""
    L = np.asarray(losses, dtype=float)
    keep = np.isfinite(L) & (L > floor * L[0]) & (L > 0)
    t = np.arange(len(L))[keep]
    if len(t) < 2:
        return float("nan")
    slope = np.polyfit(t, np.log(L[keep]), 1)[0]
    return float(math.exp(slope))


def lanczos_extremes(matvec, n: int, k: int, generator: torch.Generator, dtype=torch.float64) -> tuple[float, float]:
    """(min, max) Ritz values of a symmetric PSD operator after k Lanczos steps with full reorthogonalisation (min is an upper bound on λ_min)."""
    k = min(k, n)
    Q = torch.zeros(k + 1, n, dtype=dtype)
    q = torch.randn(n, generator=generator, dtype=torch.float64).to(dtype)
    Q[0] = q / q.norm()
    alpha, beta = [], []
    for j in range(k):
        w = matvec(Q[j]).to(dtype)
        a = torch.dot(w, Q[j])
        w = w - Q[: j + 1].T @ (Q[: j + 1] @ w)
        w = w - Q[: j + 1].T @ (Q[: j + 1] @ w)
        alpha.append(float(a))
        nb = float(w.norm())
        if nb < 1e-10 * max(1.0, abs(float(a))) or j == k - 1:
            break
        beta.append(nb)
        Q[j + 1] = w / nb
    T = np.diag(alpha) + np.diag(beta[: len(alpha) - 1], 1) + np.diag(beta[: len(alpha) - 1], -1)
    ev = np.linalg.eigvalsh(T)
    return float(max(ev[0], 0.0)), float(ev[-1])


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


@dataclass
class Problem:
    """One attack instance: model, sketch, truth x*, labels, observation y = R G(x*)."""

    model: torch.nn.Module
    sketch: object
    x_true: torch.Tensor
    labels: torch.Tensor
    y_obs: torch.Tensor
    dtype: torch.dtype

    def __post_init__(self):
        self.params = {n: p.detach() for n, p in self.model.named_parameters()}
        self.d = sum(p.numel() for p in self.params.values())
        self.m = self.x_true.numel()
        self.b = self.sketch.b

    def G(self, x):
        """∇_w F(w, x), flat (torch.func-transformable)."""
        gr = grad(lambda p: self.model.loss(functional_call(self.model, p, (x,)), self.labels))(self.params)
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


def build_problem(model_name: str, sketch_kind: str, ratio: float, seed: int) -> Problem:
    """The check's attack instance: CHECK_TARGETS[model_name] at weights `seed`, sketch seed `seed`+1."""
    from .data import get_batch, load_dataset
    from .sketch import make_sketch

    ds_name, in_shape, batch, dtype = CHECK_TARGETS[model_name]
    ds = load_dataset(ds_name)
    x, labels = get_batch(ds, 0, batch)
    if tuple(x.shape[1:]) != in_shape:
        x = torch.nn.functional.adaptive_avg_pool2d(x, in_shape[1:])
    model = targets.get_model(model_name, num_classes=ds.num_classes, in_shape=in_shape, seed=seed).to(dtype)
    if model_name == "linreg":
        labels = labels.to(dtype)  # the class index as a real target
    x = x.to(dtype)
    d = targets.num_params(model)
    b = d if sketch_kind == "none" else max(1, int(round(ratio * d)))
    sketch = make_sketch(sketch_kind, d, b, seed + 1)
    prob = Problem(model, sketch, x, labels, torch.empty(0), dtype)
    with torch.no_grad():
        prob.y_obs = prob.RG(x).detach()
    return prob


# ---------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------


def sketch_constants(sketch, generator: torch.Generator, k: int = 120) -> dict:
    """τ = γ₂ = σ_max(R), γ₁ = σ_min(Rᵀ) (the b singular values of R), exact when small, else Lanczos on R Rᵀ."""
    if sketch.kind == "none":
        return {"tau": 1.0, "gamma1": 1.0, "gamma2": 1.0, "sketch_method": "identity"}
    if sketch.b * sketch.d <= 4_000_000:
        s = torch.linalg.svdvals(sketch.to_dense().double())
        g1, g2, method = float(s[-1]), float(s[0]), "exact SVD"
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
    for i in range(0, prob.m, chunk):
        rows.append(vmap(f)(eye_cols[i:i + chunk]))
    return torch.cat(rows)


def _small_gram_eigs(A: torch.Tensor) -> np.ndarray:
    """Eigenvalues of the smaller Gram matrix of A (n1×n2): they are the squared singular values."""
    A = A.double()
    M = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return torch.linalg.eigvalsh(M).numpy()


def kernel_eigs(prob: Problem, x: torch.Tensor, generator: torch.Generator, lanczos_k: int = 60) -> dict:
    """Extreme eigenvalues at x of K = J Jᵀ and of the sketched kernel R K Rᵀ (both on their smaller side)."""
    if prob.d * prob.m <= EXACT_LIMIT:
        Jt = jacobian_T(prob, x)  # (m, d)
        ev = _small_gram_eigs(Jt)
        out = {"k_min": float(ev[0]), "k_max": float(ev[-1]), "method": "exact"}
        if prob.sketch.kind == "none":
            out.update(kr_min=out["k_min"], kr_max=out["k_max"])
        else:
            evr = _small_gram_eigs(prob.sketch.apply(Jt))  # (m, b) = (R J)ᵀ
            out.update(kr_min=float(evr[0]), kr_max=float(evr[-1]))
        return out
    # matrix-free: Lanczos on the smaller side of J (resp. R J)
    _, pull = vjp(prob.G, x)
    Jv = lambda v: jvp(prob.G, (x,), (v.view_as(x),))[1]  # noqa: E731
    JTu = lambda u: pull(u)[0].reshape(-1)  # noqa: E731
    R = prob.sketch

    def side(n_out, fwd, bwd):
        if n_out <= prob.m:
            return lanczos_extremes(lambda u: fwd(bwd(u.to(prob.dtype))).double(), n_out, lanczos_k, generator)
        return lanczos_extremes(lambda v: bwd(fwd(v.to(prob.dtype))).double(), prob.m, lanczos_k, generator)

    lo, hi = side(prob.d, Jv, JTu)
    out = {"k_min": lo, "k_max": hi, "method": f"Lanczos ({lanczos_k} steps); λ_min is an upper estimate"}
    if R.kind == "none":
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
    """Plain GD x_{t+1} = x_t − η ∇L_R(x_t) (Theorem 7.5); returns losses, ratios ‖∇L‖²/L and iterates' pairs data."""
    floor = 1e-20 if prob.dtype == torch.float64 else 1e-8  # below floor·L(x_0) the ratio is round-off
    x = x0.clone()
    losses, ratios, pairs = [], [], []
    L0 = None
    prev = None
    for _ in range(iterations + 1):
        Lx, gx = prob.L_and_grad(x)
        if prev is not None:
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


def check(model_name: str, sketch_kind: str, ratio: float = 0.5, samples: int | None = None, seed: int = 0,
          iterations: int | None = None, progress: bool = True) -> dict:
    """Measure β, θ₁², θ₂², τ, γ₁, γ₂, the non-critical and semi-smooth inequalities and GD's rate on one target/sketch."""
    t_start = time.time()
    samples = DEFAULT_SAMPLES[model_name] if samples is None else samples
    gen = torch.Generator().manual_seed(seed)
    prob = build_problem(model_name, sketch_kind, ratio, seed)
    say = (lambda s: print(f"[check] {s} ({time.time() - t_start:.0f} s)", file=sys.stderr, flush=True)) if progress else (lambda s: None)
    say(f"{model_name}: d={prob.d}, m={prob.m}, sketch {sketch_kind} b={prob.b}, {samples} samples")
    sk = sketch_constants(prob.sketch, gen)
    say(f"sketch constants τ={sk['tau']:.4g} γ₁={sk['gamma1']:.4g} γ₂={sk['gamma2']:.4g}")

    # sampled points: L, ∇L, ratio; kernel eigenvalues at the first n_kernel of them
    pts = sample_points(prob, samples, gen)
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
    say(f"kernel eigenvalues at {len(keig)} points ({keig[0]['method']})")
    theta1_sq = min(k["k_min"] for k in keig)
    theta2_sq = max(k["k_max"] for k in keig)
    kr1 = min(k["kr_min"] for k in keig)
    kr2 = max(k["kr_max"] for k in keig)

    # β: sampled pairs and the spectral norm of J (θ₂ is the largest ‖J(x)‖ seen)
    gvals = [prob.G(x).detach() for x in pts]
    beta_pairs = 0.0
    for i in range(len(pts)):
        j = (i + 1 + int(torch.randint(0, max(1, len(pts) - 1), (1,), generator=gen))) % len(pts)
        if j != i:
            beta_pairs = max(beta_pairs, float((gvals[i] - gvals[j]).norm() / (pts[i] - pts[j]).norm()))
    beta_power = math.sqrt(theta2_sq)
    beta = max(beta_pairs, beta_power)

    # non-critical point (Def. 7.3) at the sampled points
    r = np.array(ratios)
    ok = np.isfinite(r)
    lo77, hi77 = noncritical_constants_lemma77(theta1_sq, theta2_sq, sk["gamma1"], sk["gamma2"])
    lo_t, hi_t = noncritical_constants_lemma77(kr1, kr2, 1.0, 1.0)  # 4 λ(R K Rᵀ): the exact sketched kernel
    lo74, hi74 = noncritical_constants_thm74(theta1_sq, theta2_sq)
    rtol = 1e-6 if prob.dtype == torch.float64 else 1e-3

    def frac_in(lo, hi, vals):
        vals = np.asarray(vals)
        if len(vals) == 0:
            return float("nan")
        return float(np.mean((vals >= lo * (1 - rtol)) & (vals <= hi * (1 + rtol))))

    # semi-smoothness (Def. 7.2, p = ½) on pairs x, y = x + δ at several scales
    a_p, b_p = semismooth_constants(beta, math.sqrt(theta2_sq), sk["tau"], sk["gamma2"], literal=False)
    a_l, b_l = semismooth_constants(beta, math.sqrt(theta2_sq), sk["tau"], sk["gamma2"], literal=True)
    pair_rows = []  # (L_x, inner, dist, L_y)
    for i, x in enumerate(pts):
        gdir = -grads[i] / grads[i].norm()
        for scale, kind in ((1e-3, "random"), (1e-1, "random"), (1e-3, "gradient"), (1e-1, "gradient")):
            if kind == "random":
                dlt = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(prob.dtype)
                dlt = dlt / dlt.norm()
            else:  # along −∇L: where the curvature that GD sees lives
                dlt = gdir
            dlt = dlt * (scale * float(x.norm()))
            Ly = float(prob.L(x + dlt).detach())
            pair_rows.append((Ls[i], float((grads[i] * dlt).sum()), float(dlt.norm()), Ly))
    say(f"semi-smoothness on {len(pair_rows)} pairs")

    # convergence: GD with L.1's step from measured constants, and with a tuned step
    T = iterations or {"linreg": 400, "logreg": 300, "mlp": 200, "lenet": 150}[model_name]
    x0 = torch.rand(prob.x_true.shape, generator=gen, dtype=torch.float64).to(prob.dtype)
    b_star = max((Ly - Lx - inner) / dist ** 2 for Lx, inner, dist, Ly in pair_rows)
    r_lo, r_hi = float(np.nanmin(r)), float(np.nanmax(r))
    # a (0, b, ½)-semi-smooth L ≥ 0 with ‖∇L‖² = r_hi·L somewhere needs b ≥ r_hi/4 (step x − ∇L/(2b) keeps L ≥ 0)
    b_used = max(b_star, r_hi / 4)
    l1_meas = gd_rate_theorem_l1(0.0, b_used, r_lo, r_hi)
    eta_l1, gamma_l1 = l1_meas
    l1_paper = gd_rate_theorem_l1(a_p, b_p, lo77, hi77)
    losses_l1, traj_r1, traj_p1 = gradient_descent(prob, x0, eta_l1, T)
    say(f"GD with Theorem L.1 step η={eta_l1:.3g}: L {losses_l1[0]:.3g} -> {losses_l1[-1]:.3g}")
    T_tune = max(10, T // 10)
    best = None
    for c in (0.25, 0.5, 1.0, 2.0, 4.0):
        eta_c = c / r_hi
        ls = gradient_descent(prob, x0, eta_c, T_tune)[0]
        if len(ls) == T_tune + 1 and math.isfinite(ls[-1]) and (best is None or ls[-1] < best[1]):
            best = (eta_c, ls[-1])
    eta_tuned = best[0] if best else 0.25 / r_hi
    losses_t, traj_rt, traj_pt = gradient_descent(prob, x0, eta_tuned, T)
    say(f"GD with tuned step η={eta_tuned:.3g}: L {losses_t[0]:.3g} -> {losses_t[-1]:.3g}")
    unsk = None
    if sketch_kind != "none":  # the same attack on the unsketched gradient, for comparison
        prob0 = build_problem(model_name, "none", 1.0, seed)
        r0 = [prob0.L_and_grad(x) for x in pts[: max(4, samples // 4)]]
        rmax0 = max(float(g.pow(2).sum()) / L for L, g in r0 if L > 0)
        best0 = None
        for c in (0.25, 0.5, 1.0, 2.0, 4.0):
            ls = gradient_descent(prob0, x0, c / rmax0, T_tune)[0]
            if len(ls) == T_tune + 1 and math.isfinite(ls[-1]) and (best0 is None or ls[-1] < best0[1]):
                best0 = (c / rmax0, ls[-1])
        eta0 = best0[0] if best0 else 0.25 / rmax0
        l0 = gradient_descent(prob0, x0, eta0, T)[0]
        unsk = {"eta": eta0, "losses": l0, "observed_rate": linear_rate(l0, 1e-12 if prob.dtype == torch.float64 else 1e-6)}
        say(f"unsketched GD η={eta0:.3g}: L {l0[0]:.3g} -> {l0[-1]:.3g}")

    # inequalities along the trajectories (consecutive iterates are the pairs)
    traj_ratios = traj_r1 + traj_rt
    traj_pairs = [(Lx, inner, dist, Ly) for _, Lx, Ly, inner, dist in traj_p1 + traj_pt]
    all_pairs = pair_rows + traj_pairs

    def ss_stats(a, b, rows):
        lhs = np.array([Ly for *_, Ly in rows])
        rhs = np.array([semismooth_rhs(Lx, inner, dist, a, b) for Lx, inner, dist, _ in rows])
        slack = np.abs(rhs) * rtol + 1e-300
        viol = (lhs - rhs) / np.maximum(np.array([b * dist ** 2 + a * dist * Lx ** 0.5 for Lx, _, dist, _ in rows]), 1e-300)
        return float(np.mean(lhs <= rhs + slack)), float(np.max(viol))

    ss_frac, ss_worst = ss_stats(a_p, b_p, pair_rows)
    ss_frac_l, ss_worst_l = ss_stats(a_l, b_l, pair_rows)
    ss_traj, _ = ss_stats(a_p, b_p, traj_pairs) if traj_pairs else (float("nan"), None)
    Dall = [(Ly - Lx - inner, dist, Lx) for Lx, inner, dist, Ly in all_pairs if dist > 0]
    tight_b = max(D / s ** 2 for D, s, _ in Dall)  # with a = 0
    tight_a = max(D / (s * Lx ** 0.5) for D, s, Lx in Dall if Lx > 0)  # with b = 0
    tight_b_given_a = max((D - a_p * s * Lx ** 0.5) / s ** 2 for D, s, Lx in Dall)

    fl = 1e-12 if prob.dtype == torch.float64 else 1e-6
    obs_rate = linear_rate(losses_l1, fl)
    obs_rate_tuned = linear_rate(losses_t, fl)
    res = {
        "measurement_note": ("Measurements over the stated samples and trajectories of one seed, not proofs; "
                             "constants are extremes over what was sampled, not suprema over R^m."),
        "model": model_name, "sketch": sketch_kind, "sketch_ratio": None if sketch_kind == "none" else ratio,
        "seed": seed, "samples": samples, "pairs": len(pair_rows), "trajectory_points": len(traj_ratios),
        "kernel_points": len(keig), "kernel_method": keig[0]["method"], "sketch_method": sk["sketch_method"],
        "dataset": CHECK_TARGETS[model_name][0], "in_shape": list(CHECK_TARGETS[model_name][1]),
        "batch_size": CHECK_TARGETS[model_name][2], "dtype": str(prob.dtype).replace("torch.", ""),
        "d": prob.d, "m": prob.m, "b": prob.b, "regime": "d <= m (paper's)" if prob.d <= prob.m else "d > m (over-parametrised: K = J Jᵀ is singular, Assumption J.3 fails)",
        "beta": beta, "beta_pairs": beta_pairs, "beta_power": beta_power,
        "theta1_sq": theta1_sq, "theta2_sq": theta2_sq,
        "sketched_kernel_min": kr1, "sketched_kernel_max": kr2,
        "tau": sk["tau"], "gamma1": sk["gamma1"], "gamma2": sk["gamma2"],
        "noncritical_bounds": [lo77, hi77],
        "noncritical_fraction": frac_in(lo77, hi77, r[ok]),
        "noncritical_fraction_sketched_kernel": frac_in(lo_t, hi_t, r[ok]),
        "noncritical_fraction_thm74_literal": frac_in(lo74, hi74, r[ok]),
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
        "predicted_rate_source": "Theorem L.1 with measured constants: a = 0, b = b* (tightest on sampled pairs), θ² = min/max of ‖∇L‖²/L",
        "eta_tuned": eta_tuned, "observed_rate_tuned": obs_rate_tuned,
        "observed_rate_unsketched_tuned": None if unsk is None else unsk["observed_rate"],
        "losses_theorem_l1": losses_l1, "losses_tuned": losses_t,
        "losses_unsketched_tuned": None if unsk is None else unsk["losses"],
        "ratios": [float(v) for v in r], "trajectory_ratios": traj_ratios,
        "wall_s": time.time() - t_start,
    }
    return res


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------


def summary_table(res: dict) -> str:
    """A plain-text table of the main numbers of a check."""
    f = lambda v: "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    rows = [
        ("target", f"{res['model']} ({res['dataset']} {res['in_shape']}, batch {res['batch_size']}), d={res['d']}, m={res['m']}, {res['regime']}"),
        ("sketch", f"{res['sketch']} b={res['b']}" + ("" if res["sketch_ratio"] is None else f" (ratio {res['sketch_ratio']})")),
        ("samples", f"{res['samples']} points, {res['pairs']} pairs, {res['trajectory_points']} trajectory points, kernel at {res['kernel_points']} points ({res['kernel_method']})"),
        ("beta", f"{f(res['beta'])} (pairs {f(res['beta_pairs'])}, max ‖J‖ {f(res['beta_power'])})"),
        ("theta1^2, theta2^2", f"{f(res['theta1_sq'])}, {f(res['theta2_sq'])}"),
        ("tau, gamma1, gamma2", f"{f(res['tau'])}, {f(res['gamma1'])}, {f(res['gamma2'])} ({res['sketch_method']})"),
        ("‖∇L‖²/L range", f"[{f(res['noncritical_ratio_min'])}, {f(res['noncritical_ratio_max'])}] vs Lemma 7.7 [{f(res['noncritical_bounds'][0])}, {f(res['noncritical_bounds'][1])}]"),
        ("non-critical fraction", f"{f(res['noncritical_fraction'])} (Lemma 7.7), {f(res['noncritical_fraction_thm74_literal'])} (Thm 7.4 literal), trajectory {f(res['noncritical_fraction_trajectory'])}"),
        ("semi-smooth fraction", f"{f(res['semismooth_fraction'])} (b=τ²β²), {f(res['semismooth_fraction_literal'])} (b=τ²β literal), trajectory {f(res['semismooth_fraction_trajectory'])}"),
        ("tightest semi-smooth", f"b*={f(res['semismooth_tightest']['b_with_a0'])} (a=0), a*={f(res['semismooth_tightest']['a_with_b0'])} (b=0); paper a={f(res['semismooth_constants']['a'])}, b={f(res['semismooth_constants']['b'])}"),
        ("paper's rate (Thm 7.5)", "vacuous: θ₁² ≤ aθ₂" if res["paper_predicted_rate"] is None else f(res["paper_predicted_rate"])),
        ("GD rate, L.1 step", f"observed {res['observed_rate']:.8f} vs predicted ≤ {res['predicted_rate']:.8f} (η={res['eta_theorem_l1']:.3g})"),
        ("GD rate, tuned step", f"observed {res['observed_rate_tuned']:.6f} (η={res['eta_tuned']:.3g})"
         + ("" if res["observed_rate_unsketched_tuned"] is None else f"; unsketched {res['observed_rate_unsketched_tuned']:.6f}")),
    ]
    w = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(w)}  {v}" for k, v in rows]
    lines.append(f"These are measurements over {res['samples']} sampled points and the GD trajectories, not proofs ({res['wall_s']:.0f} s).")
    return "\n".join(lines)


def write_check(res: dict, out: Path) -> None:
    """check.json and the two figures into `out`."""
    from .figures import save
    from .results import write_json
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "check.json", res)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    vals = np.array([v for v in res["ratios"] + res["trajectory_ratios"] if np.isfinite(v) and v > 0])
    bins = np.logspace(np.log10(vals.min()) - 0.1, np.log10(max(vals.max(), res["noncritical_bounds"][1])) + 0.1, 40)
    ax.hist(np.array([v for v in res["ratios"] if v > 0]), bins=bins, alpha=0.7, label="sampled x")
    ax.hist(np.array(res["trajectory_ratios"]), bins=bins, alpha=0.5, label="GD trajectory")
    lo, hi = res["noncritical_bounds"]
    if lo > 0:
        ax.axvline(lo, color="k", ls="--", label="4θ₁²γ₁² (Lemma 7.7)")
    ax.axvline(hi, color="k", ls="-", label="4θ₂²γ₂² (Lemma 7.7)")
    ax.axvline(res["theta2_sq"], color="r", ls=":", label="θ₂² (Thm 7.4 literal)")
    ax.set_xscale("log")
    ax.set_xlabel("‖∇L_R(x)‖² / L_R(x)")
    ax.set_ylabel("count")
    ax.set_title(f"non-critical point: {res['model']}, sketch {res['sketch']} (n={res['samples']})", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, out / "noncritical_hist.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, lab in (("losses_theorem_l1", f"GD, L.1 step η={res['eta_theorem_l1']:.2g}"),
                     ("losses_tuned", f"GD, tuned η={res['eta_tuned']:.2g}"),
                     ("losses_unsketched_tuned", "GD unsketched, tuned")):
        if res.get(key):
            ax.semilogy(res[key], label=lab)
    L0 = res["losses_theorem_l1"][0]
    t = np.arange(len(res["losses_theorem_l1"]))
    ax.semilogy(t, L0 * res["predicted_rate"] ** t, "k--", label=f"predicted (1−γ)^t, 1−γ={res['predicted_rate']:.6f}")
    ax.set_xlabel("step t")
    ax.set_ylabel("L_R(x_t)")
    ax.set_title(f"convergence: {res['model']}, sketch {res['sketch']}", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, out / "convergence.png")


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _default_out() -> Path:
    return Path("results/runs") / f"check-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def cmd_check(a) -> int:
    """Handler of `leakattack check`."""
    from .sketch import list_sketches

    out = Path(a.out) if a.out else _default_out()
    if a.table2 or a.embedding:
        if a.samples is not None and a.samples < 1:
            raise ConfigError(f"samples must be at least 1, got {a.samples}")
        from .results import atomic_write_text

        tables = []
        if a.table2:
            from .table2 import table2_markdown

            tables.append(("table2.md", table2_markdown(samples=a.samples or 400, seed=a.seed)))
        if a.embedding:
            tables.append(("embedding.md", embedding_markdown(trials=a.samples or 2000, seed=a.seed)))
        for name, text in tables:
            atomic_write_text(out / name, text)
            print(text)
            print(f"wrote {out / name}")
        return 0
    if a.model not in CHECK_TARGETS:
        raise ConfigError(f"unknown model '{a.model}' for check; choose one of: {', '.join(CHECK_TARGETS)}")
    if a.sketch not in list_sketches():
        raise ConfigError(f"unknown sketch '{a.sketch}'; choose one of: {', '.join(list_sketches())}")
    if a.samples is not None and a.samples < 1:
        raise ConfigError(f"samples must be at least 1, got {a.samples}")
    if not 0 < a.sketch_ratio <= 1:
        raise ConfigError(f"sketch ratio must lie in (0, 1], got {a.sketch_ratio}")
    res = check(a.model, a.sketch, a.sketch_ratio, a.samples, a.seed, progress=not a.quiet)
    res["command"] = "leakattack check " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "leakattack check"
    write_check(res, out)
    print(summary_table(res))
    print(f"wrote {out / 'check.json'}, {out / 'noncritical_hist.png'}, {out / 'convergence.png'}")
    return 0


def register_cli(sub) -> None:
    """Add the `check` subcommand to the CLI's subparsers."""
    p = sub.add_parser("check", help="measure the paper's theory constants and inequalities on a target and sketch",
                       description="Measure β, θ₁², θ₂², τ, γ₁, γ₂, the non-critical and semi-smooth inequalities and GD's linear rate "
                                   "(Song et al., ICML 2023, §7); or --table2 / --embedding. Measurements with stated sample sizes, not proofs.")
    p.add_argument("--model", default="linreg", help=f"one of {', '.join(CHECK_TARGETS)} (default: %(default)s)")
    p.add_argument("--sketch", default="none", help="sketch kind (default: %(default)s)")
    p.add_argument("--sketch-ratio", type=float, default=0.5, help="b/d in (0, 1] (default: %(default)s)")
    p.add_argument("--samples", type=int, default=None, help="sampled points (default per model: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_SAMPLES.items()) + "; table2: 400 per scale; embedding: 2000 sketches)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, sketch and samples (default: %(default)s)")
    p.add_argument("--table2", action="store_true", help="test the functions of the paper's Table 2 and write table2.md")
    p.add_argument("--embedding", action="store_true", help="measure the coordinate-wise embedding parameter a (Def. 4.1, Table 1) and write embedding.md")
    p.add_argument("--out", default=None, help="output folder (default: results/runs/check-<timestamp>/)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_check)


# ---------------------------------------------------------------------------
# coordinate-wise embedding (Definition 4.1, Table 1)
# ---------------------------------------------------------------------------

#: Table 1's a (α = a·d/b)
TABLE1_A = {"gaussian": 3, "srht": 2, "ams": 2, "countsketch": 3, "sparse": 2}


def embedding_a(mean_sq: float, hg: float, h_norm_sq: float, g_norm_sq: float, b: int) -> float:
    """The a of Def. 4.1 that makes E[(hᵀRᵀRg)²] = (hᵀg)² + (a/b)‖h‖²‖g‖² hold with equality."""
    return b * (mean_sq - hg ** 2) / (h_norm_sq * g_norm_sq)


def measure_embedding(kind: str, d: int = 64, b: int = 16, trials: int = 2000, seed: int = 0) -> dict:
    """E[hᵀRᵀRg] and E[(hᵀRᵀRg)²] over `trials` independent sketches, for h = g, h ⟂ g, random pairs and one-hot h."""
    from .sketch import make_sketch

    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    h_rand = torch.randn(d, generator=gen, dtype=torch.float64)
    h_orth = h_rand - (h_rand @ g) / (g @ g) * g
    g_spiky = torch.zeros(d, dtype=torch.float64)
    g_spiky[0] = 1.0
    cases = {"h = g": (g, g), "h ⟂ g": (h_orth, g), "random h, g": (h_rand, g),
             "h = e₁, g = e₁": (g_spiky, g_spiky), "h = e₁, g random": (g_spiky, g)}
    H = torch.stack([c[0] for c in cases.values()])
    Gm = torch.stack([c[1] for c in cases.values()])
    vals = torch.zeros(trials, len(cases), dtype=torch.float64)
    for t in range(trials):
        R = make_sketch(kind, d, b, seed * 1_000_003 + t + 1)
        vals[t] = (R.apply(H.float()).double() * R.apply(Gm.float()).double()).sum(-1)
    rows = []
    for k, (name, (h, gg)) in enumerate(cases.items()):
        hg = float(h @ gg)
        mean = float(vals[:, k].mean())
        msq = float(vals[:, k].pow(2).mean())
        se = float(vals[:, k].std() / math.sqrt(trials))
        rows.append({"case": name, "hg": hg, "mean": mean, "mean_se": se, "second_moment": msq,
                     "a": embedding_a(msq, hg, float(h @ h), float(gg @ gg), b)})
    return {"kind": kind, "d": d, "b": b, "trials": trials, "rows": rows, "a_max": max(r["a"] for r in rows)}


def embedding_markdown(trials: int = 2000, seed: int = 0, d: int = 64, b: int = 16) -> str:
    """Markdown report of the measured coordinate-wise embedding parameter for every sketch kind."""
    from .sketch import list_sketches

    lines = [
        "# Coordinate-wise embedding (Definition 4.1, Table 1)", "",
        f"Command: `leakattack check --embedding --samples {trials} --seed {seed} --out results/theory`", "",
        f"Measurements, not proofs: {trials} independent sketches R (seeds derived from {seed}) of size b={b}, d={d} "
        "per kind; for each (h, g) we average hᵀRᵀRg and (hᵀRᵀRg)².  Measured a = b·(E[(hᵀRᵀRg)²] − (hᵀg)²)/(‖h‖²‖g‖²): "
        "Definition 4.1 holds with Table 1's a when measured a ≤ Table 1's a (up to sampling error).", "",
        "| sketch | Table 1 a | measured a (max over cases) | worst |E[hᵀRᵀRg] − hᵀg| / s.e. | per case: a |",
        "|---|---|---|---|---|",
    ]
    for kind in list_sketches():
        if kind == "none":
            continue
        r = measure_embedding(kind, d, b, trials, seed)
        z = max(abs(row["mean"] - row["hg"]) / max(row["mean_se"], 1e-300) for row in r["rows"])
        per = "; ".join(f"{row['case']}: {row['a']:.2f}" for row in r["rows"])
        lines.append(f"| {kind} | {TABLE1_A.get(kind, '— (not in Table 1)')} | {r['a_max']:.3f} | {z:.2f} | {per} |")
    lines += ["", "An unbiased sketch has |mean − hᵀg|/s.e. of order 1–3; a value far above that means E[RᵀR] ≠ I."]
    return "\n".join(lines) + "\n"
