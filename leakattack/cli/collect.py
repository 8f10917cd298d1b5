"""``leakattack collect DIR... --out table.csv``: the metrics of many run folders in one table."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..metrics import RunMetrics, failed_kind
from ..results import read_json, writable_out, write_csv

#: the columns first in the table (then every other scalar metric, in first-seen order)
LEADING = ("run", "model", "attack", "protocol", "batch_size", "sketch", "dataset", "defense", "d", "b", "psnr", "ssim",
           "lpips", "mse", "label_acc", "final_loss", "iterations", "stop_reason", "wall_s")


def run_folders(paths: list[str]) -> list[Path]:
    """Every finished run folder (one holding metrics.json) at or below the given paths, sorted."""
    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"'{p}' does not exist")
        found += [m.parent for m in ([p / "metrics.json"] if (p / "metrics.json").is_file() else [])]
        found += [m.parent for m in p.rglob("metrics.json") if m.parent != p]
    return sorted(set(found))


def row_of(folder: Path) -> dict:
    """One table row: the run's settings from config.json and its scalar metrics."""
    try:
        stored = read_json(folder / "metrics.json")
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"'{folder}' holds a metrics.json or config.json that is not JSON") from None
    for name, data in (("metrics.json", stored), ("config.json", config)):
        if not isinstance(data, dict):
            raise UserError(f"'{folder / name}' holds a JSON {type(data).__name__}, not the object leakattack writes "
                            "there")
    metrics = RunMetrics.from_dict(stored).to_dict()
    run = config.get("run", {})
    row = {"run": str(folder), "model": run.get("model"), "attack": run.get("attack"),
           "protocol": run.get("protocol") or None, "batch_size": run.get("batch_size"), "sketch": run.get("sketch"),
           "dataset": config.get("derived", {}).get("dataset", run.get("dataset")), "defense": run.get("defense")}
    del metrics["schema"]  # the file's layout, not a metric
    row.update(scalars(metrics, skip=("objective_at",)))
    at = metrics.get("objective_at")
    if at:  # the attack's objective at the truth and at the reconstruction
        row.update(objective_truth=at["truth"]["total"], objective_reconstruction=at["reconstruction"]["total"])
    failed = failed_kind(metrics)  # where not rebuilt: labels, objective or search
    if failed:
        row["failed"] = failed
    return row


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


def cmd_collect(a) -> int:
    out = writable_out(a.out, ".csv")
    folders = run_folders(a.dirs)
    if not folders:
        raise UserError(f"no run folder (a folder holding metrics.json) under {', '.join(a.dirs)}")
    rows = [row_of(f) for f in folders]
    columns = [c for c in LEADING if any(c in r for r in rows)]
    columns += [c for r in rows for c in r if c not in columns]
    columns = list(dict.fromkeys(columns))
    write_csv(out, rows, columns)
    print(f"{len(rows)} runs | {len(columns)} columns | {out}")
    return 0


__all__ = ["run_folders", "row_of", "scalars"]
