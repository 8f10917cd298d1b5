"""Settings that change nothing are warned of, and bad input is one sentence: a name too long for the file system,
two placements in one defense step, a master seed whose derived seeds overflow; `list` answers a model and an
attack asked together."""

import pytest

import defenses
from leakattack import cli
from leakattack.errors import UserError

RUN = ["run", "--dataset", "digits", "--iterations", "2", "--threads", "1", "--no-lpips", "--quiet"]


def warnings_of(tmp_path, capsys, *flags) -> str:
    assert cli.main([*RUN, *flags, "--out", str(tmp_path / "run")]) == 0
    return capsys.readouterr().err


@pytest.mark.parametrize("flags, said", [
    (["--defense", "gaussian:sigma=0"], "defense step 'gaussian:sigma=0.0@before_sketch' changes nothing"),
    (["--defense", "prune:p=0"], "defense step 'prune:p=0.0@before_sketch' changes nothing"),
    (["--defense", "prune:p=5e-5"], "defense step 'prune:p=5e-05@before_sketch' changes nothing: at these parameters "
                                    "it sends every vector of 13,426 entries as it is"),
    (["--sketch", "none", "--sketch-seed", "5"], "--sketch none draws nothing at random: --sketch-seed changes"),
    (["--sketch", "none", "--sketch-unknown"], "--sketch-unknown changes nothing"),
    (["--prior", "tv:0"], "--prior tv:0 changes nothing"),
    (["--prior", "tv:0.3", "--prior", "tv"], "--prior tv is given more than once: tv:0.3 is used"),
    (["--tv", "0.1", "--prior", "tv:0.2"], "--tv 0.1 changes nothing: --prior tv:0.2 sets TV's weight"),
])
def test_a_setting_that_changes_nothing_is_warned_of(tmp_path, capsys, flags, said):
    assert said in warnings_of(tmp_path, capsys, *flags)


def test_a_prune_that_zeroes_one_entry_is_not_warned_of(tmp_path, capsys):
    assert "changes nothing" not in warnings_of(tmp_path, capsys, "--defense", "prune:p=8e-5")  # 1 of 13,426


def test_a_weight_of_zero_that_turns_a_recipe_s_tv_off_is_not_warned_of(tmp_path, capsys):
    assert "changes nothing" not in warnings_of(tmp_path, capsys, "--recipe", "ig", "--prior", "tv:0")


def test_an_out_name_too_long_for_the_file_system_is_one_sentence(tmp_path, capsys):
    out = tmp_path / "parent" / ("a" * 300) / "x"
    assert cli.main([*RUN, "--out", str(out)]) == 2
    assert "a name of 300 bytes, and this file system takes" in capsys.readouterr().err
    assert not (tmp_path / "parent").exists()


def test_the_room_left_for_temporary_names_is_a_run_folders_for_a_run_and_a_files_for_a_file(tmp_path):
    """A run folder's hidden folders beside it (.NAME.PID-HOST.XXXXXXXX.tmp) take 32 bytes of the name's limit, a
    file's temporary (.NAME.XXXXXXXX.tmp) 16: a report of a 230-byte name is written, a run folder of one refused."""
    from leakattack.errors import UserError
    from leakattack.results.io import writable_out

    name = "a" * 230
    assert writable_out(tmp_path / f"{name[:-5]}.html", ".html").name == f"{name[:-5]}.html"
    with pytest.raises(UserError, match="a name of 230 bytes, and this file system takes 223 at most here"):
        writable_out(tmp_path / name, beside=True)


def test_two_placements_and_an_overflowing_seed_are_one_sentence(tmp_path, capsys):
    with pytest.raises(UserError, match="names 2 placements: give one"):
        defenses.build("gaussian:sigma=1e-3@after_sketch@before_sketch")
    assert cli.main([*RUN, "--seed", str(2 ** 63 - 1), "--out", str(tmp_path / "run")]) == 2
    assert "seed must be an integer in [0, 2^63 - 4]" in capsys.readouterr().err


def test_list_answers_a_model_and_an_attack_asked_together(capsys):
    assert cli.main(["list", "--model", "lenet", "--attack", "imprint"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lenet: task classification") and "\nimprint: closed form" in out
