"""Every run states its verdict: its baselines in metrics.json, "not rebuilt" or "nothing was attacked" in the summary
line (with a note that a failed attack is no evidence of privacy), the line unchanged when the image was rebuilt."""

import html
import json

import pytest
import torch
import torch.nn.functional as F

import targets
from leakattack import cli
from leakattack.rebuilt import why_not_rebuilt
from leakattack.results.message import write_message
from leakattack.sketch import get_sketch

LENET = ["--model", "lenet", "--dataset", "digits"]
NOTE = "not evidence that the message is private"


def _run(argv, out, capsys):
    rc = cli.main(["run", *argv, "--out", str(out), "--quiet", "--no-lpips"])
    io = capsys.readouterr()
    m = json.loads((out / "metrics.json").read_text())
    return rc, io.out.strip().splitlines()[-1], io.err, m


def _headline(folder) -> str:
    """The headline of a run's section in the HTML report of its folder."""
    from leakattack.figures.report import build_report

    text = build_report([folder])
    start = text.index('class="headline failed">')
    return text[start:text.index("</p>", start)]


def _tip(note: str) -> str:
    """A note as the report's headline writes it: a sentence of its own, HTML-escaped."""
    return html.escape(f" {note[:1].upper()}{note[1:]}.", quote=True)


def test_a_run_that_rebuilds_nothing_says_so_beside_its_baselines(tmp_path, capsys):
    rc, line, err, m = _run([*LENET, "--iterations", "1"], tmp_path / "r", capsys)
    assert rc == 0
    for key in ("baseline_start_psnr", "baseline_start_ssim", "baseline_mean_psnr", "baseline_mean_ssim",
                "baseline_psnr", "baseline_ssim"):
        assert isinstance(m[key], float), key
    assert m["baseline_psnr"] == max(m["baseline_start_psnr"], m["baseline_mean_psnr"])
    assert m["baseline_ssim"] == max(m["baseline_start_ssim"], m["baseline_mean_ssim"])
    assert m["baseline_start_lpips"] is None and m["baseline_mean_image"].startswith("the mean of 256 of the 1797")
    assert m["verdict"] == "not rebuilt" and m["attacked"] is True
    assert m["psnr"] <= m["baseline_psnr"] + 1.0  # one step from a random start: no better than the baselines
    which = {"start": "the start", "mean": "the data set's mean image"}[m["verdict_baseline"]]
    assert line.startswith(f"not rebuilt (no better than {which}) | PSNR {m['psnr']:.2f} dB")
    assert f"against {m['baseline_psnr']:.2f} dB" in line and str(tmp_path / "r") in line
    assert [ln for ln in err.splitlines() if NOTE in ln][0].startswith("note: ")
    # the run's own objective at the truth (the message matched to round-off) and at its reconstruction
    truth, rec = m["objective_at"]["truth"], m["objective_at"]["reconstruction"]
    assert truth["match"] < 1e-20 * rec["match"] and truth["total"] == truth["match"]
    assert "the search stopped short, and more steps or starts may get closer" in err


def test_a_dlg_batch_whose_search_stopped_short_names_the_other_recipe(tmp_path, capsys):
    from leakattack.attacks.recipes import OTHER_RECIPE_NOTE

    rc, line, err, m = _run([*LENET, "--batch-size", "2", "--iterations", "2"], tmp_path / "b", capsys)
    assert rc == 0 and m["verdict"] == "not rebuilt" and "the search stopped short" in err
    assert OTHER_RECIPE_NOTE in err and "--recipe ig" in OTHER_RECIPE_NOTE
    assert _headline(tmp_path / "b").count(_tip(OTHER_RECIPE_NOTE)) == 1  # the report's headline names it too
    for flags in (["--batch-size", "1", "--iterations", "2"],  # one image
                  ["--batch-size", "2", "--recipe", "ig", "--iterations", "2"],  # ig's own run
                  ["--batch-size", "2", "--model", "mlp", "--iterations", "1"]):  # the tip's measurement is LeNet's
        rc, line, err, m = _run([*LENET, *flags], tmp_path / "o", capsys)
        assert m["verdict"] == "not rebuilt" and "the search stopped short" in err and OTHER_RECIPE_NOTE not in err
        assert _tip(OTHER_RECIPE_NOTE) not in _headline(tmp_path / "o")


