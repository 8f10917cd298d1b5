"""The imprint attack of a malicious server (Fowl, Geiping, Czaja, Goldblum, Goldstein, "Robbing the Fed", ICLR
2022): the server sends the model behind an imprint block of K bins (:mod:`targets.models.imprint`), and reads each
image that falls alone into a bin from the difference of two neighbouring rows of the block's gradient.

Rows k of the weight and bias gradients sum delta_i [x_i; 1] over the examples whose query value exceeds threshold
c_k, so row k minus row k + 1 holds the examples of bin k alone, and x = (dW_k - dW_{k+1}) / (db_k - db_{k+1}) where
that is one example; two examples in one bin come back as one image, the delta-weighted combination of the two.
The block's gradient is read from g, solved from the message where b >= d; through a sketch with b < d it is read
by least squares on the message, the rest of g taken as noise (the server makes the block's gradient outweigh the
rest: targets.models.imprint.SLOPE): over the block's K (m + 1) numbers where b is twice that, else over the rows
of its row differences that hold images, found one by one (group orthogonal matching pursuit).  Measurements:
docs/attacks/imprint.md.
"""

from __future__ import annotations

import math
import time
import warnings

import torch

import defenses
import targets
from defenses.noise import Gaussian, Laplace
from targets.models.imprint import QUERIES, add_imprint, imprint_block

from ..constraints import Choice, Number, Param
from ..errors import SettingWarning, duration_text
from ..observation import Observation
from .analytic import Analytic, cgls
from .base import NO_CAUSE, Attack, AttackResult, Monitor, closed_form_result, inexact_causes
from .labels import (
    finite_part,
    head_from_gradient,
    labels_at_images,
    read_head,
    recover_labels,
    scale_unknown,
    scaled_per_example,
)

#: the default number of bins (units of the block): were the bins equally likely, an image of a batch of 8 would be
#: alone in its bin with probability (1 - 1/128)^7 = 0.95
DEFAULT_BINS = 128
#: the most bins: with K bins an image of a batch of B is alone in its bin with probability (1 - 1/K)^(B - 1), 0.994
#: for 100 images at 16,384 bins, so more bins only cost memory (the block holds K (m + 1) weights, 9.9 GB for
#: 224x224 images in float32 at this bound)
MAX_BINS = 16_384
#: a bin holds images where its bias-gradient difference exceeds this fraction of the largest one ...
HIT_RTOL = 1e-9
#: ... and, where most bins are empty, this multiple of the median one (the noise floor)
NOISE_FACTOR = 100.0
#: the most images of the server's data set whose query values fit the thresholds
PUBLIC_IMAGES = 1024
#: CGLS steps for the block's least-squares reading through a sketch with b < d ...
BLOCK_CGLS_STEPS = 200
#: ... which runs where b is at least this many times the block's K (m + 1) numbers; below, the rows that hold images
#: are found one by one (:func:`_fit_rows`), each refit taking up to ROW_CGLS_STEPS steps
LEAST_SQUARES_MARGIN = 2
ROW_CGLS_STEPS = 200


