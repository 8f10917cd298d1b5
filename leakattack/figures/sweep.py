"""Sweep figures, drawn from a sweep folder's stored files only (never re-running an attack).

:func:`sweep_figures` draws every figure the stored results support: the
reconstruction grid, metrics against defense strength, the privacy-utility
frontier, the sketch-size phase transition and metrics against batch size, from ``results.jsonl`` and
``points/*.pt``, as PNG and PDF under ``figures/``.  Repetitions of a setting
are averaged, and lines are told apart by series (every other grid key that
varies), with the sweep store's grouping (:mod:`leakattack.results.store`).
Every title names what the records share: model, data set, sketch, objective,
prior, defense and any other grid value they all have (a figure of one series
draws no legend entry for it: its title says what it is).  PSNR and SSIM are
drawn beside their baseline (the better of the attack's start and the data
set's mean image, which a reconstruction must beat to count as rebuilt), dashed
in the series' colour with a band of one std; results stored before baselines
existed draw none.  Dotted grey reference lines (SSIM 0.3, b = m) are named in
the legend.  A point whose repetitions were none of them rebuilt is drawn
hollow, one that only some of them were half filled (a batch with per-image
verdicts counts its images on their own), both named in the legend,
and the titles count the points rebuilt: a point not rebuilt is a failure of the
attack at its budget, never evidence of privacy.  The reconstruction grid says
each cell's verdict under its scores and frames a cell not rebuilt dashed.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
import warnings
from pathlib import Path

from ..errors import SettingWarning, ratio_text
from ..rebuilt import (
    NOT_REBUILT,
    REBUILT,
    ahead_words,
    batch_images,
    batch_images_words,
    image_scores,
    image_verdicts,
)
from ..results import (
    REPEAT_KEYS,
    aggregate,
    as_ran,
    default_strength,
    group_settings,
    load_point_images,
    load_records,
    mean_std,
    read_object,
    series_keys,
    series_label,
    series_of,
)
from .common import fixed, plt, save_both, to_hwc

#: at most this many series (blocks) in one reconstruction grid; the rest are named as left out
MAX_GRID_BLOCKS = 6
#: the reconstruction grid puts series blocks side by side up to this many image columns in all
GRID_COLUMNS = 9
#: the x axes of the phase transition: b/m comes from them, so they never tell series apart there
SIZE_KEYS = ("sketch_dim", "sketch_ratio")
#: a metric -> the stored key of its baseline (the better of the start and the mean image), drawn dashed beside it
BASELINE_OF = {"psnr": "baseline_psnr", "ssim": "baseline_ssim", "iip": "baseline_iip",
               "iip_features": "baseline_iip_features"}
#: the legend entry of the dashed baselines
BASELINE_LABEL = "baseline: better of start and mean image"
#: the SSIM drawn dotted in metrics_vs_strength: the border docs/sweeps.md reads off the reference defense sweep
#: (where the mean SSIM crosses it, the digits are barely visible)
SSIM_BORDER = 0.3
#: the values each metric can take (None: unbounded there); a mean +- std bar or band is cut at them, so a spread
#: of scores near a bound (SSIM near 1, label accuracy near 0) is not drawn reaching values no run can have.  PSNR
#: stops at 200 dB (:func:`leakattack.metrics.image.psnr` clamps the MSE at 1e-20)
METRIC_RANGE = {"psnr": (None, 200.0), "ssim": (-1.0, 1.0), "lpips": (0.0, None), "label_acc": (0.0, 1.0),
                "utility_acc": (0.0, 1.0), "epsilon": (0.0, None), "baseline_psnr": (None, 200.0),
                "baseline_ssim": (-1.0, 1.0), "iip": (0.0, 1.0), "iip_features": (0.0, 1.0), "baseline_iip": (0.0, 1.0),
                "baseline_iip_features": (0.0, 1.0)}


def _within(mean: float, std: float, metric: str | None) -> tuple[float, float]:
    """(below, above) the mean of a std bar of ``metric``, cut at :data:`METRIC_RANGE`."""
    lo, hi = METRIC_RANGE.get(metric or "", (None, None))
    below = std if lo is None else max(0.0, min(std, mean - lo))
    above = std if hi is None else max(0.0, min(std, hi - mean))
    return below, above


#: the legend entry of the dotted SSIM border
SSIM_BORDER_LABEL = f"SSIM {SSIM_BORDER:g}: about where images become barely visible"
#: the legend entries of a point (a setting's mean) whose repetitions were none of them rebuilt (drawn hollow), and
#: only some of them (half filled)
NOT_REBUILT_LABEL = "not rebuilt (failure of the attack)"
SOME_REBUILT_LABEL = "rebuilt in some repetitions or images only"
#: the legend entry of the dotted b/m = 1 of the phase transition
SIZE_BORDER_LABEL = "b = m: as many numbers as unknowns"
#: how figures and the report name grid keys and summary columns that read badly as they are; any other key is
#: named with its underscores as spaces
KEY_NAMES = {"sketch_ratio": "b/d", "sketch_dim": "sketch size b", "batch_size": "batch size B", "b_over_m": "b/m"}
#: the fields :func:`context` names itself, so a title does not repeat them as shared grid values
CONTEXT_FIELDS = ("model", "dataset", "sketch", "objective", "tv", "defense")
#: metric panels side by side in one row of a figure; more wrap into further rows
PANELS_PER_ROW = 3
#: a metric panel's y label is wrapped to lines of at most this many characters (one longer than the panel is tall
#: runs past it into the panel beside it)
Y_LABEL_CHARS = 26
#: a reconstruction grid's row label is wrapped to lines of at most this many characters (a row is 1.55 in tall)
ROW_LABEL_CHARS = 24


def _strength_key(records: list[dict], meta: dict) -> str | None:
    """sweep.json's ``strength``, where it names a grid key of the points; else the default (:func:`default_strength`),
    with a one-line warning where sweep.json names something else (an edited file: a number, a key no point has)."""
    key = meta.get("strength")
    keys = list(dict.fromkeys(k for r in records for k in r["grid"]))
    if isinstance(key, str) and key in keys:
        return key
    fallback = default_strength(list(records[0]["grid"]) if records else [])
    if key not in (None, ""):
        warnings.warn(f"sweep.json's strength {json.dumps(key)} is not a grid key of the sweep's points "
                      f"({', '.join(keys) or 'none'}): the figures draw "
                      f"{'against ' + fallback if fallback else 'no strength axis'}", SettingWarning, stacklevel=2)
    return fallback


def _axis(v):
    """A grid value as a number for an x axis (None if it is not one)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _set_strength_scale(ax, xs) -> None:
    pos = [x for x in xs if x > 0]
    if pos and max(pos) / min(pos) >= 100:
        ax.set_xscale("symlog", linthresh=min(pos)) if min(xs) <= 0 else ax.set_xscale("log")


