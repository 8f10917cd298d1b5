"""Sweep and run figures say what they show: one line and one grid block per series, titles with the setting,
no std bars for single samples, and tall figures laid out without gaps or overlaps."""

import json
from pathlib import Path

import pytest
import torch

from leakattack import cli
from leakattack.figures import run as run_figures
from leakattack.figures import sweep as sweep_figures_module
from leakattack.figures import sweep_figures

SHARED = {"model": "lenet", "dataset": "digits", "objective": "cosine", "tv": 1e-4, "defense": "clip:C=1",
          "seed": 0}


def fake_sweep(folder: Path, points, psnr_of=lambda g: 20.0, batch=1, strength="sigma", shared=None,
               baselines=False):
    """results.jsonl + points/*.pt (+ sweep.json naming the strength, where there is one) written by hand from
    ``points`` = [grid]; ``shared``: the parameters every point has (:data:`SHARED`); ``baselines``: each point
    stores baselines of 12 dB and SSIM 0.25."""
    (folder / "points").mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps({"strength": strength} if strength else {}))
    lines = []
    for i, grid in enumerate(points):
        key = f"{i:012d}"
        params = {**(SHARED if shared is None else shared), "sketch": "srht", "batch_size": 1, "image_index": 0,
                  **{k: v for k, v in grid.items() if k != "sigma"}}
        m = {"d": 100, "b": 50, "m": 64 * params["batch_size"], "mse": 0.01, "psnr": psnr_of(grid), "ssim": 0.5,
             **({"baseline_psnr": 12.0, "baseline_ssim": 0.25} if baselines else {})}
        lines.append(json.dumps({"key": key, "index": i, "grid": grid, "params": params, "metrics": m}))
        x = torch.rand(batch, 1, 8, 8, generator=torch.Generator().manual_seed(i))
        torch.save({"recon": x, "truth": x}, folder / "points" / f"{key}.pt")
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn, by file stem, kept open instead of saved."""
    figs = {}
    monkeypatch.setattr(sweep_figures_module, "save_both", lambda fig, folder, stem: figs.setdefault(stem, fig) and [])
    monkeypatch.setattr(run_figures, "save", lambda fig, path: figs.setdefault(Path(path).stem, fig))
    return figs


SIGMAS = (0.0, 1e-3, 1e-1)
THREE_FACTORS = [{"sketch": k, "batch_size": b, "sigma": s, "image_index": i}
                 for k in ("srht", "countsketch") for b in (1, 2) for s in SIGMAS for i in (0, 1)]


def labelled_lines(ax):
    return {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def test_metrics_vs_strength_draws_one_line_per_combination_of_the_other_factors(tmp_path, drawn):
    fake_sweep(tmp_path, THREE_FACTORS, psnr_of=lambda g: 30 - 100 * g["sigma"] + 3 * g["batch_size"])
    sweep_figures(tmp_path)
    ax = drawn["metrics_vs_strength"].axes[0]
    lines = labelled_lines(ax)
    assert set(lines) == {f"sketch={k}, batch_size={b}" for k in ("srht", "countsketch") for b in (1, 2)}
    for label, line in lines.items():
        x = list(line.get_xdata())
        assert x == sorted(SIGMAS)  # one point per strength: no zig-zag between settings
        b = int(label[-1])
        assert list(line.get_ydata()) == pytest.approx([30 - 100 * s + 3 * b for s in SIGMAS])


def test_the_reconstruction_grid_draws_one_block_per_series(tmp_path, drawn):
    fake_sweep(tmp_path, THREE_FACTORS)
    sweep_figures(tmp_path)
    fig = drawn["reconstruction_grid"]
    headings = [sub._suptitle.get_text() for sub in fig.subfigs]
    assert headings == [f"sketch={k}, batch_size={b}" + ("; first image of each batch of 2" if b == 2 else "")
                        for k in ("srht", "countsketch") for b in (1, 2)]
    assert all(len(sub.axes) == (len(SIGMAS) + 1) * 2 for sub in fig.subfigs)  # truth + levels, two images


def test_series_left_out_of_the_grid_are_named_in_the_figure_and_the_summary_line(tmp_path, drawn, capsys):
    fake_sweep(tmp_path, [{"C": c, "sigma": s, "image_index": 0} for c in range(9) for s in (0.0, 0.1)])
    assert cli.main(["figures", str(tmp_path)]) == 0
    cap = sweep_figures_module.MAX_GRID_BLOCKS
    fig = drawn["reconstruction_grid"]
    assert len(fig.subfigs) == cap
    assert f"{cap} of 9 series shown ({9 - cap} left out, from C={cap})" in fig._suptitle.get_text().replace("\n", " ")
    line = capsys.readouterr().out.strip()
    assert f"reconstruction grid shows {cap} of 9 series ({9 - cap} left out)" in line and "\n" not in line


def test_sweep_titles_name_model_data_objective_prior_and_defense(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sigma": s, "image_index": i} for s in SIGMAS for i in (0, 1)])
    sweep_figures(tmp_path)
    for stem in ("metrics_vs_strength", "reconstruction_grid"):
        title = drawn[stem]._suptitle.get_text().replace("\n", " ")
        for part in ("lenet", "digits", "sketch srht (b/d = 0.5)", "cosine objective", "TV 0.0001",
                     "defense clip:C=1"):
            assert part in title, (stem, title)


def test_a_setting_with_one_sample_has_no_std_bar_and_an_empty_std_cell(tmp_path, drawn):
    points = [{"sigma": 0.0, "image_index": 0}, {"sigma": 0.0, "image_index": 1}, {"sigma": 1e-3, "image_index": 0}]
    fake_sweep(tmp_path, points, psnr_of=lambda g: 20.0 + g["image_index"])
    assert cli.main(["figures", str(tmp_path)]) == 0
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    header = rows[0].split(",")
    cells = [dict(zip(header, r.split(","))) for r in rows[1:]]
    assert [c["n"] for c in cells] == ["2", "1"]
    assert cells[0]["psnr_std"] != "" and cells[1]["psnr_std"] == "" and cells[1]["ssim_std"] == ""
    ax = drawn["metrics_vs_strength"].axes[0]
    bars = [seg for coll in ax.collections for seg in coll.get_segments()]
    assert len(bars) == 1 and bars[0][0][0] == 0.0  # the bar of sigma = 0 only


def _boxes(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    heads = [fig._suptitle] + [sub._suptitle for sub in fig.subfigs if sub._suptitle is not None]
    axes = fig.axes
    return (r, [h.get_window_extent(r) for h in heads], [a.get_window_extent(r) for a in axes],
            [a.title.get_window_extent(r) for a in axes if a.get_title()])


def assert_laid_out(fig):
    """No title or panel title overlaps an image, and the band under the title is thin."""
    _, heads, axes, titles = _boxes(fig)
    for box in heads + titles:
        assert not any(box.overlaps(a) for a in axes), box
    for i, h in enumerate(heads):
        assert not any(h.overlaps(t) for t in titles) and not any(h.overlaps(o) for o in heads[i + 1:])
    top = max(b.y1 for b in axes + titles + heads[1:])
    gap = heads[0].y0 - top
    assert 0 <= gap < 0.02 * fig.bbox.height, (gap, fig.bbox.height)


def test_a_ten_row_reconstruction_grid_has_no_blank_band_and_no_overlaps(tmp_path, drawn):
    levels = [0.0] + [10.0 ** -k for k in range(8)]
    fake_sweep(tmp_path, [{"sigma": s, "image_index": i} for s in levels for i in range(3)])
    sweep_figures(tmp_path)
    fig = drawn["reconstruction_grid"]
    assert len(fig.axes) == 10 * 3
    assert_laid_out(fig)


def test_a_two_block_grid_and_a_batch_of_ten_are_laid_out_without_overlaps(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": k, "sigma": s, "image_index": i} for k in ("srht", "countsketch")
                          for s in [0.0] + [10.0 ** -k for k in range(8)] for i in range(2)])
    sweep_figures(tmp_path)
    assert_laid_out(drawn["reconstruction_grid"])
    x = torch.rand(10, 1, 28, 28)
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", x, x, x, [30.0] * 10, [0.9] * 10,
                                      "lenet / srht (b/d = 0.5), lbfgs, 100 it")
    fig = drawn["reconstruction"]
    assert len(fig.axes) == 10  # one panel (truth | reconstruction) per image beyond B = 4
    assert_laid_out(fig)


@pytest.mark.parametrize("objective,needle", [("l2", "L_R"), ("cosine", r"1 - \cos")])
def test_the_convergence_figure_labels_the_quantity_its_objective_minimises(tmp_path, drawn, objective, needle):
    run_figures.convergence_figure(tmp_path / "convergence.png", [1.0, 0.5, 0.1], "t", objective=objective)
    label = drawn["convergence"].axes[0].get_ylabel()
    assert needle in label and (objective == "l2") == ("L_R" in label)


def test_a_batch_size_grid_draws_psnr_against_b_with_numbers_per_unknown_marked(tmp_path, drawn):
    """One line per sketch against B on a log2 axis; each point carries b/(m*B) from its metrics."""
    pts = [{"sketch": k, "batch_size": b} for k in ("srht", "none") for b in (1, 2, 4, 8)]
    fake_sweep(tmp_path, pts, psnr_of=lambda g: 40 - 3 * g["batch_size"], strength="batch_size")
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for rec in lines:
        rec["metrics"].update(unknowns=64 * rec["params"]["batch_size"], label_acc=1.0)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    sweep_figures(tmp_path)
    assert "metrics_vs_strength" not in drawn
    fig = drawn["metrics_vs_batch"]
    psnr_ax, label_ax = fig.axes[:2]
    assert psnr_ax.get_xscale() == "log" and label_ax.get_ylabel() == "label accuracy"
    got = labelled_lines(psnr_ax)
    assert set(got) == {"srht", "none"}
    assert list(got["srht"].get_xdata()) == [1, 2, 4, 8]
    marks = sorted(t.get_text() for t in psnr_ax.texts if t.get_text()[0].isdigit())
    assert marks == sorted([f"{50 / (64 * b):.2g}" for b in (1, 2, 4, 8)] * 2)


def test_the_numbers_at_close_points_of_a_batch_figure_stay_apart_and_inside_the_panel(tmp_path, drawn):
    """Two series 0.1 dB apart: their b/(m*B) labels were drawn over each other, and those of the largest B ran past
    the panel's right edge."""
    pts = [{"sketch_ratio": r, "batch_size": b} for r in (0.25, 1.0) for b in (1, 2)]
    fake_sweep(tmp_path, pts, psnr_of=lambda g: 10 - g["batch_size"] + 0.1 * g["sketch_ratio"], strength="batch_size")
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for rec in lines:
        rec["metrics"].update(unknowns=64 * rec["params"]["batch_size"], label_acc=1.0)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    sweep_figures(tmp_path)
    fig = drawn["metrics_vs_batch"]
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text()[0].isdigit()]
    assert len(boxes) == 4
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 for b in boxes)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_series_that_each_hold_one_batch_size_are_not_drawn_against_it(tmp_path, drawn):
    """A table of batches of four beside tables of one image (examples/attack_families.toml): no series varies B, so
    no figure against it, and a note says why; beside a series that does vary it, only that one is drawn."""
    alone = [{"model": m, "batch_size": b, "sketch_dim": k} for m, b in (("mlp", 1), ("lenet", 1), ("relu", 4))
             for k in (50, 100, 200)]
    fake_sweep(tmp_path, alone, strength="sketch_dim")
    notes: list = []
    sweep_figures(tmp_path, notes=notes)
    assert "metrics_vs_batch" not in drawn and "phase_transition" in drawn
    assert "no figure against the batch size: each series holds one batch size" in notes
    drawn.clear()
    fake_sweep(tmp_path, alone + [{"model": "wide", "batch_size": b, "sketch_dim": 50} for b in (1, 2, 4)],
               strength="sketch_dim")
    notes.clear()
    sweep_figures(tmp_path, notes=notes)
    ax = drawn["metrics_vs_batch"].axes[0]
    solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
    assert [list(ln.get_xdata()) for ln in solid] == [[1, 2, 4]]
    assert "the figure against the batch size leaves out 9 series that each hold one batch size" in notes


