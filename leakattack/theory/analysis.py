"""The paper's constants and inequalities as pure functions (Song, Wang, Yu, Zhang, ICML 2023, §4, §7, App. I–M).

Symbols (App. I): θ₁², θ₂² bound the pseudo-kernel K's spectrum, β is the
Lipschitz constant of G(x) = ∇_w F(w, x), τ the Lipschitz constant of the sketch
R, γ₁ ≤ σ_i(Rᵀ) ≤ γ₂ its singular values, (a, b, p) the semi-smoothness
constants of Def. 7.2.  Every function here is stateless; measurements on real
victims and sketches live in :mod:`leakattack.theory.measure`.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def noncritical_constants_lemma77(theta1_sq: float, theta2_sq: float, gamma1: float,
                                  gamma2: float) -> tuple[float, float]:
    """Bounds (2θ₁γ₁)², (2θ₂γ₂)² on ‖∇L_R‖²/L_R from Lemma 7.7 / M.4 (R = I: γ = 1)."""
    return 4.0 * theta1_sq * gamma1 ** 2, 4.0 * theta2_sq * gamma2 ** 2


def semismooth_constants(beta: float, theta2: float, tau: float = 1.0, gamma2: float = 1.0,
                         literal: bool = False) -> tuple[float, float]:
    """(a, b) of Lemma 7.6 / M.3: A = 2τβ + 2θ₂γ₂, B = τ²β (literal, as printed; = Thm 7.4 for R = I) or τ²β²
    (as proved, Lemma J.4)."""
    a = 2.0 * tau * beta + 2.0 * theta2 * gamma2
    b = tau ** 2 * beta if literal else tau ** 2 * beta ** 2
    return a, b


def semismooth_rhs(L_x, inner, dist, a: float, b: float, p: float = 0.5):
    """Right side of Def. 7.2: L(x) + ⟨∇L(x), y − x⟩ + b‖y − x‖² + a‖y − x‖^{2−2p} L(x)^p."""
    return L_x + inner + b * dist ** 2 + a * dist ** (2 - 2 * p) * L_x ** p


def gd_rate_theorem_l1(a: float, b: float, theta1_sq: float, theta2_sq: float, p: float = 0.5):
    """Theorem 7.5 / L.1: (η_max, γ) with η_max = (θ₁² − aθ₂^{2−2p})/(2bθ₂²), γ = η(θ₁² − aθ₂^{2−2p})/2;
    None if θ₁² ≤ aθ₂^{2−2p}."""
    margin = theta1_sq - a * theta2_sq ** (1 - p)
    if not margin > 0 or not b > 0:
        return None
    eta = margin / (2.0 * b * theta2_sq)
    return eta, eta * margin / 2.0


def linear_rate(losses, floor: float = 1e-12) -> float:
    """Per-step factor ρ of Theorem 7.5's L(x_t) ≤ (1 − γ)^t L(x_0), fitted as log L(x_t) ≈ c + t log ρ over points
    above floor·L(x_0)."""
    L = np.asarray(losses, dtype=float)
    keep = np.isfinite(L) & (L > floor * L[0]) & (L > 0)
    t = np.arange(len(L))[keep]
    if len(t) < 2:
        return float("nan")
    slope = np.polyfit(t, np.log(L[keep]), 1)[0]
    return float(math.exp(slope))


def embedding_a(mean_sq: float, hg: float, h_norm_sq: float, g_norm_sq: float, b: int) -> float:
    """The a of Def. 4.1 that makes E[(hᵀRᵀRg)²] = (hᵀg)² + (a/b)‖h‖²‖g‖² hold with equality."""
    return b * (mean_sq - hg ** 2) / (h_norm_sq * g_norm_sq)


def lanczos_extremes(matvec, n: int, k: int, generator: torch.Generator, dtype=torch.float64) -> tuple[float, float]:
    """(min, max) Ritz values of a symmetric PSD operator after k Lanczos steps with full reorthogonalisation
    (Golub & Van Loan §10.1; min is an upper bound on λ_min)."""
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


__all__ = ["noncritical_constants_lemma77", "semismooth_constants", "semismooth_rhs", "gd_rate_theorem_l1",
           "linear_rate", "embedding_a", "lanczos_extremes"]