def _num(v) -> str:
    if v is None or v == "":  # an empty value (no defense) as legends show it
        return "none"
    return f"{v:g}" if isinstance(v, float) else str(v)


def key_name(key: str) -> str:
    """How figures and the report name a grid key or summary column: :data:`KEY_NAMES`, else the key with its
    underscores as spaces (an underscore in a rotated two-line label runs into the line below it)."""
    return KEY_NAMES.get(key, key.replace("_", " "))


def _value_text(value_json: str) -> str:
    """A grid value (JSON text) as legends show it (:func:`series_label`)."""
    return series_label((("k", value_json),)).split("=", 1)[1]


def _level_label(key: str, value_json: str) -> str:
    """A reconstruction grid's row label, ``name = value``, in lines of at most :data:`ROW_LABEL_CHARS` characters:
    a longer one puts the name on a line of its own and breaks the value after its commas and colons or before an
    ``@`` (a defense spec), a piece longer than a line wherever it must."""
    name, value = key_name(key), _value_text(value_json)
    if len(name) + len(value) + 3 <= ROW_LABEL_CHARS:
        return f"{name} = {value}"
    lines = textwrap.wrap(f"{name} =", ROW_LABEL_CHARS)
    pieces = [p for part in re.split(r"(?<=[,:])|(?=@)", value) if part
              for p in textwrap.wrap(part, ROW_LABEL_CHARS, drop_whitespace=False)]
    for i, piece in enumerate(pieces):
        if i and len(lines[-1]) + len(piece) <= ROW_LABEL_CHARS:
            lines[-1] += piece
        else:
            lines.append(piece)
    return "\n".join(lines)


def _shared_grid(records: list[dict], context_text: str = "") -> list[str]:
    """``name = value`` for each grid key all ``records`` share one value of, repetitions and the fields
    :func:`context` names aside (as are keys ``context_text`` already names, such as b/d)."""
    parts = []
    for k in dict.fromkeys(k for r in records for k in r["grid"]):
        if k in REPEAT_KEYS or k in CONTEXT_FIELDS or not all(k in r["grid"] for r in records):
            continue
        values = {json.dumps(r["grid"][k], sort_keys=True) for r in records}
        if len(values) == 1 and f"{key_name(k)} = " not in context_text:
            parts.append(f"{key_name(k)} = {_value_text(values.pop())}")
    return parts


def context(records: list[dict], meta: dict | None = None) -> str:
    """What every record shares, compactly: model, data set, sketch (b/d), objective, prior and defense.

    A field that varies is left to the axes and the legend, except a defense
    written with ``{placeholders}``, which is shown as its template from the
    sweep's ``[base]``.
    """
    base = (meta or {}).get("base", {})

    ran = [as_ran(r) for r in records]  # a protocol's point: the protocol's sketch and noise

    def shared(name, default=None):
        values = {json.dumps(p.get(name, default), sort_keys=True) for p in ran}
        return json.loads(values.pop()) if len(values) == 1 else _VARIES

    parts = []
    model, dataset = shared("model"), shared("dataset")
    victim = [] if model is _VARIES else [str(model)]
    if dataset is None:  # the default: photos for a run, digits for a protocol's clients (their training folder's
        protocol = shared("protocol")  # own set where one is given: not in the records, so not named)
        dataset = "photos" if not protocol else "digits" if shared("protocol_dir") is None else _VARIES
    if dataset is not _VARIES:
        victim.append(f"on {dataset}")
    if victim:
        parts.append(" ".join(victim))
    sketch = shared("sketch")
    if sketch is not _VARIES:
        shape = {(r["metrics"].get("b"), r["metrics"].get("d")) for r in records}
        b, d = shape.pop() if len(shape) == 1 else (None, None)
        parts.append(f"sketch {sketch}" + (f" (b/d = {ratio_text(b, d)})" if b and d and b != d else ""))
    objective = shared("objective", "l2")
    if objective is not _VARIES:
        parts.append({"l2": "L2 objective", "cosine": "cosine objective"}.get(objective, f"objective {objective}"))
    tv, priors = shared("tv", 0.0), shared("priors", [])
    template = base.get("priors")
    if isinstance(template, list) and any("{" in str(p) for p in template) and _VARIES in (tv, priors):
        # priors written with {placeholders} (a run reads tv:{w} as its TV weight): their template from [base]
        named = [str(p) for p in template]
    else:  # what the points share of the two: a TV weight, the list of priors (what varies is left to the legend)
        named = ([f"TV {_num(tv)}"] if tv is not _VARIES and tv else []) + (
            [str(p) for p in priors or []] if priors is not _VARIES else [])
    if named:
        parts.append(_templated("prior" + ("s " if len(named) > 1 else " ") + ", ".join(named)))
    elif tv is not _VARIES and priors is not _VARIES:
        parts.append("no prior")
    defense = shared("defense", "")
    if defense is _VARIES and isinstance(base.get("defense"), str):
        defense = base["defense"]
    if defense is not _VARIES:
        parts.append(_templated(f"defense {defense}") if defense else "no defense")
    return _SEP.join(parts)


def _templated(text: str) -> str:
    """``text`` with each ``{name}`` of a template shown as ``<name>``, and the names varied said after it."""
    names = re.findall(r"\{(\w+)\}", text)
    if not names:
        return text
    return re.sub(r"\{(\w+)\}", lambda m: "<" + m.group(1) + ">", text) + f" ({', '.join(dict.fromkeys(names))} varied)"