def hits(dW: torch.Tensor, db: torch.Tensor, batch: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bins that hold images, their images (the row differences' quotients) and their bias differences, from
    the block's weight gradient dW (K x m) and bias gradient db (K), rows in increasing order of threshold.

    A bin holds images where its bias difference exceeds ``HIT_RTOL`` times the largest and, when at least half the
    bins must be empty (K >= 2 ``batch``), ``NOISE_FACTOR`` times the median: the noise floor of a block read
    through a sketch or under noise.  Where no bin clears that floor, the ``batch`` largest are taken."""
    dW = dW - torch.cat([dW[1:], torch.zeros_like(dW[:1])])
    db = _differences(db)
    size = db.abs()
    floor, _ = _floor(size, batch)
    found = (size > floor).nonzero().squeeze(1) if floor > 0 else db.new_zeros(0, dtype=torch.long)
    if found.numel() == 0 and batch and floor > 0:  # nothing stands out of the noise: the largest, as a guess
        found = size.topk(min(batch, size.numel())).indices.sort().values
    return found, dW[found] / db[found, None], db[found]


def _differences(db: torch.Tensor) -> torch.Tensor:
    """Each bin's bias difference, row k minus row k + 1 (the last row as it is)."""
    return db - torch.cat([db[1:], torch.zeros_like(db[:1])])


def _floor(size: torch.Tensor, batch: int) -> tuple[float, bool]:
    """The size a bin's bias difference must exceed to hold images (:func:`hits`), and whether the noise floor (the
    median bin's, where most bins must be empty) set it rather than the round-off floor."""
    floor = HIT_RTOL * float(size.max()) if size.numel() else 0.0
    if batch and size.numel() >= 2 * batch and (noise := NOISE_FACTOR * float(size.median())) > floor:
        return noise, True
    return floor, False


def noisy_bins(db: torch.Tensor, batch: int) -> bool:
    """Whether the empty bins of the block's bias gradient ``db`` are not empty but noise that sets the floor a bin
    must clear (:func:`hits`): then a bin can hold an image and not stand out."""
    return _floor(_differences(db).abs(), batch)[1]


def _noise_steps(spec: str, noise: bool = True) -> list[str]:
    """The steps of the defense ``spec`` that add noise, as their specs; with ``noise=False`` those that change the
    gradient without noise (a clip, pruning, quantization)."""
    if not spec:
        return []
    return [t.spec() for t in defenses.build(spec).steps if isinstance(t, (Gaussian, Laplace)) == noise]


def _block_size(block) -> int:
    """The block's gradient numbers, K (m + 1)."""
    return int(block.linear.weight.numel() + block.linear.bias.numel())


def _block_slices(victim, block) -> tuple[slice, slice]:
    """Where the block's weight and bias gradients sit in g."""
    names = {id(p): n for n, p in victim.model.named_parameters()}
    slices = targets.param_slices(victim)
    return slices[names[id(block.linear.weight)]], slices[names[id(block.linear.bias)]]


#: a least-squares reading of the block whose products are estimated to take longer than this (seconds) in all is
#: warned of, once, after its first products
SLOW_SOLVE_SECONDS = 60.0
#: products timed for that estimate, after the first ones (which may build the sketch's matrix, once)
PACE_SKIP, PACE_TIMED = 2, 4


class _Pace:
    """Times the sketch's products in the block's least squares and warns once, after the first few, where the most
    products its solves can take (``most``) are estimated to pass :data:`SLOW_SOLVE_SECONDS`: a dense sketch (ams,
    gaussian) of a large victim multiplies all of R every step, which may take minutes with nothing said."""

    def __init__(self, most: int, kind: str):
        self.most, self.kind, self.calls, self.spent = most, kind, 0, 0.0

    def __call__(self, product):
        def timed(v):
            t0 = time.perf_counter()
            out = product(v)
            self.calls += 1
            if PACE_SKIP < self.calls <= PACE_SKIP + PACE_TIMED:
                if out.is_cuda:  # the product's own time, not its queueing
                    torch.cuda.synchronize(out.device)
                self.spent += time.perf_counter() - t0
                if self.calls == PACE_SKIP + PACE_TIMED:
                    per = self.spent / PACE_TIMED
                    if per * self.most > SLOW_SOLVE_SECONDS:
                        warnings.warn(f"imprint reads its block through the {self.kind} sketch by least squares: up to "
                                      f"{self.most} products with R, about {per:.2g} s each here, so up to "
                                      f"{duration_text(per * self.most)} (--sketch srht or countsketch multiplies "
                                      "by R in a fraction of that)", SettingWarning, stacklevel=2)
            return out
        return timed


def _most_products(bins: int, batch: int, block: bool) -> int:
    """The most products with R the block's least squares take: :func:`_fit_block`'s (a back-projection, a scale,
    CGLS's three before its steps and two a step, a residual; where ``block``), then :func:`_fit_rows`' rounds, each
    a correlation, its CGLS and a residual."""
    return (2 * BLOCK_CGLS_STEPS + 6 if block else 0) + min(bins, 2 * batch) * (2 * ROW_CGLS_STEPS + 5)


def _block_map(M, w: slice, b: slice, bins: int, device, pace: _Pace | None = None):
    """R E and (R E)^T on the block's numbers z (weight rows, then biases), in float64, and the maps between the
    row differences D (K x (m + 1), bin k's images in row k) and z: z's rows are D's sums from each row down.
    ``pace``: times the products (:class:`_Pace`)."""
    idx = torch.cat([torch.arange(w.start, w.stop), torch.arange(b.start, b.stop)]).to(device)
    m = (w.stop - w.start) // bins
    timed = pace if pace is not None else (lambda product: product)

    @timed
    def apply(z):
        g = z.new_zeros(M.d)
        g[idx] = z
        return M.apply(g).to(torch.float64)

    @timed
    def adjoint(r):
        return M.adjoint(r).to(torch.float64)[idx]

    def rows_to_z(D):
        Z = D.flip(0).cumsum(0).flip(0)
        return torch.cat([Z[:, :m].reshape(-1), Z[:, m]])

    def z_to_rows(z):  # the adjoint of rows_to_z
        return torch.cat([z[:bins * m].reshape(bins, m), z[bins * m:, None]], 1).cumsum(0)

    return apply, adjoint, rows_to_z, z_to_rows


def _fit_block(M, y: torch.Tensor, w: slice, b: slice, bins: int,
               pace: _Pace | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's numbers z minimising ||R E z - y|| (E: z into g, zeros elsewhere) by CGLS from the
    back-projection: the least-squares reading of the block when the rest of g is small; and y - R E z."""
    apply, adjoint, _, _ = _block_map(M, w, b, bins, y.device, pace)
    start = adjoint(y)
    scale = float(apply(start).norm()) ** 2 / max(float(start.norm()) ** 2, 1e-300)  # ||E^T R^T R E|| estimate
    z = cgls(apply, adjoint, y, start / max(scale, 1e-300), BLOCK_CGLS_STEPS, tol=1e-10)
    return z, y - apply(z)


def _fit_rows(M, y: torch.Tensor, w: slice, b: slice, bins: int, batch: int,
              pace: _Pace | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's numbers z = rows_to_z(D) with D non-zero in a few rows only (the bins that hold images), by
    group orthogonal matching pursuit: the row whose correlation with the residual is largest (per unit of its
    column norm, sqrt(k + 1) for row k) joins the support, and D on the support is refitted by CGLS, warm-started.
    ``batch`` rows at least; up to twice as many while each new row at least halves the residual.  Returns z and
    y - R E z."""
    apply, adjoint, rows_to_z, z_to_rows = _block_map(M, w, b, bins, y.device, pace)
    m1 = (w.stop - w.start) // bins + 1
    norms = torch.arange(1, bins + 1, dtype=torch.float64, device=y.device).sqrt()
    support: list[int] = []
    D = torch.zeros(bins, m1, dtype=torch.float64, device=y.device)
    r, last = y, 1.0
    for _ in range(min(bins, 2 * batch)):
        score = z_to_rows(adjoint(r)).norm(dim=1) / norms
        score[support] = -1.0
        support.append(int(score.argmax()))
        rows = torch.tensor(sorted(support), device=y.device)

        def on_support(v, rows=rows):
            full = torch.zeros(bins, m1, dtype=torch.float64, device=y.device)
            full[rows] = v.reshape(len(rows), m1)
            return apply(rows_to_z(full))

        def from_support(u, rows=rows):
            return z_to_rows(adjoint(u))[rows].reshape(-1)

        fit = cgls(on_support, from_support, y, D[rows].reshape(-1), ROW_CGLS_STEPS, tol=1e-12)
        left = y - on_support(fit)
        now = float(left.norm() / y.norm())
        if len(support) > batch and now > last / 2:
            break  # the new row fits noise: keep the support before it
        D = torch.zeros_like(D)
        D[rows] = fit.reshape(len(rows), m1)
        r, last = left, now
    return rows_to_z(D), r


def label_slopes(victim, block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, p) of :func:`assign_labels` for the images ``x``: w_i = d logits_i / d x'_i along the all-ones direction
    (two backward passes for the batch) and p_i the softmax at the image, in float64 on the CPU."""
    model = victim.model.model  # what comes after the block
    with torch.no_grad():
        xp = block(x.to(device=victim.device, dtype=victim.dtype))
    xp.requires_grad_(True)
    with torch.enable_grad():  # J 1 by two backward passes: d/du (J^T u) . 1
        logits = model(xp)
        u = torch.zeros_like(logits, requires_grad=True)
        (back,) = torch.autograd.grad(logits, xp, u, create_graph=True)
        (w,) = torch.autograd.grad(back, u, torch.ones_like(xp))
    return w.detach().to(torch.float64).cpu(), torch.softmax(logits.detach().to(torch.float64), 1).cpu()


def assign_labels(victim, block, x: torch.Tensor, labels: torch.Tensor, delta: torch.Tensor,
                  slopes: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The multiset ``labels`` put in the order of the images ``x`` (B images read from the block, in bins whose
    measured bias differences are ``delta``), for a victim that treats the examples of a batch apart (no BatchNorm
    on batch statistics; ``labels`` unchanged otherwise).

    The bias difference of image i's bin is delta_i = t kappa w_i . (p_i - e_{y_i}), kappa = (a / s) / (K B) (a / s
    / K where the victim's loss sums over the batch), with w_i = d logits_i / d x'_i along the all-ones direction
    (two backward passes for the batch), p_i the softmax at the image and t the message's scale against the
    gradient (1, or C / ||g|| under a clip of the whole update, which no attacker needs to know).  For each t that
    makes the clearest bin's reading exact with one of the labels (and t = 1) the Hungarian method matches the
    multiset to the images by the relative misfit |t pred_ij - delta_i| / |delta_i|; the cheapest match wins.
    ``slopes``: :func:`label_slopes` of x where the caller has them already."""
    from scipy.optimize import linear_sum_assignment

    if victim.batch_statistics:
        return labels
    B = x.shape[0]
    w, p = slopes if slopes is not None else label_slopes(victim, block, x)
    kappa = block.out_weight / (block.bins * (1 if victim.loss_reduction == "sum" else B))
    measured = delta.to(torch.float64).cpu()
    pool = torch.as_tensor([int(c) for c in labels.tolist()])
    pred = kappa * ((w * p).sum(1)[:, None] - w[:, pool])  # delta_i / t were image i's label pool[j]
    clearest = int(measured.abs().argmax())
    scales = {1.0} | {t for t in (measured[clearest] / pred[clearest]).tolist() if math.isfinite(t) and t > 0}
    best: tuple | None = None
    for t in sorted(scales):
        cost = (t * pred - measured[:, None]).abs() / measured.abs().clamp_min(1e-300)[:, None]
        if not torch.isfinite(cost).all():  # a message that is not finite (noise drowning it): no order to read
            return labels
        rows, cols = linear_sum_assignment(cost.numpy())
        total = float(cost[rows, cols].sum())
        if best is None or total < best[0]:
            best = (total, rows, cols)
    assert best is not None  # t = 1 is always among the scales
    _, rows, cols = best
    y = torch.empty(B, dtype=torch.long)
    y[torch.as_tensor(rows)] = pool[torch.as_tensor(cols)]
    return y.to(dtype=labels.dtype, device=labels.device)


class Imprint(Attack):
    """A malicious server's closed form: the images that fall alone into a bin of its imprint block."""

    name = "imprint"
    closed_form = True
    #: its final loss is the share of the bins' bias signal left out of the batch it returns, not a fit to y
    residual_name = "bin signal left out"
    uses_labels = False  # the images are the bins' quotients, whatever the labels read beside them
    modifies_model = True
    options = (Param("bins", DEFAULT_BINS, Number(2, MAX_BINS, integer=True), "imprint bins",
                     "imprint: units of the block the server puts in front of the model (Fowl et al. 2022), one bin "
                     f"of its query's values each (at most {MAX_BINS:,})"),
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
        first = slice(0, min(len(public), PUBLIC_IMAGES))
        add_imprint(victim, self.bins, public[first] if isinstance(public, torch.Tensor) else public.rows(first)[0],
                    self.query)

    def supports(self, obs: Observation) -> str | None:
        victim = obs.victim
        block = imprint_block(victim.model)
        if block is None:
            return (f"imprint reads the gradient of an imprint block that the server puts in front of the model, and "
                    f"{victim.name} has none (leakattack run --attack imprint adds it; from Python, "
                    "Imprint.modify(victim, images) before the client's gradient)")
        M = obs.linear_map
        m1 = victim.unknowns_per_example + 1
        if M.b < M.d and M.b < obs.batch_size * m1:
            return (f"imprint reads the rows of its block that hold the batch's images, {obs.batch_size} x {m1} = "
                    f"{obs.batch_size * m1} numbers, and a message of b = {M.b} numbers holds fewer; use "
                    "gradient-matching or a smaller batch")
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
        B, n_w = obs.batch_size, w.stop - w.start
        if block.bins < B:  # pigeonholes: some bin holds two images or more, which come back as one blend
            warnings.warn(f"imprint's block has {block.bins} bin{'s' if block.bins != 1 else ''} for a batch of {B}: "
                          "some of its images share a bin, and come back as one blend, or fall in none; give "
                          f"--bins {B} or more (the default is {DEFAULT_BINS})", SettingWarning, stacklevel=2)

        finite = [True]  # whether the block's gradient last read is finite

        def read(z):
            finite[0] = bool(torch.isfinite(z).all())
            found, images, diffs = hits(z[:n_w].reshape(block.bins, -1), z[n_w:], B)
            return found, images, diffs, int((block.bins_of(images).to(found) != found).sum()), \
                noisy_bins(z[n_w:], B)

        from_g = M.b >= M.d
        if from_g:  # g itself
            g = self._square._solve_square(M, y).to(torch.float64)
            found, images, diffs, outside, noisy = read(torch.cat([g[w], g[b]]))
            # a square sketch that is ill-conditioned on g (an SRHT's padding) can still hold the block well: its
            # images outside their bins, or more bins than images without noise, say g was not read; the block is
            # then read by least squares on y, as below
            from_g = getattr(M, "identity", False) or not (outside or (found.numel() > B and not noisy))
        if not from_g:  # the block by least squares on y, the rest of g taken as noise
            y64 = y.to(torch.float64)
            fitted = None
            whole = M.b >= LEAST_SQUARES_MARGIN * _block_size(block)
            pace = _Pace(_most_products(block.bins, B, whole), getattr(M, "kind", "given"))
            if whole:
                fitted = _fit_block(M, y64, w, b, block.bins, pace)
                found, images, diffs, outside, noisy = read(fitted[0])
                if outside or found.numel() > B:  # a sketch too coarse on the block's columns: the rows instead
                    fitted = None
            if fitted is None:
                fitted = _fit_rows(M, y64, w, b, block.bins, B, pace)
                found, images, diffs, outside, noisy = read(fitted[0])
            rest = fitted[1].to(y.dtype).reshape(obs.y.shape)
        order = diffs.abs().argsort(descending=True)
        if found.numel() == 0:
            x = torch.zeros((B, *victim.input_shape), dtype=torch.float64, device=y.device)
        else:
            picked = order[torch.arange(B, device=order.device) % order.numel()]  # the clearest hits; repeats
            x = images[picked].reshape(B, *victim.input_shape)
        # the share of the bins' bias signal that the returned batch leaves out (hits beyond B)
        residual = float(diffs[order[B:]].norm() / diffs.norm()) if found.numel() > B else 0.0
        labels, head = obs.labels, None
        if labels is None:
            rest = finite_part(rest)  # a message drowned in noise past the range, or a fit that overflowed
            if not from_g and victim.head is not None and victim.task == "classification":
                head = read_head(victim, M, rest)  # one adjoint, for the rules and the reading at the images
            labels = recover_labels(victim, M, rest, B, scale_unknown=scale_unknown(obs), read=head)
        slopes = None
        if victim.task == "classification" and found.numel() > 0:  # granted labels come in the truth's order
            slopes = None if victim.batch_statistics else label_slopes(victim, block, x)
            labels = assign_labels(victim, block, x, labels.reshape(-1), diffs[picked], slopes)
        if obs.labels is None and victim.task == "classification" and found.numel() >= B and not outside:
            # the batch's images read, each in its bin, the head's gradient gives their labels at any scale (a
            # clip's); the reading that fits the head's gradient better is kept
            head = head_from_gradient(victim, g) if from_g else head
            assert head is not None  # read above for the rules where g was not
            apart = scaled_per_example(obs)
            best = labels_at_images(victim, head, x, others=[labels], per_example=apart)
            assert best is not None  # one of the others at least
            labels = best.to(dtype=labels.dtype, device=labels.device).reshape(labels.shape)
            if not apart:
                # the head's gradient, read through a sketch with noise, tells two images' labels apart less surely
                # than the bins' differences, read exactly (a swap of two of 8 digits' labels fitted it closer);
                # its multiset is put in the images' order by them, as the rules' is (at one scale for the batch)
                labels = assign_labels(victim, block, x, labels.reshape(-1), diffs[picked],
                                       slopes).reshape(labels.shape)
        n = int(found.numel())
        held = f"{n} of {block.bins} bins held images of the batch of {B}"
        notes = []
        if not finite[0]:  # a defense's noise past the range, or a fit that overflowed
            notes.append(f"the block's gradient read from the message is not finite (NaN or infinite values): {held}, "
                         "and no image was read from it")
        elif n < B and noisy:  # the empty bins are noise: a bin that holds an image need not stand out of it
            noise = _noise_steps(obs.defense)
            cause = (f"the defense adds noise, {', '.join(noise)}" if noise else
                     "the block was read through the sketch, with the rest of the gradient as noise" if M.b < M.d else
                     "the message is not the exact gradient at the server's model")
            notes.append(f"{n} of {block.bins} bins stood out of the noise of the other bins for a batch of {B}: "
                         f"fewer bins than images, which images sharing a bin or bins hidden by the noise explain "
                         f"({cause}); each bin read gave back one image or a blend (repeated to fill the batch)")
        elif n < B and (other := _noise_steps(obs.defense, noise=False)):  # it changes the bins without noise
            notes.append(f"{held}: fewer bins than images, which images sharing a bin or the defense's "
                         f"{', '.join(other)} (it changes the bins' gradients) explain; each bin read gave back one "
                         "image or a blend (repeated to fill the batch)")
        elif n < B:
            notes.append(f"{held}: at least {B - n} of its images shared a bin with another, and each such bin gave "
                         "back one blend of its images (repeated to fill the batch)")
        elif n > B:
            why = ("the block was read through the sketch, with the rest of the gradient as noise" if M.b < M.d else
                   "the message is not the exact gradient at the server's model "
                   f"({inexact_causes(obs) or NO_CAUSE})")
            notes.append(f"{held}: more bins than images, as {why}; the {B} with the largest bias differences were "
                         "kept")
        if outside:
            causes = inexact_causes(obs)  # what in the channel moves the bins' gradients, where anything does
            notes.append(f"{outside} of the {n} images read lie outside their bins ("
                         + (f"{causes}, " if causes else "")
                         + "or a blend of two images whose weights differ in sign)")
        return closed_form_result(
            x.to(victim.dtype), labels, [residual], notes, step=0, monitor=monitor,
            wall_s=time.perf_counter() - t0, solved=f"{held}, each image alone in its bin",
            non_finite="the bins' quotients came out non-finite")


__all__ = ["Imprint", "assign_labels", "label_slopes", "DEFAULT_BINS", "MAX_BINS", "HIT_RTOL", "NOISE_FACTOR",
           "PUBLIC_IMAGES", "BLOCK_CGLS_STEPS", "LEAST_SQUARES_MARGIN", "ROW_CGLS_STEPS", "hits", "noisy_bins"]
