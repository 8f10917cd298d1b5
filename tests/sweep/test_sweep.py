"""Sweeps: grid expansion, validation at the edge, resumable after Ctrl-C and kill -9, deterministic, one writer."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakattack import cli
from leakattack.errors import UserError
from leakattack.sweep import Backend, load_plan, read_results, run_point, run_sweep, runner
from targets.victim import cpu_cores

ROOT = Path(__file__).resolve().parents[2]
TINY = """
[sweep]
name = "tiny"
strength = "sigma"

[base]
model = "logreg"
dataset = "digits"
sketch = "srht"
sketch_ratio = 0.25
iterations = 20
defense = "clip:C=1,gaussian:sigma={sigma}"

[grid]
sigma = [0.0, 1e-3, 1e-1]
image_index = [0, 1, 2, 3]
"""
#: TINY with points slow enough (~0.3 s each) that a signal sent after the n-th finished
#: point lands mid-sweep even on a loaded machine (TINY's 12 points take under a second)
SLOW = TINY.replace("iterations = 20", "iterations = 150")
TIMING = {"wall_s", "attack_s", "utility_wall_s", "peak_memory"}  # measured, not repeated by a rerun


def write(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def keys(folder):
    return [r["key"] for r in read_results(Path(folder) / "results.jsonl")]


def test_grid_expands_placeholders_in_order_and_unions_grid_tables(tmp_path):
    plan = load_plan(write(tmp_path, TINY))
    assert len(plan.points) == 12 and plan.strength == "sigma"
    assert [p["params"]["defense"] for p in plan.points[:5:4]] == ["clip:C=1,gaussian:sigma=0.0",
                                                                  "clip:C=1,gaussian:sigma=0.001"]
    assert len({p["key"] for p in plan.points}) == 12
    two = (TINY.replace("[grid]\n", "[[grid]]\n")
           + '\n[[grid]]\nsigma = [0.5]\nimage_index = [0]\nsketch = ["countsketch"]\n')
    assert len(load_plan(write(tmp_path, two, "two.toml")).points) == 13
    listed = TINY.replace('defense = "clip:C=1,gaussian:sigma={sigma}"',
                          'defense = "clip:C=1,gaussian:sigma={sigma}"\npriors = ["tv:{w}"]') + "w = [0.1, 0.2]\n"
    points = load_plan(write(tmp_path, listed, "listed.toml")).points
    assert len(points) == 24 and [p["params"]["tv"] for p in points[:2]] == [0.1, 0.2]


@pytest.mark.parametrize("text,needle", [
    ("[grid\nx = 1", "not valid TOML"),
    ("[base]\nmodle = 'lenet'", "unknown [base] key 'modle'"),
    ("[grid]\nsigma = [1]", "unknown [grid] key 'sigma'"),
    ("[base]\nprior = 'dip'", "not a run parameter; did you mean 'priors'?"),
    ("[base]\nsketch-ratio = 0.5", "not a run parameter; did you mean 'sketch_ratio'?"),
    ("[base]\nlabels = 'given'", "not a run parameter; did you mean 'label_mode'? (in a sweep file --labels is "
     "label_mode)"),
    ("[grid]\nsketch_ration = [0.5]", "nor a {placeholder} in [base]; did you mean 'sketch_ratio'?"),
    ("[grid]\nimage_index = 3", "must be a non-empty list"),
    ("[sweep]\njobs = 0", "jobs = 0"),
    ("[sweep]\ncolour = 'red'", "unknown [sweep] key 'colour'"),
    ("[extra]\na = 1", "unknown table or key 'extra'"),
    ("[base]\ndefense = 'gaussian:sigma={s}'\n[grid]\ns = [-1]", "sigma must be a non-negative number, got '-1'"),
    ("[base]\nmodel = 'resnet'\n[grid]\nseed = [0]", "unknown model 'resnet'"),
])
def test_bad_sweep_file_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, text, needle):
    out = tmp_path / "out"
    assert cli.main(["sweep", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_same_seed_gives_identical_metrics_on_cpu(tmp_path):
    params = load_plan(write(tmp_path, TINY)).points[3]["params"]  # noisy point: noise seed included
    (m1, r1, _), (m2, r2, _) = run_point(params), run_point(params)
    assert {k: v for k, v in m1.items() if k not in TIMING} == {k: v for k, v in m2.items() if k not in TIMING}
    assert (r1 == r2).all()


def _start(cfg, out):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # Ctrl-C as a terminal delivers it: a background job's shell starts its children with SIGINT ignored, which
    # Python then keeps ignoring; the sweep is given the default disposition back
    return subprocess.Popen([sys.executable, "-m", "leakattack.cli", "sweep", str(cfg), "--out", str(out), "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_lines(out, n, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout and proc.poll() is None:
        if len(keys(out)) >= n:
            return
        time.sleep(0.05)


def test_kill_9_and_ctrl_c_resume_without_loss_or_duplicates_to_the_uninterrupted_summary(tmp_path):
    cfg = write(tmp_path, SLOW)
    ref = tmp_path / "ref"
    assert cli.main(["sweep", str(cfg), "--out", str(ref), "--quiet"]) == 0

    out = tmp_path / "out"
    proc = _start(cfg, out)  # SIGKILL after two finished points
    _wait_for_lines(out, 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done = keys(out)
    assert 2 <= len(done) < 12 and len(set(done)) == len(done)
    with open(out / "results.jsonl", "ab") as fh:  # a line torn by kill -9 mid-write
        fh.write(b'{"key": "deadbeef0000", "metrics": {"psn')

    proc = _start(cfg, out)  # Ctrl-C after one more point
    _wait_for_lines(out, len(done) + 1, proc)
    proc.send_signal(signal.SIGINT)
    rc, err = proc.wait(timeout=60), proc.stderr.read()
    assert rc == 130 and "interrupted" in err, (rc, err)
    assert not (out / "sweep.lock").exists()  # Ctrl-C releases the folder
    assert len(done) < len(keys(out)) < 12
    assert f"finished results are kept ({len(keys(out))} of 12 points)" in err and "had not started" in err, err

    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    final = keys(out)
    assert sorted(final) == sorted(keys(ref)) and len(final) == 12
    assert final[:len(done)] == done  # nothing finished was lost or rewritten
    assert (out / "summary.csv").read_text() == (ref / "summary.csv").read_text()
    assert b"deadbeef" not in (out / "results.jsonl").read_bytes()


def test_rerun_of_a_finished_sweep_runs_nothing_says_so_and_summary_has_mean_and_std(tmp_path, monkeypatch, capsys):
    cfg = write(tmp_path, TINY.replace("sigma = [0.0, 1e-3, 1e-1]", "sigma = [0.0]"))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    monkeypatch.setattr(runner, "run_point", lambda *a, **k: pytest.fail("a finished point was re-run"))
    capsys.readouterr()
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert f"4 already finished in {out} (skipped), 0 run now" in capsys.readouterr().out
    # results written before a run parameter existed (here: one dropped) still count as finished
    old = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for rec in old:
        del rec["params"]["attacker_knows_clip"]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert len(rows) == 1 and rows[0]["n"] == "4"
    psnr = [r["metrics"]["psnr"] for r in read_results(out / "results.jsonl")]
    assert float(rows[0]["psnr_mean"]) == pytest.approx(sum(psnr) / 4)
    line = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert {"params", "metrics"} <= set(line) and {"psnr", "ssim", "epsilon", "delta", "m"} <= set(line["metrics"])
    assert line["metrics"]["epsilon"] is None  # sigma = 0: no noise, no guarantee


def test_parallel_jobs_write_every_point_once(tmp_path):
    cfg = write(tmp_path, TINY.replace("image_index = [0, 1, 2, 3]", "image_index = [0]"))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    k = keys(out)
    assert len(k) == 3 == len(set(k))
    assert len(list((out / "points").glob("*.pt"))) == 3


class InterruptedBackend(Backend):
    """Runs ``n`` jobs in this process, then raises KeyboardInterrupt as Ctrl-C would; records how it was closed."""

    def __init__(self, n):
        self.n, self.closed = n, []

    def map_unordered(self, fn, items, key=None):
        for item in list(items)[:self.n]:
            yield item, fn(item)
        raise KeyboardInterrupt

    def close(self, cancel=False):
        self.closed.append(cancel)


def test_interrupted_sweep_cancels_the_backend_and_keeps_what_the_coordinator_wrote(tmp_path, monkeypatch):
    plan = load_plan(write(tmp_path, TINY))
    fake = InterruptedBackend(2)
    monkeypatch.setattr(runner, "get_backend", lambda name, **options: fake)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, out, progress=False)
    assert fake.closed == [True]
    assert not (out / "sweep.lock").exists()
    assert keys(out) == [p["key"] for p in plan.points[:2]]
    assert sorted(p.stem for p in (out / "points").glob("*.pt")) == sorted(keys(out))
    assert not (out / "summary.csv").exists()


def test_ctrl_c_just_after_a_points_line_counts_that_point_as_kept(tmp_path, monkeypatch):
    """Ctrl-C landing between a point's line in results.jsonl and the coordinator's count of it: the count of
    finished points that the interrupt reports is the file's."""
    plan = load_plan(write(tmp_path, TINY))
    monkeypatch.setattr(runner, "get_backend", lambda name, **options: InterruptedBackend(3))
    real, lines = runner.append_line, []

    def append_then_interrupt(fd, record):
        real(fd, record)
        lines.append(record["key"])
        if len(lines) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(runner, "append_line", append_then_interrupt)
    with pytest.raises(runner.SweepInterrupted) as caught:
        run_sweep(plan, tmp_path / "out", progress=False)
    assert keys(tmp_path / "out") == lines
    assert (caught.value.finished, caught.value.planned) == (2, 12)


