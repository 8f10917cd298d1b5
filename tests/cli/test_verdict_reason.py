"""The summary line of a run that is not rebuilt names the metric that kept it from rebuilt, a note says when the other
metric is clearly above its baseline, and an objective that failed under a clip the attacker did not model names
--attacker-knows-clip: all from hand-made metrics, without running an attack."""

import json
from pathlib import Path

import pytest

from leakattack.cli.run import clip_not_modelled, summary_line
from leakattack.config import RunConfig
from leakattack.metrics import RunMetrics, failed_kind, failed_part
from leakattack.rebuilt import CLIP_NOT_MODELLED, why_not_rebuilt

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "lenet-srht" / "metrics.json"
#: the audit's run: lenet on digits at b/d = 0.05, 400 Adam steps; the digit is plainly visible
DIGIT = {"psnr": 13.73, "ssim": 0.5856, "baseline_psnr": 13.90, "baseline_ssim": 0.2752, "baseline_start_psnr": 6.0,
         "baseline_start_ssim": 0.01, "baseline_mean_psnr": 13.90, "baseline_mean_ssim": 0.2752,
         "verdict": "not rebuilt", "verdict_baseline": "mean",
         "baseline_mean_image": "the mean of 256 of the 1797 images of digits"}


def _metrics(**keys) -> RunMetrics:
    return RunMetrics.from_dict({**json.loads(REFERENCE.read_text()), **keys})


@pytest.mark.parametrize("psnr,ssim,reason,ahead", [
    (13.73, 0.5856, "PSNR no better than the data set's mean image", "SSIM is 0.31 above the better baseline's "
                                                                      "(0.5856 against 0.2752)"),
    (14.59, 0.5052, "PSNR within 1 dB of the data set's mean image", "SSIM is 0.23 above"),
    (16.0, 0.30, "SSIM within 0.05 of the data set's mean image", "PSNR is 2.10 dB above the better baseline's "
                                                                  "(16.00 dB against 13.90 dB)"),
    (16.0, 0.2, "SSIM no better than the data set's mean image", "PSNR is 2.10 dB above"),
    (14.5, 0.30, "no better than the data set's mean image", None),
    (None, 0.30, "no better than the data set's mean image", None),
])
def test_the_reason_names_the_metric_that_kept_it_from_rebuilt(psnr, ssim, reason, ahead):
    said, note = why_not_rebuilt({**DIGIT, "psnr": psnr, "ssim": ssim})
    assert said == reason
    assert (note is None) == (ahead is None)
    if ahead:
        assert note.startswith(f"the reconstruction's {ahead}") and "look at reconstruction.png" in note


def test_the_reason_names_each_metrics_own_better_baseline():
    # the start has the better SSIM, the mean image the better PSNR: an SSIM short of the start's names the start
    m = {**DIGIT, "baseline_start_ssim": 0.40, "baseline_ssim": 0.40, "psnr": 16.0, "ssim": 0.42}
    assert why_not_rebuilt(m)[0] == "SSIM within 0.05 of the start"
    grey = {**DIGIT, "baseline_mean_image": "a constant grey image (0.5)"}
    assert why_not_rebuilt(grey)[0] == "PSNR no better than a constant grey image"


def test_the_summary_line_says_which_metric_fell_short():
    line = summary_line(_metrics(**DIGIT), "/runs/r")
    assert line.startswith("not rebuilt (PSNR no better than the data set's mean image) | PSNR 13.73 dB, SSIM 0.5856 "
                           "against 13.90 dB, 0.2752 for the better baseline | ")
    both = summary_line(_metrics(**{**DIGIT, "psnr": 11.0, "ssim": 0.2}), "/runs/r")
    assert both.startswith("not rebuilt (no better than the data set's mean image) | ")


def test_an_objective_that_failed_under_a_clip_the_attacker_did_not_model_names_the_options():
    at = {"truth": {"match": 2.0, "total": 2.0}, "reconstruction": {"match": 0.1, "total": 0.1}}
    m = {**DIGIT, "objective_at": at}
    assert failed_part(m).endswith("a longer search for its minimum is not a search for the truth")
    said = failed_part(m, clip_blind=True)
    assert said.endswith(CLIP_NOT_MODELLED) and "--attacker-knows-clip" in said and "--objective cosine" in said
    searched = {**m, "objective_at": {"truth": at["reconstruction"], "reconstruction": at["truth"]}}
    assert CLIP_NOT_MODELLED not in failed_part(searched, clip_blind=True)  # only the objective's failure


