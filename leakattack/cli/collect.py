"""``leakattack collect DIR... --out table.csv``: the metrics of many run folders in one table."""

from __future__ import annotations

import csv
import math
import sys
import warnings
from dataclasses import fields
from pathlib import Path

from ..errors import SettingWarning, UserError
from ..figures.report import run_metrics
from ..metrics import RunMetrics, failed_kind, rebuilt_images
from ..results import folder_kind, read_config, writable_out, write_csv
from ..results.io import absent_text, link_target
from ..results.store import EPSILON_METRICS, summary_value

#: the columns first in the table (then every other column in the order of :func:`column_order`)
LEADING = ("run", "model", "attack", "protocol", "batch_size", "sketch", "dataset", "defense", "round", "client", "d",
           "b", "psnr", "ssim", "lpips", "mse", "label_acc", "final_loss", "iterations", "stop_reason", "wall_s")
#: metrics.json's keys every version of this record knows, in the file's order: the columns after :data:`LEADING`
METRIC_ORDER = tuple(f.name for f in fields(RunMetrics) if f.name not in ("extra", "absent"))
#: the columns collect derives from a run's metrics, after metrics.json's own keys
DERIVED = ("objective_truth", "objective_reconstruction", "images_rebuilt", "failed")
#: the columns every row holds, so every table collect writes begins with them: how ``--out`` recognises an earlier
#: table it may replace
HEAD = LEADING[:8]
#: how many bytes of an existing ``--out`` file are read to find its header
_HEAD_BYTES = 4096


def collect_out(out) -> Path:
    """``--out`` as a path, refused in one sentence before anything is read: it must name a .csv file outside every
    run folder and sweep folder, and a file already there is replaced only when it is empty or an earlier table of
    collect (its header begins with :data:`HEAD`), never a run's or a sweep's own file (metrics.json, summary.csv,
    trace.csv, ...)."""
    path = writable_out(out, ".csv")
    if path.suffix.lower() != ".csv":
        raise UserError(f"--out '{out}' must name a .csv file (the table is one CSV file)")
    if path.is_file() and not _is_table(path):
        raise UserError(f"--out '{out}' exists and is not a table written by collect (its header does not begin "
                        f"with {','.join(HEAD)}), so collect will not replace it: name a new file or an earlier table")
    return path


