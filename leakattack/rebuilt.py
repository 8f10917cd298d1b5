"""The verdict of a run: rebuilt, or not, judged against what needs no message at all.

A reconstruction is evidence of a leak only when it is clearly better than two
baselines an attacker has without the message: the attack's own start (its
seeded dummy data) and the data set's mean image (a constant grey image where
there is no data set).  A failed attack scores about as well as these, and must
never read as "the message is private": it is a failure of that attack at that
budget.

:func:`verdict` is the rule; :func:`judge` applies it to a score and the scores
of the baselines; :func:`nothing_attacked` says when an iterative attack never
moved off its start (a step size that overflows, a message drowned in noise), so
that its numbers are not presented as the result of an attack.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: rebuilt only when the PSNR beats the better baseline PSNR by more than this many dB
VERDICT_PSNR_MARGIN_DB = 1.0
#: ... and the SSIM beats the better baseline SSIM by more than this
VERDICT_SSIM_MARGIN = 0.05
#: a run that matched the message to the tolerance with an SSIM below this found a different image
SAME_IMAGE_SSIM = 0.9

#: a rebuilt reconstruction with an SSIM below this is called faint: about where images become barely visible (the
#: crossing read off the noise sweep of docs/sweeps.md); the verdict stays rebuilt
FAINT_SSIM = 0.3

REBUILT = "rebuilt"
NOT_REBUILT = "not rebuilt"

#: the baselines' names in metrics.json (``baseline_<name>_psnr`` ...), in the order they are scored
BASELINES = ("start", "mean")


def verdict(psnr: float | None, ssim: float | None, baseline_psnr: float | None,
            baseline_ssim: float | None) -> str:
    """``"rebuilt"`` when PSNR > baseline PSNR + 1 dB and SSIM > baseline SSIM + 0.05, else ``"not rebuilt"``.

    The baselines are the better of the scores that need no message (the start,
    the data set's mean image).  A score that is None (not finite: a diverged
    reconstruction) is not rebuilt; a baseline that is None is not compared.
    """
    psnr, ssim, baseline_psnr, baseline_ssim = map(finite_or_none, (psnr, ssim, baseline_psnr, baseline_ssim))
    if psnr is None or ssim is None:
        return NOT_REBUILT
    if baseline_psnr is not None and psnr <= baseline_psnr + VERDICT_PSNR_MARGIN_DB:
        return NOT_REBUILT
    if baseline_ssim is not None and ssim <= baseline_ssim + VERDICT_SSIM_MARGIN:
        return NOT_REBUILT
    return REBUILT


def finite_or_none(v):
    """``v`` where it is a finite number, else None (a NaN compares false with everything, and would decide)."""
    return v if v is not None and math.isfinite(v) else None


def _best(values: dict, higher: bool = True):
    """(name, value) of the best finite value, or (None, None): a NaN kept would win or lose by its place."""
    kept = [(v, n) for n, v in values.items() if finite_or_none(v) is not None]
    if not kept:
        return None, None
    v, n = max(kept) if higher else min(kept)
    return n, v


def judge(scores: dict, baselines: dict[str, dict | None]) -> dict:
    """The baselines' scores and the verdict, as metrics.json keys.

    ``scores``: :func:`leakattack.metrics.score` of the reconstruction;
    ``baselines``: name (``start``, ``mean``) -> the same scores of that
    baseline, or None where it does not apply.  Returns
    ``baseline_<name>_psnr|ssim|lpips``, ``baseline_psnr`` / ``baseline_ssim``
    (the better of the baselines: higher; ``baseline_lpips``: lower),
    ``verdict`` and ``verdict_baseline``: for a reconstruction that is not
    rebuilt, the baseline it is no better than (the one with the higher PSNR
    when the PSNR decided, else the one with the higher SSIM).
    """
    out: dict = {}
    for name in BASELINES:
        s = baselines.get(name)
        for key in ("psnr", "ssim", "lpips"):
            out[f"baseline_{name}_{key}"] = None if s is None else s.get(key)
    best_p = _best({n: out[f"baseline_{n}_psnr"] for n in BASELINES})
    best_s = _best({n: out[f"baseline_{n}_ssim"] for n in BASELINES})
    out["baseline_psnr"], out["baseline_ssim"] = best_p[1], best_s[1]
    out["baseline_lpips"] = _best({n: out[f"baseline_{n}_lpips"] for n in BASELINES}, higher=False)[1]
    out["verdict"] = verdict(scores.get("psnr"), scores.get("ssim"), best_p[1], best_s[1])
    better = baselines_each(scores, baselines)
    out["baseline_psnr_each"], out["baseline_ssim_each"] = better if better is not None else (None, None)
    out["verdict_each"] = None if better is None else _own_verdicts(scores, *better)
    out["nearer_each"] = scores.get("nearer_each") if better is not None else None
    out["verdict_baseline"] = None
    if out["verdict"] == NOT_REBUILT:
        psnr = finite_or_none(scores.get("psnr"))
        psnr_decides = psnr is None or (best_p[1] is not None and psnr <= best_p[1] + VERDICT_PSNR_MARGIN_DB)
        out["verdict_baseline"] = best_p[0] if psnr_decides or best_s[0] is None else best_s[0]
    return out


def baselines_each(scores: dict, baselines: dict[str, dict | None]) -> tuple[list, list] | None:
    """The better of the baselines' PSNR and SSIM for each true image, in the truth's order (None where no baseline
    scored it), as two lists; None without per-image scores of the reconstruction (no truth)."""
    if not scores.get("psnr_each") or not scores.get("ssim_each"):
        return None
    rows = [s for s in baselines.values() if s is not None]
    n = len(scores["psnr_each"])
    return ([_best({k: s["psnr_each"][i] for k, s in enumerate(rows)})[1] for i in range(n)],
            [_best({k: s["ssim_each"][i] for k, s in enumerate(rows)})[1] for i in range(n)])


def verdict_each(scores: dict, baselines: dict[str, dict | None]) -> list[str] | None:
    """The verdict of each true image on its own, in the truth's order: its matched reconstruction's PSNR and SSIM
    (``psnr_each``, ``ssim_each`` of :func:`leakattack.metrics.score`) against the better of the baselines' scores
    of that image (:func:`baselines_each`), by :func:`verdict`'s rule, and only where the reconstruction is nearer to
    that image than to any other of the batch (``nearer_each`` of the scores: a copy of one image matched to another
    truth can clear the baselines of a photograph it does not show).  None without per-image scores (no truth).

    A batch's verdict is taken on its means, and a mean can hide images: two photographs rebuilt exactly and two
    not at all average to about 100 dB (each PSNR is capped at 200 dB), one image rebuilt in a batch of eight can
    leave the mean within the margin.  These verdicts say which images came back."""
    better = baselines_each(scores, baselines)
    return None if better is None else _own_verdicts(scores, *better)


def _own_verdicts(scores: dict, psnr_base: list, ssim_base: list) -> list[str]:
    nearer = scores.get("nearer_each") or [None] * len(scores["psnr_each"])
    return [verdict(p, q, bp, bs) if j is None else NOT_REBUILT
            for p, q, bp, bs, j in zip(scores["psnr_each"], scores["ssim_each"], psnr_base, ssim_base, nearer)]


def image_scores(m: Mapping, i: int) -> dict | None:
    """Image ``i`` of a run's batch (a metrics.json dict) on its own, as the keys a run's verdict is read from
    (``psnr``, ``ssim``, ``baseline_psnr``, ``baseline_ssim``, ``verdict``), or None where the run has no per-image
    verdicts (no truth; written before they existed)."""
    each = m.get("verdict_each")
    if not each or i >= len(each):
        return None
    keys = ("psnr", "ssim", "baseline_psnr", "baseline_ssim")
    lists = [m.get(f"{k}_each") or [None] * len(each) for k in keys]
    return {**{k: v[i] for k, v in zip(keys, lists)}, "verdict": each[i]}


def image_verdicts(m: Mapping) -> list[str] | None:
    """The verdicts a run (a metrics.json dict) counts its images by: for a batch with per-image verdicts each image's
    own (``verdict_each``), else the run's one verdict; None where it has none (no truth; stored before verdicts)."""
    each = m.get("verdict_each")
    if each and len(each) > 1:
        return list(each)
    return None if m.get("verdict") is None else [m["verdict"]]


