"""Reconstruction quality: MSE, PSNR, SSIM, LPIPS, label accuracy and batch matching.

Images are torch tensors (B, C, H, W) in [0, 1].  Per-image metrics return a
tensor of shape (B,); :func:`score` matches a reconstructed batch to the ground
truth (Hungarian algorithm on pairwise MSE) and returns JSON-ready numbers.

:mod:`.image` holds MSE, PSNR and SSIM, :mod:`.lpips` the LPIPS wiring,
:mod:`.matching` the matching and label accuracy, :mod:`.identify` whether a reconstruction singles
its truth out of the data set (image identifiability), :mod:`leakattack.rebuilt` the rule
that calls a reconstruction rebuilt or not against its baselines (the attack's
start, the data set's mean image of :mod:`.baseline`), and :mod:`.uniqueness`
the rank of the message's Jacobian in the input.  :mod:`.record` holds
:class:`RunMetrics`, the typed record of a run's metrics.json.
"""

from __future__ import annotations

import torch

from ..data.base import outside_unit_range
from ..rebuilt import (
    BASELINES,
    FAILED_PARTS,
    NOT_REBUILT,
    REBUILT,
    SAME_IMAGE_SSIM,
    VERDICT_PSNR_MARGIN_DB,
    VERDICT_SSIM_MARGIN,
    closed_forms_line,
    failed_counts,
    failed_kind,
    failed_part,
    finite_or_none,
    images_words,
    judge,
    nothing_attacked,
    objective_failed,
    rebuilt_images,
    truth_not_sent,
    truth_not_sent_text,
    verdict,
    verdict_each,
)
from .base import MetricsError, check_pair
from .baseline import GREY_LEVEL, MEAN_IMAGE_SAMPLE, mean_image
from .identify import IDENTIFY_SAMPLE, feature_identification, identification, identified_line
from .image import PSNR_MSE_FLOOR, SSIM_WIN, in_range, mse, psnr, ssim
from .lpips import (
    ALEXNET_WEIGHTS_FILE,
    LPIPS_MIN_SIDE,
    alexnet_weights_path,
    lpips_distance,
    lpips_missing,
    lpips_module,
)
from .matching import label_accuracy, label_overlap, labels_tie_break, match, mse_matrix, nearer_truths
from .record import METRICS_SCHEMA, RunMetrics
from .uniqueness import JACOBIAN_MAX_UNKNOWNS, JACOBIAN_MAX_WORK, jacobian, jacobian_rank, numerical_rank


def _finite_or_none(v: float | torch.Tensor) -> float | None:
    """v as a float, or None when it is NaN or infinite (keeps the result JSON-valid)."""
    return finite_or_none(float(v))


