"""Image identifiability: whether a reconstruction singles its true image out of the data set it comes from.

Yin, Mallya, Vahdat, Alvarez, Kautz and Molchanov ("See through Gradients: Image Batch Recovery via GradInversion",
CVPR 2021) score a reconstruction by its nearest neighbour in the data set: the image identifiability precision
(IIP) is the share of reconstructions whose nearest image is their own truth.  A reconstruction can do that without
clearing the baselines of the verdict (a blurred or shifted copy of a photograph is still nearer to it than to the
set's other images), and an attacker who holds the set, or a set of candidate photographs, then knows which image
the client holds: a leak that PSNR alone does not show.

Here the score is the pixel distance (MSE on images in [0, 1]) and the candidates are the whole data set (up to
:data:`IDENTIFY_SAMPLE` of its images, evenly spaced, and the truths added to them), a stricter test than the
images of the truth's own class that breaching's ``image_identifiability_precision`` compares.  Each true image gets
the rank of its truth among the candidates by distance to its matched reconstruction (1: the nearest; an image at the
same distance as the truth does not push it down), and IIP is the share of rank 1.  The baselines of the verdict (the
attack's start, the data set's mean image) are ranked the same way, so a run says whether its reconstruction
identifies more images than an image drawn without the message does.

A second score, where the run has its victim (a classifier with a linear head), is breaching's ``self`` score: the
cosine distance between the victim's own features, the inputs of its head, with the network in eval mode (its
BatchNorm running statistics, untouched).  Blurred reconstructions are nearest in pixels to the set's most average
images whatever they show; the features of a network that tells the set's images apart are not, so the two scores can
disagree (docs/runs.md).  The features are compared on at most :data:`FEATURE_SAMPLE` images of the set.
"""

from __future__ import annotations

import torch

#: at most this many images of the data set are compared with a reconstruction (evenly spaced; the truths always)
IDENTIFY_SAMPLE = 1024
#: images of the set compared in one batch (a 224 px image holds 150,528 numbers)
IDENTIFY_CHUNK = 128
#: at most this many images of the data set go through the victim for the feature score (evenly spaced; the truths
#: always): both scores on the 50 photos at 224 px took 4.5-4.8 s with ResNet-101 and 7.2-7.8 s with ViT-B/16,
#: x0.99-1.07 of a bare loop of the same forward passes (``python benchmarks/identify_cost.py``, 2-core Intel Xeon)
FEATURE_SAMPLE = 256
#: images through the victim in one batch for the feature score
FEATURE_CHUNK = 32
#: a data-set image within this of a true image (largest absolute difference) is that image (float32 storage)
SAME_PIXELS = 1e-6
#: the two distances, by the suffix of their metrics.json keys (``iip``, ``iip_features``, ...): in words, and short
SCORES = (("", "pixel distance", "pixels"), ("_features", "the victim's features", "features"))


def candidates(n: int, positions: list[int] | None, most: int = IDENTIFY_SAMPLE) -> torch.Tensor:
    """The positions of a set of n images compared with the reconstructions: all of them up to ``most``
    (:data:`IDENTIFY_SAMPLE`), else that many evenly spaced with the truths' ``positions`` added."""
    if n <= most:
        return torch.arange(n)
    spaced = torch.linspace(0, n - 1, most).round().long()
    extra = torch.tensor([p for p in positions or [] if p >= 0], dtype=torch.long)
    return torch.cat([spaced, extra]).unique()


def _distances(images: torch.Tensor, dataset, pool: torch.Tensor) -> torch.Tensor:
    """(B, len(pool)) MSE between each of ``images`` (B, C, H, W) and the set's images at ``pool``, in float64."""
    flat = images.detach().reshape(images.shape[0], -1).to(torch.float64)
    out = []
    for start in range(0, pool.numel(), IDENTIFY_CHUNK):
        rows, _ = dataset.rows(pool[start:start + IDENTIFY_CHUNK])
        other = rows.reshape(rows.shape[0], -1).to(device=flat.device, dtype=torch.float64)
        out.append(torch.cdist(flat, other, compute_mode="donot_use_mm_for_euclid_dist").pow(2) / flat.shape[1])
    return torch.cat(out, dim=1)


