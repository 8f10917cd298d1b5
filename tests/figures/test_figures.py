"""Figures are drawn from stored results only (PNG and PDF, every kind of sweep), and stored files are loaded safely."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leakattack import cli, experiment
from leakattack.errors import UserError
from leakattack.figures import accuracy_figure, sweep_figures
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
                                            "utility_acc": 0.9 - g["sigma"],
                                            "epsilon": None if g["sigma"] == 0 else 1 / g["sigma"]})
    write_json(tmp_path / "sweep.json", {"strength": "sigma"})
    assert cli.main(["figures", str(tmp_path)]) == 0
    names = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("reconstruction_grid", "metrics_vs_strength", "privacy_utility"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert (tmp_path / "figures" / "reconstruction_grid.png").stat().st_size > 1000
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 6  # 3 sigmas x 2 sketches, averaged over 2 images


def test_phase_transition_figure_is_drawn_against_b_over_m(tmp_path, no_attacks):
    pts = [({"sketch": k, "sketch_dim": b}, {"sketch": k, "sketch_dim": b})
           for k in ("srht", "gaussian") for b in (16, 64, 128)]
    fake_sweep(tmp_path, pts, lambda g, p: {"psnr": 10 + 30 * (g["sketch_dim"] >= 64), "ssim": 0.5})
    assert cli.main(["figures", str(tmp_path)]) == 0
    assert (tmp_path / "figures" / "phase_transition.png").exists()
    assert (tmp_path / "figures" / "phase_transition.pdf").exists()


def test_figures_on_a_folder_without_results_is_one_line_exit_2(tmp_path, capsys):
    assert cli.main(["figures", str(tmp_path / "nothing")]) == 2
    assert "nothing' does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["figures", str(tmp_path / "empty")]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
    run = tmp_path / "run"  # a run's folder was told to run a sweep into it
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    assert cli.main(["figures", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: error: '{run}' is a run's folder (it holds metrics.json), not a sweep's: the run drew "
                   f"its figures there; `leakattack report {run}` puts them on one page"]
    assert not (run / "figures").exists()


def test_sweep_figures_read_the_store_themselves_when_given_no_records(tmp_path, no_attacks):
    pts = [({"sigma": s, "image_index": i}, {"image_index": i}) for s in (0.0, 1e-2) for i in (0, 1)]
    fake_sweep(tmp_path, pts, lambda g, p: {"psnr": 30 - 100 * g["sigma"], "ssim": 0.8})
    paths = sweep_figures(tmp_path)
    assert {p.name for p in paths} == {f"{stem}.{ext}" for stem in ("reconstruction_grid", "metrics_vs_strength")
                                        for ext in ("png", "pdf")}
    assert all(p.exists() for p in paths)


def test_a_point_file_holding_other_objects_than_tensors_is_refused(tmp_path, no_attacks, code_in_file):
    pts = [({"sigma": s, "image_index": 0}, {"image_index": 0}) for s in (0.0, 1e-2)]
    fake_sweep(tmp_path, pts, lambda g, p: {"psnr": 30.0, "ssim": 0.8})
    x = torch.rand(1, 1, 8, 8)
    torch.save({"recon": x, "truth": x, "note": code_in_file()}, tmp_path / "points" / f"{1:012d}.pt")
    with pytest.raises(UserError, match="other than tensors"):
        sweep_figures(tmp_path)
    assert code_in_file.loaded == []  # refused before anything in the file ran


def test_accuracy_figure_draws_every_training_run_under_the_root(tmp_path):
    for name, acc in (("fedavg", 0.9), ("sketched", 0.8)):
        (tmp_path / name).mkdir()
        rows = [{"round": t, "floats_cum": 100 * t, "test_acc": acc * t / 3} for t in (1, 2, 3)]
        (tmp_path / name / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = accuracy_figure(tmp_path)
    assert path == tmp_path / "accuracy_vs_floats.png" and path.stat().st_size > 1000


def _training(folder: Path, rows: list[dict]) -> None:
    """A training run's folder as `leakattack train` writes it, with the protocol.json keys the figure reads."""
    folder.mkdir()
    (folder / "protocol.json").write_text(json.dumps({"model": {"model": "lenet", "dataset": "digits"},
                                                      "spec": {"clients": 10}}))
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def accuracy_drawn(monkeypatch):
    """The accuracy figure, kept open instead of saved (closed after the test)."""
    from leakattack.figures import training
    from leakattack.figures.common import plt

    figs = []
    monkeypatch.setattr(training, "save", lambda fig, path: figs.append(fig))
    yield figs
    for fig in figs:
        plt.close(fig)


def test_accuracy_figure_tells_apart_runs_whose_rounds_coincide_and_names_their_setup(tmp_path, accuracy_drawn):
    """sacfl whose clip never fires sends what sketched sends: its line lay under sketched's and was not seen; the
    figure did not say which victim, data set or clients the runs trained."""
    rows = [{"round": t, "floats_cum": 1343 * t, "floats_mean_cum": 1343.0 * t, "test_acc": 0.08 + 0.02 * t}
            for t in (1, 2, 3)]
    for name in ("sacfl", "sketched"):
        _training(tmp_path / name, rows)
    accuracy_figure(tmp_path)
    ax = accuracy_drawn[0].axes[0]
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert [ln.get_label() for ln in lines] == ["sacfl", "sketched"]
    assert list(lines[0].get_xydata().ravel()) == list(lines[1].get_xydata().ravel())
    markers = [ln.get_marker() for ln in lines]
    assert "None" not in markers and markers[0] != markers[1]
    assert "lenet on digits, 10 clients" in ax.get_title()


def test_accuracy_figure_labels_on_the_floats_axis_do_not_run_together(tmp_path, accuracy_drawn):
    """A training under two decades of floats got matplotlib's labels at 2, 3, 4 and 6 times a power of ten, which
    ran into each other (``3×10⁴4×10⁴``)."""
    _training(tmp_path / "sketched", [{"round": t, "floats_cum": 1343 * t, "test_acc": 0.1 + 0.02 * t}
                                      for t in range(1, 41)])
    accuracy_figure(tmp_path)
    fig = accuracy_drawn[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    xaxis = fig.axes[0].xaxis
    ticks = xaxis.get_majorticklabels() + xaxis.get_minorticklabels()
    boxes = sorted((t.get_window_extent(r) for t in ticks if t.get_visible() and t.get_text()), key=lambda b: b.x0)
    assert len(boxes) >= 2
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))


def test_figures_import_only_results_of_the_stations():
    code = ("import sys, leakattack.figures; "
            "print(sorted(m for m in sys.modules if m.startswith('leakattack')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    allowed = ("leakattack.figures", "leakattack.results")
    leaves = ("leakattack", "leakattack.errors", "leakattack.registry", "leakattack.jsonable", "leakattack.rebuilt",
              "leakattack.torchfile")
    assert [m for m in eval(out) if m not in leaves and not m.startswith(allowed)] == []


def test_a_ctrl_c_while_a_figure_is_written_stops_after_it_not_inside_matplotlib(tmp_path):
    """The signal is held while matplotlib renders both files and delivered when they are written."""
    import os
    import signal

    from leakattack.figures.common import plt, save_both

    fig = plt.figure()
    real = fig.savefig

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C in the middle of rendering
        return real(*args, **kwargs)

    fig.savefig = interrupted
    with pytest.raises(KeyboardInterrupt):
        save_both(fig, tmp_path, "f")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