def test_unknown_backend_is_refused_before_anything_is_written(tmp_path):
    plan = load_plan(write(tmp_path, TINY))
    with pytest.raises(UserError, match=r"unknown sweep backend 'nope'; choose one of: .*local"):
        run_sweep(plan, tmp_path / "out", backend="nope")
    assert not (tmp_path / "out").exists()


def test_lpips_asked_for_without_its_weights_is_said_once_and_summarised_when_computed(tmp_path, monkeypatch):
    """``lpips = true`` where the AlexNet weights are not cached warns once before the points run (they record LPIPS
    n/a); where points hold LPIPS, summary.csv has its mean and std."""
    import leakattack.metrics.lpips as lpips_metric

    monkeypatch.setattr(lpips_metric, "alexnet_weights_path", lambda: str(tmp_path / "no-such-weights.pth"))
    one = TINY.replace('name = "tiny"', 'name = "tiny"\nlpips = true').replace("image_index = [0, 1, 2, 3]",
                                                                               "image_index = [0]")
    with pytest.warns(UserWarning, match="lpips = true: LPIPS not computed: AlexNet backbone weights not found"):
        res = run_sweep(load_plan(write(tmp_path, one)), tmp_path / "out", progress=False)
    assert all(r["metrics"]["lpips"] is None for r in read_results(tmp_path / "out" / "results.jsonl"))
    assert "lpips_mean" not in res["rows"][0]
    records = [{"key": "a", "grid": {"sigma": 0.0}, "params": {"model": "m", "sketch": "srht"},
                "metrics": {"psnr": 20.0, "lpips": 0.25, "d": 10, "b": 5}},
               {"key": "b", "grid": {"sigma": 0.0}, "params": {"model": "m", "sketch": "srht"},
                "metrics": {"psnr": 22.0, "lpips": 0.35, "d": 10, "b": 5}}]
    row = runner.summarize(records)[0]
    assert row["lpips_mean"] == pytest.approx(0.3) and row["lpips_std"] == pytest.approx(0.1 / 2 ** 0.5)


