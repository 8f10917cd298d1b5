"""The imprint attack of a malicious server (Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the Fed", ICLR
2022): the server sends the model behind an imprint block of K bins (:mod:`targets.models.imprint`), and reads each
image that falls alone into a bin from the difference of two neighbouring rows of the block's gradient.

Rows k of the weight and bias gradients sum delta_i [x_i; 1] over the examples whose brightness exceeds threshold
c_k, so row k minus row k + 1 holds the examples of bin k alone, and x = (dW_k - dW_{k+1}) / (db_k - db_{k+1}) where
that is one example; two examples in one bin come back as one image, the delta-weighted combination of the two.
The block's gradient is read from g, solved from the message where b >= d; through a sketch with b < d the block
is not determined and the attack refuses.  Measurements: docs/attacks/imprint.md.
"""

from __future__ import annotations

import time

import torch

import targets
from targets.models.imprint import QUERIES, add_imprint, imprint_block

from ..constraints import Choice, Number, Param
from ..observation import Observation
from .analytic import Analytic
from .base import Attack, AttackResult, Monitor, closed_form_result
from .labels import recover_labels

#: the default number of bins (units of the block): about 95 % of a batch of 8 fall alone into one
DEFAULT_BINS = 128
#: a bin holds images where its bias-gradient difference exceeds this fraction of the largest one
HIT_RTOL = 1e-9
#: the most images of the server's data set whose brightness fits the thresholds
PUBLIC_IMAGES = 1024


def hits(dW: torch.Tensor, db: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bins that hold images, their images (the row differences' quotients) and their bias differences, from
    the block's weight gradient dW (K x m) and bias gradient db (K), rows in increasing order of threshold."""
    dW = dW - torch.cat([dW[1:], torch.zeros_like(dW[:1])])
    db = db - torch.cat([db[1:], torch.zeros_like(db[:1])])
    scale = float(db.abs().max()) if db.numel() else 0.0
    found = (db.abs() > HIT_RTOL * scale).nonzero().squeeze(1) if scale > 0 else db.new_zeros(0, dtype=torch.long)
    return found, dW[found] / db[found, None], db[found]


class Imprint(Attack):
    """A malicious server's closed form: the images that fall alone into a bin of its imprint block."""

    name = "imprint"
    closed_form = True
    modifies_model = True
    options = (Param("bins", DEFAULT_BINS, Number(2, integer=True), "imprint bins",
                     "imprint: units of the block the server puts in front of the model (Fowl et al. 2022), one bin "
                     "of its query's values each"),
               Param("query", "random", Choice(QUERIES), "imprint query",
                     "imprint: the linear query of the image the bins cut, a fixed random direction or the "
                     "brightness"))

    def __init__(self, bins: int = DEFAULT_BINS, query: str = "random"):
        self.bins = int(bins)
        self.query = query
        self._square = Analytic()

    def modify(self, victim, public) -> None:
        """The server's model: ``victim`` behind an imprint block of ``bins`` bins, thresholds fitted to the first
        :data:`PUBLIC_IMAGES` images of ``public`` (an image set the server holds, or a tensor of images)."""
        images = public if isinstance(public, torch.Tensor) else public.rows(slice(0, min(len(public),
                                                                                          PUBLIC_IMAGES)))[0]
        add_imprint(victim, self.bins, images[:PUBLIC_IMAGES], self.query)

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        if imprint_block(victim.model) is None:
            return (f"imprint reads the gradient of an imprint block that the server puts in front of the model, and "
                    f"{victim.name} has none (leakattack run --attack imprint adds it; from Python, "
                    "Imprint.modify(victim, images) before the client's gradient)")
        M = obs.linear_map
        if M.b < M.d:
            return (f"imprint needs the imprint block's gradient, and a message of b = {M.b} numbers for d = {M.d} "
                    "does not determine it without a model of the rest of the gradient; use --sketch none, a sketch "
                    "with b >= d, or gradient-matching")
        return None

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        victim = obs.victim
        block = imprint_block(victim.model)
        assert block is not None  # check() refused a victim without one
        g = self._square._solve_square(obs.linear_map, obs.y.detach().reshape(-1)).to(torch.float64)
        names = {id(p): n for n, p in victim.model.named_parameters()}
        slices = targets.param_slices(victim)
        dW = g[slices[names[id(block.linear.weight)]]].reshape(block.bins, -1)
        db = g[slices[names[id(block.linear.bias)]]]
        found, images, diffs = hits(dW, db)
        B = obs.batch_size
        order = diffs.abs().argsort(descending=True)
        if found.numel() == 0:
            x = torch.zeros((B, *victim.input_shape), dtype=torch.float64, device=g.device)
        else:
            picked = order[torch.arange(B, device=order.device) % order.numel()]  # the clearest hits; repeats
            x = images[picked].reshape(B, *victim.input_shape)
        # the share of the bins' bias signal that the returned batch leaves out (hits beyond B)
        residual = float(diffs[order[B:]].norm() / diffs.norm()) if found.numel() > B else 0.0
        value = images @ block.query.to(images)
        c = block.thresholds.to(images)
        upper = torch.cat([c[1:], c.new_full((1,), float("inf"))])
        outside = int(((value <= c[found]) | (value > upper[found])).sum())
        labels = obs.labels if obs.labels is not None else recover_labels(victim, obs.linear_map, obs.y, B)
        n = int(found.numel())
        held = f"{n} of {block.bins} bins held images of the batch of {B}"
        notes = []
        if n < B:
            notes.append(f"{held}: at least {B - n} of its images shared a bin with another, and each such bin gave "
                         "back one blend of its images (repeated to fill the batch)")
        elif n > B:
            notes.append(f"{held}: more bins than images, so the message is not the exact gradient at the server's "
                         f"model (noise, several local steps); the {B} with the largest bias differences were kept")
        if outside:
            notes.append(f"{outside} of the {n} images read lie outside their bins (noise, or a blend of two images "
                         "whose weights differ in sign)")
        return closed_form_result(
            x.to(victim.dtype), labels, [residual], notes, step=0, monitor=monitor,
            wall_s=time.perf_counter() - t0, solved=f"{held}, each image alone in its bin",
            non_finite="the bins' quotients came out non-finite")


__all__ = ["Imprint", "DEFAULT_BINS", "HIT_RTOL", "PUBLIC_IMAGES", "hits"]