def test_a_point_stored_without_a_batch_size_is_drawn_at_one(tmp_path, drawn):
    """A record from before the batch size was stored counts as B = 1 both where series are told apart and on the
    axis: with a batch of four in the same series it is a line of two points, not one lone point."""
    fake_sweep(tmp_path, [{"batch_size": 4}, {"batch_size": 1}], strength="batch_size")
    recs = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    del recs[1]["params"]["batch_size"], recs[1]["grid"]["batch_size"]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    sweep_figures(tmp_path)
    solid = [ln for ln in drawn["metrics_vs_batch"].axes[0].get_lines() if ln.get_linestyle() == "-"]
    assert [sorted(ln.get_xdata()) for ln in solid] == [[1, 4]]


def test_summary_csv_names_a_key_one_grid_table_leaves_out_as_the_value_its_points_ran_with(tmp_path):
    """Beside a [[grid]] table that names recipe = ["ig"], the points of a table that does not name it ran the
    recipe they record (auto): summary.csv says so, as the figures' legends do, not an empty cell."""
    import csv

    from leakattack.sweep.runner import finalize

    fake_sweep(tmp_path, [{"sketch_dim": 10}, {"sketch_dim": 10, "recipe": "ig"}], strength="sketch_dim")
    recs = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for r in recs:
        r["params"]["recipe"] = r["grid"].get("recipe", "auto")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    finalize(tmp_path)
    with open(tmp_path / "summary.csv", newline="") as f:
        assert [row["recipe"] for row in csv.DictReader(f)] == ["auto", "ig"]


