"""Sweep figures label what they draw: readable row labels for any grid key, a legend entry for every reference
line, legend titles naming only what varies, and notes that count only the keys that vary."""

import json
from pathlib import Path

import pytest
from test_sweep_figures import fake_sweep as shared_sweep

from leakattack.figures import sweep as sweep_module
from leakattack.figures import sweep_figures
from leakattack.figures.common import plt

SHARED = {"model": "lenet", "dataset": "digits", "objective": "l2", "tv": 0.0, "defense": "", "seed": 0}


def fake_sweep(folder: Path, points, strength="sigma", psnr_of=lambda g: 20.0):
    """The figure tests' hand-written sweep (tests/figures is on the path) with this file's parameters and
    baselines."""
    shared_sweep(folder, points, psnr_of, strength=strength, shared=SHARED, baselines=True)



def row_labels(fig):
    """The reconstruction grid's row labels below the truth, top to bottom."""
    return [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel() and ax.get_ylabel() != "truth"]


def legend_texts(fig):
    return [t.get_text() for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
            for t in leg.get_texts()]


def legend_titles(fig):
    return [leg.get_title().get_text() for leg in fig.legends + [ax.get_legend() for ax in fig.axes
                                                                 if ax.get_legend()]]


def title(fig):
    return fig._suptitle.get_text().replace("\n", " ")


@pytest.mark.parametrize("key,values,want", [
    ("sketch_ratio", [0.1, 0.5], ["b/d = 0.1", "b/d = 0.5"]),
    ("sketch_dim", [16, 64], ["sketch size b = 16", "sketch size b = 64"]),
    ("noise_std", [0.0, 1e-5], ["noise std = 0.0", "noise std = 1e-05"]),
    ("priors", [[], ["tv", "l2"]], ["priors = none", "priors = tv+l2"]),
])
def test_row_labels_read_name_equals_value_on_one_line_without_underscores(tmp_path, drawn, key, values, want):
    fake_sweep(tmp_path, [{"sketch": "srht", key: v, "image_index": i} for v in values for i in (0, 1)],
               strength=key)
    sweep_figures(tmp_path)
    fig = drawn["reconstruction_grid"]
    assert sorted(row_labels(fig)) == sorted(want)  # rows ascend: strings in their sorted order
    name = want[0].split(" = ")[0]
    assert title(fig).startswith(f"reconstructions by {name}")


def test_a_long_row_label_is_wrapped_to_fit_its_row(tmp_path, drawn):
    specs = ["per_example:C=1,gaussian:sigma=0.1@before_sketch", "clip:C=1,gaussian:z=1.1@after_sketch"]
    fake_sweep(tmp_path, [{"defense_spec": s, "image_index": 0} for s in specs], strength="defense_spec")
    long_word = sweep_module._level_label("defense_spec", json.dumps("x" * 30))
    assert long_word == "defense spec =\n" + "x" * 24 + "\n" + "x" * 6  # a piece longer than a line is cut
    sweep_figures(tmp_path)
    fig = drawn["reconstruction_grid"]
    labels = row_labels(fig)
    # the name on a line of its own, the value broken after a comma or colon or before an @, never inside a word
    assert sorted(labels) == ["defense spec =\nclip:C=1,gaussian:z=1.1\n@after_sketch",
                              "defense spec =\nper_example:C=1,\ngaussian:sigma=0.1\n@before_sketch"]
    assert all(len(line) <= sweep_module.ROW_LABEL_CHARS for label in labels for line in label.split("\n"))
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        if ax.get_ylabel() in labels:  # the rotated label is no taller than its row's image
            assert ax.yaxis.label.get_window_extent(r).height <= ax.get_window_extent(r).height


def test_the_ssim_border_of_metrics_vs_strength_is_named_in_the_legend(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": k, "sigma": s, "image_index": 0} for k in ("srht", "none")
                          for s in (0.0, 1e-3, 1e-1)])
    sweep_figures(tmp_path)
    fig = drawn["metrics_vs_strength"]
    ssim_ax = fig.axes[1]
    assert ssim_ax.get_ylabel() == "SSIM"
    dotted = [ln for ln in ssim_ax.get_lines() if ln.get_linestyle() == ":" and len(ln.get_xdata())]
    assert len(dotted) == 1 and set(dotted[0].get_ydata()) == {sweep_module.SSIM_BORDER}
    assert sweep_module.SSIM_BORDER_LABEL in legend_texts(fig)
    assert sweep_module.SSIM_BORDER_LABEL.startswith("SSIM 0.3: ")
    docs = (Path(__file__).parents[2] / "docs" / "sweeps.md").read_text()
    assert f"SSIM = {sweep_module.SSIM_BORDER:g} crossing" in docs  # the border the label points to


