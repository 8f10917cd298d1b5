"""A run's reconstruction figure stays readable at every batch size: rows of truth | start | reconstruction up
to four images, a near-square grid of labelled (truth | reconstruction) pairs beyond, nothing overlapping."""

from pathlib import Path

import numpy as np
import pytest
import torch

from leakattack.figures import run as run_figures

TITLE = "lenet / srht (b/d = 0.5), lbfgs, 4000 it"


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn, by file stem, kept open instead of saved."""
    figs = {}
    monkeypatch.setattr(run_figures, "save", lambda fig, path: figs.setdefault(Path(path).stem, fig))
    yield figs
    for fig in figs.values():
        run_figures.plt.close(fig)


def batch(n, channels=3, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, channels, size, size, generator=g), torch.rand(n, channels, size, size, generator=g)


def draw(tmp_path, drawn, n, channels=3, size=32, title=TITLE):
    truth, recon = batch(n, channels, size)
    psnr, ssim = [10.0 + i for i in range(n)], [i / (2 * n) for i in range(n)]
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, truth, recon, psnr, ssim, title)
    return drawn["reconstruction"]


def boxes(fig):
    """Window extents of the images, of every text on the figure (titles, labels, suptitle), after drawing."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [fig._suptitle] + [t for ax in fig.axes for t in (ax.title, ax.xaxis.label) if t.get_text()]
    return [ax.get_window_extent(r) for ax in fig.axes], [t.get_window_extent(r) for t in texts]


def assert_no_overlaps(fig):
    images, texts = boxes(fig)
    for i, box in enumerate(texts):
        assert not any(box.overlaps(a) for a in images), box
        assert not any(box.overlaps(o) for o in texts[i + 1:]), box
    for i, a in enumerate(images):
        assert not any(a.overlaps(o) for o in images[i + 1:]), a
    top = max(b.y1 for b in images + texts[1:])
    assert 0 <= texts[0].y0 - top < 0.15 * fig.dpi  # the title sits right above the images: under 0.15 in
    assert all(fig.bbox.x0 <= t.x0 and t.x1 <= fig.bbox.x1 for t in texts)  # no text runs off the sides


@pytest.mark.parametrize("n", [1, 4])
def test_up_to_four_images_keep_one_row_each_of_truth_start_and_reconstruction(tmp_path, drawn, n):
    fig = draw(tmp_path, drawn, n)
    assert len(fig.axes) == 3 * n
    titles = [ax.get_title() for ax in fig.axes]
    # a batch's truths are numbered by their place in it, as the summary's notes and the report number them
    assert titles[:2] == ["truth" if n == 1 else "truth 0", "start"]
    assert titles[2].startswith("reconstruction\nPSNR 10.0 dB") and titles[3 * n - 3] == ("truth" if n == 1 else
                                                                                          f"truth {n - 1}")
    assert_no_overlaps(fig)


@pytest.mark.parametrize("n,rows,cols", [(5, 2, 3), (10, 3, 4), (64, 8, 8), (65, 8, 9)])
def test_larger_batches_are_a_near_square_grid_of_one_panel_per_image(tmp_path, drawn, n, rows, cols):
    fig = draw(tmp_path, drawn, n)
    assert len(fig.axes) == n  # the unused cells of the last row are removed
    spec = fig.axes[0].get_subplotspec().get_gridspec()
    assert (spec.nrows, spec.ncols) == (rows, cols)


def test_each_pair_shows_truth_then_reconstruction_with_its_index_and_psnr_under_it(tmp_path, drawn):
    truth, recon = batch(6)
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, torch.zeros_like(truth), recon,
                                      [30.25, 12.0, 8.0, 9.0, 10.0, 11.0], [0.5] * 6, TITLE)
    fig = drawn["reconstruction"]
    ax = fig.axes[0]
    pair = ax.get_images()[0].get_array()
    w, gap = 32, 2
    assert pair.shape == (32, 2 * w + gap, 3)
    assert np.allclose(pair[:, :w], truth[0].permute(1, 2, 0).numpy())
    assert np.allclose(pair[:, w + gap:], recon[0].permute(1, 2, 0).numpy())
    assert np.all(pair[:, w:w + gap] == 1.0)  # a white gap between the two
    assert ax.get_xlabel() == "0: 30.2 dB" and fig.axes[1].get_xlabel() == "1: 12.0 dB"
    head = fig._suptitle.get_text()
    assert head.startswith(TITLE + "\n")  # the run's title, then what the grid shows, wrapped to the width
    head = head.replace("\n", " ")
    assert "each pair truth | reconstruction with its place in the batch and PSNR below" in head
    assert "mean PSNR 13.4 dB" in head and "SSIM 0.500" in head and "start images not shown" in head