def truth_columns(truth: torch.Tensor, dataset, pool: torch.Tensor,
                  positions: list[int] | None) -> list[int | None]:
    """For each true image, its column in ``pool`` (the candidates), or None where the set does not hold it there:
    at its known position (``positions``, checked against the pixels) or, without positions, the first candidate
    within :data:`SAME_PIXELS` of it (one pass over the candidates for all the truths)."""
    flat = truth.detach().reshape(truth.shape[0], -1).to(torch.float64)
    if positions is not None:
        where = {int(p): k for k, p in enumerate(pool.tolist())}
        cols = [where.get(int(p)) for p in positions]
        held = [(i, k) for i, k in enumerate(cols) if k is not None]
        if held:
            rows, _ = dataset.rows(pool[[k for _, k in held]])
            rows = rows.reshape(len(held), -1).to(flat.device, torch.float64)
            for r, (i, k) in enumerate(held):  # the set's image at that position must be the truth itself
                cols[i] = k if float((rows[r] - flat[i]).abs().max()) <= SAME_PIXELS else None
        return cols
    found: list[int | None] = [None] * truth.shape[0]
    for start in range(0, pool.numel(), IDENTIFY_CHUNK):
        rows, _ = dataset.rows(pool[start:start + IDENTIFY_CHUNK])
        other = rows.reshape(rows.shape[0], -1).to(flat.device, torch.float64)
        close = ((other[None] - flat[:, None]).abs().amax(dim=2) <= SAME_PIXELS)  # (truths, chunk)
        for i in range(truth.shape[0]):
            hit = close[i].nonzero()
            if found[i] is None and hit.numel():
                found[i] = start + int(hit[0])
        if all(k is not None for k in found):
            break
    return found


def ranks(dist: torch.Tensor, cols: list[int | None]) -> list[int | None]:
    """For each row of ``dist`` (an image's distances to the candidates, matched to the true image of the same row),
    the rank of its truth among the candidates: 1 + the number of other candidates strictly nearer; None where the
    truth is not among them (``cols``) or the image holds a pixel that is not a number (:func:`in_range`)."""
    out: list[int | None] = []
    for i, k in enumerate(cols):
        if k is None or not bool(torch.isfinite(dist[i, k])):  # a reconstruction that is not a number ranks nothing
            out.append(None)
            continue
        nearer = dist[i] < dist[i, k]
        nearer[k] = False
        out.append(1 + int(nearer.sum()))
    return out


def iip(rank_each: list[int | None]) -> float | None:
    """The share of ranks that are 1 among those measured (Yin et al.'s IIP), or None where none was."""
    measured = [r for r in rank_each if r is not None]
    return None if not measured else sum(r == 1 for r in measured) / len(measured)


def identification(reconstruction: torch.Tensor, baselines: dict[str, torch.Tensor | None], truth: torch.Tensor,
                   dataset, positions: list[int] | None = None) -> dict:
    """metrics.json's identifiability keys: ``identified_each`` (the rank of each true image among the candidates by
    distance to its matched reconstruction, in the truth's order), ``identified_among`` (how many images of the set
    were compared), ``iip`` and ``baseline_<name>_iip`` for each baseline's images (already matched to the truth),
    ``baseline_iip`` the higher of those;
    ``{}`` where the set holds none of the true images (a message file, a protocol's client data, another set).

    ``reconstruction`` and the baselines are in the truth's order and shape, in [0, 1]; ``positions``: the true
    images' positions in ``dataset`` where the caller knows them."""
    return _identified(reconstruction, baselines, truth, dataset, positions, IDENTIFY_SAMPLE, "",
                       lambda images, pool: _distances(images, dataset, pool))


def _identified(reconstruction: torch.Tensor, baselines: dict[str, torch.Tensor | None], truth: torch.Tensor,
                dataset, positions: list[int] | None, most: int, suffix: str, distances) -> dict:
    """The keys of one score (``suffix``: :data:`SCORES`) on at most ``most`` candidates: ``distances(images, pool)``
    gives the (N, len(pool)) distances of N images to the set's images at ``pool``, all groups in one call."""
    if dataset is None or len(dataset) == 0 or tuple(dataset.in_shape) != tuple(truth.shape[1:]):
        return {}
    if positions is None and len(dataset) > most:  # the truths among the evenly spaced candidates: find them first
        found = truth_columns(truth, dataset, torch.arange(len(dataset)), None)
        positions = [-1 if k is None else k for k in found]  # -1: not in the set, which no candidate is
    pool = candidates(len(dataset), positions, most)
    cols = truth_columns(truth, dataset, pool, positions)
    if all(k is None for k in cols):
        return {}
    groups = {"": reconstruction, **{name: images for name, images in baselines.items() if images is not None}}
    dist = distances(torch.cat([images.to(truth) for images in groups.values()]), pool)
    if dist is None:
        return {}
    B = truth.shape[0]
    each = {name: ranks(dist[i * B:(i + 1) * B], cols) for i, name in enumerate(groups)}
    out: dict = {f"identified{suffix}_each": each[""], f"identified{suffix}_among": int(pool.numel()),
                 f"iip{suffix}": iip(each[""])}
    for name in baselines:
        out[f"baseline_{name}_iip{suffix}"] = iip(each[name]) if name in each else None
    out[f"baseline_iip{suffix}"] = _better(out, baselines, suffix)
    return out


