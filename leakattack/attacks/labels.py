"""Label recovery from a true or sketched gradient.

Every rule reads the head's gradient through the sketch with one adjoint M^T y
(U, the head's weight gradient, and beta, its bias gradient, each with known
sketch noise) and estimates the class counts n_c = sum_i p_ic - B dL/db_c; the
counts become B labels by one greedy allocation.  Rules (``LABEL_RULES``):
``pooled`` (default: bias and row signals weighted by their sketch noise, the
batch's mean embedding recovered as in iLRG), ``sign`` (iDLG; Yin et al. 2021),
``llg`` and ``llg-star`` (Wainakh et al. 2022), ``bias``, ``ilrg`` (Ma et al.
2023), ``magnitude`` (the largest rows of the head's gradient: for one example
exact whatever the sign of the features).  The derivation, every rule's
estimator and its limits (BatchNorm modes, non-negative head inputs):
docs/attacks/labels.md.  An attack that has rebuilt the batch's images reads
their labels from the head's gradient at them (``labels_at_images``: at any
positive scale, one per example under a per-example clip, so a clip does not
mislead it; docs/attacks/imprint.md).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import torch

import defenses
import targets

from ..errors import SettingWarning, UserError
from ..seeds import torch_generator
from ..sketch import readout_variance

#: names accepted by ``recover_labels(..., rule=...)``; the first is the default
LABEL_RULES = ("pooled", "sign", "llg", "llg-star", "bias", "ilrg", "magnitude")
DEFAULT_RULE = LABEL_RULES[0]
#: relative error assumed for the probes' feature scale when weighing it against the bias's
PROBE_SCALE_ERROR = 0.05
#: standard errors the method-of-moments spread must clear before it moves weight onto the bias
SPREAD_PENALTY = 3.0


@dataclass
class HeadReadout:
    """The head's gradient as the attacker reads it (module docstring): U (C, H), beta (C,) or None, noise sigma."""

    U: torch.Tensor
    beta: torch.Tensor | None
    sigma: float


@dataclass
class ProbeStats:
    """The model on random probes (``probe``): per-probe head inputs (n, H) and mean softmax (C,)."""

    feats: torch.Tensor
    probs: torch.Tensor


def _head_slices(victim) -> tuple[slice, slice | None]:
    """Where the head's weight and bias sit in the flat gradient."""
    head = victim.head
    names = {id(p): n for n, p in victim.model.named_parameters()}
    slices = targets.param_slices(victim)
    bias = slices[names[id(head.bias)]] if head.bias is not None and head.bias.requires_grad else None
    return slices[names[id(head.weight)]], bias


#: where labels come from when no rule can read them from the message, on the command line and in Python
OTHER_LABELS = ("use --labels given or --labels dlg (labels='given' with ThreatModel(knows_labels=True), or "
                "labels='dlg', in Python)")
#: the same for a regression, whose targets are real numbers that soft class labels (dlg) cannot be
GIVEN_LABELS = "use --labels given (labels='given' with ThreatModel(knows_labels=True) in Python)"


def other_labels(victim) -> str:
    """Where labels can come from for ``victim`` when no rule reads them: :data:`GIVEN_LABELS` for a regression,
    else :data:`OTHER_LABELS`."""
    return GIVEN_LABELS if getattr(victim, "task", "classification") == "regression" else OTHER_LABELS


def _head_gain(sketch, slices: tuple[slice, slice | None], like: torch.Tensor) -> tuple[float, str | None]:
    """||M m||^2 / ||m||^2 for the 0/1 mask m of the head's coordinates (``slices``: :func:`_head_slices`), and the
    sentence that says so where the map keeps none of them (a gain of 0), else None."""
    ws, bs = slices
    mask = torch.zeros(sketch.d, dtype=like.dtype, device=like.device)
    mask[ws] = 1.0
    if bs is not None:
        mask[bs] = 1.0
    gain = float(sketch.apply(mask).pow(2).sum()) / float(mask.sum())
    if gain:
        return gain, None
    return gain, (f"the sketch keeps none of the classifier head's {int(mask.sum())} coordinates (b = {sketch.b} of "
                  f"d = {sketch.d}), so the message holds no label signal for a label rule to read; {OTHER_LABELS}")


def hidden_head(victim, sketch, like: torch.Tensor) -> str | None:
    """Why no label rule can read ``victim``'s head through ``sketch`` (it keeps none of the head's coordinates), in
    one sentence; None where it keeps some.  Attacks that read labels ask it in their check, before any step."""
    return _head_gain(sketch, _head_slices(victim), like)[1]


def read_head(victim, sketch, y: torch.Tensor) -> HeadReadout:
    """U, beta and sigma of the module docstring from one adjoint M^T y and one sketched mask.

    A map that keeps none of the head's coordinates (a uniform sample that draws none of them) carries no label
    signal: one UserError sentence names it and the label sources that need none.  One that keeps a few is read as
    any other: the readout is unbiased over the draw of the sample, with a noise sigma that grows as fewer are kept.
    """
    ws, bs = _head_slices(victim)
    gain, kept = _head_gain(sketch, (ws, bs), y)
    if kept:
        raise UserError(kept)
    u = sketch.adjoint(y) / gain
    sigma = float(y.norm()) / math.sqrt(gain) * math.sqrt(readout_variance(sketch))
    # copies, so that a readout kept does not hold the whole adjoint (d numbers) alive
    U = u[ws].reshape(victim.head.weight.shape).clone()
    return HeadReadout(U=U, beta=None if bs is None else u[bs].clone(), sigma=sigma)