def rebuilt_images(m: Mapping) -> tuple[int, int] | None:
    """(how many images of the batch are rebuilt on their own, the batch size) of a run (a metrics.json dict), or
    None where the run has no per-image verdicts (no truth; written before they existed)."""
    each = m.get("verdict_each")
    if not each:
        return None
    return sum(v == REBUILT for v in each), len(each)


def faint_words(m: Mapping) -> str | None:
    """``faint: SSIM below 0.3`` for a run that is rebuilt with an SSIM below :data:`FAINT_SSIM` (clearly above what
    needs no message, and still barely visible); None otherwise."""
    ssim = m.get("ssim")
    if m.get("verdict") == REBUILT and isinstance(ssim, (int, float)) and ssim < FAINT_SSIM:
        return f"faint: SSIM below {FAINT_SSIM:g}"
    return None


def images_words(m: Mapping) -> str | None:
    """Where a batch's per-image verdicts differ from its verdict on the means: ``2 of 4 images`` for a batch that
    is rebuilt (``no image on its own`` where none is), ``1 of 4 images rebuilt`` for one that is not; None where
    they agree (every image rebuilt, or none rebuilt, as the batch), for one image, and without per-image verdicts."""
    counts = rebuilt_images(m)
    if counts is None or counts[1] < 2:
        return None
    k, n = counts
    if m.get("verdict") == REBUILT and k < n:
        return f"{k} of {n} images" if k else "no image on its own"
    if m.get("verdict") == NOT_REBUILT and 0 < k < n:
        return f"{k} of {n} images rebuilt"
    return None