def test_an_objective_that_failed_under_noise_names_the_noise_and_scores_that_read_apart():
    """Under noise 586 times the message the note read "3.43e+05 against 3.43e+05" and named the clip, which the
    attacker then modelled to no avail, as the likely cause."""
    at = {"truth": {"match": 343214.9, "total": 343214.9}, "reconstruction": {"match": 343177.8, "total": 343177.8}}
    m = {**DIGIT, "objective_at": at, "noise_distortion": 586.0}
    said = failed_part(m, clip_blind=True)
    assert "(3.4318e+05 against 3.4321e+05; match 3.4318e+05 against 3.4321e+05)" in said
    assert "the defense's noise is 586 times the norm of the message it is added to" in said
    assert "did not model the clip, a cause too: --attacker-knows-clip" in said and "the likely cause" not in said
    assert "the defense's noise" not in failed_part({**m, "noise_distortion": None})
    assert failed_part({**DIGIT, "objective_at": at}, clip_blind=True).endswith(CLIP_NOT_MODELLED)
    # a stochastic rounding's error is of mean 0 too, and named as what it is
    rounded = {**m, "noise_distortion": 0.0455, "defense": "quantize:bits=6@after_sketch"}
    assert "the defense's stochastic rounding's error is 0.0455 times the norm" in failed_part(rounded)
    both = {**rounded, "defense": "clip:C=1,gaussian:sigma=0.01@after_sketch,quantize:bits=6@after_sketch"}
    assert "the defense's noise and stochastic rounding's error are 0.0455 times" in failed_part(both)


def test_a_match_within_tolerance_that_is_not_unique_is_not_called_a_search_that_stopped_short():
    """A converged fit of a message with fewer numbers than unknowns (L_R 2.99e-10 against the truth's 0) was told
    that "more steps or starts may get closer", beside the note that the match is not unique."""
    at = {"truth": {"match": 0.0, "total": 0.0}, "reconstruction": {"match": 2.99e-10, "total": 2.99e-10}}
    m = {**DIGIT, "objective_at": at, "stop_reason": "tolerance", "unique": False}
    said = failed_part(m)
    assert said.startswith("the reconstruction matches the message to the attack's tolerance (2.99e-10, the truth 0) "
                           "and is not the only input that does (not unique)") and "may get closer" not in said
    for other in ({"unique": True}, {"unique": None}, {"stop_reason": "iterations"}):  # a search that stopped short
        assert failed_part({**m, **other}).endswith("the search stopped short, and more steps or starts may get closer")


def test_a_search_that_diverged_or_never_left_its_start_is_not_told_that_more_steps_may_get_closer(tmp_path, capsys):
    """Plain gradient descent at --lr 1e308 diverged at step 1, and Adam at --lr 1e3 never went below its start in
    50 steps; each was told only "the search stopped short, and more steps or starts may get closer", where more
    steps at that step size diverge again, or a smaller one is the first thing to try."""
    from leakattack import cli

    base = ["run", "--dataset", "digits", "--quiet", "--no-lpips"]
    for flags, said in ((["--optimizer", "gd", "--lr", "1e308", "--iterations", "5"],
                         "where it diverged (its objective turned NaN or infinite), so more steps at this step size "
                         "diverge again; a smaller --lr may get closer"),
                        (["--optimizer", "adam", "--lr", "1e3", "--iterations", "30"],
                         "without going below its start; a smaller --lr, or more steps or starts, may get closer")):
        out = tmp_path / flags[1]
        assert cli.main([*base, *flags, "--out", str(out)]) == 0
        m = json.loads((out / "metrics.json").read_text())
        assert m["attacked"] is False and failed_kind(m) == "search", m
        err = capsys.readouterr().err
        assert said in err and "and more steps or starts may get closer" not in err, err
    at = {"truth": {"match": 0.0, "total": 0.0}, "reconstruction": {"match": 1.0, "total": 1.0}}
    for stop in ("time-limit", "interrupted"):  # stopped from outside: more steps may still get closer
        m = {**DIGIT, "objective_at": at, "attacked": False, "stop_reason": stop}
        assert failed_part(m).endswith("the search stopped short, and more steps or starts may get closer")