def probe(victim, n: int, like: torch.Tensor) -> ProbeStats:
    """Run the model in its own mode on n seeded probes; buffers (BN running statistics) are restored.

    Probes are N(0.5, 0.25^2) clipped to [0, 1], like the attack's default dummy images: on
    lenet and a ReLU+BN net, digits and photos, their mean softmax came closer to real
    batches' than that of U[0,1] noise, and every count rule gained a little from it.
    """
    noise = torch.randn((n, *victim.input_shape), generator=torch_generator(0))
    x = (0.5 + 0.25 * noise).clamp(0, 1).to(like)
    with targets.kept_buffers(victim.model), torch.no_grad():
        out, feats = victim.head_inputs(x)
        _warn_unlike_head(victim, out, feats)
    return ProbeStats(feats=feats, probs=torch.softmax(out, dim=-1).mean(0))


def _warn_unlike_head(victim, out: torch.Tensor, feats: torch.Tensor) -> None:
    """One warning where the model's class probabilities on the probes are not the softmax of its head's scores
    (a temperature or another map after the head): the count rules read the head's bias and weight gradients as
    those of cross-entropy on the head's own scores, and may miscount otherwise.  A softmax or log-softmax after the
    head keeps them."""
    head = victim.head
    scores = feats @ head.weight.detach().T + (head.bias.detach() if head.bias is not None else 0.0)
    if out.shape != scores.shape:
        return
    gap = float((torch.softmax(out, dim=-1) - torch.softmax(scores, dim=-1)).abs().max())
    if gap > 1e-3:
        warnings.warn(f"the class probabilities of model '{victim.name}' are not the softmax of its head's scores "
                      f"(they differ by up to {gap:.2g} on the probe images: a temperature or another map after the "
                      "head), and the label rules read the head's gradients as those of cross-entropy on its own "
                      "scores: the labels read may be wrong (--labels given, or dlg, does without them)",
                      SettingWarning, stacklevel=2)


def allocate(counts: torch.Tensor, batch_size: int) -> torch.Tensor:
    """B sorted labels from real-valued counts: repeatedly the class with the largest remaining count, minus one."""
    counts = counts.detach().clone()
    out = []
    for _ in range(batch_size):
        c = int(counts.argmax())
        out.append(c)
        counts[c] -= 1
    return torch.tensor(sorted(out), dtype=torch.long, device=counts.device)


# -- the rules: each returns B sorted labels ---------------------------------

def _sign(victim, read: HeadReadout, B: int, stats) -> torch.Tensor:
    order = read.U.sum(1).argsort().tolist()
    return torch.tensor(sorted(order[i % len(order)] for i in range(B)), dtype=torch.long, device=read.U.device)


def _llg(victim, read: HeadReadout, B: int, stats) -> torch.Tensor:
    g = read.U.sum(1).clone()
    neg = [c for c in g.argsort().tolist() if g[c] < 0] or [int(g.argmin())]  # most negative first
    # the authors' impact (Wainakh et al.'s code, Predictor.py): the negative rows' sum per label, times 1 + 1/C for
    # the 1/C softmax share each example adds back to its own class's row at initialisation
    impact = g[neg].sum() / B * (1 + 1 / g.numel())
    out = []
    for c in neg[:B]:
        out.append(c)
        g[c] -= impact
    while len(out) < B:
        c = int(g.argmin())
        out.append(c)
        g[c] -= impact
    return torch.tensor(sorted(out), dtype=torch.long, device=g.device)


def _rows(read: HeadReadout) -> torch.Tensor:
    """[U | beta], the C x (H + 1) matrix of the head's gradient (U alone where the head has no bias)."""
    return read.U if read.beta is None else torch.cat([read.U, read.beta.unsqueeze(1)], dim=1)


def magnitude_order(read: HeadReadout, B: int) -> list[int]:
    """The classes by decreasing norm of their rows of [U | beta] (beta where the head has a bias) after the rank-B
    fit of that C x (H + 1) matrix (its B leading singular triplets), which drops the sketch noise outside them.

    For one example every row is (p_c - 1[c = y]) [h, 1], a rank-one matrix, and |p_y - 1| = sum over c != y of
    p_c, so the true class's row is the largest whatever the sign of the features h (tanh, LayerNorm); ``sign``
    needs h >= 0.  For a batch the present classes' rows hold the -h_i of their examples, the others only
    p-weighted sums, which is a heuristic: it holds while the probabilities stay small."""
    return _magnitude_fit(read, B)[0]


def _magnitude_fit(read: HeadReadout, B: int) -> tuple[list[int], float]:
    """:func:`magnitude_order`, and the largest singular value of [U | beta] from the same decomposition."""
    u, s, vh = torch.linalg.svd(_rows(read), full_matrices=False)
    k = min(B, s.numel())
    rows = (u[:, :k] * s[:k]).norm(dim=1)  # ||row c of the rank-k fit||, as its right factors are orthonormal
    return rows.argsort(descending=True, stable=True).tolist(), float(s[0]) if s.numel() else 0.0


def _magnitude(victim, read: HeadReadout, B: int, stats) -> torch.Tensor:
    order = magnitude_order(read, B)
    return torch.tensor(sorted(order[i % len(order)] for i in range(B)), dtype=torch.long, device=read.U.device)


def _llg_star(victim, read: HeadReadout, B: int, stats: ProbeStats) -> torch.Tensor:
    S = stats.feats.sum(1).mean()
    return B * (stats.probs - read.U.sum(1) / S)


def _bias(victim, read: HeadReadout, B: int, stats: ProbeStats) -> torch.Tensor:
    return B * (stats.probs - _need_bias(read))


def _ilrg(victim, read: HeadReadout, B: int, stats) -> torch.Tensor:
    beta = _need_bias(read)
    W, b = victim.head.weight.detach(), victim.head.bias.detach()
    denom = torch.where(beta.abs() > 1e-30, beta, torch.full_like(beta, 1e-30))  # classes of probability 0
    P = torch.softmax((read.U @ W.T) / denom.unsqueeze(1) + b, dim=-1)  # row c: softmax of class c's embedding
    return ilrg_counts(P, beta, B)


