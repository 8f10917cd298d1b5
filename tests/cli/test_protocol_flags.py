"""Flags a protocol's message does not read are refused in one sentence; errors name the protocol given; a stored
run's sketch is what config.json records; HEAPRIX's attacked message is its count-sketch table."""

import html
import json

import pytest
import torch
from test_bad_input import _refused  # tests/cli is on the path

from leakattack import cli, experiment
from leakattack.config import RunConfig

RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
       "--threads", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    assert cli.main(["train", "--protocol", "sketched", "--sketch", "sparse", "--rounds", "2", "--clients", "3",
                     "--out", str(out), "--quiet", "--threads", "1"]) == 0
    return out / "sketched"


@pytest.mark.parametrize("args,needle", [
    (["--sketch-dim", "100"], "--sketch-dim contradicts --protocol-dir"),
    (["--sketch-seed", "7"], "--sketch-seed contradicts --protocol-dir"),
    (["--model-seed", "3"], "--model-seed contradicts --protocol-dir"),
    (["--sketch-seed", "7", "--model-seed", "3"], "--sketch-seed, --model-seed contradict --protocol-dir"),
    (["--sketch", "sparse", "--sketch-param", "s=2"], "--sketch-param {'s': 2} contradicts"),
])
def test_a_sketch_or_model_flag_a_stored_protocol_run_fixes_is_refused(trained, tmp_path, capsys, args, needle):
    """protocol.json fixes the model, its seed and the sketch: these flags were silently ignored."""
    argv = RUN + ["--protocol", "sketched", "--protocol-dir", str(trained), "--out", str(tmp_path / "run")] + args
    _refused(argv, needle, tmp_path, capsys)


@pytest.mark.parametrize("protocol", ["sketched", "fedavg"])
def test_a_regression_model_with_a_protocol_is_refused_as_train_refuses_it(tmp_path, capsys, protocol):
    """No protocol trains a regression (`leakattack train` refuses it): the run crashed reading labels from a
    victim without a classifier head."""
    argv = [a if a != "lenet" else "linreg" for a in RUN] + ["--protocol", protocol, "--out", str(tmp_path / "run")]
    _refused(argv, "model 'linreg' cannot be trained by a protocol here (it is a regression); choose one of: lenet",
             tmp_path, capsys)


@pytest.mark.parametrize("args,needle", [
    (["--sketch-seed", "7"], "--sketch-seed changes nothing for a protocol's message"),
    (["--model-seed", "3"], "--model-seed changes nothing for a protocol's message"),
    (["--sketch-dim", "100"], "--sketch-dim changes nothing for a protocol's message"),
])
def test_seed_and_size_flags_a_re_simulated_protocol_does_not_read_are_refused(tmp_path, capsys, args, needle):
    """The protocol takes its model and round seeds from --seed and b from --sketch-ratio: these flags gave the
    default's numbers."""
    _refused(RUN + ["--protocol", "sketched", "--out", str(tmp_path / "run")] + args, needle, tmp_path, capsys)


