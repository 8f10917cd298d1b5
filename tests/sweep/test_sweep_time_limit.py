"""A sweep takes ``time_limit`` per point (a duration as text or seconds) and refuses a bad one before any point
runs."""

import pytest

from leakattack import cli
from leakattack.sweep import load_plan, read_results, runner

BASE = """
[base]
model = "lenet"
dataset = "digits"
iterations = 1000000
stall_window = 0
tol = 0
"""


def test_each_point_stops_at_its_own_time_limit(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + '[grid]\ntime_limit = ["1s", 2]\n')
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    stored = {str(r["params"]["time_limit"]): r["metrics"] for r in read_results(out / "results.jsonl")}
    assert set(stored) == {"1.0", "2.0"}  # stored as seconds
    for limit, m in (("1.0", 1), ("2.0", 2)):
        assert stored[limit]["stop_reason"] == "time-limit", stored[limit]
        assert m <= stored[limit]["attack_s"] < m + 4, stored[limit]


@pytest.mark.parametrize("value", ['"-3"', '"abc"', "0", "-1.5"])
def test_a_bad_time_limit_is_refused_naming_its_key_before_any_point_runs(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setattr(runner, "run_point", lambda *a, **k: pytest.fail("a point ran before the sweep was refused"))
    cfg = tmp_path / "bad.toml"
    cfg.write_text(BASE + f"[grid]\nseed = [0, 1]\ntime_limit = [{value}]\n")
    assert cli.main(["sweep", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "time limit must be a positive duration" in err[0] and "time_limit" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_time_limits_that_are_the_same_duration_are_one_point(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(BASE + '[grid]\ntime_limit = ["60s", 60, "1m", 60.0, "2m"]\n')
    plan = load_plan(cfg, check=False)
    assert [p["params"]["time_limit"] for p in plan.points] == [60.0, 120.0] and plan.duplicates == 3
