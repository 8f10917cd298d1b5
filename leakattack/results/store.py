"""The sweep store: ``results.jsonl`` (one JSON line per finished point) and its summaries.

A record is ``{"key", "index", "grid", "params", "metrics"}``.  Lines are
appended with one ``write`` + ``fsync`` by a single writer, so a kill leaves at
most one torn last line, which :func:`read_results` drops.  A *setting* is a
record's grid values without the repetition keys (seeds, image index): the
summary and every sweep figure average over repetitions of one setting, grouped
here and nowhere else.  A *series* is what one line (or one block of the
reconstruction grid) of a figure shows: the settings that agree on every grid
key that varies, apart from the repetitions and the figure's x axis.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Callable

from ..errors import SettingWarning, UserError
from ..rebuilt import FAILED_PARTS, NOT_REBUILT, REBUILT, batch_images, failed_counts, one_metric_ahead
from .io import atomic_write_bytes, quoted, to_jsonable

#: grid keys averaged over in summary.csv and the figures (repetitions, not settings)
REPEAT_KEYS = ("seed", "image_index", "model_seed", "sketch_seed", "noise_seed")
#: metrics summarised as mean and std per setting (baseline_*: the better of the attack's start and the data set's
#: mean image, which a reconstruction must beat to count as rebuilt; iip, iip_features: the share of images whose
#: nearest image of the data set is their truth, by pixels and by the victim's features, leakattack.metrics.identify;
#: absent from results stored before they existed)
SUMMARY_METRICS = ("psnr", "ssim", "lpips", "mse", "label_acc", "utility_acc", "epsilon", "epsilon_paper",
                   "utility_epsilon", "utility_epsilon_paper", "baseline_psnr", "baseline_ssim", "iip", "iip_features")
#: summary.csv's columns counting a setting's points not rebuilt by the part that failed (labels, objective, search)
FAILED_COLUMNS = tuple(f"failed_{part}" for part in FAILED_PARTS)
#: a point's numbers that the summary, the figures and the report read: each must be a number or null
POINT_NUMBERS = SUMMARY_METRICS + ("wall_s", "d", "b", "m")
#: summary.csv's columns after the metrics' means and standard deviations, in this order where present
SHARE_COLUMNS = ("rebuilt", "one_metric_ahead", "rebuilt_images") + FAILED_COLUMNS
#: the columns summary.csv computes beside a setting's grid values (a [grid] placeholder of one of these names would
#: lose its values to them): the point's victim and message, the count of points, the metrics' means and standard
#: deviations and the shares
COMPUTED_COLUMNS = (("model", "sketch", "defense", "d", "b", "m", "b_over_m", "n", "psnr_unscored")
                    + tuple(f"{name}_{part}" for name in SUMMARY_METRICS for part in ("mean", "std")) + SHARE_COLUMNS)
#: the message's and the training's epsilons: a point whose privacy report (``privacy_note``) records one of them as
#: null has no bound (no noise, or nothing bounds what the noise is added to), and summary.csv writes ``inf``; a paper
#: epsilon that is null beside a bounded epsilon is one the paper has no formula for (Laplace noise), left empty
EPSILON_METRICS = ("epsilon", "epsilon_paper", "utility_epsilon", "utility_epsilon_paper")


def read_results(path: Path, repair: bool = False) -> list[dict]:
    """The finished points in results.jsonl; a torn or unparsable line, or a record without its key, metrics and
    parameters (model, sketch), is dropped (and, with ``repair``, removed from the file, with a SettingWarning that
    counts the lines removed other than an unterminated last one, which a process killed mid-append leaves)."""
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    good, lines, lost = [], [], 0
    parts = raw.split(b"\n")
    for i, line in enumerate(parts):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:  # torn JSON, or bytes that are not UTF-8 (UnicodeDecodeError)
            rec = None
        if (isinstance(rec, dict) and "key" in rec and isinstance(rec.get("metrics"), dict)
                and isinstance(rec.get("grid", {}), dict) and isinstance(rec.get("params"), dict)
                and {"model", "sketch"} <= rec["params"].keys()):  # what every reader of a point needs
            good.append(rec)
            lines.append(line)
        elif i < len(parts) - 1:  # not the unterminated last line a process killed mid-append leaves
            lost += 1
    fixed = b"".join(ln + b"\n" for ln in lines)
    if repair and fixed != raw:
        atomic_write_bytes(path, fixed)
        if lost:
            warnings.warn(f"{lost} line{'s' if lost != 1 else ''} of '{path}' {'were' if lost != 1 else 'was'} not "
                          "a finished point of a sweep (not JSON, or a record without its key, metrics or "
                          "parameters) and removed from it; a point such a line held runs again", SettingWarning,
                          stacklevel=2)
    return good


def stored_lines(path: Path) -> int:
    """How many lines of results.jsonl hold anything (finished points, and lines that are not: torn, edited)."""
    path = Path(path)
    return sum(1 for ln in path.read_bytes().split(b"\n") if ln.strip()) if path.exists() else 0


def warn_torn(path: Path, finished: int, stacklevel: int = 2) -> None:
    """One SettingWarning counting the lines of results.jsonl that are not one of its ``finished`` points
    (:func:`read_results` drops them), where there are any: what reads the sweep (its figures, a report) left them
    out."""
    torn = stored_lines(path) - finished
    if torn:
        warnings.warn(f"{torn} line{'s' if torn != 1 else ''} of '{path}' that {'are' if torn != 1 else 'is'} "
                      f"not a finished point (torn, or edited) {'were' if torn != 1 else 'was'} left out",
                      SettingWarning, stacklevel=stacklevel + 1)


def append_text(fd: int, line: str) -> None:
    """One line (ending in its newline), written whole (a short write() is followed by one for the rest; a disk
    that fills raises OSError), then fsync: a kill or a full disk leaves at most one torn last line."""
    view = memoryview(line.encode())
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def append_line(fd: int, record: dict) -> None:
    """One JSON line of ``record`` (non-finite numbers as null) by :func:`append_text`."""
    append_text(fd, json.dumps(to_jsonable(record), sort_keys=False) + "\n")


def load_records(out: Path, plan=None, key_of: Callable[[dict], str] | None = None) -> list[dict]:
    """Finished points in ``out/results.jsonl``, deduplicated by key.

    Without ``plan``: the points of the plan the folder's ``sweep.json`` names (:func:`planned_keys`), in its
    order, ``index`` renumbered; where it names none, all, ordered by their stored index.  With ``plan`` (anything
    whose ``points`` are dicts with a ``"key"``): the plan's points that are
    stored, in plan order, ``index`` renumbered.  ``key_of(params)`` recomputes
    a stored record's key (so records written under older defaults still
    match); without it the stored key is used.  Each point's ``grid`` is the plan's (``sweep.json``'s ``grids``
    where it records them), so a point stored by a smaller grid reads with the keys the grid has grown.
    """
    stored = read_results(Path(out) / "results.jsonl")
    if plan is None:
        meta = _recorded_plan(out)
        keys, grids = planned_keys(out, meta), _planned_grids(meta)
    else:
        keys, grids = [p["key"] for p in plan.points], [p.get("grid") for p in plan.points]
    if keys is None:
        return sorted({r["key"]: r for r in stored}.values(), key=lambda r: r.get("index", 0))
    recs = {key_of(r["params"]) if key_of is not None and "params" in r else r["key"]: r for r in stored}
    if grids is None or len(grids) != len(keys):
        grids = [None] * len(keys)
    return [dict(recs[k], index=i, **({"grid": g} if isinstance(g, dict) else {}))
            for i, (k, g) in enumerate(zip(keys, grids)) if k in recs]


def checked_points(out: Path, records: list[dict]) -> list[dict]:
    """``records`` (read from ``out/results.jsonl``), refused in one sentence where a point's metric is not a number
    or its verdict is neither rebuilt nor not rebuilt; a number that is not finite (NaN) reads as null, as a run stores
    it."""
    for r in records:
        m = r["metrics"]
        for key in POINT_NUMBERS:
            v = m.get(key)
            if v is not None and not is_number(v):
                raise UserError(f"'{Path(out) / 'results.jsonl'}' holds a point ({r['key']}) whose {key} is "
                                f"{quoted(v)}, not a number")
            if v is not None and not math.isfinite(v):
                m[key] = None
        if m.get("verdict") not in (None, REBUILT, NOT_REBUILT):
            raise UserError(f"'{Path(out) / 'results.jsonl'}' holds a point ({r['key']}) whose verdict is "
                            f"{quoted(m['verdict'])}, neither '{REBUILT}' nor '{NOT_REBUILT}'")
    return records


def is_number(v) -> bool:
    """An int or a float (not a bool), as JSON stores a number."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _recorded_plan(out: Path) -> dict:
    """The folder's ``sweep.json`` as an object ({} where it is missing or unreadable)."""
    try:
        with open(Path(out) / "sweep.json", encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def planned_keys(out: Path, meta: dict | None = None) -> list[str] | None:
    """The point keys of the plan a sweep folder last ran (``sweep.json``'s ``keys``, in grid order; ``meta``: that
    file already read); None where the folder records none (a sweep written before they were recorded: all its
    stored points count)."""
    keys = (_recorded_plan(out) if meta is None else meta).get("keys")
    return [str(k) for k in keys] if isinstance(keys, list) else None


def _planned_grids(meta: dict) -> list | None:
    """Each planned point's grid values (``sweep.json``'s ``grids``, read as ``meta``, in the order of its
    ``keys``); None where the folder records none."""
    grids = meta.get("grids")
    return grids if isinstance(grids, list) else None


def unplanned(out: Path, records: list[dict]) -> int:
    """How many distinct points ``out/results.jsonl`` stores beyond ``records`` (those of an earlier, larger plan)."""
    return max(0, len({r["key"] for r in read_results(Path(out) / "results.jsonl")}) - len(records))


def default_strength(grid_keys) -> str | None:
    """The grid key drawn as "defense strength" when none is named: the first that is neither a repetition, sketch nor
    model."""
    return next((k for k in grid_keys if k not in REPEAT_KEYS + ("sketch", "model")), None)


def as_ran(rec: dict) -> dict:
    """A point's parameters as its run ran them: a protocol's point sends the protocol's message, so its ``sketch`` is
    the run's only where the protocol reads one (fedavg sends the whole update: ``none``; a protocol with a sketch of
    its own, such as FedSKETCH's count sketch, ``<protocol>'s own``), and its ``defense`` names the protocol's own
    Gaussian noise where it adds some (sketched-dp, privsgd).  Other points' parameters as they are."""
    params = rec.get("params", {})
    name = params.get("protocol")
    if not name:
        return params
    from targets.protocols import protocol_class  # here: the protocols import the run's modules, which import this

    try:
        cls = protocol_class(name)
    except (ValueError, KeyError):
        return params
    out = dict(params)
    if "sketch" not in cls.reads:
        m = rec.get("metrics", {})
        out["sketch"] = "none" if m.get("b") is not None and m.get("b") == m.get("d") else f"{name}'s own"
    if "dp_epsilon" in cls.reads:
        noise = f"{name}'s own Gaussian noise"
        own = params.get("defense")  # "none" is no defense, as "" is
        out["defense"] = f"{own} + {noise}" if own and own != "none" else noise
    return out


def setting_of(rec: dict) -> tuple:
    """The grid values that define a setting (repetition keys left out), sorted by key, so that ``[[grid]]`` tables
    that list the same keys in another order give one setting."""
    return tuple(sorted((k, json.dumps(v)) for k, v in rec["grid"].items() if k not in REPEAT_KEYS))


def group_settings(records: list[dict]) -> dict[tuple, list[dict]]:
    """Records by setting, settings in order of first appearance."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(setting_of(r), []).append(r)
    return groups


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation; the std of a single value is undefined (None)."""
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return mean, std


def summary_value(metrics: dict, name: str) -> float | None:
    """A point's ``name`` as summary.csv counts it: a number, None where it is not recorded, and ``inf`` for an
    epsilon (:data:`EPSILON_METRICS`) that the point's privacy report records as null: no DP bound, as a run's
    summary line says ``ε ∞`` (the report is there, so the value is known, not missing).  A paper epsilon that is
    null while the point's own epsilon is a number, or beside a δ of 0 (pure DP: Laplace noise, with or without a
    bound), is not recorded (None): the paper has no formula for that noise."""
    v = metrics.get(name)
    if v is None and name in EPSILON_METRICS and name in metrics and "privacy_note" in metrics:
        if name.endswith("_paper") and (metrics.get(name.removesuffix("_paper")) is not None
                                        or metrics.get("delta") == 0):
            # a bound the paper has no formula for, or the defense's noise pure DP (Laplace, δ 0; the training's
            # utility epsilons are of the same defense), bounded or not
            return None
        return math.inf
    return None if v is None else float(v)


def _unscored(metrics: dict) -> bool:
    """Whether a point records a PSNR that is not a number (null: a non-finite reconstruction)."""
    return "psnr" in metrics and metrics["psnr"] is None


def summarize(records: list[dict]) -> list[dict]:
    """One row per setting: its grid values, n, ``psnr_unscored`` (where some point's PSNR is not a number: how many
    of the setting's n, which the means leave out), mean/std of each metric present (sample std, None for n = 1; an
    epsilon without a bound is ``inf``, :func:`summary_value`, its std None), ``rebuilt``, the share of its points
    whose verdict is rebuilt (left out when no point has a verdict), ``one_metric_ahead``, the share whose verdict
    is not rebuilt while one of PSNR and SSIM is clearly above its baseline
    (:func:`leakattack.rebuilt.one_metric_ahead`: parts of the image may show), on batches ``rebuilt_images``,
    the share of
    their images rebuilt on their own (:func:`leakattack.rebuilt.batch_images`: a point stored before per-image
    verdicts counts as one image, by its verdict; left out where no point is a batch that has them), and
    ``failed_labels``, ``failed_objective`` and ``failed_search``, how many of its points that were not rebuilt
    failed in their label reading, their objective and their search (:func:`leakattack.rebuilt.failed_kind`; left
    out when none of them tells)."""
    rows = []
    # a column of images rebuilt on their own where any point is a batch with per-image verdicts (empty in the rows
    # of single images)
    batches = batch_images(r["metrics"] for r in records) is not None
    # a column of the points whose PSNR is not a number (a non-finite reconstruction: a run stores null), which the
    # mean leaves out while n counts them, where any point has one
    unscored = any(_unscored(r["metrics"]) for r in records)
    for setting, recs in group_settings(records).items():
        first = recs[0]
        row = {k: v for k, v in first["grid"].items() if k not in REPEAT_KEYS}  # in the first point's grid order
        # the run's own words beside them; a grid key keeps its value as the grid gives it (a defense written
        # otherwise than the run records it, "clip:C=1" against "clip:C=1.0@before_sketch")
        ran = as_ran(first)  # a protocol's point: the protocol's sketch and noise
        row.update({k: v for k, v in dict(
            model=first["params"]["model"], sketch=ran["sketch"],
            defense=ran["defense"] if ran.get("defense") != first["params"].get("defense")  # the protocol's noise
            else first["metrics"].get("defense", first["params"].get("defense", "")),
            d=first["metrics"].get("d"), b=first["metrics"].get("b"), m=first["metrics"].get("m"),
            b_over_m=(first["metrics"]["b"] / first["metrics"]["m"])
            if first["metrics"].get("m") and first["metrics"].get("b") is not None else None).items()
            if k not in row}, n=len(recs))
        if unscored:
            row["psnr_unscored"] = sum(_unscored(r["metrics"]) for r in recs)
        for name in SUMMARY_METRICS:
            vals = [v for r in recs if (v := summary_value(r["metrics"], name)) is not None]
            if not vals:
                continue
            unbounded = any(math.isinf(v) for v in vals)
            row[f"{name}_mean"], row[f"{name}_std"] = (math.inf, None) if unbounded else mean_std(vals)
        verdicts = [r["metrics"].get("verdict") for r in recs if r["metrics"].get("verdict") is not None]
        if verdicts:  # the share of the repetitions whose image was rebuilt (metrics.verdict)
            row["rebuilt"] = sum(v == REBUILT for v in verdicts) / len(verdicts)
            # and of those not rebuilt while one metric is clearly above its baseline: images that may show
            row["one_metric_ahead"] = sum(one_metric_ahead(r["metrics"]) is not None for r in recs) / len(verdicts)
        if batches:  # the share of the images rebuilt on their own, which a batch's verdict on its means can hide
            images = batch_images(r["metrics"] for r in recs)
            row["rebuilt_images"] = None if images is None else images[0] / images[1]
        failed = failed_counts(r["metrics"] for r in recs)
        if sum(failed.values()):
            row.update(zip(FAILED_COLUMNS, failed.values(), strict=True))
        rows.append(row)
    # one column order whatever the data: a metric that the first setting lacks (null at every one of its points)
    # keeps its place among the metrics instead of following the shares
    columns = list(dict.fromkeys(k for r in rows for k in r))
    metrics = [f"{name}_{part}" for name in SUMMARY_METRICS for part in ("mean", "std")]
    columns = ([k for k in columns if k not in metrics and k not in SHARE_COLUMNS]
               + [k for k in metrics if k in columns] + [k for k in SHARE_COLUMNS if k in columns])
    return [{k: r.get(k) for k in columns} for r in rows]


def series_keys(records: list[dict], exclude=()) -> list[str]:
    """The grid keys that tell one series from another: they vary across ``records`` and are neither
    repetitions nor in ``exclude`` (the figure's x axis), in the order the grid names them."""
    keys = list(dict.fromkeys(k for r in records for k in r["grid"]))
    keys = [k for k in keys if k not in REPEAT_KEYS and k not in exclude]
    return [k for k in keys if len({json.dumps(r["grid"].get(k), sort_keys=True) for r in records}) > 1]


def series_of(rec: dict, keys: list[str]) -> tuple:
    """A record's series: its values of ``keys`` (from :func:`series_keys`) as ``((key, JSON text), ...)``, hashable."""
    return tuple((k, json.dumps(rec["grid"].get(k), sort_keys=True)) for k in keys)


def series_label(series: tuple) -> str:
    """``key=value, key=value`` for a legend or a block heading ("" for the only series)."""
    return ", ".join(f"{k}={_short(json.loads(v))}" for k, v in series)


def _short(v) -> str:
    if isinstance(v, float) and v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4):
        return f"{v:g}"
    if v is None or v == [] or v == "":  # a key a grid leaves out, an empty list (no priors) or text (no defense)
        return "none"
    if isinstance(v, list) and all(isinstance(e, str) for e in v):
        return "+".join(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def aggregate(records: list[dict], x_of: Callable[[dict], float | None], metric: str,
              line_key: str = "sketch", line_of: Callable[[dict], object] | None = None) -> dict:
    """{line: [(x, mean, std, n, records)]} sorted by x: ``metric`` over the repetitions of each setting.

    One line per value of ``line_of(record)`` (default: ``params[line_key]``);
    records whose ``x_of`` or ``metric`` is None are left out; ``std`` is None
    for a single repetition.
    """
    line_of = line_of or (lambda r: r["params"].get(line_key))
    kept = [r for r in records if x_of(r) is not None and r["metrics"].get(metric) is not None]
    lines: dict = {}
    for recs in group_settings(kept).values():
        parts: dict = {}
        for r in recs:
            parts.setdefault((line_of(r), x_of(r)), []).append(r)
        for (line, x), part in parts.items():
            mean, std = mean_std([float(r["metrics"][metric]) for r in part])
            lines.setdefault(line, []).append((x, mean, std, len(part), part))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in lines.items()}