_VARIES = object()
_SEP = " · "


def _fill(text: str, chars: int) -> list[str]:
    """``text`` in lines of about ``chars`` characters, broken between its `` · `` parts where it can."""
    lines: list[str] = []
    for part in text.split(_SEP):
        if lines and len(lines[-1]) + len(_SEP) + len(part) <= chars:
            lines[-1] += _SEP + part
        else:
            lines += textwrap.wrap(part, chars) or [""]
    return lines


def _title(fig, head: str, records: list[dict], meta: dict | None, width_in: float, fontsize: float = 8) -> None:
    """A suptitle: ``head`` over the shared context, wrapped to the figure's width."""
    chars = max(30, int(width_in * 72 / (0.55 * fontsize)))
    shared = context(records, meta)
    shared = _SEP.join([p for p in [shared] if p] + _shared_grid(records, shared))
    fig.suptitle("\n".join(textwrap.wrap(head, chars) + _fill(shared, chars)), fontsize=fontsize)


def _line_label(series: tuple) -> str:
    """The legend entry of a series (its value alone when one key tells series apart); the only series of a figure
    has none: the title says what its points share."""
    if len(series) == 1:
        return series_label(series).split("=", 1)[1]
    return series_label(series) if series else "_only series"


def _verdict_state(part) -> str | None:
    """Of one point's repetitions (records; None where not known), ``"none"`` when none with a verdict was rebuilt,
    ``"some"`` when only some were, None when all were or none has a verdict (results stored before verdicts).  A
    batch with per-image verdicts counts its images (``verdict_each``), not its verdict on the means: a batch rebuilt
    on its means with half its images not rebuilt is rebuilt in part."""
    verdicts = [v for r in part or () for v in image_verdicts(r["metrics"]) or ()]
    rebuilt = verdicts.count(REBUILT)
    if not verdicts or rebuilt == len(verdicts):
        return None
    return "some" if rebuilt else "none"


#: how a point of each verdict state (:func:`_verdict_state`) is marked: hollow, or half filled
_STATE_MARKS = {"none": {"mfc": "white"}, "some": {"fillstyle": "left", "markerfacecoloralt": "white"}}
_STATE_LABELS = {"none": NOT_REBUILT_LABEL, "some": SOME_REBUILT_LABEL}


def _draw_lines(ax, lines: dict, labels: dict, marked: set | None = None, metric: str | None = None) -> dict:
    """Mean against x, one line per series; std bars only where a setting has more than one repetition (cut at the
    range of ``metric``: :data:`METRIC_RANGE`); a point
    none of whose repetitions was rebuilt hollow, one only some of them were half filled (the states drawn are added
    to ``marked``, for :func:`_verdict_entries`).  Returns each series' colour."""
    colors = {}
    for line, pts in lines.items():
        x = [p[0] for p in pts]
        states = [_verdict_state(p[4]) for p in pts]
        (drawn,) = ax.plot(x, [p[1] for p in pts], marker="o", ms=3, label=labels.get(line, str(line)),
                           markevery=[i for i, st in enumerate(states) if st is None])
        colors[line] = drawn.get_color()
        for state, style in _STATE_MARKS.items():
            at = [p for p, st in zip(pts, states) if st == state]
            if at:
                ax.plot([p[0] for p in at], [p[1] for p in at], ls="none", marker="o", ms=4.5, mew=1.0,
                        color=drawn.get_color(), label=f"_{state}", zorder=drawn.get_zorder() + 0.1, **style)
                if marked is not None:
                    marked.add(state)
        bars = [p for p in pts if p[2] is not None]
        if bars:
            cut = [_within(p[1], p[2], metric) for p in bars]
            ax.errorbar([p[0] for p in bars], [p[1] for p in bars], yerr=[[c[0] for c in cut], [c[1] for c in cut]],
                        fmt="none",
                        ecolor=drawn.get_color(), capsize=3)
    return colors


def _draw_baselines(ax, records: list[dict], x_of, metric: str, line_of, colors: dict) -> bool:
    """The baseline of ``metric`` (:data:`BASELINE_OF`, mean over repetitions) dashed in each series' colour, with a
    band of one std where a setting has more than one repetition; True when any was drawn (records stored without
    baselines draw nothing)."""
    key = BASELINE_OF.get(metric)
    lines = aggregate(records, x_of, key, line_of=line_of) if key else {}
    for line, pts in lines.items():
        color = colors.get(line, "dimgrey")
        x, y = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(x, y, ls="--", lw=1.0, marker="_", ms=8, color=color, alpha=0.8, label="_baseline")
        if any(p[2] is not None for p in pts):
            cut = [_within(m, p[2] or 0.0, key) for m, p in zip(y, pts)]
            ax.fill_between(x, [m - c[0] for m, c in zip(y, cut)], [m + c[1] for m, c in zip(y, cut)], color=color,
                            alpha=0.12, lw=0)
    return bool(lines)


def _baseline_entry(ax) -> None:
    """One legend entry for every dashed baseline (the series' colours tell them apart)."""
    ax.plot([], [], ls="--", lw=1.0, color="dimgrey", label=BASELINE_LABEL)


def _verdict_entries(ax, marked: set) -> None:
    """One legend entry for each verdict mark drawn (:func:`_draw_lines`), in grey."""
    for state, style in _STATE_MARKS.items():
        if state in marked:
            ax.plot([], [], ls="none", marker="o", ms=4.5, mew=1.0, color="dimgrey", label=_STATE_LABELS[state],
                    **style)


def points_rebuilt(rebuilt: int, n: int) -> str:
    """``R of N points rebuilt``, as the titles and the summary lines count them."""
    return f"{rebuilt} of {n} point{'s' if n != 1 else ''} rebuilt"


