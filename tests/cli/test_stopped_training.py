"""Training stopped early (interrupted or diverged) keeps its finished rounds: protocol.json records them, the
last weights and the figure are written, and an attack on a round never reached says where training stopped."""

import json

import pytest
import torch

from leakattack import cli, training

TRAIN = ["train", "--protocol", "sketched", "--clients", "3", "--quiet", "--threads", "1"]
RUN = ["run", "--model", "lenet", "--dataset", "digits", "--iterations", "2", "--quiet", "--no-lpips",
       "--threads", "1", "--protocol", "sketched"]


def _interrupt_in_round(monkeypatch, stop: int) -> None:
    """Ctrl-C while round ``stop`` is evaluated."""
    calls = {"n": 0}
    evaluate = training.evaluate

    def interrupted(*args, **kw):
        calls["n"] += 1
        if calls["n"] == stop:
            raise KeyboardInterrupt
        return evaluate(*args, **kw)

    monkeypatch.setattr(training, "evaluate", interrupted)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A 50-round training interrupted in round 4, and the same training run to round 3."""
    out = tmp_path_factory.mktemp("stopped")
    with pytest.MonkeyPatch.context() as mp:
        _interrupt_in_round(mp, 4)
        rc = cli.main(TRAIN + ["--rounds", "50", "--out", str(out / "int")])
    assert cli.main(TRAIN + ["--rounds", "3", "--out", str(out / "full")]) == 0
    return rc, out / "int" / "sketched", out / "full" / "sketched"


def test_an_interrupted_training_records_the_rounds_it_finished(stopped, capsys):
    rc, folder, full = stopped
    assert rc == 130
    stored = json.loads((folder / "protocol.json").read_text())
    assert (stored["rounds"], stored["rounds_planned"], stored["stopped"]) == (3, 50, "interrupted")
    assert [json.loads(line)["round"] for line in (folder / "train.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert (folder.parent / "accuracy_vs_floats.png").stat().st_size > 0
    assert sorted(f.name for f in (folder / "checkpoints").iterdir()) == [f"round_{t:04d}.pt" for t in range(1, 5)]
    # w^4, the weights after the last finished round, are those of a training of 3 rounds
    assert torch.equal(torch.load(folder / "checkpoints" / "round_0004.pt"),
                       torch.load(full / "checkpoints" / "round_0004.pt"))
    assert training.stored_protocol(folder, "sketched")[2] == 3


def test_the_interrupt_says_in_one_line_which_rounds_are_kept(tmp_path, capsys, monkeypatch):
    _interrupt_in_round(monkeypatch, 2)
    assert cli.main(TRAIN + ["--rounds", "9", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training stopped after round 1 of 9" in err[0] and "keeps rounds 1..1" in err[0], err


def test_a_round_after_the_interruption_is_refused_saying_where_training_stopped(stopped, tmp_path, capsys):
    _, folder, _ = stopped
    out = tmp_path / "run"
    assert cli.main(RUN + ["--protocol-dir", str(folder), "--round", "20", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "round 20 does not exist: training stopped after round 3 of 50 (interrupted)" in err[0]
    assert "--checkpoint-every" not in err[0] and not out.exists()
    assert cli.main(RUN + ["--protocol-dir", str(folder), "--round", "3", "--out", str(out)]) == 0


def _unrecorded_stop(folder, dest):
    """A copy of the stopped training's folder whose protocol.json plans its 50 rounds and records no stop (a
    training killed outright, one written before stops were recorded, or one still running)."""
    import shutil

    shutil.copytree(folder, dest)
    stored = json.loads((dest / "protocol.json").read_text())
    for key in ("rounds_planned", "stopped"):
        del stored[key]
    (dest / "protocol.json").write_text(json.dumps({**stored, "rounds": 50}))
    return dest


def test_a_folder_written_before_stops_were_recorded_says_where_training_stopped(stopped, tmp_path, capsys):
    """A protocol.json that plans 50 rounds over a train.jsonl of 3: the missing checkpoint is not a matter of
    --checkpoint-every."""
    _, folder, _ = stopped
    old = _unrecorded_stop(folder, tmp_path / "old")
    assert cli.main(RUN + ["--protocol-dir", str(old), "--round", "20", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "round 20 does not exist: training stopped after round 3 without recording its stop" \
        in err[0] and "so round 20 was never finished (attack a round of 1..3)" in err[0], err
    # round 4, whose weights w^4 the interrupt wrote, was never finished either, as a run that recorded its stop says
    assert cli.main(RUN + ["--protocol-dir", str(old), "--round", "4", "--out", str(tmp_path / "run")]) == 2
    assert "so round 4 was never finished (attack a round of 1..3)" in capsys.readouterr().err
    assert cli.main(RUN + ["--protocol-dir", str(folder), "--round", "4", "--out", str(tmp_path / "run")]) == 2
    assert "round 4 does not exist: training stopped after round 3 of 50 (interrupted)" in capsys.readouterr().err


def test_a_round_a_running_training_has_not_finished_is_refused_saying_it_runs(stopped, tmp_path, capsys):
    """A later round of a training in progress read "training stopped after round N"."""
    from leakattack.sweep.lock import FolderLock
    from leakattack.training import TRAIN_LOCK

    _, folder, _ = stopped
    live = _unrecorded_stop(folder, tmp_path / "live")  # as a running training writes its protocol.json
    with FolderLock(live, TRAIN_LOCK, "training run"):  # held by this live process
        assert cli.main(RUN + ["--protocol-dir", str(live), "--round", "5", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "round 5 does not exist yet: a training is running in" in err and "has finished rounds 1..3 (attack a " \
        "round of 1..3, or wait for it)" in err


def test_an_interrupt_before_the_first_round_finished_keeps_no_round(tmp_path, capsys, monkeypatch):
    _interrupt_in_round(monkeypatch, 1)
    assert cli.main(TRAIN + ["--rounds", "5", "--out", str(tmp_path / "t")]) == 130
    folder = tmp_path / "t" / "sketched"
    stored = json.loads((folder / "protocol.json").read_text())
    assert (stored["rounds"], stored["stopped"]) == (0, "interrupted") and not (folder / "train.jsonl").exists()
    capsys.readouterr()
    assert cli.main(RUN + ["--protocol-dir", str(folder), "--out", str(tmp_path / "run")]) == 2
    assert "round 1 does not exist: training stopped before round 1 of 5 finished (interrupted)" in \
        capsys.readouterr().err


def test_a_diverged_training_records_the_rounds_before_it(tmp_path, capsys):
    rc = cli.main(["train", "--protocol", "fedavg", "--rounds", "5", "--clients", "2", "--local-lr", "1e38",
                   "--global-lr", "1e38", "--out", str(tmp_path), "--quiet", "--threads", "1"])
    assert rc == 2 and "training diverged in round" in capsys.readouterr().err
    stored = json.loads((tmp_path / "fedavg" / "protocol.json").read_text())
    assert stored["stopped"] == "diverged" and stored["rounds_planned"] == 5 and stored["rounds"] < 5
