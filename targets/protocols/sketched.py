"""Song, Wang, Yu, Zhang (ICML 2023), Algorithms 1 and 2: iterative sketching, with and without DP noise.

* ``sketched``    a fresh R_t per round from the shared seed (:func:`round_seed`),
                  clients send R_t dw_c, the server averages and scales by eta_g,
                  clients de-sketch with R_t^T.
* ``sketched-dp`` as ``sketched`` with Gaussian noise N(0, sigma^2 I) added to the
                  gradient at every local step; sigma from (eps^, delta^) by Lemma
                  H.7 with sensitivity l_c (Lemma H.8), l_c enforced by per-example
                  clipping.
"""

from __future__ import annotations

import math

import torch

from defenses.accounting import accountant_epsilon, gaussian_sigma, paper_composition
from defenses.accounting.analysis import paper_epsilon_holds
from defenses.clipping import clip_by_norm
from leakattack.seeds import DP_NOISE, torch_stream
from leakattack.sketch import get_sketch, is_identity, sketch_dim

from ..oracle import per_example_gradients, unflatten
from .base import Protocol, round_seed


def per_example_clipped_mean(victim, u: torch.Tensor, x: torch.Tensor, y: torch.Tensor, clip: float,
                             create_graph: bool = False) -> torch.Tensor:
    """(1/B) sum_i g_i min(1, C/||g_i||): a mean gradient of norm <= C = l_c (Lemma H.8's bound)."""
    rows = per_example_gradients(victim, x, y, params=unflatten(victim, u), create_graph=create_graph)
    return clip_by_norm(rows, clip).mean(0)


class Sketched(Protocol):
    """Song et al. 2023, Algorithm 1: sk_t = R_t, desk_t = R_t^T, R_t fresh each round from the shared seed."""

    uses_sketch = True
    reads: tuple[str, ...] = ("sketch", "sketch_ratio", "sketch_params")

    @property
    def b(self) -> int:
        return sketch_dim(self.sketch_ratio, self.d) if not is_identity(self.sketch) else self.d

    def operator(self, t, seed_offset=0):
        """R_t, drawn from the shared seed (the last one drawn is kept: a round asks for it once per client and once
        on the server)."""
        seed = round_seed(self.seed, t) + seed_offset
        key = (self.sketch, self.d, self.b, seed, dict(self.sketch_params), self.device)
        cached = self.__dict__.get("_operator")
        if cached is None or cached[0] != key:
            op = get_sketch(self.sketch, self.d, self.b, seed=seed, **self.sketch_params).to(self.device)
            self._operator = cached = (key, op)
        return cached[1]

    def floats_per_client(self):
        return self.b

    def server(self, w, t, deltas, messages):
        avg = self.global_lr * torch.stack(list(messages.values())).mean(0)  # Delta w~^t (line 19)
        return w + self.operator(t).adjoint(avg)  # line 9: w^{t+1} = w^t + desk_t(Delta w~^t)


