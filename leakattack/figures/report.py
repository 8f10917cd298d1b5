"""An audit report: one self-contained HTML file built from run folders and sweep folders (stored files only).

Every image is inlined as a base64 ``data:`` URI and the style sheet is inline,
so the file opens anywhere, offline, and refers to nothing outside itself: no
script, no font, no link.  Each item (a run folder or a sweep folder) opens with
its headline: *rebuilt*, or *not rebuilt at this budget*, which is a failure of
that attack and never evidence of privacy.  A run shows its setting (victim,
d, b, sketch, defense, threat model, ε), its reconstruction beside the truth
with per-image PSNR/SSIM, its baselines and verdict and the machine it ran on;
a sweep shows its summary table, the figures it drew, and a grid of its
reconstructions.  Keys that older folders lack (the verdict and baselines of
results stored before they existed) read "not recorded".
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import functools
import html
import io
import json
import math
import re
from pathlib import Path

import numpy as np
from PIL import Image

from defenses import DefenseError
from defenses import build as build_defense
from defenses.accounting.analysis import paper_epsilon_holds

from ..attacks import attack_class, list_attacks
from ..attacks.recipes import next_settings
from ..constraints import duration_seconds
from ..errors import UserError, ratio_text
from ..metrics import (
    NOT_REBUILT,
    REBUILT,
    MetricsError,
    RunMetrics,
    closed_forms_line,
    failed_counts,
    failed_kind,
    failed_part,
    identified_line,
)
from ..metrics.identify import SCORES
from ..rebuilt import (
    FAINT_SSIM,
    ahead_words,
    batch_images,
    batch_images_words,
    faint_words,
    image_scores,
    image_verdicts,
    images_note,
    images_words,
    message_unreadable,
    why_not_rebuilt,
)
from ..rebuilt import verdict as verdict_of
from ..results import (
    FAILED_COLUMNS,
    REPEAT_KEYS,
    checked_points,
    default_strength,
    folder_kind,
    group_settings,
    is_number,
    load_records,
    load_tensors,
    quoted,
    read_object,
    series_label,
    series_of,
    summarize,
    unplanned,
)
from .common import to_hwc
from .sweep import MAX_GRID_BLOCKS, SWEEP_FIGURES, context, first_image, grid_series, with_grid_values

#: the grid of a sweep's reconstructions shows at most this many images (columns) and strengths (rows) per block
MAX_GRID_COLUMNS = 8
MAX_GRID_ROWS = 12
#: at most this many images of one run get a row in its per-image table
MAX_IMAGE_ROWS = 64
#: the sweep's d, b row lists at most this many sketch sizes b of one d, else their range
MAX_LISTED = 12
#: what a reconstruction that is not rebuilt means, said wherever one is reported
FAILURE_NOTE = "a failure of this attack, not evidence of privacy"
#: in its place where every value of the message is NaN or infinite (:func:`leakattack.rebuilt.message_unreadable`)
UNREADABLE_NOTE = "every value of the message is NaN or infinite, and no attack can read anything from it"
NOT_RECORDED = "not recorded"
#: the start baseline's row of a run whose attack has no start (a closed-form attack)
NO_START = "none: a closed-form attack has no start"
#: summary.csv metrics, by stem, that read ∞ where a defended setting's record says there is no DP guarantee
INFINITE_WITHOUT_GUARANTEE = ("epsilon", "epsilon_paper", "utility_epsilon", "utility_epsilon_paper")
#: summary.csv metrics, by stem, of the paper's formula: a DP guarantee only where its conditions hold
#: (:func:`defenses.accounting.analysis.paper_epsilon_holds`), marked :data:`NOT_A_BOUND_MARK` elsewhere
PAPER_EPSILONS = ("epsilon_paper", "utility_epsilon_paper")
NOT_A_BOUND_MARK = "†"
#: the legend of the mark
NOT_A_BOUND_NOTE = (f"{NOT_A_BOUND_MARK} not a DP bound: the paper's ε, √K·ε̂ over K steps (Lemma H.7, then Theorem "
                    "6.2), is a guarantee only where ε̂ < 1/√K, that is where it is below 1 (docs/defenses.md, "
                    "Accounting).")
#: how a score against the truth that is not finite reads (a run stores it as null: leakattack.jsonable)
NOT_A_NUMBER = "not a number"
#: the keys every run's metrics.json has held since the first one: a file without one of them is not a run's metrics
RUN_REQUIRED = ("psnr", "ssim", "iterations", "stop_reason", "d", "b")
#: metrics.json keys by the type RunMetrics declares for them
_TYPES = {f.name: str(f.type) for f in dataclasses.fields(RunMetrics)}
#: metrics.json keys that hold a number or null (a score that is not finite is stored as null); the last three are a
#: defended run's (leakattack.utility.privacy_metrics), which RunMetrics keeps among its extra keys
RUN_NUMBERS = tuple(k for k, t in _TYPES.items() if t in ("float", "float | None")) + ("epsilon", "delta",
                                                                                         "utility_acc")
#: metrics.json keys that hold a whole number or null
RUN_COUNTS = tuple(k for k, t in _TYPES.items() if t in ("int", "int | None"))
#: metrics.json keys that hold a list of numbers (null where one is not finite)
RUN_NUMBER_LISTS = tuple(k for k, t in _TYPES.items() if t == "list[float | None]")
#: summary.csv metrics, by stem, as table headings
METRIC_NAMES = {"psnr": "PSNR (dB)", "ssim": "SSIM", "mse": "MSE", "label_acc": "label acc.",
                "utility_acc": "test acc. (utility)", "epsilon": "ε", "epsilon_paper": "ε (paper)",
                "utility_epsilon": "ε of the training (utility)", "utility_epsilon_paper": "ε of the training (paper)",
                "baseline_psnr": "baseline PSNR (dB)", "baseline_ssim": "baseline SSIM", "lpips": "LPIPS",
                "iip": "identified (IIP, pixels)", "iip_features": "identified (IIP, features)"}
#: summary.csv metrics, by stem: (digits, format) of their means
METRIC_FORMAT = {"psnr": (2, "f"), "ssim": (4, "f"), "label_acc": (3, "f"), "utility_acc": (3, "f"),
                 "baseline_psnr": (2, "f"), "baseline_ssim": (4, "f"), "lpips": (4, "f"), "iip": (2, "f"),
                 "iip_features": (2, "f")}
#: the label modes of the threat model, in words
LABELS = {"given": "labels given to the attacker",
          "idlg": "labels read from the message (the count and sign rules, docs/attacks/labels.md)",
          "dlg": "labels optimised with the images (DLG)"}
_STAMP = re.compile(r"(?:^|-)(\d{8})-(\d{6})(?:-|$)")

#: a summary table of at least this many columns is set in a smaller type (``table.num.wide``)
WIDE_COLUMNS = 17

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:0;color:#1d2430;
background:#f4f5f7;line-height:1.45}
main{max-width:1100px;margin:0 auto;padding:24px}
header.top{background:#1d2430;color:#fff;padding:20px 24px}header.top h1{margin:0 0 4px;font-size:24px}
header.top p{margin:0;color:#c8cdd6;font-size:14px}
nav{background:#fff;border-radius:8px;padding:12px 20px;margin-bottom:20px;box-shadow:0 1px 3px #0002}
nav ol{margin:6px 0;padding-left:22px}nav a{color:#1d4ed8;text-decoration:none}
section.item{background:#fff;border-radius:8px;padding:20px 24px;margin-bottom:24px;box-shadow:0 1px 3px #0002}
h2{margin:0;font-size:20px}h3{font-size:16px;margin:20px 0 8px;border-bottom:1px solid #e3e6ea;padding-bottom:4px}
h4{font-size:14px;margin:14px 0 6px}
.path{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px;color:#5b6472;margin:2px 0 10px}
.headline{font-size:17px;font-weight:600;padding:10px 14px;border-radius:6px;margin:10px 0 14px}
.headline.rebuilt{background:#fde8e8;color:#8a1c1c;border-left:6px solid #c62828}
.headline.failed{background:#eef2f7;color:#28415e;border-left:6px solid #5a7aa0}
.headline.mixed{background:#fff4e0;color:#6b4400;border-left:6px solid #d98a00}
.headline.unjudged{background:#f1f1f1;color:#3d3d3d;border-left:6px solid #9a9a9a}
.tag{display:inline-block;font-size:11px;font-weight:600;padding:1px 6px;border-radius:3px;margin-left:6px}
.tag.rebuilt{background:#fde8e8;color:#8a1c1c}.tag.failed{background:#eef2f7;color:#28415e}
.tag.mixed{background:#fff4e0;color:#6b4400}.tag.unjudged{background:#eee;color:#555}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #dde1e6;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f7f9;font-weight:600}
table.kv th{width:150px}
table.num td{text-align:right;font-variant-numeric:tabular-nums}table.num td.key{text-align:left}
table.num{font-size:12px}table.num td,table.num th{padding:4px 6px}
table.num td.key,table.num th{overflow-wrap:break-word}table.num .v{white-space:nowrap}
table.num.wide{font-size:11px}table.num.wide td,table.num.wide th{padding:3px 4px}
.scroll{overflow-x:auto}
figure{margin:10px 0}figure img{max-width:100%;height:auto;border:1px solid #e3e6ea}
figcaption{font-size:12px;color:#5b6472;margin-top:4px}
.pair{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.note{font-size:13px;color:#5b6472}
.verdict{font-size:14px;margin:6px 0}
.blocks{display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start}
table.grid td,table.grid th{text-align:center;padding:4px;vertical-align:middle}table.grid th{white-space:nowrap}
table.grid img{image-rendering:pixelated;display:block;margin:0 auto;border:1px solid #ccd}
table.grid .cap{font-size:11px;color:#333;white-space:nowrap}
"""


