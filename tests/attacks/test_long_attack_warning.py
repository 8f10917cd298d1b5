"""An optimisation whose steps left would take longer than an hour at the pace of its first steps is warned of
once, with what shortens it, unless a time limit stops it sooner; label probes and short runs are not."""

from __future__ import annotations

import warnings

import pytest

from leakattack import cli
from leakattack.attacks import gradient_matching


@pytest.fixture
def slow_steps(monkeypatch):
    """Each step of the attack seems to take an hour (the clock runs an hour ahead per reading)."""
    clock = {"t": 0.0}

    def perf_counter():
        clock["t"] += 3600.0
        return clock["t"]

    monkeypatch.setattr(gradient_matching.time, "perf_counter", perf_counter)


def _warned(argv, tmp_path, capsys):
    assert cli.main(["run", "--model", "mlp", "--dataset", "digits", "--no-lpips", "--quiet", "--threads", "1",
                     "--optimizer", "adam", "--labels", "given", "--out", str(tmp_path / "out"), *argv]) == 0
    return [line for line in capsys.readouterr().err.splitlines() if "steps left take about" in line]


def test_a_run_of_hours_is_warned_of_once_with_what_shortens_it(slow_steps, tmp_path, capsys):
    lines = _warned(["--iterations", "20"], tmp_path, capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("leakattack: warning: at about ") and "the attack's 16 steps left" in lines[0]
    assert "--time-limit" in lines[0] and "--iterations" in lines[0]


def test_a_short_run_or_a_time_limit_within_the_hour_is_not(tmp_path, capsys):
    assert _warned(["--iterations", "20"], tmp_path, capsys) == []  # milliseconds a step
    pace = gradient_matching.PACE_STEPS * 10.0  # 10 s a step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradient_matching._warn_long(1000.0 + pace, 1000.0, 1000, 1000.0 + pace + 1800.0, None)  # stops in 30 min
        gradient_matching._warn_long(1000.0 + pace, 1000.0, 359, float("inf"), None)  # 59 min 50 s left
        assert not caught
        gradient_matching._warn_long(1000.0 + pace, 1000.0, 1000, float("inf"), None)
    assert [str(w.message)[:39] for w in caught] == ["at about 10 s a step, the attack's 1000"]