def _add_baselines(folder: Path, baseline_of, verdict_of=lambda g: "not rebuilt"):
    """Give the stored points of a fake sweep the baseline keys a run writes today (baseline_of(grid) -> PSNR)."""
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    for r in recs:
        r["metrics"].update(baseline_psnr=baseline_of(r["grid"]), baseline_ssim=0.25, verdict=verdict_of(r["grid"]))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _dashed(ax):
    return [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and ln.get_label() == "_baseline"]


def test_metric_figures_draw_the_baseline_dashed_beside_each_series(tmp_path, drawn):
    fake_sweep(tmp_path, THREE_FACTORS, psnr_of=lambda g: 30 - 100 * g["sigma"])
    _add_baselines(tmp_path, lambda g: 12.0 + g["image_index"] + g["batch_size"],
                   verdict_of=lambda g: "rebuilt" if g["image_index"] == 0 else "not rebuilt")
    assert cli.main(["figures", str(tmp_path)]) == 0
    psnr_ax, ssim_ax = drawn["metrics_vs_strength"].axes[:2]
    lines, dashed = labelled_lines(psnr_ax), _dashed(psnr_ax)
    assert len(dashed) == 4 and len(_dashed(ssim_ax)) == 4  # one per series, in each panel
    single = {lines[f"sketch={k}, batch_size=1"].get_color() for k in ("srht", "countsketch")}
    for ln in dashed:  # the mean over the two images, at every strength, in its series' colour
        b = 1 if ln.get_color() in single else 2
        assert list(ln.get_xdata()) == sorted(SIGMAS) and list(ln.get_ydata()) == pytest.approx([12.5 + b] * 3)
    assert sweep_figures_module.BASELINE_LABEL in [t.get_text() for t in drawn["metrics_vs_strength"].legends[0].texts]
    assert any(len(c.get_paths()) for c in psnr_ax.collections if not hasattr(c, "get_segments"))  # the std band
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    cells = [dict(zip(rows[0].split(","), r.split(","))) for r in rows[1:]]
    assert {"baseline_psnr_mean", "baseline_psnr_std", "baseline_ssim_mean", "rebuilt"} <= set(cells[0])
    assert all(float(c["baseline_ssim_mean"]) == 0.25 and float(c["rebuilt"]) == 0.5 for c in cells)


