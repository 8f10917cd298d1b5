"""A sweep folder's section of the report: its headline, setting, summary table, figures and grid of
reconstructions."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from defenses.accounting.analysis import paper_epsilon_holds

from ...errors import UserError
from ...metrics import (
    NOT_REBUILT,
    REBUILT,
    failed_counts,
    identified_line,
)
from ...rebuilt import (
    ahead_words,
    batch_images,
    batch_images_words,
)
from ...results import (
    FAILED_COLUMNS,
    REPEAT_KEYS,
    as_ran,
    checked_points,
    default_strength,
    group_settings,
    is_number,
    load_point_images,
    load_records,
    read_object,
    series_label,
    series_of,
    summarize,
    unplanned,
)
from ...results.io import csv_cell
from ...results.store import read_results, summary_value, warn_torn
from ..sweep import (
    MAX_GRID_BLOCKS,
    SWEEP_FIGURES,
    context,
    first_image,
    grid_series,
    key_name,
    strength_level,
    with_grid_values,
)
from .shared import (
    _SKETCH_WORDS,
    FAILURE_NOTE,
    NOT_A_BOUND_MARK,
    NOT_A_BOUND_NOTE,
    NOT_RECORDED,
    _cell,
    _dp_protocol,
    _e,
    _figure,
    _heading,
    _int,
    _kv,
    _machine_text,
    _name,
    _num,
    _paper_rule,
    _percent,
    _protocol_class,
    _score,
    _seconds,
    _threat,
    _uri,
    image_png,
    shown_width,
)

#: the grid of a sweep's reconstructions shows at most this many images (columns) and strengths (rows) per block
MAX_GRID_COLUMNS = 8
MAX_GRID_ROWS = 12
#: the sweep's d, b row lists at most this many sketch sizes b of one d, else their range
MAX_LISTED = 12
#: summary.csv metrics, by stem, that read ∞ where a defended setting's record says there is no DP guarantee
INFINITE_WITHOUT_GUARANTEE = ("epsilon", "epsilon_paper", "utility_epsilon", "utility_epsilon_paper")
#: summary.csv metrics, by stem, of the paper's formula: a DP guarantee only where its conditions hold
#: (:func:`defenses.accounting.analysis.paper_epsilon_holds`), marked :data:`NOT_A_BOUND_MARK` elsewhere
PAPER_EPSILONS = ("epsilon_paper", "utility_epsilon_paper")
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

#: a summary table of at least this many columns is set in a smaller type (``table.num.wide``)
WIDE_COLUMNS = 17


def _sweep_threat(records: list[dict]) -> str:
    """The threat model of a sweep's points: what all share, then what varies from point to point."""
    ran = [as_ran(r) for r in records]  # a protocol's point: the protocol's sketch
    each = [_threat(p, str(p.get("sketch"))).split("; ") for p in ran]
    # what the attacker knows of a sketch is said of the points that have one: an unsketched point has no seed
    sketched = [e for p, e in zip(ran, each) if str(p.get("sketch")) != "none"]
    of_sketch = [w for w in dict.fromkeys(w for e in sketched for w in e) if w.startswith(_SKETCH_WORDS)]
    shared = [w for w in each[0] if all(w in e for e in each)]
    if len(sketched) < len(each):
        shared += [f"{w} (the points with a sketch)" for w in of_sketch if all(w in e for e in sketched)]
    varies = list(dict.fromkeys(w for e in each for w in e if w not in shared and not (
        w in of_sketch and all(w in e for e in sketched))))
    if not varies:
        return "; ".join(shared)
    return "; ".join(shared) + ("; " if shared else "") + "varying from point to point: " + " | ".join(varies)


# -------------------------------------------------------------- sweep folders

def _sweep_section(folder: Path, anchor: str) -> tuple[str, str, str]:
    finished = len(read_results(folder / "results.jsonl"))
    if finished:  # beside finished points (none at all has its own warning), as figures says it
        warn_torn(folder / "results.jsonl", finished, stacklevel=2)
    records = checked_points(folder, load_records(folder))
    meta = read_object(folder / "sweep.json") if (folder / "sweep.json").is_file() else {}
    stored = stored_summary(folder)
    current = stored is not None and summary_matches(stored, records)
    head, cls, sentence = _sweep_headline(records, meta.get("points"))
    parts = [f'<section class="item sweep" id="{anchor}"><h2>Sweep: {_e(_name(folder))}</h2>',
             f'<p class="path">{_e(folder)}</p>', f'<p class="headline {cls}">{_e(sentence)}</p>']
    parts.append("<h3>Setting</h3>" + _kv(_sweep_setting(folder, records, meta)))
    elsewhere = unplanned(folder, records) if not records else 0  # stored points of another plan
    parts.append("<h3>Summary</h3>" + _summary_table(records, meta, stored if current else None,
                                                     _summary_note(stored, records, current, elsewhere), elsewhere))
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