def test_an_ig_run_at_loaded_weights_whose_search_stopped_short_names_the_heavier_tv_weight(tmp_path, capsys):
    """The tip is measured on trained ResNets with the ig recipe and one image, at the recipe's own TV weight there
    (0.2): a run that chose its TV weight, took no weights, or ran another recipe does not get it."""
    from leakattack.attacks.recipes import HEAVY_TV, TRAINED_TV, TRAINED_TV_NOTE

    torch.save(targets.get_model("lenet", num_classes=10, in_shape=(1, 28, 28), seed=0).model.state_dict(),
               tmp_path / "w.pt")
    ig = [*LENET, "--recipe", "ig", "--iterations", "2"]
    rc, line, err, m = _run([*ig, "--weights", str(tmp_path / "w.pt")], tmp_path / "t", capsys)
    assert rc == 0 and m["verdict"] == "not rebuilt" and "the search stopped short" in err
    assert TRAINED_TV_NOTE in err and f"--tv {HEAVY_TV}" in TRAINED_TV_NOTE
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert config["derived"]["tv"] == TRAINED_TV  # the recipe's weight for one image at loaded weights
    assert _headline(tmp_path / "t").count(_tip(TRAINED_TV_NOTE)) == 1  # the report's headline names it too
    rc, line, err, m = _run([*ig, "--weights", str(tmp_path / "w.pt"), "--prior", "tv"], tmp_path / "b", capsys)
    assert "the search stopped short" in err and TRAINED_TV_NOTE in err  # a bare tv keeps the recipe's weight
    for flags in (["--weights", str(tmp_path / "w.pt"), "--tv", "0.2"],  # the user's own TV weight
                  ["--weights", str(tmp_path / "w.pt"), "--prior", "tv:0.02"],
                  [],  # no weights loaded
                  ["--weights", str(tmp_path / "w.pt"), "--batch-size", "2"]):  # measured on one image
        rc, line, err, m = _run([*ig, *flags], tmp_path / "o", capsys)
        assert m["verdict"] == "not rebuilt" and "the search stopped short" in err and TRAINED_TV_NOTE not in err
        assert _tip(TRAINED_TV_NOTE) not in _headline(tmp_path / "o")
    rc, line, err, m = _run([*LENET, "--iterations", "2", "--weights", str(tmp_path / "w.pt")], tmp_path / "d",
                            capsys)  # the dlg recipe
    assert m["verdict"] == "not rebuilt" and TRAINED_TV_NOTE not in err


def test_a_prior_that_prefers_another_image_to_the_truth_is_named(tmp_path, capsys):
    """ResNet-20 at its seed-0 initialisation (running statistics 0 and 1) with the BatchNorm prior at weight 1: the
    prior scores the photograph higher than the Gaussian start, so the objective prefers the start to the truth."""
    rc, line, err, m = _run(["--model", "resnet20", "--dataset", "photos", "--sketch", "none", "--iterations", "3",
                             "--prior", "bn:1"], tmp_path / "r", capsys)
    assert rc == 0 and m["verdict"] == "not rebuilt"
    truth, rec = m["objective_at"]["truth"], m["objective_at"]["reconstruction"]
    assert set(truth) == set(rec) == {"match", "tv", "bn", "total"}
    assert truth["total"] == pytest.approx(truth["match"] + truth["tv"] + truth["bn"], rel=1e-12)
    assert truth["match"] < 1e-6 < rec["match"] and rec["bn"] < 0.98 * truth["bn"]
    assert (f"the attack's own objective scores this reconstruction below the truth ({rec['total']:.3g} against "
            f"{truth['total']:.3g}; ") in err and f"bn {rec['bn']:.3g} against {truth['bn']:.3g}" in err
    assert "a longer search for its minimum is not a search for the truth" in err
    rc, line, err, m = _run(["--model", "resnet20", "--dataset", "photos", "--sketch", "none", "--iterations", "3"],
                            tmp_path / "plain", capsys)
    assert set(m["objective_at"]["truth"]) == {"match", "tv", "total"} and "the search stopped short" in err