def rebuilt_count(records: list[dict]) -> str:
    """``R of N points rebuilt`` over the records with a verdict ("" where none has one), with, where any was not,
    what that means."""
    verdicts = [v for r in records if (v := r["metrics"].get("verdict")) is not None]
    if not verdicts:
        return ""
    n, rebuilt = len(verdicts), verdicts.count(REBUILT)
    failure = "; not rebuilt is a failure of the attack at its budget, not evidence of privacy"
    images = batch_images_words(batch_images(r["metrics"] for r in records))
    return points_rebuilt(rebuilt, n) + (f" ({images})" if images else "") + (failure if rebuilt < n else "")


def _with_count(head: str, records: list[dict]) -> str:
    count = rebuilt_count(records)
    return f"{head}; {count}" if count else head


#: the most entries, and the widest share of a panel, of a legend drawn inside the panel (else it goes below them)
LEGEND_IN_PANEL_ENTRIES = 4
LEGEND_IN_PANEL_WIDTH = 0.45


def _fits_in_panel(fig, axes, texts: list[str]) -> bool:
    """Whether a legend of these entries (at 7 pt) is small enough to sit inside a panel without covering much of
    it: at most :data:`LEGEND_IN_PANEL_ENTRIES` entries and, estimated from the longest text (0.55 em a character,
    and the marker's room), at most :data:`LEGEND_IN_PANEL_WIDTH` of a panel's width.  The reference lines' long
    entries (the baseline, the verdict marks, the SSIM border) made the legend wider than its panel, over the data
    and the tick labels."""
    if len(texts) - 1 > LEGEND_IN_PANEL_ENTRIES:  # the last text is the title
        return False
    width_in = (max(len(t) for t in texts) * 0.55 * 7 + 30) / 72
    return width_in <= LEGEND_IN_PANEL_WIDTH * fig.get_figwidth() / max(1, len(axes))


def _legend(fig, axes, keys: list[str], n_lines: int, borders: tuple[str, ...] = ()) -> None:
    """The legend of the first panel's labelled lines, then one entry per dotted grey reference line (``borders``,
    their labels), titled by the keys that tell series apart: none with one series, whose entries are then only the
    reference lines (the figure's title says what its points share); no entry at all draws no legend."""
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="grey", lw=0.8, ls=":") for _ in borders]
    labels += list(borders)
    if not handles:
        return
    title = ", ".join(keys) or None
    if n_lines <= 4 and len(keys) <= 1 and _fits_in_panel(fig, axes, labels + [title or ""]):
        axes[0].legend(handles, labels, fontsize=7, title=title, title_fontsize=7)
    else:  # below the panels: many or long labels would cover the data
        longest = max((len(t) for t in labels), default=0)
        # long labels in fewer columns: the panels keep their width
        cols = 1 if longest > 90 else 2 if longest > 55 else 3
        fig.legend(handles, labels, loc="outside lower center", fontsize=7, title=title,
                   title_fontsize=7, ncols=min(n_lines, cols))


#: run parameters that the identity sketch (``sketch = "none"``) ignores (its points run with their defaults): a grid
#: that leaves them out names no value for such a point
IDENTITY_IGNORES = ("sketch_ratio", "sketch_dim")


def with_grid_values(records: list[dict]) -> list[dict]:
    """``records`` with a value for every grid key that some record names: a point whose grid lacks the key (a
    ``[[grid]]`` table that leaves it out, or a point an earlier sweep file stored before the key joined its grid)
    takes the value it ran with (``params``), so that series are told apart by what the points ran with, not by which
    table named them.  A placeholder (not a run parameter), and ``sketch_ratio`` and ``sketch_dim`` of an identity
    sketch that its grid leaves out, stay unnamed; where its grid names them, they read as it ran, b/d = 1 and
    b = d (:func:`strength_level`), not the grid's value, which it ignored."""
    keys = list(dict.fromkeys(k for r in records for k in r["grid"]))
    filled = []
    for r in records:
        params = r.get("params", {})
        identity = params.get("sketch", r["grid"].get("sketch")) == "none"
        missing = {k: params[k] for k in keys if k not in r["grid"] and k in params
                   and not (k in IDENTITY_IGNORES and identity)}
        # an identity sketch's grid ratio or dimension is not what it ran with: b/d = 1, b = d (the message's size)
        ran = {k: identity_value(r, k) for k in IDENTITY_IGNORES if identity and k in r["grid"]}
        filled.append({**r, "grid": {**r["grid"], **missing, **ran}} if missing or ran else r)
    return filled


def identity_value(record: dict, key: str):
    """What an identity sketch's point ran with for ``key`` of :data:`IDENTITY_IGNORES`, whatever its grid says:
    b/d = 1 for ``sketch_ratio``, b = d (the message's size) for ``sketch_dim``, its grid value where it stored no
    b."""
    if key == "sketch_ratio":
        return 1
    b = record.get("metrics", {}).get("b")
    return b if b is not None else record["grid"].get(key)


def strength_level(record: dict, strength: str) -> str:
    """The JSON text of the strength a point ran at, its row in a reconstruction grid: its grid value, but for
    ``sketch_ratio`` and ``sketch_dim`` of an identity sketch, which keeps every coordinate whatever they say, what it
    ran with (:func:`identity_value`)."""
    if strength in IDENTITY_IGNORES and record.get("params", {}).get("sketch", record["grid"].get("sketch")) == "none":
        return json.dumps(identity_value(record, strength))
    return json.dumps(record["grid"].get(strength))


def grid_series(records: list[dict], strength: str | None) -> tuple[list[str], list[tuple], list[tuple]]:
    """(series keys, series drawn, series left out) of the reconstruction grid, in grid order (``strength`` None: a
    grid of one row per series)."""
    keys = series_keys(records, exclude=(strength,) if strength is not None else ())
    order = list(dict.fromkeys(series_of(r, keys) for r in records))
    return keys, order[:MAX_GRID_BLOCKS], order[MAX_GRID_BLOCKS:]


def _first_repetition(recs: list[dict]) -> tuple[list[dict], str]:
    """The records of the first value of each repetition key that varies (image index aside), and a note saying so."""
    notes = []
    for k in REPEAT_KEYS:
        if k == "image_index":
            continue
        values = list(dict.fromkeys(json.dumps(r["grid"].get(k)) for r in recs if k in r["grid"]))
        if len(values) > 1:
            recs = [r for r in recs if json.dumps(r["grid"].get(k)) == values[0]]
            notes.append(f"{k} = {json.loads(values[0])} (1 of {len(values)})")
    return recs, ", ".join(notes)