def score(x_hat: torch.Tensor, x: torch.Tensor, labels_hat=None, labels=None,
          with_lpips: bool = True, device="cpu") -> dict:
    """Match x_hat to x (Hungarian on MSE when B > 1), then mean MSE/PSNR/SSIM/LPIPS, label accuracy and per-image
    lists, as JSON-ready values.

    ``label_acc`` counts the recovered labels as a multiset (what label-recovery
    rules are judged by); ``label_acc_matched`` compares each reconstructed
    image's label with the true label of the image it was matched to.  The
    reconstruction is scored clamped to [0, 1] (:func:`in_range`: a value that
    is not finite scores as not a number); a truth with a value that is not
    finite is refused.
    """
    if hasattr(x_hat, "x") and hasattr(x_hat, "x0"):  # an AttackResult, which assess takes
        raise MetricsError("score takes the reconstructed images (result.x) and the truth; for an attack's result "
                           "use assess(result, x, labels), which adds the baselines and the verdict")
    check_pair(x_hat, x)
    if not isinstance(with_lpips, bool):
        raise MetricsError(f"with_lpips must be True or False, got {type(with_lpips).__name__} {with_lpips!r:.40}")
    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise MetricsError(f"device must name a torch device, such as 'cpu' or 'cuda', got {device!r:.40}") from None
    if not bool(torch.isfinite(x.detach()).all()):
        raise MetricsError(f"the truth holds {int((~torch.isfinite(x.detach())).sum())} value(s) that are NaN or "
                           "infinite: there is no image to score against")
    outside = outside_unit_range(x)  # the scale of PSNR's peak of 1, SSIM's constants and LPIPS
    if outside:
        raise MetricsError(f"the truth holds values from {outside[0]:.4g} to {outside[1]:.4g}, and the metrics take "
                           "images in [0, 1] (pixels 0-255: divide by 255; normalised data: score the images before "
                           "normalising)")
    x_hat = in_range(x_hat.detach())
    x = x.detach().to(x_hat.device)
    b = x.shape[0]
    lh, overlap = None, None
    if labels_hat is not None:
        if labels is None:
            raise MetricsError("labels_hat was given without the true labels")
        lh = torch.as_tensor(labels_hat).reshape(-1).cpu()
        if lh.numel() != b:
            raise MetricsError(f"labels_hat has {lh.numel()} entries for a batch of {b} images")
        overlap = label_overlap(lh, labels)  # which also checks both lists as class indices
    cost = mse_matrix(x_hat, x) if b > 1 else None  # the matching's costs, which also tell the nearer truths
    perm = match(x_hat, x, cost) if cost is not None else torch.zeros(1, dtype=torch.long)
    if cost is not None and lh is not None:  # ties of the matching (identical truths or reconstructions) go the
        perm = labels_tie_break(perm, x_hat, x, lh, labels)  # labels' way
    xm = x_hat[perm.to(x_hat.device)]
    m, p, s = mse(xm, x), psnr(xm, x), ssim(xm, x)
    out = {
        "mse": _finite_or_none(m.mean()),
        "psnr": _finite_or_none(p.mean()),
        "ssim": _finite_or_none(s.mean()),
        "lpips": None,
        "lpips_note": "LPIPS not requested",
        "label_acc": None,
        "label_acc_matched": None,
        "psnr_each": [_finite_or_none(v) for v in p.tolist()],
        "ssim_each": [_finite_or_none(v) for v in s.tolist()],
        "match": [int(i) for i in perm.tolist()],
        #: where a reconstruction is nearer to another true image than to the one it was matched to
        "nearer_each": nearer_truths(xm, x, cost[perm]) if cost is not None else [None],
    }
    if with_lpips:
        val, note = lpips_distance(xm, x, device=device)
        out["lpips"] = None if val is None else _finite_or_none(val.mean())
        out["lpips_note"] = note
    if lh is not None:
        out["label_acc"] = overlap
        out["label_acc_matched"] = label_accuracy(lh[perm], labels)
    return out


