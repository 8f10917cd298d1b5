"""`leakattack list --attack/--recipe/--protocol` say what a run does with them."""

import pytest

from leakattack import cli

RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "1", "--quiet", "--no-lpips", "--threads", "1"]


def _listed(capsys, *args) -> str:
    assert cli.main(["list", *args]) == 0
    return capsys.readouterr().out


def test_a_run_flag_two_attacks_read_is_not_said_to_be_read_by_one_only(capsys):
    """analytic's --time-limit was listed as a flag "only it reads", which gradient-matching reads too."""
    for attack in ("analytic", "gradient-matching"):
        text = _listed(capsys, "--attack", attack)
        assert "only it reads" not in text and "run flags it reads that not every attack does: " in text
        assert "--time-limit" in text.splitlines()[0]


def test_the_auto_recipe_that_run_takes_by_default_is_described(capsys):
    """list --recipe auto was refused as an unknown recipe where run --recipe auto is the default."""
    text = _listed(capsys, "--recipe", "auto")
    assert text.startswith("auto (run's default): each model's own recipe")
    lines = {line.split(":")[0].strip(): line.split(":")[1] for line in text.splitlines()[1:]}
    assert "lenet" in lines["dlg"] and "resnet18" in lines["ig"]


def test_a_protocols_default_that_run_replaces_by_its_own_is_said(capsys):
    """run --protocol sketched ran at b/d = 0.5 (run's --sketch-ratio), where list named train's 0.1 alone."""
    text = _listed(capsys, "--protocol", "sketched")
    assert "--sketch-ratio          default 0.1 (run --protocol without --protocol-dir: run's own default, 0.5)" in text


def test_a_batch_draw_with_a_protocol_is_one_warning(tmp_path, capsys):
    """--batch-draw random with --protocol was warned of twice, as changing nothing with one image and as not read."""
    assert cli.main(RUN + ["--protocol", "fedavg", "--batch-draw", "random", "--out", str(tmp_path / "run")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "--batch-draw random" in line]
    assert len(warned) == 1 and "not read with --protocol" in warned[0], warned


@pytest.mark.parametrize("args", [["--recipe", "dlg", "--attack", "foo"], ["--model", "lenet", "--attack", "foo"],
                                  ["--defense", "clip", "--protocol", "foo"], ["--recipe", "dlg", "--defense", "foo"]])
def test_an_unknown_name_beside_known_ones_is_refused_alone(capsys, args):
    """Every name is read before any answer is printed: an unknown one gives its one sentence and nothing else."""
    assert cli.main(["list", *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "'foo'" in out.err


def test_a_protocol_s_setting_left_unset_is_listed_with_what_it_means(capsys):
    """sacfl's --server-lr was listed as "default None" where train --help says 1.0: a setting whose default is
    unset lists the value the protocol takes in its place (safl's names the rate of each server optimiser)."""
    from targets.protocols import list_protocols

    for name in list_protocols():
        assert "default None" not in _listed(capsys, "--protocol", name), name
    assert "--server-lr             default 1.0" in _listed(capsys, "--protocol", "sacfl")
    assert "default the paper's tuned rate for --server-opt: adam 0.01, amsgrad 0.01, sgd 1, sgdm 1" in \
        _listed(capsys, "--protocol", "safl")
