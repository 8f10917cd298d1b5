"""Limits and one-sentence refusals of run settings (finite numbers, the largest --restarts and --bins, protocol flags
without --protocol, empty paths, a key given twice), and the warnings for settings a run does not read."""

from __future__ import annotations

import re
import warnings

import pytest

from leakattack import cli, experiment
from leakattack.config import ConfigError, RunConfig
from leakattack.config.params import MAX_RESTARTS
from leakattack.errors import SettingWarning

RUN = ["run", "--iterations", "2", "--no-lpips", "--quiet", "--threads", "1"]


def refused(args, capsys, tmp_path) -> str:
    """The one error line of ``leakattack run ARGS``, which exits 2 before any attack."""
    assert cli.main(RUN + ["--out", str(tmp_path / "out"), *args]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("leakattack: error: "), lines
    assert not (tmp_path / "out").exists()
    return lines[0].removeprefix("leakattack: error: ")


@pytest.mark.parametrize("args,sentence", [
    (["--tv", "inf"], "TV weight must be a finite non-negative number, got inf"),
    (["--tol", "inf"], "tolerance must be a finite non-negative number, got inf"),
    (["--tv", "nan"], "TV weight must be a finite non-negative number, got nan"),
    (["--lr", "inf"], "learning rate must be a finite positive number, got inf"),
    (["--prior", "tv:inf"], "the weight of prior 'tv' must be a finite non-negative number, got 'inf'"),
    (["--defense", "clip:C=inf"], "defense 'clip': C must be a finite positive number, got 'inf'"),
    (["--defense", "gaussian:sigma=inf"], "defense 'gaussian': sigma must be a finite non-negative number"),
    (["--defense", "quantize:bits=inf"], "defense 'quantize': bits must be an integer in [1, 32], got 'inf'"),
])
def test_an_infinite_value_is_refused_as_not_finite(args, sentence, capsys, tmp_path):
    assert sentence in refused(args, capsys, tmp_path)


def test_a_negative_value_keeps_its_sentence():
    with pytest.raises(ConfigError, match=r"^TV weight must be non-negative, got -1.0$"):
        RunConfig(tv=-1.0).validate()


def test_restarts_are_bounded(capsys, tmp_path):
    RunConfig(restarts=MAX_RESTARTS).validate()
    assert refused(["--restarts", "100000000"], capsys, tmp_path) == \
        f"restarts must lie in [1, {MAX_RESTARTS}], got 100000000"


def test_imprint_bins_are_bounded(capsys, tmp_path):
    from leakattack.attacks.imprint import MAX_BINS

    RunConfig(attack="imprint", attack_params={"bins": MAX_BINS}).validate()
    assert refused(["--attack", "imprint", "--bins", "100000000"], capsys, tmp_path) == \
        f"imprint bins must lie in [2, {MAX_BINS}], got 100000000"


@pytest.mark.parametrize("args,sentence", [
    (["--clients", "5"], "--clients 5 sets up a protocol's training and changes nothing without --protocol: give "
                         "--protocol too, or leave it out"),
    (["--local-lr", "0.5", "--noniid"], "--local-lr 0.5, --noniid set up a protocol's training"),
    (["--dp-epsilon", "2"], "--dp-epsilon 2.0 sets up"),
    (["--server-opt", "sgd"], "--server-opt sgd sets up"),
])
def test_a_protocol_flag_without_protocol_is_refused(args, sentence, capsys, tmp_path):
    assert sentence in refused(args, capsys, tmp_path)


def test_a_protocol_setting_built_in_python_without_protocol_is_refused():
    with pytest.raises(ConfigError, match=r"^--clients 5 sets up a protocol's training"):
        RunConfig(protocol_spec={"clients": 5}).validate()


@pytest.mark.parametrize("flag,label,kind", [("--weights", "weights", "file"), ("--data-root", "data root", "folder"),
                                             ("--truth", "truth file", "file")])
def test_an_empty_path_is_refused(flag, label, kind, capsys, tmp_path):
    assert refused([f"{flag}="], capsys, tmp_path) == f"{label} must name a {kind}, got an empty string"


def test_a_model_parameter_given_twice_is_refused(capsys, tmp_path):
    assert refused(["--model-param", "act=relu", "--model-param", "act=tanh"], capsys, tmp_path) == \
        "--model-param act is given 2 times (act=relu, act=tanh): give it once"


def test_a_protocol_folder_that_is_missing_or_a_file_is_named_so(capsys, tmp_path):
    assert refused(["--protocol", "fedavg", "--protocol-dir", str(tmp_path / "nothing")], capsys, tmp_path) == \
        f"protocol folder '{tmp_path / 'nothing'}' does not exist (write one with `leakattack train`)"
    (tmp_path / "file").write_text("")
    assert refused(["--protocol", "fedavg", "--protocol-dir", str(tmp_path / "file")], capsys, tmp_path).startswith(
        f"protocol folder '{tmp_path / 'file'}' is a file, not a folder")


@pytest.mark.parametrize("cfg,line", [
    (RunConfig(noise_seed=5), "--noise-seed 5 changes nothing: the defense draws no noise"),
    (RunConfig(noise_seed=5, defense="clip:C=1"), "--noise-seed 5 changes nothing"),
    (RunConfig(delta=0.01), "--delta 0.01 changes nothing: it is the delta of the epsilon of Gaussian noise"),
    # ε read at a δ that gives the data away with that probability: near 0, and no guarantee (it said ε 0 silently)
    (RunConfig(delta=0.7, defense="clip:C=1,gaussian:z=1"), "--delta 0.7: an (epsilon, delta) guarantee allows a "
     "release that gives the data away outright with probability delta"),
    (RunConfig(delta=0.1, defense="clip:C=1,gaussian:sigma=1e-3"), "--delta 0.1: an (epsilon, delta) guarantee"),
    # noise with no clip before it: epsilon is infinite at every delta (it said nothing)
    (RunConfig(delta=1e-3, defense="gaussian:sigma=1e-3"), "--delta 0.001 changes nothing: the defense's Gaussian "
     "noise has no bound on what it is added to (no clip before the noise: sensitivity unbounded), so its epsilon is "
     "infinite at any delta"),
    (RunConfig(download=True), "--download is not read: the embedded data set photos reads no files"),
    (RunConfig(download=True, dataset="digits"), "--download is not read: the embedded data set digits"),
    (RunConfig(priors=["dip"], box=True), "--box changes nothing with --prior dip: the images are its generator's"),
    (RunConfig(priors=["dip"], dummy_init="uniform", box=True),
     "--dummy-init uniform and --box change nothing with --prior dip"),
    (RunConfig(match_space="sketch", given=frozenset({"match_space"})),
     "--match-space sketch changes nothing without --protocol: it chooses between the sketch and the server's "
     "un-sketch"),
    (RunConfig(protocol="fedavg", match_space="sketch", given=frozenset({"match_space"})),
     "--match-space sketch changes nothing for protocol 'fedavg'"),
    (RunConfig(batch_draw="class"), "--batch-draw class changes nothing with one image"),
    (RunConfig(trace_every=50, iterations=50), "--trace-every 50 is not below the 50 iterations: trace.csv records "
     "the PSNR of step 0 and of the last step only"),
])
def test_a_client_setting_that_is_not_read_is_named(cfg, line):
    with pytest.warns(SettingWarning, match=re.escape(line)):
        cfg.validate()


@pytest.mark.parametrize("cfg", [RunConfig(noise_seed=5, defense="gaussian:sigma=1e-3"),
                                 RunConfig(delta=0.01, defense="clip:C=1,gaussian:sigma=1e-3"),
                                 RunConfig(noise_seed=5, utility=True), RunConfig(priors=["dip"]),
                                 RunConfig(priors=["dip:0"], box=True), RunConfig(priors=["tv"], box=True),
                                 RunConfig(protocol="fedsketch-privix", match_space="sketch",
                                           given=frozenset({"match_space"})),
                                 RunConfig(batch_draw="class", batch_size=2), RunConfig(trace_every=49, iterations=50)])
def test_a_client_setting_that_is_read_is_not_named(cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingWarning)
        cfg.validate()


def test_a_regression_victim_records_the_given_targets_it_used():
    with pytest.warns(SettingWarning, match="--labels dlg changes nothing: model 'linreg' is a regression"):
        p = experiment.prepare(RunConfig(model="linreg", label_mode="dlg", iterations=2, threads=1))
    assert p.cfg.label_mode == "given" and p.cfg.to_dict()["label_mode"] == "given"


def test_signed_steps_with_l_bfgs_name_where_l_bfgs_came_from(capsys, tmp_path):
    need = "signed gradients need a first-order optimizer (adam or gd), not lbfgs"
    assert refused(["--signed"], capsys, tmp_path) == f"{need} (the dlg recipe's; add --optimizer adam)"
    assert refused(["--signed", "--optimizer", "lbfgs"], capsys, tmp_path) == need


def test_utility_steps_take_the_step_budgets_bound(capsys, tmp_path):
    """A typo in --utility-steps is refused, not a utility training that never ends (as --iterations is bounded)."""
    assert refused(["--utility", "--utility-steps", "99999999999999999999999"], capsys, tmp_path) == \
        "utility steps must lie in [1, 1000000], got 99999999999999999999999"
    RunConfig(utility=True, utility_steps=1_000_000).validate()
