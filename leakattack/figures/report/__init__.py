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

from pathlib import Path

from ...errors import UserError
from ...results import folder_kind
from ...results.io import absent_text
from .run_section import _run_section, run_metrics
from .shared import FAILURE_NOTE, _e, _name, image_png, shown_width
from .sweep_section import MAX_GRID_COLUMNS, MAX_GRID_ROWS, _sweep_section, stored_summary, summary_matches

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
            raise UserError(absent_text(p))
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


__all__ = ["build_report", "check_folders", "run_metrics", "stored_summary", "summary_matches", "image_png",
           "shown_width", "FAILURE_NOTE", "MAX_GRID_COLUMNS", "MAX_GRID_ROWS"]