def test_the_b_equals_m_line_of_the_phase_transition_is_named_in_the_legend(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": "srht", "sketch_dim": b, "image_index": 0} for b in (16, 64)], strength=None)
    sweep_figures(tmp_path)
    fig = drawn["phase_transition"]
    dotted = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == ":" and len(ln.get_xdata())]
    assert [ln.get_xdata()[0] for ln in dotted] == [1.0]
    assert sweep_module.SIZE_BORDER_LABEL in legend_texts(fig)


def test_one_series_has_no_legend_title_or_entry_and_the_title_says_what_it_is(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": "srht", "lr": 0.1, "sigma": s, "image_index": i}
                          for s in (0.0, 1e-3, 1e-1) for i in (0, 1)])
    sweep_figures(tmp_path)
    fig = drawn["metrics_vs_strength"]
    assert legend_titles(fig) == [""]
    assert legend_texts(fig) == [sweep_module.BASELINE_LABEL, sweep_module.SSIM_BORDER_LABEL]
    assert "sketch srht" in title(fig) and "lr = 0.1" in title(fig)
    assert "sigma" not in title(fig).split("attack against sigma", 1)[1]  # the x axis is not a shared value


def test_several_series_keep_their_legend_title_and_entries(tmp_path, drawn):
    fake_sweep(tmp_path, [{"sketch": k, "sigma": s, "image_index": 0} for k in ("srht", "none")
                          for s in (0.0, 1e-3, 1e-1)])
    sweep_figures(tmp_path)
    fig = drawn["metrics_vs_strength"]
    assert legend_titles(fig) == ["sketch"]
    assert legend_texts(fig)[:2] == ["srht", "none"]
    assert "sketch srht" not in title(fig)


@pytest.mark.parametrize("points,varied", [
    ([{"model": "lenet"}], "nothing"),
    ([{"model": "lenet", "image_index": i} for i in (0, 1)], "image_index"),
    ([{"model": m, "image_index": 0} for m in ("lenet", "mlp")], "model"),
])
def test_the_note_counts_only_grid_keys_that_take_more_than_one_value(tmp_path, drawn, points, varied):
    fake_sweep(tmp_path, points, strength=None)
    notes: list = []
    assert sweep_figures(tmp_path, notes=notes) == []
    assert len(notes) == 1 and notes[0].endswith(f"this grid varies {varied}")


def test_the_epsilon_panel_says_when_its_epsilon_is_the_pure_one_of_laplace_noise(tmp_path, drawn):
    """Laplace noise's ε is the Laplace mechanism's (δ = 0), not the RDP accountant's: the axis says so."""
    def rec(i, scale, delta):
        return {"key": f"k{i}", "index": i, "grid": {"noise": scale}, "params": {"model": "lenet", "sketch": "srht"},
                "metrics": {"psnr": 10.0, "ssim": 0.1, "d": 10, "b": 5, "defense": "clip:C=1", "epsilon": 10 / scale,
                            "delta": delta, "privacy_note": "..."}}

    for delta, want in ((0.0, "ε (RDP; pure for Laplace)"), (1e-5, "ε (RDP)")):
        for fig in drawn.values():
            plt.close(fig)
        drawn.clear()
        sweep_module.metrics_vs_strength(tmp_path, [rec(0, 0.1, delta), rec(1, 1.0, delta)], "noise")
        assert want in [ax.get_ylabel() for ax in drawn["metrics_vs_strength"].axes]


def test_a_legend_with_the_reference_lines_covers_no_panel_and_no_tick_label(tmp_path, drawn):
    """Two series with their baselines and the SSIM border made a legend of long entries that was drawn inside the
    PSNR panel, wider than the panel: it covered the lines and the PSNR tick labels."""
    fake_sweep(tmp_path, [{"sketch": k, "sigma": s, "image_index": 0} for k in ("srht", "none") for s in (0.0, 0.1)])
    sweep_figures(tmp_path)
    fig = drawn["metrics_vs_strength"]
    assert sweep_module.BASELINE_LABEL in legend_texts(fig) and sweep_module.SSIM_BORDER_LABEL in legend_texts(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for leg in legends:
        box = leg.get_window_extent(r)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(r))
            labels = ax.get_yticklabels() + ax.get_xticklabels()
            assert not any(t.get_text() and box.overlaps(t.get_window_extent(r)) for t in labels)


