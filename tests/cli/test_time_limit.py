"""--time-limit: the attack stops at the deadline with its best iterate; bad durations refused in one sentence."""

import json
import time

import pytest

from leakattack import cli
from leakattack.config import RunConfig
from leakattack.config.params import duration_seconds

RUN = ["run", "--model", "lenet", "--dataset", "digits", "--quiet", "--no-lpips"]


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("1h", 3600), ("2.5", 2.5), (" 3M ", 180),
                                          (7, 7), (0.25, 0.25), ("1h30m", 5400), ("10m30s", 630),
                                          ("1h5m10s", 3910), ("1h0.5m", 3630), ("2h30s", 7230)])
def test_a_duration_reads_as_seconds(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["30m1h", "1h1h", "1h-5m", "1h30", "h30m", "0h0m", "1hm", "", "2d", "1h 30m"])
def test_a_duration_of_several_units_takes_each_once_largest_first(text):
    assert duration_seconds(text) is None


def test_a_run_stops_at_its_time_limit_with_its_best_iterate_and_says_so(tmp_path, capsys, monkeypatch):
    from leakattack import experiment

    titles = []  # the figures' title names why the attack stopped, as a copied figure is read alone
    drawn = experiment.convergence_figure
    monkeypatch.setattr(experiment, "convergence_figure", lambda path, losses, title="", **kw: (
        titles.append(title), drawn(path, losses, title, **kw))[1])
    out = tmp_path / "run"
    t0 = time.perf_counter()
    assert cli.main(RUN + ["--iterations", "1000000", "--stall-window", "0", "--tol", "0", "--time-limit", "2s",
                           "--out", str(out)]) == 0
    wall = time.perf_counter() - t0
    shown = "".join(capsys.readouterr())  # the summary line and the note under it
    m = json.loads((out / "metrics.json").read_text())
    assert m["stop_reason"] == "time-limit" and "time limit of 2 s" in m["message"]
    assert 1 < m["iterations"] < 1_000_000 and m["final_loss"] == min(m["final_loss"], m["initial_loss"])
    assert 2 <= m["attack_s"] < 6 and wall < 30, (m["attack_s"], wall)
    assert "it (time-limit)" in shown and "time limit of 2 s was reached" in shown
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["time_limit"] == "2s" and config["derived"]["time_limit"] == 2.0  # as given; in seconds
    assert titles and titles[0].endswith(f"{m['iterations']} it (time-limit)"), titles


def test_the_python_api_takes_the_limit_as_a_field(tmp_path):
    from leakattack.experiment import execute, prepare

    p = prepare(RunConfig(model="lenet", dataset="digits", iterations=1_000_000, stall_window=0, tol=0,
                          time_limit=1))
    m = execute(p, with_lpips=False).metrics
    assert m.stop_reason == "time-limit" and 1 <= m.attack_s < 5