def check_folders(paths) -> list[tuple[str, Path]]:
    """(kind, folder) of each path, refused in one sentence when one is neither a run nor a sweep folder; a folder
    given twice (or spelt two ways, or through a link) appears once, where it was first given."""
    out, seen = [], set()
    if any(not str(p).strip() for p in paths):  # Path("") is ".": an empty argument names no folder
        raise UserError("a run or sweep folder to report must be named, got an empty string")
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"'{p}' does not exist")
        kind = folder_kind(p)
        if kind is None and p.is_file():
            raise UserError(f"'{p}' is a file: name the run folder (holding metrics.json) or the sweep folder (holding "
                            "results.jsonl) it belongs to")
        if kind is None:
            raise UserError(f"'{p}' is neither a run folder (holding metrics.json) nor a sweep folder (holding "
                            "results.jsonl)")
        if p.resolve() not in seen:
            seen.add(p.resolve())
            out.append((kind, p))
    return out


def build_report(paths, title: str = "Gradient-inversion audit report", generator: str = "leakattack",
                 built: str = "") -> str:
    """The report of the given run and sweep folders, as the text of one self-contained HTML file."""
    items = check_folders(paths)
    sections, toc = [], []
    for i, (kind, folder) in enumerate(items, 1):
        anchor = f"item-{i}"
        body, head, cls = (_run_section if kind == "run" else _sweep_section)(folder, anchor)
        sections.append(body)
        toc.append(f'<li><a href="#{anchor}">{_e(kind)}: {_e(_name(folder))}</a>'
                   f'<span class="tag {cls}">{_e(head)}</span></li>')
    runs = sum(k == "run" for k, _ in items)
    counts = f"{runs} run{'s' if runs != 1 else ''}, {len(items) - runs} sweep{'s' if len(items) - runs != 1 else ''}"
    sub = " · ".join(t for t in (generator, f"built {built}" if built else "", counts) if t)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f'<header class="top"><h1>{_e(title)}</h1><p>{_e(sub)}</p></header><main>',
        '<nav><strong>Contents</strong><ol>' + "".join(toc) + "</ol>"
        '<p class="note">A reconstruction counts as <em>rebuilt</em> only when it clearly beats what needs no '
        "message at all: the attack's own start and the data set's mean image. <em>Not rebuilt</em> is "
        f"{FAILURE_NOTE}: a stronger attack or a larger budget may still succeed.</p></nav>",
        *sections, "</main></body></html>", ""])


# ---------------------------------------------------------------- run folders

def _run_section(folder: Path, anchor: str) -> tuple[str, str, str]:
    metrics = run_metrics(folder / "metrics.json")
    config = read_object(folder / "config.json") if (folder / "config.json").is_file() else {}
    run, derived, env = config.get("run", {}), config.get("derived", {}), config.get("environment", {})
    head, cls, sentence = _run_headline(metrics, clip_blind=_clips(run.get("defense") or metrics.defense)
                                        and not run.get("attacker_knows_clip"), run=run, derived=derived)
    parts = [f'<section class="item run" id="{anchor}"><h2>Run: {_e(_name(folder))}</h2>',
             f'<p class="path">{_e(folder)}</p>', f'<p class="headline {cls}">{_e(sentence)}</p>']
    parts.append("<h3>Setting</h3>" + _kv(_run_setting(run, derived, metrics)) if config else
                 '<h3>Setting</h3><p class="note">config.json not found: the setting is not recorded.</p>')
    parts.append("<h3>Reconstruction</h3>")
    figs = []
    attack_cls = _attack_class(run.get("attack"))
    closed = attack_cls is not None and attack_cls.closed_form
    if (folder / "reconstruction.png").is_file():
        what = ("the reconstructed images (no true images to compare with)" if metrics.truth is False else
                "truth | attack's start | the image the attack returned, its start itself: nothing was attacked"
                if metrics.attacked is False else
                "truth | reconstruction, per-image PSNR and SSIM (a closed-form attack has no start)"
                if closed else
                "truth | attack's start | reconstruction, per-image PSNR and SSIM")
        figs.append(_figure(folder / "reconstruction.png", what))
    unstepped = closed and metrics.iterations == 0  # its figure holds one value: "no iterations to draw"
    if (folder / "convergence.png").is_file() and not unstepped:
        figs.append(_figure(folder / "convergence.png", "the closed-form attack's residual at each of its "
                            "iterations" if closed else "the minimised loss against the step", width=420))
    parts.append(f'<div class="pair">{"".join(figs)}</div>' if figs else
                 '<p class="note">reconstruction.png not found.</p>')
    if unstepped:
        parts.append('<p class="note">No loss curve: the closed-form attack took no iterative step.</p>')
    parts.append(_per_image(metrics))
    parts.append("<h3>Verdict and baselines</h3>" + _run_verdict(metrics))
    parts.append("<h3>Machine and time</h3>" + _kv(_machine(env, metrics, folder)))
    parts.append("</section>")
    return "\n".join(parts), head, cls