def _better(out: dict, baselines: dict, suffix: str) -> float | None:
    """The higher of the baselines' shares (``baseline_<name>_iip<suffix>``), None where none was measured."""
    shares = [out[f"baseline_{name}_iip{suffix}"] for name in baselines
              if out.get(f"baseline_{name}_iip{suffix}") is not None]
    return max(shares, default=None)


def features(victim, images: torch.Tensor) -> torch.Tensor | None:
    """The victim's features of ``images`` (B, C, H, W): the inputs of its head, flattened, from a forward pass in
    eval mode without gradients (BatchNorm reads its running statistics and changes nothing; each module's mode is
    given back); None for a victim without a linear head."""
    if getattr(victim, "head", None) is None:
        return None
    model = victim.model
    seen: list[torch.Tensor] = []
    modes = [(module, module.training) for module in model.modules()]  # a victim may mix modes (--bn eval)
    try:
        model.eval()
        with torch.no_grad():
            for start in range(0, images.shape[0], FEATURE_CHUNK):
                seen.append(victim.head_inputs(images[start:start + FEATURE_CHUNK].to(victim.device, victim.dtype))[1])
    finally:
        for module, mode in modes:
            module.training = mode
    return torch.cat(seen).to(torch.float64) if seen else None


def feature_identification(victim, reconstruction: torch.Tensor, baselines: dict[str, torch.Tensor | None],
                           truth: torch.Tensor, dataset, positions: list[int]) -> dict:
    """The identifiability keys of the victim's own features (:func:`features`; cosine distance):
    ``identified_features_each``, ``identified_features_among``, ``iip_features``,
    ``baseline_<name>_iip_features`` and ``baseline_iip_features``; ``{}`` where the victim has no linear head or
    the set does not hold the truths at ``positions``."""
    if getattr(victim, "head", None) is None:
        return {}

    def distances(images: torch.Tensor, pool: torch.Tensor) -> torch.Tensor | None:
        known, mine = features(victim, dataset.rows(pool)[0]), features(victim, images)
        if known is None or mine is None:
            return None
        unit = torch.nn.functional.normalize
        return 1 - unit(mine, dim=1) @ unit(known.to(mine.device), dim=1).T

    return _identified(reconstruction, baselines, truth, dataset, positions, FEATURE_SAMPLE, "_features", distances)


def identified_line(m) -> str | None:
    """One sentence where a run's reconstruction identifies more of its images than either baseline does, by pixel
    distance or by the victim's features (``m``: a metrics.json dict or :class:`~leakattack.metrics.RunMetrics`),
    else None."""
    said = []
    for suffix, how, _ in SCORES:
        share, among = m.get(f"iip{suffix}"), m.get(f"identified{suffix}_among")
        each = [r for r in (m.get(f"identified{suffix}_each") or []) if r is not None]
        base = max((v for v in (m.get(f"baseline_start_iip{suffix}"), m.get(f"baseline_mean_iip{suffix}"),
                                m.get(f"baseline_iip{suffix}")) if v is not None), default=0.0)
        if share is not None and each and among and share > base:
            found = sum(r == 1 for r in each)
            said.append(f"by {how}, the truth is its nearest of {among} images of the data set for {found} of "
                        f"{len(each)}, where the baselines' best is {base:.0%}")
    if not said:
        return None
    return "the reconstruction identifies images: " + "; ".join(said) + " (image identifiability, Yin et al. 2021)"


__all__ = ["IDENTIFY_SAMPLE", "IDENTIFY_CHUNK", "FEATURE_SAMPLE", "FEATURE_CHUNK", "SAME_PIXELS", "SCORES",
           "candidates", "truth_columns", "ranks", "iip", "identification", "features", "feature_identification",
           "identified_line"]
