"""One-to-one matching of a reconstructed batch to the ground truth, and label accuracy."""

from __future__ import annotations

import numpy as np
import torch

from .base import MetricsError, check_pair


def _classes(labels, what: str) -> torch.Tensor:
    """``labels`` as a flat tensor of class indices; floating-point values that are not whole numbers (class
    probabilities, one-hot rows) are one MetricsError sentence, not truncated to a class."""
    t = torch.as_tensor(labels).reshape(-1).cpu()
    if t.is_floating_point() and not bool((t == t.round()).all()):
        odd = float(t[t != t.round()][0])
        raise MetricsError(f"{what} must be class indices, got {str(t.dtype)[6:]} values such as {odd:g} "
                           "(probabilities or one-hot rows: take their argmax first)")
    return t


def label_accuracy(pred, true) -> float:
    """Fraction of positions where the predicted label equals the true label."""
    p = _classes(pred, "the predicted labels")
    t = _classes(true, "the true labels")
    if p.numel() != t.numel() or t.numel() == 0:
        raise MetricsError(f"label accuracy needs two non-empty label lists of one length, got "
                           f"{p.numel()} and {t.numel()}")
    return int((p.long() == t.long()).sum()) / t.numel()  # the exact fraction (5/7, not float32's 0.71428573)


def label_overlap(pred, true) -> float:
    """Fraction of the true labels found in the predicted ones as a multiset: sum_c min(#pred c, #true c) / B.

    The label accuracy of batch label recovery (iDLG/LLG/iLRG, breaching): it
    does not depend on which reconstructed image carries which label.
    """
    p = _classes(pred, "the predicted labels").long()
    t = _classes(true, "the true labels").long()
    if p.numel() != t.numel() or t.numel() == 0:
        raise MetricsError(f"label accuracy needs two non-empty label lists of one length, got "
                           f"{p.numel()} and {t.numel()}")
    if int(torch.minimum(p.min(), t.min())) < 0:
        raise MetricsError("labels must be non-negative class indices")
    n = int(torch.maximum(p.max(), t.max())) + 1
    common = torch.minimum(torch.bincount(p, minlength=n), torch.bincount(t, minlength=n)).sum()
    return float(common) / t.numel()


def mse_matrix(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """cost[i, j] = MSE of x_hat[i] against x[j], in float64 on the CPU (NaN or inf where x_hat[i] is not finite)."""
    check_pair(x_hat, x)
    a = x_hat.detach().to(torch.float64).flatten(1).cpu()
    y = x.detach().to(torch.float64).flatten(1).cpu()
    return torch.cdist(a, y, compute_mode="donot_use_mm_for_euclid_dist").pow(2).div(a.shape[1])


def match(x_hat: torch.Tensor, x: torch.Tensor, cost: torch.Tensor | None = None) -> torch.Tensor:
    """Permutation perm with x_hat[perm] aligned to x, by the Hungarian algorithm (Kuhn 1955; scipy
    linear_sum_assignment) on pairwise MSE (``cost``: :func:`mse_matrix` of the pair, where the caller has it)."""
    # scipy.optimize is a heavy import: only when a batch of more than one image is matched.
    from scipy.optimize import linear_sum_assignment

    cost_np = (mse_matrix(x_hat, x) if cost is None else cost).numpy().copy()
    bad = ~np.isfinite(cost_np)
    if bad.any():  # diverged reconstructions: match them last instead of failing
        finite = cost_np[~bad]
        cost_np[bad] = (finite.max() + 1.0) * cost_np.size if finite.size else 1.0
    rows, cols = linear_sum_assignment(cost_np)
    perm = np.empty(len(rows), dtype=np.int64)
    perm[cols] = rows
    return torch.from_numpy(perm)


def _groups(images: torch.Tensor) -> list[list[int]]:
    """Indices of ``images`` that are exactly the same image, as groups of two or more."""
    flat = images.detach().flatten(1).cpu()
    seen: dict[bytes, list[int]] = {}
    for i, row in enumerate(flat):
        seen.setdefault(row.numpy().tobytes(), []).append(i)
    return [g for g in seen.values() if len(g) > 1]


def _best_labels(owners: list[int], slots: list[int], labels_hat: torch.Tensor, labels: torch.Tensor) -> list[int]:
    """The order of ``owners`` (reconstruction indices) over ``slots`` (true indices) that gives the most equal
    labels, by the Hungarian algorithm on label agreement."""
    from scipy.optimize import linear_sum_assignment

    agree = np.array([[float(labels_hat[o] == labels[s]) for s in slots] for o in owners])
    rows, cols = linear_sum_assignment(-agree)
    out = [0] * len(slots)
    for r, c in zip(rows, cols):
        out[c] = owners[r]
    return out


def labels_tie_break(perm: torch.Tensor, x_hat: torch.Tensor, x: torch.Tensor, labels_hat, labels) -> torch.Tensor:
    """``perm`` (x_hat[perm] aligned to x) with its ties settled by the labels: reconstructions matched to true
    images that are exactly the same image, and identical reconstructions, are ordered among themselves so that
    the most labels agree.  Such reorderings leave every image cost as it is; without them the order of a tie
    decides which label each reconstruction is compared with."""
    lh = torch.as_tensor(labels_hat).reshape(-1).cpu().long()
    lt = torch.as_tensor(labels).reshape(-1).cpu().long()
    perm = perm.clone()
    for slots in _groups(x):  # identical truths: any of their reconstructions may stand for any of them
        perm[slots] = torch.tensor(_best_labels(perm[slots].tolist(), slots, lh, lt))
    where = {int(o): j for j, o in enumerate(perm.tolist())}
    for owners in _groups(x_hat):  # identical reconstructions: any of them may stand for any of their truths
        slots = sorted(where[o] for o in owners)
        perm[slots] = torch.tensor(_best_labels(owners, slots, lh, lt))
    return perm


def nearer_truths(xm: torch.Tensor, x: torch.Tensor, cost: torch.Tensor | None = None) -> list[int | None]:
    """For each true image i, the other true image j whose MSE to reconstruction ``xm[i]`` (already matched to x) is
    lower than its MSE to x[i], the lowest such (None where x[i] is the nearest, or the reconstruction is not
    finite).  Such a reconstruction shows image j, not image i: repeated copies of one reconstruction, matched to
    several truths, rebuild one of them.  ``cost``: :func:`mse_matrix` of ``xm`` and x, where the caller has it."""
    cost = mse_matrix(xm, x) if cost is None else cost
    out: list[int | None] = []
    for i, row in enumerate(cost):
        j = int(row.argmin()) if bool(torch.isfinite(row).all()) else i
        out.append(j if j != i and bool(row[j] < row[i]) else None)
    return out


__all__ = ["label_accuracy", "label_overlap", "labels_tie_break", "match", "mse_matrix", "nearer_truths"]