def ilrg_counts(P: torch.Tensor, beta: torch.Tensor, B: int) -> torch.Tensor:
    """Least-squares n of sum_c n_c = B and B beta_c = sum_j n_j P_jc - n_c (the iLRG system of Ma et al. 2023)."""
    C = P.shape[0]
    eye = torch.eye(C, dtype=P.dtype, device=P.device)
    A = torch.cat([torch.ones(1, C, dtype=P.dtype, device=P.device), P.T - eye])
    rhs = torch.cat([torch.full((1,), float(B), dtype=P.dtype, device=P.device), B * beta])
    return torch.linalg.pinv(A) @ rhs


def _pooled(victim, read: HeadReadout, B: int, stats: ProbeStats) -> torch.Tensor:
    r = class_signal(read, stats)
    head = victim.head
    bias = head.bias.detach() if head.bias is not None else 0.0
    prior = stats.feats.mean(0)
    shift = shared_embedding(read, r, prior) - prior
    # mean softmax of the probe cloud moved onto the batch's mean embedding: the probes give the spread
    P = torch.softmax((stats.feats + shift) @ head.weight.detach().T + bias, dim=-1).mean(0)
    return B * (P - r)


def _need_bias(read: HeadReadout) -> torch.Tensor:
    if read.beta is None:
        raise UserError("this label rule reads the head's bias gradient, and the head has no bias (or a frozen one); "
                        "the rules pooled, sign, llg and llg-star read its weight gradient")
    return read.beta


def class_signal(read: HeadReadout, stats: ProbeStats) -> torch.Tensor:
    """r_c ~ dL/db_c: the bias and the matched feature functional, mixed by inverse variance (``pooled``).

    f_c = <v, U_c> / kappa has the sketch noise sigma / kappa and an error from the
    spread of <v, h_i> over the batch; that spread is estimated from the data, as the
    excess of mean_c (beta_c - f_c)^2 over the two sketch noises (method of moments).
    """
    v = stats.feats.mean(0)
    v = v / v.norm().clamp_min(1e-30)
    kappa = float((stats.feats @ v).mean())
    f = read.U @ v
    beta, sigma = read.beta, read.sigma
    if kappa == 0:  # no feature reaches the head on the probes: only the bias, or the unscaled rows, remain
        return f if beta is None else beta
    if beta is None:
        return f / kappa
    fb = float(f @ beta)
    if fb > 0 and kappa > 0:  # least squares beta ~ f / kappa, weighed against the probes' kappa in log scale
        kappa_b = float(f @ f) / fb
        err_b = sigma * float(f.norm()) / fb
        if err_b == 0:
            kappa = kappa_b
        else:
            wb, wp = err_b ** -2, PROBE_SCALE_ERROR ** -2
            kappa = math.exp((wb * math.log(kappa_b) + wp * math.log(kappa)) / (wb + wp))
    rf = f / kappa
    noise_f = (sigma / kappa) ** 2
    C = beta.numel()
    excess = float((beta - rf).pow(2).mean()) - sigma ** 2 - noise_f
    spread = max(0.0, excess - SPREAD_PENALTY * math.sqrt(2 / C) * (sigma ** 2 + noise_f))
    var_f = noise_f + spread
    w = var_f / (var_f + sigma ** 2) if var_f + sigma ** 2 > 0 else 1.0
    return w * beta + (1 - w) * rf


