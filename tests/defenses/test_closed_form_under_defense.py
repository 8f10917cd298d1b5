"""A closed form reads the message as the exact gradient: under a defense that changes it, a closed-form run not
rebuilt names gradient matching with the ig recipe (told the steps an attacker can model) as its next setting, and a
gradient-matching run that names a closed form says that the defense changes what it would read.  Under a pruning
alone, R-GAP's run named only "a stronger attack may still rebuild the input", and the gradient-matching run named
--attack rgap as accepting the message without a word on the pruning."""

import json

from leakattack import cli
from leakattack.attacks import list_attacks
from leakattack.attacks.recipes import changing_spec, closed_form_defense_note
from leakattack.figures.report import build_report
from leakattack.rebuilt import closed_forms_line

BASE = ["run", "--model", "lenet", "--dataset", "digits", "--sketch", "none", "--quiet", "--no-lpips",
        "--defense", "prune:p=0.5"]


def test_a_closed_form_run_under_a_pruning_names_gradient_matching_told_the_pruning(tmp_path, capsys):
    out = tmp_path / "rgap"
    assert cli.main([*BASE, "--attack", "rgap", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["verdict"] == "not rebuilt"
    err = capsys.readouterr().err
    run = json.loads((out / "config.json").read_text())["run"]
    note = closed_form_defense_note(run)
    assert note is not None and f"note: {note}" in err
    assert "--attack gradient-matching --recipe ig --attacker-knows-prune" in note and "clip" not in note
    assert "gradient-matching" in list_attacks()
    # it ran no recipe: config.json records none, not the L-BFGS search of the recipe a search would have run
    derived = json.loads((out / "config.json").read_text())["derived"]
    assert all(derived[k] is None for k in ("recipe", "optimizer", "iterations", "lr", "objective", "tv"))
    assert derived["dtype"] == "float64"
    # R-GAP's own note names the pruning, not causes this run does not have
    said = next(line for line in err.splitlines() if "not the exact gradient" in line)
    assert "prune:p=0.5@before_sketch" in said and "noise" not in said and "null space" not in said
    assert note[:1].upper() + note[1:] in build_report([out])


def test_a_gradient_matching_run_naming_a_closed_form_says_the_defense_changes_what_it_reads(tmp_path, capsys):
    out = tmp_path / "gm"
    assert cli.main([*BASE, "--iterations", "2", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["verdict"] == "not rebuilt" and "rgap" in m["closed_forms"]
    err = capsys.readouterr().err
    line = closed_forms_line(m["closed_forms"], "the defense prune:p=0.5@before_sketch")
    assert f"note: {line}" in err and "which it is not here (the defense prune:p=0.5@before_sketch)" in line
    assert line[:1].upper() + line[1:] in build_report([out])


def test_the_note_names_only_steps_that_change_the_message_and_the_flags_that_model_them():
    assert closed_form_defense_note({"defense": "prune:p=0.00001"}, {"d": 15826, "b": 15826}) is None
    assert closed_form_defense_note({}) is None and closed_form_defense_note({"defense": "no such step"}) is None
    clipped = closed_form_defense_note({"defense": "clip:C=1,gaussian:sigma=1e-3"})
    assert clipped is not None and "--recipe ig --attacker-knows-clip (" in clipped
    assert "which the defense gaussian:sigma=0.001@before_sketch changes by more" in clipped
    # a clip of the whole update, or of one example's gradient, only rescales the message, which a closed form reads
    assert closed_form_defense_note({"defense": "clip:C=1"}) is None
    assert closed_form_defense_note({"defense": "per_example:C=1", "batch_size": 1}) is None
    assert closed_form_defense_note({"defense": "per_example:C=1", "batch_size": 2}) is not None
    noisy = closed_form_defense_note({"defense": "quantize:bits=8"})
    assert noisy is not None and "--recipe ig (" in noisy and "knows" not in noisy.split("(")[0]
    assert changing_spec({"defense": "prune:p=0.00001,gaussian:sigma=1e-3"}, {"d": 100}) == \
        "gaussian:sigma=0.001@before_sketch"
    assert closed_forms_line(["rgap"]) == "a closed-form attack also accepts this message: --attack rgap " \
                                          "(docs/attack.md)"


def test_several_local_steps_are_named_and_a_protocols_unsketched_map_is_not_called_a_sketch(tmp_path, capsys):
    """FedAvg sends its update unsketched, through a map that scales it: R-GAP's note on three local steps named "a
    sketch with a null space, if this 13426 x 13426 one has one", and the gradient-matching run named --attack rgap
    without a word on the steps; a closed form's failure was called one "at this budget (its settings and
    iterations)", which it does not have."""
    base = ["run", "--model", "lenet", "--dataset", "digits", "--protocol", "fedavg", "--client-batch", "1",
            "--local-steps", "3", "--quiet", "--no-lpips"]
    out = tmp_path / "rgap"
    assert cli.main([*base, "--attack", "rgap", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    said = next(line for line in err.splitlines() if "not the exact gradient" in line)
    assert said.endswith("(3 local steps)") and "sketch" not in said, said
    assert "failure of this closed-form attack on this message" in err and "at this budget" not in err
    out = tmp_path / "gm"
    assert cli.main([*base, "--iterations", "3", "--out", str(out)]) == 0
    m, err = json.loads((out / "metrics.json").read_text()), capsys.readouterr().err
    assert m["verdict"] == "not rebuilt" and m.get("closed_forms") == ["rgap"], m
    assert f"note: {closed_forms_line(['rgap'], '3 local steps')}" in err, err


def test_a_closed_form_refusing_a_clients_whole_shard_names_local_epochs_not_the_batch_size(tmp_path, capsys):
    """Under --local-epochs a client trains on its whole shard: R-GAP's refusal said "use gradient-matching or a batch
    size of 1" to a run whose --client-batch was already 1."""
    out = tmp_path / "o"
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "rgap", "--protocol", "fedavg",
                     "--client-batch", "1", "--local-epochs", "1", "--clients", "300", "--quiet", "--no-lpips",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "whole shard of" in err and "--local-epochs 0 with a batch size of 1" in err and not out.exists(), err


def test_a_dp_protocols_own_noise_is_named_where_no_defense_is_given(tmp_path, capsys):
    """sketched-dp adds its own noise: R-GAP's note said that the channel had "no defense, no sketch and one local
    step", and a gradient-matching run naming --attack rgap said nothing of the noise."""
    base = ["run", "--model", "lenet", "--dataset", "digits", "--protocol", "sketched-dp", "--sketch", "none",
            "--client-batch", "1", "--batch-size", "1", "--quiet", "--no-lpips"]
    assert cli.main([*base, "--attack", "rgap", "--out", str(tmp_path / "rgap")]) == 0
    said = next(line for line in capsys.readouterr().err.splitlines() if "not the exact gradient" in line)
    assert "the sketched-dp protocol's own noise, σ " in said and "round-off" not in said, said
    assert cli.main([*base, "--iterations", "2", "--out", str(tmp_path / "gm")]) == 0
    m, err = json.loads((tmp_path / "gm" / "metrics.json").read_text()), capsys.readouterr().err
    assert m.get("closed_forms") == ["rgap"] and "which it is not here (the protocol's own noise, σ " in err, err


def test_imprint_names_the_pruning_where_its_images_lie_outside_their_bins(tmp_path, capsys):
    """Under prune:p=0.5 imprint said its images outside their bins came from "noise, or a blend of two images",
    with no noise in the run."""
    assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--attack", "imprint", "--sketch", "none",
                     "--batch-size", "4", "--bins", "32", "--defense", "prune:p=0.5", "--quiet", "--no-lpips",
                     "--out", str(tmp_path / "o")]) == 0
    said = next(line for line in capsys.readouterr().err.splitlines() if "outside their bins" in line)
    assert "(the defense prune:p=0.5@before_sketch, or a blend of two images" in said and "noise" not in said, said
