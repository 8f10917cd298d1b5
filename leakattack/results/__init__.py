"""Results: atomic writes, run folders and the sweep store.

Imports nothing of leakattack but its leaf modules, so every station (and the
figures, which read only stored files) may use it.
"""

from __future__ import annotations

from .io import (
                 atomic_write_bytes,
                 atomic_write_text,
                 directory_mode,
                 folder_kind,
                 load_point_images,
                 load_tensors,
                 read_config,
                 read_json,
                 read_jsonl,
                 read_object,
                 to_jsonable,
                 writable_out,
                 write_csv,
                 write_json,
                 write_tensors,
)
from .runs import default_run_dir, write_run_folder
from .store import (
                 FAILED_COLUMNS,
                 POINT_NUMBERS,
                 REPEAT_KEYS,
                 SUMMARY_METRICS,
                 aggregate,
                 append_line,
                 append_text,
                 as_ran,
                 checked_points,
                 default_strength,
                 group_settings,
                 is_number,
                 load_records,
                 mean_std,
                 planned_keys,
                 quoted,
                 read_results,
                 series_keys,
                 series_label,
                 series_of,
                 setting_of,
                 summarize,
                 unplanned,
)

__all__ = [
    "atomic_write_bytes", "atomic_write_text", "directory_mode", "write_json", "read_json", "read_object",
    "read_config", "write_csv", "to_jsonable",
    "folder_kind", "read_jsonl", "write_tensors", "load_tensors",
    "load_point_images", "default_run_dir", "write_run_folder", "writable_out",
    "FAILED_COLUMNS", "REPEAT_KEYS", "SUMMARY_METRICS", "read_results", "append_line", "append_text", "load_records",
    "setting_of", "as_ran",
    "group_settings", "mean_std", "summarize", "aggregate", "default_strength", "series_keys", "series_of",
    "series_label", "planned_keys", "unplanned", "POINT_NUMBERS", "checked_points", "is_number", "quoted",
]
