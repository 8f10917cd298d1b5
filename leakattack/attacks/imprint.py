"""The imprint attack of a malicious server (Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the Fed", ICLR
2022): the server sends the model behind an imprint block of K bins (:mod:`targets.models.imprint`), and reads each
image that falls alone into a bin from the difference of two neighbouring rows of the block's gradient.

Rows k of the weight and bias gradients sum delta_i [x_i; 1] over the examples whose query value exceeds threshold
c_k, so row k minus row k + 1 holds the examples of bin k alone, and x = (dW_k - dW_{k+1}) / (db_k - db_{k+1}) where
that is one example; two examples in one bin come back as one image, the delta-weighted combination of the two.
The block's gradient is read from g, solved from the message where b >= d; through a sketch with b < d it is read
by least squares on the message over the block's K (m + 1) numbers alone (b of them at least), the rest of g taken
as noise: the server makes the block's gradient outweigh the rest (targets.models.imprint.SLOPE).  Measurements:
docs/attacks/imprint.md.
"""

from __future__ import annotations

import time

import torch

import targets
from targets.models.imprint import QUERIES, add_imprint, imprint_block

from ..constraints import Choice, Number, Param
from ..observation import Observation
from .analytic import Analytic, cgls
from .base import Attack, AttackResult, Monitor, closed_form_result
from .labels import recover_labels

#: the default number of bins (units of the block): about 95 % of a batch of 8 fall alone into one
DEFAULT_BINS = 128
#: a bin holds images where its bias-gradient difference exceeds this fraction of the largest one ...
HIT_RTOL = 1e-9
#: ... and, where most bins are empty, this multiple of the median one (the noise floor)
NOISE_FACTOR = 100.0
#: the most images of the server's data set whose query values fit the thresholds
PUBLIC_IMAGES = 1024
#: CGLS steps for the block's least-squares reading through a sketch with b < d
BLOCK_CGLS_STEPS = 200


