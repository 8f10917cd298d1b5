"""A sweep folder survives what goes wrong around it: a changed sweep file stopped before its first point, a short
write, a worker that is killed, a hand-edited metric, and a grid that grows reads as a fresh run of it."""

import json
import os
from pathlib import Path

import pytest
from test_sweep import TINY, InterruptedBackend, write  # tests/sweep is on the path

from leakattack import cli
from leakattack.errors import UserError
from leakattack.results import store
from leakattack.sweep import Backend, load_plan, read_results, run_sweep, runner
from leakattack.sweep.backends import LocalBackend
from leakattack.sweep.backends.base import WorkerLost

SMALL = TINY.replace("sigma = [0.0, 1e-3, 1e-1]", "sigma = [0.0]").replace("image_index = [0, 1, 2, 3]",
                                                                             "image_index = [0, 1]")


def _state(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "sweep.lock"}


def test_a_changed_sweep_file_stopped_before_its_first_point_leaves_the_folder_drawable(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    run_sweep(load_plan(write(tmp_path, SMALL)), out, progress=False)
    before = _state(out)
    grown = load_plan(write(tmp_path, SMALL.replace("sigma = [0.0]", "sigma = [0.0, 1e-3]"), "grown.toml"))
    monkeypatch.setattr(runner, "get_backend", lambda name, **options: InterruptedBackend(0))
    with pytest.raises(KeyboardInterrupt):
        run_sweep(grown, out, progress=False)
    assert _state(out) == before  # sweep.json still names the grid whose points are stored
    monkeypatch.undo()
    assert cli.main(["figures", str(out)]) == 0
    assert capsys.readouterr().out.startswith("2 points | ")
    assert _state(out)["summary.csv"] == before["summary.csv"]
    with pytest.raises(UserError, match="holds no finished point of the grid .* left as they are"):
        runner.finalize(out, load_plan(write(tmp_path, SMALL.replace("sigma = [0.0]", "sigma = [0.5]"), "o.toml")))
    assert _state(out)["summary.csv"] == before["summary.csv"]


def test_a_short_write_is_followed_by_the_rest_of_the_line(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(store.os, "write", lambda fd, data: real(fd, bytes(data[:7])))
    path = tmp_path / "results.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        store.append_line(fd, {"key": "k", "metrics": {"psnr": 12.5}, "text": "x" * 100})
    finally:
        os.close(fd)
    assert json.loads(path.read_text()) == {"key": "k", "metrics": {"psnr": 12.5}, "text": "x" * 100}
    assert path.read_text().count("\n") == 1


def _die(item):
    os._exit(3)  # as the system's OOM killer ends a worker: no exception, no result


def test_a_killed_worker_is_one_sentence_that_names_how_to_resume(tmp_path, monkeypatch, capsys):
    with pytest.raises(WorkerLost, match="a worker process of the sweep ended without a result"):
        with LocalBackend(jobs=2) as backend:
            list(backend.map_unordered(_die, [1, 2]))

    class Lost(Backend):
        def map_unordered(self, fn, items, key=None):
            items = list(items)
            yield items[0], fn(items[0])
            raise WorkerLost("a worker process of the sweep ended without a result (killed); the points finished "
                             "are kept")

        def close(self, cancel=False):
            pass

    monkeypatch.setattr(runner, "get_backend", lambda name, **options: Lost())
    out = tmp_path / "out"
    assert cli.main(["sweep", str(write(tmp_path, SMALL)), "--out", str(out), "--quiet", "--jobs", "5"]) == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("leakattack: warning:")]
    assert len(lines) == 1 and lines[0].endswith(f"resume with fewer --jobs: leakattack sweep {tmp_path / 's.toml'} "
                                                 f"--out {out} --jobs 2 --quiet"), lines
    assert len(read_results(out / "results.jsonl")) == 1
    assert cli.main(["sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "one"), "--quiet"]) == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("leakattack: warning:")]
    assert lines[0].endswith(f"are kept: resume with: leakattack sweep {tmp_path / 's.toml'} --out "
                             f"{tmp_path / 'one'} --quiet"), lines  # one job already: no fewer to give


def test_a_bad_stored_metric_is_refused_before_any_point_runs(tmp_path):
    out = tmp_path / "out"
    run_sweep(load_plan(write(tmp_path, SMALL)), out, progress=False)
    lines = (out / "results.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('"psnr": ', '"psnr": "abc", "was": ', 1)
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    grown = load_plan(write(tmp_path, SMALL.replace("image_index = [0, 1]", "image_index = [0, 1, 2]"), "g.toml"))
    with pytest.raises(UserError, match='whose psnr is "abc", not a number'):
        run_sweep(grown, out, progress=False)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    # --dry-run --out checks the folder as the run does: the same sentence, not "2 already finished"
    assert cli.main(["sweep", str(tmp_path / "g.toml"), "--out", str(out), "--dry-run", "--quiet"]) == 2


def test_a_grown_grid_summarises_as_a_fresh_run_of_it(tmp_path):
    grown_text = SMALL.replace("image_index = [0, 1]", 'image_index = [0, 1]\nobjective = ["l2", "cosine"]')
    resumed, fresh = tmp_path / "resumed", tmp_path / "fresh"
    run_sweep(load_plan(write(tmp_path, SMALL)), resumed, progress=False)
    grown = load_plan(write(tmp_path, grown_text, "grown.toml"))
    res = run_sweep(grown, resumed, progress=False)
    assert res["skipped"] == 2
    run_sweep(grown, fresh, progress=False)
    assert (resumed / "summary.csv").read_text() == (fresh / "summary.csv").read_text()
    assert cli.main(["figures", str(resumed)]) == 0
    assert (resumed / "summary.csv").read_text() == (fresh / "summary.csv").read_text()


def test_a_message_file_without_its_truth_is_refused_when_the_sweep_is_read(tmp_path, capsys):
    import torch

    from leakattack.results.message import write_message

    write_message(tmp_path / "m.pt", torch.randn(100), num_classes=10)
    sweep = write(tmp_path, f'[base]\nmessage = "{tmp_path / "m.pt"}"\nmodel = "lenet"\n[grid]\niterations = [2]\n')
    assert cli.main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a sweep scores each point against its images" in err and "give truth = FILE" in err
    assert not (tmp_path / "out").exists()


def test_a_dry_run_into_a_closed_pipe_ends_quietly_not_as_a_folder_it_cannot_write(tmp_path, monkeypatch, capsys):
    """`leakattack sweep F --out D --dry-run | head -2`: the reader stopped, no disk failed."""
    from leakattack.cli import sweep as sweep_cli

    out = tmp_path / "out"
    out.mkdir()

    def closed(*args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sweep_cli, "dry_run", closed)
    assert cli.main(["sweep", str(write(tmp_path, SMALL)), "--out", str(out), "--dry-run", "--quiet"]) == 0
    assert "cannot write" not in capsys.readouterr().err


def test_an_interrupted_sweep_says_a_summary_it_left_stale_and_figures_counts_the_planned_points(
        tmp_path, monkeypatch, capsys):
    """After Ctrl-C, figures printed '2 points' without the 10 planned ones left, and a resumed sweep stopped again
    left that summary.csv of 2 points beside 4 finished, without a word."""
    from leakattack.cli import sweep as sweep_cli

    config = write(tmp_path, TINY)
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "get_backend", lambda name, **options: InterruptedBackend(2))
    assert cli.main(["sweep", str(config), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "summary.csv" not in err  # none yet
    monkeypatch.undo()
    assert cli.main(["figures", str(out)]) == 0
    assert capsys.readouterr().out.startswith("2 of 12 planned points (the sweep was not finished) | ")
    monkeypatch.setattr(runner, "get_backend", lambda name, **options: InterruptedBackend(2))
    assert cli.main(["sweep", str(config), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err.splitlines()
    assert f"leakattack: summary.csv and figures/ are of 2 points, drawn before, not of the 4 finished now: " \
           f"leakattack figures {out} redraws them" in err, err
    assert sweep_cli.stale_summary(out) is not None
    monkeypatch.undo()
    assert cli.main(["figures", str(out)]) == 0
    assert capsys.readouterr().out.startswith("4 of 12 planned points")
    assert sweep_cli.stale_summary(out) is None


@pytest.mark.parametrize("where", ["while plugins load", "before the command", "while the plan is read"])
def test_a_signal_before_the_backend_takes_up_an_earlier_runs_jobs_says_they_still_run(tmp_path, monkeypatch, capsys,
                                                                                     where):
    """A resumed SLURM sweep stopped in its first seconds said 'nothing unfinished was written' and no resume
    command, while the jobs its earlier run had submitted (slurm/jobs.json) still ran."""
    import leakattack.cli as cli_package
    from leakattack.cli import sweep as sweep_cli

    config = write(tmp_path, TINY)
    out = tmp_path / "out"
    (out / "slurm").mkdir(parents=True)
    (out / "slurm" / "jobs.json").write_text(json.dumps({"jobs": {"k1": {"name": "100_0"}, "k2": {"name": "100_1"}}}))

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "while plugins load":  # before the flags are parsed (a plugin importing torch takes seconds)
        monkeypatch.setattr(cli_package, "load_plugins", stopped)
    elif where == "before the command":  # the held signal lands as the command's module has been imported
        monkeypatch.setattr(sweep_cli, "cmd_sweep", stopped)
    else:
        monkeypatch.setattr(sweep_cli, "load_plan", stopped)
    assert cli_package.main(["sweep", str(config), "--out", str(out), "--backend", "slurm", "--quiet"]) == 130
    err = capsys.readouterr().err.splitlines()
    assert f"leakattack: 2 SLURM jobs of an earlier run of this sweep, listed in {out / 'slurm' / 'jobs.json'}, are " \
           f"still queued or running: resume with: leakattack sweep {config} --out {out} --backend slurm --quiet " \
           "(which takes them up), or stop them with scancel" in err, err


def test_a_signal_while_plugins_load_adds_no_help_text_and_a_local_sweep_is_told_the_slurm_command(
        tmp_path, monkeypatch, capsys):
    """The note parsed the flags again and printed --help's text to stdout; to a local sweep it named its own command,
    whose backend neither reads nor cancels the jobs."""
    import leakattack.cli as cli_package
    import leakattack.cli.list  # noqa: F401  (imported, the submodule shadows the builtin list in the package)

    config = write(tmp_path, TINY)
    out = tmp_path / "out"
    (out / "slurm").mkdir(parents=True)
    (out / "slurm" / "jobs.json").write_text(json.dumps({"jobs": {"k1": {"name": "100_0"}}}))

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_package, "load_plugins", stopped)
    for argv in (["sweep", "--help"], ["--version"], ["run", "--help"], ["run", "--iterations", "1"]):
        assert cli_package.main(argv) == 130
        io = capsys.readouterr()
        assert io.out == "" and io.err.splitlines() == [
            "leakattack: interrupted; what had finished is kept, nothing unfinished was written"], (argv, io)
    assert cli_package.main(["sweep", str(config), "--out", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"leakattack: 1 SLURM job of an earlier run of this sweep, listed in {out / 'slurm' / 'jobs.json'}, is still "
        f"queued or running: resume with: leakattack sweep {config} --out {out} --backend slurm --quiet (which takes "
        "it up), or stop it with scancel")
