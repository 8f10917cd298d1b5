"""Label recovery from a true or sketched gradient.

iDLG (Zhao et al., 2020): with cross-entropy and non-negative features h (sigmoid
or ReLU), the gradient of the head's weight row c is (p_c - 1[c = y]) h, so the
row of the true label has a negative sum and every other row a positive one.

Through a sketch the attacker does not see g but y = R g.  The row sum is the
inner product <m_c, g> with m_c the indicator of row c, and R is a
coordinate-wise embedding (Song et al. 2023, Definition 4.1 / Lemma D.11):
E[<R m_c, R g>] = <m_c, g>, with variance O(||m_c||^2 ||g||^2 / b).  So the
attacker sketches each row indicator with the known R and reads the sign of
s_c = <R m_c, y>.  For the unsketched gradient this is exactly iDLG.

For a batch of B images (mean loss), s_c = (1/B) sum_i (p_ic - 1[y_i = c]) S_i
with S_i the feature sum of image i.  Following the LLG estimate (Wainakh et al.,
"User-level label leakage from gradients", 2022), the attacker estimates the mean
feature sum S and mean softmax p_c by running the known model on random dummy
inputs, counts n_c ~ B (p_c - s_c / S) images per class, and hands out the B
labels greedily by largest remaining count (so labels may repeat).
"""

from __future__ import annotations

import torch

import targets

from ..seeds import torch_generator


def sketched_rows(victim, sketch, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """R m_c for the indicator m_c of each weight row c of the head, as a (C, b) matrix, and ||m_c||^2."""
    head = victim.head
    name = next(n for n, p in victim.model.named_parameters() if p is head.weight)
    start = targets.param_slices(victim)[name].start
    C, h = head.weight.shape
    masks = torch.zeros(C, sketch.d, dtype=like.dtype, device=like.device)
    for c in range(C):
        masks[c, start + c * h: start + (c + 1) * h] = 1.0
    return sketch.apply(masks), h


def recover_labels(victim, sketch, y: torch.Tensor, batch_size: int, probes: int = 64) -> torch.Tensor:
    """iDLG's sign rule read through the sketch (B = 1); LLG-style counts for B > 1."""
    rows, h = sketched_rows(victim, sketch, y)
    scores = rows @ y
    if batch_size == 1:
        return scores.argmin().reshape(1).to(torch.long)
    # <R m, R g> estimates gain * <m, g> with gain = E||R m||^2 / ||m||^2: 1 for the
    # sketches, a^2 for a message a R g (a = -lr for an update); divide it out
    gain = float(rows.pow(2).sum(1).mean()) / h
    feats, probs = _probe(victim, probes, y)
    counts = batch_size * (probs - scores / (gain * feats))
    out = []
    for _ in range(batch_size):
        c = int(counts.argmax())
        out.append(c)
        counts[c] -= 1
    return torch.tensor(sorted(out), dtype=torch.long, device=y.device)


def _probe(victim, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean feature sum entering the head and mean softmax on n seeded U[0,1] dummy inputs."""
    seen = []
    hook = victim.head.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    try:
        x = torch.rand((n, *victim.input_shape), generator=torch_generator(0)).to(like)
        with torch.no_grad():
            probs = torch.softmax(victim.model(x), dim=-1).mean(0)
    finally:
        hook.remove()
    return seen[0].sum(1).mean(), probs


def sign_rule_snr(victim, sketch, y: torch.Tensor) -> float:
    """How far the iDLG pick stands out of the sketch noise: (2nd lowest - lowest score) / sigma.

    For y = M g with M = a R and R a coordinate-wise embedding, <M m_c, y> estimates
    a^2 <m_c, g> with standard deviation about ||M m_c|| ||y|| sqrt(1/b - 1/d)
    (Lemma D.11's O(||m|| ||g|| / sqrt(b)), with the finite-population factor that is 0
    for an unsketched message).  Below ~2 the recovered label is a coin toss.
    """
    rows, _ = sketched_rows(victim, sketch, y)
    scores = (rows @ y).sort().values
    sigma = float(rows.norm(dim=1).mean() * y.norm()) * max(0.0, 1 / sketch.b - 1 / sketch.d) ** 0.5
    gap = float(scores[1] - scores[0])
    return gap / sigma if sigma > 0 else float("inf")
