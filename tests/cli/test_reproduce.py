"""`leakattack reproduce` names and prints the commands behind every committed reference result."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leakattack import cli

ROOT = Path(__file__).resolve().parents[2]


def test_list_names_every_step(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("reference", "sweeps", "theory", "protocols"):
        assert out.count(name + ":") == 1
    assert cli.main(["reproduce", "--list", "theory"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [ln for ln in out.splitlines() if ln.startswith("theory:")]
    assert cli.main(["reproduce", "--list", "nosuch"]) == 2
    assert "unknown reproduce step 'nosuch'" in capsys.readouterr().err


def test_dry_run_prints_commands_that_point_at_committed_inputs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("run --model lenet --sketch srht" in ln and "results/reference/lenet-srht" in ln for ln in lines)
    committed = sorted(p.name for p in (ROOT / "results" / "sweeps").iterdir() if (p / "results.jsonl").exists())
    assert len(committed) >= 8
    for toml in committed:  # every committed sweep has its step, from its own file into its own folder
        assert (ROOT / "examples" / f"{toml}.toml").exists()
        assert sum(f"examples/{toml}.toml" in ln and f"--out results/sweeps/{toml}" in ln for ln in lines) == 1
    for script in ("protocols_train.sh", "protocols_summarise.py", "protocols_attack_table.py"):
        assert (ROOT / "scripts" / script).exists()
        assert any(script in ln for ln in lines)


def test_unknown_step_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "everything"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leakattack: error: unknown reproduce step 'everything'; "
                   "choose one of: reference, sweeps, theory, protocols"]


def test_outside_the_repository_root_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "reference"]) == 2
    assert "repository root" in capsys.readouterr().err
    assert cli.main(["reproduce", "reference", "--dry-run"]) == 0  # printing the commands needs no repository
    assert capsys.readouterr().out.startswith("[reference] ")


@pytest.mark.slow
def test_reference_regenerated_under_another_cpu_capability_is_compared_by_quality_and_exits_0(tmp_path):
    # AVX2 kernels stand in for another machine: another vector width changes the last bits of the reductions
    # and with them the L-BFGS trajectory; the comparison must say how the numbers differ and accept them
    shutil.copytree(ROOT / "results" / "reference", tmp_path / "results" / "reference")
    (tmp_path / "examples").mkdir()
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
    proc = subprocess.run([sys.executable, "-m", "leakattack.cli", "reproduce", "reference"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for name in ("lenet-srht", "lenet-none"):
        assert f"[reference] {name}: committed on " in out
        verdict = next(line for line in out.splitlines() if line.startswith(f"[reference]   {name}: "))
        assert "the same to the last bit" in verdict or "agrees within the tolerances" in verdict, verdict
    psnr = [line for line in out.splitlines() if line.startswith("[reference]   psnr:")]
    assert len(psnr) == 2 and all("tolerance ±6 dB" in line and line.endswith(": within") for line in psnr), psnr
    committed = json.loads((ROOT / "results" / "reference" / "lenet-srht" / "config.json").read_text())
    fresh = json.loads((tmp_path / "results" / "reference" / "lenet-srht" / "config.json").read_text())
    assert fresh["environment"]["machine"]["aten_cpu_capability"] == "avx2"
    assert fresh["environment"]["machine"]["cpu"] and committed["environment"]["machine"]["cpu"]


def test_protocol_training_runs_are_cleared_before_they_are_trained_again(tmp_path, monkeypatch):
    """Training into a folder that holds a run resumes it (or, finished, leaves it), so the protocols step clears
    the training runs under its folder first; files that are no training run stay."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    train = Path("results/protocols/train")
    for name in ("fedavg", "sketched-srht-0.1"):
        (train / name / "checkpoints").mkdir(parents=True)
        (train / name / "protocol.json").write_text("{}")
        (train / name / "checkpoints" / "round_0001.pt").write_bytes(b"")
    (train / "notes").mkdir()
    (train / "accuracy_vs_floats.png").write_bytes(b"png")
    what = [w for w, _ in reproduce.steps()["protocols"] if w.startswith("train:")]
    assert what == ["train:results/protocols/train"]
    kept = reproduce._prepare(what[0])
    assert sorted(p.name for p in train.iterdir() if not p.name.startswith(".")) == ["accuracy_vs_floats.png", "notes"]
    kept.drop()
    assert sorted(p.name for p in train.iterdir()) == ["accuracy_vs_floats.png", "notes"]


