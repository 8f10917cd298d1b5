"""Without --out a sweep runs into a new folder of its own under results/runs/ (ignored by git), never into the
committed reference of the same name under results/sweeps/, whose finished points it would skip; the references are
written by `leakattack reproduce`, which names them with --out; the same --out again resumes."""

import subprocess
from pathlib import Path

from leakattack import cli
from leakattack.cli.reproduce import SWEEPS, steps
from leakattack.cli.sweep import default_sweep_dir
from leakattack.sweep import read_results

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """
[sweep]
name = "tiny"
[base]
model = "lenet"
dataset = "digits"
iterations = 2
[grid]
image_index = [0]
"""


def test_a_sweep_without_out_runs_into_a_new_folder_under_results_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SWEEP)
    reference = tmp_path / "results" / "sweeps" / "tiny"  # a finished reference of the same name
    assert cli.main(["sweep", "tiny.toml", "--quiet", "--out", str(reference)]) == 0
    before = (reference / "results.jsonl").read_bytes()
    capsys.readouterr()
    assert cli.main(["sweep", "tiny.toml", "--quiet"]) == 0
    first = capsys.readouterr().out
    assert "skipped" not in first and "1/1 points" in first
    assert (reference / "results.jsonl").read_bytes() == before
    runs = sorted((tmp_path / "results" / "runs").iterdir())
    assert [p.name.startswith("sweep-tiny-") for p in runs] == [True]
    assert len(read_results(runs[0] / "results.jsonl")) == 1 and str(runs[0].relative_to(tmp_path)) in first
    # again: another new folder (the second's name carries a suffix when it starts in the same second)
    assert cli.main(["sweep", "tiny.toml", "--quiet"]) == 0
    assert len(list((tmp_path / "results" / "runs").iterdir())) == 2
    # the same --out resumes
    capsys.readouterr()
    assert cli.main(["sweep", "tiny.toml", "--quiet", "--out", str(runs[0])]) == 0
    assert "1 already finished" in capsys.readouterr().out


def test_the_default_folder_is_unique_and_ignored_by_git(tmp_path):
    first = default_sweep_dir("defense_sweep", root=tmp_path)
    assert first.parent == tmp_path and first.name.startswith("sweep-defense_sweep-") and not first.exists()
    first.mkdir()
    assert default_sweep_dir("defense_sweep", root=tmp_path) != first
    default = default_sweep_dir("defense_sweep")
    assert default.parts[:2] == ("results", "runs")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(default / "results.jsonl")], cwd=ROOT)
    assert ignored.returncode == 0  # 0: ignored


def test_reproduce_writes_the_committed_references_with_out():
    for name, (what, argv) in zip(SWEEPS, steps()["sweeps"]):
        assert argv[argv.index("--out") + 1] == f"results/sweeps/{name}" == what.split(":", 1)[1]