def _is_table(path: Path) -> bool:
    """Whether the file at ``path`` is empty or a CSV table whose header begins with :data:`HEAD`."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return False
    if not head.strip():
        return True
    line = head.removeprefix(b"\xef\xbb\xbf").splitlines()[0].decode("utf-8", errors="replace")
    header = next(csv.reader([line]), [])
    return tuple(header[:len(HEAD)]) == HEAD


def found_folders(paths: list[str]) -> tuple[list[Path], list[Path]]:
    """(run folders, sweep folders) at or below the given paths, each sorted: a run folder holds metrics.json, a sweep
    folder results.jsonl.  Hidden folders below a given path (``.name``: among them the staging folders a run is
    written in before it is renamed into place) are skipped and so are symbolic links below it; a folder reached
    twice (the same path given twice or spelt two ways, a link given beside its target) is counted once, under the
    spelling reached first."""
    found: dict[str, list[Path]] = {"run": [], "sweep": []}
    seen: set[Path] = set()
    for given in paths:
        if not str(given).strip():
            raise UserError("a folder to collect must be named, got an empty string")
        top = Path(given)
        if not top.exists():
            raise UserError(absent_text(top))
        if not top.is_dir():
            raise UserError(f"'{top}' is a file, not a folder of runs")
        stack = [top]
        while stack:
            folder = stack.pop()
            real = folder.resolve()
            if real in seen or not folder.is_dir():
                continue
            seen.add(real)
            try:
                kind = folder_kind(folder)
                children = [c for c in folder.iterdir() if not c.name.startswith(".") and not c.is_symlink()
                            and c.is_dir()]
            except OSError:  # a folder that cannot be read holds no run we can read
                continue
            if kind is not None:
                found[kind].append(folder)
            stack += sorted(children, reverse=True)
    return sorted(found["run"]), sorted(found["sweep"])


def run_folders(paths: list[str]) -> list[Path]:
    """Every finished run folder (one holding metrics.json) at or below the given paths, sorted (see
    :func:`found_folders`)."""
    return found_folders(paths)[0]


def _sweeps_said(sweeps: list[Path]) -> str:
    """The sweep folders found, and where their points are, as a phrase."""
    names = ", ".join(f"'{s}'" for s in sweeps)
    if len(sweeps) == 1:
        return f"the sweep folder {names}, whose points are in its summary.csv and results.jsonl"
    return f"the sweep folders {names}, whose points are in their summary.csv and results.jsonl"


def row_of(folder: Path) -> dict:
    """One table row: the run's settings from config.json and its scalar metrics; a metrics.json that is not a run's
    is refused in one sentence, as ``leakattack report`` refuses it."""
    metrics = run_metrics(folder / "metrics.json").to_dict()
    # a hand-edited config.json (not JSON, a list, a run that is no object, a model that is a number): one sentence,
    # as `leakattack report` says it
    config = read_config(folder / "config.json") if (folder / "config.json").is_file() else None
    if config is None:  # its scores stand alone: the settings' columns stay empty, and the table says why
        warnings.warn(f"'{folder}' holds no config.json: its row has the metrics alone, and its settings' columns "
                      "(model, sketch, data set, ...) are empty", SettingWarning, stacklevel=2)
        config = {}
    run, derived = config.get("run", {}), config.get("derived", {})
    row = {"run": str(folder), "model": run.get("model"), "attack": run.get("attack"),
           "protocol": run.get("protocol") or None, "batch_size": run.get("batch_size"), "sketch": sent_sketch(config),
           "dataset": derived.get("dataset", run.get("dataset")), "defense": run.get("defense")}
    if row["protocol"]:  # which client's message of which round was attacked
        row.update(round=run.get("protocol_round"), client=run.get("protocol_client"))
        row.update(protocol_privacy(derived))
    elif run.get("message"):  # a captured message file: the round and client its ids name (the Flower recorder's)
        described = derived.get("sketch")
        ids = described.get("ids") if isinstance(described, dict) else None
        if isinstance(ids, dict):
            row.update({k: ids[k] for k in ("round", "client")
                        if isinstance(ids.get(k), (int, float, str)) and not isinstance(ids.get(k), bool)})
    del metrics["schema"]  # the file's layout, not a metric
    row.update(scalars(metrics, skip=("objective_at",)))
    for name in EPSILON_METRICS:  # no DP bound: inf, as the run's summary line (ε ∞) and a sweep's summary.csv say
        if name in row:
            row[name] = summary_value(metrics, name)
    at = metrics.get("objective_at")
    if at:  # the attack's objective at the truth and at the reconstruction
        row.update(objective_truth=at["truth"]["total"], objective_reconstruction=at["reconstruction"]["total"])
    counts = rebuilt_images(metrics)  # a batch's images rebuilt on their own, which its verdict on the means hides
    if counts is not None and counts[1] > 1:
        row["images_rebuilt"] = counts[0]
    failed = failed_kind(metrics)  # where not rebuilt: labels, objective or search
    if failed:
        row["failed"] = failed
    return row


def protocol_privacy(derived: dict) -> dict:
    """A DP protocol's own noise and guarantee over rounds 1..its round (config.json's ``derived.sketch.privacy``:
    ``sigma``, ``epsilon_rdp``, ``epsilon_paper``, ``delta_paper``, ...), as columns named ``protocol_KEY``; an
    epsilon recorded as null (its delta reached 1: no bound) is ``inf``, as a run's ε without a bound is.  Empty
    for a protocol without noise of its own."""
    described = derived.get("sketch")
    noise = described.get("privacy") if isinstance(described, dict) else None
    if not isinstance(noise, dict) or noise.get("sigma") is None:
        return {}
    return {f"protocol_{k}": (math.inf if v is None and k.startswith("epsilon") else v) for k, v in noise.items()
            if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def sent_sketch(config: dict) -> str | None:
    """The kind of sketch the attacked message was sent with: config.json's ``derived.sketch.encoder`` where a protocol
    or a captured message recorded its own encoder (fedavg sends ``none``, the FedSketch protocols a
    ``countsketch-table``, whatever --sketch said), else the recorded sketch's kind, else the --sketch flag."""
    run, described = config.get("run", {}), config.get("derived", {}).get("sketch")
    described = described if isinstance(described, dict) else {}
    encoder = described.get("encoder")
    if "encoder" in described:  # a protocol's or a message file's description: its kind is the message's, not R's
        kind = encoder.get("kind") if isinstance(encoder, dict) else None  # None: an unsketched message
    else:
        kind = described.get("kind")
    return kind if isinstance(kind, str) and kind else run.get("sketch")