def test_a_rebuilt_image_says_so_first_beside_its_baselines(tmp_path, capsys):
    rc, line, err, m = _run([*LENET, "--sketch", "none"], tmp_path / "r", capsys)
    assert rc == 0 and m["verdict"] == "rebuilt" and m["verdict_baseline"] is None
    assert m["psnr"] > m["baseline_psnr"] + 10 and m["ssim"] > 0.9
    assert line.startswith(f"rebuilt | PSNR {m['psnr']:.2f} dB, SSIM {m['ssim']:.4f} against "
                           f"{m['baseline_psnr']:.2f} dB, {m['baseline_ssim']:.4f} for the better baseline | ")
    assert "not rebuilt" not in line and NOTE not in err
    assert "| LPIPS n/a (--no-lpips) |" in line and m["lpips_note"] == "LPIPS not requested"
    # converged with b = d >= m unknowns at the truth: the Jacobian was measured, full rank
    assert m["stop_reason"] == "tolerance" and m["unique_by_count"] is True
    assert m["jacobian_rank"] == m["unknowns"] == 784 and m["unique"] is True


@pytest.mark.parametrize("flags,why", [
    # gd's fixed step of 1e308 leaves the start's neighbourhood at once (L-BFGS's line search backtracks from it)
    (["--optimizer", "gd", "--lr", "1e308"], "never went below its start value"),
    (["--defense", "gaussian:sigma=1e308"], "not finite at the start"),
])
def test_a_run_that_attacked_nothing_says_so_instead_of_a_psnr(tmp_path, capsys, flags, why):
    rc, line, err, m = _run([*LENET, "--iterations", "5", *flags], tmp_path / "r", capsys)
    assert rc == 0  # a valid run that found nothing
    assert line.startswith("nothing was attacked: ") and why in line, line
    # the objective is not finite at the truth under that noise: which part failed is not said
    stepped = flags[0] == "--optimizer"
    assert ("objective_at" in m) == stepped and ("own objective" in err) == stepped
    assert "PSNR" not in line and "SSIM" not in line
    assert m["attacked"] is False and why in m["nothing_attacked"] and m["verdict"] == "not rebuilt"
    assert m["baseline_psnr"] is not None
    if stepped:
        assert NOTE in err and "message_nonfinite" not in m
    else:  # every value of the message is NaN or infinite: no stronger attack, and no other recipe, can read it
        assert m["message_nonfinite"] == m["b"] and "noise_share" not in m
        assert f"all {m['b']} values of the message are NaN or infinite" in err
        assert NOTE not in err and "stronger attack" not in err and "the message is noisy" not in err
        headline = _headline(tmp_path / "r")  # the report says the same
        assert "no attack can read anything from it" in headline and "failure of this attack" not in headline
        assert "image prior" not in headline


def test_a_message_with_some_values_not_finite_says_how_many_beside_the_failure_note(tmp_path, capsys):
    # noise of this scale overflows a few of the unsketched message's float64 entries, not all of them
    rc, line, err, m = _run([*LENET, "--iterations", "5", "--sketch", "none", "--defense", "gaussian:sigma=5e307"],
                            tmp_path / "r", capsys)
    assert rc == 0 and line.startswith("nothing was attacked: ")
    n, b = m["message_nonfinite"], m["b"]
    assert 0 < n < b and "noise_share" not in m
    assert NOTE in err and f"{n} of the message's {b} values are NaN or infinite" in err
    assert f"read the other {b - n}" in err and "values of the message are NaN" not in err


