"""``leakattack figures``: redraw a sweep's summary and figures from its stored results."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from ..figures.report.sweep_section import beyond_finished
from ..figures.sweep import points_rebuilt
from ..rebuilt import batch_images_words
from ..results import read_object
from ..results.io import absent_text
from ..results.store import read_results, stored_lines, warn_torn
from ..sweep import finalize
from ..sweep.lock import FolderLock


def figures_said(res: dict, out: Path) -> str:
    """The summary line's part on a sweep's figures: how many (each as PNG and PDF) and where, or that none was
    drawn."""
    n = len({Path(p).stem for p in res["figures"]})
    return f"{n} figure{'s' if n != 1 else ''} in {out / 'figures'}" if n else "no figures"


#: what the summary line says where a point was not rebuilt
FAILURE_NOT_PRIVACY = "a point not rebuilt is a failure of the attack at its budget, not evidence of privacy"


def verdicts_text(res: dict) -> list[str]:
    """``R of N points rebuilt`` (the points with a verdict; results stored before verdicts existed say nothing),
    and, where any was not rebuilt, that this is the attack's failure, not evidence of privacy; then how many of
    those still single out images, where any does (docs/runs.md, image identifiability)."""
    judged, rebuilt = res.get("judged", 0), res.get("rebuilt", 0)
    if not judged:
        return []
    text = points_rebuilt(rebuilt, judged)
    images = batch_images_words(res.get("images"))
    if images:  # a batch's verdict on its means can hide its images
        text += f" ({images})"
    if judged < res.get("points", judged):
        text += f" ({res['points'] - judged} stored without a verdict)"
    out = [text + (f": {FAILURE_NOT_PRIVACY}" if rebuilt < judged else "")]
    if res.get("identified"):  # points not rebuilt whose reconstruction still singles out images
        out.append(f"{res['identified']} of the {judged - rebuilt} not rebuilt still single out images "
                   "(image identifiability)")
    return out


def cmd_figures(a) -> int:
    if not str(a.dir).strip():  # Path("") is ".": an empty argument names no folder
        raise UserError("a sweep folder must be named, got an empty string")
    out = Path(a.dir)
    if not out.exists():
        raise UserError(absent_text(out))
    if not out.is_dir():
        raise UserError(f"'{out}' is a file, not a sweep folder")
    if not (out / "results.jsonl").exists() and (out / "metrics.json").is_file():
        raise UserError(f"'{out}' is a run's folder (it holds metrics.json), not a sweep's: the run drew its figures "
                        f"there; `leakattack report {out}` puts them on one page")
    if not (out / "results.jsonl").exists():
        raise UserError(f"no results.jsonl in '{out}': run a sweep into it first")
    if (out / "results.jsonl").is_dir():
        raise UserError(f"'{out / 'results.jsonl'}' is a folder, not the file a sweep writes there")
    stored = stored_lines(out / "results.jsonl")
    if not stored:
        raise UserError(f"'{out / 'results.jsonl'}' is empty: nothing to draw, and summary.csv and figures/ are left "
                        "as they are")
    finished = len(read_results(out / "results.jsonl"))
    if not finished:
        raise UserError(f"'{out / 'results.jsonl'}' holds {stored} line{'s' if stored != 1 else ''} and "
                        "none is a finished point of a sweep (a JSON object with its key, grid, parameters and "
                        "metrics): nothing to draw, and summary.csv and figures/ are left as they are")
    warn_torn(out / "results.jsonl", finished, stacklevel=1)
    for folder in (out, out / "figures"):
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"'{folder}' is not a writable folder: figures rewrites the sweep's summary.csv and "
                            "figures/ in place")
    with FolderLock(out):  # not while a sweep writes the folder
        try:
            res = finalize(out)
        except OSError as err:  # a disk that fills, a file made read-only
            raise UserError(f"cannot write the summary and figures into '{out}' ({err.strerror or err}): the "
                            "stored results are untouched") from None
    print(" | ".join([points_text(res["points"], out), figures_said(res, out), *verdicts_text(res), *res["notes"]]))
    return 0


def points_text(n: int, out: Path) -> str:
    """``8 points``, or, for a sweep whose plan (sweep.json's count) has more, ``4 of 8 planned points``."""
    try:
        planned = read_object(out / "sweep.json").get("points") if (out / "sweep.json").is_file() else None
    except UserError:  # an unreadable sweep.json: the count of points drawn stands alone
        planned = None
    if beyond_finished(planned, n):
        return f"{n} of {planned} planned points (the sweep was not finished)"
    return f"{n} point{'s' if n != 1 else ''}"
