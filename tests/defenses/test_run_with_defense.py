"""`leakattack run --defense SPEC` end to end, and bad specs as one line, exit 2, nothing written."""

import json
import math
import subprocess
import sys

import pytest

from leakattack import cli

COMMON = ["--model", "logreg", "--dataset", "digits", "--iterations", "5", "--quiet", "--no-lpips"]


def test_an_attacker_without_the_seed_does_not_change_the_messages_epsilon(tmp_path):
    """Noise after the sketch protects R clip(g) with the client's R: with --sketch-unknown the attacker models the
    client with another seed's R, and Delta = ||R||_op C still reads the client's (it read the attacker's guess, whose
    CountSketch has another largest bucket: a smaller epsilon than the message's)."""
    from leakattack.sketch import get_sketch

    out = tmp_path / "run"
    assert cli.main(["run", "--dataset", "digits", "--sketch", "countsketch", "--sketch-dim", "134", "--sketch-unknown",
                     "--defense", "clip:C=1,gaussian:z=1@after_sketch", "--iterations", "2", "--quiet", "--no-lpips",
                     "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    seed = json.loads((out / "config.json").read_text())["derived"]["sketch_seed"]
    client = get_sketch("countsketch", m["d"], 134, seed=seed).operator_norm()
    assert m["sketch_norm"] == pytest.approx(client) and m["sensitivity"] == pytest.approx(client)
    known = tmp_path / "known"
    assert cli.main(["run", "--dataset", "digits", "--sketch", "countsketch", "--sketch-dim", "134",
                     "--defense", "clip:C=1,gaussian:z=1@after_sketch", "--iterations", "2", "--quiet", "--no-lpips",
                     "--out", str(known)]) == 0
    assert json.loads((known / "metrics.json").read_text())["epsilon"] == pytest.approx(m["epsilon"])


def test_run_with_clipped_gaussian_reports_epsilon_delta_and_utility(tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", *COMMON, "--defense", "clip:C=1,gaussian:z=1.1@after_sketch", "--utility",
                     "--utility-steps", "20", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["defense"] == "clip:C=1.0@before_sketch,gaussian:z=1.1@after_sketch"
    assert m["delta"] == 1e-5 and 0 < m["epsilon"] < m["epsilon_paper"] * 1.5
    # the noise after the sketch protects R clip(g): Delta = ||R||_op C = sqrt(n/b) for the SRHT (d = 7850, n = 8192)
    assert m["sensitivity"] == pytest.approx(math.sqrt(8192 / 3925))
    assert m["noise_multiplier"] == pytest.approx(1.1 / math.sqrt(8192 / 3925)) and m["noise_seed"] == 3
    # the clip bounds the client's whole update, which each of the 20 rounds releases: no sampling amplification,
    # and the training's epsilon is above one message's
    assert m["utility_sample_rate"] == 1.0 and m["utility_epsilon"] > m["epsilon"] > 0
    assert "released every round (sample rate 1" in m["utility_privacy_note"]
    # the same training with the clip alone learns digits (chance is 0.1); the noise costs accuracy
    clipped = tmp_path / "clipped"
    assert cli.main(["run", *COMMON, "--defense", "clip:C=1", "--utility", "--utility-steps", "20",
                     "--out", str(clipped)]) == 0
    acc = json.loads((clipped / "metrics.json").read_text())["utility_acc"]
    assert acc > 0.5 and m["utility_acc"] < acc, (acc, m["utility_acc"])


def test_utility_estimates_the_norms_a_dense_sketch_needs_and_names_the_cheaper_choices(tmp_path, capsys,
                                                                                        monkeypatch):
    from leakattack import utility

    note = utility.slow_norms_note("gaussian", 300, 7.7)
    assert "Lanczos: 7.7 s for the first, about 38 min in all" in note and "--sketch srht" in note
    assert utility.slow_norms_note("gaussian", 300, 0.5) is None  # 2.5 min: below the 3 minute limit
    monkeypatch.setattr(utility, "SLOW_SKETCH_SECONDS", 0.0)  # any estimate is then too long
    assert cli.main(["run", *COMMON, "--sketch", "gaussian", "--sketch-ratio", "0.1", "--defense",
                     "clip:C=1,gaussian:z=1@after_sketch", "--utility", "--utility-steps", "2",
                     "--out", str(tmp_path / "run")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "Lanczos" in line]
    assert len(lines) == 1 and lines[0].startswith("leakattack: warning: --utility draws a fresh R_t for each "
                                                   "of its 2 steps"), lines


@pytest.mark.parametrize("spec,needle", [
    ("shield:k=1", "unknown defense 'shield'"),
    ("gaussian:sigma=-0.1", "sigma must be a non-negative number, got '-0.1'"),
    ("clip:C=0", "C must be a positive number, got '0'"),
    ("prune:p=1.5", "p must be a fraction in [0, 1), got '1.5'"),
    ("quantize:bits=0", "bits must be an integer in [1, 32], got '0'"),
    ("clip=1", "unknown defense 'clip=1'"),
])
def test_bad_defense_is_one_line_exit_2_and_no_folder(tmp_path, capsys, spec, needle):
    out = tmp_path / "run"
    assert cli.main(["run", *COMMON, "--defense", spec, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()


def test_bad_defense_from_the_shell_exits_2_without_traceback(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "leakattack.cli", "run", *COMMON, "--defense", "gaussian:sigma=-1",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_the_training_amplifies_by_its_batch_sampling_only_an_example_level_bound():
    import defenses
    from leakattack.utility import training_sample_rate

    assert training_sample_rate(defenses.build("per_example:C=1,gaussian:z=1"), 64, 1438) == 64 / 1438
    assert training_sample_rate(defenses.build("clip:C=1,gaussian:z=1"), 64, 1438) == 1.0
    assert training_sample_rate(defenses.build("per_example:C=1,gaussian:z=1"), 64, 32) == 1.0


def test_a_noisy_message_is_measured_and_its_attack_without_a_prior_is_warned(tmp_path, capsys):
    """The attacker's estimate of the noise (the defense's own noise on a zero gradient) is the share the truth
    gives; from NOISY_SHARE on, an attack without an image prior is warned once, naming the stronger attack."""
    from leakattack.attacks.recipes import NOISY_RECIPE_NOTE, NOISY_SHARE
    from leakattack.figures.report import build_report

    base = ["run", "--model", "lenet", "--dataset", "digits", "--sketch-ratio", "0.5", "--iterations", "3",
            "--quiet", "--no-lpips"]
    shares = {}
    for sigma, recipe in (("3e-2", "auto"), ("1e-4", "auto"), ("3e-2", "ig")):
        out = tmp_path / f"{sigma}-{recipe}"
        assert cli.main([*base, "--defense", f"gaussian:sigma={sigma}", "--recipe", recipe, "--out", str(out)]) == 0
        m = json.loads((out / "metrics.json").read_text())
        # ||n|| over ||y||^2 - ||n||^2 against the truth's ||y - R g|| / ||R g||: the norms of 13,426 draws agree
        assert m["noise_share"] == pytest.approx(m["message_distortion"], rel=0.05), m
        shares[sigma, recipe] = m["noise_share"]
        err = capsys.readouterr().err
        warned = [line for line in err.splitlines() if "an attack without an image prior" in line]
        assert len(warned) == (sigma == "3e-2" and recipe == "auto"), warned
        # three steps rebuild nothing: the noisy message's run names the stronger attack among its next settings
        assert m["verdict"] == "not rebuilt"
        assert (f"note: {NOISY_RECIPE_NOTE}" in err) == (sigma == "3e-2" and recipe == "auto"), err
        if sigma == "3e-2" and recipe == "auto":  # and so does its report
            assert NOISY_RECIPE_NOTE[1:] in build_report([out])
        if warned:
            assert warned[0].startswith("leakattack: warning: the defense's noise is about ") and "--recipe ig" in \
                warned[0]
    assert shares["3e-2", "auto"] >= NOISY_SHARE > shares["1e-4", "auto"]
    # noise a hundred times the clipped signal: the message's norm lies within the noise's own spread
    out = tmp_path / "z1"
    assert cli.main([*base, "--defense", "per_example:C=1,gaussian:z=1", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["noise_share"] is None
    assert "the message's norm cannot tell the rest of it from the noise's own spread" in capsys.readouterr().err
    # a clip alone adds no noise: nothing to estimate
    out = tmp_path / "clip"
    assert cli.main([*base, "--defense", "clip:C=1", "--out", str(out)]) == 0
    assert not {"noise_share", "noise_distortion"} & set(json.loads((out / "metrics.json").read_text()))


def test_the_noise_share_is_checked_against_the_noise_alone_where_a_clip_shrinks_the_message(tmp_path):
    """message_distortion (||y - R g|| / ||R g||) counts a clip's shrinkage too: 0.93 where the attacker's
    noise_share read 0.027; noise_distortion, the noise against the message its other steps send, is what the
    estimate is of."""
    out = tmp_path / "clipped"
    assert cli.main(["run", "--model", "lenet", "--dataset", "photos", "--sketch", "srht", "--iterations", "2",
                     "--quiet", "--no-lpips", "--threads", "1", "--attacker-knows-clip",
                     "--defense", "clip:C=1,gaussian:sigma=3e-4@after_sketch", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["noise_share"] == pytest.approx(m["noise_distortion"], rel=0.05), m
    assert m["message_distortion"] > 10 * m["noise_distortion"], m  # ||g|| about 15 clipped to 1


def test_the_noisy_note_reads_the_share_the_prior_and_a_hand_written_config_without_trusting_it():
    from leakattack.attacks.recipes import NOISY_RECIPE_NOTE, NOISY_SHARE, next_settings, noisy_without_prior

    plain = {"tv": 0.0}
    assert noisy_without_prior({"noise_share": NOISY_SHARE}, {}, plain)
    assert noisy_without_prior({"noise_share": None}, {}, plain)  # null: the message's norm within the noise's spread
    assert not noisy_without_prior({"noise_share": NOISY_SHARE / 2}, {}, plain)
    assert not noisy_without_prior({}, {}, plain)  # no noise recorded
    assert not noisy_without_prior({"noise_share": 0.5}, {}, {"tv": 0.02})  # TV is an image prior
    assert not noisy_without_prior({"noise_share": 0.5}, {"priors": ["dip"]}, plain)
    assert noisy_without_prior({"noise_share": 0.5}, {"priors": ["bn:0"]}, plain)  # a weight of 0 is no prior
    assert not noisy_without_prior({"noise_share": "x"}, {"priors": ["nope"]}, plain)
    assert not noisy_without_prior({"noise_share": 0.5}, {"priors": ["nope"]}, plain)
    assert next_settings("objective", {}, plain, {"noise_share": 0.5}) == [NOISY_RECIPE_NOTE]
    assert next_settings("labels", {}, plain, {"noise_share": 0.5}) == []  # wrong labels come first
    assert next_settings("search", {}, plain) == []
    # a rounding's error: its own, lower share and its own measurements
    from leakattack.attacks.recipes import ROUNDING_RECIPE_NOTE, ROUNDING_SHARE

    rounding = {"noise_share": ROUNDING_SHARE, "noise_share_of": "rounding"}
    assert ROUNDING_SHARE < NOISY_SHARE and next_settings("objective", {}, plain, rounding) == [ROUNDING_RECIPE_NOTE]
    assert not noisy_without_prior({**rounding, "noise_share": ROUNDING_SHARE / 2}, {}, plain)
    assert not noisy_without_prior({"noise_share": ROUNDING_SHARE, "noise_share_of": "noise"}, {}, plain)


def test_a_rounding_error_bound_holds_the_exact_expectation_and_is_read_from_the_message_alone():
    """Stochastic rounding onto intervals of width h adds an error of variance h^2 p (1 - p) to an entry a share p
    along its interval: the bound h^2 / 4 per entry, with h from the message's largest magnitude, is at least the
    draws' mean squared error and not far above it for entries spread along their intervals."""
    import torch

    from defenses.quantization import stochastic_round
    from leakattack.observation import rounding_error_bound

    gen = torch.Generator().manual_seed(3)
    v = torch.randn(4000, generator=gen, dtype=torch.float64)
    for bits in (2, 4, 8):
        draws = [stochastic_round(v, bits, torch.rand(v.shape, generator=gen, dtype=torch.float64))
                 for _ in range(20)]
        assert all(float(y.abs().max()) == float(v.abs().max()) for y in draws)  # the grid's end is the message's
        mean = sum(float((y - v).norm() ** 2) for y in draws) / len(draws)
        bound = rounding_error_bound(bits, draws[0])
        assert mean <= bound <= 2 * mean, (bits, mean, bound)
        if bits == 8:  # entries spread evenly along their intervals: E p (1 - p) = 1/6 of the bound's 1/4
            assert bound == pytest.approx(1.5 * mean, rel=0.05)


def test_a_quantised_message_is_measured_and_its_attack_without_a_prior_is_warned(tmp_path, capsys):
    """Unbiased stochastic rounding adds an error of mean 0, as noise does: where it ends the channel the attacker
    reads its bound from the message (noise_share_of "rounding"), at least the truth and within a quarter of it; at 6
    bits (a rounding error of 4.5 % on digit 0 through srht b/d = 0.5, its bound 5.5 %) the attack without a prior
    is warned and, not rebuilt, told to run --recipe ig; at 12 bits neither."""
    from leakattack.attacks.recipes import ROUNDING_RECIPE_NOTE, ROUNDING_SHARE

    base = ["run", "--model", "lenet", "--dataset", "digits", "--sketch-ratio", "0.5", "--iterations", "2",
            "--quiet", "--no-lpips"]
    shares = {}
    for bits in (6, 12):
        out = tmp_path / f"q{bits}"
        assert cli.main([*base, "--defense", f"quantize:bits={bits}", "--out", str(out)]) == 0
        m = json.loads((out / "metrics.json").read_text())
        assert m["noise_share_of"] == "rounding" and m["noise_distortion"] == m["message_distortion"], m
        assert m["noise_distortion"] <= m["noise_share"] <= 1.25 * m["noise_distortion"], m
        shares[bits] = m["noise_share"]
        err = capsys.readouterr().err
        warned = [line for line in err.splitlines() if "an attack without an image prior" in line]
        assert len(warned) == (bits == 6), warned
        assert (f"note: {ROUNDING_RECIPE_NOTE}" in err) == (bits == 6), err
        if warned:
            assert warned[0].startswith("leakattack: warning: the defense's stochastic rounding's error is up to ") \
                and "read from the message's largest value" in warned[0] and "--recipe ig" in warned[0], warned
    assert shares[6] >= ROUNDING_SHARE > shares[12]
    # noise after the rounding: the message is no longer on the rounding's grid, and only the noise is estimated
    out = tmp_path / "q-noise"
    assert cli.main([*base, "--defense", "quantize:bits=6,gaussian:sigma=3e-2@after_sketch", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["noise_share_of"] == "noise"
    # rounding before a sketch: its grid is not the message's, and the attacker estimates nothing, so nothing warns
    # before the attack; after it, the truth's noise_distortion names the stronger attack
    out = tmp_path / "q-before"
    capsys.readouterr()
    assert cli.main([*base, "--defense", "quantize:bits=6@before_sketch", "--out", str(out)]) == 0
    m, err = json.loads((out / "metrics.json").read_text()), capsys.readouterr().err
    assert "noise_share" not in m and m["noise_distortion"] >= ROUNDING_SHARE and m["verdict"] == "not rebuilt", m
    assert "an attack without an image prior" not in err and f"note: {ROUNDING_RECIPE_NOTE}" in err, err


def test_a_message_of_zeros_from_a_rounding_has_no_error_to_share():
    import torch

    from leakattack.channel import Channel
    from leakattack.observation import noise_share
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("none", 10, 10), "quantize:bits=4")
    zero = torch.zeros(10, dtype=torch.float64)
    assert noise_share(channel, channel.send(zero, torch.Generator().manual_seed(0)), zero) == 0.0


def test_an_attacker_granted_the_pruning_models_it_in_order_and_never_the_noise():
    import torch

    from leakattack.channel import Channel
    from leakattack.observation import ThreatModel
    from leakattack.sketch import get_sketch

    channel = Channel(get_sketch("srht", 64, 32, seed=1),
                      "clip:C=1,prune:p=0.5,gaussian:sigma=1,prune:p=0.25@after_sketch")
    views = {(clip, prune): channel.attacker_view(ThreatModel(knows_clip=clip, knows_prune=prune)).pipeline.spec
             for clip in (False, True) for prune in (False, True)}
    assert views == {(False, False): "", (True, False): "clip:C=1.0@before_sketch",
                     (False, True): "prune:p=0.5@before_sketch,prune:p=0.25@after_sketch",
                     (True, True): "clip:C=1.0@before_sketch,prune:p=0.5@before_sketch,prune:p=0.25@after_sketch"}
    g = torch.randn(64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    modelled = Channel(get_sketch("none", 64, 64), "prune:p=0.5").attacker_view(ThreatModel(knows_prune=True))
    x = g.clone().requires_grad_()
    sent = modelled(x)
    sent.sum().backward()  # differentiable through the entries it keeps
    assert int((x.grad != 0).sum()) == 32 and torch.equal(sent.detach(), modelled(g))
    with pytest.raises(Exception, match="knows_prune must be True or False"):
        ThreatModel(knows_prune="yes")


def test_an_attacker_who_knows_the_pruning_scores_the_truth_at_zero_and_one_who_does_not_is_told(tmp_path, capsys):
    """Blind to the pruning, the attacker's model sends the whole gradient, and the truth does not send the message
    (its L_R above 0); granted it, the truth's simulated message is the message.  A blind run not rebuilt names
    --attacker-knows-prune among its next settings; the report says whether the pruning was known."""
    from leakattack.attacks.recipes import PRUNE_NOT_MODELLED_NOTE
    from leakattack.figures.report import build_report

    base = ["run", "--model", "lenet", "--dataset", "digits", "--sketch-ratio", "0.5", "--iterations", "2",
            "--quiet", "--no-lpips", "--defense", "prune:p=0.75"]
    at, said = {}, {}
    for known in (False, True):
        out = tmp_path / f"known-{known}"
        assert cli.main([*base, *(["--attacker-knows-prune"] if known else []), "--out", str(out)]) == 0
        m = json.loads((out / "metrics.json").read_text())
        assert m["verdict"] == "not rebuilt"
        at[known] = m["objective_at"]["truth"]["match"]
        said[known] = capsys.readouterr().err
        assert json.loads((out / "config.json").read_text())["run"]["attacker_knows_prune"] is known
        assert ("pruning known" if known else "pruning not known") in build_report([out])
    assert at[True] <= 1e-20 < at[False], at
    assert f"note: {PRUNE_NOT_MODELLED_NOTE}" in said[False] and PRUNE_NOT_MODELLED_NOTE not in said[True]


def test_the_notes_after_a_pruned_or_rounded_run_name_only_what_would_change_something(tmp_path, capsys):
    """A prune of a share that zeroes no entry of its vector, and a closed-form attack (which models no channel), get
    no note naming --attacker-knows-prune; a rounding followed by noise, whose noise_share counts the noise alone,
    is read after the run from the truth's noise_distortion and names --recipe ig."""
    from leakattack.attacks.recipes import PRUNE_NOT_MODELLED_NOTE, ROUNDING_RECIPE_NOTE

    base = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "3", "--quiet", "--no-lpips"]
    for extra in (["--defense", "prune:p=0.00001"], ["--defense", "prune:p=0.0001@after_sketch"],
                  ["--sketch", "none", "--defense", "prune:p=0.5", "--attack", "rgap"]):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        assert cli.main([*base, *extra, "--out", str(out)]) == 0
        assert json.loads((out / "metrics.json").read_text())["verdict"] == "not rebuilt"
        assert PRUNE_NOT_MODELLED_NOTE not in capsys.readouterr().err, extra
    out = tmp_path / "qn"
    assert cli.main([*base, "--defense", "quantize:bits=6,gaussian:sigma=1e-4@after_sketch", "--out", str(out)]) == 0
    m, err = json.loads((out / "metrics.json").read_text()), capsys.readouterr().err
    assert m["noise_share_of"] == "noise" and m["noise_share"] < 0.01 <= m["noise_distortion"], m
    assert f"note: {ROUNDING_RECIPE_NOTE}" in err, err


def test_defense_none_records_what_no_defense_records(tmp_path):
    """--defense none recorded a privacy report (ε ∞, 'no Gaussian noise') where the same run without the flag
    records none, and a sweep, which takes the two for one point, kept whichever ran first."""
    import json

    from leakattack import cli

    for name, flags in (("none", ["--defense", "none"]), ("plain", [])):
        assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "1", "--quiet",
                         "--no-lpips", "--threads", "1", *flags, "--out", str(tmp_path / name)]) == 0
    keys = [set(json.loads((tmp_path / n / "metrics.json").read_text())) for n in ("none", "plain")]
    assert keys[0] == keys[1] and "epsilon" not in keys[0] and "privacy_note" not in keys[0]