def test_a_run_that_ends_first_keeps_its_own_stop_reason(tmp_path):
    assert cli.main(RUN + ["--iterations", "3", "--time-limit", "1h", "--out", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["stop_reason"] == "iterations"


@pytest.mark.parametrize("value", ["-3", "abc", "0", "0s", "nan", "inf", "5d", ""])
def test_a_bad_time_limit_is_refused_in_one_sentence_before_any_work(tmp_path, capsys, value):
    assert cli.main(RUN + ["--iterations", "2", "--time-limit", value, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: error: time limit must be a positive duration such as 90s, 10m, 1h, 1h30m or a "
                   f"number of seconds, got {value!r}"]
    assert not any(tmp_path.iterdir())


def _slow_labels_run(monkeypatch, sleep: float, limit: float):
    """The metrics of a lenet run under ``limit`` seconds whose label reading takes ``sleep`` seconds more."""
    from leakattack.attacks import gradient_matching as gm
    from leakattack.experiment import execute, prepare

    read = gm.readings_to_compare

    def slow(*args, **kwargs):
        time.sleep(sleep)
        return read(*args, **kwargs)

    monkeypatch.setattr(gm, "readings_to_compare", slow)
    p = prepare(RunConfig(model="lenet", dataset="digits", iterations=1_000_000, stall_window=0, tol=0,
                          time_limit=limit))
    return execute(p, with_lpips=False).metrics


def test_reading_the_labels_comes_out_of_the_limit_and_is_noted(monkeypatch):
    """The probe pass of the label rules (a minute for vit_b_16 at 224 px on one thread) is part of the attack's
    time and of its limit; the stop names the user's limit, and a note says how much of it the labels took."""
    m = _slow_labels_run(monkeypatch, 0.6, 2)
    assert m.stop_reason == "time-limit" and "the time limit of 2 s was reached" in m.message
    assert "reading the labels took 0." in m.message and "of the 2 s time limit" in m.message, m.message
    assert 2 <= m.attack_s < 5, m.attack_s


def test_labels_that_outlast_the_limit_are_not_called_a_share_of_it(monkeypatch):
    """Reading the labels can take longer than the whole limit (a deep victim's probe pass): the note says so
    instead of calling the time a part of the limit."""
    m = _slow_labels_run(monkeypatch, 1.5, 1)
    assert m.stop_reason == "time-limit"
    assert "reading the labels took 1." in m.message, m.message
    assert " s, more than the whole 1 s time limit (the model on random probes" in m.message, m.message
    assert "of the 1 s time limit" not in m.message, m.message


def test_labels_that_outlast_a_tiny_limit_are_said_with_the_digits_that_exceed_it(monkeypatch):
    """--time-limit=1e-9: "reading the labels took 0.0 s, more than the whole 1e-09 s time limit"."""
    import re

    m = _slow_labels_run(monkeypatch, 0.02, 0.01)
    took = re.search(r"reading the labels took ([\d.e-]+) s, more than the whole 0.01 s time limit", m.message)
    assert took and float(took.group(1)) > 0.01, m.message


def test_quick_labels_add_no_note(tmp_path):
    from leakattack.experiment import execute, prepare

    p = prepare(RunConfig(model="lenet", dataset="digits", iterations=1_000_000, stall_window=0, tol=0,
                          time_limit=1))
    message = execute(p, with_lpips=False).metrics.message
    assert "reading the labels" not in message and "cuts none short" not in message, message


def test_a_step_that_runs_past_the_limit_is_noted(monkeypatch):
    """The limit is checked between steps: a step that takes longer than the limit (an L-BFGS line search of a deep
    victim) finishes first, and the run says how long the attack took instead of only that the limit was reached."""
    from leakattack.attacks import gradient_matching as gm
    from leakattack.experiment import execute, prepare

    evaluate, calls = gm._Problem.evaluate, []

    def slow_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first step's evaluation
            time.sleep(3.5)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(gm._Problem, "evaluate", slow_once)
    p = prepare(RunConfig(model="lenet", dataset="digits", label_mode="given", iterations=1_000_000, stall_window=0,
                          tol=0, time_limit=1))
    m = execute(p, with_lpips=False).metrics
    assert m.stop_reason == "time-limit" and m.attack_s > 3.5, (m.stop_reason, m.attack_s)
    assert "time limit, which is checked between steps and cuts none short" in m.message, m.message
    assert f"the attack took {m.attack_s:.1f} s for a 1 s" in m.message, m.message


@pytest.mark.parametrize("seconds,text", [(0.004, "0.004 s"), (0.4, "0.4 s"), (2.5, "2.5 s"), (9.6, "10 s"),
                                          (59, "59 s"), (90, "2 min")])
def test_a_duration_under_a_second_does_not_read_zero(seconds, text):
    """A time limit of 0.4 s read "the attack's time limit of 0 s" in the dense sketch's warning."""
    from leakattack.errors import duration_text

    assert duration_text(seconds) == text


def test_an_analytic_attack_stopped_before_its_first_sweep_says_what_it_returns(tmp_path, capsys):
    rc = cli.main(["run", "--model", "mlp", "--attack", "analytic", "--sketch", "srht", "--time-limit", "0.001",
                   "--quiet", "--no-lpips", "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert rc == 0 and "after 0 sweeps of the low-rank fit; the examples its initial factors give are returned" \
        in err, err


@pytest.mark.parametrize("extra", [[], ["--time-limit", "5s"]])
def test_a_closed_form_attack_that_reads_no_time_limit_records_none(tmp_path, extra):
    """imprint (and rgap) recorded the ig recipe's 8 minutes (480.0), or the limit given that they warned of, in
    derived, where the recipe's other settings are null."""
    for attack, victim, expected in (("imprint", ["--model-param", "act=relu"], None),
                                     ("analytic", ["--model", "mlp", "--dataset", "digits"], 5.0 if extra else None),
                                     # the ig recipe's 8 minutes, which analytic does not take: only a limit given
                                     ("analytic", ["--model", "mlp", "--dataset", "digits", "--recipe", "ig"],
                                      5.0 if extra else None)):
        out = tmp_path / f"{attack}{len(extra)}{len(victim)}"
        assert cli.main(["run", "--attack", attack, *victim, "--sketch", "none", "--quiet", "--no-lpips", "--threads",
                         "1", "--out", str(out), *extra]) == 0
        derived = json.loads((out / "config.json").read_text())["derived"]
        assert derived["time_limit"] == expected and derived["recipe"] is None, (attack, derived["time_limit"])


def test_a_closed_form_stopped_by_its_time_limit_failed_at_its_budget(tmp_path, capsys):
    """The analytic attack's fit stopped by --time-limit before its first sweep is not rebuilt, and its note and the
    report's headline say the attack failed at this budget, not that the closed form fails on this message."""
    args = ["run", "--model", "mlp", "--dataset", "digits", "--attack", "analytic", "--batch-size", "8",
            "--time-limit", "0.000001", "--quiet", "--no-lpips", "--out", str(tmp_path / "run")]
    assert cli.main(args) == 0
    out = capsys.readouterr()
    assert out.out.startswith("not rebuilt") and "(time-limit)" in out.out
    assert "failure of this closed-form attack at this budget (its solve was stopped before it ended)" in out.err
    assert "closed-form attack on this message" not in out.err
    from leakattack.figures.report import build_report

    page = build_report([tmp_path / "run"])
    assert "Not rebuilt at this budget (" in page  # the report's headline says alike, and names the limit
    assert "analytic, in closed form: sweeps 200, time limit 1e-06 s" in page