def run_metrics(path: Path) -> RunMetrics:
    """A run's metrics.json as its record, refused in one sentence naming the file and the key when it lacks a key
    every run writes (:data:`RUN_REQUIRED`) or holds a metric that is not a number; a score that is not finite
    (NaN) reads as null, as the run itself stores it."""
    data = read_object(path)
    missing = [k for k in RUN_REQUIRED if k not in data]
    if missing:
        raise UserError(f"'{path}' has no {_or(missing)}, which every run's metrics.json holds")
    for key in RUN_NUMBERS + RUN_COUNTS:
        v = data.get(key)
        if v is not None and not is_number(v):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a number")
        if key in RUN_COUNTS and v is not None and not isinstance(v, int):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a whole number")
    for key in RUN_NUMBER_LISTS:
        v = data.get(key)
        if v is not None and not (isinstance(v, list) and all(e is None or is_number(e) for e in v)):
            raise UserError(f"'{path}' holds {key} = {quoted(v)}, not a list of numbers")
    for key in ("stop_reason", "message"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise UserError(f"'{path}' holds {key} = {quoted(data[key])}, not a text")
    if data.get("verdict") not in (None, REBUILT, NOT_REBUILT):
        raise UserError(f"'{path}' holds verdict = {quoted(data['verdict'])}, neither '{REBUILT}' nor '{NOT_REBUILT}'")
    clean = {k: (None if k in RUN_NUMBERS and is_number(v) and not math.isfinite(v) else v) for k, v in data.items()}
    for key in RUN_NUMBER_LISTS:
        each = clean.get(key)
        if isinstance(each, list):
            clean[key] = [None if e is not None and not math.isfinite(e) else e for e in each]
    try:
        return RunMetrics.from_dict(clean)
    except MetricsError as err:
        raise UserError(f"'{path}' cannot be read: {err}") from None


def _run_scores(m: RunMetrics) -> str:
    """The reconstruction's PSNR and SSIM as a headline quotes them: a score that is not finite (stored as null)
    reads "not a number", followed by why the attack stopped."""
    psnr = f"{_num(m.psnr, 1)} dB" if m.psnr is not None else NOT_A_NUMBER
    ssim = _num(m.ssim, 3) if m.ssim is not None else NOT_A_NUMBER
    text = f"PSNR {psnr}, SSIM {ssim}"
    if m.psnr is None or m.ssim is None:
        text += f" (stop reason {m.stop_reason or NOT_RECORDED}{': ' + m.message if m.message else ''})"
    return text


def _run_headline(m: RunMetrics, clip_blind: bool = False, run: dict | None = None,
                  derived: dict | None = None) -> tuple[str, str, str]:
    """(short tag, CSS class, the headline sentence) of a run; ``clip_blind``: its defense clips and the attacker
    did not model the clip (:func:`leakattack.rebuilt.failed_part`); ``run``, ``derived``: its config.json's
    sections, from which a run that was not rebuilt names the measured settings to try next
    (:func:`leakattack.attacks.recipes.next_settings`)."""
    if m.truth is False:
        return "no truth", "unjudged", "No verdict: the run has no true images to compare its reconstruction with."
    record = m.to_dict()
    images = images_words(record)  # a batch whose images on their own disagree with its verdict
    counted = f" ({images})" if images else ""
    note = images_note(record) if images else None
    named = f" {note[:1].upper()}{note[1:]}." if note else ""
    if m.verdict == REBUILT:
        faint = (f" Faint: its SSIM is below {FAINT_SSIM:g}, about where images become barely visible; the "
                 "reconstruction shows how much of the image came back.") if faint_words(record) else ""
        one = len(m.psnr_each or m.labels_true or [0, 0]) == 1  # a batch of one image
        return f"rebuilt{counted}", "rebuilt", (f"Rebuilt: the attack reconstructed the private "
                                                f"image{'' if one else 's'} from the message ({_run_scores(m)})."
                                                f"{named}{faint}")
    if m.verdict == NOT_REBUILT:
        part = failed_part(record, clip_blind=clip_blind)
        tips = next_settings(failed_kind(record), run or {}, derived or {}, record)
        told = [identified_line(record), part, *tips, closed_forms_line(m.closed_forms) if m.closed_forms else None]
        which = "".join(f" {t[:1].upper()}{t[1:]}." for t in told if t)
        if m.nothing_attacked or m.attacked is False:
            note = UNREADABLE_NOTE if message_unreadable(record) else FAILURE_NOTE
            return "nothing attacked", "failed", (f"Nothing was attacked ({note}): "
                                                  f"{m.nothing_attacked or NOT_RECORDED}.{which}")
        ahead = why_not_rebuilt(record)[1]
        which = (f" {ahead[:1].upper()}{ahead[1:]}." if ahead else "") + which
        return f"not rebuilt{counted}", "failed", (f"Not rebuilt at this budget ({FAILURE_NOTE}): "
                                                   f"{_run_scores(m)}.{named}{which}")
    return "verdict not recorded", "unjudged", (
        f"Verdict not recorded: this run folder was written before runs recorded one ({_run_scores(m)}; compare "
        "with the baselines of newer runs).")


def _run_setting(run: dict, derived: dict, m: RunMetrics) -> list[tuple[str, str]]:
    model = str(run.get("model", NOT_RECORDED))
    if run.get("model_params"):
        model += " (" + ", ".join(f"{k}={v}" for k, v in run["model_params"].items()) + ")"
    shape = derived.get("in_shape")
    victim = f"{model} on {derived.get('dataset') or run.get('dataset') or NOT_RECORDED}"
    if shape:
        victim += f" ({'×'.join(map(str, shape))}"
        victim += f", {derived['num_classes']} classes)" if derived.get("num_classes") else ")"
    if run.get("data_root") and not run.get("message"):
        victim += f" from {run['data_root']}"
    weights = run.get("weights") or (f"random initial weights (model seed {derived.get('model_seed')})"
                                     if derived.get("model_seed") is not None else "random initial weights")
    rows = [("victim", f"{victim}; {weights}")]
    if run.get("protocol"):
        message = (f"protocol {run['protocol']}, round {run.get('protocol_round')}, client "
                   f"{run.get('protocol_client')}")
    elif run.get("message"):
        message = f"captured message file {run['message']}"
    else:
        draw, first = run.get("batch_draw", "consecutive"), run.get("image_index", 0)
        which = {"class": f"image index {first} and the next images of its class",
                 "random": f"image index {first} and others drawn at random"}.get(draw, f"first image index {first}")
        message = f"one gradient of a batch of {run.get('batch_size', 1)} ({which})"
    rows.append(("message", message))
    d, b = derived.get("d", m.d), derived.get("b", m.b)
    rows.append(("d, b", f"d = {_int(d)} weights, b = {_int(b)} numbers sent" +
                 (f" (b/d = {ratio_text(b, d)})" if isinstance(d, int) and isinstance(b, int) and d else "")))
    described = derived.get("sketch") or {}
    # a captured message describes itself (its kind: gradient or update) and its sketch under ``encoder``
    sketch = (described.get("encoder") or described).get("kind") or run.get("sketch") or NOT_RECORDED
    seed = f"seed {derived.get('sketch_seed', NOT_RECORDED)}"
    if run.get("protocol"):  # each protocol draws round t's R_t from its shared seed in its own way
        seed = f"R_t of round {run.get('protocol_round', NOT_RECORDED)} from the protocol's shared seed"
    rows.append(("sketch", "none (the true gradient)" if sketch == "none" else f"{sketch}, {seed}"))
    rows.append(("defense", run.get("defense") or m.defense or "none"))
    rows.append(("threat model", _threat(run, sketch)))
    if m.recorded("epsilon"):
        rows.append(("ε", _run_epsilon(m)))
    if m.utility_acc is not None:
        steps, eps = m.extra.get("utility_steps"), m.extra.get("utility_epsilon")
        over = f" over its {steps} training steps" if steps else ""
        spent = f"; ε = {_num(eps, 3, 'g')} at δ = {_num(m.delta, 3, 'g')}{over}" if eps is not None else \
            ("; no DP guarantee for the training" if m.defense else "")
        rows.append(("utility", f"test accuracy {_num(m.utility_acc, 3)} when training under the defense{spent}"))
    opt = [str(derived.get("optimizer") or run.get("optimizer") or ""),
           f"objective {derived.get('objective') or run.get('objective')}" if derived.get("objective") else "",
           _budget(run, derived),
           f"{run.get('restarts', 1)} start{'s' if run.get('restarts', 1) != 1 else ''}"
           + (f" ({(m.restart_stops or []).count('pruned')} pruned by halving)" if run.get("prune_restarts") else "")]
    cls = _attack_class(run.get("attack"))
    params = run.get("attack_params") or {}
    if cls is not None:  # with the declared defaults of the options not given
        params = {p.name: params.get(p.name, p.default) for p in cls.options}
    own = ", ".join(f"{k} {v}" for k, v in params.items())
    if cls is not None and cls.closed_form:  # no optimiser, recipe or budget
        rows.append(("attack", f"{run['attack']}, in closed form" + (f": {own}" if own else "")))
    else:
        recipe = f", recipe {derived['recipe']}" if derived.get("recipe") else ""
        rows.append(("attack", f"{run.get('attack', NOT_RECORDED)}{recipe}: " + ", ".join(t for t in opt + [own]
                                                                                         if t)))
    stop = f"{_int(m.iterations)} iterations, stop reason {m.stop_reason or NOT_RECORDED}"
    if m.message:
        stop += f": {m.message}"
    rows.append(("stopped", stop))
    return rows


def _run_epsilon(m: RunMetrics) -> str:
    """The ε row of a defended run: the accountant's ε of the one message at its δ (a Laplace mechanism's pure ε:
    "pure DP, δ = 0", as the run's summary line says), and the paper's ε where the run records one, marked
    :data:`NOT_A_BOUND_MARK` and explained where it lies outside the paper's conditions, as the sweep table does."""
    if m.epsilon is None:
        return f"ε = ∞: {m.privacy_note or 'no DP guarantee'}"
    at = ", pure DP (δ = 0)," if m.delta == 0 else f" at δ = {_num(m.delta, 3, 'g')}"
    text = f"ε = {_num(m.epsilon, 3, 'g')}{at} for this one message"
    paper, paper_delta = m.extra.get("epsilon_paper"), m.extra.get("delta_paper")
    if isinstance(paper, (int, float)) and is_number(paper) and math.isfinite(paper):
        text += f"; the paper's ε = {_num(paper, 3, 'g')}" + (
            f" at δ = {_num(paper_delta, 3, 'g')}" if is_number(paper_delta) else "")
        if not paper_epsilon_holds(paper):
            text += f" {NOT_A_BOUND_NOTE}"
    return text


def _budget(run: dict, derived: dict) -> str:
    """The attack's budget: its iterations, and its time limit where it had one (``time_limit`` of the derived
    settings, seconds or null; the run's own setting where an older config.json has none), whichever came first
    (stop reason time-limit); "" when neither is recorded."""
    iterations = derived.get("iterations") or run.get("iterations")
    limit = duration_seconds(derived["time_limit"] if "time_limit" in derived else run.get("time_limit"))
    steps = f"{_int(iterations)} iterations" if iterations else ""
    if limit is None:
        return f"budget {steps}" if steps else ""
    return f"budget {steps} or {_limit(limit)}, whichever came first" if steps else f"budget {_limit(limit)}"


def _limit(seconds: float) -> str:
    """A time limit as the user sets one (90s, 10m, 1h): in the largest unit that holds it whole, else in seconds
    (:func:`leakattack.errors.duration_text` rounds, as an estimate may: 90 s would read "2 min")."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g} {unit}"
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def _attack_class(name):
    """The registered attack class of ``name``, or None (an attack not registered in this process)."""
    return attack_class(name) if name in list_attacks() else None


#: the openings of the threat model's words about the sketch (:func:`_threat`)
_SKETCH_WORDS = ("sketch seed", "seed searched")


def _threat(run: dict, sketch: str) -> str:
    words = [LABELS.get(run.get("label_mode", ""), f"label mode {run.get('label_mode', NOT_RECORDED)}")]
    cls = _attack_class(run.get("attack"))
    if cls is not None and cls.modifies_model:
        words.insert(0, "a malicious server: it changed the model it sent before the client computed its gradient")
    if sketch != "none":
        if run.get("sketch_known", True):
            words.append("sketch seed known")
        else:
            words.append("sketch seed not known (the attacker draws R from another seed)")
        if run.get("sketch_seed_search"):
            words.append(f"seed searched among {run['sketch_seed_search']}")
    if _clips(run.get("defense")):
        words.append("clip threshold known" if run.get("attacker_knows_clip") else "clip threshold not known")
    return "; ".join(words)


def _clips(defense) -> bool:
    """Whether a stored defense holds a norm clip (``clip``, ``per_example``): what ``attacker_knows_clip`` is about."""
    return _clips_spec(defense if isinstance(defense, str) else json.dumps(defense))


@functools.lru_cache(maxsize=256)
def _clips_spec(spec: str) -> bool:
    """:func:`_clips` of one spec, as text (a sweep's points share a handful)."""
    try:
        return bool(build_defense(json.loads(spec) if spec.startswith(("[", "{")) else spec).clips().steps)
    except (DefenseError, ValueError):  # a spec this version does not know: read its words
        return "clip" in spec or "per_example" in spec


def _sweep_threat(records: list[dict]) -> str:
    """The threat model of a sweep's points: what all share, then what varies from point to point."""
    each = [_threat(r["params"], str(r["params"].get("sketch"))).split("; ") for r in records]
    # what the attacker knows of a sketch is said of the points that have one: an unsketched point has no seed
    sketched = [e for r, e in zip(records, each) if str(r["params"].get("sketch")) != "none"]
    of_sketch = [w for w in dict.fromkeys(w for e in sketched for w in e) if w.startswith(_SKETCH_WORDS)]
    shared = [w for w in each[0] if all(w in e for e in each)]
    if len(sketched) < len(each):
        shared += [f"{w} (the points with a sketch)" for w in of_sketch if all(w in e for e in sketched)]
    varies = list(dict.fromkeys(w for e in each for w in e if w not in shared and not (
        w in of_sketch and all(w in e for e in sketched))))
    if not varies:
        return "; ".join(shared)
    return "; ".join(shared) + ("; " if shared else "") + "varying from point to point: " + " | ".join(varies)


def _per_image(m: RunMetrics) -> str:
    psnr, ssim = m.psnr_each or [], m.ssim_each or []
    if not psnr:
        return ""
    truth = m.labels_true or []
    n = len(psnr)
    # the label the attack gave the reconstruction matched to each true image (match[i]: its index in the attack's
    # order); where the run attacked nothing its start was matched, and its labels are not shown against it
    found = m.labels_attack if n > 1 and m.labels_attack and m.attacked is not False and len(m.labels_attack) == n \
        else None
    order = m.match if m.match and len(m.match) == n else list(range(n))
    rows = []
    scored = m.truth is not False  # without a truth no score was taken: null reads "–", not "not a number"

    def per_image(v):  # a list of one entry per image, or None (not recorded, or of another length: edited)
        return v if v and len(v) == n else None

    each = (per_image(m.verdict_each) or []) if n > 1 else []  # a batch's images on their own (older runs: none)
    nearer = per_image(m.nearer_each) or [None] * n
    record = m.to_dict()
    bp_each, bs_each = per_image(m.baseline_psnr_each), per_image(m.baseline_ssim_each)
    # the rank of each truth among the data set's images by distance to its reconstruction (image identifiability)
    heads = [(f"rank of its truth among {_int(m.get(f'identified{k}_among'))} by {how}", m.get(f"identified{k}_each"))
             for k, _, how in SCORES if per_image(m.get(f"identified{k}_each"))]
    ranks = [each_rank for _, each_rank in heads]
    for i, (p, s) in enumerate(zip(psnr[:MAX_IMAGE_ROWS], ssim[:MAX_IMAGE_ROWS])):
        label = truth[i] if i < len(truth) else None
        given = f"<td>{_e(found[order[i]])}</td>" if found is not None and label is not None else ""
        own = ""
        if each:  # the image's own verdict beside the better of its baselines' scores
            base = (f"{_score(bp_each[i], 2, scored)} / {_score(bs_each[i], 4, scored)}"
                    if bp_each and bs_each else NOT_RECORDED)
            shows = f" (shows image {nearer[i]})" if _shows_another(record, i, nearer[i]) else ""
            own = f"<td>{base}</td><td>{_e(each[i] + shows)}</td>"
        ranked = "".join(f"<td>{_e(_rank(r, i))}</td>" for r in ranks)
        rows.append(f"<tr><td class=key>{i}</td><td>{_e(label if label is not None else '–')}</td>{given}"
                    f"<td>{_score(p, 2, scored)}</td><td>{_score(s, 4, scored)}</td>{own}{ranked}</tr>")
    more = (f'<p class="note">{len(psnr) - MAX_IMAGE_ROWS} more images not listed; mean PSNR '
            f'{_num(m.psnr, 2)} dB.</p>' if len(psnr) > MAX_IMAGE_ROWS else "")
    acc, matched = m.label_acc, m.label_acc_matched
    # as in the summary line, the matched labels say something only where images were found: none rebuilt, none shown
    verdicts = image_verdicts(record)
    on_matched = (f"; {round(matched * n)} of {n} on the images they were matched to" if n > 1 and
                  isinstance(matched, (int, float)) and (verdicts is None or REBUILT in verdicts) else "")
    lab = (f'<p class="note">labels recovered: {_num(acc * 100, 0)}% (as a multiset){on_matched}.</p>'
           if isinstance(acc, (int, float)) else "")
    return ('<h4>Per image (in ground-truth order)</h4><div class="scroll"><table class="num"><tr><th>image</th>'
            "<th>true label</th>" + ("<th>attack's label</th>" if found is not None and truth else "")
            + "<th>PSNR (dB)</th><th>SSIM</th>"
            + ("<th>better baseline: PSNR / SSIM</th><th>verdict on its own</th>" if each else "")
            + "".join(f"<th>{_e(head)}</th>" for head, _ in heads) + "</tr>"
            + "".join(rows) + "</table></div>" + more + lab)


def _rank(ranks: list, i: int) -> str:
    """Image ``i``'s rank from an identifiability list (``1 (nearest)``), or "–" where it was not measured."""
    r = ranks[i] if i < len(ranks) else None
    return "–" if r is None else f"{r} (nearest)" if r == 1 else str(r)


def _shows_another(record: dict, i: int, j: int | None) -> bool:
    """Whether the reconstruction matched to image ``i`` is said to show image ``j`` (``nearer_each``): only where its
    own scores would count it rebuilt, as :func:`leakattack.rebuilt.images_note` says it.  Nearer in MSE is all
    ``nearer_each`` measures, and noise is nearer to some image of the batch than to the one it was matched to: a
    reconstruction that does not clear its image's baselines shows nothing to name."""
    own = image_scores(record, i) if j is not None else None
    return own is not None and verdict_of(own["psnr"], own["ssim"], own["baseline_psnr"],
                                          own["baseline_ssim"]) == REBUILT


def _run_verdict(m: RunMetrics) -> str:
    """The verdict with what decided it, the scores beside the baselines', and whether the match is unique.

    A run that attacked nothing says so first, as its summary line does, and its scores are those of the image it
    returned, its start, not of a reconstruction."""
    verdict = m.verdict
    lines = []
    idle = m.attacked is False or bool(m.nothing_attacked)
    if idle:
        note = UNREADABLE_NOTE if message_unreadable(m.to_dict()) else FAILURE_NOTE
        lines.append(f'<p class="verdict"><strong>Nothing was attacked</strong> ({_e(note)}): '
                     f"{_e(m.nothing_attacked or NOT_RECORDED)}. The attack returned its start, scored below as "
                     "what it returned: no reconstruction was made to score.</p>")
    elif verdict is None:
        lines.append(f'<p class="verdict">Verdict: {NOT_RECORDED}.</p>')
    else:
        record = m.to_dict()
        why, ahead = why_not_rebuilt(record) if verdict == NOT_REBUILT else ("", None)
        reason = f" Reason: {why}." if why and m.verdict_baseline is not None else ""
        extra = f" ({FAILURE_NOTE})" if verdict == NOT_REBUILT else ""
        more = f" {ahead[:1].upper()}{ahead[1:]}." if ahead else ""
        images = images_words(record)  # a batch whose images on their own disagree with its verdict
        # as the summary line words it: a rebuilt run's faint note beside the batch's count
        words = "; ".join(w for w in (images, faint_words(record) if verdict == REBUILT else None) if w)
        counted = f" ({words})" if words else ""
        lines.append(f'<p class="verdict"><strong>Verdict: {_e(verdict)}{_e(counted)}</strong>{_e(extra)}.'
                     f"{_e(reason)}{_e(more)}</p>")
    rows = [
        ("the image returned (its start: nothing was attacked)" if idle else "reconstruction", m.psnr, m.ssim,
         m.lpips, True),
        ("baseline: the attack's start", m.baseline_start_psnr, m.baseline_start_ssim, m.baseline_start_lpips,
         m.recorded("baseline_start_psnr")),
        (f"baseline: {m.baseline_mean_image or 'mean image'}", m.baseline_mean_psnr, m.baseline_mean_ssim,
         m.baseline_mean_lpips, m.recorded("baseline_mean_psnr")),
        ("better baseline", m.baseline_psnr, m.baseline_ssim, m.baseline_lpips, m.recorded("baseline_psnr")),
    ]
    scored = m.truth is not False  # a score against the truth stored as null is not finite
    # a closed-form attack has no data-free start, so no start to score (leakattack.experiment.judgement): its row
    # is recorded with nothing in it, which says so in words rather than with dashes
    no_start = scored and m.recorded("baseline_start_psnr") and all(
        v is None for v in (m.baseline_start_psnr, m.baseline_start_ssim, m.baseline_start_lpips))
    body = "".join(
        f"<tr><td class=key>{_e(label)}</td>" + (
            f"<td colspan=3>{_e(NO_START)}</td>" if i == 1 and no_start else
            f"<td>{_score(p, 2, i == 0 and scored)}</td><td>{_score(s, 4, i == 0 and scored)}</td>"
            f"<td>{_num(lp, 4)}</td>" if known else f"<td colspan=3>{NOT_RECORDED}</td>") + "</tr>"
        for i, (label, p, s, lp, known) in enumerate(rows))
    lines.append('<table class="num"><tr><th></th><th>PSNR (dB)</th><th>SSIM</th><th>LPIPS</th></tr>' + body +
                 "</table>")
    if m.lpips is None and m.lpips_note:
        lines.append(f'<p class="note">{_e(m.lpips_note)}</p>')
    if m.unique is not None or m.unknowns:
        lines.append(f'<p class="note">{_e(_uniqueness(m))}</p>')
    if m.iip is not None:
        lines.append(f'<p class="note">{_e(_identifiability(m))}</p>')
    return "".join(lines)


def _identifiability(m: RunMetrics) -> str:
    """How many images the reconstruction singles out of its data set, by pixel distance and (where recorded) by the
    victim's features, beside the baselines' shares, in one sentence (:mod:`leakattack.metrics.identify`)."""
    parts = []
    for suffix, how, _ in SCORES:
        if m.get(f"iip{suffix}") is None:
            continue
        each = [r for r in (m.get(f"identified{suffix}_each") or []) if r is not None]
        found = sum(r == 1 for r in each)
        base = ", ".join(f"{label} {v:.0%}" for label, v in (("the start", m.get(f"baseline_start_iip{suffix}")),
                                                            ("the mean image", m.get(f"baseline_mean_iip{suffix}")))
                         if v is not None)
        ranked = (f"the truth's rank: {each[0]}" if len(each) == 1 else
                  f"the truths' ranks: {', '.join(map(str, each))}")
        parts.append(f"by {how} among {_int(m.get(f'identified{suffix}_among'))} images of the data set, {found} of "
                     f"{len(each)} ({ranked}" + (f"; baselines: {base})" if base else ")"))
    return "Identifiability (Yin et al. 2021), images whose nearest image is their truth: " + "; ".join(parts) + "."


def _uniqueness(m: RunMetrics) -> str:
    """Whether the match is unique, in one sentence: b numbers sent beside the m·B unknowns, "fewer numbers than
    unknowns: not unique by count" where b < m·B, else what the Jacobian's rank says (``jacobian_note``)."""
    count = f"b = {_int(m.b)} numbers sent for m·B = {_int(m.unknowns)} unknowns"
    if m.unique_by_count is False or (isinstance(m.b, int) and isinstance(m.unknowns, int) and m.b < m.unknowns):
        return f"{count}: fewer numbers than unknowns: not unique by count (another input matches as well)."
    u = m.unique
    said = "unique" if u else "not unique" if u is False else "of unknown uniqueness"
    note = f" ({m.jacobian_note})" if m.jacobian_note and m.recorded("jacobian_note") else ""
    return f"{count}; the match is {said}{note}."


def _machine(env: dict, m: RunMetrics, folder: Path) -> list[tuple[str, str]]:
    rows = [("machine", _machine_text(env))]
    soft = [f"{k} {env[k]}" for k in ("leakattack", "torch", "python") if env.get(k)]
    rows.append(("software", ", ".join(soft) + (f"; {env['platform']}" if env.get("platform") else "") if soft
                 else NOT_RECORDED))
    rows.append(("time", f"attack {_seconds(m.attack_s)}, with its scores and baselines {_seconds(m.wall_s)} "
                         "(start-up and files not counted)"))
    rows.append(("written", _when(folder)))
    return rows


def _machine_text(env: dict) -> str:
    """The CPU, its SIMD capability, the threads and the device of an environment record."""
    mach = env.get("machine") or {}
    cpu = mach.get("cpu") or env.get("device_name") or NOT_RECORDED
    bits = [cpu]
    if mach.get("cpu_capability"):
        bits.append(f"SIMD {mach['cpu_capability']}")
    if mach.get("threads", env.get("threads")) is not None:
        bits.append(f"{mach.get('threads', env.get('threads'))} thread(s)")
    return ", ".join(bits) + (f" ({env['device']})" if env.get("device") else "")


def _when(folder: Path) -> str:
    hit = _STAMP.search(folder.name)
    if not hit:
        return f"{NOT_RECORDED} (the folder name carries no time stamp)"
    d, t = hit.groups()
    return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]}:{t[4:]} (from the folder name)"