def _message(tmp_path):
    """A lenet client's SRHT-sketched gradient on one 12 px image, and its truth file."""
    shape = (3, 12, 12)
    victim = targets.get_model("lenet", in_shape=shape, num_classes=10, seed=0)
    x, labels = torch.rand(1, *shape, generator=torch.Generator().manual_seed(3)), torch.tensor([4])
    params = list(victim.model.parameters())
    g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(F.cross_entropy(victim.model(x), labels), params)])
    R = get_sketch("srht", g.numel(), g.numel() // 2, seed=5)
    write_message(tmp_path / "m.pt", R.apply(g), sketch=R, input_shape=shape, num_classes=10)
    torch.save(victim.model.state_dict(), tmp_path / "w.pt")
    torch.save({"images": x, "labels": labels}, tmp_path / "x.pt")
    return ["--model", "lenet", "--weights", str(tmp_path / "w.pt"), "--message", str(tmp_path / "m.pt"),
            "--iterations", "2"]


def test_a_message_without_truth_has_no_verdict_and_with_truth_a_grey_baseline(tmp_path, capsys):
    argv = _message(tmp_path)
    rc, line, _, m = _run(argv, tmp_path / "no-truth", capsys)
    assert rc == 0 and m["verdict"] is None and m["baseline_psnr"] is None and m["baseline_mean_image"] is None
    assert line.startswith("no image metrics (no --truth)")
    rc, line, _, m = _run([*argv, "--truth", str(tmp_path / "x.pt")], tmp_path / "truth", capsys)
    # the message file's only images are the truth: their mean is no baseline, a constant grey image is
    assert rc == 0 and m["verdict"] == "not rebuilt" and "grey" in m["baseline_mean_image"]
    x = torch.load(tmp_path / "x.pt")["images"].double()
    assert m["baseline_mean_psnr"] == pytest.approx(-10 * float(torch.log10((x - 0.5).pow(2).mean())))
    assert m["baseline_start_psnr"] is not None
    which = {"start": "the start", "mean": "a constant grey image"}[m["verdict_baseline"]]
    reason = why_not_rebuilt(m)[0]  # the metric that fell short, or both
    assert line.startswith(f"not rebuilt ({reason})") and reason.endswith(which)
    rc, line, err, m = _run([*argv, "--dataset", "digits"], tmp_path / "named", capsys)
    assert rc == 0 and "--dataset digits is not read with --message" in err


@pytest.mark.parametrize("flags,said", [
    (["--image-index", "5"], "--image-index 5 is not read with --message"),
    (["--batch-draw", "class"], "--batch-draw class is not read with --message"),
    (["--dataset", "digits", "--image-index", "0", "--batch-draw", "random"],
     "--dataset digits, --image-index 0 and --batch-draw random are not read with --message"),
])
def test_flags_that_pick_images_from_a_data_set_are_one_warning_with_a_message(tmp_path, capsys, flags, said):
    """--image-index was silently ignored with --message: the message file's images are its own."""
    rc, _, err, _ = _run([*_message(tmp_path), *flags], tmp_path / "run", capsys)
    warned = [line for line in err.splitlines() if "not read with --message" in line]
    assert rc == 0 and len(warned) == 1 and said in warned[0], err


def test_the_summary_names_the_objective_it_reports(tmp_path, capsys):
    _, line, _, _ = _run([*LENET, "--iterations", "2"], tmp_path / "l2", capsys)
    assert "| L_R " in line and "cosine" not in line
    _, line, _, m = _run([*LENET, "--recipe", "ig", "--iterations", "2"], tmp_path / "cos", capsys)
    assert f"| cosine distance {m['final_loss']:.3e} |" in line and "L_R" not in line


def test_a_defended_run_states_its_defense_epsilon_and_utility(tmp_path, capsys):
    spec = "clip:C=1,gaussian:z=1.1@after_sketch"
    _, line, _, m = _run([*LENET, "--iterations", "2", "--defense", spec, "--utility", "--utility-steps", "20",
                          "--delta", "1.5e-5"], tmp_path / "d", capsys)
    # δ as metrics.json and the report give it (it read 2e-05, rounded to one digit)
    assert m["delta"] == 1.5e-5 and f"defense {m['defense']}, ε {m['epsilon']:.3g} (δ 1.5e-05)" in line
    acc = f"utility: test accuracy {m['utility_acc']:.3f}"
    assert acc in line
    # below 1/10 the line says so; at or above it, it does not
    assert (", below chance (0.10)" in line) == (m["utility_acc"] < 0.1)
    _, plain, _, _ = _run([*LENET, "--iterations", "2"], tmp_path / "p", capsys)
    assert "defense" not in plain and "utility" not in plain


def test_a_run_with_laplace_noise_states_its_pure_epsilon(tmp_path, capsys):
    _, line, _, m = _run([*LENET, "--iterations", "2", "--defense", "clip:C=1,laplace:b=0.1"], tmp_path / "d",
                         capsys)
    assert m["delta"] == 0 and f"ε {m['epsilon']:.3g} (pure DP, δ 0)" in line, line


def test_a_rebuilt_run_below_ssim_0_3_is_called_faint_in_its_line_and_its_report(tmp_path, capsys):
    from leakattack.cli.run import summary_line
    from leakattack.figures.report.run_section import _run_headline, _run_verdict
    from leakattack.metrics import RunMetrics
    from leakattack.rebuilt import FAINT_SSIM, faint_words

    base = {"verdict": "rebuilt", "psnr": 13.0, "ssim": 0.297, "baseline_psnr": 10.54, "baseline_ssim": 0.114}
    assert faint_words(base) == "faint: SSIM below 0.3" and FAINT_SSIM == 0.3
    assert faint_words({**base, "ssim": 0.31}) is None
    assert faint_words({**base, "verdict": "not rebuilt"}) is None  # said of rebuilt runs only
    assert faint_words({**base, "ssim": None}) is None
    _, _, _, m = _run([*LENET, "--iterations", "2"], tmp_path / "r", capsys)
    faint = RunMetrics.from_dict({**m, **base})
    assert summary_line(faint, tmp_path).startswith("rebuilt (faint: SSIM below 0.3) | PSNR 13.00 dB, SSIM 0.2970")
    assert "Faint: its SSIM is below 0.3" in _run_headline(faint)[2]
    assert "<strong>Verdict: rebuilt (faint: SSIM below 0.3)</strong>" in _run_verdict(faint)  # as the line says
    clear = RunMetrics.from_dict({**m, **base, "ssim": 0.8})
    assert summary_line(clear, tmp_path).startswith("rebuilt | PSNR") and "Faint" not in _run_headline(clear)[2]
    assert "<strong>Verdict: rebuilt</strong>" in _run_verdict(clear)


def test_data_set_flags_are_read_where_the_message_file_leaves_its_shape_and_classes_open(tmp_path, capsys):
    """--dataset was warned 'not read' where the file left the input shape and classes open and the data set gave
    them, and --image-size went unmentioned where nothing read it."""
    shape = (3, 12, 12)
    victim = targets.get_model("lenet", in_shape=shape, num_classes=10, seed=0)
    x, labels = torch.rand(1, *shape, generator=torch.Generator().manual_seed(3)), torch.tensor([4])
    params = list(victim.model.parameters())
    g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(F.cross_entropy(victim.model(x), labels), params)])
    write_message(tmp_path / "open.pt", g)  # neither input_shape nor num_classes
    torch.save(victim.model.state_dict(), tmp_path / "w.pt")
    argv = ["--model", "lenet", "--weights", str(tmp_path / "w.pt"), "--message", str(tmp_path / "open.pt"),
            "--iterations", "2"]
    rc, _, err, _ = _run([*argv, "--dataset", "photos", "--image-size", "12"], tmp_path / "read", capsys)
    assert rc == 0 and "not read with --message" not in err, err
    # a stated file reads neither
    rc, _, err, _ = _run([*_message(tmp_path), "--dataset", "photos", "--image-size", "12"], tmp_path / "st", capsys)
    warned = [line for line in err.splitlines() if "not read with --message" in line]
    assert rc == 0 and len(warned) == 1 and "--dataset photos and --image-size 12 are not read" in warned[0], err