@pytest.mark.parametrize("n", [2, 6])
def test_the_images_are_named_by_their_index_in_the_data_set_where_the_run_knows_it(tmp_path, drawn, n):
    truth, recon = batch(n, 1, 8)
    indices = [17 + 3 * i for i in range(n)]  # a class draw: the data set's indices, not 0..n-1
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, truth, recon, [9.0] * n, [0.1] * n,
                                      TITLE, indices=indices)
    fig = drawn["reconstruction"]
    if n == 2:  # rows: the truth's panel names the image
        assert [ax.get_title() for ax in fig.axes[::3]] == ["truth 0 (data set index 17)",
                                                            "truth 1 (data set index 20)"]
    else:  # pairs: the label under each pair starts with the place in the batch and the index
        assert [ax.get_xlabel().split(":")[0] for ax in fig.axes] == [f"{k} (#{i})" for k, i in enumerate(indices)]
        assert "with its place in the batch (#: the data set's index) and PSNR" in \
            fig._suptitle.get_text().replace("\n", " ")
    run_figures.reconstruction_figure(tmp_path / "one.png", truth[:1], truth[:1], recon[:1], [9.0], [0.1], TITLE,
                                      indices=[42])
    assert drawn["one"].axes[0].get_title() == "truth (data set index 42)"  # one image: no place to give
    assert_no_overlaps(fig)


@pytest.mark.parametrize("n,channels", [(10, 1), (64, 3)])
def test_a_grid_of_pairs_is_laid_out_without_overlaps(tmp_path, drawn, n, channels):
    fig = draw(tmp_path, drawn, n, channels, size=28 if channels == 1 else 32)
    assert_no_overlaps(fig)
    if channels == 1:
        assert fig.axes[0].get_images()[0].get_cmap().name == "gray"


def test_a_grid_without_a_title_still_says_what_it_shows(tmp_path, drawn):
    fig = draw(tmp_path, drawn, 8, title="")
    assert fig._suptitle.get_text().startswith("8 images, each pair truth | reconstruction")
    assert_no_overlaps(fig)


def test_a_batch_of_64_noise_images_makes_a_file_under_3_mb(tmp_path):
    # random pixels are the least compressible content a reconstruction can have
    draw_path = tmp_path / "reconstruction.png"
    truth, recon = batch(64)
    run_figures.reconstruction_figure(draw_path, truth, truth, recon, [20.0] * 64, [0.5] * 64, TITLE)
    assert 100_000 < draw_path.stat().st_size < 3_000_000


@pytest.mark.parametrize("n", [1, 5])
def test_224_px_images_are_not_shrunk_in_the_saved_file(tmp_path, drawn, n):
    fig = draw(tmp_path, drawn, n, size=224)
    images, _ = boxes(fig)
    width = min(b.width for b in images) / fig.dpi * run_figures.DPI  # pixels in the file saved at DPI
    assert width >= (224 if n == 1 else 2 * 224)
    assert fig.axes[0].get_images()[0].get_interpolation() == "antialiased"  # smooth, not blocky, when near 1:1


VERDICT = {"verdict": "not rebuilt", "attacked": True, "psnr": 8.8, "ssim": 0.039, "baseline_psnr": 13.64,
           "baseline_ssim": 0.188, "baseline_mean_psnr": 13.64, "baseline_mean_ssim": 0.188, "verdict_baseline": "mean"}


