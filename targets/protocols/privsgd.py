"""PRIVSGD (Kasiviswanathan, "SGD with low-dimensional gradients", Appendix C) as a federated protocol.

COMPSGD (:mod:`.compsgd`) with Gaussian noise in the projected space.  Client c, round t:

    g_c   = (1/B) sum_i clip_L(grad f(w_t; z_i))       per-example clipping enforces ||grad f|| <= L
    s_t   = ||g_c|| / ||Phi_t g_c||                      (step d: ||s_t Phi_t g_c|| = ||g_c|| <= L)
    sends   s_t Phi_t g_c + e,  e ~ N(0, sigma^2 I_m),  sigma^2 = 32 L^2 T log(1/delta) / (n^2 eps^2)   (step c)

with L = ``dp_clip``, T = ``dp_rounds``, (eps, delta) = (``dp_epsilon``, ``dp_delta``) the guarantee over T
rounds, and n = B, the records the released gradient averages (the paper runs full-batch gradient
descent on its n records; a client here releases the mean over its batch of B, or over all its images where
its shard holds fewer than B: n is then the smallest shard's, ``Protocol.smallest_batch``).  The server steps
and lifts as COMPSGD.

epsilon after t rounds is reported two ways:

* ``epsilon_paper``: the paper's formula solved for eps at t rounds, sqrt(32 L^2 t log(1/delta)) / (n sigma)
  (Claim C.1: Gaussian mechanism with sensitivity 2L/n and strong composition); it equals ``dp_epsilon``
  at t = T;
* ``epsilon_rdp``: Opacus' RDP accountant for the same noise with the same per-record sensitivity
  (noise multiplier sigma n / L on the sum of clipped gradients, sampling rate B / n_c, at most 1, t steps).

Both take the per-record sensitivity of the mean, as the paper does.  The normalisation s_t depends on the
data, so s_t Phi_t g is not linear in the records; the bound the normalisation guarantees by itself is
||s_t Phi_t g(D) - s'_t Phi_t g(D')|| <= 2L, n times larger (``epsilon_rdp_normalised``: Opacus at noise
multiplier sigma / (2L)).
"""

from __future__ import annotations

import math

import torch

from defenses.accounting import accountant_epsilon
from leakattack.seeds import DP_NOISE, torch_stream

from .compsgd import CompSGD
from .sketched import per_example_clipped_mean


def privsgd_sigma(L: float, T: int, delta: float, n: int, epsilon: float) -> float:
    """sigma = sqrt(32 L^2 T log(1/delta)) / (n epsilon) (Kasiviswanathan, Algorithm PRIVSGD, step c)."""
    return math.sqrt(32 * L * L * T * math.log(1 / delta)) / (n * epsilon)


def privsgd_epsilon(L: float, t: int, delta: float, n: int, sigma: float) -> float:
    """epsilon of PRIVSGD after t rounds: step c's formula solved for epsilon at T = t."""
    return math.sqrt(32 * L * L * t * math.log(1 / delta)) / (n * sigma)


def normalised_projection(op, g: torch.Tensor) -> torch.Tensor:
    """s Phi g with s = ||g|| / ||Phi g|| (0 for g = 0): the projected gradient rescaled to the norm of g."""
    pg = op.apply(g)
    return pg * (g.norm() / pg.norm().clamp_min(torch.finfo(pg.dtype).tiny))  # g = 0 gives Phi g = 0


class PrivSGD(CompSGD):
    """PRIVSGD: clipped gradients, projected, rescaled to their own norm, plus N(0, sigma^2 I_m) in the projected
    space."""

    reads = CompSGD.reads + ("dp_epsilon", "dp_delta", "dp_clip", "dp_rounds")
    paper_epsilon = ("√(32 L² t log(1/δ))/(nσ) at t rounds, ε·√(t/T) for the ε asked over T: Claim C.1, the "
                     "Gaussian mechanism at the mean's per-record sensitivity 2L/n and strong composition")
    paper_epsilon_unguaranteed = ("privsgd's paper ε is at the mean's per-record sensitivity, which the rescaling of "
                                  "its message by s_t, a factor of the data, does not guarantee")

    def __init__(self, victim, train_set, **spec):
        super().__init__(victim, train_set, **spec)
        # n of the paper's formula: the examples a step averages, B or all of a shard smaller than B (the fewest)
        self.sigma = privsgd_sigma(self.dp_clip, self.dp_rounds, self.dp_delta, self.smallest_batch(), self.dp_epsilon)

    def gradient(self, u, x, y, t, c, k, create_graph=False):
        return per_example_clipped_mean(self.victim, u, x, y, self.dp_clip, create_graph=create_graph)

    def attacker_gradient(self, u, x, y):
        # the attacker knows the clip norm, never the noise
        return per_example_clipped_mean(self.victim, u, x, y, self.dp_clip, create_graph=True)

    def encode(self, delta, t, op=None, c=None):
        op = self.operator(t) if op is None else op
        noise = torch.randn(op.b, generator=torch_stream(self.seed, t, -1 if c is None else c, DP_NOISE),
                            dtype=torch.float64).to(device=delta.device, dtype=delta.dtype)
        return normalised_projection(op, delta) + self.sigma * noise

    def attacker_encode(self, delta, op):
        return normalised_projection(op, delta)

    def privacy(self, rounds: int) -> dict:
        n_c = min(s.numel() for s in self.shards)
        q, n = min(1.0, self.batch_size / n_c), self.smallest_batch()
        return {"sigma": self.sigma,
                "epsilon_paper": privsgd_epsilon(self.dp_clip, rounds, self.dp_delta, n, self.sigma),
                "delta_paper": self.dp_delta,
                "epsilon_rdp": accountant_epsilon(self.sigma * n / self.dp_clip, q, rounds,
                                                  self.dp_delta, accountant="rdp"),
                "epsilon_rdp_normalised": accountant_epsilon(self.sigma / (2 * self.dp_clip), q, rounds,
                                                             self.dp_delta, accountant="rdp"),
                "rounds_covered": int(self.dp_rounds)}  # the rounds sigma was set for (T)
