"""A sweep point that only its run can refuse stops the sweep in one sentence naming the point, keeps the points
finished before it, and says how to resume; a value that cannot be a number of the attack's dtype is refused by the
checking of every point before anything runs (`--dry-run` included)."""

import json

import torch

from leakattack import cli
from leakattack.attacks.priors import register_prior

SWEEP = """
[sweep]
lpips = false
[base]
model = "lenet"
dataset = "digits"
iterations = 2
[grid]
priors = [["late:1"], ["late:2"], ["late:3"]]
"""


def late(weight, obs=None):
    """A penalty that is finite at weight 1 and NaN at weight 2: only the run at its start can tell."""
    return lambda x: x.sum() * (float("nan") if weight == 2 else 0.0)


def test_a_point_its_run_refuses_is_named_and_the_points_before_it_are_kept(tmp_path, capsys, fresh_registries):
    register_prior("late", late, weight=1.0)
    (tmp_path / "late.toml").write_text(SWEEP)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(tmp_path / "late.toml"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "the prior named 'late' returned nan at the attack's start" in err
    assert "(sweep point {'priors': ['late:2']})" in err
    assert f"resume with: leakattack sweep {tmp_path / 'late.toml'} --out {out} --quiet" in err
    kept = [json.loads(line)["grid"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert kept == [{"priors": ["late:1"]}]


def test_a_learning_rate_beyond_float32_is_refused_before_any_point_runs(tmp_path, capsys):
    big = float(torch.finfo(torch.float32).max) * 10
    (tmp_path / "big.toml").write_text(SWEEP.replace('priors = [["late:1"], ["late:2"], ["late:3"]]',
                                                     f"lr = [0.1, {big!r}]").replace(
        'iterations = 2', 'iterations = 2\noptimizer = "adam"\ndtype = "float32"'))
    for extra in (["--dry-run"], ["--out", str(tmp_path / "out")]):
        assert cli.main(["sweep", str(tmp_path / "big.toml"), "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert "the learning rate, 3.40282e+39, is beyond the largest float32 number (3.4e+38)" in err
        assert f"(sweep point {{'lr': {big!r}}}, with [base] dtype)" in err
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_more_local_jobs_than_cores_is_said_in_one_warning(tmp_path, capsys):
    from targets.victim import cpu_cores

    (tmp_path / "s.toml").write_text(SWEEP.replace('priors = [["late:1"], ["late:2"], ["late:3"]]', "seed = [0, 1]"))
    cores = cpu_cores()
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--dry-run", "--quiet", "--jobs", str(cores + 1)]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("leakattack: warning:")]
    assert said == [f"leakattack: warning: --jobs {cores + 1} on {cores} core{'s' if cores != 1 else ''}: up to "
                    f"{cores + 1} worker processes at once (at most one per point still to run) share the cores, each "
                    "holding its own torch, model and attack in memory"]
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--dry-run", "--quiet", "--jobs", str(cores)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_points_with_more_threads_than_a_workers_share_are_said_in_one_warning(tmp_path, capsys, monkeypatch):
    import leakattack.constraints
    import leakattack.sweep.backends.local
    import leakattack.sweep.runner

    # four cores, whatever this machine has: a point may set up to four threads, and --jobs 2 gives a worker two
    monkeypatch.setattr(leakattack.constraints, "available_cores", lambda: 4)
    monkeypatch.setattr(leakattack.sweep.runner, "cpu_cores", lambda: 4)
    monkeypatch.setattr(leakattack.sweep.backends.local, "cpu_cores", lambda: 4)
    grid = 'seed = [0, 1]\nthreads = [1, 2, 4]'
    (tmp_path / "s.toml").write_text(SWEEP.replace('priors = [["late:1"], ["late:2"], ["late:3"]]', grid))
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--dry-run", "--quiet", "--jobs", "2"]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("leakattack: warning:")]
    assert said == ["leakattack: warning: threads 4 (at 2 of the 6 points to run) is more than a worker's share of "
                    "the cores: 2 jobs give each of their 2 workers at once 2 of the 4 cores, so they run up to 8 "
                    'threads on 4 and wait on each other (threads = "auto" takes the share; or run fewer jobs)']
    for jobs in ("1", "4"):  # one job holds every core; four hold one each, and threads 2 and 4 are both too many
        assert cli.main(["sweep", str(tmp_path / "s.toml"), "--dry-run", "--quiet", "--jobs", jobs]) == 0
        said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("leakattack: warning:")]
        assert said == ([] if jobs == "1" else [
            "leakattack: warning: threads 2 and 4 (at 4 of the 6 points to run) are more than a worker's share of the "
            "cores: 4 jobs give each of their 4 workers at once 1 of the 4 cores, so they run up to 16 threads on 4 "
            'and wait on each other (threads = "auto" takes the share; or run fewer jobs)'])