def scalars(metrics: dict, prefix: str = "", skip: tuple[str, ...] = ()) -> dict:
    """The scalar metrics (numbers, strings, None), those inside a nested record under dotted names
    (``peak_memory.rss_gb``, ``gauss_newton.jacobians``); lists and the keys in ``skip`` are left out."""
    out: dict = {}
    for k, v in metrics.items():
        if k in skip:
            continue
        if isinstance(v, dict):
            out.update(scalars(v, f"{prefix}{k}."))
        elif v is None or isinstance(v, (int, float, str)):
            out[prefix + k] = v
    return out


def column_order(names) -> list[str]:
    """The table's columns, in one order whatever runs are collected (so that tables of different runs line up):
    :data:`LEADING`, then metrics.json's keys in the file's order (:data:`METRIC_ORDER`; a nested record's entries,
    ``peak_memory.rss_gb``, at its place, sorted by name), then :data:`DERIVED`, then the keys whose set varies from
    run to run (a defended run's privacy keys: ``delta``, ``epsilon``, ..., and keys of other versions) sorted by
    name.  Only the columns in ``names`` (those some row holds) are kept."""
    rank: dict[str, int] = {}
    for name in LEADING + METRIC_ORDER + DERIVED:  # a leading metric (psnr, d, ...) keeps its leading place
        rank.setdefault(name, len(rank))

    def key(column: str) -> tuple:
        top = column if column in rank else column.split(".", 1)[0]
        return (rank.get(top, len(rank)), column)

    return sorted(set(names), key=key)


def _without_runs(given: list[str], found: list[Path]) -> list[str]:
    """The folders of ``given`` at or below which none of the ``found`` run or sweep folders lies, each once under
    its first spelling, in the order given (compared resolved: a folder spelt two ways, or a link beside its
    target, is the same)."""
    reached = [f.resolve() for f in found]
    empty: dict[Path, str] = {}
    for name in given:
        top = Path(name).resolve()
        if top not in empty and not any(f == top or top in f.parents for f in reached):
            empty[top] = name
    return list(empty.values())


def cmd_collect(a) -> int:
    out = collect_out(a.out)
    folders, sweeps = found_folders(a.dirs)
    if not folders:
        where = f"no run folder (a folder holding metrics.json) under {', '.join(a.dirs)}"
        raise UserError(f"{where}: only {_sweeps_said(sweeps)}" if sweeps else where)
    rows = [row_of(f) for f in folders]  # every run read, and refused, before the table is written
    for given in _without_runs(a.dirs, folders + sweeps):
        warnings.warn(f"'{given}' holds no run folder (a folder holding metrics.json) at or below it: nothing of it "
                      "is in the table", SettingWarning, stacklevel=1)
    columns = column_order({c for r in rows for c in r})
    try:
        write_csv(link_target(out), rows, columns)  # an --out that is a link stays one
    except OSError as err:
        raise UserError(f"--out '{out}' cannot be written: {err.strerror or err}") from None
    if sweeps:
        print(f"note: left out {_sweeps_said(sweeps)}", file=sys.stderr)
    print(f"{len(rows)} run{'s' if len(rows) != 1 else ''} | {len(columns)} columns | {out}")
    return 0


__all__ = ["cmd_collect", "collect_out", "column_order", "found_folders", "run_folders", "row_of", "scalars",
           "sent_sketch", "HEAD", "LEADING", "METRIC_ORDER", "DERIVED"]