def test_results_stored_before_baselines_draw_none_and_summarise_without_them(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": k, "sketch_dim": b, "sigma": 0.0} for k in ("srht", "gaussian") for b in (16, 64)],
               strength="sigma")
    old = (tmp_path / "results.jsonl").read_text().splitlines()
    _add_baselines(tmp_path, lambda g: 11.0)
    new = (tmp_path / "results.jsonl").read_text().splitlines()
    (tmp_path / "results.jsonl").write_text("\n".join(old[:2] + new[2:]) + "\n")  # srht: old rows, gaussian: new
    assert cli.main(["figures", str(tmp_path)]) == 0
    ax = drawn["phase_transition"].axes[0]
    assert len(_dashed(ax)) == 1 and list(_dashed(ax)[0].get_ydata()) == [11.0, 11.0]
    (tmp_path / "results.jsonl").write_text("\n".join(old) + "\n")
    drawn.clear()
    assert cli.main(["figures", str(tmp_path)]) == 0
    ax = drawn["phase_transition"].axes[0]
    assert _dashed(ax) == [] and sweep_figures_module.BASELINE_LABEL not in labelled_lines(ax)
    header = (tmp_path / "summary.csv").read_text().splitlines()[0]
    assert "baseline" not in header and "rebuilt" not in header