# -------------------------------------------------------------- sweep folders

def _sweep_section(folder: Path, anchor: str) -> tuple[str, str, str]:
    records = checked_points(folder, load_records(folder))
    meta = read_object(folder / "sweep.json") if (folder / "sweep.json").is_file() else {}
    stored = stored_summary(folder)
    current = stored is not None and summary_matches(stored, records)
    head, cls, sentence = _sweep_headline(records, meta.get("points"))
    parts = [f'<section class="item sweep" id="{anchor}"><h2>Sweep: {_e(_name(folder))}</h2>',
             f'<p class="path">{_e(folder)}</p>', f'<p class="headline {cls}">{_e(sentence)}</p>']
    parts.append("<h3>Setting</h3>" + _kv(_sweep_setting(folder, records, meta)))
    parts.append("<h3>Summary</h3>" + _summary_table(records, meta, stored if current else None,
                                                     _summary_note(stored, records, current)))
    grid = _recon_grid(folder, records, meta)
    drawn = sorted((folder / "figures").glob("*.png")) if (folder / "figures").is_dir() else []
    shown = [n for n in SWEEP_FIGURES if (folder / "figures" / f"{n}.png").is_file()
             and not (n == "reconstruction_grid" and grid)]
    others = sorted(p.stem for p in drawn if p.stem not in SWEEP_FIGURES)
    if current and (shown or others):
        parts.append("<h3>Figures</h3>")
        for n in shown + others:
            if n == "privacy_utility":
                parts.append("<h4>Privacy–utility frontier</h4>")
            parts.append(_figure(folder / "figures" / f"{n}.png", SWEEP_FIGURES.get(n, n)))
    elif drawn:  # drawn with summary.csv, from points results.jsonl does not hold as they are now
        why = ("summary.csv, written with them, is not there to show which points they were drawn from"
               if stored is None else "they were drawn with summary.csv, which does not match results.jsonl")
        parts.append(f'<h3>Figures</h3><p class="note">The {len(drawn)} figure{"s" if len(drawn) != 1 else ""} in '
                     f"figures/ {'are' if len(drawn) != 1 else 'is'} left out: {_e(why)}; running the sweep "
                     "again with the same --out redraws them.</p>")
    if grid:
        parts.append("<h3>Reconstructions</h3>" + grid)
    parts.append("<h3>Machine and time</h3>" + _kv(_sweep_machine(records)))
    parts.append("</section>")
    return "\n".join(parts), head, cls