def assess(result, x: torch.Tensor, labels=None, *, dataset=None, closed_form: bool | None = None,
           with_lpips: bool = True, device="cpu") -> dict:
    """:func:`score` of an attack's reconstruction beside the scores of its baselines, and the verdict, as a run's
    metrics.json holds them (:func:`judge`): ``verdict`` is ``"rebuilt"`` only when the reconstruction is clearly
    better than both the attack's own start (``result.x0``) and the mean image of ``dataset`` (the data set the
    truth comes from; a constant grey image without one).  A reconstruction that is ``"not rebuilt"`` is a failure of
    that attack at that budget, not evidence that the message is private.  Where ``dataset`` holds the true images,
    the identifiability keys follow (:func:`identification`: the rank of each truth among the set's images by
    distance to its reconstruction, ``iip`` and the baselines' ``baseline_<name>_iip``).

    ``result``: an :class:`leakattack.AttackResult` (``x``, ``x0``, ``labels``); ``x``/``labels``: the truth
    (class indices are scored as ``label_acc``; real-valued targets, a regression's, have no label accuracy);
    ``closed_form``: the attack solved for x directly and has no start to score (``Attack.closed_form``); None (the
    default) takes it from the result, which a closed-form attack marks (``result.closed_form``).
    """
    if not hasattr(result, "x") or not hasattr(result, "x0"):
        raise MetricsError(f"assess takes an attack's result (an AttackResult), not {type(result).__name__}")
    if not isinstance(x, torch.Tensor):
        raise MetricsError(f"assess takes the truth x as a torch tensor of shape (B, C, H, W), got {type(x).__name__}")
    if dataset is not None and not (hasattr(dataset, "rows") and hasattr(dataset, "in_shape")):
        raise MetricsError(f"dataset must be the image set the truth comes from (leakattack.get_dataset(name)) or "
                           f"None, got {type(dataset).__name__} {dataset!r:.60}")
    if dataset is not None and x.dim() >= 2 and tuple(dataset.in_shape) != tuple(x.shape[1:]):
        shape = "x".join(map(str, dataset.in_shape))
        raise MetricsError(f"dataset '{dataset.name}' holds {shape} images and the truth is "
                           f"{'x'.join(map(str, x.shape[1:]))}: give the data set the truth comes from (its mean image "
                           "is a baseline), or None for a constant grey baseline")
    truth = x.detach()
    if closed_form is not None and not isinstance(closed_form, bool):  # "no" read as yes
        raise MetricsError(f"closed_form must be True, False or None (from the result), got "
                           f"{type(closed_form).__name__} {closed_form!r:.40}")
    if closed_form is None:
        closed_form = bool(getattr(result, "closed_form", False))
    for name in ("x",) if closed_form else ("x", "x0"):  # a closed form has no start to score
        if not isinstance(getattr(result, name), torch.Tensor):
            raise MetricsError(f"assess takes the result's {name} as a torch tensor of the truth's shape "
                               f"{tuple(x.shape)}, got {type(getattr(result, name)).__name__}")

    def scored(images, labels_hat=None):
        return score(in_range(images.detach().to(truth)), truth, labels_hat=labels_hat,
                     labels=labels if labels_hat is not None else None, with_lpips=with_lpips, device=device)

    if isinstance(labels, torch.Tensor) and labels.is_floating_point():
        labels = None  # a regression's targets: no label accuracy
    out = scored(result.x, result.labels if labels is not None else None)
    mean, what = mean_image(dataset, truth)
    baselines = {"start": None if closed_form else scored(result.x0), "mean": scored(mean)}
    found = identification(matched(result.x, out, truth),
                           {"start": None if closed_form else matched(result.x0, baselines["start"], truth),
                            "mean": mean}, truth, dataset)
    return {**out, **judge(out, baselines), "baseline_mean_image": what, **found}


def matched(images: torch.Tensor, scores: dict, truth: torch.Tensor) -> torch.Tensor:
    """``images`` in [0, 1] (:func:`in_range`) in the truth's order: the one :func:`score` matched to each true image
    (its ``match``) in that image's row."""
    return in_range(images.detach().to(truth))[torch.as_tensor(scores["match"], device=truth.device)]


__all__ = ["MetricsError", "PSNR_MSE_FLOOR", "SSIM_WIN", "ALEXNET_WEIGHTS_FILE", "LPIPS_MIN_SIDE",
           "in_range", "mse", "psnr", "ssim", "lpips_distance", "lpips_missing", "lpips_module", "alexnet_weights_path",
           "match", "label_accuracy", "label_overlap", "score", "assess",
           "verdict", "judge", "verdict_each", "rebuilt_images", "images_words",
           "nothing_attacked", "failed_part", "failed_counts", "failed_kind", "FAILED_PARTS",
           "closed_forms_line", "objective_failed", "truth_not_sent", "truth_not_sent_text", "REBUILT",
           "NOT_REBUILT", "BASELINES", "VERDICT_PSNR_MARGIN_DB",
           "VERDICT_SSIM_MARGIN", "SAME_IMAGE_SSIM", "mean_image", "MEAN_IMAGE_SAMPLE", "GREY_LEVEL",
           "jacobian", "jacobian_rank", "numerical_rank", "JACOBIAN_MAX_WORK", "JACOBIAN_MAX_UNKNOWNS",
           "RunMetrics", "METRICS_SCHEMA", "identification", "feature_identification", "identified_line",
           "IDENTIFY_SAMPLE", "matched"]