def shared_embedding(read: HeadReadout, r: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """h_bar: the rank-one fit U_c ~ r_c h_bar, shrunk toward ``prior`` by empirical Bayes with the sketch noise."""
    rr = float(r @ r)
    if rr == 0:
        return prior
    h_ls = (r @ read.U) / rr
    noise = read.sigma ** 2 / rr  # variance of each coordinate of h_ls
    dev = h_ls - prior
    spread = max(0.0, float(dev.pow(2).mean()) - noise)
    keep = spread / (spread + noise) if spread + noise > 0 else 1.0
    return prior + keep * dev


#: the rules that read B sorted labels from signs or from the order of rows, whatever the message's scale; the count
#: rules (real-valued class counts, which :func:`allocate` turns into labels) read sizes, and a message of unknown
#: scale needs :func:`fitted_scale`
_SIGN_RULES = {"sign": _sign, "llg": _llg, "magnitude": _magnitude}
_COUNT_RULES = {"pooled": _pooled, "llg-star": _llg_star, "bias": _bias, "ilrg": _ilrg}
_RULES = {**_SIGN_RULES, **_COUNT_RULES}
_NEEDS_PROBES = {"pooled", "llg-star", "bias"}
#: the scales tried by :func:`fitted_scale`: this many per decade, this many decades either side of its centre
SCALE_STEPS, SCALE_DECADES = 100, 4


def scaled(read: HeadReadout, t: float) -> HeadReadout:
    """The readout of the message t y."""
    return HeadReadout(U=read.U * t, beta=None if read.beta is None else read.beta * t, sigma=read.sigma * t)


def fitted_scale(counts, B: int) -> float:
    """The factor t by which the message must be multiplied for ``counts(t)`` (a count rule's class counts read from
    t y) to lie nearest B non-negative whole counts.

    A clip sends g min(1, C / ||g||): the attacker who knows a clip was applied does not know ||g||, and a count rule
    read at the wrong scale takes the probes' predictions for the batch's labels
    (docs/attacks/labels.md#a-clipped-message).  The counts are whole numbers at the true scale only, so t is
    searched on a log grid of :data:`SCALE_STEPS` per decade, :data:`SCALE_DECADES` decades either side of the
    scale at which the message's part of the counts reaches the batch size, and at 1, never below 1 (a clip only
    shrinks); of equal fits the one nearest 1 (no clip) is kept."""
    slope = float((counts(1.0) - counts(0.0)).abs().max())
    centre = math.log10(max(1.0, B) / slope) if slope > 0 else 0.0
    # a clip only shrinks: t >= 1 (a smaller t takes the probes' predictions, near-whole by chance, for the labels)
    grid = [e for k in range(-SCALE_DECADES * SCALE_STEPS, SCALE_DECADES * SCALE_STEPS + 1)
            if (e := centre + k / SCALE_STEPS) > 0]
    best = (math.inf, math.inf, 1.0)
    for t in [1.0] + [10 ** e for e in grid]:
        n = counts(t)
        whole = torch.bincount(allocate(n, B), minlength=n.numel()).to(n.dtype)
        best = min(best, (float((n - whole).pow(2).sum()), abs(math.log10(t)), t))
    return best[2]


def _read(rule: str, victim, read: HeadReadout, B: int, stats) -> torch.Tensor:
    """B sorted labels by ``rule``."""
    if rule in _SIGN_RULES:
        return _SIGN_RULES[rule](victim, read, B, stats)
    return allocate(_COUNT_RULES[rule](victim, read, B, stats), B)


def message_scale(victim, read: HeadReadout, B: int, stats: ProbeStats) -> float:
    """The factor that takes a message of unknown scale back to the gradient: :func:`fitted_scale` of the ``pooled``
    counts, the closest to the batch's.  One factor serves every rule, since it is the message's; fitted on the
    cruder ``bias`` or ``llg-star`` counts it was wrong on a batch of 8 (tests/attacks/test_label_scale.py)."""
    return fitted_scale(lambda t: _pooled(victim, scaled(read, t), B, stats), B)


def _at_scale(victim, read: HeadReadout, B: int, stats: ProbeStats | None, probes: int,
              like: torch.Tensor) -> HeadReadout:
    """``read`` times :func:`message_scale` (the probes drawn here where ``stats`` is None)."""
    t = message_scale(victim, read, B, stats if stats is not None else probe(victim, probes, like))
    return scaled(read, t) if t != 1.0 else read


def _defense_of(obs) -> defenses.Pipeline | None:
    """The message's defense as a pipeline; None without one, or where this process cannot build its spec."""
    if not obs.defense:
        return None
    try:
        return defenses.build(obs.defense)
    except (defenses.DefenseError, ValueError):  # a spec this process cannot build claims no step
        return None


def scale_unknown(obs) -> bool:
    """Whether the attacker knows that the message's defense clips it (``ThreatModel.knows_clip`` and a clip in the
    defense), so that its scale, min(1, C / ||g||), is unknown: the count rules then fit it
    (:func:`fitted_scale`).  An attacker not told of the clip reads the message as the gradient itself."""
    built = _defense_of(obs) if obs.threat.knows_clip else None
    return built is not None and bool(built.clips().steps)


def scaled_per_example(obs) -> bool:
    """Whether the message's defense clips each example apart (a ``per_example`` step), so that each example's part
    of the head's gradient has a scale of its own (:func:`labels_at_images`' ``per_example``)."""
    built = _defense_of(obs)
    return built is not None and built.per_example


def _check_call(victim, linear_map, y, batch_size) -> None:
    """One UserError sentence where a label rule cannot read this call: no classification head whose weights the
    message carries (a regression, a frozen head), a batch size that is not a positive whole number, or a message
    that is not one vector of the map's b numbers."""
    if getattr(victim, "head", None) is None or getattr(victim, "task", "classification") != "classification":
        raise UserError("the victim has no trainable classification head (a regression, a frozen head, or a head "
                        "it was not given: targets.Victim(..., head=layer)), so no label rule can read its message; "
                        f"{other_labels(victim)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise UserError(f"the batch size must be a positive integer, got {batch_size!r}")
    b = getattr(linear_map, "b", None)
    if not isinstance(y, torch.Tensor) or y.ndim != 1 or not y.is_floating_point() or (b is not None and
                                                                                         y.shape[0] != b):
        got = f"{y.dtype} tensor of shape {tuple(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
        raise UserError(f"the message must be one floating-point vector of the map's b = {b} numbers, got {got}")
    _check_finite(y)


def _check_finite(y: torch.Tensor) -> None:
    """One UserError sentence, naming the first bad number, where message y holds a NaN or an infinity (a rule would
    read made-up labels from it, or fail inside a solver)."""
    bad = ~torch.isfinite(y.detach())
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise UserError(f"the message holds a non-finite number ({float(y[i])}) at index {i}, and no label rule can "
                        f"read it{'' if int(bad.sum()) == 1 else f' ({int(bad.sum())} such numbers in all)'}")


def finite_part(y: torch.Tensor) -> torch.Tensor:
    """Message ``y`` with its NaN and infinite values (a defense's noise past the dtype's range) left out as zeros:
    what a run reads labels from where the rules would refuse y itself (:func:`_check_finite`)."""
    return y if bool(torch.isfinite(y).all()) else torch.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)


def recover_labels(victim, sketch, y: torch.Tensor, batch_size: int, probes: int = 64,
                   rule: str = DEFAULT_RULE, scale_unknown: bool = False,
                   read: HeadReadout | None = None) -> torch.Tensor:
    """The B labels of the batch behind message y, sorted, by ``rule`` (one of ``LABEL_RULES``; module docstring);
    ``scale_unknown``: y is the gradient times an unknown factor (a clip, :func:`scale_unknown`), which is fitted
    first (:func:`fitted_scale`; the sign rules do not depend on it, the count rules do); ``read``: y's
    :func:`read_head` where the caller has it already."""
    if rule not in _RULES:
        raise UserError(f"unknown label rule '{rule}'; choose one of: {', '.join(LABEL_RULES)}")
    return recover_labels_by_rule(victim, sketch, y, batch_size, (rule,), probes, scale_unknown, read)[rule]


def recover_labels_by_rule(victim, sketch, y: torch.Tensor, batch_size: int, rules=LABEL_RULES,
                           probes: int = 64, scale_unknown: bool = False,
                           read: HeadReadout | None = None) -> dict[str, torch.Tensor]:
    """rule -> the B sorted labels :func:`recover_labels` gives by it, from one readout of the head (``read``, or
    :func:`read_head` of y) and one probe pass shared by every rule."""
    unknown = [r for r in rules if r not in _RULES]
    if unknown:
        raise UserError(f"unknown label rule '{unknown[0]}'; choose one of: {', '.join(LABEL_RULES)}")
    _check_call(victim, sketch, y, batch_size)
    stats = probe(victim, probes, y) if any(r in _NEEDS_PROBES for r in rules) or scale_unknown else None
    return _by_rule(victim, _readout(victim, sketch, y, batch_size, stats, probes, scale_unknown, read), batch_size,
                    rules, stats)


def _readout(victim, sketch, y: torch.Tensor, batch_size: int, stats: ProbeStats | None, probes: int,
             scale_unknown: bool, read: HeadReadout | None = None) -> HeadReadout:
    """The head's readout of message y (:func:`read_head`, or ``read`` where it was read already), at the fitted
    scale where ``scale_unknown`` (:func:`_at_scale`); that of the mean loss where the victim's loss sums over the
    batch (the readout of the sum is B times it)."""
    read = read_head(victim, sketch, y) if read is None else read
    if victim.loss_reduction == "sum":
        read = scaled(read, 1 / int(batch_size))
    return _at_scale(victim, read, int(batch_size), stats, probes, y) if scale_unknown else read


def _by_rule(victim, read: HeadReadout, batch_size: int, rules, stats: ProbeStats | None) -> dict[str, torch.Tensor]:
    """rule -> the B sorted labels each of ``rules`` reads from one readout (and one probe pass, where it uses one)."""
    return {r: _read(r, victim, read, int(batch_size), stats if r in _NEEDS_PROBES else None) for r in rules}


#: the rules :func:`readings_to_compare` reads where their premises hold: ``pooled`` and the row-sum rules.  Not
#: ``bias`` and ``ilrg``: the head's C bias numbers drown in the noise of a small sketch, and where the message holds
#: fewer numbers than the image a short run cannot always tell a wrong reading from the right one
#: (docs/attacks/labels.md#choosing-between-readings)
COMPARED_RULES = ("pooled", "sign", "llg", "llg-star")
#: rules that read the signs of the row sums of the head's weight gradient: they need non-negative head inputs
ROW_SUM_RULES = ("sign", "llg", "llg-star")
#: the rules compared where the head's inputs take both signs: ``pooled``, and for one example ``magnitude``, whose
#: premise (a rank-one head gradient) holds for any features
SIGNED_RULES = ("pooled", "magnitude")


@dataclass(frozen=True)
class HeadAndProbes:
    """One readout of the head from a message (:func:`read_head`) and one probe pass (:func:`probe`):
    :func:`readings_to_compare` and :func:`one_example_classes` share them where both are asked of one message."""

    read: HeadReadout
    stats: ProbeStats


def head_and_probes(victim, sketch, y: torch.Tensor, batch_size: int, probes: int = 64) -> HeadAndProbes:
    """The head's readout of message y and ``probes`` probes through the victim, checked as the rules check a call."""
    _check_call(victim, sketch, y, batch_size)
    return HeadAndProbes(read=read_head(victim, sketch, y), stats=probe(victim, probes, y))


def one_example_classes(victim, sketch, y: torch.Tensor, probes: int = 64,
                        shared: HeadAndProbes | None = None) -> tuple[list[int], float, int]:
    """One example's classes in ``magnitude``'s order (:func:`magnitude_order`); how far the head's rank-one signal
    stands out of the sketch noise: the largest singular value of [U | beta] over sigma (sqrt(C) + sqrt(H + 1)), the
    largest a C x (H + 1) matrix of the noise alone reaches (Bai-Yin), inf without a sketch; and the class of the
    probes' mean softmax (:func:`probe`), which ``pooled`` reads where the message's part of its counts drowns.  Near
    1 or below, the order is the noise's: gradient matching then scores the first classes by short runs.
    ``shared``: the message's readout and probe pass where they were made already (:func:`head_and_probes`)."""
    shared = head_and_probes(victim, sketch, y, 1, probes) if shared is None else shared
    read = shared.read
    C, H = read.U.shape
    edge = read.sigma * (math.sqrt(C) + math.sqrt(H + (read.beta is not None)))
    order, top = _magnitude_fit(read, 1)
    prior = int(shared.stats.probs.argmax())
    return order, (top / edge if edge > 0 else math.inf), prior


def readings_to_compare(victim, sketch, y: torch.Tensor, batch_size: int, probes: int = 64,
                        scale_unknown: bool = False, shared: HeadAndProbes | None = None) -> dict[str, torch.Tensor]:
    """rule -> B sorted labels for the rules of :data:`COMPARED_RULES` whose premise holds on this victim: ``pooled``
    always, the row-sum rules (:data:`ROW_SUM_RULES`) only when the head's inputs are non-negative on the probes
    (a row sum carries the sign of p_c - 1[c = y] only then: ReLU or sigmoid features, not tanh or LayerNorm ones);
    where they take both signs, ``magnitude`` beside ``pooled`` for one example (:data:`SIGNED_RULES`).
    One readout of the head and one probe pass serve them all (``shared``: those already made,
    :func:`head_and_probes`)."""
    shared = head_and_probes(victim, sketch, y, batch_size, probes) if shared is None else shared
    stats = shared.stats
    rules = COMPARED_RULES if bool((stats.feats >= 0).all()) else SIGNED_RULES[:2 if int(batch_size) == 1 else 1]
    return _by_rule(victim, _readout(victim, sketch, y, batch_size, stats, probes, scale_unknown, shared.read),
                    batch_size, rules, stats)


def sketched_rows(victim, sketch, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """R m_c for the indicator m_c of each weight row c of the head, as a (C, b) matrix, and ||m_c||^2."""
    head = victim.head
    ws, _ = _head_slices(victim)
    C, h = head.weight.shape
    masks = torch.zeros(C, sketch.d, dtype=like.dtype, device=like.device)
    for c in range(C):
        masks[c, ws.start + c * h: ws.start + (c + 1) * h] = 1.0
    return sketch.apply(masks), h


def sign_rule_snr(victim, sketch, y: torch.Tensor) -> float:
    """How far the iDLG pick stands out of the sketch noise: (2nd lowest - lowest score) / sigma.

    For y = M g with M = a R and R a coordinate-wise embedding, <M m_c, y> estimates
    a^2 <m_c, g> with standard deviation about ||M m_c|| ||y|| sqrt(v), v the map's
    :func:`~leakattack.sketch.readout_variance` (Lemma D.11's O(1/b): 1/b for a mixing
    sketch, 1/b - 1/n for one that samples rows without replacement, 0 for an unsketched message).
    Below ~2 the recovered label is a coin toss; 0 where the map
    keeps none of the head's weight rows (every score is 0: nothing stands out); NaN for a victim without a
    classification head (a regression), whose message carries no label to pick, and for a message with NaN or
    infinite values, from which no score is read.
    """
    if victim.head is None or not bool(torch.isfinite(y).all()):
        return float("nan")
    rows, _ = sketched_rows(victim, sketch, y)
    scores = (rows @ y).sort().values
    sigma = float(rows.norm(dim=1).mean() * y.norm()) * readout_variance(sketch) ** 0.5
    gap = float(scores[1] - scores[0])
    if sigma > 0:
        return gap / sigma
    return float("inf") if gap > 0 else 0.0  # no noise: certain where a score stands out; none read nothing


def head_from_gradient(victim, g: torch.Tensor) -> HeadReadout:
    """The head's weight and bias gradient taken from a gradient ``g`` read whole (no sketch noise)."""
    ws, bs = _head_slices(victim)
    return HeadReadout(U=g[ws].reshape(victim.head.weight.shape), beta=None if bs is None else g[bs], sigma=0.0)


def _rows_of(victim, read: HeadReadout, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the softmax P (B, C), the head inputs H (B, h), with a column of ones where the head has a bias, and the head's
    gradient Y = [U | beta] (C, h + 1), or U alone) of the batch ``x`` in the victim's own mode (BatchNorm statistics
    restored), in float64: what :func:`_misfit` and :func:`labels_at_images` fit."""
    with targets.kept_buffers(victim.model), torch.no_grad():
        out, feats = victim.head_inputs(x.to(device=victim.device, dtype=victim.dtype))
    P = torch.softmax(out.detach().to(torch.float64).cpu(), -1)
    H, Y = feats.to(torch.float64).cpu(), read.U.detach().to(torch.float64).cpu()
    if read.beta is None:
        return P, H, Y
    beta = read.beta.detach().to(torch.float64).cpu()
    return P, torch.cat([H, torch.ones(len(H), 1, dtype=H.dtype)], 1), torch.cat([Y, beta[:, None]], 1)


def _gram(P: torch.Tensor, H: torch.Tensor, Y: torch.Tensor,
          labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a = P - E (B, C), the Gram matrix G (B, B) of the terms A_i = a_i h_i^T, which factorises: <A_i, A_j> =
    <a_i, a_j> <h_i, h_j>, and r_i = <Y, A_i>) for ``labels``."""
    a = P - torch.nn.functional.one_hot(labels.reshape(-1).long().cpu(), P.shape[1]).to(P)
    return a, (a @ a.T) * (H @ H.T), ((a @ Y) * H).sum(1)


def _nnls_scales(G: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The s >= 0 that minimise s^T G s - 2 s^T r (non-negative least squares on G's Cholesky factor)."""
    from scipy.optimize import nnls

    ridge = 1e-12 * float(G.diagonal().max().clamp_min(1e-300))
    L = torch.linalg.cholesky(G + ridge * torch.eye(len(G), dtype=G.dtype))
    target = torch.linalg.solve_triangular(L, r[:, None], upper=False)[:, 0]
    return torch.as_tensor(nnls(L.T.numpy(), target.numpy())[0], dtype=G.dtype)


def _misfit(P: torch.Tensor, H: torch.Tensor, Y: torch.Tensor, labels: torch.Tensor,
            per_example: bool = False) -> float:
    """:func:`head_misfit` from the softmax P, the rows H and the stacked head gradient Y: the least squares of Y on
    the B terms A_i = (p_i - e_{y_i}) h_i^T at one scale s >= 0 for the batch (a clip of the whole update, or none,
    scales them alike) or, ``per_example``, at scales s_i >= 0, one per example (a per-example clip scales each
    apart), from their Gram matrix (:func:`_gram`)."""
    _, G, r = _gram(P, H, Y, labels)
    yy = float((Y * Y).sum())
    if yy <= 0 or not bool(torch.isfinite(G).all() and torch.isfinite(r).all()):
        return 1.0
    if not per_example:  # the one scale of the sum A = sum_i A_i: <Y, A> / <A, A>, at least 0
        rr, gg = float(r.sum()), float(G.sum())
        s = max(rr, 0.0) / gg if gg > 0 else 0.0
        return math.sqrt(max(yy - 2 * s * rr + s * s * gg, 0.0) / yy)
    sv = _nnls_scales(G, r)
    left = yy - 2 * float(sv @ r) + float(sv @ G @ sv)
    return math.sqrt(max(left, 0.0) / yy)


def head_misfit(victim, read: HeadReadout, x: torch.Tensor, labels: torch.Tensor, per_example: bool = False) -> float:
    """How far the head's gradient ``read`` is from that of the batch ``x`` with ``labels`` (in x's order) at the
    best scale s >= 0 for the batch, or, ``per_example`` (a per-example clip), the best scales s_i >= 0, one per
    example: ||[U | beta] - sum_i s_i (p_i - e_{y_i}) [h_i, 1]^T|| / ||[U | beta]||, with p_i the softmax, e_{y_i}
    the label's one-hot row and h_i the head input (1 where no such scales bring it closer than 0)."""
    return _misfit(*_rows_of(victim, read, x), labels, per_example)


def labels_at_images(victim, read: HeadReadout, x: torch.Tensor, others=(),
                     per_example: bool = False) -> torch.Tensor | None:
    """The labels of the images ``x`` (the batch, in its order) that the head's gradient ``read`` gives, whatever
    the message's positive scale (a mean over the batch, a clip's C / ||g||): the head's gradient [U | beta] is
    sum_i delta_i [h_i, 1]^T with h_i image i's head input and delta_i = s (p_i - e_{y_i}), so least squares of
    [U | beta] on the rows [h_i, 1] gives each delta_i, whose one negative entry, its smallest, is at y_i (so a
    per-example clip, which scales each delta_i apart, changes nothing either).

    ``others``: labels read otherwise (in x's order); of them and this reading the one with the least
    :func:`head_misfit` (``per_example``: at one scale per example, for a message whose examples were clipped
    apart) is the start, the first of ``others`` on a tie.  Where the rows are apart, labels are then changed one at
    a time while that lowers the misfit (:func:`_descend`): through a sketch the head's gradient is read with noise,
    and the least squares' smallest entry of delta_i may lie elsewhere.  None where the B rows cannot be told apart
    (more images than head inputs, or rows that repeat) and no ``others`` are given."""
    P, H, Y = _rows_of(victim, read, x)
    readings = [torch.as_tensor(o).reshape(-1).long().cpu() for o in others]
    fit = torch.linalg.lstsq(H.T, Y.T, driver="gelsd")  # (B, C): delta_i, and the rank of the B rows
    apart = int(fit.rank) == H.shape[0] and bool(torch.isfinite(fit.solution).all())
    if apart:
        readings.append(fit.solution.argmin(1))
    if not readings:
        return None
    start = min(readings, key=lambda labels: _misfit(P, H, Y, labels, per_example))
    if not apart:
        return start
    # the labels are a discrete choice, each delta_i a non-negative multiple of p_i - e_{y_i}: one label at a time,
    # among each image's most negative entries of its delta_i and the readings'
    k = min(P.shape[1], DESCENT_CLASSES)
    ranked = fit.solution.argsort(1)[:, :k]
    candidates = [sorted({int(c) for c in ranked[i]} | {int(r[i]) for r in readings}) for i in range(len(start))]
    return _descend(P, H, Y, start, candidates, per_example)


#: the classes per image :func:`labels_at_images` tries beyond the readings it starts from: its least squares'
#: most negative entries of delta_i (every class of a head with up to this many)
DESCENT_CLASSES = 16
#: the passes over the batch :func:`_descend` makes at most (it stops at the first that changes nothing)
DESCENT_PASSES = 8


def _descend(P: torch.Tensor, H: torch.Tensor, Y: torch.Tensor, labels: torch.Tensor,
             candidates: list[list[int]], per_example: bool = False) -> torch.Tensor:
    """From ``labels``, the labels of less :func:`_misfit` that changing one label at a time to one of its
    ``candidates``, or swapping two images' labels, reaches: each pass takes, image by image, the candidate that
    lowers the misfit most, then the swap with another image that lowers it most (one label at a time cannot swap
    two: the labels between hold a class twice and fit worse).  Each move's misfit is updated, not recomputed: at one
    scale for the batch exactly (its sums <Y, A> and ||A||^2 change by a rank-one term), at one scale per example
    with the moved images' scales fitted and the others' held, all of them fitted again after each pass
    (:func:`_each`)."""
    step = _each if per_example else _one
    labels = labels.clone()
    for _ in range(DESCENT_PASSES):
        labels, moved = step(P, H, Y, labels, candidates)
        if not moved:
            break
    return labels


def _one(P: torch.Tensor, H: torch.Tensor, Y: torch.Tensor, labels: torch.Tensor,
         candidates: list[list[int]]) -> tuple[torch.Tensor, bool]:
    """One pass of :func:`_descend` at one scale s >= 0 for the batch: A = Q - S with Q = P^T H and S = E^T H (row c
    the sum of the head inputs labelled c), misfit^2 = 1 - max(<Y, A>, 0)^2 / (||A||^2 ||Y||^2)."""
    yy = float((Y * Y).sum())
    Q = P.T @ H
    QH, YH, HH = Q @ H.T, Y @ H.T, H @ H.T  # (C, B), (C, B), (B, B)
    moved = False

    def sums(labels):  # S @ H^T, <Y, A> and ||A||^2
        S = torch.zeros_like(Q).index_add_(0, labels, H)
        A = Q - S
        return S @ H.T, (Y * A).sum(), (A * A).sum()

    def score(rr, gg):  # misfit^2, elementwise
        return 1 - rr.clamp_min(0) ** 2 / (gg.clamp_min(1e-300) * yy)

    SH, rr, gg = sums(labels)
    best = float(score(rr, gg))
    B = len(labels)
    for i in range(B):
        a = int(labels[i])
        b = torch.as_tensor([c for c in candidates[i] if c != a], dtype=torch.long)
        if len(b):  # label a -> b: S[a] -= h_i, S[b] += h_i
            r2 = rr - (YH[b, i] - YH[a, i])
            g2 = gg - 2 * (QH[b, i] - QH[a, i]) + 2 * (SH[b, i] - SH[a, i]) + 2 * HH[i, i]
            m = score(r2, g2)
            k = int(m.argmin())
            if float(m[k]) < best * (1 - 1e-9):
                labels[i] = b[k]
                SH, rr, gg = sums(labels)
                best, moved = float(score(rr, gg)), True
        a = int(labels[i])
        js = torch.nonzero(labels != a).reshape(-1)
        if len(js):  # swap with j (label b): S[a] += h_j - h_i, S[b] -= h_j - h_i
            b = labels[js]

            def along(X):  # (X[a] - X[b]) . (h_j - h_i) for X's products with the rows, X (C, B)
                return (X[a, js] - X[b, js]) - (X[a, i] - X[b, i])

            dl2 = HH[js, js] - 2 * HH[i, js] + HH[i, i]
            r2 = rr - along(YH)
            g2 = gg - 2 * along(QH) + 2 * along(SH) + 2 * dl2
            m = score(r2, g2)
            k = int(m.argmin())
            if float(m[k]) < best * (1 - 1e-9):
                j = int(js[k])
                labels[i], labels[j] = labels[j].clone(), labels[i].clone()
                SH, rr, gg = sums(labels)
                best, moved = float(score(rr, gg)), True
    return labels, moved


def _each(P: torch.Tensor, H: torch.Tensor, Y: torch.Tensor, labels: torch.Tensor,
          candidates: list[list[int]]) -> tuple[torch.Tensor, bool]:
    """One pass of :func:`_descend` at one scale s_i >= 0 per example: with the residual R = Y - sum_i s_i a_i h_i^T
    (a_i = p_i - e_{y_i}), a move refits the scales of the images it moves (one, or two by a 2 x 2 non-negative
    least squares) and holds the others'."""
    C = P.shape[1]
    a, G, r = _gram(P, H, Y, labels)
    finite = bool(torch.isfinite(G).all() and torch.isfinite(r).all())
    sv = _nnls_scales(G, r) if finite else torch.zeros(len(labels), dtype=P.dtype)
    R = Y - (sv[:, None] * a).T @ H
    HH, pp = H @ H.T, (P * P).sum(1)
    rss = float((R * R).sum())
    moved = False

    def residual():
        return Y - (sv[:, None] * a).T @ H

    for i in range(len(labels)):
        hh = HH[i, i]
        Rh = R @ H[i]  # (C,)
        z = Rh + sv[i] * a[i] * hh  # R_{-i} h_i, R_{-i} = R + s_i a_i h_i^T
        base = rss + 2 * sv[i] * float(a[i] @ Rh) + float(sv[i] ** 2 * (a[i] @ a[i]) * hh)  # ||R_{-i}||^2
        b = torch.as_tensor([c for c in candidates[i] if c != int(labels[i])], dtype=torch.long)
        if len(b):
            num = float(P[i] @ z) - z[b]  # <R_{-i}, (p_i - e_b) h_i^T>
            den = (pp[i] - 2 * P[i, b] + 1) * hh
            m = base - num.clamp_min(0) ** 2 / den.clamp_min(1e-300)
            k = int(m.argmin())
            if float(m[k]) < rss * (1 - 1e-9):
                labels[i] = b[k]
                a[i] = P[i] - torch.nn.functional.one_hot(b[k], C).to(P)
                sv[i] = max(float(num[k]), 0.0) / max(float(den[k]), 1e-300)
                R = residual()
                rss, moved = float((R * R).sum()), True
        js = torch.nonzero(labels != labels[i]).reshape(-1)
        if not len(js):
            continue
        RH = R @ H.T  # (C, B)
        ai2 = P[i][None, :] - torch.nn.functional.one_hot(labels[js], C).to(P)  # image i with j's label
        aj2 = P[js] - torch.nn.functional.one_hot(labels[i], C).to(P)[None, :]  # image j with i's label
        # R0 = R + s_i A_i + s_j A_j; R0 h_i and R0 h_j, (n, C)
        R0hi = RH[:, i][None, :] + sv[i] * a[i][None, :] * HH[i, i] + sv[js, None] * a[js] * HH[i, js, None]
        R0hj = RH[:, js].T + sv[i] * a[i][None, :] * HH[i, js, None] + sv[js, None] * a[js] * HH[js, js, None]
        base = (rss + 2 * sv[i] * (a[i] @ RH[:, i]) + 2 * sv[js] * (a[js] * RH[:, js].T).sum(1)
                + sv[i] ** 2 * (a[i] @ a[i]) * HH[i, i] + sv[js] ** 2 * (a[js] * a[js]).sum(1) * HH[js, js]
                + 2 * sv[i] * sv[js] * (a[js] @ a[i]) * HH[i, js])
        r1, r2 = (ai2 * R0hi).sum(1), (aj2 * R0hj).sum(1)
        g11, g22 = (ai2 * ai2).sum(1) * HH[i, i], (aj2 * aj2).sum(1) * HH[js, js]
        g12 = (ai2 * aj2).sum(1) * HH[i, js]
        u, v = _nonneg_pair(r1, r2, g11, g22, g12)
        m = base - 2 * (u * r1 + v * r2) + u * u * g11 + 2 * u * v * g12 + v * v * g22
        k = int(m.argmin())
        if float(m[k]) < rss * (1 - 1e-9):
            j = int(js[k])
            labels[i], labels[j] = labels[j].clone(), labels[i].clone()
            a[i], a[j] = ai2[k], aj2[k]
            sv[i], sv[j] = u[k], v[k]
            R = residual()
            rss, moved = float((R * R).sum()), True
    return labels, moved


def _nonneg_pair(r1, r2, g11, g22, g12):
    """Elementwise min over u, v >= 0 of -2 (u r1 + v r2) + u^2 g11 + 2 u v g12 + v^2 g22: the unconstrained
    solution where both are non-negative, else the better of u alone and v alone."""
    tiny = 1e-300
    det = g11 * g22 - g12 * g12
    u0 = (r1 * g22 - r2 * g12) / det.clamp_min(tiny)
    v0 = (r2 * g11 - r1 * g12) / det.clamp_min(tiny)
    inside = (u0 >= 0) & (v0 >= 0) & (det > tiny)
    ua, va = r1.clamp_min(0) / g11.clamp_min(tiny), torch.zeros_like(r1)
    ub, vb = torch.zeros_like(r2), r2.clamp_min(0) / g22.clamp_min(tiny)
    fa = -2 * ua * r1 + ua * ua * g11
    fb = -2 * vb * r2 + vb * vb * g22
    u = torch.where(inside, u0, torch.where(fa <= fb, ua, ub))
    v = torch.where(inside, v0, torch.where(fa <= fb, va, vb))
    return u, v