def _committed_sweep(root: Path) -> Path:
    folder = root / "results" / "sweeps" / "defense_sweep"
    (folder / "points" / "abc").mkdir(parents=True)
    (folder / "points" / "abc" / "metrics.json").write_text("{}")
    for name in ("results.jsonl", "summary.csv", "sweep.json"):
        (folder / name).write_text(f"committed {name}")
    (root / "examples").mkdir()
    return folder


@pytest.mark.parametrize("stop", ["fails", "interrupted"])
def test_a_sweep_step_that_fails_or_is_interrupted_puts_the_committed_results_back(tmp_path, monkeypatch, capsys,
                                                                                 stop):
    """The committed results.jsonl, points and summary were deleted before the sweep ran again: Ctrl-C left an
    empty results.jsonl and no summary, and the interrupt line said what had finished was kept."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    folder = _committed_sweep(tmp_path)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    monkeypatch.setattr(reproduce, "steps", lambda: {"sweeps": [("sweep:results/sweeps/defense_sweep", ["x"])]})

    def half_written(argv):
        assert not (folder / "results.jsonl").exists()  # the sweep starts afresh
        (folder / "results.jsonl").write_text("half")
        (folder / "points").mkdir()
        if stop == "interrupted":
            raise KeyboardInterrupt
        return 1

    monkeypatch.setattr(reproduce, "_call", half_written)
    assert cli.main(["reproduce", "sweeps"]) == (130 if stop == "interrupted" else 1)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["defense_sweep"]  # nothing left aside
    err = capsys.readouterr().err
    if stop == "fails":
        assert "the results it was regenerating are back in" in err
    else:  # the sweep's own lines say it kept its finished points and how to resume: reproduce says they went
        assert ("leakattack: reproduce stopped step 'sweeps'; what it had written is not kept, and the committed "
                "results are back in 'results/sweeps/defense_sweep' (`leakattack reproduce sweeps` runs it again "
                "from the start)") in err


def _reference(root: Path) -> Path:
    """A committed reference run's folder under ``root`` (a copy of the repository's) and the examples/ folder the
    command needs."""
    shutil.copytree(ROOT / "results" / "reference", root / "results" / "reference")
    (root / "examples").mkdir()
    return root / "results" / "reference"


@pytest.mark.parametrize("damage", ["config list", "metrics text", "metrics psnr"])
def test_a_damaged_committed_reference_is_one_sentence_before_any_step_runs(tmp_path, monkeypatch, capsys, damage):
    """A config.json holding a list ended in an AttributeError traceback; a psnr of "high" in a ValueError after the
    first run had rewritten its folder; a metrics.json that is not JSON read as "no committed run" and was replaced,
    exit code 0."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    ref = _reference(tmp_path)
    path = {"config list": ref / "lenet-srht" / "config.json", "metrics text": ref / "lenet-none" / "metrics.json",
            "metrics psnr": ref / "lenet-none" / "metrics.json"}[damage]
    if damage == "metrics psnr":
        path.write_text(json.dumps({**json.loads(path.read_text()), "psnr": "high"}))
    else:
        path.write_text("[1]" if damage == "config list" else "{corrupt")
    ran = []
    monkeypatch.setattr(reproduce, "_call", lambda argv: ran.append(argv) or 0)
    assert cli.main(["reproduce", "reference"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = {"config list": "holds a JSON list, not the object leakattack writes there",
            "metrics text": "is not JSON", "metrics psnr": 'holds psnr = "high", not a number'}[damage]
    assert err == [f"leakattack: error: '{path.relative_to(tmp_path)}' {said}"] and ran == []


@pytest.mark.parametrize("name", ["metrics.json", "config.json"])
def test_a_committed_reference_linked_to_nothing_is_one_sentence(tmp_path, monkeypatch, capsys, name):
    """A metrics.json that is a link to a missing file read as "no committed run": the step then stopped on `run
    --out`'s refusal of a folder that holds a run; a config.json linked to nothing was read as no machine record."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    ref = _reference(tmp_path)
    path = ref / "lenet-none" / name
    path.unlink()
    path.symlink_to("gone.json")
    ran = []
    monkeypatch.setattr(reproduce, "_call", lambda argv: ran.append(argv) or 0)
    assert cli.main(["reproduce", "reference"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"leakattack: error: '{path.relative_to(tmp_path)}' is a link to 'gone.json', which does not "
                   "exist"] and ran == []


def test_a_step_named_twice_runs_once(tmp_path, monkeypatch, capsys):
    """`reproduce reference reference` compared the second run with the first's output, labelled "committed"."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    _reference(tmp_path)
    ran = []
    monkeypatch.setattr(reproduce, "_call", lambda argv: ran.append(argv) or 0)
    assert cli.main(["reproduce", "reference", "reference"]) == 0
    assert len(ran) == 2  # its two runs, once
    assert "leakattack: warning: step reference named more than once runs once" in capsys.readouterr().err


def test_a_step_that_refuses_its_input_exits_2(tmp_path, monkeypatch, capsys):
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    _reference(tmp_path)
    monkeypatch.setattr(reproduce, "_call", lambda argv: 2)
    assert cli.main(["reproduce", "reference"]) == 2
    assert "step 'reference' failed (exit code 2)" in capsys.readouterr().err


def test_a_sweep_step_that_succeeds_leaves_only_its_new_results(tmp_path, monkeypatch):
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    folder = _committed_sweep(tmp_path)
    monkeypatch.setattr(reproduce, "steps", lambda: {"sweeps": [("sweep:results/sweeps/defense_sweep", ["x"])]})
    monkeypatch.setattr(reproduce, "_call", lambda argv: (folder / "results.jsonl").write_text("new") and 0)
    assert cli.main(["reproduce", "sweeps"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["results.jsonl"]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["defense_sweep"]


def test_an_interrupted_step_is_waited_for_while_it_stops_before_the_results_go_back(tmp_path, monkeypatch):
    """The step is sent SIGTERM and given time to stop, so nothing it runs writes once the committed results are back
    in place (the step's process was killed at once, its own workers left to run on)."""
    from leakattack.cli import reproduce

    monkeypatch.chdir(tmp_path)
    folder = _committed_sweep(tmp_path)
    before = (folder / "results.jsonl").read_bytes()
    step = tmp_path / "step.py"
    step.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        def stop(signum, frame):
            time.sleep(0.5)  # a sweep writing its last finished point
            open({str(folder / "results.jsonl")!r}, "a").write("last point")
            open({str(tmp_path / "stopped")!r}, "w").write(str(signum))
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        open({str(folder / "results.jsonl")!r}, "w").write("first point")
        os.kill(os.getppid(), signal.SIGINT)  # Ctrl-C at the command
        time.sleep(30)
    """))
    monkeypatch.setattr(reproduce, "steps", lambda: {
        "sweeps": [("sweep:results/sweeps/defense_sweep", [sys.executable, str(step)])]})
    assert cli.main(["reproduce", "sweeps"]) == 130
    assert (tmp_path / "stopped").read_text() == str(int(signal.SIGTERM))
    assert (folder / "results.jsonl").read_bytes() == before