class SketchedDP(Sketched):
    """Song et al. 2023, Algorithm 2: Gaussian noise N(0, sigma^2 I) at every local step, sigma by Lemma H.7."""

    reads = Sketched.reads + ("dp_epsilon", "dp_delta", "dp_clip")
    paper_epsilon = "√(tK)·ε̂ over t rounds of K steps: Lemma H.7, then Theorem 6.2"
    paper_epsilon_below_one = True

    def __init__(self, victim, train_set, **spec):
        super().__init__(victim, train_set, **spec)
        self.sigma = float(gaussian_sigma(self.dp_epsilon, self.dp_delta, self.dp_clip))

    def gradient(self, u, x, y, t, c, k, create_graph=False):
        g = per_example_clipped_mean(self.victim, u, x, y, self.dp_clip)
        noise = torch.randn(self.d, generator=torch_stream(self.seed, t, c, k, DP_NOISE), dtype=torch.float64)
        return g + self.sigma * noise.to(device=g.device, dtype=g.dtype)

    def attacker_gradient(self, u, x, y):
        # the attacker knows the clip norm, never the noise
        return per_example_clipped_mean(self.victim, u, x, y, self.dp_clip, create_graph=True)

    def paper_bound_note(self, rounds: int) -> str | None:
        """Where Theorem 6.2's sqrt(t K) eps_hat reaches 1 by round ``rounds``: outside Lemma H.7's and the theorem's
        conditions (``defenses.accounting.paper_epsilon_holds``) it bounds nothing, from the first round t with
        t K eps_hat^2 >= 1 on; and where its delta, t K delta_hat, reaches 1, from which round no epsilon bounds
        anything (the accountant's epsilon_rdp is null there)."""
        K = max(self.step_count(c) for c in range(self.clients))
        composed = {t: paper_composition(self.dp_epsilon, self.dp_delta, t, K) for t in range(1, rounds + 1)}
        eps = composed[rounds][0]
        # from this round on the theorem's delta, t K delta_hat, reaches 1: no epsilon bounds anything (null)
        spent = next((t for t, (_, delta) in composed.items() if delta >= 1), None)
        said = []
        if not paper_epsilon_holds(eps):
            first = next(t for t, (e, _) in composed.items() if not paper_epsilon_holds(e))
            bound = "epsilon_rdp is the accountant's bound" + ("" if spent is None else
                                                                f" up to round {spent - 1}")
            said.append(f"the paper's epsilon of sketched-dp, sqrt(t K) eps_hat (epsilon_paper), is a DP bound only "
                        f"below 1 (Lemma H.7, Theorem 6.2), and with eps_hat {self.dp_epsilon:g} and K = {K} it is "
                        f"{eps:.3g} by round {rounds}: from round {first} on it bounds nothing ({bound})")
        if spent is not None:
            said.append(f"from round {spent} on the theorem's delta, t K delta_hat with delta_hat {self.dp_delta:g} "
                        f"and K = {K}, reaches 1, and no epsilon bounds the training (epsilon_rdp is null)")
        return "; ".join(said) or None

    def privacy(self, rounds: int) -> dict:
        """(eps, delta) after ``rounds`` rounds: Theorem 6.2 and an RDP accountant (per client: parallel
        composition) at the theorem's delta; ``epsilon_rdp`` is None once that delta reaches 1 (T K delta_hat >= 1:
        nothing is bounded).

        The accountant follows the data the K local steps read.  With ``local_steps`` every step of a round reuses
        the round's batch (:meth:`schedule`), so a record drawn at rate q = B/n_c takes part in all K: a round is one
        sub-sampled release of K Gaussian mechanisms on the same batch, whose composition is the Gaussian mechanism
        of noise multiplier z/sqrt(K) (K alpha/(2 z^2) in RDP), over ``rounds`` rounds.  With ``local_epochs`` the
        steps walk the shard's shuffled batches, each counted as one sub-sampled step at q (Opacus' rule for
        shuffled batches), rounds x K of them.  Either way the batches are drawn uniformly, B of the shard, and
        counted as Poisson-sampled at q: the usual approximation, not a proven bound."""
        K = max(self.step_count(c) for c in range(self.clients))  # local steps per round (the most over clients)
        eps_paper, delta_paper = paper_composition(self.dp_epsilon, self.dp_delta, rounds, K)
        n_c = min(s.numel() for s in self.shards)
        q = min(1.0, self.batch_size / n_c)
        # noise on the mean of n clipped gradients is noise multiplier sigma*n/C on their sum: n the fewest a step
        # averages (B, or a shard or an epoch's last mini-batch smaller than B: the least noise per example)
        multiplier = self.sigma * self.smallest_batch() / self.dp_clip
        z, releases = (multiplier, rounds * K) if self.local_epochs else (multiplier / math.sqrt(K), rounds)
        # at delta_paper >= 1 the composition bounds nothing, and no epsilon answers that delta (null)
        eps_rdp = accountant_epsilon(z, q, releases, delta_paper, accountant="rdp") if delta_paper < 1 else None
        return {"sigma": self.sigma, "epsilon_paper": eps_paper, "delta_paper": delta_paper, "epsilon_rdp": eps_rdp}