def beyond_finished(planned, n: int) -> int | None:
    """sweep.json's count of planned points where it is one and holds more than the ``n`` finished, else None."""
    return planned if isinstance(planned, int) and not isinstance(planned, bool) and planned > n else None


def _sweep_headline(records: list[dict], planned=None) -> tuple[str, str, str]:
    """(short tag, CSS class, the headline sentence) of a sweep of ``planned`` points (sweep.json's count), which
    says so when some of them have no result."""
    verdicts = [r["metrics"].get("verdict") for r in records if r["metrics"].get("verdict") is not None]
    n = len(records)
    planned = beyond_finished(planned, n)
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
    if counts is not None and counts[0] < counts[1] and (k or counts[0]):  # not where nothing was rebuilt at all
        images, share = f"; {batch_images_words(counts)}", f" ({counts[0]} of {counts[1]} images)"
    tag = share + tag
    if k == j:
        return "rebuilt" + tag, "rebuilt" if not images else "mixed", (
            f"Rebuilt at every judged point ({k} of {j} judged{'; ' + left if left else ''}{images}).")
    unfinished = f" Unfinished: {left}." if left else ""
    if k == 0:
        return "not rebuilt" + tag, "failed" if not counts or not counts[0] else "mixed", (
            f"Not rebuilt at any of the {j} judged points at this budget ({FAILURE_NOTE}{images})."
            f"{unfinished}{_failed_parts(records)}{_identified_points(records)}")
    return f"rebuilt at {k} of {j} points{tag}", "mixed", (
        f"Rebuilt at {k} of {j} judged points; not rebuilt at {j - k} at this budget "
        f"({FAILURE_NOTE}{images}).{unfinished}{_failed_parts(records)}{_identified_points(records)}")


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
    blocks = grids if isinstance(grids, list) else [grids]
    if not all(isinstance(b, dict) for b in blocks):  # a hand-edited file: one sentence, not a traceback
        raise UserError(f"'{folder / 'sweep.json'}' is unreadable: its grid is not the table (or list of tables) a "
                        "sweep writes")
    for i, block in enumerate(blocks):
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
    planned = meta.get("points")
    rows.append(("points", f"{len(records)} finished" + (f" of {planned} planned" if planned is not None else
                                                         " (the number planned is not recorded)")
                 + (f"; {extra} more stored by an earlier plan of this folder "
                    f"{'is' if extra == 1 else 'are'} left out" if extra else "")))
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
        for share in SHARE_COLUMNS:
            v = cells.get(share)
            if v is not None and not (isinstance(v, (int, float)) and 0 <= v <= 1):
                raise UserError(f"'{path}' is unreadable: line {i} has {share} = {row[share]!r}, not a share "
                                "between 0 and 1")
        rows.append(cells)
    return rows


#: summary.csv's columns that hold a share of a setting's points (or images), each in [0, 1]
SHARE_COLUMNS = ("rebuilt", "rebuilt_images", "one_metric_ahead")


def _settings(records: list[dict]) -> dict[tuple, list[dict]]:
    """The records by setting, their grid values read as summary.csv writes them (:func:`with_grid_values`: an
    identity sketch's b/d is 1 whatever its grid says), so that its rows and these groups line up."""
    return group_settings(with_grid_values(records))


def summary_matches(rows: list[dict], records: list[dict]) -> bool:
    """Whether summary.csv's rows summarise these records: a row per setting, in order, with the setting's grid
    values and its count of finished points (a summary of an earlier plan's settings, left where drawing was cut
    short, can have as many rows and points), grouped as it groups them (:func:`_settings`)."""
    groups = _settings(records)
    if not records or len(rows) != len(groups):
        return False
    return all(row["n"] == len(recs) and all(row.get(k) == _as_stored(v) for k, v in setting)
               for row, (setting, recs) in zip(rows, groups.items()))


def _as_stored(value_json: str):
    """A grid value (JSON text) as summary.csv writes it and :func:`stored_summary` reads it back."""
    return _cell(str(csv_cell(json.loads(value_json))))