def test_labels_the_message_file_and_the_truth_file_disagree_on_are_warned_of(tmp_path, capsys):
    shape = (3, 12, 12)
    victim = targets.get_model("lenet", in_shape=shape, num_classes=10, seed=0)
    x = torch.rand(1, *shape, generator=torch.Generator().manual_seed(3))
    params = list(victim.model.parameters())
    g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(F.cross_entropy(victim.model(x), torch.tensor([4])),
                                                              params)])
    write_message(tmp_path / "m.pt", g, labels=torch.tensor([4]), input_shape=shape, num_classes=10)
    torch.save(victim.model.state_dict(), tmp_path / "w.pt")
    argv = ["--model", "lenet", "--weights", str(tmp_path / "w.pt"), "--message", str(tmp_path / "m.pt"),
            "--iterations", "2"]
    for true, said in ((4, False), (7, True)):
        torch.save({"images": x, "labels": torch.tensor([true])}, tmp_path / f"x{true}.pt")
        rc, _, err, m = _run([*argv, "--truth", str(tmp_path / f"x{true}.pt")], tmp_path / f"t{true}", capsys)
        assert rc == 0 and ("holds labels [4] and truth file" in err) is said, err
        assert m["label_acc"] == (0.0 if said else 1.0) and m["labels_attack"] == [4]