def test_a_defense_template_reads_as_its_placeholders_and_series_sit_side_by_side(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": k, "sigma": s, "image_index": i} for k in ("srht", "none")
                          for s in SIGMAS for i in range(3)])
    meta = json.loads((tmp_path / "sweep.json").read_text())
    meta["base"] = {"defense": "gaussian:sigma={sigma}@before_sketch"}
    (tmp_path / "sweep.json").write_text(json.dumps(meta))
    records = [json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()]
    for r in records:
        r["params"]["defense"] = f"gaussian:sigma={r['grid']['sigma']}@before_sketch"
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    sweep_figures(tmp_path)
    fig = drawn["reconstruction_grid"]
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "gaussian:sigma=<sigma>@before_sketch (sigma varied)" in title and "{" not in title
    # two series of three images: one row of two blocks, wider than tall
    assert len(fig.subfigs) == 2
    w, h = fig.get_size_inches()
    assert w > h
    assert_laid_out(fig)


@pytest.mark.parametrize("values", [["none", "prune:p=0.9", "quantize:bits=2"], [False, True]])
def test_a_strength_that_is_not_a_number_is_drawn_at_ticks_in_grid_order(tmp_path, drawn, values):
    """A defense's name or a flag as the strength axis: its values at ticks 0, 1, ... named by the values, one line
    per series (a numeric axis would leave the panels empty)."""
    points = [{"sketch": k, "level": v, "image_index": 0} for k in ("srht", "none") for v in values]
    fake_sweep(tmp_path, points, psnr_of=lambda g: 20.0 + values.index(g["level"]), strength="level")
    sweep_figures(tmp_path)
    ax = drawn["metrics_vs_strength"].axes[0]
    lines = labelled_lines(ax)
    assert set(lines) == {"srht", "none"}
    for line in lines.values():
        assert list(line.get_xdata()) == list(range(len(values)))
        assert list(line.get_ydata()) == [20.0 + i for i in range(len(values))]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(v) for v in values]


def test_an_emptied_results_file_is_refused_and_the_figures_are_kept(tmp_path, capsys):
    fake_sweep(tmp_path, [{"sigma": s, "image_index": 0} for s in SIGMAS])
    assert cli.main(["figures", str(tmp_path)]) == 0
    names = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"metrics_vs_strength.png", "reconstruction_grid.pdf"} <= names
    (tmp_path / "figures" / "notes.txt").write_text("mine")  # a file of the user's own stays
    summary = (tmp_path / "summary.csv").read_bytes()
    (tmp_path / "results.jsonl").write_text("")  # nothing to draw: summary.csv and figures/ are left as they are
    capsys.readouterr()
    assert cli.main(["figures", str(tmp_path)]) == 2
    assert "results.jsonl' is empty: nothing to draw" in capsys.readouterr().err
    assert {p.name for p in (tmp_path / "figures").iterdir()} == names | {"notes.txt"}
    assert (tmp_path / "summary.csv").read_bytes() == summary


def test_a_grid_no_figure_fits_says_why_in_a_note(tmp_path, drawn):
    """A grid of models, sketch kinds and photos has nothing to draw quality against: the note says what the figures
    need and what the grid varies (the summary line read only "no figures")."""
    fake_sweep(tmp_path, [{"model": m, "sketch": k, "image_index": i} for m in ("lenet", "mlp")
                          for k in ("srht", "none") for i in range(2)], strength=None)
    notes: list = []
    assert sweep_figures(tmp_path, notes=notes) == [] and drawn == {}
    assert notes == ["the figures draw quality against a swept setting other than the model, the sketch kind and the "
                     "repetitions (seed, image_index, model_seed, sketch_seed, noise_seed), or utility results; this "
                     "grid varies image_index, model, sketch"]
    notes = []
    fake_sweep(tmp_path, [{"sigma": s} for s in SIGMAS])
    sweep_figures(tmp_path, notes=notes)
    assert not any("the figures draw" in n for n in notes)


def test_a_grid_cell_of_a_batch_scores_the_first_image_it_shows_on_its_own():
    """A cell shows its point's first image: where the point has per-image verdicts its caption and frame are that
    image's (a batch not rebuilt on its means whose first image is), else the point's."""
    point = {"psnr": 11.0, "ssim": 0.2, "baseline_psnr": 11.3, "baseline_ssim": 0.33, "verdict": "not rebuilt",
             "psnr_each": [13.8, 8.2], "ssim_each": [0.36, 0.04], "baseline_psnr_each": [10.7, 11.9],
             "baseline_ssim_each": [0.2, 0.3], "verdict_each": ["rebuilt", "not rebuilt"]}
    first = sweep_figures_module.first_image(point)
    assert first == {"psnr": 13.8, "ssim": 0.36, "baseline_psnr": 10.7, "baseline_ssim": 0.2, "verdict": "rebuilt"}
    assert sweep_figures_module.cell_label(first) == "13.8 dB, SSIM 0.36\nrebuilt"
    single = {**point, "psnr_each": [11.0], "verdict_each": ["not rebuilt"]}
    assert sweep_figures_module.first_image(single) is single  # one image: the point's own scores
    older = {k: v for k, v in point.items() if not k.endswith("_each")}
    assert sweep_figures_module.first_image(older) is older