def _summary_note(stored: list[dict] | None, records: list[dict], current: bool, others: int = 0) -> str:
    """What the summary table is made from, where it is not the sweep's own summary.csv (``others``: the points
    results.jsonl stores of another plan than sweep.json's)."""
    if not records:
        if not stored:
            return ""
        return ("summary.csv, written from points of another plan than sweep.json's, is left out." if others else
                "summary.csv, written from points it no longer holds, is left out.")
    if current:
        return ""
    if stored is None:
        return "summary.csv not found: the table summarises results.jsonl."
    counted = sum(r["n"] for r in stored)
    if counted == len(records) and len(stored) == len(_settings(records)):
        return ("summary.csv is left out: its rows are not the settings of the points results.jsonl holds (an "
                "earlier grid's, left where drawing was cut short); the table summarises results.jsonl.")
    return (f"summary.csv is left out: it counts {counted} point{'s' if counted != 1 else ''} in {len(stored)} "
            f"setting{'s' if len(stored) != 1 else ''}, not the {len(records)} finished points results.jsonl holds; "
            "the table summarises results.jsonl.")


def _summary_table(records: list[dict], meta: dict, stored: list[dict] | None, told: str = "",
                   others: int = 0) -> str:
    """The summary table: ``stored`` (summary.csv's rows, where they match the records), else the records'
    own :func:`summarize`, with ``told`` (what it is made from) before it (``others``: the points results.jsonl
    stores of another plan than sweep.json's)."""
    if not records:
        held = (f"no finished point of the plan sweep.json names ({others} of another plan are left out)" if others
                else "no finished point")
        return f'<p class="note">No summary: results.jsonl holds {held}.{" " + _e(told) if told else ""}</p>'

    rows = stored if stored is not None else summarize(with_grid_values(records))
    columns = list(dict.fromkeys(k for r in rows for k in r))
    stems = list(dict.fromkeys(c[:-5] for c in columns if c.endswith("_mean")))
    shares = ("rebuilt", "rebuilt_images", "one_metric_ahead") + FAILED_COLUMNS
    plain = [c for c in columns if not c.endswith(("_mean", "_std")) and c not in shares]
    shared = [c for c in plain if len({json.dumps(r.get(c)) for r in rows}) == 1 and len(rows) > 1]
    template = (meta.get("base") or {}).get("defense")
    templated = "defense" in plain and "defense" not in shared and isinstance(template, str) and "{" in template
    varying = [c for c in plain if c not in shared and not (templated and c == "defense")]
    stems = [s for s in stems if any(r.get(f"{s}_mean") is not None for r in rows)]
    groups = list(_settings(records).values())  # as summary.csv's rows group them
    unbounded = [all(_no_guarantee(p["metrics"]) for p in g) for g in groups] if len(groups) == len(rows) else \
        [False] * len(rows)
    if any(unbounded) and "epsilon" not in stems:  # every setting's ε infinite: an older summary has no ε column
        stems.append("epsilon")
    # a grid key or computed column as the figures name it (sketch size b, b/m), its summary.csv name on hover
    head = "".join(f'<th title="{_e(c)}">{_heading(key_name(c))}</th>' for c in varying) + "".join(
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
    said_unguaranteed: set = set()  #: the protocols' sentences on a paper ε that bounds none of their messages
    protocols = any(_dp_protocol(r.get("params", {}).get("protocol")) for r in records)  # ε over its rounds 1..t
    for i, r in enumerate(rows):
        cells = "".join(f"<td class=key>{_e(_short(r.get(c)))}</td>" for c in varying)
        for s in stems:
            mean, std = r.get(f"{s}_mean"), r.get(f"{s}_std")
            digits, kind = METRIC_FORMAT.get(s, (4, "g"))
            # a spread of rounding error (ε is the same at every point of a setting: 2e-15) reads as none
            flat = isinstance(std, float) and isinstance(mean, float) and abs(std) <= 1e-9 * abs(mean)
            spread = f" <span class=v>± {'0' if flat else _num(std, 2, 'g')}</span>" if std is not None else ""
            # an older summary.csv left an ε without a bound empty: ∞ where each point's is, as summary.csv counts it
            # now (a Laplace setting's paper ε stays empty: the paper has no formula for it)
            infinite = s in INFINITE_WITHOUT_GUARANTEE and (mean == math.inf or (mean is None and unbounded[i] and all(
                summary_value(p["metrics"], s) == math.inf for p in groups[i])))
            said_infinite |= infinite
            # a paper ε outside the paper's conditions, at the setting's mean or at any of its points
            points = [p["metrics"].get(s) for p in groups[i]] if len(groups) == len(rows) else []
            # a protocol's paper ε is marked where its formula bounds only below 1 (sketched-dp's, a defense's), or
            # where it bounds no message the protocol sends (privsgd's); the row's protocol where its points are not
            # at hand
            names = [p.get("params", {}).get("protocol") for p in groups[i]] if points else [r.get("protocol")]
            rules = {n: _paper_rule(n, s) for n in names}
            unguaranteed = {_protocol_class(n).paper_epsilon_unguaranteed for n, rule in rules.items()
                            if rule == "never"}
            numbers = [v for v in [mean, *points] if is_number(v) and math.isfinite(v)]
            loose = s in PAPER_EPSILONS and not infinite and bool(numbers) and (bool(unguaranteed) or (
                "below one" in rules.values() and any(not paper_epsilon_holds(v) for v in numbers)))
            said_unguaranteed |= unguaranteed
            said_not_a_bound |= loose and not unguaranteed  # the note on Lemma H.7's range
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
            cells += f"<td>{'–' if counts[0] is None else _e(' / '.join(map(str, counts)))}</td>"
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
               "added to" + (", or a DP protocol's accountant reaches δ = 1 over its rounds" if protocols else "")
               + " (each point's privacy_note says which)." if said_infinite else "")
            + (" " + _e(NOT_A_BOUND_NOTE) if said_not_a_bound else "")
            + "".join(f" {NOT_A_BOUND_MARK}: {_e(t)}." for t in sorted(said_unguaranteed))
            + (" Rebuilt, one metric ahead: the share of points not rebuilt because PSNR or SSIM fell short of "
               "its baseline's margin while the other is clearly above its baseline, so parts of the image may show: "
               "look at their reconstructions." if ahead else "") + "</p>")
    # from WIDE_COLUMNS on, a smaller type and padding keep the table within the page (18 columns: a sweep over two
    # recipes with their step budgets beside the defense's strength and the sketch)
    wide = " wide" if head.count("<th") >= WIDE_COLUMNS else ""
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
    over = (" (a DP protocol's point: over its rounds 1..t)"
            if any(_dp_protocol(r.get("params", {}).get("protocol")) for r in records) else "")
    return f" ε of each message{over}: {'; '.join(words)}."