def _sweep_headline(records: list[dict], planned=None) -> tuple[str, str, str]:
    """(short tag, CSS class, the headline sentence) of a sweep of ``planned`` points (sweep.json's count), which
    says so when some of them have no result."""
    verdicts = [r["metrics"].get("verdict") for r in records if r["metrics"].get("verdict") is not None]
    n = len(records)
    planned = planned if isinstance(planned, int) and not isinstance(planned, bool) and planned > n else None
    left = f"{planned - n} of {planned} planned points not finished" if planned else ""
    tag = " (unfinished)" if planned else ""
    if not records:
        return "empty", "unjudged", ("No finished point: results.jsonl holds no result yet"
                                     + (f" (0 of {planned} planned points finished)." if planned else "."))
    if not verdicts:
        return "verdict not recorded" + tag, "unjudged", (
            f"Verdict not recorded: these {n} points were stored before sweeps recorded one"
            f"{f' ({left})' if left else ''}; the mean PSNR and SSIM of each setting are in the summary below.")
    k, j = sum(v == REBUILT for v in verdicts), len(verdicts)
    counts = batch_images(r["metrics"] for r in records)  # batches: their images on their own
    images, share = "", ""
    if counts is not None and counts[0] < counts[1]:
        images, share = f" ({batch_images_words(counts)})", f" ({counts[0]}/{counts[1]} images)"
    tag = share + tag
    if k == j:
        return "rebuilt" + tag, "rebuilt" if not images else "mixed", (
            f"Rebuilt at every judged point ({k} of {j} judged{'; ' + left if left else ''}){images}.")
    unfinished = f" Unfinished: {left}." if left else ""
    if k == 0:
        return "not rebuilt" + tag, "failed" if not counts or not counts[0] else "mixed", (
            f"Not rebuilt at any of the {j} judged points at this budget ({FAILURE_NOTE}){images}."
            f"{unfinished}{_failed_parts(records)}{_identified_points(records)}")
    return f"rebuilt at {k}/{j}{tag}", "mixed", (
        f"Rebuilt at {k} of {j} judged points; not rebuilt at {j - k} at this budget "
        f"({FAILURE_NOTE}){images}.{unfinished}{_failed_parts(records)}{_identified_points(records)}")