def test_the_verdict_line_gives_the_verdict_and_the_better_baselines_scores():
    assert run_figures.verdict_line(VERDICT) == ("not rebuilt (no better than the data set's mean image): better "
                                                 "baseline 13.64 dB / 0.188")
    assert run_figures.verdict_line({**VERDICT, "verdict": "rebuilt"}) == "rebuilt: better baseline 13.64 dB / 0.188"
    assert run_figures.verdict_line({**VERDICT, "attacked": False}).startswith("nothing attacked: ")
    assert run_figures.verdict_line({"verdict": None}) == ""


def test_a_closed_form_run_has_no_start_panel_and_its_title_carries_the_verdict(tmp_path, drawn):
    truth, recon = batch(1, 1, 8)
    title = "lenet on digits image 0 (b/d = 1), rgap, in closed form"
    line = run_figures.verdict_line(VERDICT)
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, None, recon, [26.2], [0.93], title,
                                      verdict=line)
    fig = drawn["reconstruction"]
    assert [ax.get_title() for ax in fig.axes] == ["truth", "reconstruction\nPSNR 26.2 dB, SSIM 0.930"]
    assert fig._suptitle.get_text().replace("\n", " ") == f"{title} {line}"
    assert_no_overlaps(fig)
    # a run that attacked nothing names the image it returned
    run_figures.reconstruction_figure(tmp_path / "idle.png", truth, truth, recon, [8.8], [0.04], TITLE,
                                      verdict="nothing attacked", returned="returned: the start")
    assert [ax.get_title() for ax in drawn["idle"].axes][-1].startswith("returned: the start\nPSNR 8.8 dB")


def test_a_grid_of_pairs_carries_the_verdict_in_its_title(tmp_path, drawn):
    truth, recon = batch(6, 1, 8)
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, truth, recon, [10.0] * 6, [0.1] * 6,
                                      TITLE, verdict=run_figures.verdict_line(VERDICT))
    fig = drawn["reconstruction"]
    assert "better baseline 13.64 dB / 0.188" in fig._suptitle.get_text().replace("\n", " ")
    assert_no_overlaps(fig)


def test_the_verdict_line_counts_a_batchs_images_where_they_differ_from_its_verdict():
    mixed = {**VERDICT, "verdict": "rebuilt", "verdict_each": ["rebuilt", "not rebuilt"]}
    assert run_figures.verdict_line(mixed) == "rebuilt (1 of 2 images): better baseline 13.64 dB / 0.188"
    hidden = {**VERDICT, "verdict_each": ["not rebuilt", "rebuilt", "not rebuilt"]}
    assert run_figures.verdict_line(hidden) == ("not rebuilt (no better than the data set's mean image; 1 of 3 "
                                                "images rebuilt): better baseline 13.64 dB / 0.188")
    assert run_figures.verdict_line({**VERDICT, "verdict_each": ["not rebuilt"] * 2}) == \
        run_figures.verdict_line(VERDICT)


@pytest.mark.parametrize("n", [2, 6])
def test_a_batch_whose_images_verdicts_differ_marks_the_rebuilt_ones(tmp_path, drawn, n):
    truth, recon = batch(n, 1, 8)
    each = ["rebuilt"] + ["not rebuilt"] * (n - 1)
    run_figures.reconstruction_figure(tmp_path / "reconstruction.png", truth, truth, recon, [30.0] + [8.0] * (n - 1),
                                      [0.9] + [0.1] * (n - 1), TITLE, verdict_each=each)
    fig = drawn["reconstruction"]
    labels = [ax.get_title() for ax in fig.axes] if n == 2 else [ax.get_xlabel() for ax in fig.axes]
    marked = [t for t in labels if "(rebuilt)" in t]
    assert len(marked) == 1 and marked[0].startswith("reconstruction (rebuilt)\n" if n == 2 else "0: 30.0 dB")
    assert_no_overlaps(fig)
    run_figures.reconstruction_figure(tmp_path / "agree.png", truth, truth, recon, [30.0] * n, [0.9] * n,
                                      TITLE, verdict_each=["rebuilt"] * n)  # all agree: nothing to mark
    fig = drawn["agree"]
    assert not any("(rebuilt)" in ax.get_title() + ax.get_xlabel() for ax in fig.axes)


