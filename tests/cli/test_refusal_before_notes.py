"""A refused ``leakattack run`` prints its refusal alone (exit 2): the warning on flags the attack does not read comes
only once the configuration has passed its checks, and then with each run warning printed once."""

from __future__ import annotations

from leakattack import cli

RUN = ["run", "--no-lpips", "--quiet", "--threads", "1", "--attack", "imprint", "--iterations", "5"]
NOTE = ("leakattack: warning: --iterations changes nothing for the imprint attack, which solves in closed form and "
        "does not read it")


def test_a_refused_closed_form_run_prints_its_refusal_without_the_note(tmp_path, capsys):
    assert cli.main([*RUN, "--bins", "100000000", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "leakattack: error: imprint bins must lie in [2, 16384], got 100000000"]
    assert not (tmp_path / "out").exists()


def test_a_run_that_passes_its_checks_prints_the_note_and_each_warning_once(tmp_path, capsys):
    assert cli.main([*RUN, "--noise-seed", "3", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err.count(NOTE) == 1 and err.index(NOTE) == 0, err
    assert sum("--noise-seed 3 changes nothing" in line for line in err) == 1, err


def test_a_closed_form_run_refused_once_its_case_is_built_prints_its_refusal_without_the_note(tmp_path, capsys):
    """Refusals that need the built case (a batch larger than the data set, an attack the victim does not admit) came
    after the note: two lines for one refusal."""
    for argv, said in (
            ([*RUN, "--batch-size", "100000"], "a batch of 100000 images does not fit in dataset photos of 50 images"),
            (["run", "--no-lpips", "--quiet", "--threads", "1", "--attack", "analytic", "--restarts", "4"],
             "attack 'analytic' cannot run here: the analytic attack inverts a fully connected first layer")):
        assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"leakattack: error: {said}"), err
        assert not (tmp_path / "out").exists()


def test_the_warnings_of_a_run_that_goes_ahead_follow_its_note(tmp_path, capsys):
    """The note waits for the case to be built; the warnings the checks gave meanwhile come after it, once each."""
    assert cli.main([*RUN, "--noise-seed", "3", "--restarts", "2", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    note = ("leakattack: warning: --iterations and --restarts change nothing for the imprint attack, which solves in "
            "closed form and does not read them")
    assert err.index(note) == 0 and err.count(note) == 1, err
    assert sum("--noise-seed 3 changes nothing" in line for line in err) == 1, err