def test_a_stored_run_records_the_sketch_it_trained_with(trained, tmp_path):
    """config.json recorded the run's default sketch and ratio (srht, 0.5) where the message came from the stored
    sparse sketch at 0.1."""
    out = tmp_path / "run"
    assert cli.main(RUN + ["--protocol", "sketched", "--protocol-dir", str(trained), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["sketch_ratio"] == 0.1 and config["run"]["sketch"] == "sparse"
    assert config["derived"]["b"] == 1343


@pytest.mark.parametrize("command,args", [
    (["train", "--rounds", "1"], []),
    (RUN, []),
])
@pytest.mark.parametrize("flag,value,needle", [
    ("--dp-delta", "-1", "privsgd delta must lie in (0, 1), got -1.0"),
    ("--dp-clip", "0", "privsgd clip must be a positive number, got 0.0"),
    ("--dp-epsilon", "0", "privsgd epsilon must be a positive number"),
])
def test_a_bad_dp_setting_names_the_protocol_given(tmp_path, capsys, command, args, flag, value, needle):
    """privsgd's bad --dp-delta was called a sketched-dp delta."""
    argv = command + ["--protocol", "privsgd", flag, value, "--out", str(tmp_path / "o"), "--quiet",
                      "--threads", "1"] + args
    _refused(argv, needle, tmp_path, capsys)
    _refused([a if a != "privsgd" else "sketched-dp" for a in argv], needle.replace("privsgd", "sketched-dp"),
             tmp_path, capsys)


@pytest.mark.parametrize("args,needle", [
    (["--protocol", "sketched"], "only fedsketch-heaprix and fedsketch-privix un-sketch theirs (not protocol "
                                 "'sketched')"),
    (["--protocol", "fedavg"], "(not protocol 'fedavg')"),
    ([], "--match-space unsketched chooses how a protocol's message is matched: give --protocol too"),
])
def test_match_space_unsketched_is_refused_where_there_is_no_un_sketch(tmp_path, capsys, args, needle):
    """The flag is for fedsketch-*; elsewhere the run matched the message and config.json said unsketched."""
    _refused(RUN + ["--match-space", "unsketched", "--out", str(tmp_path / "run")] + args, needle, tmp_path, capsys)


def test_match_space_unsketched_still_runs_for_fedsketch():
    cfg = RunConfig(model="lenet", dataset="digits", iterations=2, protocol="fedsketch-privix",
                    match_space="unsketched")
    assert experiment.prepare(cfg).obs.extra["match_space"] == "unsketched"


def test_the_match_space_is_recorded_in_the_words_of_its_flag():
    """A fedsketch message matched as sent (--match-space sketch, the default) was recorded as "message"; a protocol
    without an un-sketch keeps "message"."""
    cfg = RunConfig(model="lenet", dataset="digits", iterations=2, protocol="fedsketch-privix", match_space="sketch")
    assert experiment.prepare(cfg).obs.extra["match_space"] == "sketch"
    cfg = RunConfig(model="lenet", dataset="digits", iterations=2, protocol="fedavg")
    assert experiment.prepare(cfg).obs.extra["match_space"] == "message"


def test_a_heaprix_message_is_its_count_sketch_table_and_says_so():
    """HEAPRIX's exact Top_m values are not in the attacked message: at round 1 it is PRIVIX's message, and the
    message's description records what it holds."""
    prepared = {p: experiment.prepare(RunConfig(model="lenet", dataset="digits", iterations=2, protocol=p))
                for p in ("fedsketch-privix", "fedsketch-heaprix")}
    heaprix, privix = prepared["fedsketch-heaprix"], prepared["fedsketch-privix"]
    torch.testing.assert_close(heaprix.obs.y, privix.obs.y)
    assert "count-sketch table only" in heaprix.case.encoder["message_part"]
    assert "message_part" not in privix.case.encoder


def test_weights_with_a_protocol_are_refused_with_or_without_a_stored_run(trained, tmp_path, capsys):
    """--weights were silently ignored (w^t comes from the checkpoints or the re-simulation), yet config.json
    recorded them."""
    weights = str(trained / "checkpoints" / "round_0003.pt")
    base = RUN + ["--protocol", "sketched", "--round", "2", "--weights", weights, "--out", str(tmp_path / "run")]
    _refused(base, "--weights changes nothing for a protocol's message", tmp_path, capsys)
    _refused(base + ["--protocol-dir", str(trained)], f"--weights contradicts --protocol-dir '{trained}'", tmp_path,
             capsys)


@pytest.mark.parametrize("args,needle", [
    (["--act", "relu"], "--act relu sets the activation of a protocol's model and changes nothing without --protocol: "
                        "give --protocol too, or --model-param act=relu for the activation of model 'lenet'"),
    (["--act", "relu", "--model", "logreg"], "give --protocol too (model 'logreg' has no activation parameter)"),
    (["--act", "tanh"], "--model-param act=tanh"),  # the default, given: still not read
    (["--act", "relu", "--message", "m.pt"], "--act relu sets the activation of a protocol's model"),
    (["--protocol", "fedavg", "--model-param", "act=relu"],
     "--model-param act=relu changes nothing for a protocol's message, whose model is built from --model, --act and "
     "--weight-init alone: give --act relu for its activation"),
    (["--protocol", "fedavg", "--model-param", "hidden=8"], "--model-param hidden=8 changes nothing"),
])
def test_an_activation_flag_the_case_does_not_read_is_refused_naming_the_one_it_does(tmp_path, capsys, args, needle):
    """--act outside --protocol (and --model-param with it) left the model as it was, and config.json recorded
    them."""
    _refused(RUN + ["--out", str(tmp_path / "run")] + args, needle, tmp_path, capsys)


def test_act_still_sets_a_protocol_models_activation():
    p = experiment.prepare(RunConfig(model="lenet", dataset="digits", iterations=2, protocol="fedavg",
                                     protocol_act="relu", given=frozenset({"protocol_act"})))
    assert any(isinstance(m, torch.nn.ReLU) for m in p.victim.model.modules())


@pytest.mark.parametrize("command", [["train", "--rounds", "1", "--clients", "2"], RUN])
def test_act_for_a_model_without_an_activation_is_a_one_line_warning(tmp_path, capsys, command):
    argv = command + ["--protocol", "fedavg", "--model", "logreg", "--act", "relu", "--out", str(tmp_path / "o"),
                      "--quiet", "--threads", "1"]
    assert cli.main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines()
           if "--act" in line]
    assert len(err) == 1 and "--act changes nothing for model 'logreg', which has no activation parameter" in err[0]


def test_the_recipe_is_chosen_for_the_protocol_s_model(tmp_path):
    """--recipe auto chooses by the model the attack meets: a protocol's LeNet with --act relu has jumps (ig), its
    default tanh none (dlg); under --protocol-dir the stored run's activation decides, whatever --act says."""
    def recipe(**kw):
        return RunConfig(model="lenet", dataset="digits", **kw).derived().recipe

    assert recipe(protocol="fedavg") == "dlg" and recipe(protocol="fedavg", protocol_act="relu") == "ig"
    assert recipe(model_params={"act": "relu"}) == "ig"
    assert cli.main(["train", "--protocol", "fedavg", "--act", "relu", "--rounds", "1", "--clients", "2",
                     "--out", str(tmp_path), "--quiet", "--threads", "1"]) == 0
    assert recipe(protocol="fedavg", protocol_dir=str(tmp_path / "fedavg")) == "ig"


FROZEN = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes, in_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_shape[0], 2, 3, stride=2, padding=1)
        self.conv.requires_grad_(False)
        self.fc = nn.Linear(2 * ((in_shape[1] + 1) // 2) * ((in_shape[2] + 1) // 2), num_classes)

    def forward(self, x):
        return self.fc(torch.sigmoid(self.conv(x)).flatten(1))
"""


def test_a_model_with_a_frozen_layer_is_attacked_at_the_protocols_weights(tmp_path):
    """w^t (re-simulated from the seeds) holds the trainable weights only: it was written over every parameter,
    frozen ones first, and the run failed with a shape error."""
    path = tmp_path / "frozen.py"
    path.write_text(FROZEN)
    out = tmp_path / "run"
    assert cli.main(["run", "--model", f"{path}:Net", "--dataset", "digits", "--quiet", "--threads", "1",
                     "--iterations", "2", "--no-lpips", "--protocol", "fedavg", "--round", "2",
                     "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["psnr"] > 0


def test_a_batch_larger_than_the_clients_shard_is_said_with_the_count_the_message_covers(tmp_path, capsys):
    """The warning named the asked 1000 images where the message covers the client's 480."""
    assert cli.main([*RUN, "--protocol", "fedavg", "--clients", "3", "--batch-size", "1000",
                     "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert ("--batch-size 1000 is more than the 480 images client 0 holds: the attacked message is computed on those "
            "480, while the protocol's clients train on batches of 32") in err
    assert "computed on 1000 image(s)" not in err


@pytest.mark.parametrize("command", ["train", "run"])
def test_local_epochs_with_local_steps_given_at_its_default_is_refused(tmp_path, capsys, command):
    """--local-steps 2 was refused beside --local-epochs, --local-steps 1 (the default, given) passed in silence."""
    argv = (["train", "--protocol", "fedavg", "--rounds", "1", "--clients", "3", "--dataset", "digits", "--quiet"]
            if command == "train" else [*RUN, "--protocol", "fedavg"])
    _refused(argv + ["--local-epochs", "1", "--local-steps", "1", "--out", str(tmp_path / "out")],
             "give --local-epochs or --local-steps, not both", tmp_path, capsys)


@pytest.mark.parametrize("command", ["train", "run"])
def test_server_optimiser_settings_its_optimiser_leaves_unused_are_warned_of(tmp_path, capsys, command):
    argv = (["train", "--protocol", "safl", "--rounds", "1", "--clients", "3", "--dataset", "digits", "--quiet"]
            if command == "train" else [*RUN, "--protocol", "safl"])
    assert cli.main(argv + ["--server-opt", "sgd", "--server-eps", "0.1", "--second-moment", "desketched",
                            "--out", str(tmp_path / "sgd")]) == 0
    assert ("--server-eps, --second-moment change nothing with --server-opt sgd, which keeps no moment"
            in capsys.readouterr().err)
    assert cli.main(argv + ["--server-opt", "sgdm", "--server-beta1", "0.5", "--out", str(tmp_path / "sgdm")]) == 0
    assert "change nothing with" not in capsys.readouterr().err  # sgdm's momentum is its beta1


@pytest.mark.parametrize("protocol,rounds", [("privsgd", 1), ("sketched-dp", 2)])
def test_a_dp_protocols_summary_line_names_its_noise_and_epsilon(tmp_path, capsys, protocol, rounds):
    """A DP protocol's run printed no noise and no ε on its summary line (the report and config.json had them): the
    line now says the protocol's σ and its accountant's ε over the rounds up to the attacked one."""
    argv = RUN + ["--protocol", protocol, "--round", str(rounds), "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    noise = json.loads((tmp_path / "run" / "config.json").read_text())["derived"]["sketch"]["privacy"]
    assert f"protocol noise σ {noise['sigma']:.3g}, ε {noise['epsilon_rdp']:.3g}" in line
    assert f"over rounds 1..{rounds}" in line


def test_a_protocol_without_noise_says_no_protocol_noise(tmp_path, capsys):
    assert cli.main(RUN + ["--protocol", "fedavg", "--out", str(tmp_path / "run")]) == 0
    assert "protocol noise" not in capsys.readouterr().out


def test_the_defense_part_keeps_the_protocols_noise_beside_a_defense():
    """The defense's words replaced the protocol's noise in the same part of the line (no command gives both today:
    a protocol's message refuses --defense; the line's parts must not depend on that)."""
    from types import SimpleNamespace

    from leakattack.cli.run import _defense

    m = SimpleNamespace(defense="clip:C=1.0@before_sketch", epsilon=None, delta=None, utility_acc=None,
                        privacy_note="no Gaussian noise: no DP guarantee")
    noise = {"sigma": 12.0, "epsilon_rdp": 0.103, "delta_paper": 1e-5}
    part = _defense(m, 10, noise, 3)
    assert part.startswith("protocol noise σ 12, ε 0.103 (δ 1e-05) over rounds 1..3 | defense clip:C=1.0"), part


def test_train_warns_of_a_sketch_ratio_that_an_unsketched_protocol_ignores_and_continues_without_it(tmp_path, capsys):
    """`train --protocol sketched --sketch none --sketch-ratio 0.5` sent b = d in silence (run warns of the same
    flags), and continuing that training at another ratio was refused as another setting."""
    argv = ["train", "--protocol", "sketched", "--sketch", "none", "--quiet", "--threads", "1", "--out", str(tmp_path)]
    assert cli.main(argv + ["--sketch-ratio", "0.5", "--rounds", "1"]) == 0
    err = capsys.readouterr().err
    assert "--sketch none sends the whole update (b = d): --sketch-ratio 0.5 changes nothing" in err
    assert cli.main(argv + ["--rounds", "2"]) == 0  # the default ratio continues it
    err = capsys.readouterr().err
    assert "changes nothing" not in err and "training continues from round 2 of 2" in err


def test_utility_with_a_protocol_is_refused_naming_the_protocols_own_accuracy(tmp_path, capsys):
    """--utility trained the run's default srht sketch beside a fedavg message, which sends the whole update."""
    _refused(RUN + ["--protocol", "fedavg", "--utility", "--out", str(tmp_path / "run")],
             "--utility trains under the run's own --sketch and --defense, which protocol 'fedavg' does not send",
             tmp_path, capsys)


def test_a_noise_seed_and_delta_with_a_protocol_are_warned_of_as_changing_nothing(tmp_path, capsys):
    """sketched-dp draws its noise from its shared seed and states epsilon at --dp-delta: both flags ran silently and
    config.json recorded the noise seed as used."""
    assert cli.main(RUN + ["--protocol", "sketched-dp", "--out", str(tmp_path / "run"), "--noise-seed", "5",
                           "--delta", "1e-6"]) == 0
    err = capsys.readouterr().err
    assert "--noise-seed 5 and --delta 1e-06 change nothing with --protocol" in err, err


def test_the_advice_on_the_protocols_own_batch_names_the_batch_a_small_shard_cuts_it_to(tmp_path, capsys):
    """Clients of 4 photos train on all 4 of them: the run advised --batch-size 32 (--client-batch), which then
    warned that client 0 holds 4."""
    assert cli.main(["run", "--protocol", "sketched", "--dataset", "photos", "--model", "lenet", "--iterations", "1",
                     "--quiet", "--no-lpips", "--threads", "1", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert ("the attacked message is computed on 1 image(s) while the protocol's client 0 trains on batches of 4 "
            "(--client-batch 32 cut to the 4 images client 0 holds); --batch-size 4 attacks the protocol's own "
            "message") in err, err
    capsys.readouterr()
    assert cli.main(["run", "--protocol", "sketched", "--dataset", "photos", "--model", "lenet", "--iterations", "1",
                     "--quiet", "--no-lpips", "--threads", "1", "--batch-size", "4",
                     "--out", str(tmp_path / "own")]) == 0
    assert "attacks the protocol's own message" not in capsys.readouterr().err


def test_a_dp_protocols_epsilon_is_in_metrics_and_in_a_sweeps_summary(tmp_path, capsys):
    """A DP protocol's ε was in its summary line and report but not in metrics.json, so a sweep over protocols had no
    ε in summary.csv, its figures or its report."""
    import csv

    from leakattack.figures.report import build_report

    assert cli.main(RUN + ["--protocol", "sketched-dp", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    noise = json.loads((tmp_path / "run" / "config.json").read_text())["derived"]["sketch"]["privacy"]
    assert metrics["epsilon"] == noise["epsilon_rdp"] and metrics["delta"] == noise["delta_paper"] > 0
    assert metrics["epsilon_paper"] == noise["epsilon_paper"] and "defense" not in metrics
    assert f"ε {noise['epsilon_rdp']:.3g} (δ {noise['delta_paper']:.3g}) over rounds 1..1" in out, out
    page = build_report([tmp_path / "run"])
    assert "(RDP accountant)" in page and "for this one message" not in page  # the protocol's row, over its rounds
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "p"\n[base]\nmodel = "lenet"\ndataset = "digits"\niterations = 1\n'
                     'threads = 1\n[grid]\nprotocol = ["sketched-dp", "fedavg"]\n')
    assert cli.main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    rows = {r["protocol"]: r for r in csv.DictReader(open(tmp_path / "sw" / "summary.csv"))}
    assert float(rows["sketched-dp"]["epsilon_mean"]) == pytest.approx(noise["epsilon_rdp"], rel=1e-9)
    assert rows["fedavg"]["epsilon_mean"] == ""


def test_privsgd_records_the_epsilon_its_rescaled_message_is_bounded_by(tmp_path):
    """privsgd's message s_t Φ_t g is rescaled by a factor that depends on the data: only the rescaling's
    sensitivity 2L bounds it. metrics.json's ε is that one (the paper's per-record one is named in privacy_note)."""
    assert cli.main(RUN + ["--protocol", "privsgd", "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    noise = json.loads((tmp_path / "run" / "config.json").read_text())["derived"]["sketch"]["privacy"]
    assert metrics["epsilon"] == noise["epsilon_rdp_normalised"] > noise["epsilon_rdp"]
    assert "sensitivity 2L" in metrics["privacy_note"] and f"{noise['epsilon_rdp']:.3g}" in metrics["privacy_note"]
    from leakattack.figures.report import build_report

    page = html.unescape(build_report([tmp_path / "run"]))
    assert "† not a DP bound: privsgd's paper ε is at the mean's per-record sensitivity" in page


@pytest.mark.parametrize("protocol,paper,said", [
    ("sketched-dp", 2.0, "only below 1"), ("sketched-dp", 0.5, None), (None, 2.0, "only below 1"),
    ("fedavg", 2.0, "only below 1"),  # a defense's ε under a protocol without noise of its own: Lemma H.7's rule
    ("privsgd", 2.0, "does not guarantee"), ("privsgd", 0.05, "does not guarantee")])
def test_a_sweeps_paper_epsilon_is_marked_where_it_bounds_no_message(protocol, paper, said):
    """sketched-dp's and a defense's paper ε (Lemma H.7) bound a message only below 1; privsgd's, at a per-record
    sensitivity its rescaled message does not have, at no value: it was marked by the first rule (above 1 only)."""
    from leakattack.figures.report.shared import NOT_A_BOUND_MARK
    from leakattack.figures.report.sweep_section import _summary_table

    records = [{"key": str(t), "grid": {"protocol_round": t}, "params": {"model": "lenet", "sketch": "srht",
                                                                        "protocol": protocol},
                "metrics": {"psnr": 9.0, "ssim": 0.1, "d": 10, "b": 5, "epsilon": 0.2, "delta": 1e-5,
                            "epsilon_paper": paper * t ** 0.5, "delta_paper": 1e-5}} for t in (1, 2)]
    text = _summary_table(records, {}, None)
    assert (NOT_A_BOUND_MARK in text) is (said is not None)
    if said == "only below 1":
        assert "is a guarantee only where" in text
    elif said is not None:
        assert "the rescaling of its message by s_t" in text and "is a guarantee only where" not in text
