"""Sweep figures and the report tell series apart by what the points ran with: a point whose grid leaves a key out
(a ``[[grid]]`` table without it, or a point stored before the key joined the sweep file's grid) is drawn and
headed by the value it ran with, not as "none"."""

import json
from pathlib import Path

import torch

from leakattack.cli import main
from leakattack.figures import sweep_figures

SHARED = {"model": "lenet", "dataset": "digits", "objective": "l2", "tv": 0.0, "defense": "", "seed": 0,
          "batch_size": 1, "image_index": 0, "sketch_ratio": 0.5}


def write_sweep(folder: Path, points: list[tuple[dict, dict]]) -> None:
    """results.jsonl, points/*.pt and sweep.json (strength sigma) from ``points`` = [(grid, params)]."""
    (folder / "points").mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"strength": "sigma"}))
    lines = []
    for i, (grid, params) in enumerate(points):
        key = f"{i:012d}"
        m = {"d": 100, "b": 50, "m": 64, "mse": 0.01, "psnr": 20.0 + i, "ssim": 0.5,
             "baseline_psnr": 12.0, "baseline_ssim": 0.25}
        lines.append(json.dumps({"key": key, "index": i, "grid": grid, "params": {**SHARED, **params}, "metrics": m}))
        x = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(i))
        torch.save({"recon": x, "truth": x}, folder / "points" / f"{key}.pt")
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")


#: srht points whose grid does not name the sketch (it was in [base]) beside unsketched points whose grid does
MIXED = ([({"sigma": s}, {"sketch": "srht"}) for s in (0.0, 0.1)]
         + [({"sketch": "none", "sigma": s}, {"sketch": "none"}) for s in (0.0, 0.1)])



def test_a_grid_key_left_out_is_labelled_by_the_value_the_points_ran_with(tmp_path, drawn):
    write_sweep(tmp_path, MIXED)
    sweep_figures(tmp_path)
    ax = drawn["metrics_vs_strength"].axes[0]
    labels = sorted(ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith(("_", "baseline")))
    assert labels == ["none", "srht"]


def test_the_sketch_ratio_of_an_identity_sketch_stays_unnamed(tmp_path, drawn):
    write_sweep(tmp_path, [({"sketch": "none", "sigma": s}, {"sketch": "none"}) for s in (0.0, 0.1)]
                + [({"sketch": "countsketch", "sigma": s}, {"sketch": "countsketch"}) for s in (0.0, 0.1)]
                + [({"sketch": "srht", "sketch_ratio": 0.25, "sigma": s}, {"sketch": "srht", "sketch_ratio": 0.25})
                   for s in (0.0, 0.1)])
    sweep_figures(tmp_path)
    ax = drawn["metrics_vs_strength"].axes[0]
    labels = sorted(ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith(("_", "baseline")))
    assert labels == ["sketch=countsketch, sketch_ratio=0.5", "sketch=none, sketch_ratio=none",
                      "sketch=srht, sketch_ratio=0.25"]


def test_the_report_heads_each_reconstruction_block_by_the_value_its_points_ran_with(tmp_path, capsys):
    folder = tmp_path / "sweep"
    write_sweep(folder, MIXED)
    page = tmp_path / "report.html"
    assert main(["report", str(folder), "--out", str(page)]) == 0
    text = page.read_text()
    assert text.count("sketch=none") == 1 and text.count("sketch=srht") == 1