def _no_guarantee(m: dict) -> bool:
    """Whether a defended point's record says its ε is infinite: no ``epsilon`` beside a ``privacy_note`` (no Gaussian
    noise, or noise with no bound on what it is added to: :func:`defenses.accounting.message_privacy`)."""
    return bool(m.get("defense")) and m.get("epsilon") is None and bool(m.get("privacy_note"))


def _index(record: dict):
    """A point's image index as a grid column's key (a hand-edited list or table as its JSON text)."""
    v = record["params"].get("image_index", 0)
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def _recon_grid(folder: Path, records: list[dict], meta: dict) -> str:
    """The sweep's reconstructions as an HTML grid: one block per series, a row per strength (the truth first), a
    column per image; each cell with its PSNR, SSIM and verdict in words."""
    if not (folder / "points").is_dir():
        return ""
    strength = meta.get("strength") or default_strength(list(dict.fromkeys(k for r in records for k in r["grid"])))
    records = with_grid_values(records)

    def level(r: dict) -> str:  # a sweep of images, seeds, sketches or models alone: one row of reconstructions
        return strength_level(r, strength) if strength is not None else "null"

    keys, shown, left = grid_series(records, strength)
    blocks = []
    for series in shown:
        recs = [r for r in records if series_of(r, keys) == series]
        first = {k: json.dumps(recs[0]["grid"].get(k)) for k in REPEAT_KEYS if k != "image_index"}
        recs = [r for r in recs if all(json.dumps(r["grid"].get(k)) == v for k, v in first.items())]
        images = list(dict.fromkeys(_index(r) for r in recs))[:MAX_GRID_COLUMNS]
        levels = sorted(dict.fromkeys(level(r) for r in recs), key=_level_key)
        cut = len(levels) > MAX_GRID_ROWS
        levels = levels[:MAX_GRID_ROWS]
        cell: dict = {}
        truth: dict = {}
        for r in recs:
            key = (level(r), _index(r))
            pt = folder / "points" / f"{r['key']}.pt"
            if key[0] in levels and key[1] in images and key not in cell and pt.is_file():
                t = load_point_images(pt)
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
                tds.append(f"<td>{_img_cell(x)}<div class=cap>{_score(m.get('psnr'), 1, 'psnr' in m)} dB · SSIM "
                           f"{_score(m.get('ssim'), 2, 'ssim' in m)}</div>{tag}</td>")
            label = (f"{key_name(strength)} = {_short(json.loads(lv))}" if strength is not None else
                     "reconstruction")
            rows.append(f"<tr><th>{_e(label)}</th>{''.join(tds)}</tr>")
        title = series_label(series) or "all points"
        batch = max(c[2] for c in cell.values())
        notes = [f"first {MAX_GRID_ROWS} values of {key_name(strength or '')} shown" if cut else "",
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
    """Numbers ascending, then the other levels in the order they come in (the grid's; the sort is stable)."""
    v = json.loads(text)
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    return (not number, v if number else 0)


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


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if v is None or v == "":  # an empty cell of summary.csv (no defense) reads as the records' None does
        return "–"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)