def test_a_search_whose_steps_could_not_move_the_image_names_a_larger_step(tmp_path, capsys):
    """Adam at --lr 1e-12 (warned: it cannot move the image) was told that a smaller --lr may get closer; signed Adam
    at --lr 1e-9, whose L_R rose in its last bits, that the matching term rose (step size too large?)."""
    from leakattack import cli

    base = ["run", "--quiet", "--no-lpips", "--dtype", "float32", "--optimizer", "adam"]
    for flags in (["--lr", "1e-12", "--iterations", "3"], ["--signed", "--lr", "1e-9", "--iterations", "50"]):
        out = tmp_path / flags[-3]
        assert cli.main([*base, *flags, "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert "cannot move the image" in err and "step size too large" not in err and "smaller --lr" not in err, err
        assert "the search's steps barely moved it; a larger --lr may move it" in err, err
        m = json.loads((out / "metrics.json").read_text())
        assert m["attacked"] is False and m["nothing_attacked"].startswith(
            "the search's steps barely moved it: the objective stayed within 0.0001 of its start value"), m
    m = {**DIGIT, "objective_at": {"truth": {"match": 0.0, "total": 0.0}, "reconstruction": {"match": 1.0,
                                                                                            "total": 1.0}},
         "attacked": False, "nothing_attacked": "the search's steps barely moved it: ...", "stop_reason": "time-limit"}
    assert "barely moved" not in failed_part(m)  # stopped from outside: more steps may still move it


def test_a_clip_is_not_modelled_only_when_the_defense_clips_and_the_attacker_was_not_told():
    assert clip_not_modelled(RunConfig(model="lenet", defense="clip:C=1"))
    assert clip_not_modelled(RunConfig(model="lenet", defense="per_example:C=1,gaussian:sigma=0.1"))
    assert not clip_not_modelled(RunConfig(model="lenet", defense="clip:C=1", attacker_knows_clip=True))
    assert not clip_not_modelled(RunConfig(model="lenet", defense="gaussian:sigma=0.1"))
    assert not clip_not_modelled(RunConfig(model="lenet"))


def test_the_run_command_notes_the_metric_clearly_above_and_the_clip_it_did_not_model(tmp_path, monkeypatch, capsys):
    from leakattack import cli
    from leakattack.cli import run as run_command

    at = {"truth": {"match": 2.0, "total": 2.0}, "reconstruction": {"match": 0.1, "total": 0.1}}
    monkeypatch.setattr(run_command, "run_attack", lambda cfg, **kw: (_metrics(**DIGIT, objective_at=at), tmp_path))
    assert cli.main(["run", "--model", "lenet", "--defense", "clip:C=1", "--quiet", "--no-lpips"]) == 0
    out, err = capsys.readouterr()
    notes = err.splitlines()
    assert out.startswith("not rebuilt (PSNR no better than the data set's mean image) | ")
    ahead = [i for i, n in enumerate(notes) if n.startswith("note: the reconstruction's SSIM is 0.31 above")]
    private = [i for i, n in enumerate(notes) if "not evidence that the message is private" in n]
    assert ahead and private and ahead[0] < private[0]
    assert any("--attacker-knows-clip applies the clip" in n for n in notes)
    assert cli.main(["run", "--model", "lenet", "--defense", "clip:C=1", "--attacker-knows-clip", "--quiet"]) == 0
    assert "--attacker-knows-clip applies the clip" not in capsys.readouterr().err


def test_an_attacker_without_the_clients_sketch_is_named_as_the_cause_not_the_labels(tmp_path, capsys):
    """With --sketch-unknown and no seed search the note said the label reading failed before the search did and
    pointed to --labels given, which reads the same wrong R; the run and the report now name the sketch."""
    from leakattack import cli
    from leakattack.attacks.seed_search import sketch_not_held
    from leakattack.rebuilt import SKETCH_NOT_HELD

    out = tmp_path / "run"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "20", "--sketch-unknown",
                     "--sketch", "srht", "--no-lpips", "--quiet", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"note: {SKETCH_NOT_HELD}" in err and "label reading failed" not in err
    config = json.loads((out / "config.json").read_text())
    assert sketch_not_held(config["run"])
    assert not sketch_not_held({**config["run"], "sketch_seed_search": 4})
    assert not sketch_not_held({**config["run"], "sketch": "none"})
    assert not sketch_not_held({**config["run"], "sketch_known": True})
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    assert "did not hold the client&#x27;s sketch" in (tmp_path / "r.html").read_text()
    m = json.loads((out / "metrics.json").read_text())
    assert failed_part(m) is not None and failed_part(m, sketch_blind=True) == SKETCH_NOT_HELD


def test_labels_misread_under_a_clip_the_attacker_did_not_model_name_the_flag_that_models_it(tmp_path, capsys):
    """A batch of 4 under clip:C=1e-3 read 1 of 4 labels, and the note offered only --labels given; told of the clip,
    the label rules fit its factor and read all 4."""
    from leakattack import cli

    base = ["run", "--dataset", "digits", "--sketch", "none", "--batch-size", "4", "--defense", "clip:C=1e-3",
            "--iterations", "2", "--quiet", "--no-lpips"]
    assert cli.main([*base, "--out", str(tmp_path / "blind")]) == 0
    m, err = json.loads((tmp_path / "blind" / "metrics.json").read_text()), capsys.readouterr().err
    assert failed_kind(m) == "labels" and "with --attacker-knows-clip the label rules fit the factor" in err, err
    assert cli.main([*base, "--attacker-knows-clip", "--out", str(tmp_path / "told")]) == 0
    m = json.loads((tmp_path / "told" / "metrics.json").read_text())
    assert m["label_acc"] == 1.0 and "--attacker-knows-clip the label rules" not in capsys.readouterr().err


def test_labels_misread_under_noise_do_not_blame_a_clip_the_attacker_was_not_told_of():
    """Under per_example:C=0.01 with noise of about 0.12 against the clipped norm 0.01, the note named
    --attacker-knows-clip, and the run with it read the same wrong labels: the noise misreads them."""
    wrong = {**DIGIT, "label_acc": 0.0, "label_mode": "idlg"}
    assert "--attacker-knows-clip" in failed_part(wrong, clip_blind=True)
    assert "--attacker-knows-clip" not in failed_part({**wrong, "noise_distortion": 12.0}, clip_blind=True)


def test_labels_misread_under_noise_name_the_noise():
    """clip:C=1,gaussian:z=1.1@after_sketch on digits (noise 89.9 times the message): the note said only that with
    the labels read the truth does not send the message, which no truth does through that noise."""
    said = failed_part({**DIGIT, "label_acc": 0.0, "label_mode": "idlg", "noise_distortion": 89.9,
                        "defense": "clip:C=1.0@before_sketch,gaussian:z=1.1@after_sketch"}, clip_blind=True)
    assert said == ("the labels the attack read from the message are not the truth's (label accuracy 0.00): the "
                    "defense's noise is 89.9 times the norm of the message it is added to, and the label rules read "
                    "the labels through it, so the labels failed before the search did (--labels given runs the "
                    "attack with the true labels, through the same noise)")



def test_a_match_of_fewer_numbers_than_unknowns_is_not_called_a_failure_of_its_budget(tmp_path, capsys):
    """lenet on a digit through b = 8 numbers converged in 7 steps at another image (784 unknowns), and the note said
    'a failure of this attack at this budget (its settings and iterations)', which the run itself ruled out."""
    from leakattack import cli
    from leakattack.cli.run import FAILURE_NOTE, UNDETERMINED_FAILURE_NOTE
    from leakattack.figures.report import build_report

    out = tmp_path / "run"
    assert cli.main(["run", "--dataset", "digits", "--sketch-dim", "8", "--iterations", "30", "--labels", "given",
                     "--quiet", "--no-lpips", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    record = json.loads((out / "metrics.json").read_text())
    assert record["stop_reason"] == "tolerance" and record["unique_by_count"] is False
    assert f"note: {UNDETERMINED_FAILURE_NOTE}" in err and FAILURE_NOTE not in err
    assert "at this budget" not in build_report([out]).split('class="headline')[1].split("</p>")[0]
    # the budget is named where the search stopped short of the tolerance
    assert "at this budget" in FAILURE_NOTE and not rebuilt_matched({**record, "stop_reason": "iterations"})


def rebuilt_matched(record: dict) -> bool:
    from leakattack.rebuilt import matched_not_unique

    return matched_not_unique(record)


def test_a_match_whose_measured_rank_falls_short_is_not_called_a_failure_of_its_budget(tmp_path, capsys):
    """linreg behind a clip: b = m, but the clipped message keeps its value along x's scale, and the run measured
    rank 783 of 784 where it matched to 4e-34; its failure note still blamed the budget beside its own note that the
    message does not determine the input."""
    from leakattack import cli
    from leakattack.cli.run import FAILURE_NOTE, UNDETERMINED_FAILURE_NOTE

    out = tmp_path / "run"
    assert cli.main(["run", "--model", "linreg", "--dataset", "digits", "--sketch", "none", "--defense", "clip:C=1e-3",
                     "--attacker-knows-clip", "--iterations", "300", "--quiet", "--no-lpips", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    record = json.loads((out / "metrics.json").read_text())
    assert record["verdict"] == "not rebuilt" and record["stop_reason"] == "tolerance"
    assert record["unique_by_count"] is True and record["unique"] is False
    assert f"note: {UNDETERMINED_FAILURE_NOTE}" in err and FAILURE_NOTE not in err
    assert rebuilt_matched(record) and not rebuilt_matched({**record, "unique": None})