def test_the_privacy_utility_frontier_labels_each_point_with_the_epsilon_its_accuracy_cost(tmp_path, drawn):
    """The accuracy on the x axis is the training's, whose epsilon (every step releases a whole-update clip's
    update) can be far above the attacked message's: both are labelled, the training's after the slash."""
    records = []
    for i, (z, eps, train_eps) in enumerate([(0.0, None, None), (0.7, 7.11, 417.9)]):
        m = {"d": 100, "b": 50, "m": 64, "psnr": 10.0 - i, "ssim": 0.1, "utility_acc": 0.8 + 0.01 * i,
             "epsilon": eps, "utility_epsilon": train_eps, "privacy_note": "note", "defense": "clip:C=1"}
        records.append({"key": f"{i:012d}", "index": i, "grid": {"z": z}, "params": {**SHARED, "sketch": "srht"},
                        "metrics": m})
    sweep_figures_module.privacy_utility_frontier(tmp_path, records, "z")
    fig = drawn["privacy_utility"]
    texts = sorted(t.get_text() for ax in fig.axes for t in ax.texts)
    assert texts == ["ε=7.11 / 418", "ε=∞ / ∞"]
    assert "ε of the attacked message / of the training" in fig._suptitle.get_text()
    for r in records:  # points without a training: the message's epsilon alone
        r["metrics"].pop("utility_epsilon")
    drawn.clear()
    sweep_figures_module.privacy_utility_frontier(tmp_path, records, "z")
    assert sorted(t.get_text() for ax in drawn["privacy_utility"].axes for t in ax.texts) == ["ε=7.11", "ε=∞"]


def test_std_bars_and_baseline_bands_stop_at_the_values_a_metric_can_take(tmp_path, drawn):
    points = [{"sigma": 0.0, "image_index": i} for i in (0, 1)]
    fake_sweep(tmp_path, points, baselines=True)
    lines = [json.loads(t) for t in (tmp_path / "results.jsonl").read_text().splitlines()]
    for rec, ssim in zip(lines, (1.0, 0.2)):  # mean 0.6, std 0.57: a plain bar would reach 1.17
        rec["metrics"].update(ssim=ssim, baseline_ssim=ssim)
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    sweep_figures(tmp_path)
    ssim_ax = drawn["metrics_vs_strength"].axes[1]
    assert ssim_ax.get_ylabel() == "SSIM"
    tops = [max(p[1] for p in seg) for coll in ssim_ax.collections if hasattr(coll, "get_segments")
            for seg in coll.get_segments()]
    bottoms = [min(p[1] for p in seg) for coll in ssim_ax.collections if hasattr(coll, "get_segments")
               for seg in coll.get_segments()]
    assert tops and max(tops) == pytest.approx(1.0) and min(bottoms) < 0.1  # cut above, the full std below
    bands = [coll for coll in ssim_ax.collections if not hasattr(coll, "get_segments")]
    assert bands and max(v[1] for b in bands for path in b.get_paths() for v in path.vertices) <= 1.0 + 1e-9


def test_a_repetition_left_unscored_keeps_its_setting_on_the_frontier(tmp_path, drawn):
    """A point whose PSNR is not a number (null) is left out of its setting's mean, as summary.csv leaves it out;
    the setting stays on the privacy-utility frontier at its other repetitions' mean."""
    records = []
    for i, (z, psnr) in enumerate([(0.0, 60.0), (0.0, None), (0.7, 12.0), (0.7, 10.0)]):
        m = {"d": 100, "b": 50, "m": 64, "psnr": psnr, "ssim": 0.1, "utility_acc": 0.8, "epsilon": None,
             "privacy_note": "note", "defense": "clip:C=1"}
        records.append({"key": f"{i:012d}", "index": i, "grid": {"z": z, "image_index": i % 2},
                        "params": {**SHARED, "sketch": "srht"}, "metrics": m})
    sweep_figures_module.privacy_utility_frontier(tmp_path, records, "z")
    (line,) = [ln for ax in drawn["privacy_utility"].axes for ln in ax.get_lines() if len(ln.get_ydata()) > 1]
    assert sorted(line.get_ydata()) == [11.0, 60.0]