def batch_images(runs) -> tuple[int, int] | None:
    """Over runs (metrics.json dicts) with verdicts, where any is a batch with per-image verdicts: (images rebuilt,
    images), a batch's counted on their own (:func:`image_verdicts`), a single image or a run stored before
    per-image verdicts counted as one by its verdict; None where no run is such a batch."""
    runs = list(runs)
    if not any(len(m.get("verdict_each") or ()) > 1 for m in runs):
        return None
    each = [v for m in runs for v in image_verdicts(m) or ()]
    return each.count(REBUILT), len(each)


def batch_images_words(counts: tuple[int, int] | None) -> str | None:
    """``3 of 10 images rebuilt on their own`` for :func:`batch_images`' counts; None for None."""
    if counts is None:
        return None
    return f"{counts[0]} of {counts[1]} images rebuilt on their own"


def _listed(indices: list[int]) -> str:
    """``image 3`` or ``images 0, 2 and 5``."""
    if len(indices) == 1:
        return f"image {indices[0]}"
    return f"images {', '.join(map(str, indices[:-1]))} and {indices[-1]}"


def images_note(m: Mapping) -> str | None:
    """A sentence for a batch whose per-image verdicts differ from its verdict on the means (:func:`images_words`):
    which images are rebuilt on their own and which not, and which reconstructions show another image of the batch
    (``nearer_each``); None where they agree."""
    if images_words(m) is None:
        return None
    each = m["verdict_each"]
    yes = [i for i, v in enumerate(each) if v == REBUILT]
    no = [i for i, v in enumerate(each) if v != REBUILT]
    if yes:
        said = f"on their own, {_listed(yes)} of the batch (in the truth's order) {'are' if len(yes) > 1 else 'is'} " \
               f"rebuilt, {_listed(no)} {'are' if len(no) > 1 else 'is'} not"
    else:
        said = "on their own, none of the batch's images is rebuilt"
    # the images whose scores alone would count them rebuilt, but whose reconstruction shows another image
    nearer = [(i, j) for i, j in enumerate(m.get("nearer_each") or ()) if j is not None
              and (own := image_scores(m, i)) is not None
              and verdict(own["psnr"], own["ssim"], own["baseline_psnr"], own["baseline_ssim"]) == REBUILT]
    if nearer:
        said += "; the reconstruction matched to " + ", ".join(f"image {i} is nearer to image {j}"
                                                               for i, j in nearer)
    return (f"{said}; the batch's verdict is taken on its mean PSNR and SSIM (each image's verdict: metrics.json's "
            "verdict_each; look at reconstruction.png)")


def baseline_words(name: str | None, mean_image: str | None = None) -> str:
    """A baseline's name (``start``, ``mean``) in words; ``mean_image``: how the run describes its mean image
    (``baseline_mean_image``), "a constant grey image" where there was no data set."""
    if name == "start":
        return "the start"
    return "a constant grey image" if "grey" in (mean_image or "") else "the data set's mean image"


def _better(m: Mapping, metric: str) -> str | None:
    """The name of the baseline with the higher ``metric`` (``psnr``, ``ssim``) of a metrics.json dict, or None."""
    return _best({n: m.get(f"baseline_{n}_{metric}") for n in BASELINES})[0]


def short_metric(m: Mapping) -> str | None:
    """``"PSNR"`` or ``"SSIM"``: the one metric of a run (a metrics.json dict) that kept it from :data:`REBUILT`
    while the other is clearly above its better baseline (beyond its margin); None when both fell short, neither
    did, or a score or baseline is not recorded (not finite)."""
    psnr, ssim, bp, bs = m.get("psnr"), m.get("ssim"), m.get("baseline_psnr"), m.get("baseline_ssim")
    if psnr is None or ssim is None or bp is None or bs is None:
        return None
    short = {"PSNR": psnr <= bp + VERDICT_PSNR_MARGIN_DB, "SSIM": ssim <= bs + VERDICT_SSIM_MARGIN}
    return None if all(short.values()) or not any(short.values()) else "PSNR" if short["PSNR"] else "SSIM"


def one_metric_ahead(m: Mapping) -> str | None:
    """For a run not rebuilt whose one metric fell short while the other is clearly above its better baseline, the
    metric that fell short (:func:`short_metric`); None otherwise (rebuilt, no verdict, both short)."""
    return short_metric(m) if m.get("verdict") == NOT_REBUILT else None


def ahead_words(m: Mapping) -> str:
    """For a run not rebuilt whose one metric fell short while the other is clearly above its better baseline
    (:func:`one_metric_ahead`), which fell short and by how much the other is ahead, as written after its verdict:
    ``" (PSNR); SSIM +0.33"`` or ``" (SSIM); PSNR +2.1 dB"``; else ``""``."""
    low = one_metric_ahead(m)
    if low == "PSNR":
        return f" (PSNR); SSIM +{m['ssim'] - m['baseline_ssim']:.2f}"
    if low == "SSIM":
        return f" (SSIM); PSNR +{m['psnr'] - m['baseline_psnr']:.1f} dB"
    return ""