def test_a_convergence_figure_of_one_value_says_there_were_no_iterations(tmp_path, drawn):
    run_figures.convergence_figure(tmp_path / "convergence.png", [0.0], "imprint, in closed form")
    texts = [t.get_text() for t in drawn["convergence"].axes[0].texts]
    assert texts == ["one value (0.000e+00): no iterations to draw"]
    run_figures.convergence_figure(tmp_path / "curve.png", [1.0, 0.5], "t")
    assert not drawn["curve"].axes[0].texts


def test_a_convergence_figure_marks_exact_zeros_and_names_a_closed_form_residual(tmp_path, drawn):
    """R-GAP's trace 1.66e-16, 8.3e-15, 0.0 was drawn as a curve that ends rising (the 0 dropped from the log axis),
    and labelled 1 - cos from its recipe's objective."""
    run_figures.convergence_figure(tmp_path / "rgap.png", [1.66e-16, 8.3e-15, 0.0], "rgap", objective="closed-form")
    ax = drawn["rgap"].axes[0]
    assert ax.get_ylabel() == run_figures.LOSS_LABELS["closed-form"] and "residual" in ax.get_ylabel()
    assert "1 step(s) at exactly 0" in ax.get_title()
    assert any(list(line.get_xdata()) == [2] for line in ax.get_lines())  # the zero's marker
    run_figures.convergence_figure(tmp_path / "plain.png", [1.0, 0.5], "t")
    assert "exactly 0" not in drawn["plain"].axes[0].get_title()


def test_a_defended_runs_figure_title_names_the_defense_and_its_epsilon(tmp_path, monkeypatch):
    """reconstruction.png's title said nothing of the defense, so a figure copied on its own read as undefended."""
    import json

    from leakattack import cli, experiment

    titles = []
    drawn_by_run = experiment.reconstruction_figure
    monkeypatch.setattr(experiment, "reconstruction_figure",
                        lambda *a, **k: titles.append(a[6]) or drawn_by_run(*a, **k))
    base = ["run", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips"]
    assert cli.main([*base, "--defense", "clip:C=1,gaussian:sigma=0.5", "--out", str(tmp_path / "dp")]) == 0
    eps = json.loads((tmp_path / "dp" / "metrics.json").read_text())["epsilon"]
    assert titles[-1].endswith(f", defense clip:C=1.0@before_sketch, gaussian:sigma=0.5@before_sketch, ε {eps:.3g} "
                               "at δ 1e-05"), titles  # the steps apart: the title breaks between them
    assert cli.main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert "defense" not in titles[-1] and titles[-1].endswith("2 it"), titles
    assert cli.main([*base, "--defense", "clip:C=1", "--out", str(tmp_path / "clip")]) == 0
    assert titles[-1].endswith(", defense clip:C=1.0@before_sketch, ε ∞"), titles  # no noise: no DP bound


def test_a_convergence_figure_wraps_a_long_title_and_ticks_whole_steps(tmp_path, drawn):
    """A defended run's title (its spec and ε) stayed on one line 1,166 px wide, so the report shrank the figure to
    unreadable; three steps were ticked at 0.5, and one value at -0.04."""
    title = ("lenet / srht (b/d = 0.5), lbfgs, 50 it, defense clip:C=1.0@before_sketch, "
             "gaussian:z=1.0@after_sketch, ε 7.22 at δ 1e-05")
    run_figures.convergence_figure(tmp_path / "long.png", [1.0, 0.5, 0.2, 0.1], title)
    fig = drawn["long"]
    ax = fig.axes[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert ax.title.get_window_extent(r).width <= fig.bbox.width
    assert ax.get_title().replace("\n", " ") == title
    for name, losses in (("long", None), ("one", [1.0])):
        if losses is not None:
            run_figures.convergence_figure(tmp_path / f"{name}.png", losses, "t")
        a = drawn[name].axes[0]
        drawn[name].canvas.draw()
        ticks = [t for t in a.get_xticks() if a.get_xlim()[0] <= t <= a.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