def _level_order(s: str):
    """The sort key of a strength level (JSON text): numbers ascending, then the others, which a stable sort keeps
    in the order they come in (the grid's: a defense's "none" first where the grid lists it first)."""
    v = _axis(json.loads(s))
    return (v is None, v or 0)


def reconstruction_grid(folder, records: list[dict], strength: str, meta: dict | None = None,
                        notes: list | None = None) -> list:
    """One block per series; in a block, rows are the truth and each strength (ascending), columns the images.

    At most :data:`MAX_GRID_BLOCKS` blocks are drawn; the figure's title (and
    ``notes``) say how many series were left out.
    """
    keys, shown, left = grid_series(records, strength)
    blocks = []
    for series in shown:
        recs, rep_note = _first_repetition([r for r in records if series_of(r, keys) == series])
        cell = {}
        for r in recs:
            pt = Path(folder) / "points" / f"{r['key']}.pt"
            lv, img = strength_level(r, strength), r["params"].get("image_index", 0)
            if pt.exists() and (lv, img) not in cell:
                cell[(lv, img)] = (load_point_images(pt), r["metrics"], r["params"].get("batch_size", 1))
        if cell:
            levels = sorted(dict.fromkeys(lv for lv, _ in cell), key=_level_order)  # in grid order where equal
            blocks.append((series, levels, sorted({im for _, im in cell}), cell, rep_note))
    if not blocks:
        return []
    width = 1.4 * max(len(b[2]) for b in blocks) + 1.4
    heights = [1.55 * (len(b[1]) + 1) + (0.3 if keys else 0.0) for b in blocks]
    head = _with_count(f"reconstructions by {key_name(strength)}", records)
    if left:
        head += (f"; {len(shown)} of {len(shown) + len(left)} series shown "
                 f"({len(left)} left out, from {series_label(left[0])})")
        if notes is not None:
            notes.append(f"reconstruction grid shows {len(shown)} of {len(shown) + len(left)} series "
                         f"({len(left)} left out)")
    # blocks side by side while the figure stays at most GRID_COLUMNS images wide, then in further rows
    per_row = max(1, min(len(blocks), GRID_COLUMNS // max(len(b[2]) for b in blocks)))
    n_rows = -(-len(blocks) // per_row)
    row_heights = [max(heights[i:i + per_row]) for i in range(0, len(blocks), per_row)]
    fig = plt.figure(figsize=(width * per_row, sum(row_heights) + 0.7), layout="constrained")
    if len(blocks) > 1:
        grid = fig.subfigures(n_rows, per_row, height_ratios=row_heights, squeeze=False)
        subs = [grid[i // per_row][i % per_row] for i in range(len(blocks))]
        for extra in range(len(blocks), n_rows * per_row):  # an empty cell of the last row stays blank
            grid[extra // per_row][extra % per_row].set_visible(False)
    else:
        subs = [fig]
    for sub, (series, levels, images, cell, rep_note) in zip(subs, blocks):
        _grid_block(sub, strength, levels, images, cell)
        batch = max(c[2] for c in cell.values())
        heading = "; ".join(t for t in (series_label(series),
                                        f"first image of each batch of {batch}" if batch > 1 else "",
                                        rep_note) if t)
        if heading and sub is not fig:
            sub.suptitle(heading, fontsize=7)
        elif heading:
            head += f" ({heading})"
    _title(fig, head, records, meta, width * per_row)
    return save_both(fig, Path(folder) / "figures", "reconstruction_grid")


def first_image(m: dict) -> dict:
    """What a grid cell, which shows the first image of its point's batch, scores: that image's own PSNR, SSIM,
    baselines and verdict (:func:`leakattack.rebuilt.image_scores`) for a batch that has them, else the point's."""
    own = image_scores(m, 0) if len(m.get("verdict_each") or ()) > 1 else None
    return own if own is not None else m


def cell_label(m: dict) -> str:
    """A reconstruction's caption in the grid: ``P dB, SSIM S`` and, on a line of its own, its verdict where it has
    one; a cell not rebuilt whose other metric is clearly above its baseline names the metric that fell short
    (:func:`leakattack.rebuilt.ahead_words`) and by how much the other is ahead (``not rebuilt (PSNR); SSIM +0.36``)."""
    psnr = "n/a" if m.get("psnr") is None else f"{fixed(m['psnr'], '.1f')} dB"
    ssim = "n/a" if m.get("ssim") is None else fixed(m["ssim"], ".2f")
    verdict = m.get("verdict")
    if verdict not in (REBUILT, NOT_REBUILT):
        return f"{psnr}, SSIM {ssim}"
    return f"{psnr}, SSIM {ssim}\n{verdict}{ahead_words(m)}"


def _grid_block(fig, strength: str, levels: list[str], images: list, cell: dict) -> None:
    axes = fig.subplots(len(levels) + 1, len(images), squeeze=False)
    for j, img in enumerate(images):
        truth = next((c[0]["truth"][0] for (lv, im), c in cell.items() if im == img), None)
        shown = {lv: first_image(cell[(lv, img)][1]) for lv in levels if (lv, img) in cell}
        rows = [(truth, f"image {img}", None)] + [
            (cell[(lv, img)][0]["recon"][0], cell_label(shown[lv]), shown[lv].get("verdict"))
            if (lv, img) in cell else (None, "", None) for lv in levels]
        for i, (a, label, verdict) in enumerate(rows):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            if a is not None:
                h = to_hwc(a)
                ax.imshow(h, cmap="gray" if h.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
            if verdict == NOT_REBUILT:  # a dashed grey frame: the cell's image is no better than the baselines
                for spine in ax.spines.values():
                    spine.set(ls="--", color="grey", lw=1.0)
            ax.set_title(label, fontsize=6, pad=2, color="dimgrey" if verdict == NOT_REBUILT else "black")
            if j == 0:
                ax.set_ylabel("truth" if i == 0 else _level_label(strength, levels[i - 1]), fontsize=7,
                              linespacing=1.4)


def _metric_panels(records: list[dict], x_key: str, metrics: tuple, panel_width: float, height: float):
    """One panel per metric the records hold, series told apart by every grid key but ``x_key``:
    (fig, axes (one per metric, in rows of at most :data:`PANELS_PER_ROW`), metric names, series keys, line labels,
    figure width)."""
    keys = series_keys(records, exclude=(x_key,))
    labels = {series_of(r, keys): _line_label(series_of(r, keys)) for r in records}
    names = [n for n in metrics if any(r["metrics"].get(n) is not None for r in records)]
    # at most PANELS_PER_ROW side by side: six in one row made a figure 3,257 px wide that the report showed at a third
    rows = -(-len(names) // PANELS_PER_ROW) or 1
    cols = -(-len(names) // rows) or 1  # rows as full as each other: four panels in two rows of two
    width = panel_width * cols
    fig, grid = plt.subplots(rows, cols, figsize=(width, height * rows + 0.25 * len(labels) / 3), squeeze=False,
                             layout="constrained")
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(names):]:  # the last row's empty places
        ax.remove()
    return fig, axes[:len(names)], names, keys, labels, width


def metrics_vs_strength(folder, records: list[dict], strength: str, meta: dict | None = None) -> list:
    """PSNR, SSIM (and image identifiability by pixels and by the victim's features, utility accuracy, epsilon when
    present) against defense strength, one line per series, std bars."""
    values = [r["grid"].get(strength) for r in records]
    categories = None  # a strength that is not a number (a defense's name, a flag) is drawn at ticks in grid order
    if any(_axis(v) is None for v in values if v is not None):
        categories = list(dict.fromkeys(json.dumps(v) for v in values))
        x_of = lambda r: float(categories.index(json.dumps(r["grid"].get(strength))))  # noqa: E731
    else:
        x_of = lambda r: _axis(r["grid"].get(strength))  # noqa: E731
    fig, axes, names, keys, labels, width = _metric_panels(
        records, strength, ("psnr", "ssim", "iip", "iip_features", "utility_acc", "epsilon"), 3.6, 3.4)
    baselines, marked = False, set[str]()
    for ax, name in zip(axes, names):
        lines = aggregate(records, x_of, name, line_of=lambda r: series_of(r, keys))
        colors = _draw_lines(ax, lines, labels, marked, metric=name)
        baselines |= _draw_baselines(ax, records, x_of, name, lambda r: series_of(r, keys), colors)
        if categories is None:
            _set_strength_scale(ax, [p[0] for pts in lines.values() for p in pts] or [1])
        else:
            names_at = [_num(json.loads(c)) for c in categories]
            ax.set_xticks(range(len(categories)), names_at, fontsize=6,
                          rotation=30 if max(len(t) for t in names_at) > 6 else 0, ha="right" if
                          max(len(t) for t in names_at) > 6 else "center")
            ax.set_xlim(-0.5, len(categories) - 0.5)
        if name == "ssim":
            ax.axhline(SSIM_BORDER, color="grey", lw=0.8, ls=":")
        if name == "epsilon":
            drawn = [v for r in records if isinstance(v := r["metrics"].get("epsilon"), (int, float))
                     and math.isfinite(v)]
            # a log axis, but not for an ε of 0 (a DP protocol's first rounds can read 0): it has no place there
            ax.set_yscale("log" if drawn and min(drawn) > 0 else "linear")
            # a log axis has no ∞: the points without a DP bound (no noise, or noise with no bound on what it is
            # added to) are named, not left out unsaid
            unbounded = list(dict.fromkeys(_num(r["grid"].get(strength)) for r in records
                                           if r["metrics"].get("epsilon") is None and r["metrics"].get("privacy_note")))
            if unbounded:
                ax.text(0.03, 0.03, "\n".join(textwrap.wrap(f"not drawn: ε = ∞ (no DP bound) at {key_name(strength)} = "
                                                             f"{', '.join(unbounded)}", 40)),
                        transform=ax.transAxes, fontsize=6, color="dimgrey", va="bottom")
        ax.set_xlabel(key_name(strength))
        # Laplace noise's ε is the Laplace mechanism's pure one (delta = 0), not the accountant's
        pure = name == "epsilon" and any(r["metrics"].get("delta") == 0 and r["metrics"].get("epsilon") is not None
                                         for r in records)
        if name.startswith("iip"):
            ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel("\n".join(textwrap.wrap({
            "psnr": "PSNR (dB)", "ssim": "SSIM", "utility_acc": "test accuracy", "iip": "identified (IIP, pixels)",
            "iip_features": "identified (IIP, victim's features)",
            "epsilon": "ε (RDP; pure for Laplace)" if pure else "ε (RDP)"}[name], Y_LABEL_CHARS)))
        ax.grid(True, alpha=0.3)
    if baselines:
        _baseline_entry(axes[0])
    _verdict_entries(axes[0], marked)
    _legend(fig, axes, keys, len(labels), (SSIM_BORDER_LABEL,) if "ssim" in names else ())
    _title(fig, _with_count(f"attack against {key_name(strength)}", records), records, meta, width)
    return save_both(fig, Path(folder) / "figures", "metrics_vs_strength")


def privacy_utility_frontier(folder, records: list[dict], strength: str | None, meta: dict | None = None) -> list:
    """Mean PSNR of the attack against test accuracy of the defended training, epsilon annotated, one line per
    series."""
    kept = [r for r in records if r["metrics"].get("utility_acc") is not None]
    if not kept:
        return []
    keys = series_keys(kept, exclude=(strength,) if strength else ())
    by_line: dict = {}
    for recs in group_settings(kept).values():
        parts: dict = {}
        for r in recs:
            parts.setdefault(series_of(r, keys), []).append(r)
        for series, part in parts.items():
            acc, _ = mean_std([float(r["metrics"]["utility_acc"]) for r in part])
            scored = [float(r["metrics"]["psnr"]) for r in part if r["metrics"]["psnr"] is not None]
            # the repetitions scored, as summary.csv's mean takes them; NaN (no point) only where none was
            ps, ps_std = mean_std(scored) if scored else (float("nan"), float("nan"))
            by_line.setdefault(series, []).append((acc, ps, ps_std, _epsilon_label(part[0]["metrics"]), part))
    fig, ax = plt.subplots(figsize=(4.6, 3.8 + 0.25 * len(by_line) / 3), layout="constrained")
    lines: dict = {}
    marked: set[str] = set()
    for series, pts in by_line.items():
        pts.sort(key=lambda p: (p[0], p[1]))
        lines[series] = [(acc, ps, std, len(part), part) for acc, ps, std, _, part in pts]
    _draw_lines(ax, lines, {s: _line_label(s) for s in lines}, marked, metric="psnr")
    _verdict_entries(ax, marked)
    accs = [p[0] for pts in by_line.values() for p in pts]
    middle = (min(accs) + max(accs)) / 2
    # series that share a setting's ε and accuracy (recipes attacking one defense) get one label, at the top point;
    # a point with no score (NaN) is not drawn and gets none
    top: dict = {}
    for pts in by_line.values():
        for acc, ps, _, label, _part in pts:
            if not math.isnan(ps):
                top[(label, acc)] = max(top.get((label, acc), ps), ps)
    for (label, acc), ps in top.items():
        # right of a point in the left half, left of one in the right half: the rightmost label stays inside
        right = acc > middle
        ax.annotate(label, (acc, ps), fontsize=6, xytext=(-3 if right else 3, 3), textcoords="offset points",
                    ha="right" if right else "left")
    from matplotlib.ticker import MaxNLocator  # imported with pyplot, above

    ax.margins(x=0.08, y=0.12)  # room for the labels of the outermost points inside the frame
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # accuracies such as 0.1375 side by side overlap at 9
    ax.set_xlabel("test accuracy under the defense (utility)")
    ax.set_ylabel("attack PSNR (dB)")
    ax.grid(True, alpha=0.3)
    _legend(fig, [ax], keys, len(lines))
    trained = any("utility_epsilon" in r["metrics"] for r in kept)
    what = "ε of the attacked message / of the training" if trained else "ε of the attacked message"
    _title(fig, _with_count(f"privacy-utility (labels: {what}, Opacus RDP)", kept), kept, meta, 4.6)
    return save_both(fig, Path(folder) / "figures", "privacy_utility")


def _epsilon_label(metrics: dict) -> str:
    """A frontier point's label: the attacked message's ε and, where the point records it, the ε of the training its
    accuracy was bought with (``utility_epsilon``; over many steps, up to hundreds of times the message's); ∞ where
    there is no DP bound."""
    text = lambda v: "∞" if v is None else f"{v:.3g}"  # noqa: E731
    label = f"ε={text(metrics.get('epsilon'))}"
    return label + f" / {text(metrics['utility_epsilon'])}" if "utility_epsilon" in metrics else label


def phase_transition(folder, records: list[dict], meta: dict | None = None) -> list:
    """Mean PSNR and SSIM against b/m (m = C*H*W*batch unknowns), one line per series, std bars."""
    x_of = lambda r: (r["metrics"]["b"] / r["metrics"]["m"]) if r["metrics"].get("m") else None  # noqa: E731
    keys = series_keys(records, exclude=SIZE_KEYS)
    labels = {series_of(r, keys): _line_label(series_of(r, keys)) for r in records}
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6 + 0.25 * len(labels) / 3), layout="constrained")
    baselines, marked = False, set[str]()
    for ax, name, label in ((axes[0], "psnr", "PSNR (dB)"), (axes[1], "ssim", "SSIM")):
        colors = _draw_lines(ax, aggregate(records, x_of, name, line_of=lambda r: series_of(r, keys)), labels,
                             marked, metric=name)
        baselines |= _draw_baselines(ax, records, x_of, name, lambda r: series_of(r, keys), colors)
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ratios = sorted({x for r in records if (x := x_of(r)) is not None})
        if 0 < len(ratios) <= 12:  # the measured ratios as ticks, no crowded minor labels
            ax.set_xticks(ratios, [f"{x:.2g}" for x in ratios], fontsize=7, rotation=45)
            ax.minorticks_off()
        ax.set_xlabel("b / m  (sketch size / unknowns)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    if baselines:
        _baseline_entry(axes[0])
    _verdict_entries(axes[0], marked)
    _legend(fig, axes, keys, len(labels), (SIZE_BORDER_LABEL,))
    _title(fig, _with_count("phase transition in the sketch size", records), records, meta, 8.0)
    return save_both(fig, Path(folder) / "figures", "phase_transition")


def _batch_of(record: dict) -> int:
    """A record's batch size: its run's, 1 where a record stored before the setting existed names none."""
    return record["params"].get("batch_size") or 1


def batch_series_records(records: list[dict]) -> tuple[list[dict], int]:
    """(the records of the series that hold two batch sizes or more, how many series hold one), the series told
    apart as :func:`metrics_vs_batch` tells them (every grid key but the batch size): a series of one batch size is
    a lone point against B, and a grid whose batch size is one table's setting (a table of batches of four beside
    tables of one image) would otherwise draw every other series there, one legend entry each."""
    keys = series_keys(records, exclude=("batch_size",))
    sizes: dict = {}
    for r in records:
        sizes.setdefault(series_of(r, keys), set()).add(_batch_of(r))
    return [r for r in records if len(sizes[series_of(r, keys)]) > 1], sum(len(s) == 1 for s in sizes.values())


def metrics_vs_batch(folder, records: list[dict], meta: dict | None = None) -> list:
    """PSNR and label accuracy against the batch size B (log2 axis), one line per series, each point marked with
    b/(m·B): the message's numbers per unknown (below 1 the reconstruction cannot be unique)."""
    x_of = lambda r: float(_batch_of(r))  # noqa: E731
    fig, axes, names, keys, labels, width = _metric_panels(records, "batch_size", ("psnr", "label_acc"), 4.2, 3.6)
    baselines, marked = False, set[str]()
    for ax, name in zip(axes, names):
        lines = aggregate(records, x_of, name, line_of=lambda r: series_of(r, keys))
        colors = _draw_lines(ax, lines, labels, marked, metric=name)
        baselines |= _draw_baselines(ax, records, x_of, name, lambda r: series_of(r, keys), colors)
        if name == "psnr":
            marks: dict = {}  #: batch size -> (mean PSNR, b/(m B)) of each series there
            for pts in lines.values():
                for x, mean, _std, _n, part in pts:
                    ratio = [r["metrics"]["b"] / r["metrics"]["unknowns"] for r in part
                             if r["metrics"].get("b") and r["metrics"].get("unknowns")]
                    if ratio and math.isfinite(mean):
                        marks.setdefault(x, []).append((mean, f"{sum(ratio) / len(ratio):.2g}"))
            largest = max(marks, default=None)
            for x, found in marks.items():
                # the series at one B, highest first: the first label above its point, the next ones below theirs,
                # a line apart, so that points close together keep their labels apart; left of the last B's points
                # (the right edge)
                last = x == largest
                for k, (mean, text) in enumerate(sorted(found, key=lambda m: -m[0])):
                    ax.annotate(text, (x, mean), textcoords="offset points", xytext=(-4 if last else 3, 4 - 8 * k),
                                ha="right" if last else "left", va="bottom" if k == 0 else "top", fontsize=6,
                                color="dimgrey")
            ax.text(0.99, 0.99, "numbers at points: b/(m·B)", transform=ax.transAxes, ha="right", va="top",
                    fontsize=7, color="dimgrey")
        ax.set_xscale("log", base=2)
        sizes = sorted({x for pts in lines.values() for x, *_ in pts})
        if sizes:
            ax.set_xticks(sizes, [f"{x:g}" for x in sizes])
            ax.minorticks_off()
        ax.set_xlabel("batch size B")
        ax.set_ylabel({"psnr": "PSNR (dB)", "label_acc": "label accuracy"}[name])
        ax.grid(True, which="both", alpha=0.3)
    if baselines:
        _baseline_entry(axes[0])
    _verdict_entries(axes[0], marked)
    _legend(fig, axes, keys, len(labels))
    _title(fig, _with_count("attack against batch size", records), records, meta, width)
    return save_both(fig, Path(folder) / "figures", "metrics_vs_batch")


#: the figures :func:`sweep_figures` draws (each as .png and .pdf under figures/), by stem, in the order the report
#: shows them, with their captions
SWEEP_FIGURES = {
    "metrics_vs_strength": "Attack quality against defense strength (mean over repetitions, one std; dashed: baseline; "
                           "hollow: not rebuilt, a failure of the attack, not evidence of privacy)",
    "privacy_utility": "Privacy–utility frontier: attack PSNR against test accuracy under the defense, each point "
                       "labelled with the ε of the attacked message / of the training",
    "phase_transition": "Phase transition in the sketch size: quality against b/m (sketch size / unknowns)",
    "metrics_vs_batch": "Attack quality against batch size",
    "reconstruction_grid": "Reconstructions (the sweep's own figure)",
}


def sweep_figures(folder, records: list[dict] | None = None, notes: list | None = None) -> list:
    """Every sweep figure that the stored results support, as PNG and PDF under folder/figures/; returns the paths.

    ``notes``, when given, receives one short sentence per figure that shows
    less than the records hold (e.g. series left out of the reconstruction grid).
    """
    folder = Path(folder)
    if records is None:
        records = load_records(folder)
    paths = _draw(folder, records, notes) if records else []
    drawn = {Path(p).name for p in paths}
    for stem in SWEEP_FIGURES:  # a figure the results no longer support is not left beside them
        for suffix in (".png", ".pdf"):
            old = folder / "figures" / f"{stem}{suffix}"
            if old.name not in drawn:
                old.unlink(missing_ok=True)
    return paths


def _draw(folder: Path, records: list[dict], notes: list | None) -> list:
    """The figures the records support (:func:`sweep_figures`)."""
    meta = read_object(folder / "sweep.json") if (folder / "sweep.json").exists() else {}
    records = with_grid_values(records)
    grid_keys = {k for r in records for k in r["grid"]}
    varied = sorted(k for k in grid_keys if len({json.dumps(r["grid"].get(k), sort_keys=True) for r in records}) > 1)
    strength = _strength_key(records, meta)
    utility = any(r["metrics"].get("utility_acc") is not None for r in records)
    paths = []
    if strength and strength not in SIZE_KEYS and strength != "batch_size":
        paths += reconstruction_grid(folder, records, strength, meta, notes)
        paths += metrics_vs_strength(folder, records, strength, meta)
    if utility:
        paths += privacy_utility_frontier(folder, records, strength, meta)
    if "batch_size" in grid_keys:
        spanning, left = batch_series_records(records)
        if spanning:
            paths += metrics_vs_batch(folder, spanning, meta)
        if notes is not None and left:
            notes.append(f"the figure against the batch size leaves out {left} series that each hold one batch size"
                         if spanning else "no figure against the batch size: each series holds one batch size")
    if grid_keys & set(SIZE_KEYS):
        paths += phase_transition(folder, records, meta)
        if strength in SIZE_KEYS:
            paths += reconstruction_grid(folder, records, strength, meta, notes)
    if not (strength or utility or grid_keys & {"batch_size", *SIZE_KEYS}) and notes is not None:
        notes.append("the figures draw quality against a swept setting other than the model, the sketch kind and the "
                     f"repetitions ({', '.join(REPEAT_KEYS)}), or utility results; this grid varies "
                     f"{', '.join(varied) or 'nothing'}")
    return paths


__all__ = ["sweep_figures", "SWEEP_FIGURES", "reconstruction_grid", "metrics_vs_strength", "privacy_utility_frontier",
           "phase_transition", "metrics_vs_batch", "grid_series", "context", "MAX_GRID_BLOCKS", "BASELINE_OF",
           "BASELINE_LABEL", "SSIM_BORDER", "SSIM_BORDER_LABEL", "SIZE_BORDER_LABEL", "KEY_NAMES", "key_name",
           "NOT_REBUILT_LABEL", "SOME_REBUILT_LABEL", "rebuilt_count", "cell_label", "with_grid_values"]