def test_a_noise_seed_and_a_delta_a_message_file_does_not_read_are_warned_of(tmp_path, capsys):
    """The file's noise is in its message, and its defense (none here) adds no Gaussian noise for --delta."""
    rc, _, err, _ = _run([*_message(tmp_path), "--noise-seed", "5", "--delta", "1e-6"], tmp_path / "run", capsys)
    assert rc == 0 and "--noise-seed 5 changes nothing with --message" in err, err
    assert "--delta 1e-06 changes nothing: it is the delta of the epsilon of Gaussian noise, and the defense of " \
           "message file" in err, err


def test_a_converged_run_whose_rank_was_cut_short_says_so(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the Gauss-Newton steps converged, before they formed J at the reconstruction: the run ended
    "tolerance" with unique null, and only metrics.json's jacobian_note said why."""
    import dataclasses

    from leakattack.cli import run as run_cli

    real = run_cli.run_attack
    cut = "not measured: the time limit or Ctrl-C came before the Gauss-Newton steps formed J at the reconstruction"

    def cut_short(*args, **kwargs):
        m, folder = real(*args, **kwargs)
        gn = {"after_step": 2, "from_step": 2, "jacobians": 1, "accepted": 3, "chord": 2, "watched": 0, "kept": True,
              "loss_before": 1e-8, "loss_after": 1e-27, "stop": "tolerance", "jacobian_rank": None,
              "singular_values": None}
        return dataclasses.replace(m, stop_reason="tolerance", unique=None, jacobian_rank=None, jacobian_note=cut,
                                   gauss_newton=gn), folder

    monkeypatch.setattr(run_cli, "run_attack", cut_short)
    assert cli.main(["run", "--dataset", "digits", "--iterations", "2", "--refine", "none", "--quiet", "--no-lpips",
                     "--out", str(tmp_path / "run")]) == 0
    assert f"note: uniqueness {cut}" in capsys.readouterr().err.splitlines()


def test_one_image_through_batchnorm_in_train_mode_names_the_mode_not_a_tv_weight_or_more_steps():
    """--bn train on one image at loaded weights was told '--tv 0.8 rebuilt a photo ...', where no setting of the
    recipe's grid rebuilds such an image (docs/ig_recipe.md)."""
    from leakattack.attacks.recipes import TRAIN_MODE_NOTE, TRAINED_TV_NOTE, next_settings

    run = {"batch_size": 1, "weights": "w.pt", "model": "resnet20"}
    ig = {"recipe": "ig", "tv": 0.2}
    assert next_settings("search", run, {**ig, "bn_mode": "eval"}) == [TRAINED_TV_NOTE]
    assert next_settings("search", run, {**ig, "bn_mode": "train"}) == [TRAIN_MODE_NOTE]
    assert next_settings("search", {**run, "batch_size": 4}, {**ig, "bn_mode": "train"}) == []
    assert "--bn auto" in TRAIN_MODE_NOTE and "--tv" not in TRAIN_MODE_NOTE
