"""The sweep store: ``results.jsonl`` (one JSON line per finished point) and its summaries.

A record is ``{"key", "index", "grid", "params", "metrics"}``.  Lines are
appended with one ``write`` + ``fsync`` by a single writer, so a kill leaves at
most one torn last line, which :func:`read_results` drops.  A *setting* is a
record's grid values without the repetition keys (seeds, image index): the
summary and every sweep figure average over repetitions of one setting, grouped
here and nowhere else.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

from .io import atomic_write_bytes, to_jsonable

#: grid keys averaged over in summary.csv and the figures (repetitions, not settings)
REPEAT_KEYS = ("seed", "image_index", "model_seed", "sketch_seed", "noise_seed")
#: metrics summarised as mean and std per setting
SUMMARY_METRICS = ("psnr", "ssim", "mse", "label_acc", "utility_acc", "epsilon", "epsilon_paper")


def read_results(path: Path, repair: bool = False) -> list[dict]:
    """The finished points in results.jsonl; a torn or unparsable line is dropped (and, with ``repair``, removed from the file)."""
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    good, lines = [], []
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "key" in rec and "metrics" in rec:
            good.append(rec)
            lines.append(line)
    fixed = b"".join(l + b"\n" for l in lines)
    if repair and fixed != raw:
        atomic_write_bytes(path, fixed)
    return good


def append_line(fd: int, record: dict) -> None:
    """One JSON line, one write(), then fsync: a kill leaves at most one torn last line."""
    data = (json.dumps(to_jsonable(record), sort_keys=False) + "\n").encode()
    os.write(fd, data)
    os.fsync(fd)


def load_records(out: Path, plan=None, key_of: Callable[[dict], str] | None = None) -> list[dict]:
    """Finished points in ``out/results.jsonl``, deduplicated by key.

    Without ``plan``: ordered by their stored index.  With ``plan`` (anything
    whose ``points`` are dicts with a ``"key"``): the plan's points that are
    stored, in plan order, ``index`` renumbered.  ``key_of(params)`` recomputes
    a stored record's key (so records written under older defaults still
    match); without it the stored key is used.
    """
    stored = read_results(Path(out) / "results.jsonl")
    if plan is None:
        return sorted({r["key"]: r for r in stored}.values(), key=lambda r: r.get("index", 0))
    recs = {key_of(r["params"]) if key_of is not None and "params" in r else r["key"]: r for r in stored}
    return [dict(recs[p["key"]], index=i) for i, p in enumerate(plan.points) if p["key"] in recs]


def default_strength(grid_keys) -> str | None:
    """The grid key drawn as "defense strength" when none is named: the first that is neither a repetition, sketch nor model."""
    return next((k for k in grid_keys if k not in REPEAT_KEYS + ("sketch", "model")), None)


def setting_of(rec: dict) -> tuple:
    """The grid values that define a setting (repetition keys left out)."""
    return tuple((k, json.dumps(v)) for k, v in rec["grid"].items() if k not in REPEAT_KEYS)


def group_settings(records: list[dict]) -> dict[tuple, list[dict]]:
    """Records by setting, settings in order of first appearance."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(setting_of(r), []).append(r)
    return groups


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std


def summarize(records: list[dict]) -> list[dict]:
    """One row per setting: its grid values, n, and mean/std of each metric present (sample std, 0 for n = 1)."""
    rows = []
    for setting, recs in group_settings(records).items():
        first = recs[0]
        row = {k: first["grid"][k] for k, _ in setting}
        row.update(model=first["params"]["model"], sketch=first["params"]["sketch"],
                   defense=first["metrics"].get("defense", first["params"].get("defense", "")),
                   d=first["metrics"]["d"], b=first["metrics"]["b"], m=first["metrics"].get("m"),
                   b_over_m=(first["metrics"]["b"] / first["metrics"]["m"]) if first["metrics"].get("m") else None,
                   n=len(recs))
        for name in SUMMARY_METRICS:
            vals = [r["metrics"].get(name) for r in recs]
            vals = [float(v) for v in vals if v is not None]
            if not vals:
                continue
            row[f"{name}_mean"], row[f"{name}_std"] = mean_std(vals)
        rows.append(row)
    return rows


def aggregate(records: list[dict], x_of: Callable[[dict], float | None], metric: str,
              line_key: str = "sketch") -> dict:
    """{line: [(x, mean, std, n, records)]} sorted by x: ``metric`` over the repetitions of each setting.

    One line per value of ``params[line_key]``; records whose ``x_of`` or
    ``metric`` is None are left out.
    """
    kept = [r for r in records if x_of(r) is not None and r["metrics"].get(metric) is not None]
    lines: dict = {}
    for recs in group_settings(kept).values():
        parts: dict = {}
        for r in recs:
            parts.setdefault((r["params"].get(line_key), x_of(r)), []).append(r)
        for (line, x), part in parts.items():
            mean, std = mean_std([float(r["metrics"][metric]) for r in part])
            lines.setdefault(line, []).append((x, mean, std, len(part), part))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in lines.items()}