def _identified_points(records: list[dict]) -> str:
    """How many points that were not rebuilt still identify more images than their baselines, by pixels or by the
    victim's features (:func:`identified_line`); empty where none does."""
    failed = [r["metrics"] for r in records if r["metrics"].get("verdict") == NOT_REBUILT]
    n = sum(identified_line(m) is not None for m in failed)
    if not n:
        return ""
    return (f" {n} of the {len(failed)} not rebuilt still single out images: their truth is the reconstruction's "
            "nearest image of the data set, by pixels or by the victim's features, more often than the baselines'.")


def _failed_parts(records: list[dict]) -> str:
    """How many points that were not rebuilt failed in their label reading, their objective and their search
    (:func:`failed_kind`); empty where none tells."""
    n = failed_counts(r["metrics"] for r in records)
    if not sum(n.values()):
        return ""
    return (f" Of the {sum(n.values())} not rebuilt whose failed part is known, {n['labels']} read wrong labels from "
            f"the message, {n['objective']} {'has' if n['objective'] == 1 else 'have'} an objective that prefers "
            f"another image and {n['search']} a search "
            "that stopped short of the truth.")


def _sweep_setting(folder: Path, records: list[dict], meta: dict) -> list[tuple[str, str]]:
    rows = [("shared", context(records, meta) or "–")]
    grids = meta.get("grid") or []
    for i, block in enumerate(grids if isinstance(grids, list) else [grids]):
        text = "; ".join(f"{k} ∈ {{{', '.join(_short(v) for v in vs)}}}" if isinstance(vs, list) else f"{k} = {vs}"
                         for k, vs in block.items())
        rows.append((f"grid{f' {i + 1}' if len(grids) > 1 else ''}", text))
    strength = meta.get("strength")
    if strength:
        rows.append(("strength axis", str(strength)))
    if records:
        rows.append(("threat model", _sweep_threat(records)))
        sizes: dict = {}
        for r in records:
            if r["metrics"].get("d") is not None:
                sizes.setdefault(r["metrics"]["d"], set()).add(r["metrics"].get("b"))
        if sizes:
            rows.append(("d, b", " | ".join(f"d = {_int(d)}, b {_values(sizes[d])}" for d in sorted(sizes))))
    extra = unplanned(folder, records)
    rows.append(("points", f"{len(records)} finished of {meta.get('points', NOT_RECORDED)} planned"
                 + (f"; {extra} more stored by an earlier plan of this folder are left out" if extra else "")))
    return rows


def _values(values: set) -> str:
    """The values of a number that varies from point to point, sorted: ``= v`` for one, the set of up to
    :data:`MAX_LISTED`, else the range."""
    known = sorted(v for v in values if v is not None)
    text = [_int(v) for v in known] + (["–"] if None in values else [])  # whole numbers with separators, as d
    if len(text) == 1:
        return f"= {_int(known[0]) if known else '–'}"
    if len(known) > MAX_LISTED:
        return f"from {_int(known[0])} to {_int(known[-1])} ({len(known)} values)"
    return "∈ {" + ", ".join(text) + "}"


def stored_summary(folder: Path) -> list[dict] | None:
    """The rows of a sweep's summary.csv (None where there is none), refused in one sentence when it is not the
    table a sweep writes: text that is not UTF-8 or CSV, no ``n`` column, a row whose cells do not match the
    header, or an ``n`` that is not a count."""
    path = folder / "summary.csv"
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            raw = list(reader)
            header = reader.fieldnames or []
    except (UnicodeDecodeError, csv.Error):
        raise UserError(f"'{path}' is unreadable: it is not a CSV table") from None
    if not header and not raw:  # the summary of no point
        return []
    if "n" not in header:
        raise UserError(f"'{path}' is unreadable: it has no n column, so it is not the summary table a sweep writes")
    rows = []
    for i, row in enumerate(raw, 2):
        if None in row or None in row.values():
            raise UserError(f"'{path}' is unreadable: line {i} does not have the {len(header)} cells of its header")
        cells = {k: _cell(v) for k, v in row.items()}
        if not isinstance(cells["n"], int) or cells["n"] < 1:
            raise UserError(f"'{path}' is unreadable: line {i} has n = {row['n']!r}, not a count of points")
        rows.append(cells)
    return rows


