"""``leakattack check``: measure the paper's theory constants on a target and sketch, or write Table 2 / the
embedding table."""

from __future__ import annotations

import datetime as _dt
import sys
import warnings
from pathlib import Path

import torch

from ..config import ConfigError, check_value
from ..config.flags import pairs_table
from ..config.names import CHECK_DEFAULTS
from ..config.params import SEED
from ..constraints import Cores
from ..errors import SettingWarning, signals_held
from ..figures.theory import CHECK_FIGURES, check_figures
from ..results import writable_out
from ..results.io import own_folder
from ..results.runs import RUNS_ROOT
from ..sketch import check_sketch_params, is_identity, list_sketches
from ..theory import (
    CHECK_JSON,
    CHECK_TARGETS,
    check,
    embedding_markdown,
    summary_table,
    table2_markdown,
    write_check,
    write_markdown,
)


def _default_out() -> Path:
    return RUNS_ROOT / f"check-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


#: the most sampled points one check draws (as a sweep holds at most 100,000 points): lenet's default 24 take
#: about 50 s on a 2-core CPU (docs/theory.md)
MAX_SAMPLES = 100_000


def _check_samples(samples) -> None:
    if samples is not None and not 1 <= samples <= MAX_SAMPLES:
        raise ConfigError(f"samples must be an integer in [1, {MAX_SAMPLES:,}], got {samples}")


#: what a check writes into its --out folder, and the references `leakattack reproduce theory` copies beside the
#: tables (results/theory/check_<model>_<sketch>.json and its figures): an existing folder holding anything else is
#: refused
CHECK_FILES = {name: None for name in (CHECK_JSON, *CHECK_FIGURES, "table2.md", "embedding.md", "check_*.json",
                                       *(f"check_*_{png}" for png in CHECK_FIGURES))}


def _output_folder(out: str | None) -> Path:
    """``--out`` (default: a new folder under results/runs/), refused where the check's files would overwrite a run's
    or a sweep's (a run folder holds its own convergence.png), or be mixed in beside files a check does not write
    (:data:`CHECK_FILES`)."""
    path = writable_out(out if out is not None else _default_out())
    for marker, what in (("metrics.json", "a run"), ("sweep.json", "a sweep")):
        if (path / marker).is_file():
            raise ConfigError(f"--out '{out}' holds {what} ({marker}), whose files a check would overwrite: name "
                              "another folder")
    return own_folder(path, out, CHECK_FILES, "a check")


def cmd_check(a) -> int:
    check_value("seed", SEED, a.seed)
    if a.threads is not None:
        check_value("threads", Cores(), a.threads)
        torch.set_num_threads(a.threads)
    out = _output_folder(a.out)
    if a.table2 or a.embedding:
        _check_samples(a.samples)
        if a.samples is not None and a.samples < 2:
            raise ConfigError(f"--table2 and --embedding need at least 2 samples (a standard error, more than one "
                              f"point per cell), got {a.samples}")
        ignored = ["--" + k.replace("_", "-") for k, default in CHECK_DEFAULTS.items()
                   if k in getattr(a, "given_flags", ()) or getattr(a, k) != default]
        ignored += ["--sketch-param"] if a.sketch_params else []
        if ignored:
            warnings.warn(f"{', '.join(ignored)} change{'s' if len(ignored) == 1 else ''} nothing with --table2 or "
                          "--embedding: their functions and sketches are the paper's own", SettingWarning)
        tables = []
        if a.table2:
            tables.append(("table2.md", table2_markdown(samples=a.samples or 400, seed=a.seed, out=a.out or out)))
        if a.embedding:
            tables.append(("embedding.md", embedding_markdown(trials=a.samples or 2000, seed=a.seed,
                                                              out=a.out or out)))
        with signals_held():  # a Ctrl-C while writing comes after both tables are in place, not between them
            paths = [write_markdown(out, name, text) for name, text in tables]
        for (_, text), path in zip(tables, paths):
            print(text)
            print(f"wrote {path}")
        return 0
    if a.model not in CHECK_TARGETS:
        raise ConfigError(f"unknown model '{a.model}' for check; choose one of: {', '.join(CHECK_TARGETS)}")
    if a.sketch not in list_sketches():
        raise ConfigError(f"unknown sketch '{a.sketch}'; choose one of: {', '.join(list_sketches())}")
    _check_samples(a.samples)
    if not 0 < a.sketch_ratio <= 1:
        raise ConfigError(f"sketch ratio must lie in (0, 1], got {a.sketch_ratio}")
    if is_identity(a.sketch) and ("sketch_ratio" in getattr(a, "given_flags", ())
                                  or a.sketch_ratio != CHECK_DEFAULTS["sketch_ratio"]):
        warnings.warn(f"--sketch {a.sketch} sends the whole gradient (b = d): --sketch-ratio changes nothing",
                      SettingWarning)
    params = pairs_table("--sketch-param", a.sketch_params)  # a name given twice is refused, as run refuses it
    check_sketch_params(a.sketch, params)
    res = check(a.model, a.sketch, a.sketch_ratio, a.samples, a.seed, progress=not a.quiet, sketch_params=params)
    res["command"] = "leakattack check " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "leakattack check"
    with signals_held():  # check.json and its figures are written together: a Ctrl-C here waits for both (a second)
        stored = write_check(res, out)
        figures = check_figures(stored, out)  # drawn from the stored check.json
    print(summary_table(res))
    print(f"wrote {stored}, " + ", ".join(str(p) for p in figures))
    return 0


__all__ = ["cmd_check"]