def hits(dW: torch.Tensor, db: torch.Tensor, batch: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bins that hold images, their images (the row differences' quotients) and their bias differences, from
    the block's weight gradient dW (K x m) and bias gradient db (K), rows in increasing order of threshold.

    A bin holds images where its bias difference exceeds ``HIT_RTOL`` times the largest and, when at least half the
    bins must be empty (K >= 2 ``batch``), ``NOISE_FACTOR`` times the median: the noise floor of a block read
    through a sketch or under noise.  Where no bin clears that floor, the ``batch`` largest are taken."""
    dW = dW - torch.cat([dW[1:], torch.zeros_like(dW[:1])])
    db = db - torch.cat([db[1:], torch.zeros_like(db[:1])])
    size = db.abs()
    floor = HIT_RTOL * float(size.max()) if size.numel() else 0.0
    if batch and size.numel() >= 2 * batch:
        floor = max(floor, NOISE_FACTOR * float(size.median()))
    found = (size > floor).nonzero().squeeze(1) if floor > 0 else db.new_zeros(0, dtype=torch.long)
    if found.numel() == 0 and batch and floor > 0:  # nothing stands out of the noise: the largest, as a guess
        found = size.topk(min(batch, size.numel())).indices.sort().values
    return found, dW[found] / db[found, None], db[found]


def _block_size(block) -> int:
    """The block's gradient numbers, K (m + 1)."""
    return int(block.linear.weight.numel() + block.linear.bias.numel())


def _block_slices(victim, block) -> tuple[slice, slice]:
    """Where the block's weight and bias gradients sit in g."""
    names = {id(p): n for n, p in victim.model.named_parameters()}
    slices = targets.param_slices(victim)
    return slices[names[id(block.linear.weight)]], slices[names[id(block.linear.bias)]]


def _fit_block(M, y: torch.Tensor, w: slice, b: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's numbers z (weight then bias) minimising ||M E z - y|| (E: z into g, zeros elsewhere) by CGLS
    from the back-projection, in float64: the least-squares reading of the block when the rest of g is small; and
    y - M E z, the message of the rest of g (in y's dtype), which the label rules read."""
    idx = torch.cat([torch.arange(w.start, w.stop), torch.arange(b.start, b.stop)]).to(y.device)
    dtype, y = y.dtype, y.to(torch.float64)

    def embed(z):
        g = z.new_zeros(M.d)
        g[idx] = z
        return M.apply(g.to(dtype)).to(torch.float64)

    def restrict(r):
        return M.adjoint(r).to(torch.float64)[idx]

    start = restrict(y)
    scale = float(embed(start).norm()) ** 2 / max(float(start.norm()) ** 2, 1e-300)  # ||E^T M^T M E|| estimate
    z = cgls(embed, restrict, y, start / max(scale, 1e-300), BLOCK_CGLS_STEPS, tol=1e-10)
    return z, (y - embed(z)).to(dtype)


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
        block = imprint_block(victim.model)
        if block is None:
            return (f"imprint reads the gradient of an imprint block that the server puts in front of the model, and "
                    f"{victim.name} has none (leakattack run --attack imprint adds it; from Python, "
                    "Imprint.modify(victim, images) before the client's gradient)")
        M = obs.linear_map
        n = _block_size(block)
        if M.b < n:
            m = victim.unknowns_per_example
            return (f"imprint reads its block's {n} gradient numbers from the message by least squares, and a message "
                    f"of b = {M.b} numbers holds fewer; at most {M.b // (m + 1)} bins fit it (--bins), or use "
                    "gradient-matching")
        return None

    def reconstruct(self, obs: Observation, *, monitor: Monitor | None = None, monitor_every: int = 10,
                    progress: bool = False) -> AttackResult:
        self.check(obs)
        t0 = time.perf_counter()
        victim = obs.victim
        block = imprint_block(victim.model)
        assert block is not None  # check() refused a victim without one
        M, y = obs.linear_map, obs.y.detach().reshape(-1)
        w, b = _block_slices(victim, block)
        rest = obs.y  # the message the label rules read
        if M.b >= M.d:  # g itself
            g = self._square._solve_square(M, y).to(torch.float64)
            dW, db = g[w].reshape(block.bins, -1), g[b]
        else:  # the block's numbers by least squares on y, the rest of g taken as noise
            z, rest = _fit_block(M, y, w, b)
            dW, db = z[:w.stop - w.start].reshape(block.bins, -1), z[w.stop - w.start:]
        found, images, diffs = hits(dW, db, obs.batch_size)
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
        labels = obs.labels if obs.labels is not None else recover_labels(victim, M, rest.reshape(obs.y.shape), B)
        n = int(found.numel())
        held = f"{n} of {block.bins} bins held images of the batch of {B}"
        notes = []
        if n < B:
            notes.append(f"{held}: at least {B - n} of its images shared a bin with another, and each such bin gave "
                         "back one blend of its images (repeated to fill the batch)")
        elif n > B:
            why = ("the block was read through the sketch, with the rest of the gradient as noise" if M.b < M.d else
                   "the message is not the exact gradient at the server's model (noise, several local steps)")
            notes.append(f"{held}: more bins than images, as {why}; the {B} with the largest bias differences were "
                         "kept")
        if outside:
            notes.append(f"{outside} of the {n} images read lie outside their bins (noise, or a blend of two images "
                         "whose weights differ in sign)")
        return closed_form_result(
            x.to(victim.dtype), labels, [residual], notes, step=0, monitor=monitor,
            wall_s=time.perf_counter() - t0, solved=f"{held}, each image alone in its bin",
            non_finite="the bins' quotients came out non-finite")


__all__ = ["Imprint", "DEFAULT_BINS", "HIT_RTOL", "NOISE_FACTOR", "PUBLIC_IMAGES", "BLOCK_CGLS_STEPS", "hits"]