def test_each_point_records_its_threads_and_cores_and_a_sweep_of_mixed_cores_is_warned(tmp_path, capsys):
    """A point's last bits depend on the threads its attack ran on, which follow the cores its process counted as its
    own: each record keeps both, and a sweep whose points ran with different cores (resumed with another --jobs, or
    on another machine) says so once.  Points of one uninterrupted sweep ran on 1 and 2 threads (those that reached
    Gauss-Newton ran its algebra on both cores) and were warned of as if resumed."""
    cfg = write(tmp_path, TINY.replace("sigma = [0.0, 1e-3, 1e-1]", "sigma = [0.0]").replace(
        "image_index = [0, 1, 2, 3]", "image_index = [0]"))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert isinstance(rec["threads"], int) and rec["threads"] >= 1 and rec["cores"] == cpu_cores()
    assert "cores each" not in capsys.readouterr().err
    rec["threads"] += 6  # threads of its own, as a point that ran Gauss-Newton's algebra on more: not warned of
    (out / "results.jsonl").write_text(json.dumps(rec) + "\n")
    more = write(tmp_path, TINY.replace("sigma = [0.0, 1e-3, 1e-1]", "sigma = [0.0]").replace(
        "image_index = [0, 1, 2, 3]", "image_index = [0, 1]"))
    assert cli.main(["sweep", str(more), "--out", str(out), "--quiet"]) == 0
    assert "cores each" not in capsys.readouterr().err
    first, second = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    first["cores"] += 6  # as if run on another machine's cores
    (out / "results.jsonl").write_text(json.dumps(first) + "\n")
    assert cli.main(["sweep", str(more), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"this sweep's points ran with {cpu_cores()} and {cpu_cores() + 6} cores each" in err, err
    assert cli.main(["sweep", str(more), "--out", str(out), "--quiet"]) == 0  # nothing run: nothing said again
    assert "cores each" not in capsys.readouterr().err