def why_not_rebuilt(m: Mapping) -> tuple[str, str | None]:
    """Why a run (a metrics.json dict) that is not rebuilt is not, and what its other score says.

    Returns (the reason in a few words, a sentence or None).  The reason names the
    metric that kept it from :data:`REBUILT` beside the better baseline of that
    metric: ``PSNR within 1 dB of the data set's mean image`` (above that
    baseline but not by the margin), ``SSIM no better than the start`` (at or
    below it), or ``no better than ...`` when both PSNR and SSIM fall short.
    When one metric falls short and the other is clearly above its baseline
    (beyond its margin), the sentence says by how much, and that parts of the
    image may show: the reconstruction is to be looked at before it is read as
    nothing rebuilt.  A score that is not finite (None) reads ``no better than``.
    """
    low = short_metric(m)
    if low is None:  # both short, a score not finite (or a verdict this rule would not give)
        return f"no better than {baseline_words(m.get('verdict_baseline'), m.get('baseline_mean_image'))}", None
    psnr, ssim, bp, bs = (float(m[k]) for k in ("psnr", "ssim", "baseline_psnr", "baseline_ssim"))
    value, base = (psnr, bp) if low == "PSNR" else (ssim, bs)
    margin = f"{VERDICT_PSNR_MARGIN_DB:g} dB" if low == "PSNR" else f"{VERDICT_SSIM_MARGIN:g}"
    words = baseline_words(_better(m, low.lower()) or m.get("verdict_baseline"), m.get("baseline_mean_image"))
    reason = f"{low} within {margin} of {words}" if value > base else f"{low} no better than {words}"
    if low == "PSNR":
        ahead = f"SSIM is {ssim - bs:.2f} above the better baseline's ({ssim:.4f} against {bs:.4f})"
    else:
        ahead = f"PSNR is {psnr - bp:.2f} dB above the better baseline's ({psnr:.2f} dB against {bp:.2f} dB)"
    counts = rebuilt_images(m)
    if counts is not None and counts[1] > 1 and counts[0] == 0:  # a batch: the margin of its means, none on its own
        return reason, (f"the batch's mean {ahead}, though none of its images clears its own baselines: look at "
                        "reconstruction.png before reading it as nothing rebuilt")
    if counts is not None and counts[1] > 1:  # a batch with images rebuilt on their own, which its note names
        clear = "clears its own baselines: look at reconstruction.png for it" if counts[0] == 1 else \
            "clear their own baselines: look at reconstruction.png for them"
        return reason, f"the batch's mean {ahead}, and {counts[0]} of its {counts[1]} images {clear}"
    return reason, (f"the reconstruction's {ahead}, so parts of the image may show: look at reconstruction.png "
                    "before reading it as nothing rebuilt")


#: the stop reasons of a search cut short by its budget (its time limit, or Ctrl-C), not ended by its own rule
HALTED = ("time-limit", "interrupted")

#: a search whose every step's L_R lies within this share of its start value barely moved (steps too small to
#: change it: Adam at --lr 1e-12; `leakattack run --dtype float32 --optimizer adam --signed --lr 1e-9 --iterations
#: 50` wanders by 2.0e-6 of its value in trace.csv, from rounding alone), which :func:`nothing_attacked` says in
#: :data:`STILL_WORDS`; a run that ends its budget more than this share above its start says that it rose
STILL_RTOL = 1e-4
STILL_WORDS = "the search's steps barely moved it"


def nothing_attacked(losses: list[float], best_step: int, name: str = "L_R", others: tuple[str, ...] = ()
                     ) -> str | None:
    """Why an iterative attack attacked nothing, in a few words, or None when it did attack.

    It attacked nothing when its matching term was not finite at the start
    (diverged at step 0), or when it ran steps but never went below its
    start value (the best iterate is the start itself).  ``name``: the matching term's, as the summary line says it;
    ``others``: the terms its objective adds to it (``TV``, a prior), which its steps also follow.
    """
    if not losses:
        return None
    first = losses[0]
    term = "the objective" if not others else "the matching term"
    if first is None or not math.isfinite(first):
        return f"{term} was not finite at the start ({name} = {first})"
    steps = losses[1:]
    if steps and all(v is not None and abs(v - first) <= STILL_RTOL * abs(first) for v in steps):
        return (f"{STILL_WORDS}: {term} stayed within {STILL_RTOL:g} of its start value ({name} = {first:.3e}) in "
                f"{len(steps)} step(s)")
    if len(losses) > 1 and best_step == 0:
        added = f" (the objective adds {' and '.join(others)} to it, whose pull its steps followed)" if others else ""
        return f"{term} never went below its start value ({name} = {first:.3e}) in {len(losses) - 1} step(s){added}"
    return None


def message_unreadable(m: Mapping) -> bool:
    """Whether every value of a run's message is NaN or infinite (metrics.json's ``message_nonfinite`` reaches its
    ``b``) or 0 (``message_zero``): no attack can read an image from it, so neither a stronger attack nor other
    settings would do better."""
    n, b = m.get("message_nonfinite") or 0, m.get("b") or 0
    return (bool(n) and n >= b) or m.get("message_zero") is True