def summary_matches(rows: list[dict], records: list[dict]) -> bool:
    """Whether summary.csv's rows summarise these records: a row per setting, counting every finished point."""
    return bool(records) and len(rows) == len(group_settings(records)) and sum(r["n"] for r in rows) == len(records)


def _summary_note(stored: list[dict] | None, records: list[dict], current: bool) -> str:
    """What the summary table is made from, where it is not the sweep's own summary.csv."""
    if not records:
        return "summary.csv, written from points it no longer holds, is left out." if stored else ""
    if current:
        return ""
    if stored is None:
        return "summary.csv not found: the table summarises results.jsonl."
    counted = sum(r["n"] for r in stored)
    return (f"summary.csv is left out: it counts {counted} point{'s' if counted != 1 else ''} in {len(stored)} "
            f"setting{'s' if len(stored) != 1 else ''}, not the {len(records)} finished points results.jsonl holds; "
            "the table summarises results.jsonl.")


def _cell(text):
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        return text
    return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v


def _summary_table(records: list[dict], meta: dict, stored: list[dict] | None, told: str = "") -> str:
    """The summary table: ``stored`` (summary.csv's rows, where they match the records), else the records'
    own :func:`summarize`, with ``told`` (what it is made from) before it."""
    if not records:
        return f'<p class="note">No summary: results.jsonl holds no finished point.{" " + _e(told) if told else ""}</p>'
    rows = stored if stored is not None else summarize(records)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    stems = list(dict.fromkeys(c[:-5] for c in columns if c.endswith("_mean")))
    shares = ("rebuilt", "rebuilt_images", "one_metric_ahead") + FAILED_COLUMNS
    plain = [c for c in columns if not c.endswith(("_mean", "_std")) and c not in shares]
    shared = [c for c in plain if len({json.dumps(r.get(c)) for r in rows}) == 1 and len(rows) > 1]
    template = (meta.get("base") or {}).get("defense")
    templated = "defense" in plain and "defense" not in shared and isinstance(template, str) and "{" in template
    varying = [c for c in plain if c not in shared and not (templated and c == "defense")]
    stems = [s for s in stems if any(r.get(f"{s}_mean") is not None for r in rows)]
    groups = list(group_settings(records).values())
    unbounded = [all(_no_guarantee(p["metrics"]) for p in g) for g in groups] if len(groups) == len(rows) else \
        [False] * len(rows)
    if any(unbounded) and "epsilon" not in stems:  # every setting's ε infinite: an older summary has no ε column
        stems.append("epsilon")
    head = "".join(f"<th>{_heading(c)}</th>" for c in varying) + "".join(
        f"<th>{_heading(METRIC_NAMES.get(s, s))}</th>" for s in stems)
    if any("rebuilt" in r for r in rows):
        head += "<th>rebuilt</th>"
    images = any("rebuilt_images" in r for r in rows)  # batches: the share of images rebuilt on their own
    if images:
        head += "<th>images rebuilt on their own</th>"
    ahead = any(r.get("one_metric_ahead") for r in rows)  # not rebuilt with one metric clearly above its baseline
    failed = any(r.get(FAILED_COLUMNS[0]) is not None for r in rows)
    if failed:
        head += "<th>failed: labels / objective / search</th>"
    body, said_infinite, said_not_a_bound = [], False, False
    for i, r in enumerate(rows):
        cells = "".join(f"<td class=key>{_e(_short(r.get(c)))}</td>" for c in varying)
        for s in stems:
            mean, std = r.get(f"{s}_mean"), r.get(f"{s}_std")
            digits, kind = METRIC_FORMAT.get(s, (4, "g"))
            # a spread of rounding error (ε is the same at every point of a setting: 2e-15) reads as none
            flat = isinstance(std, float) and isinstance(mean, float) and abs(std) <= 1e-9 * abs(mean)
            spread = f" <span class=v>± {'0' if flat else _num(std, 2, 'g')}</span>" if std is not None else ""
            infinite = s in INFINITE_WITHOUT_GUARANTEE and (
                (mean is None and unbounded[i]) or mean == math.inf)
            said_infinite |= infinite
            # a paper ε outside the paper's conditions, at the setting's mean or at any of its points
            points = [p["metrics"].get(s) for p in groups[i]] if len(groups) == len(rows) else []
            loose = s in PAPER_EPSILONS and not infinite and any(
                is_number(v) and math.isfinite(v) and not paper_epsilon_holds(v) for v in [mean, *points])
            said_not_a_bound |= loose
            mark = f"<span class=v title=\"not a DP bound\"> {NOT_A_BOUND_MARK}</span>" if loose else ""
            cells += f"<td><span class=v>{'∞' if infinite else _num(mean, digits, kind)}</span>{spread}{mark}</td>"
        for column, present in (("rebuilt", "rebuilt" in head), ("rebuilt_images", images)):
            share = r.get(column)
            if present:
                # the rebuilt share, with the share not rebuilt while one metric is clearly ahead under it
                more = r.get("one_metric_ahead") if column == "rebuilt" else None
                more = f"<br>{_percent(more)} one metric ahead" if more else ""
                cells += f"<td>{_percent(share) if isinstance(share, (int, float)) else '–'}{more}</td>"
        if failed:
            counts = [r.get(c) for c in FAILED_COLUMNS]
            cells += f"<td>{'–' if counts[0] is None else ' / '.join(map(str, counts))}</td>"
        body.append(f"<tr>{cells}</tr>")
    same = [f"{c} = {_short(rows[0].get(c))}" for c in shared]
    if templated:
        same.insert(0, f"defense = {template}, filled in with the row's values")
    note = ('<p class="note">' + (_e(told) + " " if told else "")
            + (_e("Same in every row: " + "; ".join(same) + ". ") if same else "")
            + "Metrics: mean ± sample std over the repetitions (n)."
            + (" psnr_unscored: the repetitions whose PSNR is not a number (a non-finite reconstruction), left out "
               "of the PSNR mean and counted in n." if "psnr_unscored" in columns else "")
            + (_e(_deltas_note(records)) if "epsilon" in stems else "")
            + (" ε ∞: no DP guarantee, the defense adds no noise (σ = 0) or noise with no bound on what it is "
               "added to (each point's privacy_note says which)." if said_infinite else "")
            + (" " + _e(NOT_A_BOUND_NOTE) if said_not_a_bound else "")
            + (" Rebuilt, one metric ahead: the share of points not rebuilt because PSNR or SSIM fell short of "
               "its baseline's margin while the other is clearly above its baseline, so parts of the image may show: "
               "look at their reconstructions." if ahead else "") + "</p>")
    # from WIDE_COLUMNS on, a smaller type and padding keep the table within the page (18 columns: a sweep over two
    # recipes with their step budgets beside the defense's strength and the sketch)
    wide = " wide" if head.count("<th>") >= WIDE_COLUMNS else ""
    return note + f'<div class="scroll"><table class="num{wide}"><tr>{head}</tr>' + "".join(body) + "</table></div>"


def _deltas_note(records: list[dict]) -> str:
    """The δ the table's finite ε hold at, as one sentence (the accountant's δ; a Laplace setting's pure ε at δ = 0;
    the paper's δ where it differs), or "" where no point records a finite ε."""
    def at(key: str, eps: str) -> list:
        return sorted({r["metrics"].get(key) for r in records if is_number(r["metrics"].get(eps))
                       and math.isfinite(r["metrics"][eps]) and is_number(r["metrics"].get(key))})
    deltas, papers = at("delta", "epsilon"), at("delta_paper", "epsilon_paper")
    if not deltas:
        return ""
    gauss = [f"{d:g}" for d in deltas if d != 0]
    words = ([f"at δ = {', '.join(gauss)}"] if gauss else []) + (
        ["pure DP (δ = 0) under Laplace noise"] if 0 in deltas else [])
    if not set(papers) <= set(deltas):
        words.append(f"ε (paper) at δ = {', '.join(f'{d:g}' for d in papers)}")
    return f" ε of each message: {'; '.join(words)}."