def test_the_identifiability_panels_draw_the_share_identified_beside_the_baselines(tmp_path, drawn):
    """Points that record image identifiability (by pixels and by the victim's features) get a panel of each share
    against the defense's strength, on [0, 1], with the better baseline's share dashed; points without it, none."""
    def rec(i, sigma, share):
        return {"key": f"k{i}", "index": i, "grid": {"sigma": sigma}, "params": {"model": "lenet", "sketch": "srht"},
                "metrics": {"psnr": 10.0, "ssim": 0.1, "d": 10, "b": 5, "verdict": "not rebuilt", "iip": share,
                            "baseline_iip": 0.0, "iip_features": 1.0, "baseline_iip_features": 0.0}}

    sweep_module.metrics_vs_strength(tmp_path, [rec(0, 0.01, 1.0), rec(1, 0.1, 0.0)], "sigma")
    axes = {ax.get_ylabel().replace("\n", " "): ax for ax in drawn["metrics_vs_strength"].axes}  # labels wrap
    pixels, feats = axes["identified (IIP, pixels)"], axes["identified (IIP, victim's features)"]
    assert pixels.get_ylim() == pytest.approx((-0.05, 1.05))
    drawn_y = [list(line.get_ydata()) for line in pixels.get_lines() if line.get_linestyle() == "-"]
    assert [1.0, 0.0] in drawn_y and [0.0, 0.0] in [list(ln.get_ydata()) for ln in pixels.get_lines()
                                                    if ln.get_linestyle() == "--"]
    assert [1.0, 1.0] in [list(ln.get_ydata()) for ln in feats.get_lines() if ln.get_linestyle() == "-"]
    for fig in drawn.values():
        plt.close(fig)
    drawn.clear()
    plain = [{**rec(0, 0.01, 1.0), "metrics": {"psnr": 10.0, "ssim": 0.1, "d": 10, "b": 5}}]
    sweep_module.metrics_vs_strength(tmp_path, plain, "sigma")
    assert not any(ax.get_ylabel().startswith("identified") for ax in drawn["metrics_vs_strength"].axes)


@pytest.mark.parametrize("params, said", [
    ({"model": "lenet", "dataset": None}, "lenet on photos"),
    ({"model": "lenet", "dataset": None, "protocol": "fedavg", "protocol_dir": None}, "lenet on digits"),
    ({"model": "lenet", "dataset": None, "protocol": "fedavg", "protocol_dir": "runs/fedavg"}, "lenet"),
    ({"model": "lenet", "dataset": "mnist", "protocol": "fedavg", "protocol_dir": "runs/fedavg"}, "lenet on mnist"),
])
def test_the_shared_setting_names_the_data_set_the_points_attacked(params, said):
    """A protocol's points (dataset null) were titled 'on photos', where the protocol's clients hold digits, or the
    set their training folder names."""
    records = [{"params": {**params, "protocol_round": t}, "metrics": {}} for t in (1, 2)]
    assert sweep_module.context(records).split(" · ")[0] == said


def test_the_shared_setting_names_priors_written_with_a_placeholder():
    """`priors = ["tv:{w}"]` with w in the grid: the title and the report's shared setting named no prior at all
    (not even "no prior"), where a defense template is shown with its placeholders."""
    meta = {"base": {"priors": ["tv:{w}"], "defense": "clip:C=1,gaussian:z={z}@after_sketch"}}
    records = [{"params": {"model": "lenet", "dataset": "digits", "tv": w, "priors": [], "defense": f"clip:C=1,"
                           f"gaussian:z={z}@after_sketch"}, "grid": {"w": w, "z": z}, "metrics": {}}
               for w in (0.01, 0.1) for z in (0.0, 1.0)]
    parts = sweep_module.context(records, meta).split(" · ")
    assert "prior tv:<w> (w varied)" in parts and "defense clip:C=1,gaussian:z=<z>@after_sketch (z varied)" in parts
    one = sweep_module.context(records[:2], meta).split(" · ")  # w = 0.01 alone: the weight the points share
    assert "prior TV 0.01" in one
    plain = [{"params": {"model": "lenet", "dataset": "digits", "priors": ["tv:0.1", "bn:0.01"]}, "metrics": {}}]
    assert "priors tv:0.1, bn:0.01" in sweep_module.context(plain).split(" · ")


def test_the_shared_setting_names_the_priors_that_stay_when_the_tv_weight_varies_and_the_reverse():
    tv_varies = [{"params": {"model": "lenet", "dataset": "digits", "tv": w, "priors": ["bn:0.01"]}, "grid": {"tv": w},
                  "metrics": {}} for w in (0.01, 0.1)]
    assert "prior bn:0.01" in sweep_module.context(tv_varies, {"base": {"priors": ["bn:0.01"]}}).split(" · ")
    priors_vary = [{"params": {"model": "lenet", "dataset": "digits", "tv": 0.1, "priors": p}, "grid": {"priors": p},
                    "metrics": {}} for p in (["bn:0.01"], ["dip:1"])]
    assert "prior TV 0.1" in sweep_module.context(priors_vary).split(" · ")