def test_an_empty_grid_value_is_named_none_in_legends_and_ticks():
    from leakattack.results import series_label

    assert series_label((("defense", '""'), ("sketch", '"srht"'))) == "defense=none, sketch=srht"
    assert sweep_figures_module._num("") == "none" and sweep_figures_module._num(0.5) == "0.5"


def test_an_identity_sketchs_row_in_the_reconstruction_grid_reads_b_over_d_1_in_the_figure_and_the_report(
        tmp_path, drawn):
    """sketch = "none" keeps every coordinate whatever sketch_ratio says: its rows read the b/d it ran at, once."""
    from leakattack.figures.report.sweep_section import _recon_grid

    fake_sweep(tmp_path, [{"sketch": k, "sketch_ratio": r, "image_index": 0} for k in ("srht", "none")
                          for r in (0.1, 0.5)], strength="sketch_ratio")
    sweep_figures(tmp_path)
    rows = {sub._suptitle.get_text(): [ax.get_ylabel() for ax in sub.axes if ax.get_ylabel()]
            for sub in drawn["reconstruction_grid"].subfigs}
    assert rows == {"sketch=srht": ["truth", "b/d = 0.1", "b/d = 0.5"], "sketch=none": ["truth", "b/d = 1"]}
    html = _recon_grid(tmp_path, [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()],
                       {"strength": "sketch_ratio"})
    none = html[html.index("sketch=none"):]
    assert none.count("<tr><th>b/d = ") == 1 and "<tr><th>b/d = 1</th>" in none  # as the figure names the row


def test_the_reports_points_row_reads_as_a_sentence_without_a_planned_count(tmp_path):
    """'4 finished of not recorded planned' where sweep.json names no count."""
    from leakattack.figures.report.sweep_section import _sweep_setting

    fake_sweep(tmp_path, [{"sigma": s, "image_index": 0} for s in SIGMAS])
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rows = dict(_sweep_setting(tmp_path, records, {"strength": "sigma"}))
    assert rows["points"] == "3 finished (the number planned is not recorded)"
    assert dict(_sweep_setting(tmp_path, records, {"strength": "sigma", "points": 4}))["points"] == \
        "3 finished of 4 planned"


def test_a_report_of_a_sweep_whose_plan_names_none_of_its_stored_points_says_they_are_another_plans(tmp_path):
    """It read 'results.jsonl holds no finished point' beside a results.jsonl of three finished points."""
    from leakattack.figures.report import build_report

    fake_sweep(tmp_path, [{"sigma": s, "image_index": 0} for s in SIGMAS])
    (tmp_path / "sweep.json").write_text(json.dumps({"strength": "sigma", "keys": ["0123456789ab"], "points": 1}))
    text = build_report([tmp_path])
    assert ("No summary: results.jsonl holds no finished point of the plan sweep.json names (3 of another plan are "
            "left out).") in text


def test_a_point_whose_psnr_is_not_a_number_reads_so_in_the_reports_reconstruction_grid(tmp_path):
    """A null PSNR (how a run stores a score that is not finite) read "–" in the grid, as a score never taken."""
    from leakattack.figures.report.sweep_section import _recon_grid

    fake_sweep(tmp_path, [{"sigma": s, "image_index": 0} for s in (0.0, 0.1)],
               psnr_of=lambda g: None if g["sigma"] else 25.0)
    html = _recon_grid(tmp_path, [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()],
                       {"strength": "sigma"})
    assert "25.0 dB · SSIM 0.50" in html and "not a number dB · SSIM 0.50" in html and "– dB" not in html


def test_an_identity_sketchs_grid_ratio_reads_as_it_ran_in_the_summary_and_the_legends(tmp_path, drawn):
    """sketch = "none" beside a grid of sketch_ratio ran once at b = d, and summary.csv, the report's table and the
    batch figure's legend named it by the first ratio of the grid (0.25), where the reconstruction grid read b/d = 1."""
    from leakattack.figures.sweep import with_grid_values
    from leakattack.results import summarize

    fake_sweep(tmp_path, [{"sketch": "srht", "sketch_ratio": 0.25, "batch_size": 1},
                          {"sketch": "srht", "sketch_ratio": 0.25, "batch_size": 2},
                          {"sketch": "none", "sketch_ratio": 0.25, "batch_size": 1},
                          {"sketch": "none", "sketch_ratio": 0.25, "batch_size": 2}], strength=None)
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for r in records[2:]:
        r["params"]["sketch"] = "none"
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = summarize(with_grid_values(records))
    assert sorted((r["sketch"], r["sketch_ratio"]) for r in rows) == [("none", 1), ("none", 1), ("srht", 0.25),
                                                                       ("srht", 0.25)]
    sweep_figures(tmp_path)
    labels = drawn["metrics_vs_batch"].axes[0].get_legend_handles_labels()[1]
    assert "sketch=none, sketch_ratio=1" in labels and not any("none, sketch_ratio=0.25" in t for t in labels)