def _no_guarantee(m: dict) -> bool:
    """Whether a defended point's record says its ε is infinite: no ``epsilon`` beside a ``privacy_note`` (no Gaussian
    noise, or noise with no bound on what it is added to: :func:`defenses.accounting.message_privacy`)."""
    return bool(m.get("defense")) and m.get("epsilon") is None and bool(m.get("privacy_note"))


def _recon_grid(folder: Path, records: list[dict], meta: dict) -> str:
    """The sweep's reconstructions as an HTML grid: one block per series, a row per strength (the truth first), a
    column per image; each cell with its PSNR, SSIM and verdict in words."""
    if not (folder / "points").is_dir():
        return ""
    strength = meta.get("strength") or default_strength(list(dict.fromkeys(k for r in records for k in r["grid"])))
    if strength is None:
        return ""
    records = with_grid_values(records)
    keys, shown, left = grid_series(records, strength)
    blocks = []
    for series in shown:
        recs = [r for r in records if series_of(r, keys) == series]
        first = {k: json.dumps(recs[0]["grid"].get(k)) for k in REPEAT_KEYS if k != "image_index"}
        recs = [r for r in recs if all(json.dumps(r["grid"].get(k)) == v for k, v in first.items())]
        images = list(dict.fromkeys(r["params"].get("image_index", 0) for r in recs))[:MAX_GRID_COLUMNS]
        levels = sorted(dict.fromkeys(json.dumps(r["grid"].get(strength)) for r in recs), key=_level_key)
        cut = len(levels) > MAX_GRID_ROWS
        levels = levels[:MAX_GRID_ROWS]
        cell: dict = {}
        truth: dict = {}
        for r in recs:
            key = (json.dumps(r["grid"].get(strength)), r["params"].get("image_index", 0))
            pt = folder / "points" / f"{r['key']}.pt"
            if key[0] in levels and key[1] in images and key not in cell and pt.is_file():
                t = load_tensors(pt)
                cell[key] = (t["recon"][0], r["metrics"], int(t["recon"].shape[0]))
                truth.setdefault(key[1], t["truth"][0] if t.get("truth") is not None else None)
        if not cell:
            continue
        head = "<tr><th></th>" + "".join(f"<th>image {_e(im)}</th>" for im in images) + "</tr>"
        rows = ["<tr><th>truth</th>" + "".join(f"<td>{_img_cell(truth.get(im))}</td>" for im in images) + "</tr>"]
        for lv in levels:
            tds = []
            for im in images:
                if (lv, im) not in cell:
                    tds.append("<td>–</td>")
                    continue
                x, m, _ = cell[(lv, im)]
                m = first_image(m)  # the first image of a batch on its own, where the point scored it
                verdict = m.get("verdict")
                tag = (f'<span class="tag {"rebuilt" if verdict == REBUILT else "failed"}">{_e(verdict)}</span>'
                       if verdict else "")
                ahead = ahead_words(m)  # one metric short, the other clearly above its baseline: look at the image
                tag += f'<div class=cap>{_e(ahead.lstrip())}</div>' if ahead else ""
                tds.append(f"<td>{_img_cell(x)}<div class=cap>{_num(m.get('psnr'), 1)} dB · SSIM "
                           f"{_num(m.get('ssim'), 2)}</div>{tag}</td>")
            rows.append(f"<tr><th>{_e(strength)} = {_e(_short(json.loads(lv)))}</th>{''.join(tds)}</tr>")
        title = series_label(series) or "all points"
        batch = max(c[2] for c in cell.values())
        notes = [f"first {MAX_GRID_ROWS} values of {strength} shown" if cut else "",
                 f"the first image of each batch of up to {batch}, its scores its own where the point has them"
                 if batch > 1 else "",
                 ", ".join(f"{k} = {json.loads(v)}" for k, v in first.items()
                           if len({json.dumps(r['grid'].get(k)) for r in records}) > 1)]
        note = "; ".join(t for t in notes if t)
        blocks.append(f"<h4>{_e(title)}{f' <span class=note>({_e(note)})</span>' if note else ''}</h4>"
                      f'<div class="scroll"><table class="grid">{head}{"".join(rows)}</table></div>')
    if not blocks:
        return ""
    more = (f'<p class="note">{len(left)} more series not shown (at most {MAX_GRID_BLOCKS}), from '
            f"{_e(series_label(left[0]))}.</p>") if left else ""
    return f'<div class="blocks">{"".join(f"<div>{b}</div>" for b in blocks)}</div>{more}'


def _level_key(text: str):
    v = json.loads(text)
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    return (not number, v if number else 0, text)


def _img_cell(x) -> str:
    if x is None:
        return "–"
    png, (h, w) = image_png(x)
    shown = shown_width(w)
    return (f'<img src="{_uri(png)}" width="{shown}" height="{round(shown * h / w)}" alt="">')


def _sweep_machine(records: list[dict]) -> list[tuple[str, str]]:
    walls = [r["metrics"].get("wall_s") for r in records if isinstance(r["metrics"].get("wall_s"), (int, float))]
    envs = [r.get("environment") or r["metrics"].get("environment") for r in records]
    env = next((e for e in envs if e), None)
    rows = [("machine", _machine_text(env) if env else
             f"{NOT_RECORDED} (sweep points do not store their machine)")]
    rows.append(("time", f"{_seconds(sum(walls))} of attacks over {len(walls)} point{'s' if len(walls) != 1 else ''}"
                         f" (one worker's time; parallel workers overlap)" if walls else NOT_RECORDED))
    return rows


# -------------------------------------------------------------------- helpers

def image_png(x) -> tuple[bytes, tuple[int, int]]:
    """A (C, H, W) image in [0, 1] (tensor or array) as PNG bytes, and its (H, W)."""
    a = to_hwc(x)
    u8 = np.round(a * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(u8, mode="L" if u8.ndim == 2 else "RGB").save(buf, format="PNG")
    return buf.getvalue(), u8.shape[:2]


def shown_width(w: int) -> int:
    """CSS pixels an image of width ``w`` is shown at in the grid: small images enlarged by a whole factor to about
    96 px (blocky pixels, no blur), larger ones at their size up to 128 px."""
    return w * max(1, 96 // w) if w <= 48 else min(w, 128)


def _uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _figure(path: Path, caption: str, width: int | None = None) -> str:
    size = ""
    try:
        with Image.open(path) as im:
            w, h = im.size
        shown = min(w, width or 1000)
        size = f' width="{shown}" height="{round(shown * h / w)}"'
    except OSError:
        raise UserError(f"'{path}' is not a readable PNG image") from None
    return (f'<figure><img src="{_uri(path.read_bytes())}"{size} alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _heading(name) -> str:
    """A column heading that may wrap after each underscore (``b_over_m``) as well as at its spaces."""
    return _e(name).replace("_", "_<wbr>")


def _kv(rows) -> str:
    return '<table class="kv">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _name(folder: Path) -> str:
    return Path(folder).resolve().name or str(folder)


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _score(v, digits: int, scored: bool = True) -> str:
    """A score against the truth: null (how a run stores one that is not finite) reads "not a number" where the
    score was taken (``scored``), else "–"."""
    return NOT_A_NUMBER if v is None and scored else _num(v, digits)


def _or(words: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" or {words[-1]}"


def _num(v, digits: int = 2, kind: str = "f") -> str:
    if not is_number(v):
        return "–" if v is None else _e(v)
    return f"{v:.{digits}{kind}}" if math.isfinite(v) else NOT_A_NUMBER


def _percent(share: float) -> str:
    """A share as a percentage: whole where it is one (``75%``), else to a tenth (``12.5%``, not ``12%``)."""
    pct = share * 100
    return _num(pct, 0 if abs(pct - round(pct)) < 1e-9 else 1) + "%"


def _int(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ("–" if v is None else str(v))


def _seconds(v) -> str:
    if not isinstance(v, (int, float)):
        return NOT_RECORDED
    if v < 0.05:  # 0.0 s would read as no time at all
        return "under 0.1 s"
    return f"{v:.1f} s" if v < 120 else f"{v / 60:.1f} min"


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if v is None:
        return "–"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


__all__ = ["build_report", "check_folders", "image_png", "shown_width", "FAILURE_NOTE",
           "MAX_GRID_COLUMNS", "MAX_GRID_ROWS"]