#: the note in place of the failure note where every value of the message is 0 (``message_zero``)
ZERO_NOTE = ("every value of the message is 0, so it holds no image to rebuild: this run shows that the message "
             "carried nothing (how it was captured, or what the defense removed), not what an attack reads from one "
             "that carries the gradient")


def objective_failed(objective_at: dict) -> bool:
    """Whether an attack's own objective scores its reconstruction below the truth (metrics.json's
    ``objective_at``): then it prefers another image, and its objective, not its search, failed."""
    return objective_at["reconstruction"]["total"] < objective_at["truth"]["total"]


#: the parts of an attack that can fail, in the order a run that rebuilt nothing is judged (:func:`failed_kind`)
FAILED_PARTS = ("labels", "objective", "search")
#: what :func:`failed_kind` names where no budget of steps was what the run lacked: the truth does not send the
#: message, the seed search took another seed, or a prior turned NaN or infinite where the search stopped
NOT_BUDGET_KINDS = ("truth", "seed", "prior")

#: a truth whose own message lies farther than this share of the message's norm from it (``truth_residual``) did not
#: send it: examples/capture_client.py's float32 message lies 2.4e-7 from its truth; rounding a message to float16
#: (bfloat16) moves each value by at most 2^-11 (2^-8) of it, so the message by at most 4.9e-4 (3.9e-3) of its norm
TRUTH_MISFIT = 0.01


def truth_not_sent(m: Mapping) -> bool:
    """Whether a run's truth does not send its message through the attacker's model of the client (metrics.json's
    ``truth_residual`` above :data:`TRUTH_MISFIT`): the truth file, the weights, the sketch or the labels are not
    those the message was sent with, so no attack rebuilds that truth from it."""
    r = m.get("truth_residual")
    return isinstance(r, (int, float)) and not isinstance(r, bool) and r > TRUTH_MISFIT


def truth_not_sent_text(m: Mapping) -> str:
    """The sentence that says so, with the residual."""
    return (f"the truth does not send this message: its own message, with its labels, through the attacker's model "
            f"of the client lies {m['truth_residual']:.3g} of the message's norm from it, so the truth file, the "
            "weights, the sketch or the labels are not those the message was sent with (or the client applied a "
            "defense the message file does not record), and no attack rebuilds this truth from it")


def _wrong_labels(m: Mapping) -> bool:
    """Whether the run used labels it read from the message (``label_mode`` idlg), or was given with a message file
    (``given``: a data set's are the truth's), and they are not the truth's; never
    where its images do not depend on them (``labels_unused``: imprint reads them from its block whatever the
    labels), since wrong labels do not explain those."""
    acc = m.get("label_acc")
    return m.get("label_mode") in ("idlg", "given") and acc is not None and acc < 1 and not m.get("labels_unused")


def not_the_budget(m: Mapping) -> bool:
    """Whether what a run (a metrics.json dict) that was not rebuilt lacked was no budget of steps: it matched its
    message with fewer numbers than unknowns (:func:`matched_not_unique`), or :func:`failed_kind` names a cause of
    :data:`NOT_BUDGET_KINDS`."""
    return matched_not_unique(m) or failed_kind(m) in NOT_BUDGET_KINDS


def matched_not_unique(m: Mapping) -> bool:
    """Whether a run (a metrics.json dict) that was not rebuilt matched its message to the tolerance where another
    input matches as well: with fewer numbers than unknowns (``unique_by_count`` false: b < m·B), or at an image
    other than the truth (``unique`` false, whatever the rank there): no budget of steps is what it lacked."""
    return m.get("verdict") == NOT_REBUILT and m.get("stop_reason") == "tolerance" and (
        m.get("unique_by_count") is False or m.get("unique") is False)


def failed_kind(m: Mapping) -> str | None:
    """Which part of a run (a metrics.json dict) that was not rebuilt failed, one of :data:`FAILED_PARTS`; None when
    it was rebuilt, where every value of its message is 0 or not finite (:func:`message_unreadable`: no part of an
    attack can read anything from it) or nothing tells; ``truth`` where none did, since the truth does not send the
    message
    (:func:`truth_not_sent`; not one of the parts, which a sweep of a data set's batches counts).

    ``seed``: a seed search took another seed than the client's (where the run knows it), and ``prior``: the search
    stopped where a prior's value turned NaN or infinite (``prior_not_finite``): no part of the attack at its budget
    failed, and neither is one of the parts (with ``truth``, :data:`NOT_BUDGET_KINDS`).

    ``labels``: the labels it read from the message are not the truth's (``label_acc`` < 1, as a multiset), so it
    minimised an objective in which the truth, sent with its own labels, is not what it looks for.  Otherwise, from its
    objective at the truth and at its reconstruction (``objective_at``): ``objective`` when the objective scores the
    reconstruction lower (it prefers another image), ``search`` when it scores the truth lower (the search stopped
    short of a point the objective would have preferred).
    """
    if m.get("verdict") != NOT_REBUILT or message_unreadable(m):  # a message of zeros (or NaN) holds nothing to read
        return None
    if truth_not_sent(m):  # no part of the attack failed: the truth is not the message's
        return "truth"
    search = m.get("seed_search")
    if isinstance(search, dict) and search.get("found") is False:  # it attacked through another seed's R
        return "seed"
    if m.get("prior_not_finite"):  # it stopped where a prior was not finite
        return "prior"
    if _wrong_labels(m):
        return "labels"
    at = m.get("objective_at")
    if not at or at["truth"]["total"] == at["reconstruction"]["total"]:
        return None
    return "objective" if objective_failed(at) else "search"


