"""`leakattack reproduce` names and prints the commands behind every committed reference result."""

from pathlib import Path

from leakattack import cli

ROOT = Path(__file__).resolve().parents[2]


def test_list_names_every_step(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("reference", "sweeps", "theory", "protocols"):
        assert out.count(name + ":") == 1


def test_dry_run_prints_commands_that_point_at_committed_inputs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("run --model lenet --sketch srht" in l and "results/reference/lenet-srht" in l for l in lines)
    for toml in ("defense_sweep", "phase_transition", "privacy_utility"):
        assert (ROOT / "examples" / f"{toml}.toml").exists()
        assert any(f"examples/{toml}.toml" in l for l in lines)
    for script in ("protocols_train.sh", "protocols_summarise.py", "protocols_attack_table.py"):
        assert (ROOT / "scripts" / script).exists()
        assert any(script in l for l in lines)


def test_unknown_step_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["reproduce", "everything"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leakattack: error: unknown reproduce step 'everything'; choose one of: reference, sweeps, theory, protocols"]


def test_outside_the_repository_root_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "reference"]) == 2
    assert "repository root" in capsys.readouterr().err
