"""Sweep figures are drawn from stored results only, as PNG and PDF, for every kind of sweep."""

import json
from pathlib import Path

import pytest
import torch

from leakattack import cli, experiment
from leakattack.results import write_json


def fake_sweep(folder: Path, grid_of, metrics_of, n_images=2):
    """A results.jsonl + points/*.pt written by hand: no attack is run."""
    (folder / "points").mkdir(parents=True)
    lines = []
    for i, (grid, params) in enumerate(grid_of):
        key = f"{i:012d}"
        m = {"d": 100, "b": params.get("sketch_dim", 50), "m": 64, "mse": 0.01, **metrics_of(grid, params)}
        base = {"model": "logreg", "sketch": "srht", "seed": 0, "image_index": grid.get("image_index", 0)}
        lines.append(json.dumps({"key": key, "index": i, "grid": grid, "params": {**base, **params}, "metrics": m}))
        x = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(i))
        torch.save({"recon": x, "truth": x}, folder / "points" / f"{key}.pt")
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def no_attacks(monkeypatch):
    monkeypatch.setattr(experiment, "execute", lambda *a, **k: pytest.fail("figures re-ran an attack"))
    monkeypatch.setattr(experiment, "prepare", lambda *a, **k: pytest.fail("figures re-ran an attack"))


def test_defense_sweep_figures_come_from_stored_results_only(tmp_path, no_attacks):
    pts = [({"sigma": s, "sketch": k, "image_index": i}, {"sketch": k, "image_index": i})
           for s in (0.0, 1e-3, 1e-1) for k in ("srht", "countsketch") for i in (0, 1)]
    fake_sweep(tmp_path, pts, lambda g, p: {"psnr": 40 - 100 * g["sigma"] + g["image_index"], "ssim": 1 - g["sigma"],
                                            "utility_acc": 0.9 - g["sigma"], "epsilon": None if g["sigma"] == 0 else 1 / g["sigma"]})
    write_json(tmp_path / "sweep.json", {"strength": "sigma"})
    assert cli.main(["figures", str(tmp_path)]) == 0
    names = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("reconstruction_grid", "metrics_vs_strength", "privacy_utility"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert (tmp_path / "figures" / "reconstruction_grid.png").stat().st_size > 1000
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 6  # 3 sigmas x 2 sketches, averaged over 2 images


def test_phase_transition_figure_is_drawn_against_b_over_m(tmp_path, no_attacks):
    pts = [({"sketch": k, "sketch_dim": b}, {"sketch": k, "sketch_dim": b}) for k in ("srht", "gaussian") for b in (16, 64, 128)]
    fake_sweep(tmp_path, pts, lambda g, p: {"psnr": 10 + 30 * (g["sketch_dim"] >= 64), "ssim": 0.5})
    assert cli.main(["figures", str(tmp_path)]) == 0
    assert (tmp_path / "figures" / "phase_transition.png").exists()
    assert (tmp_path / "figures" / "phase_transition.pdf").exists()


def test_figures_on_a_folder_without_results_is_one_line_exit_2(tmp_path, capsys):
    assert cli.main(["figures", str(tmp_path / "nothing")]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