def failed_counts(runs) -> dict[str, int]:
    """{part: how many of the runs (metrics.json dicts) failed there} for every part of :data:`FAILED_PARTS`
    (:func:`failed_kind`; runs that were rebuilt, or tell nothing, are not counted)."""
    kinds = [failed_kind(m) for m in runs]
    return {part: kinds.count(part) for part in FAILED_PARTS}


#: what a run whose defense clips, with an attacker that did not model the clip, adds to an objective that failed
CLIP_NOT_MODELLED = ("; the defense clips the update and the attacker did not model the clip, the likely cause: "
                     "--attacker-knows-clip applies the clip in the attacker's simulation (--defense clip:C=1 on "
                     "digits with 100 L-BFGS steps: 4.6 dB blind against 35.7 dB with it, docs/defenses.md), and for "
                     "a single image --objective cosine ignores a clip that only rescales its gradient")


def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` with three significant digits, or as many more (up to 12) as they need to read apart."""
    for digits in range(3, 13):
        x, y = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if x != y or a == b:
            return x, y
    return x, y


#: what a run says of its failure in place of the part that failed where a seed search (--sketch-seed-search) took
#: another seed than the client's (known where the run simulates the client)
SEED_NOT_FOUND = ("the seed search did not find the client's seed: it took seed {seed} of {of} candidates{rank}, "
                  "so the attack read the message through R of another seed, and the labels it reads and the input it "
                  "fits are both of a message the client did not send, whatever its budget (docs/attacks/"
                  "seed-search.md says where the search's statistic singles the client's seed out)")
#: what a run whose attacker did not hold the client's sketch says of its failure in place of the part that failed
SKETCH_NOT_HELD = ("the attacker did not hold the client's sketch (--sketch-unknown, without --sketch-seed-search): "
                   "it reads the message through R of another seed, so the labels it reads and the input it fits are "
                   "both of a message the client did not send, whatever the search does (--sketch-seed-search BITS "
                   "looks for the client's seed among 2^BITS)")


def _step_names(defense: str | None) -> set[str]:
    """The names of a defense spec's steps (``clip:C=1,gaussian:z=1@after_sketch`` -> clip, gaussian)."""
    return {piece.split(":")[0].split("@")[0].strip() for piece in str(defense or "").split(",")}


#: the defense steps that add noise
NOISE_STEPS = {"gaussian", "laplace"}


def adds_noise(defense: str | None) -> bool:
    """Whether a defense spec has a noise step (:data:`NOISE_STEPS`), by its steps' names."""
    return bool(_step_names(defense) & NOISE_STEPS)


def _error_words(m: Mapping) -> str:
    """What a run's ``noise_distortion`` measures, by the names of the steps of its ``defense`` spec: its noise, its
    stochastic rounding's error (``quantize``), or both."""
    names = _step_names(m.get("defense"))
    noise, rounding = bool(names & NOISE_STEPS), "quantize" in names
    if rounding:
        return "noise and stochastic rounding's error are" if noise else "stochastic rounding's error is"
    return "noise is"


def failed_part(m: Mapping, clip_blind: bool = False, sketch_blind: bool = False) -> str | None:
    """The sentence that says which part of a run (a metrics.json dict) that rebuilt nothing failed
    (:func:`failed_kind`), with the numbers that show it; None when nothing tells.

    Where the objective scores the reconstruction below the truth the terms that do are named (most often a prior
    the truth does not satisfy): a longer search for its minimum is not a search for the truth.  ``clip_blind``:
    the run's defense clips and the attacker was not told (``attacker_knows_clip`` false), so its model of the
    message is not the client's; such an objective failure names the clip and the options that model it
    (:data:`CLIP_NOT_MODELLED`); where the defense also adds noise (``noise_distortion``), the noise is named first
    and the clip as a cause too.  The two scores carry the digits they need to read apart.  ``sketch_blind``: the
    attacker did not hold the client's sketch (:func:`leakattack.attacks.seed_search.sketch_not_held`), which is then
    the cause named (:data:`SKETCH_NOT_HELD`), not the labels or the search it led astray.
    """
    kind = failed_kind(m)
    if sketch_blind and kind is not None:
        return SKETCH_NOT_HELD
    if kind == "seed":
        search = m["seed_search"]
        rank = search.get("true_seed_rank")
        return SEED_NOT_FOUND.format(seed=search.get("found_seed"), of=search.get("candidates"),
                                     rank=f" (the client's ranked {rank + 1})" if isinstance(rank, int) else "")
    if kind == "prior":  # no step size mends a prior that is not finite
        return (f"the search stopped where the {m['prior_not_finite']} prior's value turned NaN or infinite, which "
                "no step size or budget mends: that prior is not finite at every image the search may reach (leave "
                "it out, or mend it)")
    if kind == "truth":
        return truth_not_sent_text(m)
    if kind == "labels" and m.get("label_mode") == "given":
        return (f"the labels the message file gives are not the truth file's (label accuracy {m['label_acc']:.2f}): "
                "with them the truth does not send this message, so no search finds it; the message's labels or the "
                "truth file are not the client's")
    if kind == "labels":
        noise = m.get("noise_distortion")
        # the rules read the labels through the noise, whether a clip before it is told or not
        if isinstance(noise, (int, float)) and noise > 0:
            return (f"the labels the attack read from the message are not the truth's (label accuracy "
                    f"{m['label_acc']:.2f}): the defense's {_error_words(m)} {noise:.3g} times the norm of the message "
                    "it is added to, and the label rules read the labels through it, so the labels failed before the "
                    "search did (--labels given runs the attack with the true labels, through the same noise)")
        said = (f"the labels the attack read from the message are not the truth's (label accuracy "
                f"{m['label_acc']:.2f}): with them the truth does not send this message, so the label reading failed "
                "before the search did (--labels given runs the attack with the true labels)")
        if clip_blind:  # the label rules fit a clip's unknown factor only where they are told of the clip
            said += ("; the defense clips the update and the attacker did not model the clip: with "
                     "--attacker-knows-clip the label rules fit the factor by which it shrank the message "
                     "(docs/attacks/labels.md#a-clipped-message)")
        return said
    if kind is None:
        return None
    t, r = m["objective_at"]["truth"], m["objective_at"]["reconstruction"]
    if kind == "objective":
        why = ["{} {} against {}".format(name, *_apart(r[name], t[name])) for name in t
               if name != "total" and r[name] < t[name]]
        noise = m.get("noise_distortion")
        noisy = isinstance(noise, (int, float)) and noise > 0
        said = ("the attack's own objective scores this reconstruction below the truth ({} against {}; {}): it "
                "prefers an image other than the truth, so a longer search for its minimum is not a search for the "
                "truth").format(*_apart(r["total"], t["total"]), ", ".join(why))
        if noisy:
            said += (f"; the defense's {_error_words(m)} {noise:.3g} times the norm of the message it is added to, "
                     "and the truth's score holds all of it where an image whose message fits part of it scores lower")
        if clip_blind:
            said += CLIP_NOT_MODELLED.replace("the likely cause", "a cause too") if noisy else CLIP_NOT_MODELLED
        return said
    if m.get("stop_reason") == "tolerance" and m.get("unique") is False:  # matched, and so does another image
        return (f"the reconstruction matches the message to the attack's tolerance ({r['total']:.3g}, the truth "
                f"{t['total']:.3g}) and is not the only input that does (not unique): the message does not single out "
                "the truth, so more steps or starts look for a match, not for it; an image prior (--prior tv) chooses "
                "among the matches")
    added = [name for name in t if name not in ("total", "match")]
    # the summary line prints the matching term alone: where the objective adds terms, both are said
    parts = (f"; the matching term plus {' and '.join(added)}, the matching term alone {t['match']:.3g} against "
             f"{r['match']:.3g}") if added and "match" in t and "match" in r else ""
    scores = (f"the attack's own objective scores the truth lower than this reconstruction ({t['total']:.3g} against "
              f"{r['total']:.3g}{parts})")
    if m.get("stop_reason") == "diverged":  # more steps from where it diverged diverge again
        return (f"{scores}: the search stopped short where it diverged (its objective turned NaN or infinite), so "
                "more steps at this step size diverge again; a smaller --lr may get closer")
    if m.get("stop_reason") not in HALTED and STILL_WORDS in str(m.get("nothing_attacked")):
        # its steps were too small to move it (--lr 1e-12): more of them stay where it started
        return f"{scores}: {STILL_WORDS}; a larger --lr may move it"
    if m.get("attacked") is False and m.get("stop_reason") not in HALTED:
        # it took its steps and never went below its start: more of the same steps stay there
        return (f"{scores}: the search stopped short without going below its start; a smaller --lr, or more steps "
                "or starts, may get closer")
    return f"{scores}: the search stopped short, and more steps or starts may get closer"


def closed_forms_line(names: list[str], changed: str = "") -> str:
    """The sentence that names the closed-form attacks that accept a failed run's message (``closed_forms``);
    ``changed``: what keeps the message from being the exact gradient of one step, which such an attack reads it as
    (:func:`leakattack.attacks.recipes.inexact_words`; "" for nothing)."""
    many = len(names) > 1
    caveat = (f"; {'they read' if many else 'it reads'} the message as the exact gradient of one step, which it is "
              f"not here ({changed}), so what comes back may be only approximate") if changed else ""
    return (("closed-form attacks also accept" if many else "a closed-form attack also accepts")
            + " this message: " + ", ".join(f"--attack {n}" for n in names) + f" (docs/attack.md){caveat}")


def label_choice_line(c: dict) -> str:
    """How the labels were chosen between differing readings, in one line."""
    readings = ", ".join(f"{rule} {labels}" for rule, labels in c["readings"].items())
    read = f"the rules read different labels ({readings})"
    if "candidates" in c:  # one example's head gradient within the sketch noise: the first classes were run too
        read = (f"the head's gradient is within the sketch noise (its signal {c['head_signal']:.2g} times the "
                f"noise's) and the rules read {readings}, so {len(c['candidates'])} classes in magnitude's order were "
                "compared")
    if c.get("interrupted"):
        return (f"labels: {read}; Ctrl-C stopped the short runs that compare "
                f"them, so {c['chosen']} was kept from unfinished runs")
    ran = c.get("probe_steps_run") or [c["probe_steps"]] * len(c["probe_losses"])
    if c.get("compared_at") == 0 and not any(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v)
                                             for v in c["probe_losses"]):  # NaN, or null as metrics.json stores it
        return (f"labels: {read}; the short runs that compare them found no finite objective to step on (a message "
                f"of NaN or infinite values), so {c['chosen']}, the reading of the most rules, was kept")
    if c.get("compared_at") == 0 and not c.get("matched"):  # a run that met the tolerance at its start: below
        idle = sum(n == 0 for n in ran)
        who = ("the short runs that compare them took no step" if idle == len(ran) else
               f"{idle} of the {len(ran)} short runs that compare them took no step "
               f"({', '.join(map(str, ran))} steps run)")
        limit = " within their shares of the time limit" if c.get("probe_time_limit") is not False else ""
        return (f"labels: {read}; {who}{limit}, so {c['chosen']}, the reading of the most rules, was kept")
    uneven = "compared_at" in c and len(set(ran)) > 1  # the runs were compared where all of them had been
    if all(n == c["probe_steps"] for n in ran):
        each = f"a {c['probe_steps']}-step run with each"
    else:
        each = f"a run of at most {c['probe_steps']} steps with each ({', '.join(map(str, ran))} steps run)"
    runs = each + (f", compared after {c['compared_at']} step{'s' if c['compared_at'] > 1 else ''}," if uneven
                   else "")
    losses = sorted(c["probe_compared"] if uneven else c["probe_losses"])
    low, high = _apart(losses[0], losses[1]) if len(losses) > 1 else (f"{losses[0]:.3g}", "")  # read apart
    if c.get("undecided"):
        which = ("magnitude's reading, as pooled's is the class the model gives random probes"
                 if c["readings"]["pooled"] == [c["probes_class"]] else "pooled's reading")
        return (f"labels: {read}; {runs} matched the message with no class {c['decisive']:g} times as well as with "
                f"every other (loss {low} against {high}), so {which}, {c['chosen']}, was kept")
    if c.get("matched"):  # runs that met the attack's tolerance: each found an input that sends the message
        n = c["matched"]  # compared by the tolerance, not at a step: ``each`` without the step compared at
        if n == 1:
            return (f"labels: {read}; of {each}, only the run with {c['chosen']} matched the message to the attack's "
                    "tolerance, so it was kept")
        gave = [rule for rule, labels in c["readings"].items() if labels == c["chosen"]]
        why = ("the reading of the most rules among those" if len(gave) > 1 else
               f"{gave[0]}'s, the first rule's reading among those, as no two rules gave the same")
        some = f"{'all ' if n == len(c['probe_losses']) else ''}{n} of them"
        return (f"labels: {read}; {each} matched the message to the attack's tolerance with {some} (an input with "
                f"each of those readings sends it), so {c['chosen']}, {why}, was kept")
    if c.get("tied"):
        return (f"labels: {read}; {runs} matched the message equally well with "
                f"{c['tied']} of them (loss {losses[0]:.3g}), so {c['chosen']}, the reading of the most rules among "
                "those, was kept")
    return f"labels: {read}; {runs} matched the message best with {c['chosen']} (loss {low} against {high})"


__all__ = ["SEED_NOT_FOUND", "matched_not_unique", "not_the_budget", "NOT_BUDGET_KINDS",
           "VERDICT_PSNR_MARGIN_DB", "VERDICT_SSIM_MARGIN", "SAME_IMAGE_SSIM", "FAINT_SSIM", "REBUILT", "NOT_REBUILT",
           "BASELINES", "verdict", "judge", "verdict_each", "baselines_each", "image_scores", "rebuilt_images",
           "images_words", "faint_words",
           "images_note", "image_verdicts", "batch_images", "batch_images_words", "short_metric", "one_metric_ahead",
           "ahead_words",
           "why_not_rebuilt", "baseline_words", "CLIP_NOT_MODELLED",
           "nothing_attacked", "failed_part", "message_unreadable", "ZERO_NOTE", "TRUTH_MISFIT", "truth_not_sent",
           "truth_not_sent_text", "adds_noise",
           "objective_failed", "failed_kind", "failed_counts",
           "closed_forms_line", "label_choice_line",
           "FAILED_PARTS"]