def _extents(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_six_metric_panels_wrap_into_rows_whose_labels_stay_clear_and_an_infinite_epsilon_is_named(tmp_path, drawn):
    """Six panels drew one row 3,300 px wide, a page's third, and the features panel's y label ran past its panel
    into the one beside it; the ε panel left its z = 0 point (ε = ∞) out unsaid."""
    records = []
    for i, (z, eps) in enumerate([(0.0, None), (0.1, 96.1), (1.0, 4.7)]):
        m = {"d": 100, "b": 50, "m": 64, "psnr": 6.0 - i, "ssim": 0.02, "iip": 0.5, "iip_features": 0.0,
             "utility_acc": 0.15, "epsilon": eps, "privacy_note": "note", "defense": "clip:C=1",
             "verdict": "not rebuilt"}
        records.append({"key": f"{i:012d}", "index": i, "grid": {"z": z}, "params": {**SHARED, "sketch": "srht"},
                        "metrics": m})
    sweep_figures_module.metrics_vs_strength(tmp_path, records, "z")
    fig = drawn["metrics_vs_strength"]
    assert len(fig.axes) == 6
    rows = sorted({round(ax.get_position().y0, 3) for ax in fig.axes})
    assert len(rows) == 2 and fig.get_size_inches()[0] <= 3 * 3.6 + 1e-9
    r = _extents(fig)
    for ax in fig.axes:  # each y label's box stays left of its own panel, clear of every other panel
        label = ax.yaxis.label.get_window_extent(r)
        assert label.x1 <= ax.get_window_extent(r).x0 + 1
        assert label.height <= ax.get_window_extent(r).height + 1
        assert not any(label.overlaps(other.get_window_extent(r)) for other in fig.axes if other is not ax)
    (eps_ax,) = [ax for ax in fig.axes if ax.get_ylabel().startswith("ε")]
    note = " ".join(t.get_text() for t in eps_ax.texts).replace("\n", " ")
    assert "ε = ∞ (no DP bound) at z = 0" in note


def test_the_frontier_labels_stay_inside_the_frame(tmp_path, drawn):
    """The rightmost point's label ran across the right edge of the plot."""
    records = []
    for i, (z, eps, acc, psnr) in enumerate([(0.0, None, 0.156, 5.83), (0.1, 96.1, 0.1365, 4.35),
                                             (1.0, 4.73, 0.1392, 4.12)]):
        m = {"d": 100, "b": 50, "m": 64, "psnr": psnr, "ssim": 0.1, "utility_acc": acc, "epsilon": eps,
             "utility_epsilon": 550.0 if eps else None, "privacy_note": "note", "defense": "clip:C=1"}
        records.append({"key": f"{i:012d}", "index": i, "grid": {"z": z}, "params": {**SHARED, "sketch": "srht"},
                        "metrics": m})
    sweep_figures_module.privacy_utility_frontier(tmp_path, records, "z")
    fig = drawn["privacy_utility"]
    r = _extents(fig)
    (ax,) = fig.axes
    frame = ax.get_window_extent(r)
    for t in ax.texts:
        box = t.get_window_extent(r)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, t.get_text()


def test_two_series_at_one_setting_share_its_frontier_label(tmp_path, drawn):
    """Two recipes attacking one defense share its ε and accuracy: their labels were drawn on top of each other."""
    records = []
    for i, (recipe, psnr) in enumerate([("dlg", 52.0), ("ig", 20.0)]):
        m = {"d": 100, "b": 50, "m": 64, "psnr": psnr, "ssim": 0.1, "utility_acc": 0.855, "epsilon": 5.5e9,
             "privacy_note": "note", "defense": "clip:C=1"}
        records.append({"key": f"{i:012d}", "index": i, "grid": {"z": 1e-5, "recipe": recipe},
                        "params": {**SHARED, "sketch": "srht"}, "metrics": m})
    sweep_figures_module.privacy_utility_frontier(tmp_path, records, "z")
    (ax,) = drawn["privacy_utility"].axes
    assert [(t.get_text(), t.xy[1]) for t in ax.texts] == [("ε=5.5e+09", 52.0)]
